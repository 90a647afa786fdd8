"""The measurement that decides issue 52: one multilingual model against the per-pair demo models on the table of
languages' eight directions (`language_table.py`), each scored on its pair's own built-in test split, the one the
per-pair model was scored on (BLEU with the target's sacreBLEU tokenizer, and chrF; the first free version a side).

    python experiments/multilingual_table.py runs/multilingual --json experiments/results/multilingual-table.json

The multilingual split holds out the same books as every pair's split (`corpus/pairs.py`'s rule), so no verse of these
test splits, in any language, was trained on. The per-pair figures are read from their recorded results (the rows of
docs/corpus.md's table); the multilingual model decodes each direction with its own generation config. Prints a
Markdown table, the directions where the one model wins, and the means.
"""

import argparse
import json
import sys
from pathlib import Path

from language_table import DIRECTIONS

from vanilla_training.corpus import load_corpus, parse_pair
from vanilla_training.evaluation import corpus_bleu, corpus_chrf
from vanilla_training.preprocess import sentences
from vanilla_training.translator import load_translator

RESULTS = Path(__file__).parent / "results"
# direction: the recorded run of its per-pair demo model (docs/corpus.md's table of languages)
PER_PAIR = {
    "en-de": "demo-vocab-8000-freed-memory-epyc-2026-12-04.json",
    "de-en": "demo-de-en-8000-epyc-2026-12-04.json",
    "en-fr": "demo-en-fr-8000-epyc-2026-12-04.json",
    "de-ru": "demo-de-ru-epyc-2026-12-06.json",
    "en-ar": "demo-en-ar-2026-12-04.json",
    "ar-en": "demo-ar-en-2026-12-04.json",
    "en-hi": "demo-en-hi-2026-12-04.json",
    "ko-en": "demo-ko-en-2026-12-04.json",
}


def per_pair_scores(direction: str) -> dict:
    """BLEU, chrF and test size of the direction's per-pair demo model, from its recorded results."""
    test = json.loads((RESULTS / PER_PAIR[direction]).read_text())["test"]
    return {"bleu": test["bleu"], "chrf": test["chrf"], "sentences": test["sentences"]}


def multilingual_scores(translator, direction: str) -> dict:
    """BLEU and chrF of the multilingual model on the direction's own test split."""
    source, target = parse_pair(direction)
    sources, references = sentences(load_corpus(direction)["test"], source, target)
    predictions = translator.translate(sources, target_lang=target)
    return {
        "bleu": round(corpus_bleu(predictions, references, target)["score"], 2),
        "chrf": round(corpus_chrf(predictions, references)["score"], 2),
        "sentences": len(sources),
    }


def markdown(rows: dict[str, dict]) -> str:
    """The table: per-pair and multilingual BLEU / chrF by direction, their differences, and the means."""
    means = {
        system: {metric: sum(row[system][metric] for row in rows.values()) / len(rows) for metric in ("bleu", "chrf")}
        for system in ("per_pair", "multilingual")
    }
    lines = [
        "| direction | test verses | per-pair BLEU / chrF | multilingual BLEU / chrF | difference (BLEU / chrF) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in [*rows.items(), ("mean", means)]:
        pair, one = row["per_pair"], row["multilingual"]
        verses = f"{one['sentences']:,}" if "sentences" in one else ""
        if "sentences" in one and one["sentences"] != pair["sentences"]:  # the split changed since the per-pair run
            verses += f" (per-pair: {pair['sentences']:,})"
        lines.append(
            f"| {name} | {verses} | {pair['bleu']:.2f} / {pair['chrf']:.2f} | {one['bleu']:.2f} / {one['chrf']:.2f} | "
            f"{one['bleu'] - pair['bleu']:+.2f} / {one['chrf'] - pair['chrf']:+.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a multilingual run folder (or its final/ model folder)")
    parser.add_argument("--directions", default=",".join(DIRECTIONS), help="comma-separated (default: the eight)")
    parser.add_argument("--json", type=Path, help="write the scores here too")
    args = parser.parse_args(argv)
    directions = args.directions.split(",")
    unknown = [d for d in directions if d not in PER_PAIR]
    if unknown:
        parser.error(f"no per-pair result recorded for {', '.join(unknown)} (choose from {', '.join(PER_PAIR)})")
    translator = load_translator(args.run)  # a multilingual model loads without a direction
    if not translator.all_languages:
        parser.error(f"{args.run} is not a multilingual model (vanilla-train --languages ...)")
    rows = {}
    for direction in directions:
        rows[direction] = {
            "per_pair": per_pair_scores(direction),
            "multilingual": multilingual_scores(translator, direction),
        }
        print(f"{direction}: {rows[direction]['multilingual']}", file=sys.stderr, flush=True)
    print(markdown(rows))
    for metric in ("bleu", "chrf"):
        wins = [d for d, row in rows.items() if row["multilingual"][metric] > row["per_pair"][metric]]
        print(f"\nthe multilingual model wins on {metric}: {len(wins)} of {len(rows)} ({', '.join(wins) or 'none'})")
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.run), "directions": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
