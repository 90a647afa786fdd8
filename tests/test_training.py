"""Training: the paper's schedule and optimiser, token-budget batches, checkpoint averaging, a whole run on small
data, and data parallelism (2 CPU processes give the weights of 1 process with the same global batch)."""

import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainingArguments, set_seed
from transformers.trainer_utils import sort_checkpoints

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from vanilla_training import recipe
from vanilla_training.average_checkpoints import average_checkpoints
from vanilla_training.batching import TokenBudgetBatchSampler
from vanilla_training.cli.average_checkpoints import main as average_main
from vanilla_training.cli.train import main
from vanilla_training.evaluation import corpus_bleu
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.trainer import TranslationTrainer
from vanilla_training.translator import load_translator

from helpers import WORDS, fine_tune_args, free_port, tiny_model, toy_pairs, toy_run_args, write_toy_corpus


def toy_trainer(tmp_path: Path, warmup_steps: int = 100) -> TranslationTrainer:
    model = tiny_model()
    tokenizer = train_joint_bpe([*WORDS, *WORDS.values()], vocab_size=64)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        learning_rate=1.0,  # lr_scale: the schedule is equation 3 itself
        warmup_steps=warmup_steps,
        adam_beta1=recipe.ADAM_BETA1,
        adam_beta2=recipe.ADAM_BETA2,
        adam_epsilon=recipe.ADAM_EPSILON,
        weight_decay=0.0,
        report_to="none",
    )
    return TranslationTrainer(
        model=model,
        args=args,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        max_tokens=64,
        bleu_sources=[],
        bleu_references=[],
    )


def test_learning_rate_follows_equation_3(tmp_path):
    trainer = toy_trainer(tmp_path, warmup_steps=100)
    trainer.create_optimizer_and_scheduler(num_training_steps=2000)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.0
    d_model = 32
    for step in range(1, 1001):
        expected = d_model**-0.5 * min(step**-0.5, step * 100**-1.5)
        assert scheduler.get_last_lr()[0] == pytest.approx(expected, rel=1e-9), step  # lr used by update `step`
        optimizer.step()
        scheduler.step()


def test_token_budget_batches_stay_within_budget_and_cover_every_example_once():
    rng = random.Random(0)
    lengths = [rng.randint(1, 120) for _ in range(3000)]
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=1000, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert all(len(b) * max(lengths[i] for i in b) <= 1000 for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(3000))
    sampler.set_epoch(0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # the batch order changes between epochs
    padded = sum(len(b) * max(lengths[i] for i in b) for b in first)
    assert 1 - sum(lengths) / padded < 0.05  # similar lengths together: little padding
    with pytest.raises(ValueError, match="1 examples are longer than max_tokens=100"):
        TokenBudgetBatchSampler([5, 101, 7], max_tokens=100)


def test_trainer_batches_respect_the_token_budget(tmp_path):
    trainer = toy_trainer(tmp_path)
    rng = random.Random(1)
    rows = {"input_ids": [], "labels": [], "length": []}
    for _ in range(200):
        source = [rng.randint(4, 63) for _ in range(rng.randint(1, 20))]
        target = [rng.randint(4, 63) for _ in range(rng.randint(1, 20))]
        rows["input_ids"].append(source)
        rows["labels"].append(target)
        rows["length"].append(max(len(source), len(target)))
    trainer.train_dataset = datasets.Dataset.from_dict(rows)
    seen = 0
    for batch in trainer.get_train_dataloader():
        assert batch["input_ids"].numel() <= 64 and batch["labels"].numel() <= 64
        assert torch.equal(batch["attention_mask"], (batch["input_ids"] != 0).long())
        assert torch.equal(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1].clamp(min=0))
        seen += batch["input_ids"].shape[0]
    assert seen == 200


def test_averaging_checkpoints_is_the_mean_of_their_tensors(tmp_path):
    folders = []
    for seed in range(3):
        folder = tmp_path / f"checkpoint-{(seed + 1) * 10}"
        tiny_model(seed=seed).save_pretrained(folder)
        folders.append(folder)
    assert sort_checkpoints(str(tmp_path)) == [str(f) for f in folders]
    averaged = average_checkpoints(folders)
    states = [load_file(f / "model.safetensors") for f in folders]
    for name, tensor in averaged.state_dict().items():
        if name in states[0]:
            assert torch.allclose(tensor, sum(s[name] for s in states) / 3, atol=1e-7), name
    assert averaged.lm_head.weight is averaged.model.shared.weight


def test_a_whole_training_run_on_small_data(tmp_path):
    files = write_toy_corpus(tmp_path, {"train": 400, "validation": 40, "test": 30})
    run = tmp_path / "run"
    results = main(toy_run_args(files, run, show=2, keep_checkpoints=True))
    final = run / "final"
    assert sorted(path.name for path in run.glob("checkpoint-*")) == [f"checkpoint-{s}" for s in (120, 150, 40, 80)]
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "modeling_vanilla.py",
        "configuration_vanilla.py",
        "training_results.json",
    ):
        assert (final / name).is_file(), name
    assert (run / "training.png").stat().st_size > 10_000
    generation = json.loads((final / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 1.0)  # the demo recipe's penalty
    assert "max_length" not in generation  # the Trainer's edits did not leak into the saved decoding setup
    assert results["test"]["bleu"] > 30  # a word-for-word task is learnt within 150 steps
    assert (results["test"]["num_beams"], results["test"]["length_penalty"]) == (4, 1.0)
    assert results["test"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    logged = [e for e in results["log_history"] if "eval_bleu" in e]
    assert [e["step"] for e in logged] == [75, 150]
    elapsed = [entry["elapsed"] for entry in results["log_history"]]  # every record: seconds of training so far
    assert elapsed == sorted(elapsed) and 0 < elapsed[-1] < results["train_seconds"] + 1
    state = json.loads(max(run.glob("checkpoint-*/trainer_state.json")).read_text())
    sentences_per_batch = state["train_batch_size"]  # the Trainer records the token budgets' mean batch size
    assert 512 / 10 < sentences_per_batch < 512 / 3  # 512-token batches of 3 to 10-token sentences


def test_local_bleu_module_equals_sacrebleu():
    import sacrebleu

    hypotheses = ["the cat sat on the mat", "a dog barked loudly at night", "hello there"]
    references = ["the cat sat on a mat", "the dog barked loudly at night", "hello world"]
    ours = corpus_bleu(hypotheses, references)
    assert ours["score"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert "version:" in ours["signature"]


ROOT = Path(__file__).resolve().parents[1]
LAUNCHERS = {  # what users type: torchrun, and accelerate's launcher with the shipped configuration file
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port"],
    "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                   str(ROOT / "vanilla_training" / "accelerate_multi_gpu.yaml"), "--num_processes", "2",
                   "--main_process_port"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_processes_give_the_weights_of_one_with_the_same_global_batch(tmp_path, launcher):
    files = write_toy_corpus(tmp_path, {"train": 300, "validation": 10})
    tokenizer_dir = tmp_path / "tokenizer"
    train_joint_bpe([line for line in files["train"].read_text().splitlines()], vocab_size=100).save_pretrained(
        tokenizer_dir
    )
    # (With a time budget that never ends the run: its check, a broadcast from the first process, runs each step.)
    options = {"size": "tiny", "model_config": json.dumps({"encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0}),
               "max_tokens": 200, "max_steps": 4, "warmup_steps": 2, "eval_steps": 1000, "save_steps": 1000,
               "tokenizer": tokenizer_dir, "max_train_minutes": 60}  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    single = toy_run_args(files, one, **options, gradient_accumulation_steps=2)
    subprocess.run([sys.executable, "-m", "vanilla_training.cli.train", *single], check=True, env=env, timeout=600)
    parallel = [*LAUNCHERS[launcher], str(free_port()), "-m", "vanilla_training.cli.train"]
    parallel += toy_run_args(files, two, **options)
    done = subprocess.run(parallel, env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((two / "final" / "training_results.json").read_text())["processes"] == 2
    single_weights = load_file(one / "final" / "model.safetensors")
    parallel_weights = load_file(two / "final" / "model.safetensors")
    set_seed(1)  # the run's seed: the weights both runs started from
    initial = VanillaForConditionalGeneration(VanillaConfig.from_pretrained(one / "final")).state_dict()
    for name, tensor in single_weights.items():
        assert torch.allclose(tensor, parallel_weights[name], atol=1e-5), name
        assert not torch.allclose(tensor, initial[name], atol=1e-4), name  # and they did train


def test_bad_training_inputs_fail_clearly_and_write_nothing(tmp_path, capsys):
    files = write_toy_corpus(tmp_path, {"train": 50, "validation": 5})
    data = ["--train-file", str(files["train"]), "--validation-file", str(files["validation"])]
    run = tmp_path / "run"
    with pytest.raises(ValueError, match="d_model=30 is not divisible by encoder_attention_heads=4"):
        main(["--output-dir", str(run), *data, "--model-config", '{"d_model": 30, "encoder_attention_heads": 4}'])
    assert not run.exists()

    broken = tmp_path / "broken.jsonl"
    lines = files["train"].read_bytes().splitlines(keepends=True)
    broken.write_bytes(b"".join(lines[:3]) + b'{"translation": {"en": "caf\xe9", "de": "x"}}\n' + b"".join(lines[3:]))
    with pytest.raises(ValueError, match=r"broken.jsonl is not UTF-8 text: 1 bad lines, first at lines \[4\]"):
        main(["--output-dir", str(run), "--train-file", str(broken), "--validation-file", str(files["validation"])])
    assert not run.exists()

    model_dir, tokenizer_dir = tmp_path / "model", tmp_path / "tokenizer"
    tiny_model().save_pretrained(model_dir)  # vocab_size 64
    train_joint_bpe(WORDS.values(), vocab_size=120).save_pretrained(tokenizer_dir)
    mismatched = ["--model-name-or-path", str(model_dir), "--tokenizer", str(tokenizer_dir)]
    with pytest.raises(ValueError, match=r"the tokenizer has \d+ tokens but the model's vocab_size is 64"):
        main(["--output-dir", str(run), *data, *mismatched])
    assert not run.exists()
    for ignored in (["--vocab-size", "100"], ["--size", "tiny"], ["--model-config", '{"d_model": 64}']):
        with pytest.raises(SystemExit):  # a new model's settings cannot apply to the model being fine-tuned
            main(["--output-dir", str(run), *data, "--model-name-or-path", str(model_dir), *ignored])
        assert "would be ignored" in capsys.readouterr().err

    gappy = tmp_path / "gappy.jsonl"
    gappy.write_text(files["train"].read_text().replace("\n", "\n\n", 3) + '{"translation": {"en": "", "de": "x"}}\n')
    main(["--output-dir", str(run), "--train-file", str(gappy), "--validation-file", str(files["validation"]),
          "--max-steps", "1", "--vocab-size", "100", "--size", "tiny", "--bleu-sentences", "0"])  # fmt: skip
    printed = capsys.readouterr().out
    assert "gappy.jsonl: 3 blank lines skipped" in printed
    assert "train: 50 pairs kept, 1 with an empty side" in printed


def test_a_tokenizer_left_in_the_run_folder_is_not_silently_reused(tmp_path):
    """A new run trains its own tokenizer of --vocab-size tokens; only a resumed run reads the folder's."""
    files = write_toy_corpus(tmp_path, {"train": 50, "validation": 5})
    run = tmp_path / "run"
    train_joint_bpe(WORDS.values(), vocab_size=40).save_pretrained(run)  # a stale tokenizer of another run
    main(toy_run_args(files, run, max_steps=1, vocab_size=90, size="tiny", model_config="{}", bleu_sentences=0))
    assert len(AutoTokenizer.from_pretrained(run)) > 40


def test_mixed_precision_runs_where_the_hardware_has_it_and_is_refused_by_name_elsewhere(tmp_path, capsys):
    files = write_toy_corpus(tmp_path, {"train": 100, "validation": 10})
    tiny = {"size": "tiny", "model_config": "{}", "max_steps": 3, "eval_steps": 5, "bleu_sentences": 0}
    losses = {}
    for precision in ("fp32", "bf16"):  # CPUs have bfloat16 autocast
        results = main(toy_run_args(files, tmp_path / precision, **{precision: True}, **tiny))
        assert results["precision"] == precision
        # bf16 on a CPU trains with eager attention (torch's fused CPU kernel is slow in bf16); saved, sdpa
        switched = "attention: eager while training (bf16 on a CPU), sdpa after" in capsys.readouterr().out
        assert switched == (precision == "bf16" and not torch.cuda.is_available())
        losses[precision] = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    # The same run (weights, batches, dropout masks) in both precisions: bf16 rounds to 8 significant bits (0.4%),
    # and the losses, means over hundreds of tokens, differ by at most 0.03% here; 0.2% is allowed. They must
    # differ at all, or bf16 was not in use.
    assert len(losses["bf16"]) == len(losses["fp32"]) == 3
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=2e-3)
    assert losses["bf16"] != losses["fp32"]
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            main(toy_run_args(files, tmp_path / "fp16", fp16=True, **tiny))
        assert "--precision fp16 needs a CUDA GPU, and this machine has none" in capsys.readouterr().err
        assert not (tmp_path / "fp16").exists()


def test_a_time_budget_ends_training_at_the_step_it_runs_out_with_a_checkpoint(tmp_path, capsys):
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 10, "test": 5})
    run = tmp_path / "run"
    budget = {"size": "tiny", "model_config": "{}", "max_train_minutes": 1e-6, "bleu_sentences": 0, "show": 0}
    results = main(toy_run_args(files, run, **budget))  # 60 microseconds: over after the first step
    assert (results["steps"], results["recipe"]["max_steps"], results["stopped_by"]) == (1, 150, "time_budget")
    assert [path.name for path in run.glob("checkpoint-*")] == ["checkpoint-1"]  # saved where it stopped
    printed = capsys.readouterr()
    assert "training ended at step 1 of 150: the time budget of 1e-06 minutes" in printed.out
    # its progress bar counts the budget's minutes, not the 150 steps the budget cut short
    assert re.search(r"training: 100%\|.*\| [0-9.]+/1e-06 min, step 1$", printed.err, re.MULTILINE)
    assert "/150 [" not in printed.err
    card = (run / "final" / "README.md").read_text()
    assert "1 steps (of 150; the 1e-06-minute training budget ended the run)" in card
    logged = [entry for entry in results["log_history"] if "loss" in entry or "eval_loss" in entry]
    assert [entry["step"] for entry in logged] == [1, 1]  # its loss logged and the model evaluated where it stopped
    no_limit = {**budget, "max_train_minutes": 0, "max_steps": 3, "eval_steps": 1}
    unlimited = main(toy_run_args(files, tmp_path / "unlimited", **no_limit))
    assert unlimited["steps"] == 3
    assert "| 3/3 [" in capsys.readouterr().err  # without a budget, transformers' bar of steps


def test_a_test_cut_short_leaves_the_final_model_to_translate_with(tmp_path, monkeypatch):
    """A long test (a multilingual run's 132 directions) stopped by hand must not lose the averaged model."""
    files = write_toy_corpus(tmp_path, {"train": 100, "validation": 10, "test": 5})
    run = tmp_path / "run"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("vanilla_training.train.evaluate_test", interrupted)
    budget = {"size": "tiny", "model_config": "{}", "max_steps": 2, "eval_steps": 2, "bleu_sentences": 0, "show": 0}
    with pytest.raises(KeyboardInterrupt):
        main(toy_run_args(files, run, **budget))
    assert not (run / "final" / "training_results.json").exists()  # no results without the test
    translator = load_translator(run)  # the run folder's final/, as vanilla-translate reads it
    assert translator.model.generation_config.num_beams == 4  # the averaged model, set to decode as the paper does
    assert len(translator.translate([" ".join(list(WORDS)[:3])])) == 1


# A run of the tiny model whose numbers can be recomputed: no dropout, float32.
EXACT = {"size": "tiny", "model_config": json.dumps({"dropout": 0.0}), "fp32": True, "bleu_sentences": 0}


def initial_model(run: Path, seed: int = 1) -> VanillaForConditionalGeneration:
    """The weights a new run in `run` started from: its model built again under its seed."""
    set_seed(seed)
    return VanillaForConditionalGeneration(VanillaConfig.from_pretrained(run / "final")).eval()


def hand_loss(model, tokenizer, pairs: list[tuple[str, str]], epsilon: float) -> float:
    """transformers' label-smoothed loss over the target tokens of `pairs`, computed pair by pair (no padding) with
    the decoder fed `<s>` and the labels shifted by hand: (1 - eps) * NLL + eps * mean over the vocabulary of
    -log p, both averaged over every target token."""
    nll, uniform = [], []
    with torch.no_grad():
        for source, target in pairs:
            labels = torch.tensor([tokenizer(text_target=target).input_ids])
            decoder_ids = torch.cat([torch.tensor([[model.config.decoder_start_token_id]]), labels[:, :-1]], dim=1)
            logits = model(input_ids=torch.tensor([tokenizer(source).input_ids]), decoder_input_ids=decoder_ids).logits
            log_p = torch.log_softmax(logits.double(), dim=-1)[0]
            nll.append(-log_p.gather(1, labels.T)[:, 0])
            uniform.append(-log_p.mean(dim=1))
    return ((1 - epsilon) * torch.cat(nll).mean() + epsilon * torch.cat(uniform).mean()).item()


def test_label_smoothing_is_applied_as_transformers_label_smoother_defines_it(tmp_path):
    """The training loss logged at step 1 is the loss of the first batch under the initial weights; with 20 short
    pairs in a 512-token budget that batch is the whole training set (one step is one epoch)."""
    files = write_toy_corpus(tmp_path, {"train": 20, "validation": 5})
    pairs = [tuple(json.loads(line)["translation"].values()) for line in files["train"].read_text().splitlines()]
    losses = {}
    for epsilon in (0.1, 0.0):
        run = tmp_path / f"eps{epsilon}"
        options = {**EXACT, "max_steps": 1, "eval_steps": 5, "save_steps": 5, "label_smoothing": epsilon}
        if epsilon == 0.1:
            del options["label_smoothing"]  # the recipe's default: section 5.4
        results = main(toy_run_args(files, run, **options))
        (logged,) = [entry for entry in results["log_history"] if "loss" in entry]
        assert logged["step"] == 1 and logged["epoch"] == 1.0  # one batch held the whole training set
        tokenizer = AutoTokenizer.from_pretrained(run / "final")
        expected = hand_loss(initial_model(run), tokenizer, pairs, epsilon)
        assert logged["loss"] == pytest.approx(expected, rel=1e-5), epsilon
        losses[epsilon] = logged["loss"]
    # The same initial model and batch in both runs: the difference is the smoothing's (here 1.3e-3 of the loss).
    assert abs(losses[0.1] - losses[0.0]) > 2e-4 * losses[0.0]


def test_fine_tuning_a_trained_model_starts_from_its_weights(tmp_path):
    """`--model-name-or-path` on the final folder of a run: training resumes from its weights (Adam moves each one
    by at most about the learning rate per step) with its tokenizer, and the run completes."""
    files = write_toy_corpus(tmp_path, {"train": 100, "validation": 10})
    base = tmp_path / "base"
    main(toy_run_args(files, base, **EXACT, max_steps=30, save_steps=30, eval_steps=30))
    tuned = tmp_path / "tuned"
    options = {"fp32": True, "bleu_sentences": 0, "max_steps": 3, "save_steps": 1, "eval_steps": 3}
    results = main(fine_tune_args(files, tuned, base / "final", **options))
    assert results["steps"] == 3 and (tuned / "final" / "model.safetensors").is_file()
    assert (tuned / "final" / "tokenizer.json").read_text() == (base / "final" / "tokenizer.json").read_text()
    config = VanillaConfig.from_pretrained(base / "final")
    rates = [0.2 * recipe.equation_3(t, config.d_model, 40) for t in (1, 2, 3)]
    bound = 1.01 * sum(rates)  # Adam's step is at most lr * ~1.002 for beta 0.9/0.98 in three steps
    start, end = load_file(base / "final" / "model.safetensors"), load_file(tuned / "final" / "model.safetensors")
    fresh = initial_model(base).state_dict()
    moved = 0
    for name, tensor in start.items():
        assert (end[name] - tensor).abs().max() <= bound, name
        moved += int(not torch.equal(end[name], tensor))
        if "norm" not in name and "bias" not in name:  # the base run moved far from its own start: a run started
            assert (fresh[name] - tensor).abs().max() > 10 * bound, name  # from a new model would break the bound
    assert moved > len(start) / 2  # and it trained
    first_losses = {
        run: next(
            e["loss"]
            for e in json.loads((run / "final" / "training_results.json").read_text())["log_history"]
            if "loss" in e
        )
        for run in (base, tuned)
    }
    assert first_losses[tuned] < first_losses[base] - 0.5  # the fine-tuned run's first batch already has a low loss


def test_resuming_the_last_checkpoint_of_a_run_that_saved_none_is_a_clear_error(tmp_path):
    files = write_toy_corpus(tmp_path, {"train": 30, "validation": 5})
    started = tmp_path / "started"  # a run stopped before its first checkpoint: its tokenizer, no checkpoint
    train_joint_bpe([*WORDS, *WORDS.values()], vocab_size=120).save_pretrained(started)
    options = {**EXACT, "max_steps": 2, "resume_from_checkpoint": "last"}
    with pytest.raises(FileNotFoundError, match=r"--resume-from-checkpoint last: .*started holds no checkpoint-<step>"):
        main(toy_run_args(files, started, **options))
    assert not list(started.glob("checkpoint-*")) and not (started / "final").exists()
    with pytest.raises(FileNotFoundError, match=r"--resume-from-checkpoint last: .*fresh holds no checkpoint-<step>"):
        main(toy_run_args(files, tmp_path / "fresh", **options))  # a folder that does not exist yet
    assert not (tmp_path / "fresh").exists()


def test_a_new_run_in_the_folder_of_an_earlier_run_with_checkpoints_is_refused(tmp_path):
    """Its checkpoints would count as the new run's: pruned as the newest, chosen and averaged into its model."""
    files = write_toy_corpus(tmp_path, {"train": 30, "validation": 5})
    earlier = tmp_path / "earlier"
    (earlier / "checkpoint-150").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=r"holds an earlier run.s checkpoints \(the last: checkpoint-150\)"):
        main(toy_run_args(files, earlier, **EXACT, max_steps=2))
    assert sorted(path.name for path in earlier.iterdir()) == ["checkpoint-150"]  # nothing written


def test_num_proc_test_beams_length_penalty_and_tokenizer_sample_take_effect_from_the_command_line(
    tmp_path, monkeypatch
):
    files = write_toy_corpus(tmp_path, {"train": 60, "validation": 5, "test": 4})
    maps = []
    map_with = datasets.Dataset.map
    monkeypatch.setattr(
        datasets.Dataset, "map", lambda self, *a, **k: maps.append(k.get("num_proc")) or map_with(self, *a, **k)
    )
    options = {**EXACT, "max_steps": 2, "num_proc": 2, "test_beams": 2, "tokenizer_sample": 1, "show": 0}
    results = main(toy_run_args(files, tmp_path / "run", length_penalty=1.3, **options))
    assert (results["test"]["num_beams"], results["test"]["sentences"]) == (2, 4)  # not the paper's 4 beams
    generation = json.loads((tmp_path / "run" / "final" / "generation_config.json").read_text())
    assert results["test"]["length_penalty"] == generation["length_penalty"] == 1.3  # not the paper's 0.6
    assert maps.count(2) == 2  # the train and validation splits, tokenized by two processes each
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    whole = [text for pair in toy_pairs(random.Random(0), 60) for text in pair]  # write_toy_corpus's train split
    assert len(tokenizer) < len(train_joint_bpe(whole, vocab_size=120))  # 1 pair has fewer words than 60


def test_the_command_line_reads_a_csv_file_beside_a_jsonl_file_and_a_dataset_by_name(tmp_path):
    pairs = toy_pairs(random.Random(5), 50)
    train, validation = tmp_path / "train.jsonl", tmp_path / "validation.csv"
    train.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in pairs[:40]))
    with open(validation, "w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows([("en", "de"), *pairs[40:]])
    options = {**EXACT, "max_steps": 1, "eval_steps": 1, "save_steps": 5, "bleu_sentences": 10}
    results = main(toy_run_args({"train": train, "validation": validation}, tmp_path / "files", **options))
    assert results["data"].items() >= {"corpus": "files", "train_pairs": 40, "validation_pairs": 10}.items()
    assert results["data"]["files"] == {"train": "train.jsonl", "validation": "validation.csv"}
    assert any("eval_bleu" in entry for entry in results["log_history"])  # the CSV sentences were translated

    folder = tmp_path / "dataset"
    (folder / "en-de").mkdir(parents=True)
    for split, split_pairs in (("train", pairs[:40]), ("validation", pairs[40:])):
        lines = [json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in split_pairs]
        (folder / "en-de" / f"{split}.jsonl").write_text("".join(lines))
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: en-de\n  data_files:\n  - split: train\n    path: en-de/train.jsonl\n"
        "  - split: validation\n    path: en-de/validation.jsonl\n---\n"
    )
    by_name = {"dataset_name": folder, "dataset_config": "en-de"}
    results = main(toy_run_args({}, tmp_path / "by_name", **options, **by_name))
    expected = {"corpus": "dataset", "name": str(folder), "config": "en-de", "train_pairs": 40, "validation_pairs": 10}
    assert results["data"].items() >= expected.items()


def test_pruning_keeps_the_last_average_last_checkpoints_whose_mean_is_the_final_model(tmp_path, capsys):
    files = write_toy_corpus(tmp_path, {"train": 100, "validation": 10})
    run = tmp_path / "run"
    main(toy_run_args(files, run, **EXACT, max_steps=12, save_steps=2, eval_steps=12, average_last=3))
    kept = [Path(path) for path in sort_checkpoints(str(run))]
    assert [path.name for path in kept] == ["checkpoint-8", "checkpoint-10", "checkpoint-12"]
    states = [load_file(path / "model.safetensors") for path in kept]
    final = load_file(run / "final" / "model.safetensors")
    assert final.keys() == states[0].keys()
    for name, tensor in final.items():
        mean = (sum(state[name].double() for state in states) / 3).float()
        assert torch.allclose(tensor, mean, rtol=1e-6, atol=1e-8), name
    assert not all(torch.equal(final[name], states[-1][name]) for name in final)  # not the last checkpoint alone

    by_paths, by_last = tmp_path / "by_paths", tmp_path / "by_last"
    average_main([*map(str, kept[::-1]), "--output", str(by_paths)])  # vanilla-average-checkpoints
    assert f"averaged 3 checkpoints into {by_paths}" in capsys.readouterr().out
    average_main(["--last", "3", str(run), "--output", str(by_last)])
    sentences = [" ".join(pair[0].split()[:6]) for pair in toy_pairs(random.Random(7), 3)]
    expected = load_translator(run / "final").translate(sentences)
    decoding = json.loads((run / "final" / "generation_config.json").read_text())
    greedy = json.loads((kept[-1] / "generation_config.json").read_text())  # what checkpoints carry
    assert decoding["num_beams"] == 4 and "num_beams" not in greedy
    for folder in (by_paths, by_last):
        averaged = load_file(folder / "model.safetensors")
        assert all(torch.equal(averaged[name], final[name]) for name in final), folder
        assert json.loads((folder / "generation_config.json").read_text()) == decoding, folder  # not greedy
        assert load_translator(folder).translate(sentences) == expected, folder  # tokenizer included

    errors = [
        (["--last", "0", str(run)], "--last must be at least 1, got 0"),
        (["--last", "2", str(kept[0]), str(kept[1])], "--last takes one run folder, got 2 paths"),
        (["--last", "4", str(run)], r"--last 4: .*run holds 3 checkpoint-<step> folders"),
        (["--last", "1", str(tmp_path / "missing")], r"--last 1: .*missing holds 0 checkpoint-<step> folders"),
    ]
    for argv, message in errors:
        with pytest.raises(SystemExit):
            average_main([*argv, "--output", str(tmp_path / "refused")])
        assert re.search(message, capsys.readouterr().err), argv
    with pytest.raises(FileNotFoundError, match=r"run holds no model.safetensors"):
        average_main([str(kept[0]), str(run), "--output", str(tmp_path / "refused")])
    with pytest.raises(ValueError, match=r"checkpoints given more than once would weigh more in the mean: .*-8"):
        average_main([str(kept[0]), str(kept[1]), str(kept[0]), "--output", str(tmp_path / "refused")])
    other = tmp_path / "checkpoint-99"
    tiny_model(encoder_layers=1).save_pretrained(other)
    with pytest.raises(ValueError, match=r"checkpoint-99 does not hold the same tensors as .*checkpoint-8"):
        average_main([str(kept[0]), str(other), "--output", str(tmp_path / "refused")])
    average_main([str(other), "--output", str(tmp_path / "untokenized")])
    printed = capsys.readouterr().out
    assert f"no tokenizer in {other} or {tmp_path}" in printed
    assert "it decodes as the paper does (no final model beside the checkpoints): beam 4, length penalty 0.6" in printed
    paper = json.loads((tmp_path / "untokenized" / "generation_config.json").read_text())
    assert (paper["num_beams"], paper["length_penalty"], paper["early_stopping"]) == (4, 0.6, True)
    assert not (tmp_path / "refused").exists()


# A data-parallel training run in which the second process' clock stands still, so that only the first process'
# clock can end the run; each process prints the step it stopped at.
FROZEN_CLOCK_RUN = """
import os, sys, types
import vanilla_training.trainer as trainer
if os.environ["RANK"] == "1":
    trainer.time = types.SimpleNamespace(perf_counter=lambda: 0.0)
train = trainer.TranslationTrainer.train
def train_and_report(self, *args, **kwargs):
    output = train(self, *args, **kwargs)
    print(f"process {os.environ['RANK']} stopped at step {self.state.global_step}", flush=True)
    return output
trainer.TranslationTrainer.train = train_and_report
from vanilla_training.cli.train import main
main(sys.argv[1:])
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.slow
def test_a_time_budget_stops_every_process_of_a_data_parallel_run_at_the_same_step(tmp_path):
    """The first process' clock decides for all: the second, whose clock never advances, stops with it. (Had each
    process decided alone, the first would leave training while the second waits in its next gradient all-reduce:
    the run would hang, and fail here at the timeout.)"""
    files = write_toy_corpus(tmp_path, {"train": 300, "validation": 10})
    script = tmp_path / "frozen_clock_run.py"
    script.write_text(FROZEN_CLOCK_RUN)
    options = {"size": "tiny", "model_config": json.dumps({"encoder_layers": 1, "decoder_layers": 1}),
               "max_tokens": 200, "max_steps": 2000, "eval_steps": 1000, "save_steps": 1000, "bleu_sentences": 0,
               "max_train_minutes": 0.02, "fp32": True}  # fmt: skip
    command = [*LAUNCHERS["torchrun"], str(free_port()), str(script), *toy_run_args(files, tmp_path / "run", **options)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and both of its processes
        out, err = process.communicate()
        pytest.fail(f"the processes did not stop together: the run hung\n{err[-3000:]}")
    assert process.returncode == 0, err[-3000:]
    stopped = dict(re.findall(r"process (\d) stopped at step (\d+)", out))
    assert stopped.keys() == {"0", "1"} and stopped["0"] == stopped["1"], out[-3000:]
    step = int(stopped["0"])
    assert 0 < step < 2000
    assert f"training ended at step {step:,} of 2,000: the time budget of 0.02 minutes" in out
    assert [path.name for path in (tmp_path / "run").glob("checkpoint-*")] == [f"checkpoint-{step}"]
    assert json.loads((tmp_path / "run" / "final" / "training_results.json").read_text())["steps"] == step
