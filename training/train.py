"""Train a translator with the paper's recipe (section 5) on transformers' `Seq2SeqTrainer`.

    python -m training.train --preset demo --output-dir runs/demo           # minutes on 2 CPU cores
    python -m training.train --preset base --pair en-de --output-dir runs/base
    torchrun --nproc_per_node 2 -m training.train --preset demo ...       # data-parallel, same script

The recipe: Adam (beta 0.9/0.98, eps 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label
smoothing 0.1, dropout 0.1, batches of about `max_tokens` tokens of sentences of similar length, checkpoint
averaging of the last N checkpoints, and test BLEU with beam 4, length penalty 0.6, output length input + 50.
The run folder ends up Hub-ready: model, tokenizer, generation config, code, metrics and a plot, and `final/` holds
the model card (`README.md`, see `training/card.py`); `python -m training.push` uploads it.
"""

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import datasets
import torch
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)
from transformers.trainer_utils import rotate_checkpoints

from modeling_vanilla import PRESETS, VanillaConfig, VanillaForConditionalGeneration, paper_generation_config

from . import checkpoints
from .average_checkpoints import average_checkpoints, checkpoints_in
from .batching import TokenBudgetBatchSampler
from .card import environment, render_card
from .data import load_corpus
from .evaluation import corpus_bleu, translate
from .plot import plot_training
from .tokenizer import train_joint_bpe


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a training run needs besides data: model size and the schedule of section 5."""

    model: dict
    vocab_size: int
    max_tokens: int  # per device and step, padding included (fairseq's --max-tokens)
    gradient_accumulation_steps: int
    warmup_steps: int
    max_steps: int
    eval_steps: int
    save_steps: int
    average_last: int  # checkpoints averaged at the end (section 6.1: 5 for base, 20 for big)
    lr_scale: float = 1.0  # multiplies the paper's learning rate formula
    max_length: int = 256  # longest example kept, in tokens (longer ones are counted and left out)
    bleu_sentences: int = 200  # validation sentences translated (greedy) at each evaluation


RECIPES = {
    # Small enough to learn something in about 10 minutes on 2 CPU cores: a 2.4M-parameter model (d_model 128),
    # a 4,000-token vocabulary and the shortest verses (up to 40 tokens), about 900 steps of 2k tokens.
    "demo": Recipe(
        model={
            "d_model": 128,
            "encoder_layers": 3,
            "decoder_layers": 3,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 512,
            "decoder_ffn_dim": 512,
            "dropout": 0.1,
        },
        vocab_size=4000,
        max_tokens=2048,
        gradient_accumulation_steps=1,
        warmup_steps=150,
        max_steps=900,
        eval_steps=150,
        save_steps=30,
        average_last=5,
        lr_scale=0.5,
        max_length=40,
        bleu_sentences=100,
    ),
    # The paper's base model (Table 3) with ~25k target tokens per step (4096 x 6 accumulated on one device;
    # divide gradient_accumulation_steps by the number of processes).
    "base": Recipe(
        model=dict(PRESETS["base"]),
        vocab_size=37000,
        max_tokens=4096,
        gradient_accumulation_steps=6,
        warmup_steps=4000,
        max_steps=100_000,
        eval_steps=2000,
        save_steps=2000,
        average_last=5,
    ),
    "big": Recipe(
        model=dict(PRESETS["big"]),
        vocab_size=37000,
        max_tokens=4096,
        gradient_accumulation_steps=6,
        warmup_steps=4000,
        max_steps=300_000,
        eval_steps=5000,
        save_steps=5000,
        average_last=20,
    ),
}


def paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """Equation 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), for optimizer steps 1, 2, ...

    The optimizer's learning rate must be d_model^-0.5 (times a scale); LambdaLR counts from 0, hence step + 1.
    """
    return LambdaLR(optimizer, lambda index: min((index + 1) ** -0.5, (index + 1) * warmup_steps**-1.5))


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget batches, the paper's schedule, and BLEU at each evaluation."""

    def __init__(
        self,
        *args,
        max_tokens: int,
        warmup_steps: int,
        bleu_sources: list[str],
        bleu_references: list[str],
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens
        self.paper_warmup_steps = warmup_steps
        self.bleu_sources = bleu_sources
        self.bleu_references = bleu_references

    def _token_batches(self, dataset: datasets.Dataset, shuffle: bool) -> DataLoader:
        lengths = [max(a, b) for a, b in zip(dataset["source_length"], dataset["target_length"], strict=True)]
        sampler = TokenBudgetBatchSampler(lengths, self.max_tokens, seed=self.args.seed, shuffle=shuffle)
        loader = DataLoader(
            dataset.remove_columns(["source_length", "target_length"]),
            batch_sampler=sampler,
            collate_fn=self.data_collator,
        )
        return self.accelerator.prepare(loader)

    def get_train_dataloader(self) -> DataLoader:
        return self._token_batches(self.train_dataset, shuffle=True)

    def get_eval_dataloader(self, eval_dataset: datasets.Dataset | None = None) -> DataLoader:
        return self._token_batches(eval_dataset if eval_dataset is not None else self.eval_dataset, shuffle=False)

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint, written under `.staging/`, checksummed, then renamed into place (see
        `training.checkpoints`): a run killed while saving leaves no half-written checkpoint."""
        run_dir = Path(self._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        output_dir, limit = self.args.output_dir, self.args.save_total_limit
        self.args.output_dir, self.args.save_total_limit = str(run_dir / checkpoints.STAGING), None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir, self.args.save_total_limit = output_dir, limit
        self.accelerator.wait_for_everyone()  # every process has written its part (e.g. its RNG state)
        if self.args.should_save:
            checkpoints.write_checksums(run_dir / checkpoints.STAGING / name)
            checkpoints.commit(run_dir / checkpoints.STAGING / name, run_dir / name)
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=limit, use_mtime=False)
        self.accelerator.wait_for_everyone()

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> LambdaLR:
        if self.lr_scheduler is None:
            self.lr_scheduler = paper_schedule(optimizer or self.optimizer, self.paper_warmup_steps)
        return self.lr_scheduler

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs) -> dict:
        """Validation loss, then greedy BLEU on a fixed sample of validation sentences (logged as eval_bleu)."""
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        if self.bleu_sources:
            model = self.accelerator.unwrap_model(self.model)
            predictions = translate(model, self.processing_class, self.bleu_sources, num_beams=1, progress=False)
            bleu = corpus_bleu(predictions, self.bleu_references)["score"]
            metrics[f"{metric_key_prefix}_bleu"] = bleu
            self.log({f"{metric_key_prefix}_bleu": bleu})
        return metrics


class Seq2SeqCollator:
    """Pads sources with pad and labels with -100, and builds decoder inputs from the labels (the Trainer's label
    smoothing removes `labels` before the forward pass, so the model cannot shift them itself)."""

    def __init__(self, model: VanillaForConditionalGeneration, pad_token_id: int):
        self.model = model
        self.pad_token_id = pad_token_id

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        def pad(rows: list[list[int]], value: int) -> torch.Tensor:
            width = max(len(r) for r in rows)
            return torch.tensor([r + [value] * (width - len(r)) for r in rows])

        input_ids = pad([f["input_ids"] for f in features], self.pad_token_id)
        labels = pad([f["labels"] for f in features], -100)
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != self.pad_token_id).long(),
            "labels": labels,
            "decoder_input_ids": self.model.prepare_decoder_input_ids_from_labels(labels),
        }


def check_text_file(path: str) -> None:
    """Refuses a data file that is not UTF-8, naming the first bad lines; counts blank lines aloud (they are
    skipped when the file is read)."""
    bad, blank = [], 0
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            try:
                blank += not line.decode("utf-8").strip()
            except UnicodeDecodeError:
                bad.append(number)
    if bad:
        raise ValueError(f"{path} is not UTF-8 text: {len(bad)} bad lines, first at lines {bad[:5]}")
    if blank:
        print(f"{path}: {blank} blank lines skipped")


def load_data(args: argparse.Namespace) -> datasets.DatasetDict:
    """The built-in corpus of `--pair`, or the user's files (JSONL/CSV) or a `datasets` name."""
    if args.train_file:
        files = {"train": args.train_file}
        for split, path in (("validation", args.validation_file), ("test", args.test_file)):
            if path:
                files[split] = path
        for path in files.values():
            check_text_file(path)
        builder = "csv" if args.train_file.endswith(".csv") else "json"
        data = datasets.load_dataset(builder, data_files=files)
    elif args.dataset_name:
        data = datasets.load_dataset(args.dataset_name, args.dataset_config)
    else:
        data = load_corpus(args.pair)
    if "validation" not in data:
        raise ValueError("the data needs a validation split (pass --validation-file)")
    return data


def data_origin(args: argparse.Namespace) -> dict:
    """Where `load_data` takes the data from, for the model card."""
    if args.train_file:
        files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        return {"corpus": "files", "files": {split: Path(path).name for split, path in files.items() if path}}
    if args.dataset_name:
        return {"corpus": "dataset", "name": args.dataset_name, "config": args.dataset_config}
    return {"corpus": "built-in", "pair": args.pair}


def pairs_of(split: datasets.Dataset, source: str, target: str) -> tuple[list[str], list[str]]:
    """Source and target sentences of a split in the `{"translation": {lang: text}}` layout, or with one column
    per language (CSV)."""
    if "translation" in split.column_names:
        rows = split["translation"]
        return [r[source] for r in rows], [r[target] for r in rows]
    missing = {source, target} - set(split.column_names)
    if missing:
        raise ValueError(f"the data has neither a 'translation' column nor columns {sorted(missing)}")
    return list(split[source]), list(split[target])


def tokenize(
    tokenizer: PreTrainedTokenizerBase, sources: list[str], targets: list[str], max_length: int, name: str
) -> datasets.Dataset:
    """Token ids of each pair; pairs with an empty side or longer than `max_length` tokens are left out, and
    counted aloud."""
    encoded = tokenizer(sources, text_target=targets)
    rows = {"input_ids": [], "labels": [], "source_length": [], "target_length": []}
    empty = too_long = 0
    for source, target, ids, labels in zip(sources, targets, encoded["input_ids"], encoded["labels"], strict=True):
        if not source.strip() or not target.strip():
            empty += 1
        elif max(len(ids), len(labels)) > max_length:
            too_long += 1
        else:
            rows["input_ids"].append(ids)
            rows["labels"].append(labels)
            rows["source_length"].append(len(ids))
            rows["target_length"].append(len(labels))
    print(
        f"{name}: {len(rows['input_ids'])} pairs kept, {empty} with an empty side and {too_long} longer than "
        f"{max_length} tokens left out"
    )
    return datasets.Dataset.from_dict(rows)


def build_model(
    args: argparse.Namespace,
    recipe: Recipe,
    tokenizer: PreTrainedTokenizerBase,
    model_factory: Callable[[VanillaConfig], PreTrainedModel] = VanillaForConditionalGeneration,
) -> PreTrainedModel:
    """The model to fine-tune (`--model-name-or-path`), or a new one of the recipe's size over the tokenizer's
    vocabulary, made by `model_factory` from its `VanillaConfig`."""
    if args.model_name_or_path:
        return AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path)
    config = VanillaConfig(
        **recipe.model,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    return model_factory(config)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m training.train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(RECIPES), default="demo", help="recipe (default: demo)")
    parser.add_argument("--output-dir", required=True, help="run folder: checkpoints, final model, metrics, plot")
    parser.add_argument("--pair", default="en-de", choices=["en-de", "en-fr"], help="built-in corpus")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", help="default: the second language of --pair")
    parser.add_argument("--train-file", help="JSONL ({'translation': {src: ..., tgt: ...}} per line) or CSV")
    parser.add_argument("--validation-file")
    parser.add_argument("--test-file")
    parser.add_argument("--dataset-name", help="a `datasets` dataset name instead of files")
    parser.add_argument("--dataset-config")
    parser.add_argument("--model-name-or-path", help="fine-tune this model (folder or Hub id) with its tokenizer")
    parser.add_argument("--tokenizer", help="an existing tokenizer folder instead of training a joint BPE")
    parser.add_argument("--resume-from-checkpoint", help="a checkpoint folder, or 'last' for the newest one")
    for field in dataclasses.fields(Recipe):
        if field.type in (int, float):
            parser.add_argument(f"--{field.name.replace('_', '-')}", type=field.type, help="overrides the preset")
    parser.add_argument("--model-config", type=json.loads, default={}, help="JSON overriding the preset's model")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--test-beams", type=int, default=4, help="beam size for the test set (section 6.1)")
    parser.add_argument("--test-limit", type=int, help="translate only the first N test sentences")
    parser.add_argument("--show", type=int, default=5, help="test translations printed next to their references")
    return parser.parse_args(argv)


def main(
    argv: list[str] | None = None,
    model_factory: Callable[[VanillaConfig], PreTrainedModel] = VanillaForConditionalGeneration,
) -> dict:
    """Runs the whole recipe and returns the results written to `final/training_results.json`. `model_factory`
    lets a benchmark train another implementation (MarianMTModel) under exactly the same recipe."""
    args = parse_args(argv)
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(Recipe)}
    overrides = {name: value for name, value in given.items() if value is not None}
    recipe = RECIPES[args.preset]
    recipe = dataclasses.replace(recipe, **overrides, model={**recipe.model, **args.model_config})
    if not args.model_name_or_path:
        VanillaConfig(**recipe.model, vocab_size=recipe.vocab_size)  # a bad setting fails now, before any output
    output_dir = Path(args.output_dir)
    source, target = args.source_lang, args.target_lang or args.pair.split("-")[1]
    started = time.time()

    training_args = Seq2SeqTrainingArguments(
        output_dir=str(output_dir),
        max_steps=recipe.max_steps,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        weight_decay=0.0,
        max_grad_norm=0.0,  # the paper does not clip gradients
        label_smoothing_factor=0.1,
        eval_strategy="steps",
        eval_steps=recipe.eval_steps,
        save_strategy="steps",
        save_steps=recipe.save_steps,
        save_total_limit=recipe.average_last,
        logging_steps=max(1, recipe.eval_steps // 5),
        per_device_eval_batch_size=64,
        report_to="none",
        seed=args.seed,
        data_seed=args.seed,
        ddp_find_unused_parameters=False,
        use_cpu=not torch.accelerator.is_available(),  # on CPU, data parallelism (gloo) needs it
        dataloader_drop_last=False,
    )

    with training_args.main_process_first(desc="data and tokenizer"):
        data = load_data(args)
        train_sources, train_targets = pairs_of(data["train"], source, target)
        if args.model_name_or_path or args.tokenizer:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model_name_or_path)
        elif (output_dir / "tokenizer.json").exists():
            tokenizer = AutoTokenizer.from_pretrained(output_dir)
        else:
            tokenizer = train_joint_bpe(train_sources + train_targets, recipe.vocab_size)
        set_seed(args.seed)
        model = build_model(args, recipe, tokenizer, model_factory)
        if len(tokenizer) != model.config.vocab_size:
            raise ValueError(
                f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {model.config.vocab_size}"
            )
        if training_args.process_index == 0 and not (output_dir / "tokenizer.json").exists():
            tokenizer.save_pretrained(output_dir)  # the first thing written: all inputs have been checked

    train_set = tokenize(tokenizer, train_sources, train_targets, recipe.max_length, "train")
    validation_sources, validation_targets = pairs_of(data["validation"], source, target)
    validation_set = tokenize(tokenizer, validation_sources, validation_targets, recipe.max_length, "validation")
    training_args.learning_rate = recipe.lr_scale * model.config.d_model**-0.5  # equation 3's d_model^-0.5
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation_set,
        data_collator=Seq2SeqCollator(model, tokenizer.pad_token_id),
        processing_class=tokenizer,
        max_tokens=recipe.max_tokens,
        warmup_steps=recipe.warmup_steps,
        bleu_sources=validation_sources[: recipe.bleu_sentences],
        bleu_references=validation_targets[: recipe.bleu_sentences],
    )
    resume = args.resume_from_checkpoint
    if resume == "last":
        found = checkpoints_in(output_dir)
        if not found:
            raise FileNotFoundError(f"--resume-from-checkpoint last: {output_dir} holds no checkpoint-<step> folder")
        resume = str(found[-1])
    if resume:
        checkpoints.verify_checkpoint(resume)
    trainer.train(resume_from_checkpoint=resume)
    trained_seconds = time.time() - started
    if not trainer.is_world_process_zero():
        return {}

    last = checkpoints_in(output_dir)[-recipe.average_last :]
    if len(last) > 1:
        model = average_checkpoints(last)
        print(f"averaged the last {len(last)} checkpoints: {', '.join(c.name for c in last)}")
    model.generation_config = paper_generation_config(model.config)  # the folder decodes as the paper does
    model.config.use_cache = True  # the Trainer turns the cache off for training; decoding wants it
    final_dir = output_dir / "final"
    model.save_pretrained(final_dir)
    tokenizer.save_pretrained(final_dir)

    results = {
        "preset": args.preset,
        "recipe": dataclasses.asdict(recipe),
        "processes": training_args.world_size,
        "train_seconds": round(trained_seconds),
        "languages": {"source": source, "target": target},
        "data": {
            **data_origin(args),
            "train_pairs": len(train_set),
            "validation_pairs": len(validation_set),
            "test_pairs": len(data["test"]) if "test" in data else 0,
        },
        "parameters": sum(p.numel() for p in model.parameters()),  # the shared embedding counted once
        "environment": environment(),
    }
    if "test" in data:
        test_sources, test_references = pairs_of(data["test"], source, target)
        if args.test_limit:
            test_sources, test_references = test_sources[: args.test_limit], test_references[: args.test_limit]
        predictions = translate(model, tokenizer, test_sources, num_beams=args.test_beams)
        bleu = corpus_bleu(predictions, test_references)
        results["test"] = {
            "bleu": round(bleu["score"], 2),
            "signature": bleu["signature"],
            "sentences": len(test_sources),
            "num_beams": args.test_beams,
            "length_penalty": model.generation_config.length_penalty,
            "examples": [
                {"source": src, "translation": hyp, "reference": ref}
                for src, hyp, ref in list(zip(test_sources, predictions, test_references, strict=True))[:3]
            ],
        }
        print(
            f"test BLEU {bleu['score']:.2f} ({len(test_sources)} sentences, beam {args.test_beams}) {bleu['signature']}"
        )
        for src, hyp, ref in list(zip(test_sources, predictions, test_references, strict=True))[: args.show]:
            print(f"\n  source:      {src}\n  translation: {hyp}\n  reference:   {ref}")
    results["log_history"] = trainer.state.log_history
    results["total_seconds"] = round(time.time() - started)
    (final_dir / "training_results.json").write_text(json.dumps(results, indent=2))
    # The model card describes a Vanilla model and reports its test BLEU; its snippets load this folder.
    if "test" in results and model.config.model_type == VanillaConfig.model_type:
        (final_dir / "README.md").write_text(render_card(final_dir, model_id=str(final_dir.resolve())))
    else:
        print("no model card (README.md): it needs a test split and a Vanilla model")
    plot_training(trainer.state.log_history, output_dir / "training.png")
    print(
        f"\nmodel, tokenizer and code in {final_dir}; plot {output_dir / 'training.png'}; "
        f"{results['total_seconds']} s in all"
    )
    return results


if __name__ == "__main__":
    main()
