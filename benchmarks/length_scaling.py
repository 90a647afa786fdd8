"""Forward-pass time and memory against sequence length: eager attention against sdpa, ours and MarianMTModel,
with torch.nn.Transformer (its own kernels) as a second reference.

One forward pass (inference mode, eval, logits over the vocabulary) of `--batch-size` (default 1) random sources
and targets of the same length L, for L in `--lengths` (default 128, 256, ..., 4096). ours and Marian run once with
`model.set_attn_implementation("eager")` (equation 1 as written: the L x L weights of every head are materialised)
and once with "sdpa" (torch's fused kernel). Each measurement is a fresh process that builds one model, runs
`--warmup` untimed and `--repeats` timed passes, and reports their mean time and the peak RSS increase over the RSS
after building the model; the measurements alternate (A B C ...) over `--rounds` rounds. Before the rounds, one
process per size and attention implementation checks that the three systems, given one set of weights, compute the
same logits.

Reported: time (median, min-max over rounds) with the ratios ours/Marian and ours sdpa/nn.Transformer (< 1: ours
is faster), the peak memory increase with the same ratios (< 1: ours uses less), and the growth exponent of the
memory increase between consecutive lengths (log of the memory ratio over log of the length ratio: about 1 where
memory grows linearly with L, towards 2 where the L x L attention weights dominate). With `--plot PATH`, a PNG of
time and memory against L (plot_length_scaling.py, which also draws one from a saved `--json` file).

    python benchmarks/length_scaling.py                                  # small and base, 3 rounds
    python benchmarks/length_scaling.py --sizes base --lengths 512,1024,2048,4096 --json runs/length_scaling.json
    python benchmarks/length_scaling.py --sizes base --json runs/ls.json --plot docs/images/length_scaling.png
    OMP_NUM_THREADS=1 python benchmarks/length_scaling.py --sizes tiny --rounds 2 --lengths 128,256,512 --repeats 1
"""

import argparse
import itertools
import math
from pathlib import Path
from typing import Any

import common
import systems
import torch

from modeling_vanilla import VanillaConfig

# Display name: task fields of each (system, attention implementation); nn.Transformer has only its own.
VARIANTS = {
    "ours eager": {"system": "ours", "attn": "eager"},
    "ours sdpa": {"system": "ours", "attn": "sdpa"},
    "MarianMTModel eager": {"system": "marian", "attn": "eager"},
    "MarianMTModel sdpa": {"system": "marian", "attn": "sdpa"},
    "nn.Transformer": {"system": "torch", "attn": "native"},
}
PAIRS = (("ours eager", "MarianMTModel eager"), ("ours sdpa", "MarianMTModel sdpa"), ("ours sdpa", "nn.Transformer"))


def measure_forward(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: seconds and memory of a forward pass of one system at one length."""
    config = VanillaConfig.from_preset(
        task["size"], vocab_size=task["vocab_size"], max_position_embeddings=task["max_length"]
    )
    model = systems.build_model(task["system"], config, task["attn"], "cpu").eval()
    length = task["length"]
    ids = systems.random_ids(task["batch_size"], length, config.vocab_size, config.eos_token_id)
    mask = torch.ones_like(ids)
    decoder_ids = systems.random_ids(task["batch_size"], length, config.vocab_size)
    decoder_ids[:, 0] = config.decoder_start_token_id

    def forward() -> None:
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)

    with common.PeakMemory() as memory:
        seconds = common.timed(forward, task["warmup"], task["repeats"])
    return {"seconds": sum(seconds) / len(seconds), **memory.result()}


def exponent(previous: dict[str, Any], current: dict[str, Any], length_ratio: float) -> str:
    """Growth exponent of the median memory increase between two lengths, or "-"."""
    if "error" in previous or "error" in current:
        return "-"
    before, after = previous["delta_mib"]["median"], current["delta_mib"]["median"]
    if before <= 0 or after <= 0:
        return "-"
    return f"{math.log(after / before) / math.log(length_ratio):.2f}"


def variants_table(summary: list[dict[str, Any]], field: str, unit: str, scale: float) -> str:
    """Per size and length: median (min-max) of `field` x `scale` for every variant, then the `PAIRS` ratios."""
    rows = [
        [group["size"], group["length"]]
        + [common.spread_cell(group["systems"][name], field, scale, "{:.0f}") for name in VARIANTS]
        + [common.ratio(group["systems"][mine], group["systems"][theirs], field) for mine, theirs in PAIRS]
        for group in summary
    ]
    headers = ["size", "L", *(f"{name} {unit}" for name in VARIANTS), *(f"{a} / {b}" for a, b in PAIRS)]
    return common.markdown_table(headers, rows)


def exponent_table(summary: list[dict[str, Any]]) -> str:
    """Growth exponents between consecutive lengths of the same size."""
    rows = [
        [group["size"], f"{previous['length']} to {group['length']}"]
        + [
            exponent(previous["systems"][name], group["systems"][name], group["length"] / previous["length"])
            for name in VARIANTS
        ]
        for previous, group in itertools.pairwise(summary)
        if previous["size"] == group["size"]
    ]
    return common.markdown_table(["size", "L", *VARIANTS], rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=3)
    parser.add_argument(
        "--lengths", type=common.int_list, default="128,256,512,1024,2048,4096", help="comma-separated L"
    )
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed forward passes per process")
    parser.add_argument("--repeats", type=int, default=2, help="timed forward passes per process")
    parser.add_argument("--plot", type=Path, help="also draw time and memory against L into this PNG")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked({"check": systems.check_same_function, "forward": measure_forward})
    args = parse_args()
    lengths = sorted(set(args.lengths))
    shared = {"vocab_size": args.vocab_size}
    plan = common.Plan(
        script=__file__,
        groups=[{"size": size, "length": length} for size in args.sizes for length in lengths],
        systems=VARIANTS,
        settings={
            "kind": "forward",
            "batch_size": args.batch_size,
            "max_length": max(lengths),
            "warmup": args.warmup,
            "repeats": args.repeats,
            **shared,
        },
        fields=("seconds", "peak_mib", "delta_mib"),
        checks={
            f"{size} {attn}": {"size": size, "attn": attn, **shared}
            for size in args.sizes
            for attn in ("eager", "sdpa")
        },
    )
    outcome = common.execute(plan, args.rounds, args.threads)
    setup = (
        f"Forward pass (inference mode, logits over the vocabulary), batch {args.batch_size}, source length = target "
        f"length = L, vocabulary {args.vocab_size}, {args.warmup} warm-up + {args.repeats} timed passes per process, "
        f"{args.rounds} rounds; " + common.describe_sizes(args.sizes)
    )
    sections = [
        setup,
        "Time per forward pass, ms: median (min-max); ratios of medians (< 1: ours is faster)",
        variants_table(outcome.summary, "seconds", "ms", 1000),
        "Peak RSS increase over the built model, MiB: median (min-max); ratios of medians (< 1: ours uses less)",
        variants_table(outcome.summary, "delta_mib", "MiB", 1),
        "Growth exponent of the memory increase between consecutive lengths: log(memory ratio) / log(length "
        "ratio), 1 where it grows linearly with L, 2 where it grows quadratically",
        exponent_table(outcome.summary),
    ]
    common.publish(args, outcome, sections)
    if args.plot:
        from plot_length_scaling import plot_length_scaling  # here, so that the workers do not load matplotlib

        plot_length_scaling({"args": vars(args), "summary": outcome.summary}, args.plot)


if __name__ == "__main__":
    main()
