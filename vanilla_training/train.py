"""Train a translator with the paper's recipe (section 5) on transformers' `Seq2SeqTrainer`.

    python -m vanilla_training.train --preset demo --output-dir runs/demo           # minutes on 2 CPU cores
    python -m vanilla_training.train --preset base --pair en-de --output-dir runs/base
    torchrun --nproc_per_node 2 -m vanilla_training.train --preset demo ...       # data-parallel, same script

The recipe: Adam (beta 0.9/0.98, eps 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label
smoothing 0.1, dropout 0.1, batches of about `max_tokens` tokens of sentences of similar length, checkpoint
averaging of the last N checkpoints, and test BLEU with beam 4, length penalty 0.6, output length input + 50.
The run folder ends up Hub-ready: model, tokenizer, generation config, code, metrics and a plot, and `final/` holds
the model card (`README.md`, see `vanilla_training/card.py`); `python -m vanilla_training.push` uploads it.

The run, step by step (each step is a function below): arguments, data, tokenizer, model, trainer, train,
average, evaluate, save and card.
"""

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import datasets
import torch
from accelerate import PartialState
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    ProgressCallback,
    Seq2SeqTrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from modeling_vanilla import PRESETS, VanillaConfig, VanillaForConditionalGeneration, paper_generation_config

from . import checkpoints, preprocess, recipe
from .average_checkpoints import average_checkpoints
from .batching import TokenBudgetBatchSampler
from .card import environment, render_card
from .evaluation import corpus_bleu, corpus_chrf, translate
from .plot import plot_training
from .trainer import PatienceCallback, TimeBudgetProgress, TrainingTimeBudget, TranslationTrainer

ModelFactory = Callable[[VanillaConfig], PreTrainedModel]


# ---------------------------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------------------------


# Where each field of `recipe.Recipe` appears in --help.
RECIPE_GROUPS = {
    "data": ("max_length",),
    "model": ("vocab_size", "dropout"),
    "recipe": (
        "max_tokens",
        "gradient_accumulation_steps",
        "lr_scale",
        "warmup_steps",
        "label_smoothing",
        "max_steps",
        "max_train_minutes",
    ),
    "evaluation": ("eval_steps", "bleu_sentences", "selection", "patience"),
    "output": ("save_steps", "average_last"),
}
RECIPE_HELP = {
    "max_length": "longest pair kept, in tokens (longer pairs are counted and left out)",
    "vocab_size": "joint BPE vocabulary size",
    "dropout": "dropout of the model (section 5.4; none: its size's)",
    "max_tokens": "tokens per batch and process, padding included (section 5.1)",
    "gradient_accumulation_steps": "batches summed into one optimizer step",
    "lr_scale": "multiplies equation 3's learning rate",
    "warmup_steps": "warmup of equation 3",
    "label_smoothing": "label smoothing (section 5.4)",
    "max_steps": "optimizer steps",
    "max_train_minutes": "training ends at the first step past this many minutes (0: no limit)",
    "eval_steps": "steps between evaluations (validation loss and greedy BLEU)",
    "bleu_sentences": "validation sentences translated at each evaluation (0: loss only)",
    "selection": "checkpoints averaged at the end: the last ones, or those ending at the best evaluation",
    "patience": "evaluations without a better validation score before training stops (0: never)",
    "save_steps": "steps between checkpoints",
    "average_last": "checkpoints averaged into the final model (section 6.1)",
}
RECIPE_OPTIONS = {name: f"--{name.replace('_', '-')}" for name in RECIPE_HELP}  # max_steps: --max-steps
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def preset_values(name: str) -> str:
    """A recipe field's value in every preset, for --help: "demo 2000, base 100000, big 300000"."""
    values = {preset: getattr(run, name) for preset, run in recipe.RECIPES.items()}
    return ", ".join(f"{preset} {'none' if value is None else value}" for preset, value in values.items())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vanilla-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    groups = {
        name: parser.add_argument_group(name)
        for name in ("data", "model", "recipe", "precision and speed", "evaluation", "output")
    }
    data, model, run, speed, evaluation, output = groups.values()
    data.add_argument("--pair", default="en-de", choices=["en-de", "en-fr"], help="built-in corpus (default: en-de)")
    data.add_argument("--source-lang", default="en", help="source column or language code (default: en)")
    data.add_argument("--target-lang", help="target column or language code (default: the second language of --pair)")
    data.add_argument("--train-file", help="JSONL ({'translation': {src: ..., tgt: ...}} per line) or CSV")
    data.add_argument("--validation-file", help="needed with --train-file (same layouts)")
    data.add_argument("--test-file", help="optional; test BLEU and the model card need a test split")
    data.add_argument("--dataset-name", help="a `datasets` dataset name instead of files")
    data.add_argument("--dataset-config", help="its configuration")
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
        help="train the joint BPE on at most this many pairs, drawn at random (default: 1,000,000)",
    )
    for field in dataclasses.fields(recipe.Recipe):
        group = next((groups[g] for g, names in RECIPE_GROUPS.items() if field.name in names), None)
        if group is None:
            continue  # size: --size
        choices = recipe.SELECTIONS if field.name == "selection" else None
        kind = str if choices else float if field.name == "dropout" else field.type
        group.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=kind,
            choices=choices,
            help=f"{RECIPE_HELP[field.name]} ({preset_values(field.name)})",
        )
    run.add_argument("--seed", type=int, default=1, help="seed of the weights, the data order and dropout (default: 1)")
    run.add_argument("--resume-from-checkpoint", help="a checkpoint folder, or 'last' for the newest one")
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
    speed.add_argument("--torch-compile", action="store_true", help="train the model under torch.compile")
    evaluation.add_argument("--test-beams", type=int, help="beam size for the test set (default: the paper's, 4)")
    evaluation.add_argument("--test-limit", type=int, help="translate only the first N test sentences")
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
    args = parser.parse_args(argv)
    new_model = [name for name in ("size", "vocab_size", "dropout") if getattr(args, name) is not None]
    new_model += ["model_config"] if args.model_config else []
    if args.model_name_or_path and new_model:
        parser.error(
            f"--model-name-or-path fine-tunes an existing model with its own size and tokenizer; "
            f"{', '.join('--' + name.replace('_', '-') for name in new_model)} would be ignored"
        )
    if args.train_file and not args.validation_file:
        parser.error("--train-file needs --validation-file (validation loss and BLEU are measured on it)")
    try:
        run_recipe(args)
    except ValueError as error:  # named as the options that set them
        message = re.sub(r"\b[a-z]+(?:_[a-z]+)*\b", lambda word: RECIPE_OPTIONS.get(word[0], word[0]), str(error))
        parser.error(f"--preset {args.preset} with these options: {message}")
    for name, least in (("num_proc", 1), ("tokenizer_sample", 1), ("test_beams", 1), ("test_limit", 1), ("show", 0)):
        if getattr(args, name) is not None and getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(args, name)}")
    args.precision_asked, args.precision = args.precision, resolve_precision(args.precision)
    if problem := mixed_precision_problem(args.precision):
        parser.error(problem)
    return args


def native_bf16_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes in bfloat16 natively (x86 AVX512-BF16 or AMX-BF16, Arm BF16), per its flags in
    `cpuinfo`. Without it torch emulates bf16 matmuls, and mixed precision is slower than float32."""
    if not cpuinfo.is_file():
        return False
    flags = set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def resolve_precision(precision: str) -> str:
    """`auto` made concrete for this machine: bf16 where the GPU or the CPU has it natively, else fp32."""
    if precision != "auto":
        return precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if native_bf16_cpu() else "fp32"


def precision_reason(args: argparse.Namespace) -> str:
    """Why the run trains in `args.precision`, for the log."""
    if args.precision_asked != "auto":
        return "asked for"
    if torch.cuda.is_available():
        return f"auto: the GPU {'has' if args.precision == 'bf16' else 'lacks'} bfloat16"
    return f"auto: this CPU {'computes' if args.precision == 'bf16' else 'does not compute'} bfloat16 natively"


def mixed_precision_problem(precision: str) -> str | None:
    """Why this machine cannot train in `precision`, or None."""
    if precision == "fp16" and not torch.cuda.is_available():
        return "--fp16 needs a CUDA GPU, and this machine has none; on a CPU, --bf16 trains in mixed precision"
    if precision == "bf16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        return f"--bf16: this GPU ({torch.cuda.get_device_name()}) has no bfloat16; use --fp16"
    return None


def run_recipe(args: argparse.Namespace) -> recipe.Recipe:
    """The preset's recipe with the command line's overrides."""
    fields = {field.name for field in dataclasses.fields(recipe.Recipe)}
    overrides = {name: value for name, value in vars(args).items() if name in fields and value is not None}
    return dataclasses.replace(recipe.RECIPES[args.preset], **overrides)


def languages(args: argparse.Namespace) -> tuple[str, str]:
    return args.source_lang, args.target_lang or args.pair.split("-")[1]


def data_files(args: argparse.Namespace) -> dict[str, str] | None:
    if not args.train_file:
        return None
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    return {split: path for split, path in files.items() if path}


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------------------------------------------


def model_config(args: argparse.Namespace, run: recipe.Recipe) -> PreTrainedConfig:
    """The configuration of the model to fine-tune, or of a new one: the recipe's size with `--model-config` on
    top (checked now, before any output)."""
    if args.model_name_or_path:
        return AutoConfig.from_pretrained(args.model_name_or_path)
    dropout = {} if run.dropout is None else {"dropout": run.dropout}
    return VanillaConfig.from_preset(run.size, **{"vocab_size": run.vocab_size, **dropout, **args.model_config})


def load_or_train_tokenizer(
    args: argparse.Namespace, train_split: datasets.Dataset, config: PreTrainedConfig, is_main: bool
) -> PreTrainedTokenizerBase:
    """The fine-tuned model's tokenizer, `--tokenizer`, or a joint BPE of `config.vocab_size` tokens over the train
    split, trained by the main process and saved in the run folder, where the other processes of a data-parallel
    run, and a resumed run, read it."""
    output_dir = Path(args.output_dir)
    if args.model_name_or_path or args.tokenizer:
        return AutoTokenizer.from_pretrained(args.tokenizer or args.model_name_or_path)
    if args.resume_from_checkpoint or not is_main:
        tokenizer = AutoTokenizer.from_pretrained(output_dir)
        if len(tokenizer) > config.vocab_size:  # a joint BPE of vocab_size tokens has at most that many
            raise ValueError(
                f"{output_dir} holds a tokenizer of {len(tokenizer)} tokens, more than the {config.vocab_size} asked "
                "for: resume a run with its own settings"
            )
        return tokenizer
    tokenizer = preprocess.joint_bpe(
        train_split,
        *languages(args),
        config.vocab_size,
        config.max_position_embeddings,
        sample=args.tokenizer_sample,
        seed=args.seed,
    )
    tokenizer.save_pretrained(output_dir)  # the first thing written: all inputs have been checked
    return tokenizer


def prepare_data(
    args: argparse.Namespace, run: recipe.Recipe, config: PreTrainedConfig, is_main: bool
) -> tuple[datasets.DatasetDict, PreTrainedTokenizerBase, datasets.Dataset, datasets.Dataset]:
    """The splits, the tokenizer, and the token ids of the train and validation splits."""
    source, target = languages(args)
    splits = preprocess.load_splits(args.pair, data_files(args), args.dataset_name, args.dataset_config)
    tokenizer = load_or_train_tokenizer(args, splits["train"], config, is_main)
    train_set, validation = (
        preprocess.tokenize(splits[name], tokenizer, source, target, run.max_length, name, num_proc=args.num_proc)
        for name in ("train", "validation")
    )
    return splits, tokenizer, train_set, validation


def build_model(
    args: argparse.Namespace, config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase, model_factory: ModelFactory
) -> PreTrainedModel:
    """The model to fine-tune (`--model-name-or-path`), or a new one by `model_factory` from `config`, which takes
    the tokenizer's vocabulary size and special ids."""
    if args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path)
    else:
        config.update(
            {
                "vocab_size": len(tokenizer),
                "pad_token_id": tokenizer.pad_token_id,
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": tokenizer.eos_token_id,
                "decoder_start_token_id": tokenizer.bos_token_id,
            }
        )
        set_seed(args.seed)
        model = model_factory(config)
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {model.config.vocab_size}"
        )
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    return model


# ---------------------------------------------------------------------------------------------------------------
# Trainer, training, averaging
# ---------------------------------------------------------------------------------------------------------------


def training_attention(precision: str) -> str | None:
    """The attention kernel to train with, if not the model's own: bf16 on a CPU trains with "eager" (equation 1 as
    matmuls, which autocast runs in bf16), because torch's fused CPU kernel behind sdpa is slower in bf16 than in
    fp32 (the main job's loop: 1.0x-1.2x slower than fp32 with sdpa, 1.4x-1.5x faster with eager;
    benchmarks/bf16_training.py). The saved model keeps the default kernel."""
    return "eager" if precision == "bf16" and not torch.cuda.is_available() else None


def training_arguments(
    args: argparse.Namespace, run: recipe.Recipe, d_model: int, sentences_per_batch: int
) -> Seq2SeqTrainingArguments:
    """Section 5.3's optimizer and schedule, section 5.4's label smoothing, the recipe's steps. The batches are
    `TranslationTrainer`'s token budgets; the Trainer's sentence-count batch size, which it logs and records,
    is their mean."""
    return Seq2SeqTrainingArguments(
        output_dir=args.output_dir,
        max_steps=run.max_steps,
        per_device_train_batch_size=sentences_per_batch,
        gradient_accumulation_steps=run.gradient_accumulation_steps,
        learning_rate=recipe.paper_learning_rate(d_model, run.lr_scale),
        warmup_steps=run.warmup_steps,  # of equation 3: TranslationTrainer.create_scheduler
        adam_beta1=recipe.ADAM_BETA1,
        adam_beta2=recipe.ADAM_BETA2,
        adam_epsilon=recipe.ADAM_EPSILON,
        weight_decay=0.0,
        max_grad_norm=0.0,  # the paper does not clip gradients
        label_smoothing_factor=run.label_smoothing,
        eval_strategy="steps",
        eval_steps=run.eval_steps,
        save_strategy="steps",
        save_steps=run.save_steps,
        save_total_limit=None if args.keep_checkpoints else run.average_last,
        metric_for_best_model=None if run.selection == "last" else "bleu" if run.bleu_sentences else "loss",
        greater_is_better=bool(run.bleu_sentences),
        logging_steps=max(1, min(100, run.eval_steps // 5)),  # points enough for the plot of a short run
        report_to=args.report_to.split(","),
        seed=args.seed,
        ddp_find_unused_parameters=False,
        use_cpu=not torch.accelerator.is_available(),  # on CPU, data parallelism (gloo) needs it
        bf16=args.precision == "bf16",
        fp16=args.precision == "fp16",
        torch_compile=args.torch_compile,
    )


def build_trainer(
    args: argparse.Namespace,
    run: recipe.Recipe,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_set: datasets.Dataset,
    validation: datasets.Dataset,
    validation_split: datasets.Dataset,
) -> TranslationTrainer:
    """The Trainer, with greedy BLEU on the first `run.bleu_sentences` validation sentences at each evaluation."""
    batches = TokenBudgetBatchSampler(preprocess.lengths(train_set), run.max_tokens, seed=args.seed)
    training_args = training_arguments(args, run, model.config.d_model, round(len(train_set) / len(batches)))
    bleu_sources, bleu_references = preprocess.sentences(validation_split, *languages(args))
    budget = TrainingTimeBudget(run.max_train_minutes * 60) if run.max_train_minutes else None
    callbacks = [budget] if budget else []
    callbacks += [PatienceCallback(run.patience)] if run.patience else []
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        max_tokens=run.max_tokens,
        bleu_sources=bleu_sources[: run.bleu_sentences],
        bleu_references=bleu_references[: run.bleu_sentences],
        callbacks=callbacks,
    )
    if budget and trainer.pop_callback(ProgressCallback):  # (absent where `disable_tqdm` holds)
        trainer.add_callback(TimeBudgetProgress(budget))
    return trainer


def resume_point(args: argparse.Namespace) -> str | None:
    """The checkpoint to resume from (`--resume-from-checkpoint`, 'last' meaning the newest), verified intact. A new
    run's folder must hold no checkpoint: an earlier run's would be pruned, chosen and averaged as the new run's."""
    last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    resume = last if args.resume_from_checkpoint == "last" else args.resume_from_checkpoint
    if args.resume_from_checkpoint == "last" and resume is None:
        raise FileNotFoundError(f"--resume-from-checkpoint last: {args.output_dir} holds no checkpoint-<step>")
    if resume is None and last is not None:
        raise FileExistsError(
            f"{args.output_dir} holds an earlier run's checkpoints (the last: {Path(last).name}): resume it with "
            "--resume-from-checkpoint last, or train in another --output-dir"
        )
    if resume:
        checkpoints.verify_checkpoint(resume)
    return resume


# What ended a run before its last step, as training_results.json records it ("stopped_by"), and as the log says it
EARLY_STOPS = {
    "patience": "{patience} evaluations without a better validation score (--patience)",
    "time_budget": "the time budget of {max_train_minutes:g} minutes (--max-train-minutes; 0 for none)",
}


def stop_reason(trainer: TranslationTrainer, run: recipe.Recipe) -> str:
    """What ended the run: "max_steps" (its last step), or a key of `EARLY_STOPS` (its patience, its time budget)."""
    if trainer.state.global_step >= run.max_steps:
        return "max_steps"
    patience = [c for c in trainer.callback_handler.callbacks if isinstance(c, PatienceCallback)]
    if patience and patience[0].early_stopping_patience_counter >= run.patience:
        return "patience"
    return "time_budget"


def final_checkpoints(trainer: TranslationTrainer, run: recipe.Recipe) -> list[str]:
    """The checkpoints to average (section 6.1): the last `run.average_last`, or with `selection` "best" those ending
    at the evaluation of the best validation score."""
    best = trainer.state.best_global_step if run.selection == "best" else None
    chosen = checkpoints.window(trainer.args.output_dir, run.average_last, last_step=best)
    if best is not None:
        metric = "BLEU" if run.bleu_sentences else "loss"
        print(f"best validation {metric} {trainer.state.best_metric:.2f} at step {best:,}")
    elif run.selection == "best":
        print("no evaluation to choose the best checkpoint by: the last checkpoints are averaged")
    return chosen


def averaged_model(model: PreTrainedModel, chosen: list[str]) -> PreTrainedModel:
    """The mean of the `chosen` checkpoints' weights (one checkpoint: its own), read from disk and placed where
    `model` is. Never the in-memory `model` itself: that holds the last step's weights, which the checkpoints
    chosen around the best evaluation may not include."""
    if not chosen:
        raise FileNotFoundError("training saved no checkpoint to take the final weights from")
    names = ", ".join(Path(c).name for c in chosen)
    print(f"averaged {len(chosen)} checkpoint{'s' if len(chosen) > 1 else ''}: {names}")
    return average_checkpoints(chosen).to(model.device)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation, results, folder and card
# ---------------------------------------------------------------------------------------------------------------


def evaluate_test(
    args: argparse.Namespace, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, test: datasets.Dataset
) -> dict:
    """Test BLEU with the model's generation config (the paper's decoding), printed with examples."""
    sources, references = preprocess.sentences(test, *languages(args))
    sources, references = sources[: args.test_limit], references[: args.test_limit]
    options = {} if args.test_beams is None else {"num_beams": args.test_beams}
    predictions = translate(model, tokenizer, sources, **options)
    bleu, chrf = corpus_bleu(predictions, references), corpus_chrf(predictions, references)
    beams = options.get("num_beams", model.generation_config.num_beams)
    print(f"test BLEU {bleu['score']:.2f}, chrF {chrf['score']:.2f} ({len(sources):,} sentences, beam {beams})")
    print(f"  BLEU {bleu['signature']}\n  chrF {chrf['signature']}")
    examples = list(zip(sources, predictions, references, strict=True))
    for source, translation, reference in examples[: args.show]:
        print(f"\n  source:      {source}\n  translation: {translation}\n  reference:   {reference}")
    return {
        "bleu": round(bleu["score"], 2),
        "signature": bleu["signature"],
        "chrf": round(chrf["score"], 2),
        "chrf_signature": chrf["signature"],
        "sentences": len(sources),
        "num_beams": beams,
        "length_penalty": model.generation_config.length_penalty,
        "examples": [{"source": s, "translation": t, "reference": r} for s, t, r in examples[:3]],
    }


def save_final(
    args: argparse.Namespace, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, results: dict
) -> Path:
    """`final/`: the model decoding as the paper does, its tokenizer and code, the results, and the model card
    (for a Vanilla model with a test BLEU)."""
    final_dir = Path(args.output_dir) / "final"
    model.save_pretrained(final_dir)
    tokenizer.save_pretrained(final_dir)
    (final_dir / "training_results.json").write_text(json.dumps(results, indent=2))
    if "test" in results and model.config.model_type == VanillaConfig.model_type:
        (final_dir / "README.md").write_text(render_card(final_dir))  # a local card: push renders it for the repo
    else:
        print("no model card (README.md): it needs a test split and a Vanilla model")
    return final_dir


def run_results(
    args: argparse.Namespace,
    run: recipe.Recipe,
    trainer: TranslationTrainer,
    model: PreTrainedModel,
    sizes: dict[str, int],
    chosen: list[str],
    seconds: dict[str, float],
) -> dict:
    """What `final/training_results.json` records of a run (the model card reads it), test results apart."""
    source, target = languages(args)
    return {
        "preset": args.preset,
        "recipe": dataclasses.asdict(run),
        "seed": args.seed,
        "steps": trainer.state.global_step,
        "stopped_by": stop_reason(trainer, run),
        "processes": trainer.args.world_size,
        "precision": args.precision,
        "averaged": {
            "checkpoints": [Path(c).name for c in chosen],
            "selection": run.selection,
            "best_step": trainer.state.best_global_step if run.selection == "best" else None,
            "best_metric": trainer.state.best_metric if run.selection == "best" else None,
        },
        **{f"{name}_seconds": round(value) for name, value in seconds.items()},
        "languages": {"source": source, "target": target},
        "data": {
            **preprocess.data_origin(args.pair, data_files(args), args.dataset_name, args.dataset_config),
            **{f"{split}_pairs": size for split, size in sizes.items()},
        },
        "parameters": sum(p.numel() for p in model.parameters()),  # the shared embedding counted once
        "environment": environment(),
        "log_history": trainer.state.log_history,
    }


def main(argv: list[str] | None = None, model_factory: ModelFactory = VanillaForConditionalGeneration) -> dict:
    """Runs the whole recipe and returns the results written to `final/training_results.json`. `model_factory`
    lets a benchmark train another implementation (MarianMTModel) under exactly the same recipe."""
    started = time.time()
    args = parse_args(argv)
    run = run_recipe(args)
    config = model_config(args, run)
    resume = resume_point(args)  # before the data: `last` with no checkpoint is an error, not a tokenizer lookup
    process = PartialState(cpu=not torch.accelerator.is_available())
    if process.is_main_process:
        print(f"precision: {args.precision} ({precision_reason(args)})")
    with process.local_main_process_first():  # it builds the data caches and the tokenizer; the others read them
        splits, tokenizer, train_set, validation = prepare_data(args, run, config, process.is_local_main_process)
    model = build_model(args, config, tokenizer, model_factory)
    default_attention, attention = model.config._attn_implementation, training_attention(args.precision)
    if attention is not None:
        model.set_attn_implementation(attention)
        if process.is_main_process:
            print(f"attention: {attention} while training ({args.precision} on a CPU), {default_attention} after")
    trainer = build_trainer(args, run, model, tokenizer, train_set, validation, splits["validation"])
    training_started = time.time()
    trainer.train(resume_from_checkpoint=resume)
    seconds = {"data": training_started - started, "train": time.time() - training_started}
    process.wait_for_everyone()  # every process has finished training; what follows is the first one's alone
    if not trainer.is_world_process_zero():
        return {}
    if (stopped_by := stop_reason(trainer, run)) != "max_steps":
        reason = EARLY_STOPS[stopped_by].format(**dataclasses.asdict(run))
        print(f"training ended at step {trainer.state.global_step:,} of {run.max_steps:,}: {reason}")

    model.set_attn_implementation(default_attention)
    chosen = final_checkpoints(trainer, run)
    model = averaged_model(model, chosen)
    own = model.generation_config if args.model_name_or_path else None  # a fine-tuned model's (e.g. banned tokens)
    model.generation_config = paper_generation_config(model.config, own)  # the folder decodes as the paper does
    model.config.use_cache = True  # the Trainer turns the cache off for training; decoding wants it
    sizes = {
        "train": len(train_set),
        "validation": len(validation),
        "validation_bleu": len(trainer.bleu_sources),
        "test": len(splits.get("test", [])),
    }
    results = run_results(args, run, trainer, model, sizes, chosen, seconds)
    if "test" in splits:
        results["test"] = evaluate_test(args, model, tokenizer, splits["test"])
    results["total_seconds"] = round(time.time() - started)
    final_dir = save_final(args, model, tokenizer, results)
    plot_training(trainer.state.log_history, Path(args.output_dir) / "training.png")
    print(f"\nmodel, tokenizer and code in {final_dir}; plot in {args.output_dir}; {results['total_seconds']} s in all")
    return results


def console_main() -> None:
    """`vanilla-train` (and `python -m vanilla_training.train`): the run, then the end of the process."""
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
