"""Draw the sinusoidal positional encoding of section 3.5 as a heatmap: one row per position, one column per
dimension.

    python -m vanilla_training.show_positional_encoding                      # 100 positions x d_model 512
    python -m vanilla_training.show_positional_encoding --output docs/images/positional_encoding.png
    python -m vanilla_training.show_positional_encoding --positions 200 --d-model 128

PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)): the first
dimensions oscillate fast along the positions, the last ones hardly change (wavelengths from 2 pi to 10000 * 2 pi).
"""

import argparse
from pathlib import Path

import matplotlib
import torch

from modeling_vanilla import sinusoidal_positional_encoding

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="vanilla-show-positional-encoding", description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=100, help="positions 0 .. N-1 (default: 100)")
    parser.add_argument("--d-model", type=int, default=512, help="dimensions, even (default: 512, the base model)")
    parser.add_argument("--output", default="positional_encoding.png", help="the PNG file to write")
    args = parser.parse_args(argv)
    path = plot_positional_encoding(args.positions, args.d_model, args.output)
    print(f"wrote {path}")
    return path


def console_main() -> None:
    """`vanilla-show-positional-encoding`: `main`, whose return value would become the exit status."""
    main()


if __name__ == "__main__":
    main()
