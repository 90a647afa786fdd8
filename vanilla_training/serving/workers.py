"""The server's processes and threads: models loaded on the thread that will run them, the app under uvicorn in
this process, or in `workers` processes sharing one socket (`serve`)."""

import dataclasses
import json
import os
import re
import signal
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .settings import ServeSettings

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from .backends import Backend

PATH_SETTINGS = tuple(field.name for field in dataclasses.fields(ServeSettings) if "Path" in str(field.type))
WORKER_MODELS = "VANILLA_SERVE_WORKER_MODELS"  # the models and settings, to each worker process (JSON)
PAIR = re.compile(r"^(?P<model>.+):(?P<source>[A-Za-z_]+)-(?P<target>[A-Za-z_]+)$")


def load_backend(model: str, settings: ServeSettings) -> "Backend":
    """The backend serving MODEL (a run or model folder, a Hub id, or any of them as MODEL:SOURCE-TARGET);
    ValueError naming the model and the problem."""
    from ..translator import load_translator
    from .backends import CTranslate2Backend, TorchBackend, fastest_backend

    named = PAIR.match(model) if not Path(model).exists() else None
    folder, source, target = (named["model"], named["source"], named["target"]) if named else (model, None, None)
    try:
        translator = load_translator(folder, source, target)
    except (ValueError, OSError) as error:  # LanguageMismatchError is a ValueError, FileNotFoundError an OSError
        raise ValueError(f"{model}: {error}") from None
    if not translator.directions:
        raise ValueError(f"{model} records no languages: give them as {model}:SOURCE-TARGET (e.g. {model}:en-de)")
    kind, quantization, reason = fastest_backend(settings.backend, settings.quantization)
    if kind == "torch":
        backend = TorchBackend(translator, settings.precision, settings.beams, settings.batching)
    else:
        backend = CTranslate2Backend(translator, quantization, settings.ct2_cache, settings.beams)
    languages = "-".join(translator.languages or ()) or f"any two of {', '.join(translator.all_languages)}"
    print(f"{model}: {languages}, {backend.description}{reason}", file=sys.stderr, flush=True)
    return backend


def load_backends(models: list[str], settings: ServeSettings) -> tuple[list["Backend"], ThreadPoolExecutor]:
    """The backends of every MODEL and the thread that loaded them, which is to run them too: OpenMP (torch's CPU
    threads) keeps a team of workers for each thread that has run parallel work, and once there are more of them
    than cores, every team's workers sleep between operations instead of spinning, which makes a decoder's many
    small operations several times slower. ValueError naming the model at fault."""
    model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
    try:
        return [model_thread.submit(load_backend, model, settings).result() for model in models], model_thread
    except ValueError:
        model_thread.shutdown()
        raise


def worker_app() -> "FastAPI":
    """The app of one worker process of `vanilla-serve --workers N`: the models and settings come from the parent
    in `WORKER_MODELS` (checked there), the CPU threads in OMP_NUM_THREADS."""
    from transformers.utils import logging

    from .app import create_app

    logging.disable_progress_bar()  # the parent showed the loading once
    models, fields = json.loads(os.environ[WORKER_MODELS])
    paths = {name: None if fields[name] is None else Path(fields[name]) for name in PATH_SETTINGS}
    settings = ServeSettings(**{**fields, "api_keys": frozenset(fields["api_keys"]), **paths})
    backends, model_thread = load_backends(models, settings)
    return create_app(backends, settings, model_thread)


def uvicorn_config(app: "FastAPI | str", settings: ServeSettings, **options) -> "uvicorn.Config":
    """uvicorn's configuration for `app` (or the import string of its factory) with the settings' address, log
    level and graceful timeout."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=settings.graceful_timeout,
        **options,
    )


def worker_environment(models: list[str], settings: ServeSettings, metrics_folder: str) -> dict[str, str]:
    """What each worker process finds in its environment: the models and settings, its share of the CPU threads,
    the folder where the workers' metrics meet."""
    import torch

    from .metrics import MULTIPROCESS_FOLDER

    fields = dataclasses.asdict(settings)
    paths = {name: None if fields[name] is None else str(fields[name]) for name in PATH_SETTINGS}
    fields = {**fields, "api_keys": sorted(settings.api_keys), **paths}
    threads = max(1, torch.get_num_threads() // settings.workers)
    return {
        WORKER_MODELS: json.dumps([models, fields]),
        "OMP_NUM_THREADS": str(threads),
        MULTIPROCESS_FOLDER: metrics_folder,
    }


def serve_in_workers(models: list[str], settings: ServeSettings) -> int:
    """Runs `settings.workers` processes of `worker_app` on one socket under uvicorn's supervisor, which restarts
    a worker that dies and, on SIGTERM, stops each gracefully; their metrics meet in a folder (prometheus_client's
    multiprocess mode). The exit status: 1 if a worker could not start, else 0."""
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    with tempfile.TemporaryDirectory(prefix="vanilla-serve-metrics-") as metrics_folder:
        os.environ.update(worker_environment(models, settings, metrics_folder))
        # libuv (uvloop's loop) accepts every connection waiting at once; with this, one at a time, yielding between
        # them, so that a burst of clients is shared out among the workers rather than taken by the first awake.
        os.environ.setdefault("UV_TCP_SINGLE_ACCEPT", "1")
        config = uvicorn_config(f"{__name__}:worker_app", settings, factory=True, workers=settings.workers)
        supervisor = Multiprocess(config, sockets=[config.bind_socket()])
        supervisor.run()
    return 1 if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes) else 0


def serve(models: list[str], settings: ServeSettings) -> int:
    """Serves `models` until SIGTERM or Ctrl+C, in this process or in `settings.workers`; the exit status (1 if
    the server could not start). ValueError naming a model that cannot be served."""
    import uvicorn

    from .app import create_app

    backends, model_thread = load_backends(models, settings)
    try:
        app = create_app(backends, settings, model_thread)
    except ValueError:
        model_thread.shutdown()
        raise
    if settings.workers > 1:
        # The models loaded here were checked (and exported, for CTranslate2); each worker loads its own.
        model_thread.shutdown()
        del app, backends
        return serve_in_workers(models, settings)
    server = uvicorn.Server(uvicorn_config(app, settings))
    # uvicorn re-raises SIGTERM once it has shut down gracefully; this handler lets the process then exit 0
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    server.run()
    model_thread.shutdown()
    return 0 if server.started else 1
