"""One multilingual model against the per-pair models, every one decoded now in the same way, with sacreBLEU's paired
bootstrap test on each direction; and the directions the model did not train, zero-shot against a pivot inside it.

    python experiments/multilingual_paired.py runs/multilingual --per-pair-runs runs/languages \\
        --json experiments/results/multilingual-paired.json > experiments/results/multilingual-paired.md

The table's directions (those of `language_table.py`, or `--directions`) are each scored on the pair's whole built-in
test split by the multilingual model (a direction it did not train through a pivot inside it where one reaches,
else zero-shot, as `vanilla-translate` would with --allow-zero-shot; the row says which) and by the per-pair model of
the run folder RUNS/demo-PAIR that `language_table.py` trains. Both decode with their own generation config unless
`--beams` and `--length-penalty` set one decoding for all. A win is a higher BLEU with p < 0.05 in sacreBLEU's paired
bootstrap test (`evaluation.paired_bootstrap`, as `sacrebleu --paired-bs`). Then each direction between the model's
languages that it did not train (or those of `--untrained`), on the first `--untrained-verses` verses of the pair's
test split: zero-shot (its own target token) and through a pivot language where two trained directions reach it,
each with its off-target rate (`evaluation.off_target_rate` among the model's languages), the pivot tested against
zero-shot. Prints both tables in Markdown, the wins and the means. Without `--per-pair-runs`, only the second table
(the untrained directions), for a model whose per-pair rivals are not at hand.
"""

import argparse
import json
import sys
from pathlib import Path

from language_table import DIRECTIONS

from vanilla_training.corpus import Direction, load_corpus, parse_pair
from vanilla_training.corpus.direction import pivot_language
from vanilla_training.evaluation import corpus_bleu, corpus_chrf, off_target_rate, paired_bootstrap
from vanilla_training.preprocess import sentences
from vanilla_training.translator import Translator, load_translator, trained_languages


def pair_test_split(direction: Direction, verses: int | None = None) -> tuple[list[str], list[str]]:
    """The sources and references of the direction's own built-in test split (its first `verses`: all for None)."""
    sources, references = sentences(load_corpus(str(direction))["test"], *direction)
    return sources[:verses], references[:verses]


def route_name(translator: Translator, direction: Direction, route: tuple[Direction, ...]) -> str:
    """How the model translated `direction`: "trained", "through en" or "zero-shot"."""
    if len(route) > 1:
        return f"through {route[0].target}"
    return "trained" if direction in translator.directions else "zero-shot"


def per_pair_folder(runs: Path, direction: Direction) -> Path:
    """The per-pair run folder RUNS/demo-SRC-TGT; SystemExit naming one that is missing or of another pair."""
    folder = runs / f"demo-{direction}"
    if not folder.is_dir():
        raise SystemExit(
            f"{folder}: no per-pair run of {direction} (python experiments/language_table.py --runs {runs})"
        )
    recorded = trained_languages(folder).direction
    if recorded != direction:
        raise SystemExit(f"{folder} translates {recorded or 'no recorded direction'}, not {direction}")
    return folder


def scores(predictions: list[str], references: list[str], target: str) -> dict:
    """BLEU with the target's tokenizer and chrF, to two decimals."""
    return {
        "bleu": round(corpus_bleu(predictions, references, target)["score"], 2),
        "chrf": round(corpus_chrf(predictions, references)["score"], 2),
    }


def table_row(multilingual: Translator, per_pair: Translator, direction: Direction, options: dict) -> dict:
    """Both systems' BLEU and chrF on the direction's whole test split, and the paired test of the multilingual model
    (the system) against the per-pair one (the baseline)."""
    sources, references = pair_test_split(direction)
    route = multilingual.route(direction, allow_zero_shot=True)
    one = multilingual.translate_route(sources, route, **options)
    pair = per_pair.translate(sources, **options)
    test = paired_bootstrap(pair, one, references, direction.target)
    return {
        "verses": len(sources),
        "route": route_name(multilingual, direction, route),
        "per_pair": scores(pair, references, direction.target),
        "multilingual": scores(one, references, direction.target),
        "p_value": test.p_value,
        "win": test.win,
        "signature": test.signature,
    }


def untrained_row(multilingual: Translator, direction: Direction, options: dict, verses: int) -> dict:
    """Zero-shot and, where two trained directions reach it, pivot translation of the direction's first `verses` test
    verses: BLEU, chrF and off-target rate of each, and the paired test of the pivot (system) against zero-shot."""
    sources, references = pair_test_split(direction, verses)
    languages = list(multilingual.all_languages)

    def scored(predictions: list[str]) -> dict:
        off_target = off_target_rate(predictions, direction.target, languages)
        return {**scores(predictions, references, direction.target), "off_target": round(off_target, 4)}

    zero_shot = multilingual.translate(sources, target_lang=direction.target, **options)
    row = {"verses": len(sources), "zero_shot": scored(zero_shot)}
    middle = pivot_language(*direction, multilingual.directions)
    if middle is None:
        return row
    route = (Direction(direction.source, middle), Direction(middle, direction.target))
    pivoted = multilingual.translate_route(sources, route, **options)
    test = paired_bootstrap(zero_shot, pivoted, references, direction.target)
    row["pivot"] = {"through": middle, **scored(pivoted)}
    row["p_value"], row["pivot_wins"] = test.p_value, test.win
    row["zero_shot_wins"] = test.baseline_bleu > test.system_bleu and test.significant
    return row


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def table_markdown(rows: dict[str, dict]) -> str:
    """The table's directions: per-pair and multilingual BLEU, their difference, p, win; the wins and the means."""
    lines = [
        "| direction | test verses | multilingual route | per-pair BLEU | multilingual BLEU | difference | p | win |",
        "|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for name, row in rows.items():
        pair, one = row["per_pair"]["bleu"], row["multilingual"]["bleu"]
        lines.append(
            f"| {name} | {row['verses']:,} | {row['route']} | {pair:.2f} | {one:.2f} | {one - pair:+.2f} | "
            f"{row['p_value']:.4f} | {'yes' if row['win'] else 'no'} |"
        )
    pair, one = (mean([row[system]["bleu"] for row in rows.values()]) for system in ("per_pair", "multilingual"))
    lines.append(f"| mean |  |  | {pair:.2f} | {one:.2f} | {one - pair:+.2f} |  | {'yes' if one > pair else 'no'} |")
    wins = [name for name, row in rows.items() if row["win"]]
    lines.append(f"\nthe multilingual model wins {len(wins)} of {len(rows)} (p < 0.05): {', '.join(wins) or 'none'}")
    return "\n".join(lines)


def untrained_markdown(rows: dict[str, dict]) -> str:
    """The directions not trained: zero-shot and pivot BLEU and off-target rate, their difference and p."""
    lines = [
        "| direction | verses | zero-shot BLEU | off target | pivot | pivot BLEU | off target | difference | p |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        zero, pivot = row["zero_shot"], row.get("pivot")
        cells = f"{zero['bleu']:.2f} | {zero['off_target']:.1%}"
        if pivot is None:
            lines.append(f"| {name} | {row['verses']:,} | {cells} | none |  |  |  |  |")
            continue
        difference = pivot["bleu"] - zero["bleu"]
        lines.append(
            f"| {name} | {row['verses']:,} | {cells} | {pivot['through']} | {pivot['bleu']:.2f} | "
            f"{pivot['off_target']:.1%} | {difference:+.2f} | {row['p_value']:.4f} |"
        )
    both = [row for row in rows.values() if "pivot" in row]
    if both:
        zero, pivot = (mean([row[way]["bleu"] for row in both]) for way in ("zero_shot", "pivot"))
        lines.append(
            f"\nwhere a pivot reaches ({len(both)} of {len(rows)}): mean BLEU zero-shot {zero:.2f}, pivot "
            f"{pivot:.2f}; the pivot wins {sum(row['pivot_wins'] for row in both)}, zero-shot "
            f"{sum(row['zero_shot_wins'] for row in both)} (p < 0.05)"
        )
    return "\n".join(lines)


def untrained_directions(multilingual: Translator, spec: str) -> list[Direction]:
    """The directions of `--untrained`: all or none of those the model did not train, or a list of them; SystemExit
    naming one it trained or that is not between its languages."""
    if spec in ("all", "none"):
        return multilingual.untrained_directions if spec == "all" else []
    chosen = [Direction.parse(text.strip()) for text in spec.split(",")]
    if wrong := [str(direction) for direction in chosen if direction not in multilingual.untrained_directions]:
        raise SystemExit(
            f"--untrained {', '.join(wrong)}: not a direction between the model's languages "
            f"({', '.join(multilingual.all_languages)}) that it did not train"
        )
    return chosen


def direction_list(spec: str) -> list[Direction]:
    """`--directions`: comma-separated pairs of the built-in corpus."""
    try:
        return [parse_pair(text.strip()) for text in spec.split(",")]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a multilingual run folder (or its final/ model folder)")
    parser.add_argument(
        "--per-pair-runs",
        type=Path,
        help="the folder of the demo-PAIR run folders (without it: the untrained directions only, no table)",
    )
    parser.add_argument(
        "--directions", type=direction_list, default=",".join(DIRECTIONS), help="comma-separated (default: the eight)"
    )
    parser.add_argument(
        "--untrained",
        default="all",
        help="directions the model did not train, comma-separated, or all (every one between its languages) or none",
    )
    parser.add_argument("--untrained-verses", type=int, default=100, help="test verses of each (default: 100)")
    parser.add_argument("--beams", type=int, help="beam size for every model (default: each model's own)")
    parser.add_argument("--length-penalty", type=float, help="length penalty for every model (default: each's own)")
    parser.add_argument("--json", type=Path, help="write the scores here too")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    multilingual = load_translator(args.run)  # a multilingual model loads without a direction
    if not multilingual.all_languages:
        raise SystemExit(f"{args.run} is not a multilingual model (vanilla-train --languages ...)")
    options = {"num_beams": args.beams, "length_penalty": args.length_penalty}
    options = {name: value for name, value in options.items() if value is not None}
    directions = args.directions if args.per_pair_runs is not None else []
    folders = {direction: per_pair_folder(args.per_pair_runs, direction) for direction in directions}
    chosen = untrained_directions(multilingual, args.untrained)  # every folder and direction checked first
    table = {}
    for direction, folder in folders.items():
        table[str(direction)] = table_row(multilingual, load_translator(folder), direction, options)
        print(f"{direction}: {table[str(direction)]}", file=sys.stderr, flush=True)
    untrained = {}
    for direction in chosen:
        untrained[str(direction)] = untrained_row(multilingual, direction, options, args.untrained_verses)
        print(f"{direction}: {untrained[str(direction)]}", file=sys.stderr, flush=True)
    printed = [table_markdown(table)] if table else []
    if untrained:
        printed.append(untrained_markdown(untrained))
    print("\n\n".join(printed))
    results = {
        "model": str(args.run),
        "decoding": options or "each model's own",
        "table": table,
        "untrained": untrained,
    }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
