"""The quality experiments (experiments/) end to end on a toy run: the scripts that train and score models, checked
on their tiniest settings. experiments/README.md has the real runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def run_script(script: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXPERIMENTS / script), *options], capture_output=True, text=True, timeout=600
    )


def test_bleu_vs_time_decodes_the_test_set_from_the_checkpoints_of_one_run(tmp_path):
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 10, "test": 10})
    run = tmp_path / "run"
    options = {"size": "tiny", "model_config": "{}", "max_steps": 20, "save_steps": 5, "eval_steps": 10,
               "bleu_sentences": 5, "keep_checkpoints": True}  # fmt: skip
    training = [sys.executable, "-m", "vanilla_training.cli.train", *toy_run_args(files, run, **options)]
    subprocess.run(training, check=True, capture_output=True, timeout=400, cwd=EXPERIMENTS.parent)
    done = run_script("bleu_vs_time.py", str(run), "--steps", "10,20", "--average-last", "2", "--test-file",
                      str(files["test"]))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 10 |") or line.startswith("| 20 |")]
    assert len(rows) == 4  # printed as they come, then in the table
    missing = run_script("bleu_vs_time.py", str(run), "--steps", "17", "--test-file", str(files["test"]))
    assert missing.returncode != 0 and "holds no checkpoint-17" in missing.stderr
    # --selection best: at each step, the checkpoints ending at the best validation BLEU logged up to it
    best = run_script("bleu_vs_time.py", str(run), "--steps", "10,20", "--average-last", "2", "--selection", "best",
                      "--test-file", str(files["test"]))  # fmt: skip
    assert best.returncode == 0, best.stderr[-3000:]
    state = json.loads((run / "checkpoint-20" / "trainer_state.json").read_text())
    bleu = {entry["step"]: entry["eval_bleu"] for entry in state["log_history"] if "eval_bleu" in entry}
    best_step = 10 if bleu[10] >= bleu[20] else 20
    assert "| 10 | " in best.stdout and "| 5-10 |" in best.stdout.split("| 20 |")[0]
    assert f"| {best_step - 5}-{best_step} |" in best.stdout.split("| 20 |", 1)[1]


def test_bleu_vs_marian_refuses_a_run_of_ours_with_another_recipe(tmp_path):
    final = tmp_path / "ours" / "final"
    final.mkdir(parents=True)
    results = {"preset": "demo", "data": {"pair": "en-de"}, "seed": 2, "recipe": {"max_steps": 2000}}
    (final / "training_results.json").write_text(json.dumps(results))
    done = run_script("bleu_vs_marian.py", "--ours-run", str(tmp_path / "ours"), "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 1
    assert "was trained with seed 2, this comparison uses 1" in done.stderr
    done = run_script("bleu_vs_marian.py", "--ours-run", str(tmp_path / "missing"))
    assert "not a finished vanilla-train run" in done.stderr


def test_the_language_table_prints_a_row_per_finished_run_with_its_tokenizer_and_references(tmp_path):
    def finish(pair: str, test: dict, steps: int, seconds: int) -> None:
        final = tmp_path / f"demo-{pair}" / "final"
        final.mkdir(parents=True)
        results = {"data": {"train_pairs": 26625}, "steps": steps, "total_seconds": seconds, "test": test,
                   "recipe": {"lr_scale": 0.5 if "ar" in pair else 1.0,
                              "vocab_size": 4000 if "ar" in pair else 8000}}  # fmt: skip
        (final / "training_results.json").write_text(json.dumps(results))

    one = {"references": ["e"], "bleu": 19.27, "chrf": 45.84}
    finish("en-de", {"bleu": 19.27, "chrf": 45.84, "sentences": 1866, "signature": "nrefs:1|tok:13a|x",
                     "multi_reference": one}, 3567, 716)  # fmt: skip
    three = {"references": ["4", "k", "3"], "bleu": 30.5, "chrf": 55.25}
    finish("de-en", {"bleu": 20.125, "chrf": 48.0, "sentences": 1866, "signature": "nrefs:1|tok:13a|y",
                     "multi_reference": three}, 3400, 750)  # fmt: skip
    finish("ar-en", {"bleu": 14.71, "chrf": 36.01, "sentences": 1860, "signature": "nrefs:1|tok:13a|z"}, 2816, 660)
    (tmp_path / "demo-en-fr").mkdir()  # unfinished: no row
    done = run_script("language_table.py", "--runs", str(tmp_path), "--no-train")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| en-", "| de-", "| ar-"))]
    assert rows == [
        "| en-de | Latin to Latin (the main job) | 8,000 | 1 | 26,625 | 1,866 | 3,567 | 12 | 19.27 (13a) | 45.84 | - |",
        "| de-en | Latin to Latin, into English | 8,000 | 1 | 26,625 | 1,866 | 3,400 | 12 | 20.12 (13a) | 48.00 "
        "| 30.50 / 55.25 (3 refs) |",
        "| ar-en | Arabic to Latin | 4,000 | 0.5 | 26,625 | 1,860 | 2,816 | 11 | 14.71 (13a) | 36.01 | - |",
    ]
    refused = run_script("language_table.py", "--runs", str(tmp_path), "--no-train", "--pairs", "en-zh")
    assert refused.returncode == 2 and "en-zh not among" in refused.stderr


def test_fixed_steps_sweep_compares_each_variant_with_the_baseline_seed_by_seed(tmp_path):
    def finished(name: str, web: float) -> None:
        final = tmp_path / name / "final"
        final.mkdir(parents=True)
        sources = {"4": {"bleu": web}, "k": {"bleu": web - 3}, "3": {"bleu": web - 6}}  # bible.db's bbNames
        log_history = [{"eval_bleu": web - 8}, {"loss": 3.0}, {"eval_bleu": web - 5}]
        (final / "training_results.json").write_text(json.dumps({"test": {"bleu": web, "sources": sources},
                                                                  "log_history": log_history}))  # fmt: skip

    finished("baseline-s1", 18.0)
    finished("baseline-s2", 19.0)
    finished("vocab-8000-s1", 20.0)
    finished("vocab-8000-s3", 10.0)  # no baseline run of seed 3: in the mean, not in the comparison
    done = run_script("fixed_steps_sweep.py", "--runs", str(tmp_path), "--steps", "3000", "--seeds", "1", "2", "3",
                      "--no-train")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in done.stdout.splitlines()[2:]}  # fmt: skip
    assert set(rows) == {"baseline", "vocab-8000"}  # variants without a finished run are left out
    # options, seeds, by seed, mean, vs baseline (seed 1 alone: 20 - 18), KJV mean, BBE mean, best validation mean
    assert rows["vocab-8000"] == ["`--vocab-size 8000`", "2", "20.00, 10.00", "15.00", "+2.00", "12.00", "9.00",
                                  "10.00"]  # fmt: skip
    assert rows["baseline"][1:5] == ["2", "18.00, 19.00", "18.50", "+0.00"]
