"""Score a translation model on a test set: corpus BLEU and chrF by sacreBLEU, each with its signature.

    vanilla-evaluate runs/demo --pair en-de                           # the built-in test split
    vanilla-evaluate runs/demo --test-file test.jsonl --json          # a file as vanilla-train reads it
    vanilla-evaluate runs/demo --source test.en --reference test.de   # plain text, line by line

MODEL is what `vanilla-translate` takes (a run folder, a model folder or a Hub id), and the sentences are translated
as it translates them: the model's own decoding (`--beams` overrides the beam size), in batches of about
`--max-tokens` source tokens. On the built-in test split this is the translation that `vanilla-train` scores for its
test BLEU, so the BLEU printed here is the one training reported for the same model (when training translated the
whole split: no `--test-limit`, and the same `--test-beams`). BLEU is sacreBLEU's corpus BLEU, through the `evaluate`
metric training uses, with the tokenizer that fits the target language (zh for Chinese, char for Japanese and Korean,
13a otherwise; the signature names it): the pair's, or for files the one the model's training recorded or
`--target-lang` names. Languages named that are not the model's are refused, as a `--pair` is. A multilingual
model translates the files in the direction `--source-lang`/`--target-lang` name (needed: it records many), as
`vanilla-translate` does: a direction it did not train through a pivot language inside it where two of its trained
directions reach it, else zero-shot only with `--allow-zero-shot` (refused otherwise), said on standard error and
recorded with the scores (`"pivot": "en"` or `"zero_shot": true`). chrF
is sacreBLEU's chrF (character 6-grams, beta 2). With `--pair`, the scores against every free version of the
target (multi-reference) and with every free version of the source as input follow.
"""

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

from ..corpus import language_name, load_corpus, parse_pair
from ..evaluation import corpus_bleu, corpus_chrf
from ..preprocess import load_file, sentences
from ..translator import (
    LanguageMismatchError,
    Translator,
    ZeroShotError,
    load_translator,
    model_folder,
    resolve_languages,
    trained_languages,
)
from ..wordings import print_wording_scores, rounded_wording_scores, wording_scores
from .common import add_model_arguments, decoding_options, read_lines


def test_languages(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, str] | None:
    """The languages of the test set, checked against those the model's training recorded, as `--pair` is: the
    pair's, or for files the ones named by `--source-lang`/`--target-lang` (for a `--test-file`, its columns), by
    default the recorded ones (a multilingual model needs them named); None for plain text files of a model that
    records none and names none."""
    if args.pair:
        option = "--pair"
        try:
            asked = parse_pair(args.pair)
        except ValueError as error:
            parser.error(str(error))
    else:
        option, asked = "--source-lang/--target-lang", (args.source_lang, args.target_lang)
    trained = trained_languages(args.model)
    try:
        languages = resolve_languages(args.model, *asked, trained)
    except LanguageMismatchError as error:
        parser.error(f"{option}: {error}")
    if languages is None and trained.languages:
        parser.error(
            f"{model_folder(args.model)} translates between any two of {', '.join(trained.languages)}: name the "
            "test set's direction with --source-lang and --target-lang"
        )
    if languages is None and args.test_file:
        parser.error(
            f"--test-file: {model_folder(args.model)} records no languages: name the columns with "
            "--source-lang and --target-lang"
        )
    return languages


def test_set(
    args: argparse.Namespace, parser: argparse.ArgumentParser, languages: tuple[str, str] | None
) -> tuple[list[str], list[str]]:
    """The source sentences and their references, from `--pair`, `--test-file` or `--source`/`--reference`."""
    if args.pair:
        return sentences(load_corpus(args.pair)["test"], *languages)
    if args.test_file:
        split = load_file("test", str(args.test_file))
        layout = split.features["translation"] if "translation" in split.column_names else split.column_names
        missing = [language for language in languages if language not in layout]
        if missing:
            parser.error(f"{args.test_file} has no {', '.join(missing)} (it has {', '.join(sorted(layout))})")
        return sentences(split, *languages)
    texts = {}
    for path in (args.source, args.reference):
        if not path.is_file():
            parser.error(f"{path}: no such file")
        with path.open("rb") as file:
            texts[path] = read_lines(file, str(path))
    sources, references = texts.values()
    if len(sources) != len(references):
        parser.error(f"{args.source} has {len(sources):,} lines but {args.reference} has {len(references):,}")
    return sources, references


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vanilla-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    test = parser.add_mutually_exclusive_group(required=True)
    test.add_argument(
        "--pair",
        help="the built-in corpus's test split of this pair (SRC-TGT), scored also against every free version of the "
        "target and with every free version of the source as input",
    )
    test.add_argument(
        "--test-file",
        type=Path,
        metavar="FILE",
        help="JSONL ({'translation': {src: ..., tgt: ...}} per line) or CSV, as in training",
    )
    test.add_argument(
        "--source", type=Path, metavar="FILE", help="a text file of source sentences, one per line (with --reference)"
    )
    parser.add_argument(
        "--reference", type=Path, metavar="FILE", help="a text file of their reference translations, line by line"
    )
    parser.add_argument(
        "--source-lang",
        metavar="LANG",
        help="the test files' source language, --test-file's source column (default: the language the model's "
        "training recorded; a different one is refused)",
    )
    parser.add_argument(
        "--target-lang",
        metavar="LANG",
        help="the references' language, --test-file's reference column; it picks BLEU's tokenizer (default: likewise)",
    )
    parser.add_argument(
        "--allow-zero-shot",
        action="store_true",
        help="a multilingual MODEL translates a direction it did not train, and that no pivot through its trained "
        "directions reaches, zero-shot (refused otherwise)",
    )
    parser.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    return parser


def routed_translation(
    translator: Translator, args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[Callable[[list[str]], list[str]], dict]:
    """The translation of sentences in the test set's direction, and what the scores record of its route: for a
    multilingual model that did not train the direction, `Translator.route`'s way there (through a pivot language
    inside the model, `{"pivot": "en"}`, or zero-shot, `{"zero_shot": True}`), said on standard error; the parser's
    error naming a direction that no pivot reaches without --allow-zero-shot."""
    options = decoding_options(args)
    direction = translator.languages
    if not translator.all_languages or direction in translator.directions:
        return functools.partial(translator.translate, **options), {}
    try:
        route = translator.route(direction, args.allow_zero_shot)
    except ZeroShotError as error:
        parser.error(f"{error}: give --allow-zero-shot to score its zero-shot translation")
    if len(route) > 1:
        how = f"through {language_name(route[0].target)} ({', then '.join(map(str, route))})"
        record = {"pivot": route[0].target}
    else:
        how, record = "zero-shot", {"zero_shot": True}
    print(f"vanilla-evaluate: {translator.folder} did not train {direction}: translating it {how}", file=sys.stderr)
    return functools.partial(translator.translate_route, route=route, **options), record


def print_scores(scores: dict) -> None:
    print(f"BLEU {scores['bleu']['score']:.2f}  {scores['bleu']['signature']}")
    print(f"chrF {scores['chrf']['score']:.2f}  {scores['chrf']['signature']}")
    route = f", through {scores['pivot']}" if "pivot" in scores else ", zero-shot" if "zero_shot" in scores else ""
    test = f"{scores['sentences']:,} sentences of {scores['test']}"
    print(f"{test}, beam {scores['num_beams']}, {scores['model']}{route}")
    if "multi_reference" in scores:
        print_wording_scores(scores)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.source is None) != (args.reference is None):
        parser.error("--source and --reference go together")
    if (args.source_lang or args.target_lang) and args.pair:
        parser.error("--source-lang/--target-lang name the languages of test files; --pair names its own")
    languages = test_languages(args, parser)
    with contextlib.redirect_stdout(sys.stderr):  # what loading and translating print; stdout holds the scores
        try:
            translator = load_translator(args.model, *(languages or ()))  # a multilingual model: into the target
        except ValueError as error:  # a language mismatch too
            parser.error(str(error))
        translate, route = routed_translation(translator, args, parser)  # refuses before reading the test set
        try:
            sources, references = test_set(args, parser, languages)
            translator.check_lengths(sources, "the test set")
        except ValueError as error:
            parser.error(str(error))
        predictions = translate(sources)
        wordings = wording_scores(translate, args.pair, predictions=predictions) if args.pair else None
    scores = score(translator, args, languages, (sources, references, predictions), wordings) | route
    if args.json:
        print(json.dumps(scores))
    else:
        print_scores(scores)


def score(
    translator: Translator,
    args: argparse.Namespace,
    languages: tuple[str, str] | None,
    texts: tuple[list[str], list[str], list[str]],
    wordings: dict | None,
) -> dict:
    """The scores `main` prints: BLEU with the target's tokenizer, chrF, and the wordings' scores of a --pair."""
    sources, references, predictions = texts
    if languages is None:
        print(
            f"BLEU tokenizer 13a: {translator.folder} records no target language (--target-lang names it)",
            file=sys.stderr,
        )
    bleu = corpus_bleu(predictions, references, languages[1] if languages else None)
    return {
        "model": translator.folder,
        "test": str(args.pair or args.test_file or args.source),
        "sentences": len(sources),
        "num_beams": args.beams or translator.model.generation_config.num_beams or 1,
        "bleu": {"score": bleu["score"], "signature": bleu["signature"]},
        "chrf": corpus_chrf(predictions, references),
        **(rounded_wording_scores(wordings) if wordings else {}),
    }


if __name__ == "__main__":
    main()
