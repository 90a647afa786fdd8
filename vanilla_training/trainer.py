"""`Seq2SeqTrainer` with what the paper's recipe needs and transformers does not provide: batches of sentences of
similar length up to a token budget (section 5.1), the learning rate of equation 3 exactly, BLEU at each
evaluation, and checkpoints that are either complete or absent."""

import shutil
import time
from pathlib import Path

import datasets
import torch
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import EarlyStoppingCallback, ProgressCallback, Seq2SeqTrainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME

from . import checkpoints, recipe
from .batching import TokenBudgetBatchSampler
from .corpus.multilingual import VERSE
from .evaluation import corpus_bleu
from .loss import label_smoothed_projection_loss
from .preprocess import LENGTH, lengths, verses
from .translator import translate


class TrainingTimeBudget(TrainerCallback):
    """Ends training at the first step that ends `seconds` or more after training began, and logs, evaluates and
    saves a checkpoint there, as at the last step of a run. In a data-parallel run the main process' clock decides
    for all, so that every process stops at the same step."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        over = torch.tensor(int(time.perf_counter() - self.started >= self.seconds), device=args.device)
        if torch.distributed.is_initialized():
            torch.distributed.broadcast(over, src=0)
        if over.item() and state.global_step < state.max_steps:  # at the last step the run ends anyway
            control.should_training_stop = control.should_log = control.should_evaluate = control.should_save = True


class TimeBudgetProgress(ProgressCallback):
    """transformers' progress bar, filled by the minutes of a `TrainingTimeBudget` rather than by steps: where the
    budget ends the run, `max_steps` is only a bound, and a bar of it would promise hours (0% of 1,000,000 steps)."""

    def __init__(self, budget: TrainingTimeBudget):
        super().__init__()
        self.budget = budget

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero:
            minutes = self.budget.seconds / 60
            bar = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:g} min{postfix}"  # postfix: ", step N"
            self.training_bar = tqdm(total=minutes, desc="training", bar_format=bar, dynamic_ncols=True)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if state.is_world_process_zero:
            bar = self.training_bar
            minutes = min((time.perf_counter() - self.budget.started) / 60, bar.total)
            bar.set_postfix_str(f"step {state.global_step:,}", refresh=False)
            bar.update(minutes - bar.n)


class PatienceCallback(EarlyStoppingCallback):
    """transformers' early stopping (after `patience` evaluations without a better `metric_for_best_model`), without
    its warning about `load_best_model_at_end`: the run averages the checkpoints around the best evaluation itself
    (`load_best_model_at_end` loads one checkpoint, and needs every evaluation step to be a save step)."""

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if args.metric_for_best_model is None:
            raise ValueError("early stopping needs metric_for_best_model: the validation score it watches")


def token_batch_sampler(
    dataset: datasets.Dataset, max_tokens: int, seed: int, shuffle: bool = True, per_verse: int | None = None
) -> TokenBudgetBatchSampler:
    """The token-budget batches of a tokenized split: by verse, `per_verse` rows of each drawn each epoch, where
    `per_verse` is given and the split holds its rows' verses."""
    groups = verses(dataset) if per_verse is not None else None
    return TokenBudgetBatchSampler(lengths(dataset), max_tokens, seed, shuffle, groups=groups, per_group=per_verse)


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget batches, the paper's schedule, greedy BLEU on `bleu_sources` at each
    evaluation (with the tokenizer of `target_lang`, as the test BLEU), atomic checkpoints, and the training time in
    its log."""

    def __init__(
        self,
        *args,
        max_tokens: int,
        bleu_sources: list[str],
        bleu_references: list[str],
        target_lang: str | None = None,
        directions_per_verse: int | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.directions_per_verse = directions_per_verse  # drawn afresh each epoch from a split with verses
        self.max_tokens = max_tokens
        self.bleu_sources = bleu_sources
        self.bleu_references = bleu_references
        self.target_lang = target_lang  # picks BLEU's tokenizer (`evaluation.bleu_tokenizer`), as the test BLEU's
        self.bleu_signature: str | None = None  # sacreBLEU's signature of the last validation BLEU
        self.bleu_generate_kwargs = {"num_beams": 1}
        self.started = time.perf_counter()

    def train(self, *args, **kwargs):
        self.started = time.perf_counter()
        return super().train(*args, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """transformers' log, every record stamped with `elapsed`: the seconds since this process began training."""
        super().log({**logs, "elapsed": round(time.perf_counter() - self.started, 1)}, start_time)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """transformers' loss, except for a training step on a CPU: there the same label-smoothed loss is computed
        from the decoder's output a slice of positions at a time (`loss.py` says why), when the model is not wrapped
        or compiled (by DDP or torch.compile, whose forward must run), steps are not accumulated (only that case is
        checked against transformers' path) and the model has no final logits bias (a Marian option)."""
        if return_outputs or not self._sliced_loss_applies(model, inputs):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs.pop("labels")
        with self.accelerator.autocast():
            hidden = model.model(**inputs).last_hidden_state
            return label_smoothed_projection_loss(
                hidden, model.lm_head.weight, labels, self.args.label_smoothing_factor, num_items_in_batch
            )

    def _sliced_loss_applies(self, model, inputs) -> bool:
        return (
            model.training
            and "labels" in inputs
            and model is self.accelerator.unwrap_model(model)
            and not self.args.torch_compile
            and self.args.gradient_accumulation_steps == 1
            and model.device.type == "cpu"
            and not model.config.add_final_logits_bias
        )

    def _token_batches(self, dataset: datasets.Dataset, shuffle: bool) -> DataLoader:
        """transformers' samplers put a fixed number of sentences in a batch; the paper fixes the tokens. A split
        of many directions with its rows' verses (`multilingual.VERSE`) gives `directions_per_verse` rows of each
        verse, drawn afresh each epoch (`TokenBudgetBatchSampler`'s groups)."""
        sampler = token_batch_sampler(dataset, self.max_tokens, self.args.seed, shuffle, self.directions_per_verse)
        columns = [column for column in (LENGTH, VERSE) if column in dataset.column_names]
        loader = DataLoader(dataset.remove_columns(columns), batch_sampler=sampler, collate_fn=self.data_collator)
        return self.accelerator.prepare(loader)

    def get_train_dataloader(self) -> DataLoader:
        return self._token_batches(self.train_dataset, shuffle=True)

    def get_eval_dataloader(self, eval_dataset: datasets.Dataset | None = None) -> DataLoader:
        return self._token_batches(eval_dataset if eval_dataset is not None else self.eval_dataset, shuffle=False)

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> LambdaLR:
        """`recipe.equation_3` with the model's d_model and `args.warmup_steps`, times the optimizer's own rate
        (`args.learning_rate`: the run's `lr_scale`). LambdaLR counts from 0, equation 3 from 1. (transformers'
        "inverse_sqrt" counts steps from 0: it gives the first update a learning rate of 0 and every later one the
        rate of the step before.)"""
        if self.lr_scheduler is None:
            optimizer, d_model, warmup = optimizer or self.optimizer, self.model.config.d_model, self.args.warmup_steps
            self.lr_scheduler = LambdaLR(optimizer, lambda index: recipe.equation_3(index + 1, d_model, warmup))
        return self.lr_scheduler

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint, written under `.staging/`, checksummed, then renamed into place (see
        `checkpoints`). transformers writes a checkpoint file by file in place, and no public hook can make
        that write atomic: a run killed while saving would leave a half-written checkpoint (here: under `.staging/`,
        deleted before that step is saved again, lest its files mix with the new ones). The Trainer's state, live
        and in the checkpoint's `trainer_state.json`, names the best checkpoint by its final path."""
        run_dir = Path(self._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        if self.args.should_save and (run_dir / checkpoints.STAGING / name).exists():  # a killed save's remains
            shutil.rmtree(run_dir / checkpoints.STAGING / name)
        self.accelerator.wait_for_everyone()  # before any process writes its part
        output_dir, limit = self.args.output_dir, self.args.save_total_limit
        self.args.output_dir, self.args.save_total_limit = str(run_dir / checkpoints.STAGING), None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir, self.args.save_total_limit = output_dir, limit
        if self.state.best_model_checkpoint is not None:  # transformers named it where it wrote it: under .staging/
            self.state.best_model_checkpoint = str(run_dir / Path(self.state.best_model_checkpoint).name)
        self.accelerator.wait_for_everyone()  # every process has written its part (e.g. its RNG state)
        if self.args.should_save:
            self.state.save_to_json(str(run_dir / checkpoints.STAGING / name / TRAINER_STATE_NAME))  # the final name
            checkpoints.write_checksums(run_dir / checkpoints.STAGING / name)
            checkpoints.commit(run_dir / checkpoints.STAGING / name, run_dir / name)
            if limit:
                best = self.state.best_global_step if self.args.metric_for_best_model else None
                checkpoints.prune(run_dir, limit, best_step=best)
        self.accelerator.wait_for_everyone()

    def _finalize_training(self, trial, num_train_samples, start_time):
        """transformers' end of training, without its deletion, where `save_total_limit` is 1, of every checkpoint but
        the best: `checkpoints.prune` keeps the last one as well, to resume from."""
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            return super()._finalize_training(trial, num_train_samples, start_time)
        finally:
            self.args.save_total_limit = limit

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs) -> dict:
        """Validation loss, then BLEU on a fixed sample of validation sentences (`eval_bleu`), decoded greedily
        unless `gen_kwargs` (e.g. `num_beams=4`) say otherwise."""
        self.bleu_generate_kwargs = {"num_beams": 1, **gen_kwargs}
        return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix, **gen_kwargs)

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None, **kwargs):
        """transformers' loop (the loss), and for an evaluation the BLEU of `bleu_sources`: added here, before the
        metrics are logged and the callbacks see them, so that early stopping and the best-checkpoint choice can
        use it (`metric_for_best_model="bleu"`)."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, **kwargs)
        if self.bleu_sources and description == "Evaluation":
            model = self.accelerator.unwrap_model(self.model)
            sources, options = self.bleu_sources, self.bleu_generate_kwargs
            predictions = translate(model, self.processing_class, sources, progress=False, **options)
            prefix = kwargs.get("metric_key_prefix", "eval")
            bleu = corpus_bleu(predictions, self.bleu_references, self.target_lang)
            output.metrics[f"{prefix}_bleu"], self.bleu_signature = bleu["score"], bleu["signature"]
        return output
