"""Translate text, one sentence per line, with a trained model.

    vanilla-translate runs/demo --input sentences.en --output sentences.de
    echo "In the beginning God created the heaven and the earth." | vanilla-translate runs/demo

MODEL is a run folder of `vanilla-train` (its `final/` is used), a saved or converted model folder, or a Hub id.
Each input line gives one output line, in the input's order; a blank line stays blank. Decoding is the model's own
(its generation_config.json: for a model trained here the paper's beam 4 and the recipe's length penalty, the
paper's 0.6 or the demo's 1.0; `--beams` overrides the beam size), at most input length + 50 tokens, in batches of
sentences of similar length holding about `--max-tokens` source tokens (the batching that the test BLEU of training
also uses).
Input that cannot be translated as it is stops the command before anything is translated: a line that is not
UTF-8, or one longer than the tokenizer's model_max_length (it is not truncated: split it, or use --paragraphs).

With `--paragraphs` a line may hold several sentences (a paragraph): it is split into sentences by pysbd with the
rules of the model's source language, a sentence longer than the model accepts is cut at the clause or word
boundary nearest its middle, and the line's translation is its sentences' translations with the line's own
spacing between them (a whitespace-only line stays as it is).

    vanilla-translate runs/demo --paragraphs --input chapter.en --output chapter.de

A multilingual model (one that records several languages) translates between any two of them: give the direction.

    vanilla-translate runs/multilingual --source-lang ko --target-lang ar --input verses.ko

A direction such a model did not train (its config's `trained_directions`) is translated through a pivot language
where two of its trained directions reach it (de-ru as de-en, then en-ru), and a line on standard error says so; one
that no pivot reaches is refused, naming it, unless `--allow-zero-shot` asks for its zero-shot translation.

With `--glossary` the terms of a TSV file (a header naming the two languages, then a source and a target term per
line) are kept: wherever a source term occurs in a line (a whole word, whatever its case), its target term is
placed in the translation by lexically constrained beam search (vanilla_training/glossary.py). A term that could
not be placed within the length limit is named on standard error.

    vanilla-translate runs/demo --glossary terms.tsv --input verses.en
"""

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from ..corpus import language_name
from ..glossary import GlossaryError, load_glossary, translate_with_glossary
from ..translator import (
    RESULTS,
    LanguageMismatchError,
    Translator,
    ZeroShotError,
    load_translator,
    model_folder,
    trained_languages,
)
from .common import add_model_arguments, decoding_options, read_lines


def paragraph_translator() -> Callable:
    """`serving.paragraphs.translate_paragraphs` (pysbd, from the serve extra, is imported only for --paragraphs)."""
    try:
        from ..serving.paragraphs import translate_paragraphs
    except ImportError as error:
        sys.exit(
            f"vanilla-translate: --paragraphs needs the serve extra (pip install 'vanilla-transformer[serve]'): {error}"
        )
    return translate_paragraphs


def build_parser() -> argparse.ArgumentParser:
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
        "records none is refused; a multilingual MODEL needs it, with --target-lang: the direction to translate",
    )
    parser.add_argument(
        "--target-lang",
        metavar="LANG",
        help="check that MODEL translates into this language, likewise; a multilingual MODEL translates into it",
    )
    parser.add_argument(
        "--allow-zero-shot",
        action="store_true",
        help="a multilingual MODEL translates a direction it did not train, and that no pivot through its trained "
        "directions reaches, zero-shot (refused otherwise)",
    )
    parser.add_argument(
        "--paragraphs",
        action="store_true",
        help="a line may hold several sentences: each line is split into sentences (pysbd, with the rules of the "
        "model's source language), a sentence longer than the model accepts is cut at a clause or word boundary, "
        "and the translations are put back with the line's own spacing (needs the serve extra)",
    )
    parser.add_argument(
        "--glossary",
        type=Path,
        metavar="TSV",
        help="terms to keep: a UTF-8 TSV file, a header naming the two languages, then a source term and its "
        "target term per line; each source term found in a line has its target term placed in the translation",
    )
    return parser


def load_checked_translator(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Translator:
    """MODEL's translator in the direction the options name, or the parser's error naming what does not fit."""
    given = args.source_lang or args.target_lang
    trained = trained_languages(args.model) if given else None
    if given and not trained:
        parser.error(
            f"--source-lang/--target-lang: {model_folder(args.model)} records no languages (no {RESULTS}, as for a "
            "converted model); leave them out"
        )
    try:
        translator = load_translator(args.model, args.source_lang, args.target_lang, trained)
    except LanguageMismatchError as error:
        parser.error(str(error))
    if translator.all_languages and translator.languages is None:
        parser.error(
            f"{translator.folder} translates between any two of {', '.join(translator.all_languages)}: give the "
            "direction with --source-lang and --target-lang"
        )
    return translator


def routed_translation(
    translator: Translator, args: argparse.Namespace, parser: argparse.ArgumentParser, options: dict
) -> Callable[[list[str]], list[str]]:
    """The translation of sentences in the direction asked for: for a multilingual model, its route there
    (`Translator.route`), said on standard error where the model did not train the direction; the parser's error
    naming a direction that no pivot reaches without --allow-zero-shot, or a glossary with a pivot."""
    direction = translator.languages
    if not translator.all_languages or direction in translator.directions:
        return functools.partial(translator.translate, **options)
    try:
        route = translator.route(direction, args.allow_zero_shot)
    except ZeroShotError as error:
        parser.error(f"{error}: give --allow-zero-shot to translate it zero-shot")
    how = "zero-shot"
    if len(route) > 1:
        if args.glossary is not None:
            parser.error(f"--glossary: {direction} is translated through a pivot, which cannot place glossary terms")
        how = f"through {language_name(route[0].target)} ({', then '.join(map(str, route))})"
    print(f"vanilla-translate: {translator.folder} did not train {direction}: translating it {how}", file=sys.stderr)
    return functools.partial(translator.translate_route, route=route, **options)


def glossary_translation(
    path: Path, translator: Translator, parser: argparse.ArgumentParser, options: dict
) -> Callable[[list[str]], list[str]]:
    """The translation of sentences with the glossary of `path`, naming on standard error each term not placed; the
    parser's error naming what is wrong with the glossary."""
    if not path.is_file():
        parser.error(f"--glossary {path}: no such file")
    try:
        glossary = load_glossary(path, translator)
    except GlossaryError as error:
        parser.error(f"--glossary {error}")

    def translate_sentences(sentences: list[str]) -> list[str]:
        results = translate_with_glossary(translator, sentences, glossary, **options)
        for sentence, result in zip(sentences, results, strict=True):
            for term in result.missing:
                print(
                    f"vanilla-translate: glossary term {term} not placed in the translation of {sentence[:60]!r} "
                    "(its length limit came first)",
                    file=sys.stderr,
                )
        return [result.text for result in results]

    return translate_sentences


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    translate_paragraphs = paragraph_translator() if args.paragraphs else None  # before the model loads
    if args.input is not None and not args.input.is_file():
        parser.error(f"--input {args.input}: no such file")
    translator = load_checked_translator(args, parser)
    options = {"progress": args.input is not None, **decoding_options(args)}
    translate_sentences = routed_translation(translator, args, parser, options)  # refuses before reading the input
    name = str(args.input or "standard input")
    try:
        if args.input is None:
            lines = read_lines(sys.stdin.buffer, name)
        else:
            with args.input.open("rb") as file:
                lines = read_lines(file, name)
        if not args.paragraphs:
            translator.check_lengths(lines, name)
    except ValueError as error:
        parser.error(str(error))
    if args.glossary is not None:
        translate_sentences = glossary_translation(args.glossary, translator, parser, options)
    if translate_paragraphs is not None:
        translations = translate_paragraphs(
            lines,
            translator.languages[0] if translator.languages else "en",
            translate_sentences,
            fits=translator.fits,
        )
    else:
        translations = translate_sentences(lines)
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
