"""Serve translation models over LibreTranslate's HTTP API, with a web page.

    vanilla-serve runs/demo
    vanilla-serve runs/en-de runs/en-fr --port 5000 --backend ctranslate2
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "In the beginning God created the heaven and the earth.", "source": "en", "target": "de"}'

Each MODEL is a run folder of `vanilla-train` (its final/), a saved or converted model folder, or a Hub id, and
serves one language pair: the pair its training recorded, or, for a model that records none (a converted OPUS-MT
model), the one given as MODEL:SOURCE-TARGET (e.g. opus-mt-en-de:en-de); a multilingual model serves every direction
between its languages that it trained. A direction no model translates but two trained ones do through a shared
language (English first), in one model or two, is served by translating twice (a pivot); a direction a multilingual
model did not train that no pivot reaches, zero-shot with --allow-zero-shot. The server binds to 127.0.0.1 unless
--host says otherwise, answers LibreTranslate's endpoints (POST /translate, POST /detect, GET /languages, POST
/translate_file, GET /download_file/{filename}, POST /suggest, GET /frontend/settings, GET /spec), GET /health and
GET /metrics, shows a web page at / and the API's documentation at /docs. SIGTERM or Ctrl+C stops it taking
requests, finishes those in flight, and exits 0.
"""

import argparse
import sys


def parser(environ: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The command line: the models, and an option for each field of `serving.settings.ServeSettings`, whose
    default an environment variable may set (in `environ`; os.environ if None)."""
    from ..serving.settings import add_options

    parser = argparse.ArgumentParser(
        prog="vanilla-serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="a run folder, a model folder or a Hub id; MODEL:SRC-TGT for a model that records no languages",
    )
    add_options(parser, environ)
    return parser


def main(argv: list[str] | None = None) -> None:
    # Imported here, not above: the sentence splitter's process starts by importing the main module (this one, or
    # the console script that imports it), and should not load torch with it.
    from ..serving.settings import settings_from
    from ..serving.workers import serve

    arguments = parser()
    args = arguments.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        status = serve(args.models, settings_from(args))
    except ValueError as error:
        arguments.error(str(error))
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
