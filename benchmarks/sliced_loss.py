"""The label-smoothed loss of a CPU training step: whole logits and transformers' `LabelSmoother` against the loss
computed a slice of positions at a time (vanilla_training/loss.py, what `vanilla-train` uses on a CPU).

    python benchmarks/sliced_loss.py                                    # demo and small sizes, 4,000 and 8,000 tokens
    python benchmarks/sliced_loss.py --sizes tiny --vocab-sizes 64 --steps 3 --rounds 1      # smoke

A bare training step (forward, loss, backward, Adam) of a model of each size and vocabulary on one fixed batch of
64 x 32 tokens, as `vanilla-train` steps on this CPU (bf16 autocast with eager attention where the CPU computes
bfloat16 natively, else fp32), the two losses alternating step by step on two copies of one model; `--rounds` times
`--steps` steps each after two warm-up steps. The first step's losses of the two must agree (the same function).
Prints a markdown table: median, min and max milliseconds of a step per round, and the speed-up of the sliced loss.
"""

import argparse
import copy
import statistics
import time

import torch
from transformers.trainer_pt_utils import LabelSmoother

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from vanilla_training import recipe
from vanilla_training.loss import label_smoothed_projection_loss
from vanilla_training.precision import resolve_precision, training_attention

BATCH, LENGTH = 64, 32


def whole_logits_loss(model: VanillaForConditionalGeneration, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' path: the model's logits, made float32 (as accelerate hands them back), then LabelSmoother."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    logits = model(**inputs).logits.float()
    return LabelSmoother(recipe.LABEL_SMOOTHING)({"logits": logits}, batch["labels"])


def sliced_loss(model: VanillaForConditionalGeneration, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    hidden = model.model(**inputs).last_hidden_state
    return label_smoothed_projection_loss(hidden, model.lm_head.weight, batch["labels"], recipe.LABEL_SMOOTHING)


LOSSES = {"whole logits, LabelSmoother": whole_logits_loss, "sliced": sliced_loss}


def step_milliseconds(size: str, vocab_size: int, steps: int, precision: str) -> dict[str, list[float]]:
    """Milliseconds of each of `steps` steps per loss, alternating; checks the first step's losses agree."""
    torch.manual_seed(0)
    model = VanillaForConditionalGeneration(VanillaConfig.from_preset(size, vocab_size=vocab_size)).train()
    model.set_attn_implementation(training_attention(precision) or "sdpa")
    models = {name: copy.deepcopy(model) for name in LOSSES}
    betas = recipe.ADAM_BETA1, recipe.ADAM_BETA2
    optimizers = {name: torch.optim.Adam(twin.parameters(), betas=betas) for name, twin in models.items()}
    ids = torch.randint(4, vocab_size, (BATCH, LENGTH))
    labels = torch.randint(4, vocab_size, (BATCH, LENGTH))
    labels[: BATCH // 8, -4:] = -100  # some padding, as token batches have
    decoder_ids = model.prepare_decoder_input_ids_from_labels(labels)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "decoder_input_ids": decoder_ids,
        "labels": labels,
    }
    times: dict[str, list[float]] = {name: [] for name in LOSSES}
    for index in range(steps + 2):
        first_losses = []
        for name, loss_of in LOSSES.items():
            torch.manual_seed(index)  # the same dropout masks for both
            started = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = loss_of(models[name], batch)
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad()
            if index >= 2:  # the first steps set up kernels
                times[name].append(1e3 * (time.perf_counter() - started))
            first_losses.append(loss.item())
        if index == 0 and abs(first_losses[0] - first_losses[1]) > 1e-3 * abs(first_losses[0]):
            raise SystemExit(f"the two losses differ on the first step: {first_losses}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["demo", "small"], help="model sizes (modeling_vanilla.PRESETS)")
    parser.add_argument("--vocab-sizes", nargs="+", type=int, default=[4000, 8000])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per loss and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.steps <= 0 or args.rounds <= 0 or min(args.vocab_sizes) <= 4:
        parser.error("--steps and --rounds must be positive, and every vocabulary larger than 4 tokens")
    precision = resolve_precision("auto")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {precision}; a batch of {BATCH} x {LENGTH}")
    print(
        "\n| size | vocabulary | loss | median ms a step | min | max | speed-up |\n|---|---:|---|---:|---:|---:|---:|"
    )
    for size in args.sizes:
        for vocab_size in args.vocab_sizes:
            medians: dict[str, list[float]] = {name: [] for name in LOSSES}
            for _ in range(args.rounds):
                for name, times in step_milliseconds(size, vocab_size, args.steps, precision).items():
                    medians[name].append(statistics.median(times))
            reference = statistics.median(medians["whole logits, LabelSmoother"])
            for name, values in medians.items():
                median = statistics.median(values)
                print(f"| {size} | {vocab_size} | {name} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | "
                      f"{reference / median:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
