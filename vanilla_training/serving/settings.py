"""Every setting of the server, declared once: `ServeSettings`, whose fields carry their `vanilla-serve` option,
help text and default. The command line is built from it (`add_options`, `settings_from`), and the app and the
batchers read it; a field is the option of the same name (`batch_wait_ms` is `--batch-wait-ms`). Every option can
also be set by an environment variable (`environment_names`): VANILLA_SERVE_ and the field's name in capitals
(`VANILLA_SERVE_BATCH_WAIT_MS`), or LibreTranslate's own name (`LT_CHAR_LIMIT`) where its option means the same;
the command line wins over the environment."""

import argparse
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modeling_vanilla import QUANTIZATIONS

from ..precision import PRECISIONS

BACKENDS = ("auto", "torch", "ctranslate2")
BATCHING = ("continuous", "batches")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
ENVIRONMENT_PREFIX = "VANILLA_SERVE_"
# The options LibreTranslate has with the same meaning, which its LT_ variables set too (LT_API_KEYS is not among
# them: LibreTranslate's turns its key database on, ours names a file of keys).
LIBRETRANSLATE_OPTIONS = frozenset(
    {
        "host",
        "port",
        "char_limit",
        "req_limit",
        "req_limit_storage",
        "batch_limit",
        "alternatives_limit",
        "metrics_auth_token",
        "suggestions",
        "disable_files_translation",
        "require_api_key_origin",
        "under_attack",
    }
)
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


def positive(text: str) -> int:
    """An option's type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def limit(text: str) -> int:
    """An option's type: an integer of at least 1, or -1 for no limit."""
    value = int(text)
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or -1: no limit), got {value}")
    return value


def non_negative(text: str) -> float:
    """An option's type: a number of at least 0."""
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def key_file(text: str) -> frozenset[str]:
    """An option's type: the keys in the file `text`, one a line (blank lines and lines starting with # ignored)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    keys = frozenset(line for line in lines if line and not line.startswith("#"))
    if not keys:
        raise argparse.ArgumentTypeError(f"{text}: the file holds no key")
    for line in keys:
        try:
            key_and_limit(line)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{text}: {error}") from None
    return keys


def key_and_limit(line: str) -> tuple[str, int]:
    """A line of the --api-keys file, `KEY` or `KEY N`, as the key and its requests a minute (-1: no limit)."""
    key, *limit = line.split()
    if len(limit) > 1 or (limit and not limit[0].isdigit()):
        raise ValueError(f"a key's line is `KEY` or `KEY REQUESTS_A_MINUTE`, not {line!r}")
    return key, int(limit[0]) if limit else -1


def option(
    help: str,
    default: Any,
    *,
    type: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    shown: str | None = None,
) -> Any:
    """A `ServeSettings` field offered as an option: its `--help` text (the default is added, as `shown` if
    given), the option's argparse `type`, `metavar` and `choices`."""
    metadata = {"help": help, "type": type, "metavar": metavar, "choices": choices, "shown": shown}
    factory = {"default_factory": lambda: default} if isinstance(default, (frozenset, list)) else {"default": default}
    return dataclasses.field(metadata=metadata, **factory)


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """The server's settings; each field is the `vanilla-serve` option of the same name."""

    host: str = option("address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)", "127.0.0.1")
    port: int = option("port to listen on (0: any free port)", 5000, type=int)
    backend: str = option(
        "what runs the model: auto is ctranslate2 where it is installed (the fastest on a CPU), else torch",
        "auto",
        choices=BACKENDS,
    )
    precision: str = option(
        "torch backend: auto is bf16 where the GPU or CPU computes bfloat16 natively, else fp32",
        "auto",
        choices=("auto", *PRECISIONS),
    )
    quantization: str = option(
        "ctranslate2 backend: weight type; auto is int8 where the CPU computes int8 natively (VNNI or AMX), else "
        "float32 (int8 is the slower without them)",
        "auto",
        choices=("auto", *QUANTIZATIONS),
    )
    ct2_cache: Path | None = option(
        "ctranslate2 backend: where models exported on the fly are kept",
        None,
        type=Path,
        metavar="DIR",
        shown="~/.cache/vanilla-serve/ctranslate2",
    )
    batching: str = option(
        "torch backend: continuous (sentences join the running batch and leave it at any decoding step) or batches "
        "(each batch decoded to its longest sentence, as vanilla-translate does)",
        "continuous",
        choices=BATCHING,
    )
    beams: int | None = option("beam size", None, type=positive, metavar="N", shown="the model's own")
    allow_zero_shot: bool = option(
        "a multilingual model translates a direction it did not train, and that no pivot through its trained "
        "directions reaches, zero-shot (such a request gets 400 naming the direction otherwise)",
        False,
    )
    api_keys: frozenset[str] = option(
        "API keys, FILE holding one a line: `KEY`, or `KEY N` for a key with its own limit of N requests a minute "
        "(a bare key has none). As in LibreTranslate a key is optional and raises its client's limit; it is needed "
        "only with --require-api-key-origin or --under-attack; a wrong key gets 403",
        frozenset(),
        type=key_file,
        metavar="FILE",
        shown="no keys",
    )
    req_limit: int = option(
        "requests a minute to /translate, /detect and /translate_file from one client without a key, by IP address, "
        "in a moving window; one over it gets 429 with Retry-After (-1: no limit)",
        -1,
        type=limit,
        metavar="N",
    )
    req_limit_storage: str = option(
        "where --req-limit and the keys' limits are counted: memory:// (this process) or a storage URI of the limits "
        "library shared by replicas, e.g. redis://HOST:6379 (as LibreTranslate's)",
        "memory://",
        metavar="URI",
    )
    require_api_key_origin: str = option(
        "with --api-keys: a request needs a key unless its Origin header matches this regular expression (your "
        "own web page's origin)",
        "",
        metavar="REGEX",
        shown="none",
    )
    under_attack: bool = option(
        "with --api-keys: every request to /translate, /detect, /translate_file needs a key", False
    )
    suggestions: bool = option("accept POST /suggest, keeping each suggestion in --suggestions-db", False)
    suggestions_db: Path = option(
        "with --suggestions: the SQLite file that keeps them, in LibreTranslate's table suggestions (q, s, source, "
        "target); made with its folder where missing",
        Path("db/suggestions.db"),
        type=Path,
        metavar="FILE",
    )
    disable_files_translation: bool = option("refuse /translate_file and /download_file", False)
    file_store_bytes: int = option(
        "bytes of translated files kept for /download_file (each 30 minutes), all together: a file that would not "
        "fit gets 503 with Retry-After, the seconds until the oldest expires",
        1_000_000_000,
        type=positive,
        metavar="N",
    )
    metrics_auth_token: str = option(
        "/metrics answers only requests carrying `Authorization: Bearer TOKEN` (401 otherwise)",
        "",
        metavar="TOKEN",
        shown="none: /metrics is open",
    )
    char_limit: int = option("characters per request, all texts together (-1: no limit)", 5000, type=limit, metavar="N")
    batch_limit: int = option("texts per request when q is a list (-1: no limit)", 100, type=limit, metavar="N")
    sentence_limit: int = option("sentences per request, all texts together", 500, type=positive, metavar="N")
    alternatives_limit: int = option(
        "most alternatives a request may ask for (-1: no limit)", 3, type=limit, metavar="N"
    )
    max_glossary_terms: int = option(
        "most terms of a /translate request's glossary; their characters count toward --char-limit",
        100,
        type=positive,
        metavar="N",
    )
    max_body_bytes: int = option("largest request body; a larger one gets 413", 1_000_000, type=positive, metavar="N")
    batch_wait_ms: float = option(
        "batch by batch: a lane freed by a batch that answered several requests waits until their clients are back, "
        "no sentence has come for MS milliseconds, or 10 x MS (a request finding the model idle starts at once)",
        5.0,
        type=non_negative,
        metavar="MS",
    )
    max_tokens: int = option(
        "source tokens per batch, padding included (with continuous batching, the running batch: a sentence that "
        "joins it takes as long as it needs steps of the whole batch, so a smaller one answers short requests "
        "sooner beside long ones)",
        1024,
        type=positive,
        metavar="N",
    )
    max_queue: int = option(
        "sentences waiting at most; a request that does not fit gets 503", 2048, type=positive, metavar="N"
    )
    cache_size: int = option(
        "translations kept for repeated sentences, per model (0: none)", 10_000, type=int, metavar="N"
    )
    graceful_timeout: float = option(
        "seconds given to requests in flight after SIGTERM", 60.0, type=non_negative, metavar="S"
    )
    workers: int = option(
        "server processes sharing the port, each with its own copy of the models, cache and queue, and 1/N of the "
        "CPU threads; /metrics adds up all. On a CPU, the torch backend serves more with one worker a core: a "
        "process decodes on one thread at a time (docs/serving.md)",
        1,
        type=positive,
        metavar="N",
    )
    log_level: str = option("uvicorn's log level", "info", choices=LOG_LEVELS)


def option_name(field: dataclasses.Field) -> str:
    return "--" + field.name.replace("_", "-")


def environment_names(field: dataclasses.Field) -> list[str]:
    """The environment variables that set a field, the first found winning: VANILLA_SERVE_NAME, then LibreTranslate's
    LT_NAME where its option means the same."""
    names = [ENVIRONMENT_PREFIX + field.name.upper()]
    return names + ["LT_" + field.name.upper()] if field.name in LIBRETRANSLATE_OPTIONS else names


def environment_value(field: dataclasses.Field, text: str, default: Any) -> Any:
    """An environment variable's `text` as the value of `field` (whose default is `default`); ValueError or
    argparse.ArgumentTypeError saying what is wrong."""
    meta = field.metadata
    if isinstance(default, bool):
        if text.strip().lower() not in TRUE + FALSE:
            raise ValueError(f"expected one of {', '.join(TRUE + FALSE[:-1])}")
        return text.strip().lower() in TRUE
    if meta["choices"] is not None and text not in meta["choices"]:
        raise ValueError(f"expected one of {', '.join(meta['choices'])}")
    return meta["type"](text) if meta["type"] is not None else text


def add_options(parser: argparse.ArgumentParser, environ: dict[str, str] | None = None) -> None:
    """Adds an option for each field of `ServeSettings` to `parser`, with the field's default, or the value of its
    environment variable (`environment_names`) in `environ` (os.environ if None): one that is wrong is a command-line
    error naming the variable."""
    environ = os.environ if environ is None else environ
    defaults = ServeSettings()
    for field in dataclasses.fields(ServeSettings):
        meta = field.metadata
        default = getattr(defaults, field.name)
        name = next((name for name in environment_names(field) if name in environ), None)
        if name is not None:
            try:
                default = environment_value(field, environ[name], default)
            except (ValueError, argparse.ArgumentTypeError) as error:
                parser.error(f"{name}={environ[name]!r}: {error}")
        shown = meta["shown"] or (f"{default:,}" if isinstance(default, int) and default > 9999 else default)
        shown = f"{shown}; {', '.join(environment_names(field))}"
        extra = {key: meta[key] for key in ("type", "metavar", "choices") if meta[key] is not None}
        if isinstance(default, bool):  # a flag: given, it is True
            extra = {"action": "store_true"}
        parser.add_argument(
            option_name(field), dest=field.name, default=default, help=f"{meta['help']} (default: {shown})", **extra
        )


def settings_from(args: argparse.Namespace) -> ServeSettings:
    """The settings that `args` (parsed by a parser given `add_options`) hold."""
    return ServeSettings(**{field.name: getattr(args, field.name) for field in dataclasses.fields(ServeSettings)})
