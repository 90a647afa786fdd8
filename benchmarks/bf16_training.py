"""bfloat16 against float32 training on the CPU: the bare model step and the main job's training loop.

    python benchmarks/bf16_training.py                      # 3 rounds of 300 loop steps, the bare step in between
    python benchmarks/bf16_training.py --steps 60 --rounds 1 --bare-steps 4   # smoke
    python benchmarks/bf16_training.py --dropout 0.1                        # the same with dropout 0.1

Loop: the training job with the demo recipe (real data, token-budget batches, the recipe's checkpoints) for `--steps`
steps (one evaluation, of the loss, at the end), one fresh process per run, the variants alternating over `--rounds`
rounds; seconds per step from the Trainer's `train_runtime`. The variants: each precision as the main job runs (bf16
with eager attention), and each without checkpoints (`--save-steps` past the run), which shows what saving costs.

`--dropout` sets the model's dropout in both (default: the demo recipe's, 0): dropout's random masks cost as much in
bf16 as in fp32, so it narrows bf16's lead.

Bare step: forward, label-smoothed loss, backward and Adam of the demo model, alternating in one process between fp32
with sdpa attention (the model's default), bf16 autocast with sdpa, and bf16 autocast with eager attention (what
`vanilla-train` uses for bf16 on a CPU), one model each, built from one seed, on the shapes of the loop's own
batches (the token-budget batches of the same data, in their order) and on one fixed shape (64 x 32 tokens);
median milliseconds.

Prints a markdown table with each variant's median, min and max and its ratio to fp32 (> 1: faster than fp32).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers.trainer_pt_utils import LabelSmoother

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from vanilla_training import preprocess, recipe
from vanilla_training.batching import TokenBudgetBatchSampler

DEMO = recipe.RECIPES["demo"]


def loop_seconds_per_step(precision: str, steps: int, save: bool, dropout: float, output_dir: Path) -> float:
    """Seconds per step of `vanilla-train --preset demo` for `steps` steps in a fresh process."""
    command = [sys.executable, "-m", "vanilla_training.cli.train", "--preset", "demo", "--output-dir", str(output_dir)]
    command += ["--dropout", str(dropout)]
    command += ["--max-steps", str(steps), "--eval-steps", str(steps), "--max-train-minutes", "0"]
    command += ["--precision", precision, "--test-limit", "1", "--show", "0", "--bleu-sentences", "0"]
    command += [] if save else ["--save-steps", str(steps)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    results = json.loads((output_dir / "final" / "training_results.json").read_text())
    runtime = next(entry["train_runtime"] for entry in results["log_history"] if "train_runtime" in entry)
    return runtime / results["steps"]


def demo_batches(steps: int) -> list[tuple[int, int, int]]:
    """(sentences, source length, target length) of the loop's first `steps` batches: the demo recipe's token
    budgets over the built-in train split, tokenized with a run's tokenizer."""
    splits = preprocess.load_splits("en-de")
    tokenizer = preprocess.joint_bpe(splits["train"], "en", "de", DEMO.vocab_size, 1024, sample=1_000_000, seed=1)
    train = preprocess.tokenize(splits["train"], tokenizer, "en", "de", DEMO.max_length, "train")
    sampler = TokenBudgetBatchSampler(preprocess.lengths(train), DEMO.max_tokens, seed=1)
    shapes = []
    for batch in list(sampler)[:steps]:
        rows = train.select(batch)
        shapes.append((len(batch), max(map(len, rows["input_ids"])), max(map(len, rows["labels"]))))
    return shapes


BARE = {"fp32": ("fp32", "sdpa"), "bf16, sdpa": ("bf16", "sdpa"), "bf16, eager": ("bf16", "eager")}


def bare_milliseconds(shapes: list[tuple[int, int, int]], dropout: float) -> dict[str, float]:
    """Median step milliseconds of the demo model in each variant of `BARE`, alternating on `shapes`."""
    config = VanillaConfig.from_preset("demo", vocab_size=DEMO.vocab_size, dropout=dropout)
    smoother = LabelSmoother(DEMO.label_smoothing)
    systems = {}
    for name, (precision, attention) in BARE.items():
        torch.manual_seed(0)
        model = VanillaForConditionalGeneration(config).train()
        model.set_attn_implementation(attention)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(recipe.ADAM_BETA1, recipe.ADAM_BETA2))
        systems[name] = (precision, model, optimizer)
    times = {name: [] for name in systems}
    for index, (batch, source, target) in enumerate(shapes):
        ids = torch.randint(4, config.vocab_size, (batch, source))
        labels = torch.randint(4, config.vocab_size, (batch, target))
        for name, (precision, model, optimizer) in systems.items():
            started = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = smoother(model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if index >= 2:  # the first steps set up kernels
                times[name].append(time.perf_counter() - started)
    return {name: 1e3 * statistics.median(seconds) for name, seconds in times.items()}


def row(name: str, values: list[float], reference: float, unit: str) -> str:
    median = statistics.median(values)
    return f"| {name} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | {reference / median:.2f} | {unit} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps of each loop run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of loop runs (each variant once a round)")
    parser.add_argument("--bare-steps", type=int, default=40, help="bare steps per precision and shape set")
    default_dropout = VanillaConfig.from_preset(DEMO.size).dropout if DEMO.dropout is None else DEMO.dropout
    parser.add_argument("--dropout", type=float, default=default_dropout, help="the model's dropout (default: demo's)")
    args = parser.parse_args()
    variants = {"fp32": ("fp32", True), "bf16": ("bf16", True), "fp32, no checkpoints": ("fp32", False)}
    variants["bf16, no checkpoints"] = ("bf16", False)
    loop = {name: [] for name in variants}
    bare = {"loop shapes": [], "fixed 64 x 32": []}
    shapes = demo_batches(args.bare_steps)
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for name, (precision, save) in variants.items():
                output = Path(scratch) / f"{round_}-{precision}-{save}"
                loop[name].append(1e3 * loop_seconds_per_step(precision, args.steps, save, args.dropout, output))
                print(f"round {round_ + 1}: {name} {loop[name][-1]:.1f} ms a step", file=sys.stderr, flush=True)
            for name, batches in (("loop shapes", shapes), ("fixed 64 x 32", [(64, 32, 32)] * args.bare_steps)):
                bare[name].append(bare_milliseconds(batches, args.dropout))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; {args.rounds} rounds; dropout {args.dropout}")  # fmt: skip
    print("\n| measurement | median | min | max | speed-up over fp32 | unit |\n|---|---:|---:|---:|---:|---|")
    for checkpoints in ("", ", no checkpoints"):
        reference = statistics.median(loop[f"fp32{checkpoints}"])
        for precision in ("fp32", "bf16"):
            name = f"{precision}{checkpoints}"
            print(row(f"loop, {args.steps} steps, {name}", loop[name], reference, "ms a step"))
    for shapes_name, rounds in bare.items():
        reference = statistics.median(r["fp32"] for r in rounds)
        for name in BARE:
            print(row(f"bare step, {shapes_name}, {name}", [r[name] for r in rounds], reference, "ms a step"))


if __name__ == "__main__":
    main()
