"""A custom handler for Hugging Face Inference Endpoints: a model folder pushed by `vanilla-push` carries this file
as `handler.py`, the code it imports under `endpoint_code/`, and that code's published requirements in
`requirements.txt`, and is served by the endpoint's own toolkit.

The endpoint builds `EndpointHandler(path)` once, with `path` the repository's folder, then calls it with each
request's JSON: `{"inputs": "text" or ["text", ...], "parameters": {...}}`, and answers what it returns:
`[{"translation_text": ...}]`, one per input, as transformers' translation pipeline does. Texts may hold several
sentences and lines (split and rejoined as vanilla-serve does). Parameters: `alternatives` (other translations,
from the beam: given as `alternatives` in each answer), `format` (`text` or `html`), `num_beams`; `source_lang`
and `target_lang` are checked against the model's languages where it records them.
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
from vanilla_training.serving.documents import layout, layout_sentences, translated_versions  # noqa: E402
from vanilla_training.translator import load_translator  # noqa: E402


class EndpointHandler:
    """Translates the texts of an Inference Endpoints request with the model in `path` (in bf16 where the
    machine computes it natively, as vanilla-serve's `--precision auto`)."""

    def __init__(self, path: str = "", precision: str = "auto"):
        self.translator = load_translator(path or ".")
        self.source = self.translator.languages[0] if self.translator.languages else "en"
        self.backend = TorchBackend(self.translator, precision, batching="batches")
        self.lock = threading.Lock()  # one call at a time uses the tokenizer (padding for the model, not for `fits`)

    def __call__(self, data: dict[str, Any]) -> list[dict[str, Any]]:
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
        languages = self.translator.languages
        for name, index in (("source_lang", 0), ("target_lang", 1)):
            asked = parameters.get(name)
            if asked is not None and languages is not None and asked != languages[index]:
                raise ValueError(f"this model translates {'-'.join(languages)}; {name} {asked!r} is not served")
        alternatives = parameters.get("alternatives", 0)
        if not isinstance(alternatives, int) or isinstance(alternatives, bool) or not 0 <= alternatives <= 10:
            raise ValueError('"alternatives" must be a whole number from 0 to 10')
        text_format = parameters.get("format", "text")
        if text_format not in ("text", "html"):
            raise ValueError('"format" must be "text" or "html"')
        beams = parameters.get("num_beams")
        if beams is not None and (not isinstance(beams, int) or isinstance(beams, bool) or beams < 1):
            raise ValueError('"num_beams" must be a whole number of at least 1')
        with self.lock:
            return [self._translate(text, text_format, alternatives + 1, beams) for text in texts]

    def _translate(self, text: str, text_format: str, hypotheses: int, beams: int | None) -> dict[str, Any]:
        """One text's translation (and its alternatives when more than one hypothesis is asked for)."""
        parts = layout(text, text_format, self.source, self.translator.fits)
        batch = layout_sentences(parts)
        results = self.backend.translate(batch, hypotheses, beams) if batch else []
        best, alternatives = translated_versions(parts, results)
        return {"translation_text": best, **({"alternatives": alternatives} if hypotheses > 1 else {})}
