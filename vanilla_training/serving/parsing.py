"""A request's fields read and checked as LibreTranslate reads them: plain functions from the fields to what the
routes act on, raising `ApiError` (LibreTranslate's `{"error": ...}` with its status) for what is wrong."""

import dataclasses
import json
import re
import urllib.parse
from typing import Any

from fastapi import Request

from ..glossary import GlossaryError, glossary_terms
from .settings import ServeSettings

DRAIN_FACTOR = 8  # a body over the size limit is read (and dropped) up to this many times the limit
LINE_END = re.compile(r"\r\n?")
FORMATS = ("text", "html")
# LibreTranslate's tags for Brazilian Portuguese and the two Chinese scripts, read as it reads them: Simplified
# Chinese is zh and Traditional Chinese zt (its own code: never served by a zh model), Brazilian Portuguese pt.
ALIASES = {"pb": "pt", "pt-br": "pt", "zh-hans": "zh", "zh-hant": "zt"}


class ApiError(Exception):
    """An answer `{"error": message}` with an HTTP status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclasses.dataclass(frozen=True)
class TranslateCall:
    """What a valid POST /translate asks: `texts` (one, or `q`'s list when `is_list`) from `source` (a served
    code or `auto`) into `target`, in `text_format`, with `alternatives` other translations."""

    texts: list[str]
    is_list: bool
    source: str
    target: str
    text_format: str
    alternatives: int
    glossary: dict[str, str] | None = None  # source terms to target terms (vanilla_training/glossary.py)


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body; ApiError 413 if it is over `limit` bytes. A body over the limit is read on and dropped,
    up to a point, so that the client, still sending, gets the answer rather than a broken connection."""
    body, size = bytearray(), 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit * DRAIN_FACTOR:
            break
        if size <= limit:
            body += chunk
    if size > limit:
        declared = request.headers.get("content-length", "")
        shown = f"{int(declared):,} bytes, " if declared.isdigit() else ""
        raise ApiError(413, f"Request body too large: {shown}over the limit of {limit:,} bytes")
    return bytes(body)


def utf8(body: bytes) -> str:
    """`body` decoded; ApiError 400 if it is not UTF-8."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"Invalid request: the body is not UTF-8 ({error.reason} at byte {error.start})") from None


def json_fields(body: bytes) -> dict[str, Any]:
    """The JSON object of `body`; ApiError 400 for a body that is not UTF-8, not a JSON object, nested deeper than
    Python's recursion allows, or holding a lone surrogate (an escape such as \\ud800 that is half a character)."""
    try:
        fields = json.loads(utf8(body))
        json.dumps(fields, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as error:
        raise ApiError(400, f"Invalid JSON format: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise ApiError(400, "Invalid JSON format: nested too deeply") from None
    except UnicodeEncodeError as error:
        surrogate = error.object[error.start : error.end].encode("unicode_escape").decode()
        raise ApiError(400, f"Invalid JSON format: a lone surrogate ({surrogate}) is not a character") from None
    if not isinstance(fields, dict):
        raise ApiError(400, "Invalid JSON format")
    return fields


async def read_fields(request: Request, limit: int) -> tuple[dict[str, Any], bool]:
    """The request's fields and whether they came as JSON: its JSON object, or its form fields and query
    parameters (as LibreTranslate reads them). ApiError 413 for a body over `limit` bytes, 400 for a body that is
    not UTF-8, not a JSON object or not a readable form."""
    body = await read_body(request, limit)
    request._body = body  # read once: the form parser reads it from here
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        return json_fields(body), True
    fields: dict[str, Any] = dict(request.query_params)
    if body and content_type == "application/x-www-form-urlencoded":  # as UTF-8, as LibreTranslate (Starlette:
        fields.update(url_form(utf8(body)))  # Latin-1, so that curl --data "q=Köln" would read "KÃ¶ln")
    elif body:
        utf8(body)
        try:
            form = await request.form()
        except Exception as error:  # a malformed multipart body
            raise ApiError(400, f"Invalid request: the form cannot be read ({error})") from None
        fields.update((name, value) for name, value in form.multi_items() if isinstance(value, str))
    return fields, False


def url_form(text: str) -> list[tuple[str, str]]:
    """The fields of an urlencoded form, its raw characters and its %-escapes read as UTF-8; ApiError 400 for an
    escape that is not UTF-8."""
    try:
        return urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"Invalid request: a %-escape of the form is not UTF-8 ({error.reason})") from None


def texts_of(fields: dict[str, Any]) -> str | list[str]:
    """The field `q`: a text or a list of texts; ApiError 400 if it is missing or something else."""
    q = fields.get("q")
    if not q:
        raise ApiError(400, "Invalid request: missing q parameter")
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(text, str) for text in q))):
        raise ApiError(400, "Invalid request: q parameter must be a string or a list of strings")
    return q


def alternatives_of(fields: dict[str, Any], settings: ServeSettings) -> int:
    """The field `alternatives` as a whole number (as LibreTranslate: 2.7 is 2, below 0 is 0), within
    `alternatives_limit`."""
    alternatives = fields.get("alternatives", 0)
    try:
        if isinstance(alternatives, bool) or alternatives is None:
            raise ValueError
        alternatives = max(0, int(alternatives))
    except (TypeError, ValueError, OverflowError):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    if settings.alternatives_limit != -1 and alternatives > settings.alternatives_limit:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {settings.alternatives_limit}")
    return alternatives


def check_limits(texts: list[str], is_list: bool, settings: ServeSettings) -> None:
    """The request's size against `batch_limit` (texts) and `char_limit` (characters, all texts together);
    ApiError 400 naming the limit, in LibreTranslate's words."""
    if is_list and settings.batch_limit != -1 and len(texts) > settings.batch_limit:
        raise ApiError(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({settings.batch_limit})")
    characters = sum(map(len, texts))
    if settings.char_limit != -1 and characters > settings.char_limit:
        raise ApiError(400, f"Invalid request: request ({characters}) exceeds text limit ({settings.char_limit})")


def language_code(value: Any) -> Any:
    """A language field as LibreTranslate reads it: lower-cased, its aliases (pt-BR, zh-Hans ...) mapped to the
    code they stand for; anything else as it is."""
    if not isinstance(value, str):
        return value
    return ALIASES.get(value.lower(), value.lower())


def parse_translate(fields: dict[str, Any], is_json: bool, settings: ServeSettings, codes: list[str]) -> TranslateCall:
    """The fields of POST /translate checked (fields, limits, languages among `codes`, format)."""
    for name in ("q", "source", "target"):
        if not fields.get(name):
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    q = texts_of(fields)
    source, target = language_code(fields["source"]), language_code(fields["target"])
    alternatives = alternatives_of(fields, settings)
    is_list = isinstance(q, list)
    texts = q if is_list else [q if is_json else LINE_END.sub("\n", q)]  # a form's line ends: \n
    check_limits(texts, is_list, settings)
    if not isinstance(source, str) or (source != "auto" and source not in codes):
        raise ApiError(400, f"{source} is not supported")
    if not isinstance(target, str) or target not in codes:
        raise ApiError(400, f"{target} is not supported")
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"{text_format} format is not supported")
    glossary = glossary_of(fields, texts, settings)
    return TranslateCall(texts, is_list, source, target, text_format, alternatives, glossary)


def glossary_of(fields: dict[str, Any], texts: list[str], settings: ServeSettings) -> dict[str, str] | None:
    """The field `glossary` (None where absent): source to target terms, at most `max_glossary_terms`, whose
    characters count toward `char_limit` with the texts'; ApiError 400 naming what is wrong."""
    if fields.get("glossary") is None:
        return None
    try:
        glossary = glossary_terms(fields["glossary"], settings.max_glossary_terms)
    except GlossaryError as error:
        raise ApiError(400, f"Invalid request: {error}") from None
    characters = sum(map(len, texts)) + sum(len(source) + len(target) for source, target in glossary.items())
    if settings.char_limit != -1 and characters > settings.char_limit:
        raise ApiError(
            400,
            f"Invalid request: request ({characters}, glossary included) exceeds text limit ({settings.char_limit})",
        )
    return glossary


def parse_detect(fields: dict[str, Any], settings: ServeSettings) -> str:
    """The text of POST /detect (a list's texts joined by line breaks)."""
    q = texts_of(fields)
    return q if isinstance(q, str) else "\n".join(q)
