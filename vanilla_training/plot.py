"""A picture of a training run: training loss, validation loss and validation BLEU against steps."""

from pathlib import Path

import matplotlib

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
