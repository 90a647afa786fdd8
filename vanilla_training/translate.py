"""Translate text, one sentence per line, with a trained model.

    vanilla-translate runs/demo --input sentences.en --output sentences.de
    echo "In the beginning God created the heaven and the earth." | vanilla-translate runs/demo

MODEL is a run folder of `vanilla-train` (its `final/` is used), a saved or converted model folder, or a Hub id.
Each input line gives one output line, in the input's order; a blank line stays blank. Decoding is the model's own
(its generation_config.json: the paper's beam 4 and length penalty 0.6 for a model trained here; `--beams`
overrides the beam size), at most input length + 50 tokens, in batches of sentences of similar length holding
about `--max-tokens` source tokens (`vanilla_training.evaluation.translate`, which the test BLEU of training also uses).
Input that cannot be translated as it is stops the command before anything is translated: a line that is not
UTF-8, or one longer than the tokenizer's model_max_length (it is not truncated: split it).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import BinaryIO

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import cached_file

from .evaluation import translate

RESULTS = "training_results.json"  # written by vanilla-train beside the model; it records the languages


def model_folder(model: str) -> str:
    """A run folder's `final/`, or `model` itself (a model folder or a Hub id)."""
    final = Path(model) / "final"
    return str(final) if (final / "config.json").is_file() else model


def load_translator(model: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer of `model` (see `model_folder`), on the accelerator if there is one. Only this
    package's code and transformers' run: a folder that needs other code is refused by transformers."""
    folder = model_folder(model)
    translator = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=False)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    if torch.accelerator.is_available():
        translator.to(torch.accelerator.current_accelerator())
    return translator, tokenizer


def recorded_languages(model: str) -> tuple[str, str] | None:
    """The source and target language that `vanilla-train` recorded for the model, or None (a converted model,
    or one trained elsewhere)."""
    path = cached_file(model_folder(model), RESULTS, _raise_exceptions_for_missing_entries=False)
    if path is None:
        return None
    languages = json.loads(Path(path).read_text(encoding="utf-8")).get("languages")
    return None if languages is None else (languages["source"], languages["target"])


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


def check_lengths(tokenizer: PreTrainedTokenizerBase, lines: list[str], name: str) -> None:
    """ValueError naming the lines longer than the tokenizer's `model_max_length` (with their lengths)."""
    limit = tokenizer.model_max_length
    lengths = [len(ids) for ids in tokenizer(lines, verbose=False)["input_ids"]] if lines else []
    too_long = [(number, length) for number, length in enumerate(lengths, start=1) if length > limit]
    if too_long:
        shown = ", ".join(f"line {number} ({length:,} tokens)" for number, length in too_long[:10])
        raise ValueError(
            f"{name}: {len(too_long)} line(s) longer than the model's limit of {limit:,} tokens (the tokenizer's "
            f"model_max_length), {shown}{', ...' if len(too_long) > 10 else ''}; split them"
        )


def translate_lines(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, lines: list[str], **options
) -> list[str]:
    """The translation of every line, in order, by `translate` (whose keyword `options` these are); a blank line
    (empty or whitespace) translates to "" without the model."""
    nonblank = [index for index, line in enumerate(lines) if line.strip()]
    translations = [""] * len(lines)
    if nonblank:
        texts = translate(model, tokenizer, [lines[i] for i in nonblank], **options)
        for index, text in zip(nonblank, texts, strict=True):
            translations[index] = text
    return translations


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL and the decoding options, shared with `vanilla-evaluate`."""
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
    """The keyword options of `translate` that the command line asks for."""
    return {"max_tokens": args.max_tokens, **({} if args.beams is None else {"num_beams": args.beams})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--input", type=Path, metavar="FILE", help="the text to translate (default: standard input)")
    parser.add_argument(
        "--output", type=Path, metavar="FILE", help="where the translations go (default: standard output)"
    )
    parser.add_argument(
        "--source-lang",
        metavar="LANG",
        help="check that MODEL translates from this language (the one its training recorded); a model that "
        "records none is refused",
    )
    parser.add_argument(
        "--target-lang", metavar="LANG", help="check that MODEL translates into this language, likewise"
    )
    args = parser.parse_args(argv)
    if args.input is not None and not args.input.is_file():
        parser.error(f"--input {args.input}: no such file")
    if args.source_lang or args.target_lang:
        recorded = recorded_languages(args.model)
        if recorded is None:
            parser.error(
                f"--source-lang/--target-lang: {model_folder(args.model)} records no languages (no {RESULTS}, "
                "as for a converted model); leave them out"
            )
        asked = (args.source_lang or recorded[0], args.target_lang or recorded[1])
        if asked != recorded:
            parser.error(f"{args.model} translates {'-'.join(recorded)}, not {'-'.join(asked)}")
    model, tokenizer = load_translator(args.model)
    name = str(args.input or "standard input")
    try:
        if args.input is None:
            lines = read_lines(sys.stdin.buffer, name)
        else:
            with args.input.open("rb") as file:
                lines = read_lines(file, name)
        check_lengths(tokenizer, lines, name)
    except ValueError as error:
        parser.error(str(error))
    translations = translate_lines(model, tokenizer, lines, progress=args.input is not None, **decoding_options(args))
    text = "".join(translation + "\n" for translation in translations).encode("utf-8")
    if args.output is None:
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        args.output.write_bytes(text)
        blank = sum(not line.strip() for line in lines)
        print(f"{len(lines):,} lines ({blank:,} blank) translated into {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
