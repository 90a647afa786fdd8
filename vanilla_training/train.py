"""The training job, step by step (each step is a function below): data, tokenizer, model, trainer, train, average,
evaluate, save and card. `vanilla-train` (`vanilla_training.cli.train`) parses the command line into a
`train_settings.TrainingJob` and calls `train`.

The recipe (section 5): Adam (beta 0.9/0.98, eps 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
label smoothing 0.1, dropout 0.1, batches of about `max_tokens` tokens of sentences of similar length, checkpoint
averaging, and test BLEU with beam 4, length penalty 0.6, output length input + 50. The run folder ends up
Hub-ready: model, tokenizer, generation config, code, metrics and a plot, and `final/` holds the model card.
"""

import dataclasses
import json
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

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config

from . import checkpoints, preprocess, recipe
from .average_checkpoints import average_checkpoints
from .card import environment, render_card
from .corpus import multilingual
from .evaluation import corpus_bleu, corpus_chrf, score_directions
from .plot import plot_training
from .precision import precision_reason, training_attention
from .tokenizer import train_joint_bpe
from .train_settings import TrainingJob
from .trainer import (
    PatienceCallback,
    TimeBudgetProgress,
    TrainingTimeBudget,
    TranslationTrainer,
    token_batch_sampler,
)
from .translator import translate, translate_rows
from .wordings import print_wording_scores, rounded_wording_scores, wording_scores

ModelFactory = Callable[[VanillaConfig], PreTrainedModel]


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------------------------------------------


def model_config(job: TrainingJob) -> PreTrainedConfig:
    """The configuration of the model to fine-tune, or of a new one: the recipe's size with `--model-config` on
    top (checked now, before any output)."""
    if job.settings.model_name_or_path:
        return AutoConfig.from_pretrained(job.settings.model_name_or_path)
    run = job.recipe
    dropout = {} if run.dropout is None else {"dropout": run.dropout}
    return VanillaConfig.from_preset(run.size, **{"vocab_size": run.vocab_size, **dropout, **job.settings.model_config})


def load_or_train_tokenizer(
    job: TrainingJob, train_split: datasets.Dataset, config: PreTrainedConfig, is_main: bool
) -> PreTrainedTokenizerBase:
    """The fine-tuned model's tokenizer, `--tokenizer`, or a joint BPE of `config.vocab_size` tokens over the train
    split, trained by the main process and saved in the run folder, where the other processes of a data-parallel
    run, and a resumed run, read it."""
    output_dir = Path(job.settings.output_dir)
    if job.settings.model_name_or_path or job.settings.tokenizer:
        return AutoTokenizer.from_pretrained(job.settings.tokenizer or job.settings.model_name_or_path)
    if job.settings.resume_from_checkpoint or not is_main:
        tokenizer = AutoTokenizer.from_pretrained(output_dir)
        if len(tokenizer) > config.vocab_size:  # a joint BPE of vocab_size tokens has at most that many
            raise ValueError(
                f"{output_dir} holds a tokenizer of {len(tokenizer)} tokens, more than the {config.vocab_size} asked "
                "for: resume a run with its own settings"
            )
        return tokenizer
    if job.multilingual:
        tokenizer = multilingual_tokenizer(job, train_split, config)
        tokenizer.save_pretrained(output_dir)
        return tokenizer
    tokenizer = preprocess.joint_bpe(
        train_split,
        *job.languages,
        config.vocab_size,
        config.max_position_embeddings,
        sample=job.settings.tokenizer_sample,
        seed=job.settings.seed,
    )
    tokenizer.save_pretrained(output_dir)  # the first thing written: all inputs have been checked
    return tokenizer


def multilingual_tokenizer(
    job: TrainingJob, train_split: datasets.Dataset, config: PreTrainedConfig
) -> PreTrainedTokenizerBase:
    """The joint BPE of a multilingual run, with a token per language: over every text of every train verse in each
    of its languages (the built-in corpus), or over both sides of the user's train rows. Not cached: the joint BPE's
    cache (`preprocess.joint_bpe`) is keyed by one pair's columns."""
    if job.data.built_in:
        texts = multilingual.tokenizer_texts(multilingual.load_verses(job.data.languages)["train"])
    else:
        texts = preprocess.joint_texts(train_split, "source", "target")
    size, length = config.vocab_size, config.max_position_embeddings
    return train_joint_bpe(texts, size, model_max_length=length, languages=job.data.languages)


def prepare_data(
    job: TrainingJob, config: PreTrainedConfig, is_main: bool
) -> tuple[datasets.DatasetDict, PreTrainedTokenizerBase, datasets.Dataset, datasets.Dataset]:
    """The splits, the tokenizer, and the token ids of the train and validation splits."""
    source, target = job.languages
    splits = job.data.load_splits()
    tokenizer = load_or_train_tokenizer(job, splits["train"], config, is_main)
    train_set, validation = (
        preprocess.tokenize(
            splits[name], tokenizer, source, target, job.recipe.max_length, name, num_proc=job.settings.num_proc
        )
        for name in ("train", "validation")
    )
    return splits, tokenizer, train_set, validation


def multilingual_config(job: TrainingJob) -> dict[str, list[str]]:
    """What a multilingual model's config records: its languages, and the directions it trained (an open attribute,
    as every transformers config attribute is: `translator.Translator` pivots or refuses the others)."""
    return {"languages": list(job.data.languages), "trained_directions": [str(d) for d in job.data.directions]}


def build_model(
    job: TrainingJob, config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase, model_factory: ModelFactory
) -> PreTrainedModel:
    """The model to fine-tune (`--model-name-or-path`), or a new one by `model_factory` from `config`, which takes
    the tokenizer's vocabulary size and special ids."""
    if job.settings.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(job.settings.model_name_or_path)
    else:
        config.update(
            {
                "vocab_size": len(tokenizer),
                "pad_token_id": tokenizer.pad_token_id,
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": tokenizer.eos_token_id,
                "decoder_start_token_id": tokenizer.bos_token_id,
                **(multilingual_config(job) if job.multilingual else {}),
            }
        )
        set_seed(job.settings.seed)
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


def training_arguments(job: TrainingJob, sentences_per_batch: int) -> Seq2SeqTrainingArguments:
    """Section 5.3's optimizer and schedule, section 5.4's label smoothing, the recipe's steps. The batches are
    `TranslationTrainer`'s token budgets; the Trainer's sentence-count batch size, which it logs and records,
    is their mean."""
    run = job.recipe
    return Seq2SeqTrainingArguments(
        output_dir=job.settings.output_dir,
        max_steps=run.max_steps,
        per_device_train_batch_size=sentences_per_batch,
        gradient_accumulation_steps=run.gradient_accumulation_steps,
        learning_rate=run.lr_scale,  # times equation 3 (recipe.equation_3), the schedule: TranslationTrainer
        warmup_steps=run.warmup_steps,  # create_scheduler
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
        save_total_limit=None if job.settings.keep_checkpoints else run.average_last,
        metric_for_best_model=None if run.selection == "last" else "bleu" if run.bleu_sentences else "loss",
        greater_is_better=bool(run.bleu_sentences),
        logging_steps=max(1, min(100, run.eval_steps // 5)),  # points enough for the plot of a short run
        report_to=job.settings.report_to.split(","),
        seed=job.settings.seed,
        ddp_find_unused_parameters=False,
        use_cpu=not torch.accelerator.is_available(),  # on CPU, data parallelism (gloo) needs it
        bf16=job.precision == "bf16",
        fp16=job.precision == "fp16",
        torch_compile=job.settings.torch_compile,
    )


class MultilingualTrainer(TranslationTrainer):
    """`TranslationTrainer` whose validation BLEU, at each evaluation, is the mean over directions of each direction's
    BLEU (with its target's tokenizer) on `bleu_rows`, rows of many directions (`multilingual.COLUMNS`)."""

    def __init__(self, *args, bleu_rows: dict[str, list], **kwargs):
        super().__init__(*args, bleu_sources=[], bleu_references=[], **kwargs)  # the parent's BLEU: none
        self.bleu_rows = bleu_rows

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None, **kwargs):
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, **kwargs)
        if self.bleu_rows["source"] and description == "Evaluation":
            model = self.accelerator.unwrap_model(self.model)
            options = self.bleu_generate_kwargs
            predictions = translate_rows(model, self.processing_class, self.bleu_rows, **options)
            scores = score_directions(self.bleu_rows, predictions).values()
            prefix = kwargs.get("metric_key_prefix", "eval")
            output.metrics[f"{prefix}_bleu"] = sum(score["bleu"] for score in scores) / len(scores)
            signatures = " / ".join(dict.fromkeys(score["signature"] for score in scores))
            self.bleu_signature = f"mean of {len(scores)} directions' BLEU: {signatures}"
        return output


def build_trainer(
    job: TrainingJob,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_set: datasets.Dataset,
    validation: datasets.Dataset,
    validation_split: datasets.Dataset,
) -> TranslationTrainer:
    """The Trainer, with greedy BLEU on the first `run.bleu_sentences` validation sentences at each evaluation."""
    run = job.recipe
    per_verse = job.data.directions_per_verse if job.multilingual else None
    batches = token_batch_sampler(train_set, run.max_tokens, job.settings.seed, per_verse=per_verse)
    training_args = training_arguments(job, round(batches.examples / len(batches)))
    budget = TrainingTimeBudget(run.max_train_minutes * 60) if run.max_train_minutes else None
    callbacks = [budget] if budget else []
    callbacks += [PatienceCallback(run.patience)] if run.patience else []
    common = {
        "model": model,
        "args": training_args,
        "train_dataset": train_set,
        "eval_dataset": validation,
        "data_collator": DataCollatorForSeq2Seq(tokenizer, model=model),
        "processing_class": tokenizer,
        "max_tokens": run.max_tokens,
        "directions_per_verse": per_verse,
        "callbacks": callbacks,
    }
    if job.multilingual:
        trainer = MultilingualTrainer(bleu_rows=validation_split[: run.bleu_sentences], **common)
    else:
        bleu_sources, bleu_references = preprocess.sentences(validation_split, *job.languages)
        trainer = TranslationTrainer(
            bleu_sources=bleu_sources[: run.bleu_sentences],
            bleu_references=bleu_references[: run.bleu_sentences],
            target_lang=job.languages[1],
            **common,
        )
    if budget and trainer.pop_callback(ProgressCallback):  # (absent where `disable_tqdm` holds)
        trainer.add_callback(TimeBudgetProgress(budget))
    return trainer


def resume_point(job: TrainingJob) -> str | None:
    """The checkpoint to resume from (`--resume-from-checkpoint`, 'last' meaning the newest), verified intact. A new
    run's folder must hold no checkpoint: an earlier run's would be pruned, chosen and averaged as the new run's."""
    last = get_last_checkpoint(job.settings.output_dir) if Path(job.settings.output_dir).is_dir() else None
    resume = last if job.settings.resume_from_checkpoint == "last" else job.settings.resume_from_checkpoint
    if job.settings.resume_from_checkpoint == "last" and resume is None:
        raise FileNotFoundError(f"--resume-from-checkpoint last: {job.settings.output_dir} holds no checkpoint-<step>")
    if resume is None and last is not None:
        raise FileExistsError(
            f"{job.settings.output_dir} holds an earlier run's checkpoints (the last: {Path(last).name}): resume it "
            "with --resume-from-checkpoint last, or train in another --output-dir"
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
    job: TrainingJob, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, test: datasets.Dataset
) -> dict:
    """Test BLEU with the model's generation config (the paper's decoding), printed with examples."""
    sources, references = preprocess.sentences(test, *job.languages)
    sources, references = sources[: job.settings.test_limit], references[: job.settings.test_limit]
    options = {} if job.settings.test_beams is None else {"num_beams": job.settings.test_beams}
    predictions = translate(model, tokenizer, sources, **options)
    target = job.languages[1]
    bleu, chrf = corpus_bleu(predictions, references, target), corpus_chrf(predictions, references)
    beams = options.get("num_beams", model.generation_config.num_beams)
    print(f"test BLEU {bleu['score']:.2f}, chrF {chrf['score']:.2f} ({len(sources):,} sentences, beam {beams})")
    print(f"  BLEU {bleu['signature']}\n  chrF {chrf['signature']}")
    examples = list(zip(sources, predictions, references, strict=True))
    for source, translation, reference in examples[: job.settings.show]:
        print(f"\n  source:      {source}\n  translation: {translation}\n  reference:   {reference}")
    extra = {}
    if job.data.built_in and job.settings.test_limit is None:
        scores = wording_scores(
            lambda texts: translate(model, tokenizer, texts, **options), job.data.pair, predictions=predictions
        )
        extra = rounded_wording_scores(scores)
        print_wording_scores(extra)
    return {
        "bleu": round(bleu["score"], 2),
        "signature": bleu["signature"],
        "chrf": round(chrf["score"], 2),
        "chrf_signature": chrf["signature"],
        "sentences": len(sources),
        "num_beams": beams,
        "length_penalty": model.generation_config.length_penalty,
        "examples": [{"source": s, "translation": t, "reference": r} for s, t, r in examples[:3]],
        **extra,
    }


def evaluate_directions(
    job: TrainingJob, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, test: datasets.Dataset
) -> dict:
    """Test BLEU and chrF of a multilingual model in each direction of the test split (the first `--test-limit` rows
    of each), with the model's generation config; their means; printed as a table with an example a direction."""
    rows = test.to_dict()
    if job.settings.test_limit is not None:
        seen: dict[str, int] = {}
        keep = []
        for i, direction in enumerate(zip(rows["source_lang"], rows["target_lang"], strict=True)):
            seen[direction] = seen.get(direction, 0) + 1
            keep += [i] if seen[direction] <= job.settings.test_limit else []
        rows = {column: [values[i] for i in keep] for column, values in rows.items()}
    options = {} if job.settings.test_beams is None else {"num_beams": job.settings.test_beams}
    predictions = translate_rows(model, tokenizer, rows, **options)
    scores = score_directions(rows, predictions)
    beams = options.get("num_beams", model.generation_config.num_beams)
    bleu, chrf = (round(sum(score[name] for score in scores.values()) / len(scores), 2) for name in ("bleu", "chrf"))
    print(f"test BLEU {bleu:.2f}, chrF {chrf:.2f}: the means over {len(scores)} directions (beam {beams})")
    print("  direction  sentences   BLEU   chrF")
    for direction, score in scores.items():
        print(f"  {direction:<9} {score['sentences']:>9,} {score['bleu']:>6.2f} {score['chrf']:>6.2f}")
    firsts = {}
    for i, direction in enumerate(zip(rows["source_lang"], rows["target_lang"], strict=True)):
        firsts.setdefault(direction, i)
    examples = [
        {"direction": "-".join(direction), "source": rows["source"][i], "translation": predictions[i],
         "reference": rows["target"][i]}
        for direction, i in firsts.items()
    ]  # fmt: skip
    for example in examples[: job.settings.show]:
        print(f"\n  {example['direction']}\n  source:      {example['source']}")
        print(f"  translation: {example['translation']}\n  reference:   {example['reference']}")
    return {
        "bleu": bleu,
        "chrf": chrf,
        "directions": scores,
        "sentences": len(predictions),
        "num_beams": beams,
        "length_penalty": model.generation_config.length_penalty,
        "examples": examples,
    }


def save_final_model(job: TrainingJob, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Path:
    """`final/`: the model decoding as the paper does (with the recipe's length penalty), its tokenizer and code.
    Saved before the test, so that a test cut short (a multilingual run's 132 directions) leaves the model."""
    final_dir = Path(job.settings.output_dir) / "final"
    model.save_pretrained(final_dir)
    tokenizer.save_pretrained(final_dir)
    return final_dir


def save_final_results(final_dir: Path, model: PreTrainedModel, results: dict) -> None:
    """`final/`'s results and, for a Vanilla model with a test BLEU, its model card."""
    (final_dir / "training_results.json").write_text(json.dumps(results, indent=2))
    if "test" in results and model.config.model_type == VanillaConfig.model_type:
        (final_dir / "README.md").write_text(render_card(final_dir))  # a local card: push renders it for the repo
    else:
        print("no model card (README.md): it needs a test split and a Vanilla model")


def run_results(
    job: TrainingJob,
    trainer: TranslationTrainer,
    model: PreTrainedModel,
    sizes: dict[str, int],
    chosen: list[str],
    seconds: dict[str, float],
) -> dict:
    """What `final/training_results.json` records of a run (the model card reads it), test results apart."""
    run, (source, target) = job.recipe, job.languages
    if job.multilingual:
        recorded = multilingual_config(job)
        languages = {"multilingual": {"languages": recorded["languages"], "directions": recorded["trained_directions"]}}
    else:
        languages = {"languages": {"source": source, "target": target}}
    return {
        "preset": job.settings.preset,
        "recipe": dataclasses.asdict(run),
        "seed": job.settings.seed,
        "steps": trainer.state.global_step,
        "stopped_by": stop_reason(trainer, run),
        "processes": trainer.args.world_size,
        "precision": job.precision,
        "averaged": {
            "checkpoints": [Path(c).name for c in chosen],
            "selection": run.selection,
            "best_step": trainer.state.best_global_step if run.selection == "best" else None,
            "best_metric": trainer.state.best_metric if run.selection == "best" else None,
        },
        **{f"{name}_seconds": round(value) for name, value in seconds.items()},
        **languages,  # a multilingual run: its config.languages as well (`translator.trained_languages` reads both)
        "data": {
            **job.data.origin(),
            **{f"{split}_pairs": size for split, size in sizes.items()},
        },
        "validation_bleu_signature": trainer.bleu_signature,  # None where no validation BLEU was measured
        "parameters": sum(p.numel() for p in model.parameters()),  # the shared embedding counted once
        "environment": environment(),
        "log_history": trainer.state.log_history,
    }


def train(job: TrainingJob, model_factory: ModelFactory = VanillaForConditionalGeneration) -> dict:
    """Runs the whole job and returns the results written to `final/training_results.json`. `model_factory`
    lets an experiment train another implementation (MarianMTModel) under exactly the same recipe."""
    started = time.time()
    run = job.recipe
    config = model_config(job)
    resume = resume_point(job)  # before the data: `last` with no checkpoint is an error, not a tokenizer lookup
    process = PartialState(cpu=not torch.accelerator.is_available())
    if process.is_main_process:
        print(f"precision: {job.precision} ({precision_reason(job.settings.precision, job.precision)})")
    with process.local_main_process_first():  # it builds the data caches and the tokenizer; the others read them
        splits, tokenizer, train_set, validation = prepare_data(job, config, process.is_local_main_process)
    model = build_model(job, config, tokenizer, model_factory)
    default_attention, attention = model.config._attn_implementation, training_attention(job.precision)
    if attention is not None:
        model.set_attn_implementation(attention)
        if process.is_main_process:
            print(f"attention: {attention} while training ({job.precision} on a CPU), {default_attention} after")
    trainer = build_trainer(job, model, tokenizer, train_set, validation, splits["validation"])
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
    own = (
        model.generation_config if job.settings.model_name_or_path else None
    )  # a fine-tuned model's (e.g. banned tokens)
    model.generation_config = paper_generation_config(model.config, own)  # the folder decodes as the paper does,
    model.generation_config.length_penalty = run.length_penalty  # with the recipe's length penalty
    model.config.use_cache = True  # the Trainer turns the cache off for training; decoding wants it
    sizes = {
        "train": len(train_set),
        "validation": len(validation),
        "validation_bleu": len(trainer.bleu_rows["source"] if job.multilingual else trainer.bleu_sources),
        "test": len(splits.get("test", [])),
    }
    results = run_results(job, trainer, model, sizes, chosen, seconds)
    final_dir = save_final_model(job, model, tokenizer)
    if "test" in splits:
        print(f"model and tokenizer saved in {final_dir}; testing")
        evaluate = evaluate_directions if job.multilingual else evaluate_test
        results["test"] = evaluate(job, model, tokenizer, splits["test"])
    results["total_seconds"] = round(time.time() - started)
    save_final_results(final_dir, model, results)
    plot_training(trainer.state.log_history, Path(job.settings.output_dir) / "training.png")
    output_dir, seconds = job.settings.output_dir, results["total_seconds"]
    print(f"\nmodel, tokenizer and code in {final_dir}; plot in {output_dir}; {seconds} s in all")
    return results
