"""Train a translator with the paper's recipe (section 5) on transformers' `Seq2SeqTrainer`.

    vanilla-train --preset demo --output-dir runs/demo           # minutes on 2 CPU cores
    vanilla-train --preset base --pair en-de --output-dir runs/base
    vanilla-train --preset multilingual --languages all --output-dir runs/multilingual   # one model, every direction
    torchrun --nproc_per_node 2 -m vanilla_training.cli.train --preset demo ...   # data-parallel, same command

The recipe: Adam (beta 0.9/0.98, eps 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label
smoothing 0.1, dropout 0.1, batches of about `max_tokens` tokens of sentences of similar length, checkpoint
averaging of the last N checkpoints, and test BLEU with beam 4, length penalty 0.6, output length input + 50.
The run folder ends up Hub-ready: model, tokenizer, generation config, code, metrics and a plot, and `final/` holds
the model card (`README.md`); `vanilla-push` uploads it.
"""

import argparse
import dataclasses
import json
import os
import re
import sys

from accelerate import PartialState

from modeling_vanilla import PRESETS, VanillaForConditionalGeneration

from .. import allocator, recipe
from ..corpus import VERSION_CHOICES, check_versions, multilingual, parse_pair
from ..precision import PRECISIONS, mixed_precision_problem, resolve_precision
from ..preprocess import DataSource
from ..train import ModelFactory, TrainingJob, train

GROUPS = ("data", "model", "recipe", "precision and speed", "evaluation", "output")
# The option of each recipe field, for error messages: max_steps -> --max-steps.
RECIPE_OPTIONS = {field.name: f"--{field.name.replace('_', '-')}" for field in dataclasses.fields(recipe.Recipe)}


# For --help: the demo's values that `recipe.recipe_for` changes for a pair outside the Latin script (en-ar here).
OUTSIDE_LATIN = recipe.recipe_for("demo", "en", "ar")
PAIR_NOTES = {
    field.name: f"; demo {getattr(OUTSIDE_LATIN, field.name):g} for a pair outside the Latin script"
    for field in dataclasses.fields(recipe.Recipe)
    if getattr(OUTSIDE_LATIN, field.name) != getattr(recipe.RECIPES["demo"], field.name)
}


def preset_values(name: str) -> str:
    """A recipe field's value in every preset, for --help: "demo 2000, base 100000, big 300000"."""
    values = {preset: getattr(run, name) for preset, run in recipe.RECIPES.items()}
    return ", ".join(f"{preset} {'none' if value is None else value}" for preset, value in values.items())


def add_multilingual_options(data: argparse._ArgumentGroup) -> None:
    """`--languages` and the options of a multilingual run (see `multilingual_problem` for what goes with them)."""
    data.add_argument(
        "--languages",
        type=languages_argument,
        help="one multilingual model (a target-language token, Johnson et al. 2017): 'en,de,fr', or 'all' (every "
        "language of the built-in corpus with a free version); on the built-in corpus, every direction between "
        "them; with --train-file, files of the columns source_lang, target_lang, source, target (docs/corpus.md)",
    )
    data.add_argument(
        "--leave-out",
        action="append",
        default=[],
        type=direction_argument,
        metavar="SRC-TGT",
        help="with --languages: a direction left out of training and validation and still tested (a zero-shot "
        "probe); repeatable",
    )
    data.add_argument(
        "--directions-per-verse",
        type=per_verse_argument,
        default=6,
        metavar="K",
        help="with --languages on the built-in corpus: the directions each train and validation verse gives, drawn "
        "uniformly without replacement from the directions trained (seeded by --seed), or 'all' (default: 6, every "
        "direction of three languages)",
    )


def add_recipe_options(groups: dict[str, argparse._ArgumentGroup]) -> None:
    """An option for each field of `recipe.Recipe` (but the size: `--size`), in the group its metadata names, its
    help showing the presets' values."""
    for field in dataclasses.fields(recipe.Recipe):
        if "group" not in field.metadata:
            continue
        choices = {"selection": recipe.SELECTIONS, "versions": VERSION_CHOICES}.get(field.name)
        kind = str if choices else float if field.name == "dropout" else field.type
        groups[field.metadata["group"]].add_argument(
            f"--{field.name.replace('_', '-')}",
            type=kind,
            choices=choices,
            help=f"{field.metadata['help']} ({preset_values(field.name)}{PAIR_NOTES.get(field.name, '')})",
        )


def add_precision_options(speed: argparse._ArgumentGroup) -> None:
    """--precision and its short forms --fp32, --bf16, --fp16 (one of them at most)."""
    precision = speed.add_mutually_exclusive_group()
    precision.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="auto (the default): bf16 mixed precision on a GPU or CPU with native bfloat16 (AVX512-BF16, AMX, "
        "Arm BF16), else fp32; bf16 also works on other CPUs, slowly; fp16 needs a CUDA GPU",
    )
    precision.add_argument("--fp32", dest="precision", action="store_const", const="fp32", help="--precision fp32")
    precision.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="--precision bf16")
    precision.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="--precision fp16")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vanilla-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    data, model, run, speed, evaluation, output = groups.values()
    data.add_argument(
        "--pair",
        type=pair_argument,
        help="built-in corpus: SRC-TGT, two of its free languages in either direction (default: en-de; "
        "`vanilla-corpus --list-pairs` lists them)",
    )
    data.add_argument(
        "--source-lang",
        help="the source column of --train-file or --dataset-name (default: the first language of --pair); on the "
        "built-in corpus, --pair's own",
    )
    data.add_argument("--target-lang", help="the target column, likewise (default: the second language of --pair)")
    data.add_argument("--train-file", help="JSONL ({'translation': {src: ..., tgt: ...}} per line) or CSV")
    data.add_argument("--validation-file", help="needed with --train-file (same layouts)")
    data.add_argument("--test-file", help="optional; test BLEU and the model card need a test split")
    data.add_argument("--dataset-name", help="a `datasets` dataset name instead of files")
    data.add_argument("--dataset-config", help="its configuration")
    add_multilingual_options(data)
    data.add_argument("--num-proc", type=int, help="processes that tokenize the data (default: one)")
    run.add_argument("--preset", choices=sorted(recipe.RECIPES), default="demo", help="the recipe (default: demo)")
    model.add_argument("--size", choices=sorted(PRESETS), help="a named model size (default: the recipe's)")
    model.add_argument("--model-config", type=json.loads, default={}, help="JSON overriding the model size's fields")
    model.add_argument("--model-name-or-path", help="fine-tune this model (folder or Hub id) with its tokenizer")
    model.add_argument("--tokenizer", help="an existing tokenizer folder instead of training a joint BPE")
    model.add_argument(
        "--tokenizer-sample",
        type=int,
        default=1_000_000,
        help="train the joint BPE on at most this many pairs, drawn at random (default: 1,000,000; a run of "
        "--languages learns from every train text)",
    )
    add_recipe_options(groups)
    run.add_argument("--seed", type=int, default=1, help="seed of the weights, the data order and dropout (default: 1)")
    run.add_argument("--resume-from-checkpoint", help="a checkpoint folder, or 'last' for the newest one")
    add_precision_options(speed)
    speed.add_argument("--torch-compile", action="store_true", help="train the model under torch.compile")
    evaluation.add_argument("--test-beams", type=int, help="beam size for the test set (default: the paper's, 4)")
    evaluation.add_argument(
        "--test-limit", type=int, help="translate only the first N test sentences (with --languages: of each direction)"
    )
    evaluation.add_argument("--show", type=int, default=5, help="test translations printed next to their references")
    output.add_argument("--output-dir", required=True, help="run folder: checkpoints, final model, metrics, plot")
    output.add_argument(
        "--keep-checkpoints", action="store_true", help="keep every checkpoint (default: those averaged, or resumed)"
    )
    output.add_argument(
        "--report-to",
        default="none",
        help="experiment trackers of the Trainer, comma-separated: tensorboard, wandb, mlflow, ... (default: none)",
    )
    return parser


def run_recipe(args: argparse.Namespace) -> recipe.Recipe:
    """The preset's recipe for the pair (`recipe.recipe_for`) with the command line's overrides."""
    fields = {field.name for field in dataclasses.fields(recipe.Recipe)}
    overrides = {name: value for name, value in vars(args).items() if name in fields and value is not None}
    return dataclasses.replace(recipe.recipe_for(args.preset, *(args.languages or languages(args))), **overrides)


def languages(args: argparse.Namespace) -> tuple[str, str]:
    """The source and target columns: `--source-lang` and `--target-lang`, by default the languages of `--pair`."""
    return args.source_lang or args.pair.split("-")[0], args.target_lang or args.pair.split("-")[1]


def pair_argument(pair: str) -> str:
    """`--pair`, checked: two languages of the built-in corpus that both have a free version."""
    try:
        parse_pair(pair)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return pair


def languages_argument(spec: str) -> tuple[str, ...]:
    """`--languages`, checked: `multilingual.parse_languages`."""
    try:
        return tuple(multilingual.parse_languages(spec))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def direction_argument(direction: str) -> tuple[str, str]:
    """`--leave-out`: SRC-TGT, two distinct codes (checked against `--languages` once both are read)."""
    codes = direction.split("-")
    if len(codes) != 2 or not all(codes) or codes[0] == codes[1]:
        raise argparse.ArgumentTypeError(f"{direction!r}: give a direction as SRC-TGT, e.g. de-fr")
    return codes[0], codes[1]


def per_verse_argument(value: str) -> int | None:
    """`--directions-per-verse`: a positive whole number, or 'all' (None: every direction)."""
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive whole number, or 'all'")
    return int(value)


def multilingual_problem(args: argparse.Namespace, argv_options: set[str]) -> str | None:
    """What cannot run with (or without) `--languages`, naming the option."""
    if not args.languages:
        if args.preset == "multilingual":
            return "--preset multilingual trains one model on many directions: give --languages (e.g. en,de,fr or all)"
        given = [option for option in ("--leave-out", "--directions-per-verse") if option in argv_options]
        return f"{given[0]} goes with --languages" if given else None
    for option in ("--pair", "--source-lang", "--target-lang", "--dataset-name", "--versions"):
        if getattr(args, option[2:].replace("-", "_")) is not None:
            return (
                f"{option} does not go with --languages: a multilingual run takes the built-in corpus's first free "
                "version of each language, or --train-file files whose rows name their languages"
            )
    for option in ("--model-name-or-path", "--tokenizer"):
        if getattr(args, option[2:].replace("-", "_")):
            return f"{option} does not go with --languages yet: a multilingual run trains its own tokenizer and model"
    if args.train_file and "--directions-per-verse" in argv_options:
        return "--directions-per-verse samples the built-in corpus's verses; your files' rows are trained as given"
    trained = multilingual.directions(args.languages, args.leave_out)
    for source, target in args.leave_out:
        if not {source, target} <= set(args.languages):
            return f"--leave-out {source}-{target}: not a direction of --languages {','.join(args.languages)}"
    if not trained:
        return "--leave-out leaves no direction to train"
    return None


def data_source(args: argparse.Namespace, versions: str) -> DataSource:
    """Where the run's pairs come from: the files, a `datasets` dataset, or the built-in corpus of `--pair` (in
    `versions`)."""
    files = None
    if args.train_file:
        named = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        files = {split: path for split, path in named.items() if path}
    if args.languages:  # the rows name their languages
        return DataSource(
            source="",
            target="",
            files=files,
            languages=args.languages,
            leave_out=tuple(args.leave_out),
            directions_per_verse=args.directions_per_verse,
            seed=args.seed,
        )
    source, target = languages(args)
    return DataSource(
        source=source,
        target=target,
        pair=args.pair,
        versions=versions,
        files=files,
        dataset_name=args.dataset_name,
        dataset_config=args.dataset_config,
    )


def data_option_problem(args: argparse.Namespace) -> str | None:
    """What in the data options cannot run, naming the option: files and a dataset at once, a file or configuration
    without what it belongs to, test options without a test file, `--versions` off the built-in corpus, or a language
    the built-in pair has not."""
    if args.train_file and args.dataset_name:
        return "--train-file and --dataset-name both name the data: give one"
    for option, needs, present in (
        ("--validation-file", "--train-file", args.train_file),
        ("--test-file", "--train-file", args.train_file),
        ("--dataset-config", "--dataset-name", args.dataset_name),
    ):
        if getattr(args, option[2:].replace("-", "_")) and not present:
            return f"{option} goes with {needs}"
    if args.train_file and not args.test_file:
        for option in ("--test-limit", "--test-beams"):
            if getattr(args, option[2:].replace("-", "_")) is not None:
                return f"{option} decodes the test split, and --train-file without --test-file has none"
    if args.train_file or args.dataset_name:
        if args.versions is not None:
            return "--versions chooses the built-in corpus's Bible versions; your own data has none to choose"
        return None
    pair = args.pair.split("-")
    for option, asked, column in (
        ("--source-lang", args.source_lang, pair[0]),
        ("--target-lang", args.target_lang, pair[1]),
    ):
        if asked is not None and asked != column:
            source, target = (asked, pair[1]) if option == "--source-lang" else (pair[0], asked)
            instead = f"for {source}-{target} use --pair {source}-{target}, or " if source != target else ""
            return (
                f"{option} {asked}: the built-in corpus of --pair {args.pair} has the columns {pair[0]} and {pair[1]}; "
                f"{instead}train on your own files (--train-file)"
            )
    return None


def parse_args(argv: list[str] | None = None) -> TrainingJob:
    """The job the command line asks for, every option checked before anything is written."""
    parser = build_parser()
    args = parser.parse_args(argv)
    argv_options = {word.split("=")[0] for word in (sys.argv[1:] if argv is None else argv) if word.startswith("--")}
    if problem := multilingual_problem(args, argv_options):
        parser.error(problem)
    args.pair = args.pair or "en-de"
    new_model = [name for name in ("size", "vocab_size", "dropout") if getattr(args, name) is not None]
    new_model += ["model_config"] if args.model_config else []
    if args.model_name_or_path and new_model:
        parser.error(
            f"--model-name-or-path fine-tunes an existing model with its own size and tokenizer; "
            f"{', '.join('--' + name.replace('_', '-') for name in new_model)} would be ignored"
        )
    for name, least in (("num_proc", 1), ("tokenizer_sample", 1), ("test_beams", 1), ("test_limit", 1), ("show", 0)):
        if getattr(args, name) is not None and getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(args, name)}")
    if args.train_file and not args.validation_file:
        parser.error("--train-file needs --validation-file (validation loss and BLEU are measured on it)")
    if problem := data_option_problem(args):
        parser.error(problem)
    try:
        run = run_recipe(args)
    except ValueError as error:  # named as the options that set them
        message = re.sub(r"\b[a-z]+(?:_[a-z]+)*\b", lambda word: RECIPE_OPTIONS.get(word[0], word[0]), str(error))
        parser.error(f"--preset {args.preset} with these options: {message}")
    if not (args.train_file or args.dataset_name or args.languages):  # the built-in corpus of one pair
        try:
            check_versions(run.versions, languages(args)[0])
        except ValueError as error:
            parser.error(f"--versions: {error}")
    precision = resolve_precision(args.precision)
    if problem := mixed_precision_problem(precision):
        parser.error(problem)
    return TrainingJob(
        output_dir=args.output_dir,
        data=data_source(args, run.versions),
        preset=args.preset,
        recipe=run,
        seed=args.seed,
        precision=precision,
        precision_asked=args.precision,
        model_config=args.model_config,
        model_name_or_path=args.model_name_or_path,
        tokenizer=args.tokenizer,
        tokenizer_sample=args.tokenizer_sample,
        num_proc=args.num_proc,
        resume_from_checkpoint=args.resume_from_checkpoint,
        keep_checkpoints=args.keep_checkpoints,
        report_to=args.report_to.split(","),
        torch_compile=args.torch_compile,
        test_beams=args.test_beams,
        test_limit=args.test_limit,
        show=args.show,
    )


def main(argv: list[str] | None = None, model_factory: ModelFactory = VanillaForConditionalGeneration) -> dict:
    """Runs the job the command line asks for and returns the results written to `final/training_results.json`.
    `model_factory` lets an experiment train another implementation (MarianMTModel) under exactly the same recipe."""
    args = parse_args(argv)
    allocator.reuse_freed_memory()
    return train(args, model_factory)


def console_main() -> None:
    """`vanilla-train`: the run, then the end of the process."""
    main()
    if PartialState().num_processes > 1:
        # A data-parallel process ends without running destructors, its files written and its output flushed: in
        # torch 2.13 a gloo process group's own teardown at exit can abort ("terminate called without an active
        # exception") or hang (py-spy: ~ProcessGroupGloo, reached from DDP's Reducer, joins its worker thread while
        # holding the GIL, and the worker waits for the GIL to free the tensors of its last work).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    console_main()
