"""Recipe variants at a fixed number of steps: which change to the demo recipe buys test BLEU per step, over seeds.

Every variant is `vanilla-train --preset demo` plus its options, stopped at `--steps` optimizer steps instead of the
10-minute budget, so runs on any machine (a GPU included) train the same steps as the main job does on 2 CPU
cores; a change that costs time per step must then be weighed against the steps it loses on the CPU. Runs go side
by side, `--parallel` at a time, one thread each; each in RUNS/VARIANT-sSEED (its output in the `.log` beside it).
On one GPU, start CUDA MPS first (`nvidia-cuda-mps-control -d`) so that the runs' small kernels share it.

    python experiments/fixed_steps_sweep.py --runs runs/sweep --steps 3000 --seeds 1 2 --parallel 8
    python experiments/fixed_steps_sweep.py --runs runs/sweep --steps 3000 --seeds 1 2 --no-train   # the table

The table: test BLEU (WEB wording, the headline), the KJV and BBE wordings of the source, the best validation BLEU,
per variant and seed, and each variant's difference with the baseline, seed by seed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {
    "baseline": [],
    "average-10": ["--average-last", "10"],
    "average-20": ["--average-last", "20"],
    "label-smoothing-0": ["--label-smoothing", "0"],
    "lr-1.5-warmup-900": ["--lr-scale", "1.5", "--warmup-steps", "900"],
    "warmup-200": ["--warmup-steps", "200"],
    "vocab-2000": ["--vocab-size", "2000"],
    "vocab-8000": ["--vocab-size", "8000"],
    "vocab-12000": ["--vocab-size", "12000"],
    "vocab-16000": ["--vocab-size", "16000"],
}


def command(variant: str, seed: int, steps: int, runs: Path) -> list[str]:
    """The `vanilla-train` command of one run."""
    return [
        sys.executable, "-m", "vanilla_training.cli.train", "--preset", "demo", "--max-train-minutes", "0",
        "--max-steps", str(steps), "--seed", str(seed), *VARIANTS[variant],
        "--output-dir", str(runs / f"{variant}-s{seed}"),
    ]  # fmt: skip


def train(jobs: list[tuple[str, int]], steps: int, runs: Path, parallel: int) -> None:
    """Runs the jobs not finished yet, `parallel` at a time, one thread each."""
    pending = [job for job in jobs if not (runs / f"{job[0]}-s{job[1]}" / "final" / "training_results.json").exists()]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    running: list[tuple[subprocess.Popen, str]] = []
    while pending or running:
        while pending and len(running) < parallel:
            variant, seed = pending.pop(0)
            name = f"{variant}-s{seed}"
            with (runs / f"{name}.log").open("w") as log:  # the child holds its own copy of the file
                process = subprocess.Popen(
                    command(variant, seed, steps, runs), stdout=log, stderr=subprocess.STDOUT, env=environment
                )
            running.append((process, name))
            print(f"started {name}", file=sys.stderr, flush=True)
        time.sleep(5)
        for process, name in [entry for entry in running if entry[0].poll() is not None]:
            running.remove((process, name))
            print(f"{name} ended with {process.returncode}", file=sys.stderr, flush=True)


def scores(results: dict) -> dict[str, float]:
    """Test BLEU by source wording and the best validation BLEU of one run."""
    test = results["test"]
    by_wording = {bb_name: entry["bleu"] for bb_name, entry in test.get("sources", {}).items()}
    validation = [entry["eval_bleu"] for entry in results["log_history"] if "eval_bleu" in entry]
    return {
        "WEB": test["bleu"],
        "KJV": by_wording.get("k", float("nan")),  # bible.db's bbName of each English version
        "BBE": by_wording.get("3", float("nan")),
        "validation": max(validation, default=float("nan")),
    }


def table(variants: list[str], seeds: list[int], runs: Path) -> str:
    """The Markdown table of the finished runs; "vs baseline" is the mean of the seed-by-seed differences with the
    baseline, over the seeds both finished."""
    lines = [
        "| variant | options | seeds | test BLEU (WEB) by seed | mean | vs baseline, same seeds | KJV mean | BBE mean |"
        " best validation BLEU mean |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    found = {
        (variant, seed): scores(json.loads(path.read_text()))
        for variant in variants
        for seed in seeds
        if (path := runs / f"{variant}-s{seed}" / "final" / "training_results.json").exists()
    }
    for variant in variants:
        rows = {seed: found[variant, seed] for seed in seeds if (variant, seed) in found}
        if not rows:
            continue
        mean = {key: statistics.mean(row[key] for row in rows.values()) for key in next(iter(rows.values()))}
        baseline = {seed: found["baseline", seed]["WEB"] for seed in rows if ("baseline", seed) in found}
        paired = [rows[seed]["WEB"] - web for seed, web in baseline.items()]
        gap = f"{statistics.mean(paired):+.2f}" if paired else "-"
        by_seed = ", ".join(f"{row['WEB']:.2f}" for row in rows.values())
        lines.append(
            f"| {variant} | `{' '.join(VARIANTS[variant]) or '(none)'}` | {len(rows)} | {by_seed} | "
            f"{mean['WEB']:.2f} | {gap} | {mean['KJV']:.2f} | {mean['BBE']:.2f} | {mean['validation']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="folder of the run folders (created if missing)")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps of every run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--parallel", type=int, default=1, help="runs side by side, one thread each")
    parser.add_argument("--no-train", action="store_true", help="only print the table of the finished runs")
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.parallel <= 0:
        parser.error("--steps and --parallel must be positive")
    args.runs.mkdir(parents=True, exist_ok=True)
    if not args.no_train:
        jobs = [(variant, seed) for seed in args.seeds for variant in args.variants]
        train(jobs, args.steps, args.runs, args.parallel)
    print(table(args.variants, args.seeds, args.runs))


if __name__ == "__main__":
    main()
