"""The README's main job as a 2-core CPU without bfloat16 runs it (the reference of issue 62: an AMD EPYC of the Zen 3
kind, AVX2 only, whose fp32 matmul peak `benchmarks/train_speed.py` measured at 143 GFLOP/s), on whatever CPU this
is: float32, torch's kernels held to AVX2 (run it under `benchmarks/avx2_emulation.sh`, which this script checks),
and the demo preset's training budget scaled by the ratio of the reference's fp32 matmul peak to this machine's (with
its kernels held), so that the run does the reference's work in steps, not in minutes.

    bash benchmarks/avx2_emulation.sh .venv/bin/python benchmarks/avx2_main_job.py --output-dir runs/demo-avx2
    bash benchmarks/avx2_emulation.sh .venv/bin/python benchmarks/avx2_main_job.py --output-dir runs/x -- --seed 7

Arguments after `--` go to `vanilla-train` as they are. It prints the peak and the budget, then vanilla-train's own
output.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import torch
from common import measure_peak

from vanilla_training.recipe import RECIPES

REFERENCE_PEAK = 143e9  # FLOP/s: the fp32 matmul peak of the Zen 3 EPYC of issue 62 (train_speed.py, n = 2048)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", required=True, type=Path, help="vanilla-train's --output-dir")
    parser.add_argument("train_options", nargs="*", help="more vanilla-train options, after --")
    args = parser.parse_args()
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        sys.exit("run this under benchmarks/avx2_emulation.sh: torch's kernels are not held to AVX2")
    peak = measure_peak({"n": 2048, "repeats": 10, "device": "cpu", "dtype": "float32"})["flops"]
    minutes = RECIPES["demo"].max_train_minutes * REFERENCE_PEAK / peak
    print(f"fp32 matmul peak with kernels held to AVX2: {peak / 1e9:.1f} GFLOP/s (reference 143): {minutes:.2f} min")
    command = [
        str(Path(sys.executable).with_name("vanilla-train")),
        *("--preset", "demo", "--precision", "fp32", "--max-train-minutes", f"{minutes:.2f}"),
        *("--output-dir", str(args.output_dir), *args.train_options),
    ]
    print(" ".join(command), flush=True)
    sys.exit(subprocess.run(command).returncode)


if __name__ == "__main__":
    main()
