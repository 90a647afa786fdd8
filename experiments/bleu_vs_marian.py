"""Quality bar: train our model and transformers' MarianMTModel at the same size, with the same data, tokenizer,
recipe, steps and seed, and print the test BLEU of both (with the sacreBLEU signature).

    python experiments/bleu_vs_marian.py                      # the demo recipe, a few minutes per model on 2 cores
    python experiments/bleu_vs_marian.py --max-steps 3000      # longer runs
    python experiments/bleu_vs_marian.py --ours-run runs/demo  # ours from a finished run of the same recipe

Both models train the same number of steps: the recipe's (its time budget, `--max-train-minutes`, is turned off),
or with `--ours-run` the steps that run trained (where the demo's 10-minute budget ended it, Marian trains as many)
in the precision it trained in.

MarianMTModel is configured as the same architecture: post-LN, ReLU, embeddings scaled by sqrt(d_model), one
shared vocabulary tied three ways, sinusoidal positions (Marian's sin-then-cos layout), same special tokens.
What stays different is each implementation's own weight initialisation. (`marian_like` is in
benchmarks/systems.py, which the speed benchmarks share.)
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from systems import marian_like  # noqa: E402

from vanilla_training.cli.train import main as train
from vanilla_training.recipe import RECIPES


def finished_run(run_dir: Path, expected: dict) -> dict:
    """The results of a finished `vanilla-train` run of ours; SystemExit naming the first setting that differs
    from `expected` (preset, pair, seed), since only the same recipe makes the comparison fair."""
    path = run_dir / "final" / "training_results.json"
    if not path.is_file():
        raise SystemExit(f"--ours-run {run_dir}: no {path} (not a finished vanilla-train run)")
    results = json.loads(path.read_text())
    found = {
        "preset": results.get("preset"),
        "pair": results.get("data", {}).get("pair"),
        "seed": results.get("seed"),
    }
    for key, value in expected.items():
        if found[key] != value:
            raise SystemExit(
                f"--ours-run {run_dir} was trained with {key} {found[key]!r}, this comparison uses {value!r}"
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/bleu_vs_marian")
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--pair", default="en-de")
    parser.add_argument("--max-steps", type=int, help="overrides the preset (not with --ours-run)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ours-run",
        type=Path,
        help="a finished run folder of ours with the same preset, pair and seed (the README's main "
        "job): its results and tokenizer are used instead of training ours again, and Marian trains its steps",
    )
    args = parser.parse_args()
    if args.ours_run and args.max_steps:
        parser.error("--ours-run compares at the steps that run trained; --max-steps does not apply")
    common = ["--preset", args.preset, "--pair", args.pair, "--seed", str(args.seed), "--show", "0"]
    root = Path(args.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    results = {}
    if args.ours_run:
        ours_dir = args.ours_run
        results["vanilla"] = finished_run(ours_dir, {"preset": args.preset, "pair": args.pair, "seed": args.seed})
        steps, precision = str(results["vanilla"]["steps"]), results["vanilla"]["precision"]
        common += ["--max-steps", steps, "--max-train-minutes", "0", "--precision", precision]
    else:
        ours_dir = root / "vanilla"
        steps = args.max_steps or RECIPES[args.preset].max_steps
        common += ["--max-steps", str(steps), "--max-train-minutes", "0"]
        results["vanilla"] = train(["--output-dir", str(ours_dir), *common])
    # The same tokenizer file for both: Marian's run loads the one our run trained.
    results["marian"] = train(
        ["--output-dir", str(root / "marian"), "--tokenizer", str(ours_dir / "final"), *common],
        model_factory=marian_like,
    )
    rows = []
    for name, result in results.items():
        test = result["test"]
        cells = [name, f"{test['bleu']:.2f}", result["steps"], result["train_seconds"], test["signature"]]
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    header = "| model | test BLEU | steps | train seconds | sacreBLEU signature |"
    table = "\n".join([header, "|---|---|---|---|---|", *rows])
    difference = results["vanilla"]["test"]["bleu"] - results["marian"]["test"]["bleu"]
    print(f"\n{table}\n\nvanilla - marian = {difference:+.2f} BLEU ({args.preset} recipe, {args.pair})")
    (root / "results.json").write_text(json.dumps({"table": table, "difference": difference}, indent=2))


if __name__ == "__main__":
    main()
