"""The rest of LibreTranslate's API, in its shapes: `/frontend/settings` (what LibreTranslate's web page and the
PHP and Kotlin clients read first), `/translate_file` and `/download_file` (documents, `files`), `/suggest` (403
unless `--suggestions`; kept in SQLite, `suggestions`), `/spec` (the OpenAPI document)."""

import asyncio
import mimetypes
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from ..corpus import language_name
from .files import (
    ARCHIVE_EXPANSION,
    FORMATS,
    Document,
    DocumentError,
    StoreFull,
    check_characters,
    read_document,
)
from .parsing import ApiError, TranslateCall, language_code, read_body, read_fields
from .routes import Served
from .schema import ERRORS, errors
from .service import client_departure

FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits after typing before translating
router = APIRouter()


@router.get("/frontend/settings", summary="What the web page needs to know of the server (LibreTranslate's fields)")
async def frontend_settings(served: Served):
    settings, files_on = served.settings, not served.settings.disable_files_translation
    target = sorted(target for _, target in served.pairs)[0]
    return {
        "charLimit": settings.char_limit,
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": bool(served.access.keys),
        "keyRequired": served.access.key_required,
        "suggestions": settings.suggestions,
        "filesTranslation": files_on,
        "supportedFilesFormat": list(FORMATS) if files_on else [],
        "language": {
            "source": {"code": "auto", "name": "Auto Detect"},
            "target": {"code": target, "name": language_name(target)},
        },
    }


async def file_fields(request: Request, limit: int) -> tuple[dict[str, Any], UploadFile]:
    """The form fields and the uploaded `file` of a multipart request; ApiError 413 over `limit` bytes, 400 for a
    body that is not a form or a form without a file."""
    request._body = await read_body(request, limit)  # read once, within the limit: the form parser reads it here
    try:
        form = await request.form()
    except Exception as error:  # not a form, or a malformed multipart body
        raise ApiError(400, f"Invalid request: the form cannot be read ({error})") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "Invalid request: missing file parameter")
    return {name: value for name, value in form.multi_items() if isinstance(value, str)}, upload


def file_languages(fields: dict[str, Any], served: Served) -> tuple[str, str]:
    """A file's source (a served code or `auto`) and target, checked."""
    source, target = language_code(fields.get("source")), language_code(fields.get("target"))
    for name, value in (("source", source), ("target", target)):
        if not value:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    if source != "auto" and source not in served.codes:
        raise ApiError(400, f"{source} is not supported")
    if target not in served.codes:
        raise ApiError(400, f"{target} is not supported")
    return source, target


def checked_document(filename: str, data: bytes, served: Served) -> Document:
    """The file's `Document` (on a thread: parsing takes time), once it is known to fit: its text within
    `--char-limit` (counted before it is parsed, and again after), unpacked within `ARCHIVE_EXPANSION` times
    `--max-body-bytes`, and room for it in the file store. ApiError 400 or 503 otherwise."""
    settings = served.settings
    try:
        served.files.check_room(len(data))
        document = read_document(filename, data, settings.char_limit, settings.max_body_bytes * ARCHIVE_EXPANSION)
        check_characters(sum(len(text) for text in document.texts), settings.char_limit)
    except StoreFull as error:
        raise ApiError(503, f"Slowdown: {error}", headers={"Retry-After": str(error.retry_after)}) from None
    except DocumentError as error:
        raise ApiError(400, f"Invalid request: {error}") from None
    return document


def stored_translation(filename: str, document: Document, translations: list[str], served: Served) -> str:
    """The translated file written and kept (on a thread); its name in the store. ApiError 503 where it does not
    fit."""
    try:
        return served.files.put(filename, document.write(translations))
    except StoreFull as error:
        raise ApiError(503, f"Slowdown: {error}", headers={"Retry-After": str(error.retry_after)}) from None


@router.post(
    "/translate_file",
    responses=ERRORS,
    summary="Translate a file (.txt, .html, .docx, .odt): answers its download URL",
)
async def translate_file(request: Request, served: Served):
    if served.settings.disable_files_translation:
        raise ApiError(403, "Files translation are disabled on this server.")
    fields, upload = await file_fields(request, served.settings.max_body_bytes)
    served.access.check_request(request, fields)
    if not upload.filename:
        raise ApiError(400, "Invalid request: empty file")
    source, target = file_languages(fields, served)
    document = await asyncio.to_thread(checked_document, upload.filename, await upload.read(), served)
    call = TranslateCall(document.texts, True, source, target, document.text_format, 0)
    gone = client_departure(request.receive)
    try:
        translations = (await served.translate(call, gone))[0] if document.texts else []
    finally:
        gone.cancel()
    stored = await asyncio.to_thread(stored_translation, upload.filename, document, translations, served)
    return {"translatedFileUrl": str(request.url_for("download_file", filename=stored))}


@router.get(
    "/download_file/{filename}", responses=errors(400, 404), summary="Download a translated file (kept 30 minutes)"
)
async def download_file(filename: str, served: Served):
    if served.settings.disable_files_translation:
        raise ApiError(400, "Files translation are disabled on this server.")
    try:
        name, data = served.files.get(filename)
    except ValueError:
        raise ApiError(400, "Invalid filename") from None
    except KeyError:
        raise ApiError(404, "No such file: translated files are kept for 30 minutes") from None
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(data, media_type=media_type, headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.post(
    "/suggest",
    responses=errors(400, 403, 413),
    summary="Suggest a better translation (403 unless the server accepts suggestions)",
)
async def suggest(request: Request, served: Served):
    if not served.settings.suggestions:
        raise ApiError(403, "Suggestions are disabled on this server.")
    fields, _ = await read_fields(request, served.settings.max_body_bytes)
    for name in ("q", "s", "source", "target"):
        if not isinstance(fields.get(name), str) or not fields[name]:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    source, target = language_code(fields["source"]), language_code(fields["target"])
    await asyncio.to_thread(served.suggestions.add, fields["q"], fields["s"], source, target)
    return {"success": True}


@router.get("/spec", summary="This API's OpenAPI document")
async def spec(request: Request):
    return JSONResponse(request.app.openapi())
