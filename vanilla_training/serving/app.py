"""The server: LibreTranslate's HTTP API (`/translate`, `/languages`, `/detect`, `/health`) over the models given,
with `/metrics` for Prometheus, the OpenAPI page at `/docs` and a web page at `/`.

Requests carry JSON or form fields as LibreTranslate's do, and errors answer LibreTranslate's shape
`{"error": "..."}`: 400 for a missing or invalid field, 403 for a wrong API key, 413 for a body over the size
limit, 503 when the translation queue is full, 500 when the model fails. Texts are split into sentences
(`paragraphs`), the sentences of all requests batched together (`batcher`), and the translations put back
with the input's own spacing and line breaks.
"""

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .backends import Backend
from .batcher import Batcher, QueueFull
from .detect import Detector
from .documents import layout, layout_sentences, translated_versions
from .metrics import Metrics

LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "et": "Estonian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "no": "Norwegian", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
DISCONNECT_POLL_SECONDS = 0.05
DRAIN_FACTOR = 8  # a body over the size limit is read (and dropped) up to this many times the limit
LINE_END = re.compile(r"\r\n?")
ENDPOINTS = ("/translate", "/detect", "/languages", "/health", "/metrics", "/")


@dataclasses.dataclass
class Settings:
    """The server's limits and knobs (see `vanilla-serve --help`)."""

    api_keys: frozenset[str] = frozenset()
    char_limit: int = 5000  # characters per text; -1: none
    batch_limit: int = 100  # texts per request (q as a list); -1: none
    sentence_limit: int = 500  # sentences per request, all texts together
    alternatives_limit: int = 3
    max_body_bytes: int = 1_000_000
    wait_ms: float = 5.0
    max_tokens: int = 4096
    max_queue: int = 2048
    cache_size: int = 10_000


class ApiError(Exception):
    """An answer `{"error": message}` with an HTTP status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class ErrorResponse(BaseModel):
    error: str = Field(description="What was wrong with the request, or why it could not be answered")


class TranslateRequest(BaseModel):
    """The fields of POST /translate, as JSON or as form fields (application/x-www-form-urlencoded or
    multipart/form-data)."""

    q: str | list[str] = Field(
        description="The text to translate, or a list of texts (answered by a list in the same order). A text may "
        "hold several sentences and lines: it is split into sentences and rejoined with its own spacing.",
        examples=["In the beginning God created the heaven and the earth."],
    )
    source: str = Field(description="The language of q (a code from GET /languages), or `auto` to detect it")
    target: str = Field(description="The language to translate into (a code from GET /languages)")
    format: str = Field(
        "text",
        description="`text` (plain text) or `html` (the markup is kept; the text between tags is translated)",
    )
    alternatives: int = Field(
        0, description="How many other translations to give beside the best one (n-best from the beam search)"
    )
    api_key: str | None = Field(None, description="An API key; needed only where the server was given keys")


class DetectedLanguage(BaseModel):
    confidence: float = Field(description="How sure the detector is, from 0 to 100")
    language: str = Field(description="The language code")


class TranslateResponse(BaseModel):
    translatedText: str | list[str] = Field(description="The translation (a list for a list of texts)")
    alternatives: list[str] | list[list[str]] | None = Field(
        None, description="Other translations, best first (only when asked for; a list per text for a list)"
    )
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(
        None, description="The detected source language (only for source `auto`)"
    )


class DetectRequest(BaseModel):
    q: str = Field(description="The text whose language to detect")
    api_key: str | None = Field(None, description="An API key; needed only where the server was given keys")


class Language(BaseModel):
    code: str = Field(description="Language code")
    name: str = Field(description="Human-readable language name (in English)")
    targets: list[str] = Field(description="The codes of the languages it translates into")


def body_schema(model: type[BaseModel]) -> dict:
    """The OpenAPI request body of an endpoint that reads `model`'s fields as JSON or as form fields."""
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {
                kind: {"schema": schema}
                for kind in ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")
            },
        }
    }


ERRORS = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "Invalid request (a missing or invalid field, an unsupported language, a text over a limit)",
        403: "Wrong API key",
        413: "Request body over the size limit",
        500: "Translation error",
        503: "The translation queue is full: try again shortly",
    }.items()
}


class Measure:
    """ASGI middleware counting the HTTP requests by endpoint and status, and timing them. A request is counted
    before the last part of its answer is sent, so a client that has its answer finds it in /metrics."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status, counted = time.monotonic(), 500, False
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

        def count() -> None:
            nonlocal counted
            counted = True
            self.metrics.latency.labels(endpoint).observe(time.monotonic() - started)
            self.metrics.requests.labels(endpoint, str(status)).inc()
            if status >= 400:
                self.metrics.errors.labels(endpoint, str(status)).inc()

        async def send_and_count(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                count()
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            if not counted:  # the app failed before answering, or its answer was cut off
                count()


@dataclasses.dataclass
class Pair:
    """A served model: its backend, its batcher and its languages."""

    backend: Backend
    source: str
    target: str
    batcher: Batcher | None = None


async def read_fields(request: Request, limit: int) -> tuple[dict[str, Any], bool]:
    """The request's fields and whether they came as JSON: its JSON object, or its form fields and query
    parameters (as LibreTranslate reads them). ApiError 413 for a body over `limit` bytes, 400 for a body that is
    not UTF-8 or not a JSON object."""
    body, size = bytearray(), 0
    async for chunk in request.stream():  # a body over the limit is read on and dropped, up to a point, so that
        size += len(chunk)  # the client, still sending, gets the answer rather than a broken connection
        if size > limit * DRAIN_FACTOR:
            break
        if size <= limit:
            body += chunk
    if size > limit:
        declared = request.headers.get("content-length", "")
        shown = f"{int(declared):,} bytes, " if declared.isdigit() else ""
        raise ApiError(413, f"Request body too large: {shown}over the limit of {limit:,} bytes")
    body = bytes(body)
    request._body = body  # read once: the form parser reads it from here
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            fields = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ApiError(
                400, f"Invalid request: the body is not UTF-8 ({error.reason} at byte {error.start})"
            ) from None
        except json.JSONDecodeError as error:
            raise ApiError(
                400, f"Invalid JSON format: {error.msg} at line {error.lineno} column {error.colno}"
            ) from None
        if not isinstance(fields, dict):
            raise ApiError(400, "Invalid JSON format")
        return fields, True
    fields: dict[str, Any] = dict(request.query_params)
    if body:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ApiError(
                400, f"Invalid request: the body is not UTF-8 ({error.reason} at byte {error.start})"
            ) from None
        try:
            form = await request.form()
        except Exception as error:  # a malformed multipart body
            raise ApiError(400, f"Invalid request: the form cannot be read ({error})") from None
        for name, value in form.multi_items():
            if isinstance(value, str):
                fields[name] = value
    return fields, False


def create_app(
    backends: list[Backend], settings: Settings | None = None, model_thread: ThreadPoolExecutor | None = None
) -> FastAPI:
    """The FastAPI app serving `backends` (one per language pair), translating on `model_thread` (a one-worker
    executor; the app's own if None): see `cli.serve.main` for why the thread that loaded the models should run
    them."""
    settings = settings or Settings()
    pairs: dict[tuple[str, str], Pair] = {}
    for backend in backends:
        if backend.translator.languages is None:
            raise ValueError(f"{backend.translator.folder} records no languages: give its source and target language")
        source, target = backend.translator.languages
        if (source, target) in pairs:
            raise ValueError(f"two models translate {source}-{target}")
        pairs[(source, target)] = Pair(backend, source, target)
    codes = sorted({code for pair in pairs for code in pair})
    sources = {source for source, _ in pairs}
    detector = Detector(codes)
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        executor = model_thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        lane_executors = []
        for (source, target), pair in pairs.items():
            lanes = pair.backend.lanes
            if lanes > 1:
                lane_executors.append(ThreadPoolExecutor(max_workers=lanes, thread_name_prefix=f"{source}-{target}"))
            pair.batcher = Batcher(
                pair.backend.translate,
                pair.backend.translator.token_counts,
                lane_executors[-1] if lanes > 1 else executor,
                name=f"{source}-{target}",
                wait_ms=settings.wait_ms,
                max_tokens=settings.max_tokens,
                max_queue=settings.max_queue,
                cache_size=settings.cache_size,
                metrics=metrics,
                decoder=pair.backend.decoder,
                lanes=lanes,
                batch_sentences=pair.backend.batch_sentences,
            )
            pair.batcher.start()
        yield
        for pair in pairs.values():
            await pair.batcher.close()
        for lane_executor in lane_executors:
            lane_executor.shutdown()
        if model_thread is None:
            executor.shutdown()

    app = FastAPIOffline(  # FastAPI, with its /docs page's scripts served from the package rather than a CDN
        redoc_url=None,
        title="vanilla-serve",
        description="A LibreTranslate-compatible translation server for vanilla Transformer models.",
        lifespan=lifespan,
    )
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(Measure, metrics=metrics)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception):
        return JSONResponse({"error": f"Internal error: {type(error).__name__}: {error}"}, status_code=500)

    def check_api_key(fields: dict[str, Any]) -> None:
        """LibreTranslate's check where keys are required: none given is 400, a wrong one 403."""
        if not settings.api_keys:
            return
        key = fields.get("api_key")
        if not key:
            raise ApiError(400, "Please contact the server operator to get an API key")
        if not isinstance(key, str) or key not in settings.api_keys:
            raise ApiError(403, "Invalid API key")

    def language_name(code: str) -> str:
        return LANGUAGE_NAMES.get(code, code)

    async def translate_texts(
        request: Request, pair: Pair, texts: list[str], text_format: str, hypotheses: int
    ) -> tuple[list[str], list[list[str]]]:
        """Each text's best translation and its alternatives (`documents.translated_versions`)."""
        layouts = [layout(text, text_format, pair.source, pair.backend.translator.fits) for text in texts]
        counts = [len(layout_sentences(parts)) for parts in layouts]
        if sum(counts) > settings.sentence_limit:
            raise ApiError(
                400,
                f"Invalid request: request ({sum(counts):,} sentences) exceeds sentence limit "
                f"({settings.sentence_limit:,})",
            )
        work = asyncio.ensure_future(
            pair.batcher.translate([s for parts in layouts for s in layout_sentences(parts)], hypotheses)
        )
        try:
            while not work.done():  # a client that has gone takes its sentences out of the queue
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_SECONDS)
                if not work.done() and await request.is_disconnected():
                    raise ApiError(499, "Client closed the request")
            results = work.result()
        except QueueFull as error:
            raise ApiError(503, f"Slowdown: {error}", headers={"Retry-After": "1"}) from error
        except ApiError:
            raise
        except Exception as error:
            raise ApiError(500, f"Cannot translate text: {error}") from error
        finally:
            work.cancel()
        best, alternatives, start = [], [], 0
        for parts, count in zip(layouts, counts, strict=True):
            text, others = translated_versions(parts, results[start : start + count], text_format)
            start += count
            best.append(text)
            alternatives.append(others)
        return best, alternatives

    @app.post(
        "/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        responses=ERRORS,
        openapi_extra=body_schema(TranslateRequest),
        summary="Translate text from a language to another",
    )
    async def translate(request: Request):
        fields, is_json = await read_fields(request, settings.max_body_bytes)
        check_api_key(fields)
        q, source, target = fields.get("q"), fields.get("source"), fields.get("target")
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise ApiError(400, f"Invalid request: missing {name} parameter")
        if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(text, str) for text in q))):
            raise ApiError(400, "Invalid request: q parameter must be a string or a list of strings")
        alternatives = fields.get("alternatives", 0)
        try:
            if isinstance(alternatives, bool) or alternatives is None:
                raise ValueError
            alternatives = max(0, int(alternatives))  # as LibreTranslate: 2.7 is 2
        except (TypeError, ValueError, OverflowError):
            raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
        if settings.alternatives_limit != -1 and alternatives > settings.alternatives_limit:
            raise ApiError(400, f"Invalid request: alternatives parameter must be <= {settings.alternatives_limit}")
        is_list = isinstance(q, list)
        texts = q if is_list else [q if is_json else LINE_END.sub("\n", q)]  # a form's line ends: \n
        if is_list and settings.batch_limit != -1 and len(texts) > settings.batch_limit:
            raise ApiError(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({settings.batch_limit})")
        for text in texts:
            if settings.char_limit != -1 and len(text) > settings.char_limit:
                raise ApiError(
                    400, f"Invalid request: request ({len(text)}) exceeds text limit ({settings.char_limit})"
                )
        if not isinstance(source, str) or (source != "auto" and source not in codes):
            raise ApiError(400, f"{source} is not supported")
        if not isinstance(target, str) or target not in codes:
            raise ApiError(400, f"{target} is not supported")
        text_format = fields.get("format") or "text"
        if text_format not in ("text", "html"):
            raise ApiError(400, f"{text_format} format is not supported")
        detected = None
        if source == "auto":
            candidates = {code for code in sources if (code, target) in pairs}
            detected = detector.detect("\n".join(texts), among=candidates or sources)[0]
            source = detected["language"]
        pair = pairs.get((source, target))
        if pair is None:
            raise ApiError(
                400,
                f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source)} ({source})",
            )
        hypotheses = 1 if text_format == "html" else alternatives + 1  # as LibreTranslate: none for HTML
        best, others = await translate_texts(request, pair, texts, text_format, hypotheses)
        result: dict[str, Any] = {"translatedText": best if is_list else best[0]}
        if detected is not None:
            result["detectedLanguage"] = [detected] * len(texts) if is_list else detected
        if alternatives > 0:
            result["alternatives"] = others if is_list else others[0]
        return JSONResponse(result)

    @app.post(
        "/detect",
        response_model=list[DetectedLanguage],
        responses=ERRORS,
        openapi_extra=body_schema(DetectRequest),
        summary="Detect the language of a text (among the languages served)",
    )
    async def detect(request: Request):
        fields, _ = await read_fields(request, settings.max_body_bytes)
        check_api_key(fields)
        q = fields.get("q")
        if not q:
            raise ApiError(400, "Invalid request: missing q parameter")
        if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(text, str) for text in q))):
            raise ApiError(400, "Invalid request: q parameter must be a string or a list of strings")
        return JSONResponse(detector.detect(q if isinstance(q, str) else "\n".join(q)))

    @app.get("/languages", response_model=list[Language], summary="The languages served and their targets")
    async def languages():
        return [
            {"code": code, "name": language_name(code), "targets": sorted(t for s, t in pairs if s == code)}
            for code in codes
        ]

    @app.get("/health", summary="Whether the server is up")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus_metrics():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    static = files("vanilla_training.serving") / "static"

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    return app
