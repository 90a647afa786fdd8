"""Glossaries measured: term use, BLEU, chrF and speed of an en-de split without and with a glossary.

    python experiments/glossary.py runs/demo/final                # the 1,866 en-de test verses
    python experiments/glossary.py runs/demo/final --split validation
    python experiments/glossary.py runs/demo/final --limit 500    # the first 500

The glossary is drawn from the TRAINING split alone (never from test), by rules fixed before any test verse was
translated, and written to experiments/results/glossary-en-de.tsv:
- a source term is a proper name: an English word of at least 3 letters, capitalised in at least 95% of its
  occurrences in the training sources (not counting a verse's first word), occurring in at least 20 verses;
- its target term is the German word that co-occurs with it most consistently over the training verse pairs (the
  highest Dice coefficient, 2 * both / (source verses + target verses)), kept where that coefficient is at least
  0.8 (a name the references translate one way nearly always).
Both translations go through `Translator.translate` (the model's beam search as its generation config says, the
batching of vanilla-translate); with the glossary, `vanilla_training.glossary.translate_with_glossary` places each
verse's terms (the constrained beam search where the translation without them misses one). Term use: of the
(verse, term) pairs whose source holds the term, the share whose translation holds the target term at the start of a
word (the reference's share is printed beside, as a check of the glossary). Printed: a markdown table; seconds on a
shared machine are indicative.
"""

import argparse
import collections
import re
import time
from pathlib import Path

from vanilla_training.corpus import load_corpus
from vanilla_training.evaluation import corpus_bleu, corpus_chrf
from vanilla_training.glossary import Glossary, placed, translate_with_glossary
from vanilla_training.translator import load_translator

WORD = re.compile(r"\w+")
MIN_VERSES, MIN_CAPITALISED, MIN_DICE = 20, 0.95, 0.8
TSV = Path(__file__).parent / "results" / "glossary-en-de.tsv"


def proper_names(sources: list[str]) -> set[str]:
    """Words of at least 3 letters capitalised in at least MIN_CAPITALISED of their occurrences (a verse's first
    word left out) and found in at least MIN_VERSES verses."""
    capitalised, occurrences, verses = collections.Counter(), collections.Counter(), collections.Counter()
    for source in sources:
        words = WORD.findall(source)[1:]
        for word in words:
            occurrences[word.lower()] += 1
            capitalised[word.lower()] += word[0].isupper()
        verses.update({word for word in words if word[0].isupper()})
    return {
        word
        for word, count in verses.items()
        if len(word) >= 3
        and count >= MIN_VERSES
        and capitalised[word.lower()] >= MIN_CAPITALISED * occurrences[word.lower()]
    }


def draw_glossary(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Each proper name of the sources with the target word of the highest Dice coefficient, where it is at least
    MIN_DICE."""
    names = proper_names([source for source, _ in pairs])
    name_verses, word_verses, both = collections.Counter(), collections.Counter(), collections.Counter()
    for source, target in pairs:
        here = names & set(WORD.findall(source))
        words = set(WORD.findall(target))
        name_verses.update(here)
        word_verses.update(words)
        both.update((name, word) for name in here for word in words)
    best: dict[str, tuple[float, str]] = {}
    for (name, word), count in both.items():
        dice = 2 * count / (name_verses[name] + word_verses[word])
        best[name] = max(best.get(name, (0.0, "")), (dice, word))
    return {name: word for name, (dice, word) in sorted(best.items()) if dice >= MIN_DICE}


def term_use(glossary: Glossary, sources: list[str], texts: list[str]) -> tuple[int, int]:
    """(terms used, terms due): over the verses' glossary terms, those whose target starts a word of the text."""
    due = [(term, text) for source, text in zip(sources, texts, strict=True) for term in glossary.terms_in(source)]
    return sum(placed(term.target, text) for term, text in due), len(due)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a saved en-de translator (e.g. runs/demo/final)")
    parser.add_argument("--split", choices=("test", "validation"), default="test", help="the split translated")
    parser.add_argument("--limit", type=int, help="translate only the first N verses")
    parser.add_argument("--glossary-out", type=Path, default=TSV, help=f"where the glossary is written ({TSV})")
    args = parser.parse_args(argv)
    translator = load_translator(args.model_dir)
    corpus = load_corpus("en-de")
    terms = draw_glossary([(row["translation"]["en"], row["translation"]["de"]) for row in corpus["train"]])
    args.glossary_out.write_text("en\tde\n" + "".join(f"{s}\t{t}\n" for s, t in terms.items()), encoding="utf-8")
    glossary = Glossary.build(terms, translator.tokenizer)
    test = [row["translation"] for row in corpus[args.split]][: args.limit]
    sources, references = [pair["en"] for pair in test], [pair["de"] for pair in test]

    started = time.perf_counter()
    plain = translator.translate(sources)
    plain_seconds = time.perf_counter() - started
    started = time.perf_counter()
    results = translate_with_glossary(translator, sources, glossary)
    glossary_seconds = time.perf_counter() - started
    with_glossary = [result.text for result in results]

    used_reference, due = term_use(glossary, sources, references)
    rows = []
    for name, texts, seconds in (("without", plain, plain_seconds), ("with", with_glossary, glossary_seconds)):
        used, _ = term_use(glossary, sources, texts)
        bleu, chrf = corpus_bleu(texts, references, "de"), corpus_chrf(texts, references)
        rows.append(
            f"| {name} | {used:,} of {due:,} ({100 * used / due:.1f}%) | {bleu['score']:.2f} | {chrf['score']:.2f} "
            f"| {len(sources) / seconds:.2f} ({seconds:.0f} s) |"
        )
    not_placed = sum(len(result.missing) for result in results)
    verses_with_terms = sum(bool(result.terms) for result in results)
    report = "\n".join(
        [
            f"{len(sources):,} en-de {args.split} verses, model {args.model_dir}, glossary of {len(terms)} names "
            f"({args.glossary_out.name}); {verses_with_terms:,} verses hold a term; the references use "
            f"{used_reference:,} of the {due:,} terms due ({100 * used_reference / due:.1f}%); terms not placed "
            f"(length limit): {not_placed}",
            "",
            "| glossary | term use | BLEU | chrF | verses/s (seconds) |",
            "| --- | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            f"BLEU: {corpus_bleu(plain, references, 'de')['signature']}",
        ]
    )
    print(report)
    return report


if __name__ == "__main__":
    main()
