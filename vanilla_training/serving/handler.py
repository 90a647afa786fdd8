"""A custom handler for Hugging Face Inference Endpoints: a model folder pushed by `vanilla-push` carries this file
as `handler.py`, the code it imports under `endpoint_code/`, and that code's published requirements in
`requirements.txt`, and is served by the endpoint's own toolkit.

The endpoint builds `EndpointHandler(path)` once, with `path` the repository's folder, then calls it with each
request's JSON: `{"inputs": "text" or ["text", ...], "parameters": {...}}`, and answers what it returns:
`[{"translation_text": ...}]`, one per input, as transformers' translation pipeline does. Texts may hold several
sentences and lines (split and rejoined as vanilla-serve does). Parameters: `alternatives` (other translations,
from the beam: given as `alternatives` in each answer), `format` (`text` or `html`), `num_beams`, `source_lang`
and `target_lang`. A multilingual model translates into the `target_lang` given (one of its languages), and splits
the texts by the rules of `source_lang` (English's where none is given); a model of one direction checks them
against its own languages where it records them.

A request holds at most vanilla-serve's default limits (`TEXT_LIMIT` texts, `CHAR_LIMIT` characters and
`SENTENCE_LIMIT` sentences, all texts together), and its texts share one time budget for sentence splitting, as in
vanilla-serve; ValueError naming the problem for anything else.
"""

import sys
import threading
from pathlib import Path
from typing import Any

# In a pushed repository the code this file imports lies beside it, under endpoint_code/ (vanilla_training.hub).
PUSHED_CODE = Path(__file__).resolve().parent / "endpoint_code"
if PUSHED_CODE.is_dir():
    sys.path.insert(0, str(PUSHED_CODE))

from vanilla_training.serving.backends import TorchBackend  # noqa: E402
from vanilla_training.serving.documents import Layout, layout, layout_sentences, translated_versions  # noqa: E402
from vanilla_training.serving.paragraphs import Budget  # noqa: E402
from vanilla_training.translator import load_translator  # noqa: E402

# vanilla-serve's defaults for --batch-limit, --char-limit and --sentence-limit
TEXT_LIMIT, CHAR_LIMIT, SENTENCE_LIMIT = 100, 5000, 500


def request_texts(data: Any) -> tuple[list[str], dict[str, Any]]:
    """The request's texts and parameters, checked against the limits before any work; ValueError naming the
    problem."""
    inputs = data.get("inputs") if isinstance(data, dict) else None
    parameters = data.get("parameters") or {} if isinstance(data, dict) else {}
    if isinstance(inputs, str):
        texts = [inputs]
    elif isinstance(inputs, list) and all(isinstance(text, str) for text in inputs):
        texts = inputs
    else:
        raise ValueError('"inputs" must be a text or a list of texts')
    if not isinstance(parameters, dict):
        raise ValueError('"parameters" must be an object')
    if len(texts) > TEXT_LIMIT:
        raise ValueError(f'"inputs" holds {len(texts):,} texts, more than the limit of {TEXT_LIMIT:,}')
    characters = sum(map(len, texts))
    if characters > CHAR_LIMIT:
        raise ValueError(f'"inputs" holds {characters:,} characters, more than the limit of {CHAR_LIMIT:,}')
    return texts, parameters


def decoding_parameters(parameters: dict[str, Any]) -> tuple[str, int, int | None]:
    """The format, the number of hypotheses (1 + alternatives) and the beam asked for; ValueError naming a bad one."""
    alternatives = parameters.get("alternatives", 0)
    if not isinstance(alternatives, int) or isinstance(alternatives, bool) or not 0 <= alternatives <= 10:
        raise ValueError('"alternatives" must be a whole number from 0 to 10')
    text_format = parameters.get("format", "text")
    if text_format not in ("text", "html"):
        raise ValueError('"format" must be "text" or "html"')
    beams = parameters.get("num_beams")
    if beams is not None and (not isinstance(beams, int) or isinstance(beams, bool) or beams < 1):
        raise ValueError('"num_beams" must be a whole number of at least 1')
    return text_format, alternatives + 1, beams


class EndpointHandler:
    """Translates the texts of an Inference Endpoints request with the model in `path` (in bf16 where the
    machine computes it natively, as vanilla-serve's `--precision auto`)."""

    def __init__(self, path: str = "", precision: str = "auto"):
        self.translator = load_translator(path or ".")
        self.backend = TorchBackend(self.translator, precision, batching="batches")
        self.lock = threading.Lock()  # one call at a time uses the tokenizer (padding for the model, not for `fits`)

    def direction(self, parameters: dict[str, Any]) -> tuple[str, str | None]:
        """The texts' language (for splitting them) and, for a multilingual model, the target language;
        ValueError naming the model's languages where the parameters do not fit them."""
        source, target = parameters.get("source_lang"), parameters.get("target_lang")
        languages, choices = self.translator.languages, self.translator.all_languages
        if not choices:
            for name, asked, index in (("source_lang", source, 0), ("target_lang", target, 1)):
                if asked is not None and languages is not None and asked != languages[index]:
                    raise ValueError(f"this model translates {'-'.join(languages)}; {name} {asked!r} is not served")
            return languages[0] if languages else "en", None
        named = ", ".join(choices)
        if target is None:
            raise ValueError(f'this model translates into any of {named}: give "target_lang" in "parameters"')
        for name, asked in (("source_lang", source), ("target_lang", target)):
            if asked is not None and asked not in choices:
                raise ValueError(f"{name} {asked!r} is not a language of this model; choose one of {named}")
        if source == target:
            raise ValueError(f'"source_lang" and "target_lang" are both {source!r}: choose two of {named}')
        return source or "en", target

    def __call__(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        texts, parameters = request_texts(data)
        source, target = self.direction(parameters)
        text_format, hypotheses, beams = decoding_parameters(parameters)
        budget = Budget()  # pysbd's time, for all the texts together
        with self.lock:
            layouts = [layout(text, text_format, source, self.translator.fits, budget) for text in texts]
            count = sum(len(layout_sentences(parts)) for parts in layouts)
            if count > SENTENCE_LIMIT:
                raise ValueError(f'"inputs" holds {count:,} sentences, more than the limit of {SENTENCE_LIMIT:,}')
            return [self._translate(parts, hypotheses, beams, target) for parts in layouts]

    def _translate(self, parts: Layout, hypotheses: int, beams: int | None, target: str | None) -> dict[str, Any]:
        """One text's translation (and its alternatives when more than one hypothesis is asked for)."""
        batch = layout_sentences(parts)
        results = self.backend.translate(batch, hypotheses, beams, target) if batch else []
        best, alternatives = translated_versions(parts, results)
        return {"translation_text": best, **({"alternatives": alternatives} if hypotheses > 1 else {})}
