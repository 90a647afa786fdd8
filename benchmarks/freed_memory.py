"""`vanilla-train` with glibc's malloc set to keep the memory a step frees (vanilla_training/allocator.py, what the
command does at its start) against glibc's defaults (the same command with that setting replaced by a no-op), each a
whole process, the two in turn.

    python benchmarks/freed_memory.py                   # demo size, 8,000 tokens, 400 steps on the built-in corpus
    python benchmarks/freed_memory.py --rounds 1 -- --train-file t.jsonl --validation-file v.jsonl --max-steps 5

Everything after `--` replaces the default `vanilla-train` options; each run gets a fresh `--output-dir`. Reported per
setting, median over `--rounds` (min and max beside it): wall seconds, system (kernel) seconds and minor page faults
of the finished process, from the kernel's accounting of children; then the wall-time ratio, round by round.
"""

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_OPTIONS = (
    "--preset demo --vocab-size 8000 --max-steps 400 --max-train-minutes 0 --bleu-sentences 0 --test-limit 1"
)
SETTINGS = ("glibc's defaults", "freed memory kept")
# The command as the console script runs it, with the setting switched off for glibc's defaults.
LAUNCH = """
import sys
import vanilla_training.allocator as allocator
if sys.argv[1] == "off":
    allocator.reuse_freed_memory = lambda: False
from vanilla_training.cli.train import console_main
sys.argv = ["vanilla-train", *sys.argv[2:]]
console_main()
"""


def run_once(setting: str, options: list[str], output_dir: Path) -> dict[str, float]:
    """Wall seconds, system seconds and minor page faults of one `vanilla-train` process."""
    switch = "off" if setting == SETTINGS[0] else "on"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-c", LAUNCH, switch, *options, "--output-dir", str(output_dir)]
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"vanilla-train failed ({setting}):\n{done.stderr[-3000:]}")
    return {"wall": wall, "system": after.ru_stime - before.ru_stime, "faults": after.ru_minflt - before.ru_minflt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting, in turn (default: 3)")
    parser.add_argument("options", nargs="*", help=f"vanilla-train's options after -- (default: {DEFAULT_OPTIONS})")
    args = parser.parse_args()
    if args.rounds <= 0:
        parser.error("--rounds must be positive")
    options = args.options or DEFAULT_OPTIONS.split()
    runs: dict[str, list[dict[str, float]]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="freed-memory-") as folder:
        for round_index in range(args.rounds):
            for setting in SETTINGS:
                output_dir = Path(folder) / f"{SETTINGS.index(setting)}-{round_index}"
                runs[setting].append(run_once(setting, options, output_dir))
    print(f"vanilla-train {' '.join(options)}; {args.rounds} round(s), whole processes")
    print("\n| setting | wall s | system s | minor page faults |\n|---|---:|---:|---:|")
    for setting, measured in runs.items():
        cells = []
        for field, form in (("wall", "{:.1f}"), ("system", "{:.1f}"), ("faults", "{:,.0f}")):
            values = [run[field] for run in measured]
            median, low, high = (form.format(v) for v in (statistics.median(values), min(values), max(values)))
            cells.append(f"{median} ({low}-{high})")
        print(f"| {setting} | {' | '.join(cells)} |")
    ratios = [kept["wall"] / default["wall"] for default, kept in zip(*runs.values(), strict=True)]
    print(f"\nwall time, kept / defaults: median {statistics.median(ratios):.2f} (rounds: "
          f"{', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip


if __name__ == "__main__":
    main()
