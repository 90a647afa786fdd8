"""Glossaries: "this term is always translated as that", kept in every translation by constrained decoding.

A glossary maps source terms to target terms. In each sentence, the source terms that occur in it (whole words,
whatever their case; where terms overlap, the longest, leftmost first) make the sentence's constraints: the
target term, as written or with its first letter capitalised (a disjunctive constraint, so that a term may open a
sentence), must appear in the translation. A sentence whose translation without the glossary holds its terms keeps
it; the others are translated again with a wider beam, the model's `generate` placing their terms
(`force_words_ids_per_sentence`, lexically constrained beam search, `modeling_vanilla/constrained_beam_search.py`).
A target term is placed where it starts a word; a term not placed (the translation reached its length limit first)
is reported, never dropped silently.

    glossary = Glossary.build({"Pharaoh": "Pharao", "Moses": "Mose"}, translator.tokenizer)
    results = translate_with_glossary(translator, ["And Moses said unto Pharaoh"], glossary)
    results[0].text, results[0].missing  # the translation, and the terms not placed (none here)

On the command line a glossary is a TSV file: a header naming the two languages, then one term per line.

    en	de
    Pharaoh	Pharao
"""

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from modeling_vanilla.constrained_beam_search import constraint_length

from .translator import Translator

MAX_TERMS = 10_000  # the most terms a glossary file may hold (the server's limit is its --max-glossary-terms)
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")


class GlossaryError(ValueError):
    """A glossary that cannot be used as it is; the message names the term or line."""


@dataclasses.dataclass(frozen=True)
class Term:
    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.source!r} -> {self.target!r}"


@dataclasses.dataclass(frozen=True)
class GlossaryTranslation:
    """A sentence's translation, the glossary terms its source holds, and those of them the translation misses."""

    text: str
    terms: list[Term]
    missing: list[Term]


def target_forms(target: str) -> list[str]:
    """The forms a target term may take: as written, and with its first letter capitalised (if that differs)."""
    capitalised = target[:1].upper() + target[1:]
    return [target] if capitalised == target else [target, capitalised]


def placed(target: str, translation: str) -> bool:
    """Whether a form of `target` starts a word of `translation` (as a forced term does)."""
    return any(re.search(rf"(?<!\w){re.escape(form)}", translation) for form in target_forms(target))


@dataclasses.dataclass
class Glossary:
    """Checked terms (`build`), the pattern that finds their source terms, and their target forms' token ids."""

    terms: dict[str, Term]  # by the source term's casefold
    pattern: re.Pattern | None
    forms_ids: dict[str, list[list[int]]]  # by the source term's casefold

    @classmethod
    def build(
        cls,
        terms: dict[str, str] | Iterable[tuple[str, str]],
        tokenizer: PreTrainedTokenizerBase,
        max_terms: int = MAX_TERMS,
        places: list[str] | None = None,
    ) -> "Glossary":
        """A glossary of `terms` (source to target), checked. GlossaryError naming the term (by its place in
        `places`, e.g. "line 4", where given) for: an empty term, a term of more tokens than the model accepts, a
        term whose tokens are all unknown, a source term given twice with different targets, more than `max_terms`
        terms. Repeated identical terms count once."""
        pairs = list(terms.items() if isinstance(terms, dict) else terms)
        places = places or [f"term {number}" for number in range(1, len(pairs) + 1)]
        if len(pairs) > max_terms:
            raise GlossaryError(f"glossary: {len(pairs):,} terms, over the limit of {max_terms:,}")
        checked: dict[str, Term] = {}
        first_place: dict[str, str] = {}
        forms_ids: dict[str, list[list[int]]] = {}
        for place, (source, target) in zip(places, pairs, strict=True):
            term = Term(source.strip(), target.strip())
            for side, text in (("source", term.source), ("target", term.target)):
                check_term_text(text, side, place, tokenizer)
            key = term.source.casefold()
            if key in checked and checked[key].target != term.target:
                raise GlossaryError(
                    f"glossary, {place}: source term {term.source!r} is given twice with different targets "
                    f"({checked[key].target!r} at {first_place[key]}, {term.target!r} here)"
                )
            checked.setdefault(key, term)
            first_place.setdefault(key, place)
            forms_ids[key] = [
                tokenizer(form, add_special_tokens=False, split_special_tokens=True)["input_ids"]
                for form in target_forms(term.target)
            ]
        return cls(checked, source_pattern([term.source for term in checked.values()]), forms_ids)

    def terms_in(self, sentence: str) -> list[Term]:
        """The terms whose source term occurs in `sentence`, each once, in order of first occurrence."""
        if self.pattern is None:
            return []
        keys = dict.fromkeys(match.group().casefold() for match in self.pattern.finditer(sentence))
        return [self.terms[key] for key in keys]

    def constraints(self, terms: list[Term]) -> list[list[list[int]]]:
        """`force_words_ids` for `terms`: one disjunctive constraint per term (its target forms)."""
        return [self.forms_ids[term.source.casefold()] for term in terms]


def source_pattern(sources: list[str]) -> re.Pattern | None:
    """A pattern matching any of `sources` as whole words, whatever their case, the longest first where several
    start at one place (a literal alternation: its time is bounded by the text's length times the terms')."""
    if not sources:
        return None
    alternatives = "|".join(re.escape(source) for source in sorted(sources, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def check_term_text(text: str, side: str, place: str, tokenizer: PreTrainedTokenizerBase) -> None:
    """GlossaryError naming `place` if the term `text` is empty, longer than the model accepts, or unknown."""
    if not text:
        raise GlossaryError(f"glossary, {place}: the {side} term is empty")
    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    limit = tokenizer.model_max_length - 1  # room for the end token
    if len(ids) > limit:
        raise GlossaryError(
            f"glossary, {place}: the {side} term {text[:40]!r}... is {len(ids):,} tokens long, over the model's "
            f"limit of {limit:,}"
        )
    if tokenizer.unk_token_id is not None and all(token == tokenizer.unk_token_id for token in ids):
        raise GlossaryError(
            f"glossary, {place}: the {side} term {text!r} is unknown to the model (its tokens are all "
            f"{tokenizer.unk_token})"
        )


def read_glossary_tsv(path: Path, languages: tuple[str, str] | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The terms of a TSV glossary (UTF-8; a header naming the source and target language, then a source and a
    target term per line, tab-separated; empty lines are skipped) and their places ("line N"). GlossaryError naming
    the line that is not UTF-8 or not two columns, or a header that names other languages than `languages`."""
    terms, places = [], []
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise GlossaryError(f"{path}, line {number}: not UTF-8 ({error.reason})") from None
            fields = line.split("\t")
            if number == 1:
                check_header(fields, path, languages)
            elif line and len(fields) != 2:
                raise GlossaryError(
                    f"{path}, line {number}: {len(fields)} tab-separated column(s), not 2 (source term, target term)"
                )
            elif line:
                terms.append((fields[0], fields[1]))
                places.append(f"line {number}")
    return terms, places


def check_header(fields: list[str], path: Path, languages: tuple[str, str] | None) -> None:
    """GlossaryError unless `fields` name two languages, `languages` where they are known."""
    expected = "\t".join(languages) if languages else "source<TAB>target language codes"
    if len(fields) != 2 or not all(LANGUAGE_CODE.fullmatch(field.strip()) for field in fields):
        raise GlossaryError(f"{path}, line 1: the header must name the two languages ({expected}), not {fields!r}")
    if languages is not None and tuple(field.strip() for field in fields) != tuple(languages):
        raise GlossaryError(
            f"{path}, line 1: the glossary is {'-'.join(fields)}, the model translates {'-'.join(languages)}"
        )


def glossary_terms(value: object, max_terms: int) -> dict[str, str]:
    """A request's glossary: a JSON object of source to target terms (or its JSON text, as a form field sends it),
    of at most `max_terms` terms. GlossaryError naming what is wrong (the terms themselves are checked by
    `Glossary.build`)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise GlossaryError("glossary: not a JSON object of source to target terms") from None
    if not isinstance(value, dict) or not all(isinstance(term, str) for item in value.items() for term in item):
        raise GlossaryError("glossary: not an object of source terms to target terms (strings)")
    if len(value) > max_terms:
        raise GlossaryError(f"glossary: {len(value):,} terms, over the limit of {max_terms:,}")
    return value


def load_glossary(path: Path, translator: Translator, max_terms: int = MAX_TERMS) -> Glossary:
    """The checked glossary of the TSV file `path` for `translator` (whose languages its header must name)."""
    terms, places = read_glossary_tsv(path, translator.languages)
    try:
        return Glossary.build(terms, translator.tokenizer, max_terms, places)
    except GlossaryError as error:
        raise GlossaryError(f"{path}: {error}") from None


def translate_with_glossary(
    translator: Translator, sentences: list[str], glossary: Glossary, **options
) -> list[GlossaryTranslation]:
    """Each sentence's translation with its glossary terms placed (`Translator.translate`'s `options`), and the
    terms the translation misses (not placed before the length limit). Sentences are translated as without the
    glossary first; those whose translation misses one of their terms are translated again with all of their terms
    as constraints, and a beam as wide as the first one for each bank of the constrained search (which shares its
    beam among banks, one for each number of constraint tokens placed): the translations that hold their terms
    anyway keep them, and no bank has fewer hypotheses than the search without constraints (experiments/README.md
    measures the three ways)."""
    terms = [glossary.terms_in(sentence) for sentence in sentences]
    texts = translator.translate(sentences, **options)
    beams = options.get("num_beams") or translator.model.generation_config.num_beams or 1
    again_by_banks: dict[int, list[int]] = {}
    for i, text in enumerate(texts):
        if any(not placed(term.target, text) for term in terms[i]):
            banks = 1 + sum(constraint_length(constraint) for constraint in glossary.constraints(terms[i]))
            again_by_banks.setdefault(banks, []).append(i)
    for banks, again in again_by_banks.items():
        constrained = translator.translate(
            [sentences[i] for i in again],
            constraints=[glossary.constraints(terms[i]) for i in again],
            **{**options, "num_beams": beams * banks},
        )
        for i, text in zip(again, constrained, strict=True):
            texts[i] = text
    return [
        GlossaryTranslation(text, sentence_terms, [term for term in sentence_terms if not placed(term.target, text)])
        for text, sentence_terms in zip(texts, terms, strict=True)
    ]
