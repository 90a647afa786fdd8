"""Training: the paper's schedule and optimiser, token-budget batches, checkpoint averaging, a whole run on small
data, and data parallelism (2 CPU processes give the weights of 1 process with the same global batch)."""

import json
import os
import random
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
from training import recipe
from training.average_checkpoints import average_checkpoints
from training.batching import TokenBudgetBatchSampler
from training.evaluation import corpus_bleu
from training.tokenizer import train_joint_bpe
from training.train import main
from training.trainer import TranslationTrainer

from helpers import WORDS, free_port, tiny_model, toy_run_args, write_toy_corpus


def toy_trainer(tmp_path: Path, warmup_steps: int = 100) -> TranslationTrainer:
    model = tiny_model()
    tokenizer = train_joint_bpe([*WORDS, *WORDS.values()], vocab_size=64)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        learning_rate=recipe.paper_learning_rate(model.config.d_model),
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
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 0.6)
    assert "max_length" not in generation  # the Trainer's edits did not leak into the saved decoding setup
    assert results["test"]["bleu"] > 30  # a word-for-word task is learnt within 150 steps
    assert (results["test"]["num_beams"], results["test"]["length_penalty"]) == (4, 0.6)
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
                   str(ROOT / "training" / "accelerate_multi_gpu.yaml"), "--num_processes", "2",
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
    subprocess.run([sys.executable, "-m", "training.train", *single], check=True, env=env, timeout=600)
    parallel = [*LAUNCHERS[launcher], str(free_port()), "-m", "training.train", *toy_run_args(files, two, **options)]
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
    tiny = {"size": "tiny", "model_config": "{}", "max_steps": 2, "eval_steps": 5, "bleu_sentences": 0}
    results = main(toy_run_args(files, tmp_path / "bf16", bf16=True, **tiny))  # CPUs have bfloat16 autocast
    assert results["precision"] == "bf16"
    losses = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
    assert losses and all(0 < loss < 20 for loss in losses)
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            main(toy_run_args(files, tmp_path / "fp16", fp16=True, **tiny))
        assert "--fp16 needs a CUDA GPU, and this machine has none" in capsys.readouterr().err
        assert not (tmp_path / "fp16").exists()


def test_a_time_budget_ends_training_at_the_step_it_runs_out_with_a_checkpoint(tmp_path, capsys):
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 10, "test": 5})
    run = tmp_path / "run"
    budget = {"size": "tiny", "model_config": "{}", "max_train_minutes": 1e-6, "bleu_sentences": 0, "show": 0}
    results = main(toy_run_args(files, run, **budget))  # 60 microseconds: over after the first step
    assert results["steps"] == 1 and results["recipe"]["max_steps"] == 150
    assert [path.name for path in run.glob("checkpoint-*")] == ["checkpoint-1"]  # saved where it stopped
    assert "training ended at step 1 of 150: the time budget of 1e-06 minutes" in capsys.readouterr().out
    card = (run / "final" / "README.md").read_text()
    assert "1 steps (of 150; the 1e-06-minute training budget ended the run)" in card
    logged = [entry for entry in results["log_history"] if "loss" in entry or "eval_loss" in entry]
    assert [entry["step"] for entry in logged] == [1, 1]  # its loss logged and the model evaluated where it stopped
    no_limit = {**budget, "max_train_minutes": 0, "max_steps": 3, "eval_steps": 1}
    unlimited = main(toy_run_args(files, tmp_path / "unlimited", **no_limit))
    assert unlimited["steps"] == 3
