"""What several commands share: MODEL and the decoding options, UTF-8 lines."""

import argparse
from typing import BinaryIO

from ..serving.settings import positive


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL and the decoding options of `vanilla-translate` and `vanilla-evaluate`."""
    parser.add_argument("model", metavar="MODEL", help="a run folder (its final/), a model folder, or a Hub id")
    parser.add_argument(
        "--beams", type=positive, metavar="N", help="beam size (default: the model's generation config)"
    )
    parser.add_argument(
        "--max-tokens",
        type=positive,
        metavar="N",
        default=4096,
        help="source tokens per batch, padding included (default: 4096, as training's test BLEU; a longer "
        "sentence goes alone)",
    )


def decoding_options(args: argparse.Namespace) -> dict:
    """The keyword options of `Translator.translate` that the command line asks for."""
    return {"max_tokens": args.max_tokens, **({} if args.beams is None else {"num_beams": args.beams})}


def read_lines(file: BinaryIO, name: str) -> list[str]:
    """The lines of `file` without their line ends (`\\n` or `\\r\\n`); ValueError naming the lines that are not
    UTF-8."""
    lines, bad = [], []
    for number, raw in enumerate(file, start=1):
        try:
            lines.append(raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8"))
        except UnicodeDecodeError:
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        raise ValueError(f"{name} is not UTF-8 text: line {shown} ({len(bad)} in all)")
    return lines
