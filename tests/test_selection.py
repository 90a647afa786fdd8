"""Never worse by waiting: a run averages the checkpoints ending at its best evaluation, keeps them while it trains,
and stops after `patience` evaluations without a better one; and the recipe options that choose it are checked."""

import json
import re
from pathlib import Path

import pytest
import sacrebleu
import torch
from safetensors.torch import load_file

from vanilla_training import checkpoints, precision, train
from vanilla_training.cli.train import main, parse_args
from vanilla_training.evaluation import bleu_tokenizer, corpus_bleu

from helpers import toy_run_args, write_toy_corpus


def make_checkpoints(run: Path, steps: range) -> None:
    for step in steps:
        (run / f"checkpoint-{step}").mkdir(parents=True)


def names(paths: list[str]) -> list[str]:
    return [Path(p).name for p in paths]


def test_the_window_ends_at_the_step_asked_for(tmp_path):
    make_checkpoints(tmp_path, range(10, 101, 10))
    assert names(checkpoints.window(tmp_path, 3)) == ["checkpoint-80", "checkpoint-90", "checkpoint-100"]
    assert names(checkpoints.window(tmp_path, 3, last_step=55)) == ["checkpoint-30", "checkpoint-40", "checkpoint-50"]
    assert names(checkpoints.window(tmp_path, 3, last_step=20)) == ["checkpoint-10", "checkpoint-20"]


def test_pruning_keeps_the_last_checkpoints_and_those_ending_at_the_best(tmp_path):
    make_checkpoints(tmp_path, range(10, 101, 10))
    checkpoints.prune(tmp_path, 3, best_step=50)
    kept = sorted(int(p.name.split("-")[1]) for p in tmp_path.iterdir())
    assert kept == [30, 40, 50, 80, 90, 100]
    checkpoints.prune(tmp_path, 2)
    assert sorted(int(p.name.split("-")[1]) for p in tmp_path.iterdir()) == [90, 100]


def script_validation_bleu(monkeypatch: pytest.MonkeyPatch, scores: list[float]) -> list[str | None]:
    """Each evaluation's validation BLEU is the next of `scores`; returns the target languages the trainer asked
    corpus_bleu to tokenize for, one per evaluation."""
    scripted, targets = iter(scores), []

    def scripted_bleu(predictions: list[str], references: list[str], target_lang: str | None = None) -> dict:
        targets.append(target_lang)
        return {"score": next(scripted), "signature": f"scripted|tok:{bleu_tokenizer(target_lang)}"}

    monkeypatch.setattr("vanilla_training.trainer.corpus_bleu", scripted_bleu)
    return targets


def test_validation_bleu_of_a_korean_target_uses_its_tokenizer(tmp_path, monkeypatch):
    """The validation BLEU that `--selection best` and `--patience` act on is tokenized as the test BLEU is: `char`
    for Korean, not 13a; it is sacreBLEU's own score of the same translations, and its signature is recorded."""
    files = write_toy_corpus(tmp_path, {"train": 100, "validation": 10, "test": 5})
    for path in files.values():
        path.write_text(path.read_text(encoding="utf-8").replace('"de":', '"ko":'), encoding="utf-8")
    calls = []

    def recorded_bleu(predictions, references, target_lang=None):
        calls.append((predictions, references, target_lang))
        return corpus_bleu(predictions, references, target_lang)

    monkeypatch.setattr("vanilla_training.trainer.corpus_bleu", recorded_bleu)
    options = {"source_lang": "en", "target_lang": "ko", "max_steps": 4, "eval_steps": 2, "save_steps": 2}
    results = main(toy_run_args(files, tmp_path / "run", **options, bleu_sentences=5, show=0))
    assert [target for _, _, target in calls] == ["ko", "ko"]
    predictions, references, _ = calls[-1]
    expected = sacrebleu.corpus_bleu(predictions, [references], tokenize="char")
    logged = [entry["eval_bleu"] for entry in results["log_history"] if "eval_bleu" in entry]
    assert logged[-1] == pytest.approx(expected.score, abs=1e-9)
    assert "|tok:char|" in results["validation_bleu_signature"] and "|tok:char|" in results["test"]["signature"]


SCRIPTED_BLEU = [5.0, 40.0, 20.0, 30.0, 10.0, 50.0]  # best at the 2nd evaluation, then two evaluations worse


@pytest.mark.slow
def test_a_run_averages_around_its_best_evaluation_and_stops_after_its_patience(tmp_path, monkeypatch):
    targets = script_validation_bleu(monkeypatch, SCRIPTED_BLEU)
    files = write_toy_corpus(tmp_path, {"train": 400, "validation": 20, "test": 10})
    run = tmp_path / "run"
    options = {"selection": "best", "patience": 2, "eval_steps": 20, "save_steps": 10, "max_steps": 200, "show": 0}
    results = main(toy_run_args(files, run, **options))

    # Evaluations at 20, 40, 60, 80 score 5, 40, 20, 30: the best is step 40, and 60 and 80 make two without a
    # better one, so training stops at step 80 (of 200).
    logged = [(e["step"], e["eval_bleu"]) for e in results["log_history"] if "eval_bleu" in e]
    assert logged == [(20, 5.0), (40, 40.0), (60, 20.0), (80, 30.0)]
    assert (results["steps"], results["stopped_by"]) == (80, "patience")
    assert targets == ["de"] * 4 and results["validation_bleu_signature"] == "scripted|tok:13a"
    card = (run / "final" / "README.md").read_text()
    assert "80 steps (of 200; 2 evaluations without a better validation score ended the run)" in card
    assert "budget" not in card
    averaged = results["averaged"]
    assert (averaged["best_step"], averaged["best_metric"]) == (40, 40.0)
    assert averaged["checkpoints"] == ["checkpoint-20", "checkpoint-30", "checkpoint-40"]  # average_last 3
    kept = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))
    assert kept == [20, 30, 40, 60, 70, 80]  # the best's window, and the last three to resume from

    final = load_file(run / "final" / "model.safetensors")
    states = [load_file(run / name / "model.safetensors") for name in averaged["checkpoints"]]
    for name, tensor in final.items():
        assert torch.allclose(tensor, sum(state[name] for state in states) / 3, atol=1e-6), name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"patience": 2, "selection": "last"}, "--patience .* needs --selection 'best'"),
        ({"selection": "best", "save_steps": 30, "eval_steps": 500}, r"--save-steps \(30\) must divide --eval-steps"),
        ({"label_smoothing": 1.5}, r"--label-smoothing must lie in \[0, 1\)"),
        ({"max_tokens": 0}, "--max-tokens must be positive, got 0"),
        ({"warmup_steps": 0}, "--warmup-steps must be positive, got 0"),  # equation 3 divides by it
        ({"selection": "first"}, "invalid choice: 'first'"),
        ({"test_beams": 0}, "--test-beams must be at least 1, got 0"),
        ({"test_limit": -1}, "--test-limit must be at least 1, got -1"),  # not the last sentence left out
        ({"num_proc": 0}, "--num-proc must be at least 1, got 0"),
        ({"tokenizer_sample": 0}, "--tokenizer-sample must be at least 1, got 0"),
        ({"show": -2}, "--show must be at least 0, got -2"),
    ],
)
def test_recipes_that_cannot_run_are_refused_by_name_before_anything_is_written(options, message, tmp_path, capsys):
    """Refused while reading the arguments: a run of these would fail later (warmup 0: ZeroDivisionError building
    the schedule; --test-beams 0: after training), or silently do something else."""
    files = write_toy_corpus(tmp_path, {"train": 20, "validation": 4})
    with pytest.raises(SystemExit):
        main(toy_run_args(files, tmp_path / "run", **options))
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_help_shows_each_recipe_option_in_every_preset(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(demo 100000, hour 1000000, multilingual 1000000, base 100000, big 300000)" in text  # --max-steps
    assert "(demo none, hour 0.2, multilingual 0.1, base none, big none)" in text  # --dropout
    for group in ("data:", "model:", "recipe:", "precision and speed:", "evaluation:", "output:"):
        assert group in text


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("fpu avx2 avx512f avx512_bf16", True),  # AMD Zen 4, Intel Cooper Lake
        ("fpu avx512f amx_bf16 amx_tile", True),  # Intel Sapphire Rapids
        ("fpu avx2 avx512f avx512bw", False),  # AVX-512 without bf16: torch emulates it
    ],
)
def test_native_bfloat16_is_read_from_the_cpu_flags(tmp_path, monkeypatch, flags, native):
    monkeypatch.setattr(precision, "kernels_held_below_bf16", lambda: False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert precision.native_bf16_cpu(cpuinfo) is native
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16\n")
    assert precision.native_bf16_cpu(arm) and not precision.native_bf16_cpu(tmp_path / "absent")


def test_kernels_held_to_avx2_count_as_a_cpu_without_bfloat16(tmp_path, monkeypatch):
    """The AVX2 emulation (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA) makes `auto` choose fp32 on a bfloat16 CPU."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    monkeypatch.setattr(precision.torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert precision.native_bf16_cpu(cpuinfo)
    for isa, native in (("AVX2", False), ("avx512_core_vnni", False), ("AVX512_CORE_BF16", True), ("ALL", True)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
        assert precision.native_bf16_cpu(cpuinfo) is native, isa
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setattr(precision.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not precision.native_bf16_cpu(cpuinfo)


def test_auto_precision_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: False)
    for native, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(precision, "native_bf16_cpu", lambda native=native: native)
        assert parse_args(["--output-dir", "unused"]).precision == expected
        assert parse_args(["--output-dir", "unused", "--fp32"]).precision == "fp32"
        assert parse_args(["--output-dir", "unused", "--bf16"]).precision == "bf16"


def test_a_sentence_over_the_translation_budget_is_translated_alone(monkeypatch):
    from vanilla_training import translator

    batches = []

    class Recorder:
        generation_config = type("Config", (), {"num_beams": 1})()
        training = device = None

        def eval(self):
            pass

        def train(self, mode):
            pass

        def generate(self, input_ids, attention_mask, max_new_tokens):
            batches.append(int(attention_mask.sum(1).max()) * len(input_ids))
            return input_ids

    class Tokenizer:
        def __call__(self, texts, return_tensors=None, padding=False, split_special_tokens=False):
            ids = [[int(word) for word in text.split()] for text in texts]
            if return_tensors is None:
                return {"input_ids": ids}
            width = max(map(len, ids))
            padded = torch.tensor([row + [0] * (width - len(row)) for row in ids])
            return type("Batch", (dict,), {"to": lambda self, device: self})(
                input_ids=padded, attention_mask=(padded != 0).long()
            )

        def batch_decode(self, ids, skip_special_tokens):
            return [" ".join(str(i) for i in row.tolist() if i) for row in ids]

    sentences = [" ".join(["5"] * 3)] * 20 + [" ".join(["7"] * 30)]
    assert translator.translate(Recorder(), Tokenizer(), sentences, max_tokens=20, progress=False) == sentences
    assert sorted(batches)[-1] == 30 and all(size <= 20 for size in sorted(batches)[:-1])  # the 30 goes alone


def test_report_to_reaches_the_trainer_and_training_attention_follows_the_precision(monkeypatch):
    job = parse_args(["--output-dir", "unused", "--report-to", "tensorboard,wandb"])
    assert train.training_arguments(job, sentences_per_batch=8).report_to == ["tensorboard", "wandb"]
    job = parse_args(["--output-dir", "unused"])
    assert train.training_arguments(job, sentences_per_batch=8).report_to == []  # "none"
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: False)
    assert (precision.training_attention("bf16"), precision.training_attention("fp32")) == ("eager", None)
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: True)
    assert precision.training_attention("bf16") is None  # on a GPU the fused kernels are fast in bf16


def mean_of_checkpoints(run: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """The mean of the checkpoints' weights, computed here in float64 from their safetensors files."""
    states = [load_file(run / name / "model.safetensors") for name in names]
    return {key: torch.stack([state[key].double() for state in states]).mean(0).float() for key in states[0]}


# (save_steps, eval_steps, average_last, validation BLEU at each evaluation, checkpoints the final model must average)
SELECTIONS = {
    "best-first-window-of-one": (10, 10, 1, [40.0, 10.0, 5.0], ["checkpoint-10"]),
    "best-first-window-shorter-than-asked": (10, 10, 3, [40.0, 10.0, 5.0], ["checkpoint-10"]),
    "best-in-the-middle-window-of-two": (5, 10, 2, [10.0, 40.0, 5.0], ["checkpoint-15", "checkpoint-20"]),
    "best-last-window-of-all": (5, 10, 6, [5.0, 10.0, 40.0], [f"checkpoint-{step}" for step in range(5, 31, 5)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", SELECTIONS)
def test_the_final_model_is_the_mean_of_exactly_the_checkpoints_recorded(case, tmp_path, monkeypatch):
    save_steps, eval_steps, average_last, scores, expected = SELECTIONS[case]
    script_validation_bleu(monkeypatch, scores)
    trainers = []
    build_trainer = train.build_trainer
    monkeypatch.setattr(train, "build_trainer", lambda *args: trainers.append(build_trainer(*args)) or trainers[-1])
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 8})
    run = tmp_path / "run"
    options = {"save_steps": save_steps, "eval_steps": eval_steps, "average_last": average_last, "max_steps": 30}
    results = main(toy_run_args(files, run, selection="best", bleu_sentences=4, show=0, **options))

    best_step = 10 * (scores.index(max(scores)) + 1)
    assert (results["averaged"]["best_step"], results["averaged"]["checkpoints"]) == (best_step, expected)
    assert results["stopped_by"] == "max_steps"
    last = [f"checkpoint-{step}" for step in range(save_steps, 31, save_steps)][-average_last:]  # to resume from
    assert sorted(p.name for p in run.glob("checkpoint-*")) == sorted(set(expected) | set(last))
    final = load_file(run / "final" / "model.safetensors")
    mean = mean_of_checkpoints(run, expected)
    assert final.keys() == mean.keys()
    for key, tensor in final.items():
        torch.testing.assert_close(tensor, mean[key], rtol=1e-6, atol=1e-8, msg=key)
    if "checkpoint-30" not in expected:  # and not the last step's weights (kept to resume from)
        last = load_file(run / "checkpoint-30" / "model.safetensors")
        assert any(not torch.allclose(final[key], last[key]) for key in final)
    # The best checkpoint is named by its final path, in the live state and in every trainer_state.json saved
    best = str(run / f"checkpoint-{best_step}")
    assert trainers[0].state.best_model_checkpoint == best
    for state in run.glob("checkpoint-*/trainer_state.json"):
        recorded = json.loads(state.read_text())["best_model_checkpoint"]
        assert recorded is None or checkpoints.STAGING not in recorded, state
    assert json.loads((run / "checkpoint-30/trainer_state.json").read_text())["best_model_checkpoint"] == best


@pytest.mark.parametrize(
    ("flags", "held", "named"),
    [
        ("fpu avx2 avx512f amx_bf16 amx_tile avx512_bf16", False, "AMX"),
        ("fpu avx2 avx512f avx512_bf16", False, "AVX-512 with bfloat16"),
        ("fpu avx2 avx512f avx512bw", False, "AVX-512"),
        ("fpu avx2 fma", False, "AVX2"),
        ("fpu avx2 avx512f avx512_bf16", True, "AVX2"),  # the AVX2 emulation
    ],
)
def test_the_cpu_class_the_card_records(tmp_path, monkeypatch, flags, held, named):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(precision, "kernels_held_below_bf16", lambda: held)
    assert precision.cpu_class(cpuinfo) == named
