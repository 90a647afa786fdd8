"""The machine's limit for our workloads: their matrix multiplications alone, and the speed they allow.

A workload (one training step, or one `generate` call) is replaced by the exact list of matrix multiplications its
FLOP count in common.py describes, at their real shapes, in the model's order, each layer with its own weight
matrices (so that, as in the model, weights stream through the caches instead of staying hot): Q, K, V and output
projections, attention scores and weights x values for every head, the feed-forward network, the pre-softmax
projection, and in a training step the two backward matmuls (input gradient, weight gradient) of each.
Everything else a real run does (layer norms, softmax, dropout, activations, the loss, Adam, masks, caches,
beam bookkeeping, Python) is left out. The best time of that list is therefore a ceiling: no implementation of
the same function in fp32 with these kernels on this machine can be faster.

The script checks that the list's FLOPs equal common.py's formula, times each workload in a fresh process (best
of `--repeats`, after a warm-up; interleaved over `--rounds` rounds, each opened by the fp32 matmul peak
measurement), and prints per workload: the matmul FLOPs, the matmul-only time, the ceiling tokens/s and the
ceiling MFU (the matmuls' own FLOP/s over the 2048 x 2048 peak). With `--train-json` / `--generate-json` (the
`--json` files of train_speed.py and generate_speed.py, measured with the same sizes and shapes) it adds what ours
and MarianMTModel reached, as a fraction of the ceiling, and the ceiling as a multiple of Marian's speed.

    python benchmarks/matmul_ceiling.py --train-json runs/train_speed.json --generate-json runs/generate_speed.json
    OMP_NUM_THREADS=1 python benchmarks/matmul_ceiling.py --sizes tiny --rounds 1 --peak-size 512   # smoke
"""

import argparse
import json
from pathlib import Path
from typing import Any

import common
import torch

from modeling_vanilla import VanillaConfig

# A matmul is a pair of operands: torch.matmul(left, right), 2-D (a linear layer) or 3-D (attention, all heads).
Matmuls = list[tuple[torch.Tensor, torch.Tensor]]
CEILING = "matmul-only"


class MatmulList:
    """Builds a workload's matmul list; activations are shared per shape, weights are distinct per layer."""

    def __init__(self, training: bool):
        self.training = training
        self.matmuls: Matmuls = []
        self.activations: dict[tuple[int, ...], torch.Tensor] = {}

    def activation(self, *shape: int) -> torch.Tensor:
        if shape not in self.activations:
            self.activations[shape] = torch.randn(shape)
        return self.activations[shape]

    def add(self, left: torch.Tensor, right: torch.Tensor) -> None:
        """`left @ right`; in training also the gradients of both operands: grad @ right^T and left^T @ grad."""
        self.matmuls.append((left, right))
        if self.training:
            grad = self.activation(*left.shape[:-1], right.shape[-1])
            self.matmuls.append((grad, right.transpose(-1, -2)))
            self.matmuls.append((left.transpose(-1, -2), grad))

    def linear(self, rows: int, d_in: int, d_out: int) -> None:
        """A projection of `rows` vectors by a weight matrix of its own."""
        self.add(self.activation(rows, d_in), torch.randn(d_in, d_out))

    def attention(self, batch_heads: int, queries: int, keys: int, head_dim: int) -> None:
        """Q K^T and weights x V for `batch_heads` (sequences x heads) of `queries` x `keys` scores."""
        self.add(self.activation(batch_heads, queries, head_dim), self.activation(batch_heads, head_dim, keys))
        self.add(self.activation(batch_heads, queries, keys), self.activation(batch_heads, keys, head_dim))


def encoder(work: MatmulList, config: VanillaConfig, batch: int, source: int) -> None:
    d, f, heads = config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads
    rows = batch * source
    for _ in range(config.encoder_layers):
        for _ in range(4):  # Q, K, V, output
            work.linear(rows, d, d)
        work.attention(batch * heads, source, source, d // heads)
        work.linear(rows, d, f)
        work.linear(rows, f, d)


def training_step(config: VanillaConfig, batch: int, source: int, target: int) -> MatmulList:
    """Forward and backward of one batch of `batch` pairs of `source` + `target` tokens."""
    work = MatmulList(training=True)
    d, f, heads = config.d_model, config.decoder_ffn_dim, config.decoder_attention_heads
    encoder(work, config, batch, source)
    rows = batch * target
    for _ in range(config.decoder_layers):
        for _ in range(4):  # masked self-attention: Q, K, V, output
            work.linear(rows, d, d)
        work.attention(batch * heads, target, target, d // heads)
        work.linear(rows, d, d)  # cross-attention Q
        for _ in range(2):  # cross-attention K, V of the encoder output
            work.linear(batch * source, d, d)
        work.attention(batch * heads, target, source, d // heads)
        work.linear(rows, d, d)  # cross-attention output
        work.linear(rows, d, f)
        work.linear(rows, f, d)
    work.linear(rows, d, config.vocab_size)
    return work


def generation(config: VanillaConfig, batch: int, hypotheses: int, source: int, new_tokens: int) -> MatmulList:
    """`generate` with a key/value cache: the encoder once, cross-attention K and V once per hypothesis, then
    `new_tokens` steps of one position per hypothesis, step t attending over t cached target positions."""
    work = MatmulList(training=False)
    d, f, heads = config.d_model, config.decoder_ffn_dim, config.decoder_attention_heads
    head_dim, rows = d // heads, batch * hypotheses
    encoder(work, config, batch, source)
    for _ in range(config.decoder_layers):
        for _ in range(2):
            work.linear(rows * source, d, d)
    layers = [
        {name: torch.randn(shape) for name, shape in weight_shapes(d, f).items()}
        | {
            "self_keys": torch.randn(rows * heads, head_dim, new_tokens),
            "self_values": torch.randn(rows * heads, new_tokens, head_dim),
            "cross_keys": torch.randn(rows * heads, head_dim, source),
            "cross_values": torch.randn(rows * heads, source, head_dim),
        }
        for _ in range(config.decoder_layers)
    ]
    output_weight = torch.randn(d, config.vocab_size)
    position, hidden = work.activation(rows, d), work.activation(rows, f)
    for step in range(1, new_tokens + 1):
        for layer in layers:
            for name in ("self_q", "self_k", "self_v"):
                work.add(position, layer[name])
            work.add(work.activation(rows * heads, 1, head_dim), layer["self_keys"][:, :, :step])
            work.add(work.activation(rows * heads, 1, step), layer["self_values"][:, :step])
            for name in ("self_out", "cross_q"):
                work.add(position, layer[name])
            work.add(work.activation(rows * heads, 1, head_dim), layer["cross_keys"])
            work.add(work.activation(rows * heads, 1, source), layer["cross_values"])
            work.add(position, layer["cross_out"])
            work.add(position, layer["fc1"])
            work.add(hidden, layer["fc2"])
        work.add(position, output_weight)
    return work


def weight_shapes(d: int, f: int) -> dict[str, tuple[int, int]]:
    """The weight matrices one decoder step multiplies by, per layer (cross K and V are cached)."""
    square = ("self_q", "self_k", "self_v", "self_out", "cross_q", "cross_out")
    return {name: (d, d) for name in square} | {"fc1": (d, f), "fc2": (f, d)}


def flops(matmuls: Matmuls) -> int:
    """2 FLOP per multiply-add of every matmul."""
    total = 0
    for left, right in matmuls:
        total += 2 * left.shape[:-1].numel() * left.shape[-1] * right.shape[-1]
    return total


def build(task: dict[str, Any]) -> tuple[MatmulList, int, int]:
    """The task's matmul list, common.py's FLOP count for it, and the target tokens it produces."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    batch, source, target = task["batch_size"], task["source_length"], task["target_length"]
    if task["workload"] == "train":
        return (
            training_step(config, batch, source, target),
            common.training_flops(config, batch, source, target),
            batch * target,
        )
    beams = task["beams"]
    return (
        generation(config, batch, beams, source, target),
        common.generation_flops(config, batch, beams, source, target),
        batch * target,
    )


def measure_ceiling(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the best time of the task's matmul list."""
    work, formula_flops, tokens = build(task)
    counted = flops(work.matmuls)
    if counted != formula_flops:
        raise RuntimeError(f"matmul list has {counted} FLOP, common.py's formula {formula_flops}")

    def run() -> None:
        for left, right in work.matmuls:
            torch.matmul(left, right)

    seconds = min(common.timed(run, warmup=1, repeats=task["repeats"]))
    return {"seconds": seconds, "flops": counted, "tokens_per_second": tokens / seconds, "matmuls": len(work.matmuls)}


def workloads(args: argparse.Namespace) -> list[dict[str, Any]]:
    """train_speed.py's training step and generate_speed.py's four generate calls, per size."""
    tasks = []
    for size in args.sizes:
        tasks.append(
            {
                "size": size,
                "workload": "train",
                "beams": 0,
                "batch_size": args.train_batch_size,
                "source_length": args.train_length,
                "target_length": args.train_length,
            }
        )
        for beams in (1, args.beams):
            for batch in (1, args.generate_batch_size):
                tasks.append(
                    {
                        "size": size,
                        "workload": "generate",
                        "beams": beams,
                        "batch_size": batch,
                        "source_length": args.source_length,
                        "target_length": args.new_tokens,
                    }
                )
    return tasks


def measured(measurements: dict[str, Any] | None, task: dict[str, Any], system: str) -> float | None:
    """The median tokens/s of `system` for the task's shape in a train_speed / generate_speed JSON, if given."""
    if measurements is None:
        return None
    match = {"system": system, "size": task["size"], "batch_size": task["batch_size"]}
    if task["workload"] == "train":
        match |= {"source_length": task["source_length"], "target_length": task["target_length"], "mode": "eager"}
    else:
        match |= {"beams": task["beams"], "source_length": task["source_length"], "new_tokens": task["target_length"]}
    values = [r["tokens_per_second"] for r in common.select(measurements["results"], **match) if "error" not in r]
    return common.spread(values)["median"] if values else None


def report_table(args: argparse.Namespace, outcome: common.Outcome) -> str:
    """Per workload: the ceiling (the best round), and what ours and Marian reached in the given JSON files."""
    speeds = {
        "train": None if args.train_json is None else json.loads(args.train_json.read_text()),
        "generate": None if args.generate_json is None else json.loads(args.generate_json.read_text()),
    }
    headers = ["size", "workload", "batch", "matmuls", "GFLOP", "matmul-only s", "ceiling tok/s", "ceiling MFU"]
    headers += ["ours tok/s", "ours / ceiling", "Marian tok/s", "Marian / ceiling", "ceiling / Marian"]
    rows = []
    for task in outcome.summary:
        beams = task["beams"]
        name = "train step" if task["workload"] == "train" else ("greedy" if beams == 1 else f"beam-{beams}")
        labels = [task["size"], name, task["batch_size"]]
        stats = task["systems"][CEILING]
        if "error" in stats:
            rows.append(common.failed_row(labels, stats["error"], len(headers)))
            continue
        fields = {key: value for key, value in task.items() if key != "systems"}
        best = min(common.select(outcome.results, kind="ceiling", **fields), key=lambda r: r["seconds"])
        ceiling = best["tokens_per_second"]
        ours, marian = (measured(speeds[task["workload"]], task, system) for system in ("ours", "marian"))
        cells = [best["matmuls"], f"{best['flops'] / 1e9:.1f}", f"{best['seconds']:.3f}", f"{ceiling:.0f}"]
        cells.append(f"{best['flops'] / best['seconds'] / outcome.peak['flops']:.1%}")
        for speed in (ours, marian):
            cells += ["-", "-"] if speed is None else [f"{speed:.0f}", f"{speed / ceiling:.0%}"]
        cells.append("-" if marian is None else f"{ceiling / marian:.2f}x")
        rows.append([*labels, *cells])
    return common.markdown_table(headers, rows)


def main() -> None:
    common.serve_worker_if_asked({"ceiling": measure_ceiling})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=3)
    common.add_peak_argument(parser)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the matmul list per process")
    parser.add_argument("--train-batch-size", type=int, default=32, help="train_speed.py's --batch-size")
    parser.add_argument("--train-length", type=int, default=64, help="train_speed.py's source and target length")
    parser.add_argument("--generate-batch-size", type=int, default=32, help="the larger generate batch")
    parser.add_argument("--beams", type=int, default=4, help="beam size of the beam-search workloads")
    parser.add_argument("--source-length", type=int, default=32, help="generate_speed.py's --source-length")
    parser.add_argument("--new-tokens", type=int, default=32, help="generate_speed.py's --new-tokens")
    parser.add_argument("--train-json", type=Path, help="a train_speed.py --json file to compare with")
    parser.add_argument("--generate-json", type=Path, help="a generate_speed.py --json file to compare with")
    args = parser.parse_args()
    plan = common.Plan(
        script=__file__,
        groups=workloads(args),
        systems={CEILING: {}},
        settings={"kind": "ceiling", "vocab_size": args.vocab_size, "repeats": args.repeats},
        fields=("seconds", "tokens_per_second"),
        peak=common.cpu_peak(args),
    )
    outcome = common.execute(plan, args.rounds, args.threads)
    setup = (
        f"Ceiling = the best time over {args.rounds} round(s) of the workload's matmuls alone (best of "
        f"{args.repeats} per process); train step: batch {args.train_batch_size} x ({args.train_length} + "
        f"{args.train_length}) tokens, forward and backward; generate: {args.source_length} source tokens, "
        f"{args.new_tokens} new tokens per sentence, vocabulary {args.vocab_size}"
    )
    common.publish(args, outcome, [setup, report_table(args, outcome)])


if __name__ == "__main__":
    main()
