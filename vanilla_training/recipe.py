"""The paper's training recipe (section 5) and this project's named recipes. Every constant of the recipe has its
home here; the rest of `vanilla_training/` imports it. (The paper's decoding, section 6.1, lives with the model:
`modeling_vanilla.paper_generation_config`; its model sizes, Table 3, in `modeling_vanilla.PRESETS`.)"""

import dataclasses
from collections.abc import Callable
from typing import Any

from modeling_vanilla import LENGTH_PENALTY

from .corpus import VERSION_CHOICES, free_versions

# Section 5.3: Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, and warmup_steps = 4000 in equation 3.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.98
ADAM_EPSILON = 1e-9
WARMUP_STEPS = 4000
# Section 5.4: label smoothing of value 0.1.
LABEL_SMOOTHING = 0.1
SELECTIONS = ("last", "best")  # see Recipe.selection
# Languages written in the Latin script (of the built-in corpus's): the demo preset trains a pair of two of them at
# its full learning rate and 8,000 tokens, any other pair at half the rate and 4,000 tokens (`recipe_for`; why:
# docs/recipes.md).
LATIN_SCRIPT = frozenset({"en", "de", "fr", "it", "es", "pt", "pl", "ro", "tr", "vi", "id", "sw", "tl"})


def equation_3(step: int, d_model: int, warmup_steps: int) -> float:
    """Equation 3, the learning rate of optimizer step `step` (1, 2, ...): d_model^-0.5 * min(step^-0.5, step *
    warmup_steps^-1.5). A run multiplies it by its `lr_scale` (the optimizer's own rate: `train.training_arguments`);
    `trainer.TranslationTrainer.create_scheduler` applies it."""
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def setting(
    group: str,
    help: str,
    *,
    type: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    action: str | None = None,
    least: int | None = None,
    **field_options: Any,
) -> Any:
    """A field that `vanilla-train` offers as an option (of `Recipe` or `train_settings.TrainSettings`): its --help
    `group` and `help` text (as fairseq's dataclass configs carry theirs), the option's argparse `type`, `metavar`,
    `choices` and `action`, and the `least` value it takes (checked once parsed, naming the option)."""
    metadata = {
        "group": group,
        "help": help,
        "type": type,
        "metavar": metavar,
        "choices": choices,
        "action": action,
        "least": least,
    }
    return dataclasses.field(metadata=metadata, **field_options)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a training run needs besides data: a model size of `modeling_vanilla.PRESETS` and the schedule of
    section 5. Each field but `size` is a `vanilla-train` option of the same name."""

    size: str  # --size, with the model options
    vocab_size: int = setting("model", "joint BPE vocabulary size")
    max_tokens: int = setting("recipe", "tokens per batch and process, padding included (section 5.1)")
    gradient_accumulation_steps: int = setting("recipe", "batches summed into one optimizer step")
    warmup_steps: int = setting("recipe", "warmup of equation 3")
    max_steps: int = setting("recipe", "optimizer steps")
    eval_steps: int = setting("evaluation", "steps between evaluations (validation loss and greedy BLEU)")
    save_steps: int = setting("output", "steps between checkpoints")
    average_last: int = setting("output", "checkpoints averaged into the final model (section 6.1)")
    lr_scale: float = setting("recipe", "multiplies equation 3's learning rate", default=1.0)
    label_smoothing: float = setting("recipe", "label smoothing (section 5.4)", default=LABEL_SMOOTHING)
    dropout: float | None = setting(
        "model", "dropout of the model (section 5.4; none: its size's)", type=float, default=None
    )
    max_length: int = setting(
        "data", "longest pair kept, in tokens (longer pairs are counted and left out)", default=256
    )
    bleu_sentences: int = setting(
        "evaluation", "validation sentences translated at each evaluation (0: loss only)", default=200
    )
    max_train_minutes: float = setting(
        "recipe", "training ends at the first step past this many minutes (0: no limit)", default=0.0
    )
    selection: str = setting(
        "evaluation",
        "checkpoints averaged at the end: the last ones, or those ending at the best evaluation",
        choices=SELECTIONS,
        default="last",
    )
    patience: int = setting(
        "evaluation", "evaluations without a better validation score before training stops (0: never)", default=0
    )
    length_penalty: float = setting(
        "evaluation", "length penalty of the saved model's beam search (section 6.1: 0.6)", default=LENGTH_PENALTY
    )
    versions: str = setting(
        "data",
        "built-in corpus: train on one version a side (one), that and one verse in 12 worded as the source's second "
        "free version (mixed), or every free version pairing (all)",
        choices=VERSION_CHOICES,
        default="one",
    )

    def __post_init__(self) -> None:
        """Refuses values no run can use, naming the field."""
        positive = ("vocab_size", "max_tokens", "gradient_accumulation_steps", "max_steps", "eval_steps", "save_steps")
        for name in (*positive, "warmup_steps", "average_last", "max_length", "lr_scale"):  # equation 3 divides by
            if getattr(self, name) <= 0:  # warmup_steps
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("bleu_sentences", "max_train_minutes", "patience", "length_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be zero or positive, got {getattr(self, name)}")
        for name in ("label_smoothing", "dropout"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        if self.versions not in VERSION_CHOICES:
            raise ValueError(f"versions must be one of {VERSION_CHOICES}, got {self.versions!r}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        if self.patience and self.selection != "best":
            raise ValueError("patience stops a run past its best evaluation: it needs selection 'best'")
        if self.selection == "best" and self.eval_steps % self.save_steps:
            raise ValueError(
                f"selection 'best' averages the checkpoints ending at the best evaluation, so save_steps "
                f"({self.save_steps}) must divide eval_steps ({self.eval_steps})"
            )


RECIPES = {
    # The main job: a translator in 15 minutes in all on 2 CPU cores, 12 of them training. The "demo" size (d_model 128,
    # 3 + 3 layers, weights from N(0, 0.02), no dropout) with an 8,000-token vocabulary, verses of up to 64 tokens,
    # steps of 2k tokens at the full learning rate of equation 3 after a 400-step warmup, for as many steps as 12
    # minutes allow; validation BLEU on the whole validation split every 2,000 steps and at the end picks the
    # checkpoints to average; it decodes with a length penalty of 1.0. On the built-in corpus, one train verse in 12
    # comes a second time worded as the source's second free version (English: the KJV beside the WEB). How this differs
    # from the paper, and why: docs/recipes.md.
    "demo": Recipe(
        size="demo",
        vocab_size=8000,
        max_tokens=2048,
        gradient_accumulation_steps=1,
        warmup_steps=400,
        max_steps=100_000,
        eval_steps=2000,
        save_steps=100,
        average_last=5,
        lr_scale=1.0,
        max_length=64,
        bleu_sentences=1000,
        max_train_minutes=12.0,
        selection="best",
        length_penalty=1.0,
        versions="mixed",
    ),
    # An hour of training on 2 CPU cores: the "small" size (d_model 256, 3 + 3 layers) with dropout 0.2 and half of
    # equation 3's learning rate, stopping after 3 evaluations (6,000 steps) without a better validation BLEU; the
    # demo's versions (why: docs/recipes.md).
    "hour": Recipe(
        size="small",
        vocab_size=4000,
        max_tokens=2048,
        gradient_accumulation_steps=1,
        warmup_steps=400,
        max_steps=1_000_000,
        eval_steps=2000,
        save_steps=100,
        average_last=5,
        lr_scale=0.5,
        dropout=0.2,
        max_length=64,
        bleu_sentences=1000,
        max_train_minutes=60.0,
        selection="best",
        patience=3,
        versions="mixed",
    ),
    # One model for many directions of the built-in corpus (`vanilla-train --languages ...`), by default English to and
    # from every other language (`DEFAULT_DIRECTIONS`), in at most two hours on 2 CPU cores: the "small" size
    # (d_model 256, 3 + 3 layers) with dropout 0.1 and half of equation 3's rate, a 16,000-token joint vocabulary,
    # verses of up to 96 tokens, validation BLEU (the mean over directions) on 600 sentences every 2,000 steps picking
    # the checkpoints to average; one version a language (why: docs/recipes.md, "The multilingual preset").
    "multilingual": Recipe(
        size="small",
        vocab_size=16000,
        max_tokens=4096,
        gradient_accumulation_steps=1,
        warmup_steps=800,
        max_steps=1_000_000,
        eval_steps=2000,
        save_steps=100,
        average_last=5,
        lr_scale=0.5,
        dropout=0.1,
        max_length=96,
        bleu_sentences=600,
        max_train_minutes=120.0,
        selection="best",
        patience=3,
    ),
    # The paper's base model (Table 3) with ~25k target tokens per step (section 5.1; 4096 x 6 accumulated on one
    # device: divide gradient_accumulation_steps by the number of processes).
    "base": Recipe(
        size="base",
        vocab_size=37000,
        max_tokens=4096,
        gradient_accumulation_steps=6,
        warmup_steps=WARMUP_STEPS,
        max_steps=100_000,
        eval_steps=2000,
        save_steps=2000,
        average_last=5,
    ),
    "big": Recipe(
        size="big",
        vocab_size=37000,
        max_tokens=4096,
        gradient_accumulation_steps=6,
        warmup_steps=WARMUP_STEPS,
        max_steps=300_000,
        eval_steps=5000,
        save_steps=5000,
        average_last=20,
    ),
}

# The directions a multilingual run trains where `--directions` is not given (a named set of
# `corpus.multilingual.DIRECTION_SETS`), by preset: the multilingual preset's are English to and from every other
# language of the run (`--languages all`: the 20 directions between English and the 10 other free languages); every
# other preset's are every ordered pair of the run's languages.
DEFAULT_DIRECTIONS = {"multilingual": "english-centric"}


def default_directions(preset: str) -> str:
    """The named set of directions that a multilingual run of `preset` trains where `--directions` is not given."""
    return DEFAULT_DIRECTIONS.get(preset, "all")


def recipe_for(preset: str, source: str, *targets: str) -> Recipe:
    """The preset's recipe for a language pair (or the languages of a multilingual run, the first as `source`): the
    demo preset at half its learning rate and with 4,000 tokens unless every language is written in the Latin script
    (see `LATIN_SCRIPT`), and on one version a side where the source has a single free version (or is not a language
    of the built-in corpus)."""
    run = RECIPES[preset]
    if run.versions == "mixed" and len(free_versions(source)) < 2:
        run = dataclasses.replace(run, versions="one")
    if preset == "demo" and not {source, *targets} <= LATIN_SCRIPT:
        return dataclasses.replace(run, lr_scale=0.5, vocab_size=4000)
    return run
