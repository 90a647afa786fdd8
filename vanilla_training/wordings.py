"""Scores on the built-in corpus's test split beyond the headline: against every free target version at once
(multi-reference BLEU and chrF), and with every free source version's wording of the same verses as input (how
well a model copes with a source worded otherwise than its training data)."""

from collections.abc import Callable
from pathlib import Path

from .corpus import VERSIONS, load_corpus, load_test_versions, parse_pair
from .evaluation import corpus_bleu, corpus_chrf


def wording_scores(
    translate: Callable[[list[str]], list[str]],
    pair: str,
    data_dir: Path | None = None,
    predictions: list[str] | None = None,
) -> dict:
    """Score ``translate`` (source sentences -> translations, in order) on the test split of ``pair``.

    ``predictions`` are the translations of the test split's own sources (the headline's), if already made; they
    are reused for the first source version. Returns::

        {"multi_reference": {"references": [bbName, ...], "bleu": {...}, "chrf": {...}},
         "sources": {bbName: {"name": "King James Version 1611/1769", "verses": 1866, "bleu": {...},
                              "chrf": {...}}, ...}}

    The source rows score against the first target version (as the headline does), each on the test verses that
    its version has (a version may lack a verse); BLEU uses the target language's tokenizer.
    """
    source, target = parse_pair(pair)
    test = load_corpus(pair, data_dir)["test"]["translation"]
    rows = load_test_versions(pair, data_dir)
    if not rows:
        raise ValueError(f"the test split of {pair} is empty")
    source_versions, target_versions = list(rows[0]["sources"]), list(rows[0]["references"])
    if predictions is None:
        predictions = translate([row[source] for row in test])
    if len(predictions) != len(rows):
        raise ValueError(f"{len(predictions):,} predictions for the {len(rows):,} test verses of {pair}")
    references = [[row["references"][bb] for bb in target_versions] for row in rows]
    scores: dict = {
        "multi_reference": {
            "references": target_versions,
            "bleu": corpus_bleu(predictions, references, target),
            "chrf": corpus_chrf(predictions, references),
        },
        "sources": {},
    }
    first_references = [row[target] for row in test]
    for index, bb in enumerate(source_versions):
        kept = [i for i, row in enumerate(rows) if row["sources"][bb]]
        if index == 0:  # the test split's own sources: the headline's translations
            outputs = [predictions[i] for i in kept]
        else:
            outputs = translate([rows[i]["sources"][bb] for i in kept])
        wanted = [first_references[i] for i in kept]
        version = VERSIONS[bb]
        scores["sources"][bb] = {
            "name": f"{version.name} {version.year}",
            "verses": len(kept),
            "bleu": corpus_bleu(outputs, wanted, target),
            "chrf": corpus_chrf(outputs, wanted),
        }
    return scores


def rounded_wording_scores(scores: dict) -> dict:
    """:func:`wording_scores` as a run's results record it: scores to two decimals beside their signatures."""

    def row(entry: dict) -> dict:
        kept = {key: value for key, value in entry.items() if key not in ("bleu", "chrf")}
        return {
            **kept,
            "bleu": round(entry["bleu"]["score"], 2),
            "signature": entry["bleu"]["signature"],
            "chrf": round(entry["chrf"]["score"], 2),
            "chrf_signature": entry["chrf"]["signature"],
        }

    return {
        "multi_reference": row(scores["multi_reference"]),
        "sources": {bb: row(entry) for bb, entry in scores["sources"].items()},
    }


def print_wording_scores(rounded: dict) -> None:
    """Print :func:`rounded_wording_scores`: the multi-reference line (where the target has several free versions),
    then one line per source wording."""
    multi = rounded["multi_reference"]
    names = ", ".join(f"{VERSIONS[bb].name} {VERSIONS[bb].year}" for bb in multi["references"])
    count = len(multi["references"])
    if count > 1:  # with one free target version this is the headline itself
        print(f"test BLEU {multi['bleu']:.2f}, chrF {multi['chrf']:.2f} against {count} references ({names})")
        print(f"  BLEU {multi['signature']}\n  chrF {multi['chrf_signature']}")
    for entry in rounded["sources"].values():
        scores = f"BLEU {entry['bleu']:.2f}, chrF {entry['chrf']:.2f}"
        print(f"  source worded as the {entry['name']}: {scores} ({entry['verses']:,} verses)")
