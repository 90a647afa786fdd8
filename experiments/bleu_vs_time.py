"""Test BLEU against training time: what waiting longer gives, from one long run of a recipe.

    python -m vanilla_training.cli.train --preset demo --output-dir runs/long --max-steps 12000 --max-train-minutes 0 \\
        --keep-checkpoints
    python experiments/bleu_vs_time.py runs/long --steps 2400,6000,12000

The paper's schedule (equation 3) does not depend on the run's length, and the data order is the same, so the
checkpoints of one long run at step N are those a run of `--max-steps N` would have saved. At each step of `--steps`,
this script averages the last `--average-last` checkpoints up to it (as training does at the end of a run),
translates the test set with the paper's decoding (beam 4, length penalty 0.6) and prints a markdown table: step,
the training time up to it (read from the run's log, which the Trainer stamps with elapsed seconds), test BLEU with
the sacreBLEU signature (tokenized for the target as `vanilla-train` scores it, `evaluation.bleu_tokenizer`: Korean
and Japanese by character, Chinese "zh", others 13a), and one example translation. With `--selection best` (the
demo recipes' choice) it averages instead the checkpoints ending at the evaluation of best validation BLEU among
those up to the step, as a run stopped there by its time budget would have done.
"""

import argparse
import json
from pathlib import Path

import datasets
from transformers import AutoTokenizer
from transformers.trainer_utils import sort_checkpoints

from modeling_vanilla import paper_generation_config
from vanilla_training import checkpoints, preprocess
from vanilla_training.average_checkpoints import average_checkpoints
from vanilla_training.evaluation import corpus_bleu
from vanilla_training.translator import translate


def checkpoints_up_to(run_dir: Path, step: int, count: int) -> list[str]:
    """The last `count` checkpoints of the run at or before `step`; ValueError if there is none at `step`."""
    found = [c for c in sort_checkpoints(str(run_dir)) if int(c.rsplit("-", 1)[1]) <= step]
    if not found or not found[-1].endswith(f"checkpoint-{step}"):
        raise ValueError(
            f"{run_dir} holds no checkpoint-{step}: train with --keep-checkpoints and a --save-steps dividing each step"
        )
    return found[-count:]


def log_history(run_dir: Path) -> list[dict]:
    """The log of the run, from its last checkpoint's trainer state."""
    return json.loads((Path(sort_checkpoints(str(run_dir))[-1]) / "trainer_state.json").read_text())["log_history"]


def best_window(run_dir: Path, step: int, count: int) -> list[str]:
    """The `count` checkpoints ending at the evaluation of best validation BLEU at or before `step` (the first of
    equal ones, as transformers' `metric_for_best_model` keeps it)."""
    evaluations = [(e["step"], e["eval_bleu"]) for e in log_history(run_dir) if "eval_bleu" in e and e["step"] <= step]
    if not evaluations:
        raise ValueError(f"{run_dir} logged no validation BLEU up to step {step}")
    best = max(evaluations, key=lambda evaluation: evaluation[1])[0]
    return checkpoints.window(run_dir, count, last_step=best)


def elapsed_seconds(run_dir: Path, step: int) -> float | None:
    """Training seconds up to `step`: the last `elapsed` stamp the run logged at or before it (None if none)."""
    stamps = [(entry["step"], entry["elapsed"]) for entry in log_history(run_dir) if "elapsed" in entry]
    before = [stamp for stamp in stamps if stamp[0] <= step]
    return before[-1][1] if before else None


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="the output folder of a run with --keep-checkpoints")
    parser.add_argument("--steps", required=True, help="comma-separated steps to evaluate at")
    parser.add_argument("--average-last", type=int, default=5, help="checkpoints averaged at each step")
    parser.add_argument(
        "--selection", choices=["last", "best"], default="last", help="average the last checkpoints or the best's"
    )
    parser.add_argument("--pair", default="en-de", help="the built-in corpus whose test split is translated")
    parser.add_argument("--test-file", help="a JSONL test file instead (the layout vanilla-train reads)")
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.run_dir)
    source, target = args.pair.split("-")
    if args.test_file:
        test = datasets.load_dataset("json", data_files={"test": args.test_file})["test"]
    else:
        test = preprocess.load_splits(args.pair)["test"]
    sources, references = preprocess.sentences(test, source, target)
    rows = []
    for step in (int(step) for step in args.steps.split(",")):
        chosen = checkpoints_up_to(args.run_dir, step, args.average_last)
        if args.selection == "best":
            chosen = best_window(args.run_dir, step, args.average_last)
        model = average_checkpoints(chosen)
        model.generation_config = paper_generation_config(model.config)
        predictions = translate(model, tokenizer, sources)
        bleu = corpus_bleu(predictions, references, target)  # the target's tokenizer, as vanilla-train scores it
        seconds = elapsed_seconds(args.run_dir, step)
        minutes = "-" if seconds is None else f"{seconds / 60:.1f}"
        averaged = f"{Path(chosen[0]).name.split('-')[1]}-{Path(chosen[-1]).name.split('-')[1]}"
        rows.append(f"| {step:,} | {minutes} | {averaged} | {bleu['score']:.2f} | {predictions[0]} |")
        print(rows[-1], flush=True)
    chosen_by = "the last" if args.selection == "last" else "those ending at the best validation BLEU,"
    header = f"Test BLEU ({len(sources)} sentences, beam 4, {bleu['signature']}), "
    header += f"{chosen_by} {args.average_last} averaged"
    columns = ["| step | training minutes | checkpoints averaged | test BLEU | first test translation |"]
    columns.append("| ---: | ---: | --- | ---: | --- |")
    table = [header, "", *columns, *rows]
    report = "\n".join(table)
    print(report)
    return report


if __name__ == "__main__":
    main()
