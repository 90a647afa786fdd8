"""Training-step speed: ours against MarianMTModel and torch.nn.Transformer at the same dimensions.

One step is forward, loss, backward and an Adam step (the paper's betas 0.9, 0.98 and eps 1e-9), in train mode
(dropout 0.1), on random token ids. The default batch, 32 pairs of 64 source and 64 target tokens (2048 + 2048
tokens), is close to one GPU's share of the paper's batches (about 25000 source and 25000 target tokens over
8 GPUs: about 3100 + 3100). Each measurement is a fresh process that builds one model, runs `--warmup` untimed
steps and `--steps` timed ones; the systems alternate (A B C A B C ...) over `--rounds` rounds, each round opened
by a fp32 matmul peak measurement. Before the rounds, one process per size checks that the three systems, given
one set of weights, compute the same logits.

Reported per size and system: target tokens per second (median, min, max over rounds), peak RSS of the process
and its increase over the RSS after building the model (gradients, Adam state, activations), model FLOP/s and MFU
(the FLOP formula is in common.py); and ratios ours/Marian and ours/nn.Transformer of tokens per second (> 1: ours
is faster) and of the memory increase (< 1: ours uses less).

    python benchmarks/train_speed.py                                     # small and base, 5 rounds
    python benchmarks/train_speed.py --sizes base --json runs/train_speed.json
    OMP_NUM_THREADS=1 python benchmarks/train_speed.py --sizes tiny --rounds 2 --steps 2 --peak-size 512  # smoke
"""

import argparse
from typing import Any

import common
import torch

SYSTEMS = ("ours", "marian", "torch")


def measure_training(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: tokens per second, step seconds and memory of training steps of one system."""
    config = common.vanilla_config(task["size"], task["vocab_size"])
    model = common.build_model(task["system"], config, task["attn"]).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batch, source, target = task["batch_size"], task["source_length"], task["target_length"]
    ids = common.random_ids(batch, source, config.vocab_size, config.eos_token_id)
    mask = torch.ones_like(ids)
    labels = common.random_ids(batch, target, config.vocab_size, config.eos_token_id)
    losses = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    with common.PeakMemory() as memory:
        seconds = common.timed(step, task["warmup"], task["steps"])
    if not all(torch.isfinite(torch.tensor(losses))):
        raise RuntimeError(f"non-finite training loss: {losses}")
    step_seconds = sum(seconds) / len(seconds)
    flops = common.training_flops(config, batch, source, target)
    return {
        "tokens_per_second": batch * target / step_seconds,
        "step_seconds": step_seconds,
        "flops_per_second": flops / step_seconds,
        **memory.result(),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=5)
    common.add_peak_argument(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="sentence pairs per step")
    parser.add_argument("--source-length", type=int, default=64, help="tokens per source sentence")
    parser.add_argument("--target-length", type=int, default=64, help="tokens per target sentence")
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="ours' and Marian's attention")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per process")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per process")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked(
        {"peak": common.measure_peak, "check": common.check_same_function, "train": measure_training}
    )
    args = parse_args()
    common.use_threads(args.threads)
    sizes = common.parse_sizes(args.sizes)
    shared = {"vocab_size": args.vocab_size, "attn": args.attn, "threads": args.threads}
    checks = {size: common.run_fresh(__file__, {"kind": "check", "size": size, **shared}) for size in sizes}
    common.require_same_function(checks)
    tasks = [common.peak_task(args)] + [
        {
            "kind": "train",
            "size": size,
            "system": system,
            "batch_size": args.batch_size,
            "source_length": args.source_length,
            "target_length": args.target_length,
            "warmup": args.warmup,
            "steps": args.steps,
            **shared,
        }
        for size in sizes
        for system in SYSTEMS
    ]
    results = common.run_interleaved(__file__, tasks, args.rounds)
    peak = common.best_peak(common.select(results, kind="peak"))
    fields = ("tokens_per_second", "step_seconds", "flops_per_second", "peak_mib", "delta_mib")
    summary = {
        size: {system: common.summarize(common.select(results, size=size, system=system), fields) for system in SYSTEMS}
        for size in sizes
    }
    rows, ratio_rows = [], []
    for size in sizes:
        for system, stats in summary[size].items():
            if "error" in stats:
                rows.append(common.failed_row([size, common.SYSTEM_NAMES[system]], stats["error"], 10))
                continue
            speed, flops = stats["tokens_per_second"], stats["flops_per_second"]["median"]
            rows.append(
                [
                    size,
                    common.SYSTEM_NAMES[system],
                    f"{speed['median']:.0f}",
                    f"{speed['min']:.0f}",
                    f"{speed['max']:.0f}",
                    f"{stats['step_seconds']['median'] * 1000:.0f}",
                    f"{stats['peak_mib']['median']:.0f}",
                    f"{stats['delta_mib']['median']:.0f}",
                    f"{flops / 1e9:.1f}",
                    f"{100 * flops / peak['flops']:.1f}%",
                ]
            )
        for other in ("marian", "torch"):
            ours, theirs = summary[size]["ours"], summary[size][other]
            ratio_rows.append(
                [
                    size,
                    f"ours / {common.SYSTEM_NAMES[other]}",
                    common.ratio(ours, theirs, "tokens_per_second"),
                    common.ratio(ours, theirs, "delta_mib"),
                ]
            )
    headers = [
        "size",
        "system",
        "target tok/s (median)",
        "min",
        "max",
        "step ms",
        "peak RSS MiB",
        "+ over model MiB",
        "GFLOP/s",
        "MFU",
    ]
    table = common.markdown_table(headers, rows)
    ratios = common.markdown_table(["size", "pair", "tokens/s ratio", "memory increase ratio"], ratio_rows)
    setup = (
        f"Training step (forward + backward + Adam), batch {args.batch_size} x {args.source_length} source + "
        f"{args.target_length} target tokens, vocabulary {args.vocab_size}, attention {args.attn} (nn.Transformer: "
        f"its own), {args.warmup} warm-up + {args.steps} timed steps per process, {args.rounds} rounds; sizes: "
        + "; ".join(common.describe_size(size) for size in sizes)
    )
    report = "\n\n".join([common.machine_line(peak, args.peak_size), setup, table, ratios, common.check_line(checks)])
    print(report)
    common.write_json(
        args.json,
        {
            "args": vars(args),
            "machine": common.machine(),
            "peak": peak,
            "checks": checks,
            "summary": summary,
            "results": results,
            "report": report,
        },
    )


if __name__ == "__main__":
    main()
