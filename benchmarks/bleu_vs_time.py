"""Test BLEU against training time: what waiting longer gives, from one long run of a recipe.

    python -m training.train --preset demo --output-dir runs/long --max-steps 12000 --max-train-minutes 0 \\
        --keep-checkpoints
    python benchmarks/bleu_vs_time.py runs/long --steps 2400,6000,12000

The paper's schedule (equation 3) does not depend on the run's length, and the data order is the same, so the
checkpoints of one long run at step N are those a run of `--max-steps N` would have saved. At each step of `--steps`,
this script averages the last `--average-last` checkpoints up to it (as `training.train` does at the end of a run),
translates the test set with the paper's decoding (beam 4, length penalty 0.6) and prints a markdown table: step,
the training time up to it (read from the run's log, which the Trainer stamps with elapsed seconds), test BLEU with
the sacreBLEU signature, and one example translation.
"""

import argparse
import json
from pathlib import Path

import datasets
from transformers import AutoTokenizer
from transformers.trainer_utils import sort_checkpoints

from modeling_vanilla import paper_generation_config
from vanilla_training import preprocess  # the training/ folder, as installed
from vanilla_training.average_checkpoints import average_checkpoints
from vanilla_training.evaluation import corpus_bleu, translate


def checkpoints_up_to(run_dir: Path, step: int, count: int) -> list[str]:
    """The last `count` checkpoints of the run at or before `step`; ValueError if there is none at `step`."""
    found = [c for c in sort_checkpoints(str(run_dir)) if int(c.rsplit("-", 1)[1]) <= step]
    if not found or not found[-1].endswith(f"checkpoint-{step}"):
        raise ValueError(
            f"{run_dir} holds no checkpoint-{step}: train with --keep-checkpoints and a --save-steps dividing each step"
        )
    return found[-count:]


def elapsed_seconds(run_dir: Path, step: int) -> float | None:
    """Training seconds up to `step`, interpolated from the `elapsed` stamps the run logged (None if absent)."""
    state = json.loads((Path(sort_checkpoints(str(run_dir))[-1]) / "trainer_state.json").read_text())
    stamps = [(entry["step"], entry["elapsed"]) for entry in state["log_history"] if "elapsed" in entry]
    before = [stamp for stamp in stamps if stamp[0] <= step]
    return before[-1][1] if before else None


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="the output folder of a run with --keep-checkpoints")
    parser.add_argument("--steps", required=True, help="comma-separated steps to evaluate at")
    parser.add_argument("--average-last", type=int, default=5, help="checkpoints averaged at each step")
    parser.add_argument("--pair", default="en-de", help="the built-in corpus whose test split is translated")
    parser.add_argument("--test-file", help="a JSONL test file instead (the layout training.train reads)")
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
        model = average_checkpoints(checkpoints_up_to(args.run_dir, step, args.average_last))
        model.generation_config = paper_generation_config(model.config)
        predictions = translate(model, tokenizer, sources)
        bleu = corpus_bleu(predictions, references)
        seconds = elapsed_seconds(args.run_dir, step)
        minutes = "-" if seconds is None else f"{seconds / 60:.1f}"
        rows.append(f"| {step:,} | {minutes} | {bleu['score']:.2f} | {predictions[0]} |")
        print(rows[-1], flush=True)
    header = f"Test BLEU ({len(sources)} sentences, beam 4, {bleu['signature']}), last {args.average_last} averaged"
    columns = ["| step | training minutes | test BLEU | first test translation |", "| ---: | ---: | ---: | --- |"]
    table = [header, "", *columns, *rows]
    report = "\n".join(table)
    print(report)
    return report


if __name__ == "__main__":
    main()
