"""Training-step speed: ours against MarianMTModel and torch.nn.Transformer at the same dimensions.

One step is forward, loss, backward and an Adam step (the paper's betas 0.9, 0.98 and eps 1e-9), in train mode
(dropout as the size's preset: 0.1 for tiny, small and base, 0.3 for big), on random token ids. The default batch,
32 pairs of 64 source and 64 target tokens (2048 + 2048 tokens), is close to one GPU's share of the paper's batches
(about 25000 source and 25000 target tokens over 8 GPUs: about 3100 + 3100). Each measurement is a fresh process
that builds one model, runs `--warmup` untimed steps and `--steps` timed ones; the systems alternate (A B C A B C
...) over `--rounds` rounds, each round opened by a fp32 matmul peak measurement. Before the rounds, one process per
size checks that the three systems, given one set of weights, compute the same logits.

`--modes eager,compiled` measures each system also under `torch.compile` (what `TrainingArguments(torch_compile=True)`
and `vanilla-train --torch-compile` do): the compiled model's first steps compile it, so `--warmup` must cover them
(one shape: one compilation).

Reported per size, mode and system: target tokens per second (median, min, max over rounds), peak RSS of the process
and its increase over the RSS after building the model (gradients, Adam state, activations), model FLOP/s and MFU
against the matmul peak of `--dtype` (the FLOP formula is in common.py); and ratios ours/Marian and
ours/nn.Transformer of tokens per second (> 1: ours is faster) and of the memory increase (< 1: ours uses less).

    python benchmarks/train_speed.py                                     # small and base, 5 rounds
    python benchmarks/train_speed.py --sizes base --json runs/train_speed.json
    python benchmarks/train_speed.py --sizes demo,base --modes eager,compiled    # torch.compile against eager
    python benchmarks/train_speed.py --sizes demo --vocab-size 8000 --dtype bfloat16 --attn eager  # the main job's bf16
    OMP_NUM_THREADS=1 python benchmarks/train_speed.py --sizes tiny --rounds 2 --steps 2 --peak-size 512  # smoke
"""

import argparse
from collections.abc import Callable
from typing import Any

import common
import systems
import torch
from torch import nn

from modeling_vanilla import VanillaConfig
from vanilla_training import recipe

SYSTEMS = {systems.SYSTEM_NAMES[name]: {"system": name} for name in ("ours", "marian", "torch")}
MODES = ("eager", "compiled")
PAIRS = [("ours", "MarianMTModel"), ("ours", "nn.Transformer")]


def training_step(model: nn.Module, config: VanillaConfig, task: dict[str, Any]) -> Callable[[], float]:
    """A training step on one random batch of the task's shape: forward and loss (under the task's autocast),
    backward, Adam (the paper's betas and eps); it returns the loss, which waits for the step's GPU work."""
    betas = (recipe.ADAM_BETA1, recipe.ADAM_BETA2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=betas, eps=recipe.ADAM_EPSILON)
    device = next(model.parameters()).device
    batch, source, target = task["batch_size"], task["source_length"], task["target_length"]
    ids = systems.random_ids(batch, source, config.vocab_size, config.eos_token_id).to(device)
    mask = torch.ones_like(ids)
    labels = systems.random_ids(batch, target, config.vocab_size, config.eos_token_id).to(device)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with common.autocast(task):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def measure_training(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: tokens per second, step seconds and memory of training steps of one system."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    model = systems.build_model(task["system"], config, task["attn"], task["device"]).train()
    if task["mode"] == "compiled":
        model = torch.compile(model)
    step, losses = training_step(model, config, task), []
    with common.memory_probe(task["device"]) as memory:
        seconds = common.timed(lambda: losses.append(step()), task["warmup"], task["steps"])
    if not all(torch.isfinite(torch.tensor(losses))):
        raise RuntimeError(f"non-finite training loss: {losses}")
    step_seconds = sum(seconds) / len(seconds)
    batch, source, target = task["batch_size"], task["source_length"], task["target_length"]
    return {
        "tokens_per_second": batch * target / step_seconds,
        "seconds": step_seconds,
        "flops_per_second": common.training_flops(config, batch, source, target) / step_seconds,
        **memory.result(),
    }


def add_training_arguments(parser: argparse.ArgumentParser, batch_size: int, warmup: int, steps: int) -> None:
    """The flags of the training workload (train_speed.py's and gpu_check.py's), with these defaults."""
    parser.add_argument("--batch-size", type=int, default=batch_size, help="sentence pairs per step")
    parser.add_argument("--source-length", type=int, default=64, help="tokens per source sentence")
    parser.add_argument("--target-length", type=int, default=64, help="tokens per target sentence")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed steps per process")
    parser.add_argument("--steps", type=int, default=steps, help="timed steps per process")


def training_task(args: argparse.Namespace) -> dict[str, Any]:
    """The task fields of a training measurement, from `add_training_arguments`' flags."""
    fields = ("batch_size", "source_length", "target_length", "warmup", "steps")
    return {"kind": "train", "mode": "eager", **{name: getattr(args, name) for name in fields}}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=5)
    common.add_peak_argument(parser)
    add_training_arguments(parser, batch_size=32, warmup=2, steps=5)
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="ours' and Marian's attention")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="the steps' precision (bfloat16: autocast, as `vanilla-train --precision bf16`) and the matmul peak's",
    )
    parser.add_argument(
        "--modes",
        type=common.choice_list(MODES, "mode"),
        default="eager",
        help="comma-separated: eager, compiled (torch.compile of each system)",
    )
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked({"check": systems.check_same_function, "train": measure_training})
    args = parse_args()
    shared = {"vocab_size": args.vocab_size, "attn": args.attn}
    plan = common.Plan(
        script=__file__,
        groups=[{"size": size, "mode": mode} for size in args.sizes for mode in args.modes],
        systems=SYSTEMS,
        settings={**training_task(args), "device": "cpu", "dtype": args.dtype, **shared},
        fields=common.THROUGHPUT_FIELDS,
        checks={size: {"size": size, **shared} for size in args.sizes},
        peak={**common.cpu_peak(args), "dtype": args.dtype},
    )
    outcome = common.execute(plan, args.rounds, args.threads)
    columns = common.throughput_columns("target tok/s", ("step ms", 1000), "RSS", {"MFU": outcome.peak["flops"]})
    setup = (
        f"Training step (forward + backward + Adam) in {args.dtype}, batch {args.batch_size} x {args.source_length} "
        f"source + {args.target_length} target tokens, vocabulary {args.vocab_size}, attention {args.attn} "
        f"(nn.Transformer: its own), {', '.join(args.modes)}, {args.warmup} warm-up + {args.steps} timed steps per "
        f"process, {args.rounds} rounds; " + common.describe_sizes(args.sizes)
    )
    tables = common.throughput_tables(outcome.summary, {"size": "size", "mode": "mode"}, columns, PAIRS)
    common.publish(args, outcome, [setup, *tables])


if __name__ == "__main__":
    main()
