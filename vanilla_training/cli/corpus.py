"""Build the built-in parallel corpus of a language pair, or list the corpus's languages and versions.

vanilla-corpus --pair de-en                 # one version a side
vanilla-corpus --pair en-de --versions mixed  # and one train verse in 12 in the second free source version
vanilla-corpus --pair en-fr --versions all  # every free version of each side in train
vanilla-corpus --list-pairs
"""

import argparse
import json
import sys
from pathlib import Path

from ..corpus import SPLITS, VERSION_CHOICES, build_corpus, check_versions, list_pairs, parse_pair


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-corpus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pair", help="SRC-TGT by ISO 639-1 codes, e.g. de-en (default: en-de)")
    parser.add_argument(
        "--versions",
        choices=VERSION_CHOICES,
        help="train on the first free version of each side (one, default), that and one verse in 12 in the "
        "second free source version (mixed), or every free version pairing (all)",
    )
    parser.add_argument(
        "--list-pairs", action="store_true", help="list the languages, versions and their licences, then exit"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="data folder (default: $VANILLA_DATA_DIR or ~/.cache/vanilla-transformer/data)",
    )
    args = parser.parse_args(argv)
    if args.list_pairs:
        if args.pair or args.versions or args.out:
            parser.error(
                "--list-pairs lists every language and builds nothing: --pair, --versions and --out do not go with it"
            )
        print(list_pairs())
        return
    args.pair, args.versions = args.pair or "en-de", args.versions or "one"
    try:
        source, _ = parse_pair(args.pair)
    except ValueError as error:
        parser.error(str(error))
    try:
        check_versions(args.versions, source)
    except ValueError as error:
        parser.error(f"--versions: {error}")
    files = build_corpus(args.pair, args.out, versions=args.versions)
    sizes = json.loads((files["train"].parent / "stats.json").read_text(encoding="utf-8"))["sizes"]
    summary = ", ".join(f"{split} {sizes[split]:,}" for split in SPLITS)
    print(f"{args.pair} ({args.versions}): {summary} -> {files['train'].parent}")


if __name__ == "__main__":
    main(sys.argv[1:])
