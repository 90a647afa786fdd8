"""Every option of `vanilla-train`, declared once: `TrainSettings`, whose fields carry their option's --help group,
help text, default and argparse type (`recipe.setting`), and `recipe.Recipe`, whose fields are the recipe's options in
the same way. The command line is built from them (`add_options`, `settings_from`); `training_job` checks the
settings, naming the option at fault, and makes the `TrainingJob` that `train.train` runs. A field is the option of
the same name (`num_proc` is `--num-proc`)."""

import argparse
import dataclasses
import json
import re
from typing import Any

from modeling_vanilla import PRESETS

from . import recipe
from .corpus import Direction, check_versions, multilingual, parse_pair
from .precision import PRECISIONS, precision_problem, resolve_precision
from .preprocess import DataSource
from .recipe import setting

GROUPS = ("data", "model", "recipe", "precision and speed", "evaluation", "output")
DEFAULT_PAIR = "en-de"


def option_name(name: str) -> str:
    """The option of a field: max_steps -> --max-steps."""
    return "--" + name.replace("_", "-")


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


def directions_argument(spec: str) -> str:
    """`--directions`, checked against the corpus's free languages (against `--languages` once both are read)."""
    try:
        multilingual.parse_directions(spec)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return spec.strip()


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """What the `vanilla-train` command line asks for; each field is the option of the same name, in --help's order
    (`recipe_overrides` stands for the recipe's options)."""

    pair: str | None = setting(
        "data",
        f"built-in corpus: SRC-TGT, two of its free languages in either direction (default: {DEFAULT_PAIR}; "
        "`vanilla-corpus --list-pairs` lists them)",
        default=None,
        type=pair_argument,
    )
    source_lang: str | None = setting(
        "data",
        "the source column of --train-file or --dataset-name (default: the first language of --pair); on the "
        "built-in corpus, --pair's own",
        default=None,
    )
    target_lang: str | None = setting(
        "data", "the target column, likewise (default: the second language of --pair)", default=None
    )
    train_file: str | None = setting(
        "data", "JSONL ({'translation': {src: ..., tgt: ...}} per line) or CSV", default=None
    )
    validation_file: str | None = setting("data", "needed with --train-file (same layouts)", default=None)
    test_file: str | None = setting("data", "optional; test BLEU and the model card need a test split", default=None)
    dataset_name: str | None = setting("data", "a `datasets` dataset name instead of files", default=None)
    dataset_config: str | None = setting("data", "its configuration", default=None)
    languages: tuple[str, ...] | None = setting(
        "data",
        "one multilingual model (a target-language token, Johnson et al. 2017): 'en,de,fr', or 'all' (every "
        "language of the built-in corpus with a free version); on the built-in corpus, every direction between "
        "them; with --train-file, files of the columns source_lang, target_lang, source, target (docs/corpus.md)",
        default=None,
        type=languages_argument,
    )
    directions: str | None = setting(
        "data",
        "the directions one multilingual model trains: 'en-de,de-en,...', 'english-centric' (English to and from "
        "every other language; the multilingual preset's default) or 'all' (every ordered pair; the other presets' "
        "default); between the languages of --languages where given, else those the list names (every free language "
        "for a named set)",
        default=None,
        type=directions_argument,
        metavar="SPEC",
    )
    leave_out: list[tuple[str, str]] = setting(
        "data",
        "with --languages or --directions: a direction left out of training and validation and still tested (a "
        "zero-shot probe; one outside --directions is only tested); repeatable",
        default_factory=list,
        type=direction_argument,
        metavar="SRC-TGT",
        action="append",
    )
    directions_per_verse: int | None = setting(
        "data",
        "with --languages or --directions on the built-in corpus: the directions each train and validation verse "
        "gives, drawn uniformly without replacement from the directions trained, afresh each epoch for training "
        "(seeded by --seed and the epoch), once for validation; or 'all' (default: 6, every direction of three "
        "languages)",
        default=6,
        type=per_verse_argument,
        metavar="K",
    )
    num_proc: int | None = setting(
        "data", "processes that tokenize the data (default: one)", default=None, type=int, least=1
    )
    preset: str = setting("recipe", "the recipe (default: demo)", default="demo", choices=tuple(sorted(recipe.RECIPES)))
    size: str | None = setting(
        "model", "a named model size (default: the recipe's)", default=None, choices=tuple(sorted(PRESETS))
    )
    model_config: dict = setting(
        "model", "JSON overriding the model size's fields", default_factory=dict, type=json.loads
    )
    model_name_or_path: str | None = setting(
        "model", "fine-tune this model (folder or Hub id) with its tokenizer", default=None
    )
    tokenizer: str | None = setting(
        "model", "an existing tokenizer folder instead of training a joint BPE", default=None
    )
    tokenizer_sample: int = setting(
        "model",
        "train the joint BPE on at most this many pairs, drawn at random (default: 1,000,000; a run of "
        "--languages learns from every train text)",
        default=1_000_000,
        type=int,
        least=1,
    )
    # Every field of `recipe.Recipe` but its size (--size, above) is an option of its own, None where not given.
    recipe_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = setting("recipe", "seed of the weights, the data order and dropout (default: 1)", default=1, type=int)
    resume_from_checkpoint: str | None = setting(
        "recipe", "a checkpoint folder, or 'last' for the newest one", default=None
    )
    precision: str = setting(  # with its short forms --fp32, --bf16, --fp16 (`add_precision_options`)
        "precision and speed",
        "auto (the default): bf16 mixed precision on a GPU or CPU with native bfloat16 (AVX512-BF16, AMX, "
        "Arm BF16), else fp32; bf16 also works on other CPUs, slowly; fp16 needs a CUDA GPU",
        default="auto",
        choices=("auto", *PRECISIONS),
    )
    torch_compile: bool = setting("precision and speed", "train the model under torch.compile", default=False)
    test_beams: int | None = setting(
        "evaluation", "beam size for the test set (default: the paper's, 4)", default=None, type=int, least=1
    )
    test_limit: int | None = setting(
        "evaluation",
        "translate only the first N test sentences (with --languages: of each direction)",
        default=None,
        type=int,
        least=1,
    )
    show: int = setting(
        "evaluation", "test translations printed next to their references", default=5, type=int, least=0
    )
    output_dir: str = setting("output", "run folder: checkpoints, final model, metrics, plot")
    keep_checkpoints: bool = setting(
        "output", "keep every checkpoint (default: those averaged, or resumed)", default=False
    )
    report_to: str = setting(
        "output",
        "experiment trackers of the Trainer, comma-separated: tensorboard, wandb, mlflow, ... (default: none)",
        default="none",
    )

    @property
    def pair_languages(self) -> tuple[str, str]:
        """The source and target columns: `--source-lang` and `--target-lang`, by default the languages of
        `--pair`."""
        pair = (self.pair or DEFAULT_PAIR).split("-")
        return self.source_lang or pair[0], self.target_lang or pair[1]


@dataclasses.dataclass(frozen=True)
class TrainingJob:
    """Everything a run needs, checked: the settings, and what they resolve to: the data, the recipe and the
    precision."""

    settings: TrainSettings
    data: DataSource
    recipe: recipe.Recipe
    precision: str  # resolved from settings.precision: fp32, bf16 or fp16

    @property
    def languages(self) -> tuple[str, str]:
        return self.data.source, self.data.target

    @property
    def multilingual(self) -> bool:
        """Whether the run trains one model on many directions (`--languages`)."""
        return bool(self.data.languages)


# ---------------------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------------------

# For --help: the demo's values that `recipe.recipe_for` changes for a pair outside the Latin script (en-ar here).
OUTSIDE_LATIN = recipe.recipe_for("demo", "en", "ar")
PAIR_NOTES = {
    field.name: f"; demo {getattr(OUTSIDE_LATIN, field.name):g} for a pair outside the Latin script"
    for field in dataclasses.fields(recipe.Recipe)
    if getattr(OUTSIDE_LATIN, field.name) != getattr(recipe.RECIPES["demo"], field.name)
}
RECIPE_OPTIONS = [field for field in dataclasses.fields(recipe.Recipe) if "group" in field.metadata]


def preset_values(name: str) -> str:
    """A recipe field's value in every preset, for --help: "demo 2000, base 100000, big 300000"."""
    values = {preset: getattr(run, name) for preset, run in recipe.RECIPES.items()}
    return ", ".join(f"{preset} {'none' if value is None else value}" for preset, value in values.items())


def add_option(
    group: argparse._ArgumentGroup, field: dataclasses.Field, help: str, default: Any, type: Any = None
) -> None:
    """The option of `field` (a `recipe.setting`) in `group`: required where `default` is MISSING, a flag where it
    is False; `type` where the field's metadata names none."""
    meta = field.metadata
    extra = {key: meta[key] for key in ("type", "metavar", "choices", "action") if meta[key] is not None}
    if "type" not in extra and type is not None:
        extra["type"] = type
    if default is dataclasses.MISSING:
        extra["required"] = True
    elif default is False:
        extra["action"] = "store_true"
    else:
        extra["default"] = default
    group.add_argument(option_name(field.name), help=help, **extra)


def default_of(field: dataclasses.Field) -> Any:
    """A `TrainSettings` field's default (MISSING where the option is required)."""
    return field.default if field.default_factory is dataclasses.MISSING else field.default_factory()


def add_precision_options(group: argparse._ArgumentGroup, field: dataclasses.Field) -> None:
    """--precision and its short forms --fp32, --bf16, --fp16 (one of them at most)."""
    precision = group.add_mutually_exclusive_group()
    add_option(precision, field, field.metadata["help"], default_of(field))
    for name in PRECISIONS:
        precision.add_argument(
            f"--{name}", dest="precision", action="store_const", const=name, help=f"--precision {name}"
        )


def add_options(parser: argparse.ArgumentParser) -> None:
    """An option for each field of `TrainSettings` and of `recipe.Recipe` (but the size), in its group; a recipe
    option's help shows the presets' values, and its default is None (the preset's)."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for field in dataclasses.fields(TrainSettings):
        if field.name == "recipe_overrides":
            for option in RECIPE_OPTIONS:
                notes = f"{preset_values(option.name)}{PAIR_NOTES.get(option.name, '')}"
                help = f"{option.metadata['help']} ({notes})"
                add_option(groups[option.metadata["group"]], option, help, None, type=option.type)
        elif field.name == "precision":
            add_precision_options(groups[field.metadata["group"]], field)
        else:
            add_option(groups[field.metadata["group"]], field, field.metadata["help"], default_of(field))


def settings_from(args: argparse.Namespace) -> TrainSettings:
    """The settings that `args` (parsed by a parser given `add_options`) hold."""
    overrides = {field.name: getattr(args, field.name) for field in RECIPE_OPTIONS}
    options = [field.name for field in dataclasses.fields(TrainSettings) if field.name != "recipe_overrides"]
    return TrainSettings(
        **{name: getattr(args, name) for name in options},
        recipe_overrides={name: value for name, value in overrides.items() if value is not None},
    )


# ---------------------------------------------------------------------------------------------------------------
# The checks, each naming the option at fault, and the job
# ---------------------------------------------------------------------------------------------------------------


def multilingual_problem(settings: TrainSettings, given: set[str]) -> str | None:
    """What cannot run with (or without) `--languages` or `--directions`, naming the option; `given` holds the
    options on the command line."""
    if not (settings.languages or settings.directions):
        if settings.preset == "multilingual":
            return "--preset multilingual trains one model on many directions: give --languages (e.g. en,de,fr or all)"
        named = [option for option in ("--leave-out", "--directions-per-verse") if option in given]
        return f"{named[0]} goes with --languages or --directions" if named else None
    multilingual_option = "--languages" if settings.languages else "--directions"
    for name in ("pair", "source_lang", "target_lang", "dataset_name"):
        if getattr(settings, name) is not None:
            return not_with_languages(option_name(name), multilingual_option)
    if "versions" in settings.recipe_overrides:
        return not_with_languages("--versions", multilingual_option)
    for name in ("model_name_or_path", "tokenizer"):
        if getattr(settings, name):
            return (
                f"{option_name(name)} does not go with {multilingual_option} yet: a multilingual run trains its own "
                "tokenizer and model"
            )
    if settings.train_file and "--directions-per-verse" in given:
        return "--directions-per-verse samples the built-in corpus's verses; your files' rows are trained as given"
    try:
        languages, chosen = run_directions(settings)
    except ValueError as error:
        return str(error)
    for source, target in settings.leave_out:
        if not {source, target} <= set(languages):
            return f"--leave-out {source}-{target}: not a direction of --languages {','.join(languages)}"
    if not [direction for direction in chosen if direction not in settings.leave_out]:
        return "--leave-out leaves no direction to train"
    return None


def run_directions(settings: TrainSettings) -> tuple[tuple[str, ...], list[Direction]]:
    """The languages of a multilingual run and the directions it chooses, before `--leave-out`: `--directions` (by
    default the preset's, `recipe.default_directions`) between the languages of `--languages`, else between those
    `--directions` names (every free language for a named set). ValueError naming the option at fault, and a language
    of `--languages` that no direction has."""
    spec = settings.directions or recipe.default_directions(settings.preset)
    named = f"--directions {spec}" if settings.directions else f"--preset {settings.preset}'s --directions {spec}"
    try:
        if settings.languages:
            languages = settings.languages
        elif spec in multilingual.DIRECTION_SETS:
            languages = tuple(multilingual.parse_languages("all"))
        else:
            languages = tuple(multilingual.languages_of(multilingual.parse_directions(spec)))
        chosen = multilingual.parse_directions(spec, languages)
    except ValueError as error:
        raise ValueError(f"{named}: {error}") from None
    if unused := [code for code in languages if not any(code in direction for direction in chosen)]:
        raise ValueError(
            f"--languages {','.join(languages)}: {named} has no direction from or into {', '.join(unused)}"
        )
    return languages, chosen


def not_with_languages(option: str, multilingual_option: str = "--languages") -> str:
    return (
        f"{option} does not go with {multilingual_option}: a multilingual run takes the built-in corpus's first free "
        "version of each language, or --train-file files whose rows name their languages"
    )


def option_problem(settings: TrainSettings) -> str | None:
    """A new model's options beside a model to fine-tune, or a number under its option's least value."""
    new_model = [name for name in ("size",) if settings.size is not None]
    new_model += [name for name in ("vocab_size", "dropout") if name in settings.recipe_overrides]
    new_model += ["model_config"] if settings.model_config else []
    if settings.model_name_or_path and new_model:
        return (
            f"--model-name-or-path fine-tunes an existing model with its own size and tokenizer; "
            f"{', '.join(map(option_name, new_model))} would be ignored"
        )
    for field in dataclasses.fields(TrainSettings):
        value, least = getattr(settings, field.name), field.metadata.get("least")
        if least is not None and value is not None and value < least:
            return f"{option_name(field.name)} must be at least {least}, got {value}"
    if settings.train_file and not settings.validation_file:
        return "--train-file needs --validation-file (validation loss and BLEU are measured on it)"
    return None


def data_option_problem(settings: TrainSettings) -> str | None:
    """What in the data options cannot run, naming the option: files and a dataset at once, a file or configuration
    without what it belongs to, test options without a test file, `--versions` off the built-in corpus, or a language
    the built-in pair has not."""
    if settings.train_file and settings.dataset_name:
        return "--train-file and --dataset-name both name the data: give one"
    for name, needs in (
        ("validation_file", "train_file"),
        ("test_file", "train_file"),
        ("dataset_config", "dataset_name"),
    ):
        if getattr(settings, name) and not getattr(settings, needs):
            return f"{option_name(name)} goes with {option_name(needs)}"
    if settings.train_file and not settings.test_file:
        for name in ("test_limit", "test_beams"):
            if getattr(settings, name) is not None:
                return f"{option_name(name)} decodes the test split, and --train-file without --test-file has none"
    if settings.train_file or settings.dataset_name:
        if "versions" in settings.recipe_overrides:
            return "--versions chooses the built-in corpus's Bible versions; your own data has none to choose"
        return None
    pair, columns = settings.pair or DEFAULT_PAIR, (settings.pair or DEFAULT_PAIR).split("-")
    for option, asked, column in (
        ("--source-lang", settings.source_lang, columns[0]),
        ("--target-lang", settings.target_lang, columns[1]),
    ):
        if asked is not None and asked != column:
            source, target = (asked, columns[1]) if option == "--source-lang" else (columns[0], asked)
            instead = f"for {source}-{target} use --pair {source}-{target}, or " if source != target else ""
            return (
                f"{option} {asked}: the built-in corpus of --pair {pair} has the columns {columns[0]} and "
                f"{columns[1]}; {instead}train on your own files (--train-file)"
            )
    return None


def training_recipe(settings: TrainSettings) -> recipe.Recipe:
    """The preset's recipe for the languages (`recipe.recipe_for`) with the command line's overrides; ValueError
    naming the options whose values no run can use."""
    try:
        multilingual_run = settings.languages or settings.directions
        languages = run_directions(settings)[0] if multilingual_run else settings.pair_languages
        run = recipe.recipe_for(settings.preset, *languages)
        size = {} if settings.size is None else {"size": settings.size}  # --size is the recipe's size
        run = dataclasses.replace(run, **size, **settings.recipe_overrides)
    except ValueError as error:  # named as the options that set them
        fields = {field.name for field in dataclasses.fields(recipe.Recipe)}
        named = re.sub(
            r"\b[a-z]+(?:_[a-z]+)*\b", lambda word: option_name(word[0]) if word[0] in fields else word[0], str(error)
        )
        raise ValueError(f"--preset {settings.preset} with these options: {named}") from None
    if not (settings.train_file or settings.dataset_name or multilingual_run):  # the built-in corpus of one pair
        try:
            check_versions(run.versions, settings.pair_languages[0])
        except ValueError as error:
            raise ValueError(f"--versions: {error}") from None
    return run


def data_source(settings: TrainSettings, versions: str) -> DataSource:
    """Where the run's pairs come from: the files, a `datasets` dataset, or the built-in corpus of `--pair` (in
    `versions`)."""
    files = None
    if settings.train_file:
        named = {"train": settings.train_file, "validation": settings.validation_file, "test": settings.test_file}
        files = {split: path for split, path in named.items() if path}
    if settings.languages or settings.directions:  # the rows name their languages
        languages, chosen = run_directions(settings)
        leave_out = tuple(Direction(*direction) for direction in settings.leave_out)
        return DataSource(
            source="",
            target="",
            files=files,
            languages=languages,
            directions=tuple(direction for direction in chosen if direction not in leave_out),
            leave_out=leave_out,
            directions_per_verse=settings.directions_per_verse,
            seed=settings.seed,
        )
    source, target = settings.pair_languages
    return DataSource(
        source=source,
        target=target,
        pair=settings.pair or DEFAULT_PAIR,
        versions=versions,
        files=files,
        dataset_name=settings.dataset_name,
        dataset_config=settings.dataset_config,
    )


def training_job(settings: TrainSettings, given: set[str]) -> TrainingJob:
    """The job the settings ask for, every option checked before anything is written; ValueError naming the option
    at fault. `given` holds the options on the command line."""
    if problem := multilingual_problem(settings, given) or option_problem(settings) or data_option_problem(settings):
        raise ValueError(problem)
    run = training_recipe(settings)
    precision = resolve_precision(settings.precision)
    if problem := precision_problem(precision):
        raise ValueError(problem)
    return TrainingJob(settings=settings, data=data_source(settings, run.versions), recipe=run, precision=precision)
