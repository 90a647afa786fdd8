"""The shapes of the API's requests and answers, as the OpenAPI page (`/docs`, `/openapi.json`) shows them; the
routes read requests with `parsing` and answer plain JSON in these shapes."""

from pydantic import BaseModel, Field


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
    glossary: dict[str, str] | None = Field(
        None,
        description="Terms to keep, source term to target term (at most the server's --max-glossary-terms; their "
        "characters count toward its --char-limit). Wherever a source term occurs in a sentence (a whole word, "
        "whatever its case), its target term is placed in the translation by lexically constrained beam search, as "
        "`vanilla-translate --glossary` does. Refused (400) where the direction's model cannot place terms (the "
        "CTranslate2 backend, or a pivot through two models) and with alternatives.",
        examples=[{"Pharaoh": "Pharao"}],
    )


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
    glossaryNotPlaced: list[dict[str, str]] | list[list[dict[str, str]]] | None = Field(
        None,
        description="Only with a glossary: the terms (`source`, `target`) found in the text whose target term the "
        "translation lacks, because its length limit came first (a list per text for a list)",
    )
    pivot: str | None = Field(
        None,
        description="Only where no model trained the direction: the language it was translated through (translated "
        "twice, by one model or two)",
    )
    zeroShot: bool | None = Field(
        None,
        description="Only where the multilingual model did not train the direction and translated it zero-shot "
        "(`--allow-zero-shot`)",
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


def errors(*statuses: int) -> dict:
    """The OpenAPI answers of an endpoint's errors, `statuses` among `ERROR_STATUSES`."""
    return {status: {"model": ErrorResponse, "description": ERROR_STATUSES[status]} for status in statuses}


ERROR_STATUSES = {
    400: "Invalid request (a missing or invalid field, an unsupported language, a text over a limit, a key needed)",
    401: "Missing or wrong `Authorization: Bearer` token (only where the server was given --metrics-auth-token)",
    403: "Wrong API key, or the endpoint is disabled on this server",
    404: "No such file: translated files are kept 30 minutes",
    413: "Request body over the size limit",
    429: "Too many requests from this client (--req-limit, or its key's limit): see Retry-After",
    500: "Translation error",
    503: "The server is busy (the translation queue or the file store is full): try again after Retry-After",
}
ERRORS = errors(400, 403, 413, 429, 500, 503)  # the endpoints that translate or detect
