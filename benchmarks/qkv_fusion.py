"""What fusing the Q, K and V projections into one matmul buys: first the matmuls alone, then whole training steps.

Matmuls alone: three (rows x d) @ (d x d) matmuls against one (rows x d) @ (d x 3d), at the row counts of our
workloads, with a weight of its own per layer (as in the model, so that weights stream through the caches), best of
several timings, in one process. Rows: 1 (greedy decoding, batch 1), 32 (greedy, batch 32), 128 (beam 4, batch 32):
`--decoding-steps` decoding steps; 2048 (a training batch of 32 x 64 tokens, forward only): one pass.

Training steps: ours as it is against ours with fused projections, on one model and one batch (train_speed.py's
step: forward, loss, backward, Adam), alternating in one process over `--rounds` rounds. The fused variant
(`fused_projections`, here only: the model keeps its separate `q_proj` / `k_proj` / `v_proj`, the layout of Marian,
BART, our converters and every checkpoint) concatenates the weights at run time and projects self-attention's
queries, keys and values with one (rows x d) @ (d x 3d) matmul and cross-attention's keys and values with one
(rows x d) @ (d x 2d). Before timing, the two must give the same loss and gradients in eval mode.

    python benchmarks/qkv_fusion.py                              # d 512, 12 layers; training at small and base size
    python benchmarks/qkv_fusion.py --sizes base --threads 1 --rounds 5
    python benchmarks/qkv_fusion.py --d-model 64 --sizes tiny --rounds 1 --steps 1 --batch-size 2   # smoke
"""

import argparse
import contextlib
import copy
import statistics
from collections.abc import Callable, Iterator

import common
import systems
import torch
from torch.nn import functional as F
from train_speed import training_step

from modeling_vanilla import VanillaConfig
from modeling_vanilla.modeling_vanilla import ALL_ATTENTION_FUNCTIONS, VanillaAttention, eager_attention_forward

SEPARATE_FORWARD = VanillaAttention.forward


def best_seconds(inputs: torch.Tensor, weights: list[list[torch.Tensor]], passes: int, repeats: int) -> float:
    """The best time, over `repeats` (after one untimed), of `passes` passes of `inputs` @ every weight of every
    layer in turn."""

    def run() -> None:
        for _ in range(passes):
            for layer in weights:
                for weight in layer:
                    torch.mm(inputs, weight)

    return min(common.timed(run, warmup=1, repeats=repeats))


def matmul_table(d: int, layers: int, decoding_steps: int, repeats: int) -> str:
    """Three projections against one fused matmul, per row count of our workloads."""
    rows_table = []
    for rows, passes in ((1, decoding_steps), (32, decoding_steps), (128, decoding_steps), (2048, 1)):
        inputs = torch.randn(rows, d)
        separate = [[torch.randn(d, d) for _ in range(3)] for _ in range(layers)]
        fused = [[torch.randn(d, 3 * d)] for _ in range(layers)]
        three = best_seconds(inputs, separate, passes, repeats)
        one = best_seconds(inputs, fused, passes, repeats)
        rows_table.append([rows, passes, f"{three * 1e3:.1f}", f"{one * 1e3:.1f}", f"{one / three:.2f}"])
    headers = ["rows", "passes", "three projections ms", "fused ms", "fused / three"]
    return common.markdown_table(headers, rows_table)


def joint_projection(inputs: torch.Tensor, *projections: torch.nn.Linear) -> torch.Tensor:
    """The outputs of `projections` (all reading `inputs`), concatenated, from one matmul."""
    weight = torch.cat([projection.weight for projection in projections])
    bias = torch.cat([projection.bias for projection in projections])
    return F.linear(inputs, weight, bias)


@contextlib.contextmanager
def fused_projections(calls: list[int]) -> Iterator[None]:
    """Within the block, `VanillaAttention` projects whole sequences (no cache: training, the encoder) with one
    matmul per input: Q, K and V from the decoder or encoder states, K and V from the encoder output; each such
    call appends 1 to `calls`. Cached decoding steps keep the model's own forward."""

    def forward(self, hidden_states, attention_mask, key_value_states=None, cache=None, **kwargs):
        if cache is not None:
            return SEPARATE_FORWARD(self, hidden_states, attention_mask, key_value_states, cache, **kwargs)
        d = self.config.d_model
        if key_value_states is None:
            query, key, value = joint_projection(hidden_states, self.q_proj, self.k_proj, self.v_proj).split(d, -1)
        else:
            query = self.q_proj(hidden_states)
            key, value = joint_projection(key_value_states, self.k_proj, self.v_proj).split(d, -1)
        calls.append(1)
        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        dropout = self.attention_dropout if self.training else 0.0
        heads = [self._split_heads(states) for states in (query, key, value)]
        output, weights = attention(self, *heads, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs)
        return self.out_proj(output.reshape(*hidden_states.shape[:-1], -1)), weights

    VanillaAttention.forward = forward
    try:
        yield
    finally:
        VanillaAttention.forward = SEPARATE_FORWARD


def loss_and_gradients(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The loss and every parameter's gradient of one forward and backward."""
    model.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    return [loss.detach(), *(parameter.grad.clone() for parameter in model.parameters())]


def check_same_function(model: torch.nn.Module, config: VanillaConfig) -> float:
    """The largest |difference| of loss and gradients between the two variants, in eval mode on a copy of `model`
    whose biases (zero at initialisation) are drawn at random (raises if they are not the same function up to
    float32 rounding)."""
    ids = systems.random_ids(2, 7, config.vocab_size, config.eos_token_id)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.flip(-1)}
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(std=0.1)
    separate = loss_and_gradients(model, batch)
    calls: list[int] = []
    with fused_projections(calls):
        fused = loss_and_gradients(model, batch)
    expected_calls = config.encoder_layers + 2 * config.decoder_layers
    if len(calls) != expected_calls:
        raise RuntimeError(f"the fused path ran {len(calls)} times in a forward, expected {expected_calls}")
    difference = max((a - b).abs().max().item() for a, b in zip(separate, fused, strict=True))
    scale = max(tensor.abs().max().item() for tensor in separate)
    if difference > 1e-4 * scale:
        raise RuntimeError(f"fused and separate projections differ by {difference:.2e} (scale {scale:.2e})")
    return difference


def training_rows(args: argparse.Namespace) -> tuple[list[list[object]], list[str]]:
    """Per size: seconds per training step of both variants (median, min, max over rounds) and their ratio."""
    rows, checks = [], []
    task = {
        "batch_size": args.batch_size,
        "source_length": args.source_length,
        "target_length": args.target_length,
        "device": "cpu",
        "dtype": "float32",
    }
    for size in args.sizes:
        config = VanillaConfig.from_preset(size, vocab_size=args.vocab_size)
        torch.manual_seed(0)
        model = systems.build_model("ours", config, "sdpa", "cpu").train()
        checks.append(
            f"{size}: fused against separate, largest |difference| of loss and gradients "
            f"{check_same_function(model, config):.1e}"
        )
        step = training_step(model, config, task)
        seconds: dict[str, list[float]] = {"separate": [], "fused": []}
        for _ in range(args.rounds):
            for variant in seconds:
                context = fused_projections([]) if variant == "fused" else contextlib.nullcontext()
                with context:
                    times = common.timed(step, args.warmup, args.steps)
                seconds[variant].append(statistics.mean(times))
        cells = []
        for values in seconds.values():
            cells += [f"{statistics.median(values) * 1e3:.0f}", f"{min(values) * 1e3:.0f}", f"{max(values) * 1e3:.0f}"]
        ratio = statistics.median(seconds["fused"]) / statistics.median(seconds["separate"])
        rows.append([size, *cells, f"{ratio:.3f}"])
    return rows, checks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=512, help="d of the matmul-only table")
    parser.add_argument("--layers", type=int, default=12, help="self-attention layers of the matmul-only table")
    parser.add_argument("--decoding-steps", type=int, default=32, help="decoding steps for the decoding row counts")
    parser.add_argument("--repeats", type=int, default=5, help="timings of the matmul-only table, best taken")
    parser.add_argument("--sizes", type=common.size_list, default="small,base", help="sizes of the training table")
    parser.add_argument("--vocab-size", type=int, default=8000, help="shared vocabulary size")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the training table")
    parser.add_argument("--threads", type=int, help="torch threads (none: torch's)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentence pairs per training step")
    parser.add_argument("--source-length", type=int, default=64, help="tokens per source sentence")
    parser.add_argument("--target-length", type=int, default=64, help="tokens per target sentence")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps per round and variant")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per round and variant")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    common.use_threads(args.threads)
    print(common.machine_line())
    print(f"\nMatmuls alone: d_model {args.d_model}, {args.layers} layers, best of {args.repeats}\n")
    print(matmul_table(args.d_model, args.layers, args.decoding_steps, args.repeats))
    rows, checks = training_rows(args)
    print(
        f"\nTraining steps (forward + backward + Adam), batch {args.batch_size} x {args.source_length} source + "
        f"{args.target_length} target tokens, vocabulary {args.vocab_size}, attention sdpa, per round and variant "
        f"{args.warmup} warm-up + {args.steps} timed steps, {args.rounds} rounds in one process; "
        + common.describe_sizes(args.sizes)
        + "\n"
    )
    headers = ["size", "separate ms/step", "min", "max", "fused ms/step", "min", "max", "fused / separate"]
    print(common.markdown_table(headers, rows))
    print("\n" + "; ".join(checks))


if __name__ == "__main__":
    main()
