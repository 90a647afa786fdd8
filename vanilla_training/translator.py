"""The one front door to a trained model: `load_translator(MODEL)` for every command, benchmark and server.

MODEL is a run folder of `vanilla-train` (its `final/` is used), a saved or converted model folder, or a Hub id.
The languages a model of one direction translates are those its training recorded (`training_results.json` beside
the weights); languages given by the caller are checked against them, or stand in for them where none are recorded (a
converted OPUS-MT model, a model trained elsewhere). A multilingual model records its languages in its config
(`config.languages`) and translates between any two of them: the direction is given when it is loaded, or with each
call (`Translator.translate(..., target_lang=...)`). Where its config records the directions it trained
(`config.trained_directions`), a direction it did not train is translated through a pivot language by two trained
directions (`Translator.route`), or zero-shot where asked for.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import cached_file

import modeling_vanilla  # noqa: F401  (registers the "vanilla" model type with the Auto classes)
from modeling_vanilla import EXTRA_OUTPUT_LENGTH

from .batching import TokenBudgetBatchSampler
from .corpus import Direction
from .corpus.direction import pivot_language

RESULTS = "training_results.json"  # written by vanilla-train beside the model; it records the languages
# How a multilingual model translates a direction it did not train that two of its trained directions reach through a
# pivot language: "pivot" (translating twice) or "zero-shot" (the direction's own target token). The pivot, the
# better of the two where measured (docs/corpus.md, "The table's 8 directions in one model").
UNTRAINED_DIRECTIONS = "pivot"


class LanguageMismatchError(ValueError):
    """The languages asked for are not the ones the model translates."""


class ZeroShotError(LanguageMismatchError):
    """A direction the model did not train, which no pivot through its trained directions reaches: translated
    zero-shot only where asked for."""


def model_folder(model: str | Path) -> str:
    """A run folder's `final/`, or `model` itself (a model folder or a Hub id)."""
    final = Path(model) / "final"
    return str(final) if (final / "config.json").is_file() else str(model)


def local_folder(model: str | Path) -> Path:
    """The folder on this machine that holds `model` (a run folder's `final/`, a model folder, or a Hub id: the
    snapshot of its revision in the Hub cache, downloaded where missing); FileNotFoundError saying why for a local
    path that does not exist or a Hub id that cannot be downloaded."""
    folder = Path(model_folder(model))
    if folder.is_dir():
        return folder
    if folder.is_absolute() or str(model).startswith("."):
        raise FileNotFoundError(f"model folder {str(model)!r} does not exist")
    try:
        return Path(snapshot_download(str(model)))
    except (FileNotFoundError, HfHubHTTPError) as error:  # offline, unreachable, no such repository
        reason = str(error).strip().splitlines()[0]
        raise FileNotFoundError(
            f"{str(model)!r} is no local folder, and the Hub cannot give it (offline, or no such model?): {reason}"
        ) from None


@dataclasses.dataclass(frozen=True)
class TrainedLanguages:
    """The languages a trained folder records: a model of one direction its `direction` (in `training_results.json`,
    which vanilla-train writes beside it), a multilingual model its `languages` (its config's), between any two of
    which it translates; neither for a converted model, or one trained elsewhere (false)."""

    direction: Direction | None = None
    languages: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.direction is not None or bool(self.languages)


def trained_languages(model: str | Path) -> TrainedLanguages:
    """What `model` (a run folder, a model folder or a Hub id) records of its languages, each file read once: its
    config's `languages`, else the languages of its `training_results.json`."""
    folder = model_folder(model)
    config = cached_file(folder, "config.json", _raise_exceptions_for_missing_entries=False)
    languages = None if config is None else json.loads(Path(config).read_text(encoding="utf-8")).get("languages")
    if languages:
        return TrainedLanguages(languages=tuple(languages))
    results = cached_file(folder, RESULTS, _raise_exceptions_for_missing_entries=False)
    recorded = None if results is None else json.loads(Path(results).read_text(encoding="utf-8")).get("languages")
    if recorded is None:
        return TrainedLanguages()
    return TrainedLanguages(Direction(recorded["source"], recorded["target"]))


def resolve_direction(
    model: str | Path, languages: tuple[str, ...], source_lang: str | None, target_lang: str | None
) -> Direction | None:
    """The direction asked of a multilingual model of `languages`: None if neither language is given (it is chosen
    with each translation), else both, checked. LanguageMismatchError naming the model's languages otherwise."""
    if source_lang is None and target_lang is None:
        return None
    choices = f"{model} translates between any two of {', '.join(languages)}"
    if source_lang is None or target_lang is None:
        raise LanguageMismatchError(f"{choices}: give both the source and the target language")
    unknown = [code for code in (source_lang, target_lang) if code not in languages]
    if unknown or source_lang == target_lang:
        raise LanguageMismatchError(f"{choices}, not {source_lang}-{target_lang}")
    return Direction(source_lang, target_lang)


def resolve_languages(
    model: str | Path,
    source_lang: str | None = None,
    target_lang: str | None = None,
    trained: TrainedLanguages | None = None,
) -> Direction | None:
    """The model's languages (`trained`: `trained_languages(model)`, read here where not given): the recorded ones,
    checked against `source_lang` and `target_lang` where given; or, for a model that records none, the given ones
    (both needed), or None if neither is given; for a multilingual model, see `resolve_direction`.
    LanguageMismatchError naming both pairs where they differ."""
    trained = trained_languages(model) if trained is None else trained
    if trained.languages:
        return resolve_direction(model, trained.languages, source_lang, target_lang)
    recorded = trained.direction
    if recorded is None:
        if source_lang is None and target_lang is None:
            return None
        if source_lang is None or target_lang is None:
            raise LanguageMismatchError(
                f"{model_folder(model)} records no languages (no {RESULTS}, as for a converted model): "
                "give both the source and the target language"
            )
        return Direction(source_lang, target_lang)
    asked = (source_lang or recorded[0], target_lang or recorded[1])
    if asked != recorded:
        raise LanguageMismatchError(f"{model} translates {'-'.join(recorded)}, not {'-'.join(asked)}")
    return recorded


@dataclasses.dataclass
class Translator:
    """A model with its tokenizer, where it was loaded from, and the languages it translates (None: unknown, or,
    for a multilingual model, no direction chosen at loading); `all_languages` are a multilingual model's."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    folder: str
    languages: Direction | None
    all_languages: tuple[str, ...] = ()
    trained: tuple[Direction, ...] | None = None  # a multilingual model's trained directions (None: every one)

    @property
    def language_pairs(self) -> list[Direction]:
        """Every ordered pair of two of a multilingual model's languages (none for a model of one direction)."""
        return [Direction(a, b) for a in self.all_languages for b in self.all_languages if a != b]

    @property
    def directions(self) -> list[Direction]:
        """Every (source, target) the model trained: those a multilingual model records (by default any two of its
        languages), else its own pair (none where unknown)."""
        if self.all_languages:
            return list(self.trained) if self.trained is not None else self.language_pairs
        return [] if self.languages is None else [self.languages]

    @property
    def untrained_directions(self) -> list[Direction]:
        """The directions between a multilingual model's languages that it did not train."""
        return [pair for pair in self.language_pairs if pair not in self.directions]

    def route(self, direction: Direction, allow_zero_shot: bool = False) -> tuple[Direction, ...]:
        """The directions the model translates `direction` by, one after the other: itself where trained; else two
        trained directions through a pivot language (`corpus.direction.pivot_language`), or itself zero-shot if
        `UNTRAINED_DIRECTIONS` says so; where no pivot reaches it, itself zero-shot if `allow_zero_shot`, else
        ZeroShotError naming it."""
        direction = Direction(*direction)
        if direction in self.directions or not self.all_languages:
            return (direction,)
        middle = pivot_language(*direction, self.directions)
        if middle is not None:
            pivot = (Direction(direction.source, middle), Direction(middle, direction.target))
            return pivot if UNTRAINED_DIRECTIONS == "pivot" else (direction,)
        if allow_zero_shot:
            return (direction,)
        raise ZeroShotError(
            f"{self.folder} did not train {direction}, and no pivot through the directions it trained "
            f"({', '.join(map(str, self.directions))}) reaches it"
        )

    def translate_route(self, sentences: list[str], route: tuple[Direction, ...], **options) -> list[str]:
        """`sentences` translated along `route` (`route`'s directions): each direction's best translations are the
        next one's sources (`translate`, whose keyword `options` these are)."""
        for direction in route:
            sentences = self.translate(sentences, target_lang=direction.target, **options)
        return sentences

    def target_options(self, target_lang: str | None = None) -> dict[str, int]:
        """The generation options that choose the target language: for a multilingual model the `forced_bos_token_id`
        of `target_lang` (default: the target chosen at loading), none for a model of one direction (whose target,
        if given, must be its own). LanguageMismatchError naming the choices otherwise."""
        target = target_lang or (self.languages[1] if self.languages else None)
        if not self.all_languages:
            if target_lang is not None and self.languages is not None and target_lang != self.languages[1]:
                raise LanguageMismatchError(
                    f"{self.folder} translates {'-'.join(self.languages)}, not into {target_lang}"
                )
            return {}
        if target not in self.all_languages:
            raise LanguageMismatchError(
                f"{self.folder} translates into any of {', '.join(self.all_languages)}: choose the target language"
                + ("" if target is None else f" ({target!r} is not one of them)")
            )
        return {"forced_bos_token_id": self.tokenizer.get_lang_id(target)}

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

    def translate(
        self, sentences: list[str], target_lang: str | None = None, constraints: list | None = None, **options
    ) -> list[str]:
        """The translation of every sentence, in order (`translate`, whose keyword `options` these are), into
        `target_lang` (see `target_options`), placing each sentence's `constraints` (see `translate`); a blank
        sentence (empty or whitespace) translates to "" without the model."""
        target = self.target_options(target_lang)
        nonblank = [index for index, sentence in enumerate(sentences) if sentence.strip()]
        translations = [""] * len(sentences)
        if nonblank:
            if constraints is not None:
                options["constraints"] = [constraints[i] for i in nonblank]
            texts = translate(self.model, self.tokenizer, [sentences[i] for i in nonblank], **target, **options)
            for index, text in zip(nonblank, texts, strict=True):
                translations[index] = text
        return translations


def load_translator(
    model: str | Path,
    source_lang: str | None = None,
    target_lang: str | None = None,
    trained: TrainedLanguages | None = None,
) -> Translator:
    """The model and tokenizer of `model` (a run folder, a model folder or a Hub id), in evaluation mode and on the
    accelerator if there is one, with its languages (see `resolve_languages`, to which `trained` goes; checked before
    the weights are read) and, for a multilingual model, all of them. The tokenizer reads text as text: `"__fr__ la
    maison"`, `"a </s> b"` or `"<unk>"` in a user's text are characters, never special tokens (`split_special_tokens`),
    wherever it is used.
    Only this package's code and transformers' run: a folder that needs other code is refused by transformers;
    FileNotFoundError naming a local folder that holds no model."""
    folder = model_folder(model)
    if Path(folder).exists() and not (Path(folder) / "config.json").is_file():
        raise FileNotFoundError(f"{str(model)!r} is not a saved translator: it has no config.json (nor final/)")
    if not Path(folder).exists() and (Path(folder).is_absolute() or str(folder).startswith(".")):
        raise FileNotFoundError(f"model folder {str(model)!r} does not exist")
    languages = resolve_languages(model, source_lang, target_lang, trained)
    network = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False, split_special_tokens=True)
    all_languages = tuple(getattr(network.config, "languages", None) or ())
    if all_languages and tuple(getattr(tokenizer, "languages", ())) != all_languages:
        raise ValueError(f"{folder}: the config's languages {list(all_languages)} are not the tokenizer's")
    trained = getattr(network.config, "trained_directions", None)
    trained = tuple(map(Direction.parse, trained)) if trained is not None else None
    if torch.accelerator.is_available():
        network.to(torch.accelerator.current_accelerator())
    return Translator(network, tokenizer, folder, languages, all_languages, trained)


@torch.no_grad()
def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    max_tokens: int = 4096,
    progress: bool = True,
    constraints: list | None = None,
    **generate_kwargs,
) -> list[str]:
    """Translate `sentences`, in their order, decoding as `model.generation_config` says unless `generate_kwargs`
    (e.g. `num_beams=1`) say otherwise. Sentences of similar length are batched up to `max_tokens` source tokens,
    padding included (a sentence longer than that goes alone; the batch size can change a translation, rarely:
    padding changes floating-point sums), and each batch may produce up to its longest input + 50 tokens (section
    6.1; given explicitly, so that any seq2seq model is held to it). `constraints`, one list per sentence in
    transformers' `force_words_ids` format (e.g. a glossary's terms, `glossary.py`), are placed in each sentence's
    translation by the model's constrained beam search. The model is left in the mode (training or evaluation) it
    was in. The sentences are text: a special token's spelling in them is not read as the token."""
    was_training = model.training
    model.eval()
    lengths = np.array(
        [len(ids) for ids in tokenizer(sentences, split_special_tokens=True)["input_ids"]], dtype=np.int64
    )
    alone = np.flatnonzero(lengths > max_tokens)
    rest = np.flatnonzero(lengths <= max_tokens)
    batches = [[int(i)] for i in alone]
    batches += [rest[batch].tolist() for batch in TokenBudgetBatchSampler(lengths[rest], max_tokens, shuffle=False)]
    translations: list[str] = [""] * len(sentences)
    beams = generate_kwargs.get("num_beams", model.generation_config.num_beams) or 1
    for batch in tqdm(batches, desc=f"translating (beam {beams})", disable=not progress, unit="batch"):
        texts = [sentences[i] for i in batch]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, split_special_tokens=True).to(model.device)
        limit = inputs["input_ids"].shape[1] + EXTRA_OUTPUT_LENGTH
        own = [] if constraints is None else [constraints[i] for i in batch]
        placing = {"force_words_ids_per_sentence": own} if any(own) else {}
        output = model.generate(**inputs, **{"max_new_tokens": limit, **generate_kwargs}, **placing)
        for i, text in zip(batch, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True):
            translations[i] = text
    model.train(was_training)
    return translations


def translate_rows(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: dict[str, list], **options
) -> list[str]:
    """The translation of each row's `source` into its `target_lang`, in the rows' order: `translate`
    (whose keyword `options` these are) once per target language, with its token as `forced_bos_token_id`."""
    translations = [""] * len(rows["source"])
    for language in dict.fromkeys(rows["target_lang"]):
        indices = [i for i, target in enumerate(rows["target_lang"]) if target == language]
        sources = [rows["source"][i] for i in indices]
        texts = translate(model, tokenizer, sources, forced_bos_token_id=tokenizer.get_lang_id(language), **options)
        for i, text in zip(indices, texts, strict=True):
            translations[i] = text
    return translations
