"""The server: LibreTranslate's HTTP API (`/translate`, `/languages`, `/detect`, `/translate_file`,
`/download_file/{filename}`, `/suggest`, `/frontend/settings`, `/spec`, `/health`) over the models given, with
`/metrics` for Prometheus, the OpenAPI page at `/docs` and a web page at `/`.

Requests carry JSON or form fields as LibreTranslate's do, and errors answer LibreTranslate's shape
`{"error": "..."}`: 400 for a missing or invalid field, 401 for /metrics without its token, 403 for a wrong API key
or a disabled endpoint, 404 for a translated file that has expired, 413 for a body over the size limit, 429 over the
rate limit, 503 when the translation queue or the file store is full, 500 when the model fails. `create_app`
assembles the app: the routes (`routes` and `extra_routes`, thin), what they share (`service.Service`), how requests
are read (`parsing`) and the settings (`settings.ServeSettings`).
"""

import contextlib
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import extra_routes, routes
from .backends import Backend
from .metrics import Measure
from .parsing import ApiError
from .service import Service
from .settings import ServeSettings


async def api_error(request: Request, error: ApiError) -> JSONResponse:
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)


async def unexpected_error(request: Request, error: Exception) -> JSONResponse:
    """A 500, answered outside the CORS middleware (Starlette's outermost layer): with its header, for a page."""
    return JSONResponse(
        {"error": f"Internal error: {type(error).__name__}: {error}"},
        status_code=500,
        headers={"Access-Control-Allow-Origin": "*"},
    )


def create_app(
    backends: list[Backend], settings: ServeSettings | None = None, model_thread: ThreadPoolExecutor | None = None
) -> FastAPI:
    """The FastAPI app serving `backends` (each a language pair, or every direction of a multilingual model, and the
    pivots between them), translating on `model_thread` (a one-worker executor; the app's own if None): see
    `workers.load_backends` for why the thread that loaded the models should run them. ValueError for backends
    without languages or two of one direction."""
    service = Service(backends, settings or ServeSettings())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        executor = model_thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        service.start(executor)
        yield
        await service.close()
        if model_thread is None:
            executor.shutdown()

    app = FastAPIOffline(  # FastAPI, with its /docs page's scripts served from the package rather than a CDN
        redoc_url=None,
        title="vanilla-serve",
        description="A LibreTranslate-compatible translation server for vanilla Transformer models.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(Measure, metrics=service.metrics)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.include_router(routes.router)
    app.include_router(extra_routes.router)
    app.mount("/static", StaticFiles(directory=str(routes.STATIC)), name="static")
    return app
