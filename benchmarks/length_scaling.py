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
memory grows linearly with L, towards 2 where the L x L attention weights dominate).

    python benchmarks/length_scaling.py                                  # small and base, 3 rounds
    python benchmarks/length_scaling.py --sizes base --lengths 512,1024,2048,4096 --json runs/length_scaling.json
    OMP_NUM_THREADS=1 python benchmarks/length_scaling.py --sizes tiny --rounds 2 --lengths 128,256,512 --repeats 1
"""

import argparse
import math
from typing import Any

import common
import torch

# (system, attention implementation); nn.Transformer has only its own.
VARIANTS = (("ours", "eager"), ("ours", "sdpa"), ("marian", "eager"), ("marian", "sdpa"), ("torch", "native"))


def variant_name(system: str, attn: str) -> str:
    return common.SYSTEM_NAMES[system] + ("" if system == "torch" else f" {attn}")


def measure_forward(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: seconds and memory of a forward pass of one system at one length."""
    config = common.vanilla_config(task["size"], task["vocab_size"], max_positions=task["max_length"])
    model = common.build_model(task["system"], config, task["attn"]).eval()
    length = task["length"]
    ids = common.random_ids(task["batch_size"], length, config.vocab_size, config.eos_token_id)
    mask = torch.ones_like(ids)
    decoder_ids = common.random_ids(task["batch_size"], length, config.vocab_size)
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=3)
    parser.add_argument("--lengths", default="128,256,512,1024,2048,4096", help="comma-separated L (source = target)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed forward passes per process")
    parser.add_argument("--repeats", type=int, default=2, help="timed forward passes per process")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked({"check": common.check_same_function, "forward": measure_forward})
    args = parse_args()
    common.use_threads(args.threads)
    sizes = common.parse_sizes(args.sizes)
    lengths = sorted({int(length) for length in args.lengths.split(",")})
    shared = {"vocab_size": args.vocab_size, "threads": args.threads}
    checks = {
        f"{size} {attn}": common.run_fresh(__file__, {"kind": "check", "size": size, "attn": attn, **shared})
        for size in sizes
        for attn in ("eager", "sdpa")
    }
    common.require_same_function(checks)
    tasks = [
        {
            "kind": "forward",
            "size": size,
            "length": length,
            "system": system,
            "attn": attn,
            "batch_size": args.batch_size,
            "max_length": max(lengths),
            "warmup": args.warmup,
            "repeats": args.repeats,
            **shared,
        }
        for size in sizes
        for length in lengths
        for system, attn in VARIANTS
    ]
    results = common.run_interleaved(__file__, tasks, args.rounds)
    summary = {
        size: {
            length: {
                variant_name(system, attn): common.summarize(
                    common.select(results, size=size, length=length, system=system, attn=attn),
                    ("seconds", "peak_mib", "delta_mib"),
                )
                for system, attn in VARIANTS
            }
            for length in lengths
        }
        for size in sizes
    }
    names = [variant_name(system, attn) for system, attn in VARIANTS]
    ours_eager, ours_sdpa, marian_eager, marian_sdpa, reference = names
    pairs = ((ours_eager, marian_eager), (ours_sdpa, marian_sdpa), (ours_sdpa, reference))
    time_rows, memory_rows, exponent_rows = [], [], []
    for size in sizes:
        for index, length in enumerate(lengths):
            stats = summary[size][length]
            time_rows.append(
                [size, length]
                + [common.spread_cell(stats[name], "seconds", 1000, "{:.0f}") for name in names]
                + [common.ratio(stats[mine], stats[theirs], "seconds") for mine, theirs in pairs]
            )
            memory_rows.append(
                [size, length]
                + [common.spread_cell(stats[name], "delta_mib", 1, "{:.0f}") for name in names]
                + [common.ratio(stats[mine], stats[theirs], "delta_mib") for mine, theirs in pairs]
            )
            if index:
                previous = summary[size][lengths[index - 1]]
                growth = length / lengths[index - 1]
                exponent_rows.append(
                    [
                        size,
                        f"{lengths[index - 1]} to {length}",
                        *(exponent(previous[n], stats[n], growth) for n in names),
                    ]
                )
    pair_headers = [f"{mine} / {theirs}" for mine, theirs in pairs]
    time_table = common.markdown_table(["size", "L", *(f"{name} ms" for name in names), *pair_headers], time_rows)
    memory_table = common.markdown_table(["size", "L", *(f"{name} MiB" for name in names), *pair_headers], memory_rows)
    exponent_table = common.markdown_table(["size", "L", *names], exponent_rows)
    setup = (
        f"Forward pass (inference mode, logits over the vocabulary), batch {args.batch_size}, source length = target "
        f"length = L, vocabulary {args.vocab_size}, {args.warmup} warm-up + {args.repeats} timed passes per process, "
        f"{args.rounds} rounds; sizes: " + "; ".join(common.describe_size(size) for size in sizes)
    )
    report = "\n\n".join(
        [
            common.machine_line(),
            setup,
            "Time per forward pass, ms: median (min-max); ratios of medians (< 1: ours is faster)",
            time_table,
            "Peak RSS increase over the built model, MiB: median (min-max); ratios of medians (< 1: ours uses less)",
            memory_table,
            "Growth exponent of the memory increase between consecutive lengths: log(memory ratio) / log(length "
            "ratio), 1 where it grows linearly with L, 2 where it grows quadratically",
            exponent_table,
            common.check_line(checks),
        ]
    )
    print(report)
    common.write_json(
        args.json,
        {
            "args": vars(args),
            "machine": common.machine(),
            "checks": checks,
            "summary": summary,
            "results": results,
            "report": report,
        },
    )


if __name__ == "__main__":
    main()
