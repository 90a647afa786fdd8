"""The routes of LibreTranslate's API, thin: each reads its request (`parsing`), asks the `Service` on
`request.app.state.service` (`service` below, a FastAPI dependency) and answers. A new group of routes is an
`APIRouter` of its own module, included in `app.create_app`."""

import asyncio
from importlib.resources import files
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from .access import check_metrics_token
from .parsing import check_limits, parse_detect, parse_translate, read_fields
from .schema import (
    ERRORS,
    DetectedLanguage,
    DetectRequest,
    Language,
    TranslateRequest,
    TranslateResponse,
    body_schema,
    errors,
)
from .service import Service, client_departure


async def service(request: Request) -> Service:
    """The app's `Service` (a FastAPI dependency; async, so that FastAPI calls it on the event loop rather than
    handing each request to a worker thread for it)."""
    return request.app.state.service


Served = Annotated[Service, Depends(service)]
STATIC = files("vanilla_training.serving") / "static"  # the web page and its script
router = APIRouter()


@router.post(
    "/translate",
    response_model=TranslateResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    openapi_extra=body_schema(TranslateRequest),
    summary="Translate text from a language to another",
)
async def translate(request: Request):
    served: Service = request.app.state.service  # not a dependency: the busiest route skips FastAPI's solving
    fields, is_json = await read_fields(request, served.settings.max_body_bytes)
    served.access.check_request(request, fields)
    call = parse_translate(fields, is_json, served.settings, served.codes)
    gone = client_departure(request.receive)
    try:
        if call.glossary is not None:
            best, not_placed, detected = await served.translate_with_glossary(call, gone)
            others = []
        else:
            best, others, detected = await served.translate(call, gone)
    finally:
        gone.cancel()
    result: dict[str, Any] = {"translatedText": best if call.is_list else best[0]}
    if call.source == "auto":
        result["detectedLanguage"] = detected if call.is_list else detected[0]
    if call.alternatives > 0:
        result["alternatives"] = others if call.is_list else others[0]
    if call.glossary is not None:
        result["glossaryNotPlaced"] = not_placed if call.is_list else not_placed[0]
    source = detected[0]["language"] if call.source == "auto" and detected else call.source
    result.update(served.route(source, call.target))
    return JSONResponse(result)


@router.post(
    "/detect",
    response_model=list[DetectedLanguage],
    responses=errors(400, 403, 413, 429),
    openapi_extra=body_schema(DetectRequest),
    summary="Detect the language of a text (among all the detector knows, served or not), within --char-limit",
)
async def detect(request: Request, served: Served):
    fields, _ = await read_fields(request, served.settings.max_body_bytes)
    served.access.check_request(request, fields)
    text = parse_detect(fields, served.settings)
    check_limits([text], False, served.settings)  # --char-limit, before any work
    return JSONResponse(await asyncio.to_thread(served.detector.detect, text))


@router.get("/languages", response_model=list[Language], summary="The languages served and their targets")
async def languages(served: Served):
    return served.languages()


@router.get("/health", summary="Whether the server is up: 503 naming what has stopped otherwise")
async def health(served: Served):
    failures = served.failures()
    if failures:
        return JSONResponse({"status": "error", "error": "; ".join(failures)}, status_code=503)
    return {"status": "ok"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, responses=errors(401))
async def metrics(request: Request, served: Served):
    check_metrics_token(request.headers.get("authorization"), served.settings.metrics_auth_token)
    return Response(served.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index():
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))
