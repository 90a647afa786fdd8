"""The one front door to a trained model: `load_translator(MODEL)` for every command, benchmark and server.

MODEL is a run folder of `vanilla-train` (its `final/` is used), a saved or converted model folder, or a Hub id.
The languages a model translates are those its training recorded (`training_results.json` beside the weights);
languages given by the caller are checked against them, or stand in for them where none are recorded (a converted
OPUS-MT model, a model trained elsewhere).
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import cached_file

import modeling_vanilla  # noqa: F401  (registers the "vanilla" model type with the Auto classes)
from modeling_vanilla import EXTRA_OUTPUT_LENGTH

from .batching import TokenBudgetBatchSampler

RESULTS = "training_results.json"  # written by vanilla-train beside the model; it records the languages


class LanguageMismatchError(ValueError):
    """The languages asked for are not the ones the model translates."""


def model_folder(model: str | Path) -> str:
    """A run folder's `final/`, or `model` itself (a model folder or a Hub id)."""
    final = Path(model) / "final"
    return str(final) if (final / "config.json").is_file() else str(model)


def recorded_languages(model: str | Path) -> tuple[str, str] | None:
    """The source and target language that `vanilla-train` recorded for `model`, or None (a converted model, or
    one trained elsewhere)."""
    path = cached_file(model_folder(model), RESULTS, _raise_exceptions_for_missing_entries=False)
    if path is None:
        return None
    languages = json.loads(Path(path).read_text(encoding="utf-8")).get("languages")
    return None if languages is None else (languages["source"], languages["target"])


def resolve_languages(
    model: str | Path, source_lang: str | None = None, target_lang: str | None = None
) -> tuple[str, str] | None:
    """The model's languages: the recorded ones, checked against `source_lang` and `target_lang` where given; or,
    for a model that records none, the given ones (both needed), or None if neither is given.
    LanguageMismatchError naming both pairs where they differ."""
    recorded = recorded_languages(model)
    if recorded is None:
        if source_lang is None and target_lang is None:
            return None
        if source_lang is None or target_lang is None:
            raise LanguageMismatchError(
                f"{model_folder(model)} records no languages (no {RESULTS}, as for a converted model): "
                "give both the source and the target language"
            )
        return source_lang, target_lang
    asked = (source_lang or recorded[0], target_lang or recorded[1])
    if asked != recorded:
        raise LanguageMismatchError(f"{model} translates {'-'.join(recorded)}, not {'-'.join(asked)}")
    return recorded


@dataclasses.dataclass
class Translator:
    """A model with its tokenizer, where it was loaded from, and the languages it translates (None: unknown)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    folder: str
    languages: tuple[str, str] | None

    @property
    def max_length(self) -> int:
        """The longest input, in tokens (end token included), that the model accepts."""
        return self.tokenizer.model_max_length

    def token_counts(self, sentences: list[str]) -> list[int]:
        """The number of tokens of each sentence, end token included."""
        return [len(ids) for ids in self.tokenizer(sentences, verbose=False)["input_ids"]] if sentences else []

    def fits(self, sentence: str) -> bool:
        """Whether the model accepts `sentence` whole (its tokens within `max_length`)."""
        return self.token_counts([sentence])[0] <= self.max_length

    def check_lengths(self, lines: list[str], name: str) -> None:
        """ValueError naming the lines longer than the model accepts (with their lengths): they are not truncated."""
        limit = self.max_length
        too_long = [(n, length) for n, length in enumerate(self.token_counts(lines), start=1) if length > limit]
        if too_long:
            shown = ", ".join(f"line {number} ({length:,} tokens)" for number, length in too_long[:10])
            raise ValueError(
                f"{name}: {len(too_long)} line(s) longer than the model's limit of {limit:,} tokens (the tokenizer's "
                f"model_max_length), {shown}{', ...' if len(too_long) > 10 else ''}; split them"
            )

    def translate(self, sentences: list[str], **options) -> list[str]:
        """The translation of every sentence, in order (`translate`, whose keyword `options` these are);
        a blank sentence (empty or whitespace) translates to "" without the model."""
        nonblank = [index for index, sentence in enumerate(sentences) if sentence.strip()]
        translations = [""] * len(sentences)
        if nonblank:
            texts = translate(self.model, self.tokenizer, [sentences[i] for i in nonblank], **options)
            for index, text in zip(nonblank, texts, strict=True):
                translations[index] = text
        return translations


def load_translator(model: str | Path, source_lang: str | None = None, target_lang: str | None = None) -> Translator:
    """The model and tokenizer of `model` (a run folder, a model folder or a Hub id), in evaluation mode and on the
    accelerator if there is one, with its languages (see `resolve_languages`; checked before the weights are read).
    Only this package's code and transformers' run: a folder that needs other code is refused by transformers;
    FileNotFoundError naming a local folder that holds no model."""
    folder = model_folder(model)
    if Path(folder).exists() and not (Path(folder) / "config.json").is_file():
        raise FileNotFoundError(f"{str(model)!r} is not a saved translator: it has no config.json (nor final/)")
    if not Path(folder).exists() and (Path(folder).is_absolute() or str(folder).startswith(".")):
        raise FileNotFoundError(f"model folder {str(model)!r} does not exist")
    languages = resolve_languages(model, source_lang, target_lang)
    network = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    if torch.accelerator.is_available():
        network.to(torch.accelerator.current_accelerator())
    return Translator(network, tokenizer, folder, languages)


@torch.no_grad()
def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    max_tokens: int = 4096,
    progress: bool = True,
    **generate_kwargs,
) -> list[str]:
    """Translate `sentences`, in their order, decoding as `model.generation_config` says unless `generate_kwargs`
    (e.g. `num_beams=1`) say otherwise. Sentences of similar length are batched up to `max_tokens` source tokens,
    padding included (a sentence longer than that goes alone; the batch size can change a translation, rarely:
    padding changes floating-point sums), and each batch may produce up to its longest input + 50 tokens (section
    6.1; given explicitly, so that any seq2seq model is held to it). The model is left in the mode (training or
    evaluation) it was in."""
    was_training = model.training
    model.eval()
    lengths = np.array([len(ids) for ids in tokenizer(sentences)["input_ids"]], dtype=np.int64)
    alone = np.flatnonzero(lengths > max_tokens)
    rest = np.flatnonzero(lengths <= max_tokens)
    batches = [[int(i)] for i in alone]
    batches += [rest[batch].tolist() for batch in TokenBudgetBatchSampler(lengths[rest], max_tokens, shuffle=False)]
    translations: list[str] = [""] * len(sentences)
    beams = generate_kwargs.get("num_beams", model.generation_config.num_beams) or 1
    for batch in tqdm(batches, desc=f"translating (beam {beams})", disable=not progress, unit="batch"):
        inputs = tokenizer([sentences[i] for i in batch], return_tensors="pt", padding=True).to(model.device)
        limit = inputs["input_ids"].shape[1] + EXTRA_OUTPUT_LENGTH
        output = model.generate(**inputs, **{"max_new_tokens": limit, **generate_kwargs})
        for i, text in zip(batch, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True):
            translations[i] = text
    model.train(was_training)
    return translations
