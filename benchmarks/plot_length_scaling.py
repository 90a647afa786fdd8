"""A picture of length_scaling.py's results: forward-pass time and peak memory increase against the sequence length
L, log-log, one line per system and attention implementation (ours, MarianMTModel: eager dashed, sdpa solid;
nn.Transformer: its own kernels, dotted), medians with min-max bars over the rounds; one row of two panels per size.

    python benchmarks/plot_length_scaling.py runs/length_scaling.json docs/images/length_scaling.png

(`length_scaling.py --plot PATH` draws the same picture right after measuring.)
"""

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

COLORS = {"ours": "tab:blue", "MarianMTModel": "tab:orange", "nn.Transformer": "tab:green"}
LINE_STYLES = {"eager": "--", "sdpa": "-"}
PANELS = (("seconds", 1000, "forward pass, ms"), ("delta_mib", 1, "peak RSS increase over the model, MiB"))


def series(summary: list[dict[str, Any]], size: str, variant: str, field: str, scale: float) -> dict[str, list]:
    """Lengths, medians and min-max offsets of `field` x `scale` for one size and variant, where measured and
    positive (a log axis cannot show zero)."""
    points = {"lengths": [], "medians": [], "below": [], "above": []}
    for group in summary:
        stats = group["systems"][variant]
        if group["size"] != size or "error" in stats or stats[field]["median"] <= 0:
            continue
        median, low, high = (stats[field][key] * scale for key in ("median", "min", "max"))
        points["lengths"].append(group["length"])
        points["medians"].append(median)
        points["below"].append(median - max(low, median / 10))  # a non-positive minimum is clipped for the log axis
        points["above"].append(high - median)
    return points


def set_log_axes(axis: plt.Axes, lengths: list[int]) -> None:
    """Log-log axes with plain numbers: the measured lengths on x, 1-2-5 steps on y."""
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(lengths, [str(length) for length in lengths])
    axis.xaxis.set_minor_locator(ticker.NullLocator())
    axis.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.yaxis.set_minor_formatter(ticker.NullFormatter())


def plot_length_scaling(payload: dict[str, Any], path: Path) -> None:
    """Writes the PNG to `path` from a length_scaling.py JSON (its "args" and "summary")."""
    summary = payload["summary"]
    sizes = list(dict.fromkeys(group["size"] for group in summary))
    variants = list(summary[0]["systems"])
    figure, axes = plt.subplots(len(sizes), 2, figsize=(11, 4.2 * len(sizes)), squeeze=False)
    for row, size in zip(axes, sizes, strict=True):
        for axis, (field, scale, label) in zip(row, PANELS, strict=True):
            for variant in variants:
                system, _, attn = variant.partition(" ")
                points = series(summary, size, variant, field, scale)
                axis.errorbar(
                    points["lengths"],
                    points["medians"],
                    yerr=[points["below"], points["above"]],
                    color=COLORS[system],
                    linestyle=LINE_STYLES.get(attn, ":"),
                    marker="o",
                    markersize=3,
                    capsize=2,
                    label=variant,
                )
            set_log_axes(axis, sorted({group["length"] for group in summary}))
            axis.set_xlabel("L (source length = target length)")
            axis.set_ylabel(label)
            axis.set_title(f"{size}: {label.split(',')[0]}")
            axis.grid(True, which="both", alpha=0.3)
        row[0].legend(fontsize="small")
    args = payload["args"]
    figure.suptitle(f"Forward pass against length (batch {args['batch_size']}, vocabulary {args['vocab_size']})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path, help="a length_scaling.py --json file")
    parser.add_argument("png", type=Path, help="the picture to write")
    args = parser.parse_args()
    plot_length_scaling(json.loads(args.json.read_text()), args.png)
    print(args.png)


if __name__ == "__main__":
    main()
