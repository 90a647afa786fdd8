"""Pictures: a training run (training loss, validation loss and validation BLEU against steps), and the sinusoidal
positional encoding of section 3.5."""

from pathlib import Path

import matplotlib
import torch

from modeling_vanilla import sinusoidal_positional_encoding

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_training(log_history: list[dict], path: str | Path) -> None:
    """Writes a PNG with losses on the left axis and BLEU on the right, from `Trainer.state.log_history`."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e]
    validation = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e]
    bleu = [(e["step"], e["eval_bleu"]) for e in log_history if "eval_bleu" in e]
    figure, loss_axis = plt.subplots(figsize=(8, 4.5))
    for points, label, style in ((train, "training loss", "-"), (validation, "validation loss", "o-")):
        if points:
            loss_axis.plot(*zip(*points, strict=True), style, label=label)
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("loss (label-smoothed cross-entropy)")
    handles, labels = loss_axis.get_legend_handles_labels()
    if bleu:
        bleu_axis = loss_axis.twinx()
        bleu_axis.plot(*zip(*bleu, strict=True), "s--", color="tab:green", label="validation BLEU (greedy)")
        bleu_axis.set_ylabel("BLEU")
        more_handles, more_labels = bleu_axis.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    loss_axis.legend(handles, labels, loc="upper center")
    loss_axis.set_title("Training run")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_positional_encoding(positions: int, d_model: int, path: str | Path) -> Path:
    """Writes a PNG heatmap of PE for positions 0 .. `positions` - 1 and `d_model` dimensions; returns its path."""
    if positions < 1:
        raise ValueError(f"positions must be at least 1, got {positions}")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be even and at least 2 (a sin and a cos per frequency), got {d_model}")
    encoding = sinusoidal_positional_encoding(torch.arange(positions), d_model)
    figure, axis = plt.subplots(figsize=(14, 5))
    image = axis.imshow(encoding.numpy(), cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axis.set_xlabel("dimension (even 2i: sin, odd 2i + 1: cos)")
    axis.set_ylabel("position")
    axis.set_title(f"Sinusoidal positional encoding (section 3.5): {positions} positions x d_model {d_model}")
    figure.colorbar(image, ax=axis, label="PE(pos, dimension)")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
