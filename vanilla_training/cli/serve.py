"""Serve translation models over LibreTranslate's HTTP API, with a web page.

    vanilla-serve runs/demo
    vanilla-serve runs/en-de runs/en-fr --port 5000 --backend ctranslate2
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "In the beginning God created the heaven and the earth.", "source": "en", "target": "de"}'

Each MODEL is a run folder of `vanilla-train` (its final/), a saved or converted model folder, or a Hub id, and
serves one language pair: the pair its training recorded, or, for a model that records none (a converted OPUS-MT
model), the one given as MODEL:SOURCE-TARGET (e.g. opus-mt-en-de:en-de). The server binds to 127.0.0.1 unless
--host says otherwise, answers POST /translate, POST /detect, GET /languages, GET /health and GET /metrics, shows
a web page at / and the API's documentation at /docs. SIGTERM or Ctrl+C stops it taking requests, finishes those
in flight, and exits 0.
"""

import argparse
import json
import os
import re
import signal
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from ..serving.app import Settings
    from ..serving.backends import Backend

WORKER_ARGUMENTS = "VANILLA_SERVE_WORKER_ARGUMENTS"  # the command line, to each worker process (JSON)
PAIR = re.compile(r"^(?P<model>.+):(?P<source>[A-Za-z_]+)-(?P<target>[A-Za-z_]+)$")


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def limit(text: str) -> int:
    """An argparse type: an integer of at least 1, or -1 for no limit."""
    value = int(text)
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or -1: no limit), got {value}")
    return value


def non_negative(text: str) -> float:
    """An argparse type: a number of at least 0."""
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    from ..serving.backends import BACKENDS, BATCHING, PRECISIONS, QUANTIZATIONS

    parser = argparse.ArgumentParser(
        prog="vanilla-serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="a run folder, a model folder or a Hub id; MODEL:SRC-TGT for a model that records no languages",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface)",
    )
    parser.add_argument("--port", type=int, default=5000, help="port to listen on (default: 5000; 0: any free port)")
    parser.add_argument("--backend", choices=BACKENDS, default="torch", help="what runs the model (default: torch)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="torch backend: auto (default) is bf16 where the GPU or CPU computes bfloat16 natively, else fp32",
    )
    parser.add_argument(
        "--quantization", choices=QUANTIZATIONS, default="int8", help="ctranslate2 backend: weight type (default: int8)"
    )
    parser.add_argument(
        "--ct2-cache",
        type=Path,
        metavar="DIR",
        help="ctranslate2 backend: where models exported on the fly are "
        "kept (default: ~/.cache/vanilla-serve/ctranslate2)",
    )
    parser.add_argument(
        "--batching",
        choices=BATCHING,
        default="continuous",
        help="torch backend: continuous (default: sentences join the running batch and leave it at any decoding step) "
        "or batches (each batch decoded to its longest sentence, as vanilla-translate does)",
    )
    parser.add_argument("--beams", type=positive, metavar="N", help="beam size (default: the model's own)")
    parser.add_argument(
        "--api-keys",
        metavar="FILE",
        type=Path,
        help="require an API key: FILE holds the accepted keys, one a line (default: none needed)",
    )
    parser.add_argument(
        "--char-limit", type=limit, default=5000, metavar="N", help="characters per text (default: 5000; -1: no limit)"
    )
    parser.add_argument(
        "--batch-limit",
        type=limit,
        default=100,
        metavar="N",
        help="texts per request when q is a list (default: 100; -1: no limit)",
    )
    parser.add_argument(
        "--sentence-limit",
        type=positive,
        default=500,
        metavar="N",
        help="sentences per request, all texts together (default: 500)",
    )
    parser.add_argument(
        "--alternatives-limit",
        type=limit,
        default=3,
        metavar="N",
        help="most alternatives a request may ask for (default: 3; -1: no limit)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=positive,
        default=1_000_000,
        metavar="N",
        help="largest request body (default: 1000000); a larger one gets 413",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=non_negative,
        default=5.0,
        metavar="MS",
        help="a batch starts once no sentence has come for MS milliseconds (at most 10 x MS after the model is free; "
        "default: 5)",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive,
        default=4096,
        metavar="N",
        help="source tokens per batch, padding included (default: 4096)",
    )
    parser.add_argument(
        "--max-queue",
        type=positive,
        default=2048,
        metavar="N",
        help="sentences waiting at most; a request that does not fit gets 503 (default: 2048)",
    )
    parser.add_argument(
        "--cache-size",
        type=int,
        default=10_000,
        metavar="N",
        help="translations kept for repeated sentences, per model (default: 10000; 0: none)",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=non_negative,
        default=60.0,
        metavar="S",
        help="seconds given to requests in flight after SIGTERM (default: 60)",
    )
    parser.add_argument(
        "--workers",
        type=positive,
        default=1,
        metavar="N",
        help="server processes sharing the port, each with its own copy of the models, cache and queue, and 1/N of "
        "the CPU threads (default: 1); /metrics adds up all. On a CPU, the torch backend serves more with one worker "
        "a core: a process decodes on one thread at a time (docs/serving.md)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default: info)",
    )
    return parser


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys in `path`, one a line (blank lines and lines starting with # ignored)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.strip().startswith("#"))


def load_backend(model: str, args: argparse.Namespace) -> "Backend":
    """The backend serving MODEL (a run or model folder, a Hub id, or any of them as MODEL:SOURCE-TARGET);
    ValueError naming the model and the problem."""
    from ..serving.backends import CTranslate2Backend, TorchBackend
    from ..translator import load_translator

    named = PAIR.match(model) if not Path(model).exists() else None
    folder, source, target = (named["model"], named["source"], named["target"]) if named else (model, None, None)
    try:
        translator = load_translator(folder, source, target)
    except (ValueError, OSError) as error:  # LanguageMismatchError is a ValueError, FileNotFoundError an OSError
        raise ValueError(f"{model}: {error}") from None
    if translator.languages is None:
        raise ValueError(f"{model} records no languages: give them as {model}:SOURCE-TARGET (e.g. {model}:en-de)")
    if args.backend == "torch":
        backend = TorchBackend(translator, args.precision, args.beams, args.batching)
    else:
        backend = CTranslate2Backend(translator, args.quantization, args.ct2_cache, args.beams)
    print(f"{model}: {'-'.join(translator.languages)}, {backend.description}", file=sys.stderr, flush=True)
    return backend


def settings_of(args: argparse.Namespace, keys: frozenset[str]) -> "Settings":
    from ..serving.app import Settings

    return Settings(
        api_keys=keys,
        char_limit=args.char_limit,
        batch_limit=args.batch_limit,
        sentence_limit=args.sentence_limit,
        alternatives_limit=args.alternatives_limit,
        max_body_bytes=args.max_body_bytes,
        wait_ms=args.batch_wait_ms,
        max_tokens=args.max_tokens,
        max_queue=args.max_queue,
        cache_size=args.cache_size,
    )


def load_backends(args: argparse.Namespace) -> tuple[list["Backend"], ThreadPoolExecutor]:
    """The backends of every MODEL and the thread that loaded them, which is to run them too: OpenMP (torch's CPU
    threads) keeps a team of workers for each thread that has run parallel work, and once there are more of them
    than cores, every team's workers sleep between operations instead of spinning, which makes a decoder's many
    small operations several times slower. ValueError naming the model at fault."""
    model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
    try:
        return [model_thread.submit(load_backend, model, args).result() for model in args.models], model_thread
    except ValueError:
        model_thread.shutdown()
        raise


def worker_app() -> "FastAPI":
    """The app of one worker process of `vanilla-serve --workers N`: the command line comes from the parent in
    `WORKER_ARGUMENTS` (its checks passed there), the CPU threads in OMP_NUM_THREADS."""
    from transformers.utils import logging

    from ..serving.app import create_app

    logging.disable_progress_bar()  # the parent showed the loading once
    args = parser().parse_args(json.loads(os.environ[WORKER_ARGUMENTS]))
    keys = read_api_keys(args.api_keys) if args.api_keys is not None else frozenset()
    backends, model_thread = load_backends(args)
    return create_app(backends, settings_of(args, keys), model_thread)


def uvicorn_config(app: "FastAPI | str", args: argparse.Namespace, **options) -> "uvicorn.Config":
    """uvicorn's configuration for `app` (or the import string of its factory) with the command line's address,
    log level and graceful timeout."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=args.graceful_timeout,
        **options,
    )


def serve_in_workers(args: argparse.Namespace, argv: list[str]) -> int:
    """Runs `args.workers` processes of `worker_app` on one socket under uvicorn's supervisor, which restarts a
    worker that dies and, on SIGTERM, stops each gracefully; their metrics meet in a folder (prometheus_client's
    multiprocess mode). The exit status: 1 if a worker could not start, else 0."""
    import torch
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    from ..serving.metrics import MULTIPROCESS_FOLDER

    threads = max(1, torch.get_num_threads() // args.workers)
    with tempfile.TemporaryDirectory(prefix="vanilla-serve-metrics-") as metrics_folder:
        os.environ.update(
            {WORKER_ARGUMENTS: json.dumps(argv), "OMP_NUM_THREADS": str(threads), MULTIPROCESS_FOLDER: metrics_folder}
        )
        # libuv (uvloop's loop) accepts every connection waiting at once; with this, one at a time, yielding between
        # them, so that a burst of clients is shared out among the workers rather than taken by the first awake.
        os.environ.setdefault("UV_TCP_SINGLE_ACCEPT", "1")
        config = uvicorn_config(f"{__name__}:worker_app", args, factory=True, workers=args.workers)
        supervisor = Multiprocess(config, sockets=[config.bind_socket()])
        supervisor.run()
    return 1 if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes) else 0


def main(argv: list[str] | None = None) -> None:
    arguments = parser()
    argv = sys.argv[1:] if argv is None else argv
    args = arguments.parse_args(argv)
    if args.api_keys is not None and not args.api_keys.is_file():
        arguments.error(f"--api-keys {args.api_keys}: no such file")
    keys = read_api_keys(args.api_keys) if args.api_keys is not None else frozenset()
    if args.api_keys is not None and not keys:
        arguments.error(f"--api-keys {args.api_keys}: the file holds no key")

    import uvicorn

    from ..serving.app import create_app

    try:
        backends, model_thread = load_backends(args)
        app = create_app(backends, settings_of(args, keys), model_thread)
    except ValueError as error:
        arguments.error(str(error))
    if args.workers > 1:
        # The models loaded here were checked (and exported, for CTranslate2); each worker loads its own.
        model_thread.shutdown()
        del app, backends
        sys.exit(serve_in_workers(args, argv))
    server = uvicorn.Server(uvicorn_config(app, args))
    # uvicorn re-raises SIGTERM once it has shut down gracefully; this handler lets the process then exit 0
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    server.run()
    model_thread.shutdown()
    if not server.started:
        sys.exit(1)


if __name__ == "__main__":
    main()
