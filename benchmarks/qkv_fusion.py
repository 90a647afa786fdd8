"""What fusing the Q, K and V projections into one matmul would buy: three (rows x d) @ (d x d) matmuls against one
(rows x d) @ (d x 3d), at the row counts of our workloads, with a weight of its own per layer (as in the model, so
that weights stream through the caches), best of several timings, in one process.

Rows: 1 (greedy decoding, batch 1), 32 (greedy, batch 32), 128 (beam 4, batch 32): `--steps` decoding steps;
2048 (a training batch of 32 x 64 tokens, forward only): one pass.

    python benchmarks/qkv_fusion.py                 # the paper's base size: d 512, 12 layers with self-attention
"""

import argparse

import common
import torch


def best_seconds(inputs: torch.Tensor, weights: list[list[torch.Tensor]], passes: int, repeats: int) -> float:
    """The best time, over `repeats` (after one untimed), of `passes` passes of `inputs` @ every weight of every
    layer in turn."""

    def run() -> None:
        for _ in range(passes):
            for layer in weights:
                for weight in layer:
                    torch.mm(inputs, weight)

    return min(common.timed(run, warmup=1, repeats=repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=12, help="self-attention layers (encoder + decoder)")
    parser.add_argument("--steps", type=int, default=32, help="decoding steps for the decoding row counts")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    d = args.d_model
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, d_model {d}, {args.layers} layers")
    print("| rows | passes | three projections ms | fused ms | fused / three |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for rows, passes in ((1, args.steps), (32, args.steps), (128, args.steps), (2048, 1)):
        inputs = torch.randn(rows, d)
        separate = [[torch.randn(d, d) for _ in range(3)] for _ in range(args.layers)]
        fused = [[torch.randn(d, 3 * d)] for _ in range(args.layers)]
        three = best_seconds(inputs, separate, passes, args.repeats)
        one = best_seconds(inputs, fused, passes, args.repeats)
        print(f"| {rows} | {passes} | {three * 1e3:.1f} | {one * 1e3:.1f} | {one / three:.2f} |")


if __name__ == "__main__":
    main()
