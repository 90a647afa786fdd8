"""The table of languages: the demo recipe (10 minutes of training on 2 CPU cores) on eight directions of the
built-in corpus (five script families, into and out of English, and a pair without English), each trained by
`vanilla-train` in a run folder of its own, one at a time, and scored on its test verses (BLEU with the target's
sacreBLEU tokenizer, and chrF).

    python experiments/language_table.py --runs runs/languages            # train what is missing, print the table
    python experiments/language_table.py --runs runs/languages --no-train  # print the table of the runs there

A run folder that already holds a finished run (final/training_results.json) is not trained again. The table
is printed in Markdown, ready for docs/corpus.md; the runs' logs are RUNS/demo-PAIR.log.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

# direction: its scripts. The demo preset trains those outside the Latin script at half its learning rate and with
# 4,000 tokens (`recipe.recipe_for`): at the full rate ru-uk and en-ar ignored their source (experiments/README.md).
DIRECTIONS = {
    "en-de": "Latin to Latin (the main job)",
    "de-en": "Latin to Latin, into English",
    "en-fr": "Latin to Latin",
    "de-ru": "Latin to Cyrillic, without English",
    "en-ar": "Latin to Arabic (right to left)",
    "ar-en": "Arabic to Latin",
    "en-hi": "Latin to Devanagari",
    "ko-en": "Hangul to Latin",
}


def train(pair: str, runs: Path) -> None:
    """`vanilla-train --preset demo --pair PAIR` into RUNS/demo-PAIR, its output in RUNS/demo-PAIR.log."""
    command = [sys.executable, "-m", "vanilla_training.cli.train", "--preset", "demo", "--pair", pair]
    command += ["--output-dir", str(runs / f"demo-{pair}")]
    print(" ".join(["vanilla-train", *command[3:]]), file=sys.stderr, flush=True)
    with (runs / f"demo-{pair}.log").open("w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)


def row(pair: str, results: dict) -> str:
    """One line of the table from a run's training_results.json."""
    test = results["test"]
    tokenizer = test["signature"].split("tok:")[1].split("|")[0]
    multi = test.get("multi_reference", {})
    several = len(multi.get("references", [])) > 1
    references = f"{multi['bleu']:.2f} / {multi['chrf']:.2f} ({len(multi['references'])} refs)" if several else "-"
    minutes = results["total_seconds"] / 60
    return (
        f"| {pair} | {DIRECTIONS[pair]} | {results['recipe']['vocab_size']:,} | {results['recipe']['lr_scale']:g} | "
        f"{results['data']['train_pairs']:,} | "
        f"{test['sentences']:,} | {results['steps']:,} | {minutes:.0f} | {test['bleu']:.2f} ({tokenizer}) | "
        f"{test['chrf']:.2f} | {references} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="folder of the run folders (created if missing)")
    parser.add_argument("--no-train", action="store_true", help="only print the table of the finished runs")
    parser.add_argument("--pairs", default=",".join(DIRECTIONS), help="directions (default: all eight)")
    args = parser.parse_args(argv)
    pairs = args.pairs.split(",")
    unknown = [pair for pair in pairs if pair not in DIRECTIONS]
    if unknown:
        parser.error(f"--pairs: {', '.join(unknown)} not among {', '.join(DIRECTIONS)}")
    args.runs.mkdir(parents=True, exist_ok=True)
    print(
        "| direction | scripts | vocabulary | learning rate (x equation 3) | training pairs | test verses | steps "
        "| minutes | test BLEU (tokenizer) | chrF | all references: BLEU / chrF |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pair in pairs:
        finished = args.runs / f"demo-{pair}" / "final" / "training_results.json"
        if not finished.is_file() and not args.no_train:
            train(pair, args.runs)
        if finished.is_file():
            print(row(pair, json.loads(finished.read_text())), flush=True)


if __name__ == "__main__":
    main()
