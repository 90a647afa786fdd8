"""Draw the sinusoidal positional encoding of section 3.5 as a heatmap: one row per position, one column per
dimension.

    vanilla-show-positional-encoding                      # 100 positions x d_model 512
    vanilla-show-positional-encoding --output docs/images/positional_encoding.png
    vanilla-show-positional-encoding --positions 200 --d-model 128

PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)): the first
dimensions oscillate fast along the positions, the last ones hardly change (wavelengths from 2 pi to 10000 * 2 pi).
"""

import argparse
from pathlib import Path

from ..plot import plot_positional_encoding


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
    console_main()
