"""The CPU benchmarks end to end at the tiny size, one round: same-function checks, fresh worker processes, tables
and JSON; length_scaling.py's picture; clear errors for bad options. (Values are not judged: tiny runs on a shared
machine measure noise. benchmarks/README.md has the real runs.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy
import pytest
import torch

from helpers import toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
ONE_TINY_ROUND = ["--sizes", "tiny", "--rounds", "1", "--threads", "1"]


def run_script(script: str, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(BENCHMARKS / script), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=400)


def run_tiny(script: str, json_path: Path, *options: str) -> tuple[dict, str]:
    done = run_script(script, *ONE_TINY_ROUND, "--json", str(json_path), *options)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(json_path.read_text()), done.stdout


def measured_systems(payload: dict) -> list[list[str]]:
    """The systems of every summary group, after asserting that each was measured with positive values."""
    for group in payload["summary"]:
        for name, stats in group["systems"].items():
            assert "error" not in stats, (name, stats)
            assert all(stats[field]["min"] > 0 for field in ("seconds", "peak_mib")), (name, stats)
    return [list(group["systems"]) for group in payload["summary"]]


def test_train_speed(tmp_path):
    options = ["--warmup", "1", "--steps", "1", "--batch-size", "4", "--source-length", "8", "--target-length", "8"]
    payload, stdout = run_tiny("train_speed.py", tmp_path / "train.json", "--peak-size", "128", *options)
    assert measured_systems(payload) == [["ours", "MarianMTModel", "nn.Transformer"]]
    assert payload["peak"]["dtype"] == "float32"
    assert "| size | mode | system | target tok/s (median) | min | max | step ms | peak RSS MiB |" in stdout
    assert "| tiny | eager | ours / nn.Transformer |" in stdout


def test_train_speed_in_bfloat16_measures_its_steps_and_peak_in_bfloat16(tmp_path):
    options = ["--warmup", "1", "--steps", "1", "--batch-size", "4", "--source-length", "8", "--target-length", "8"]
    payload, stdout = run_tiny(
        "train_speed.py", tmp_path / "train.json", "--peak-size", "128", "--dtype", "bfloat16", *options
    )
    assert payload["peak"]["dtype"] == "bfloat16"
    assert {result["dtype"] for result in payload["results"] if result["kind"] == "train"} == {"bfloat16"}
    assert "Training step (forward + backward + Adam) in bfloat16" in stdout


def test_train_speed_compiled_mode_compiles_the_system_and_eager_mode_does_not(monkeypatch):
    """`--modes compiled` wraps each system in `torch.compile` (here a recorder, so that nothing compiles)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import train_speed

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(type(model).__name__) or model)
    task = {"size": "tiny", "vocab_size": 40, "attn": "sdpa", "device": "cpu", "dtype": "float32", "system": "ours"}
    task |= {"kind": "train", "batch_size": 2, "source_length": 4, "target_length": 4, "warmup": 0, "steps": 1}
    assert train_speed.measure_training({**task, "mode": "eager"})["seconds"] > 0
    assert compiled == []
    assert train_speed.measure_training({**task, "mode": "compiled"})["seconds"] > 0
    assert compiled == ["VanillaForConditionalGeneration"]


def test_generate_speed_checks_identical_tokens(tmp_path):
    options = ["--batch-sizes", "1", "--source-length", "6", "--new-tokens", "2", "--repeats", "1"]
    payload, stdout = run_tiny("generate_speed.py", tmp_path / "generate.json", "--peak-size", "128", *options)
    assert measured_systems(payload) == [["ours", "MarianMTModel"]] * 2
    assert [group["decoding"] for group in payload["summary"]] == ["greedy", "beam-4"]
    assert payload["checks"]["tiny"]["same_tokens"] == {"greedy": True, "beam-4": True}
    assert "greedy tokens identical, beam-4 tokens identical" in stdout


def test_generate_speed_with_the_static_cache_compiled(tmp_path):
    """The static cache + compile mode: the tokens are checked against the dynamic cache's first, transformers'
    compiled forward runs for greedy decoding (its beam search calls the eager one), and the rows say their cache."""
    options = ["--batch-sizes", "1", "--source-length", "6", "--new-tokens", "3", "--repeats", "1"]
    options += ["--caches", "static+compile"]
    payload, stdout = run_tiny("generate_speed.py", tmp_path / "generate.json", "--peak-size", "128", *options)
    assert measured_systems(payload) == [["ours", "MarianMTModel"]] * 2
    assert [(group["decoding"], group["cache"]) for group in payload["summary"]] == [
        ("greedy", "static+compile"), ("beam-4", "static+compile")
    ]  # fmt: skip
    same_tokens = payload["checks"]["tiny"]["same_tokens"]
    assert same_tokens == {"greedy (static+compile)": True, "beam-4 (static+compile)": True}
    measurements = [result for result in payload["results"] if result["kind"] == "generate"]
    compiled = {(result["decoding"], result["system"]): result["compiled_forward"] for result in measurements}
    assert compiled == {("greedy", "ours"): True, ("greedy", "marian"): True, ("beam-4", "ours"): False,
                        ("beam-4", "marian"): False}  # fmt: skip
    assert "| tiny | greedy | 1 | static+compile | ours |" in stdout


def test_length_scaling_and_its_picture(tmp_path):
    picture = tmp_path / "images" / "length_scaling.png"
    options = ["--lengths", "16,8", "--repeats", "1", "--plot", str(picture)]
    payload, stdout = run_tiny("length_scaling.py", tmp_path / "lengths.json", *options)
    variants = ["ours eager", "ours sdpa", "MarianMTModel eager", "MarianMTModel sdpa", "nn.Transformer"]
    assert measured_systems(payload) == [variants] * 2
    assert [group["length"] for group in payload["summary"]] == [8, 16]
    assert set(payload["checks"]) == {"tiny eager", "tiny sdpa"}
    assert "| tiny | 8 to 16 |" in stdout
    drawn = matplotlib.image.imread(picture)  # a PNG that decodes, of a drawing (many colours)
    assert min(drawn.shape[:2]) > 200 and len(numpy.unique(drawn.reshape(-1, drawn.shape[-1]), axis=0)) > 20
    redrawn = tmp_path / "redrawn.png"
    done = run_script("plot_length_scaling.py", str(tmp_path / "lengths.json"), str(redrawn))
    assert done.returncode == 0, done.stderr
    assert numpy.array_equal(matplotlib.image.imread(redrawn), drawn)  # the same picture from the JSON alone


def test_matmul_ceiling(tmp_path):
    options = ["--repeats", "1", "--peak-size", "128", "--train-batch-size", "2", "--train-length", "8"]
    options += ["--generate-batch-size", "2", "--source-length", "8", "--new-tokens", "2"]
    payload, stdout = run_tiny("matmul_ceiling.py", tmp_path / "ceiling.json", *options)
    workloads = [(group["workload"], group["beams"], group["batch_size"]) for group in payload["summary"]]
    generate = [("generate", beams, batch) for beams in (1, 4) for batch in (1, 2)]
    assert workloads == [("train", 0, 2), *generate]
    assert all("error" not in group["systems"]["matmul-only"] for group in payload["summary"])
    assert "| tiny | train step | 2 |" in stdout


def test_ct2_speed(tmp_path):
    pytest.importorskip("ctranslate2")
    options = ["--vocab-size", "64", "--batch-size", "2", "--source-length", "6", "--new-tokens", "3"]
    payload, stdout = run_tiny("ct2_speed.py", tmp_path / "ct2.json", *options)
    assert measured_systems(payload) == [["generate (float32)", "CTranslate2 float32", "CTranslate2 int8"]]
    assert "| tiny | CTranslate2 int8 / generate (float32) |" in stdout


@pytest.mark.parametrize(
    "script, options, message",
    [
        ("train_speed.py", ["--sizes", "tiny,huge"], "unknown size(s) ['huge']; choose from"),
        ("generate_speed.py", ["--batch-sizes", "1,0"], "expected comma-separated positive integers, got '1,0'"),
        ("generate_speed.py", ["--caches", "static,paged"], "unknown cache mode(s) ['paged']; choose from"),
        ("train_speed.py", ["--modes", "eager,jit"], "unknown mode(s) ['jit']; choose from ['eager', 'compiled']"),
        ("length_scaling.py", ["--bogus"], "unrecognized arguments: --bogus"),
        (
            "libretranslate_speed.py",
            ["--model", "m", "--libretranslate", "lt", "--rounds", "0"],
            "--clients, --per-request and --rounds must be at least 1",
        ),
    ],
)
def test_bad_options_are_refused_by_name(script, options, message):
    done = run_script(script, *options)
    assert done.returncode == 2
    assert message in done.stderr


def test_libretranslate_speed_gives_the_median_of_the_ratios_each_round_measured(monkeypatch, capsys):
    """Each round's ratio is over the faster LibreTranslate setting of that round (hand-computed: 150/100, 120/150
    and 300/200 at one client give 1.5, 0.8 and 1.5; at 8 clients 1.0, 2.0 and 0.5)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import libretranslate_speed

    def cell(speed: float) -> dict:
        return {"verses_per_second": speed}

    rounds = [
        {"lt-default": {(1, 1): cell(10), (1, 8): cell(10)}, "lt-inter2": {(1, 1): cell(100), (1, 8): cell(200)},
         "ct2-int8": {(1, 1): cell(150), (1, 8): cell(200)}},
        {"lt-default": {(1, 1): cell(150), (1, 8): cell(10)}, "lt-inter2": {(1, 1): cell(90), (1, 8): cell(100)},
         "ct2-int8": {(1, 1): cell(120), (1, 8): cell(200)}},
        {"lt-default": {(1, 1): cell(10), (1, 8): cell(10)}, "lt-inter2": {(1, 1): cell(200), (1, 8): cell(400)},
         "ct2-int8": {(1, 1): cell(300), (1, 8): cell(200)}},
    ]  # fmt: skip
    args = libretranslate_speed.parse_args(
        ["--model", "m", "--libretranslate", "lt", "--per-request", "1", "--clients", "1,8"]
    )
    libretranslate_speed.report_medians(args, rounds)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "1 a request, 1 clients, ct2-int8 over LibreTranslate's faster setting, 3 rounds: median 1.50x (0.80-1.50x)",
        "1 a request, 8 clients, ct2-int8 over LibreTranslate's faster setting, 3 rounds: median 1.00x (0.50-2.00x)",
    ]


def test_data_scaling_reports_every_stage_and_the_run_from_the_cache(tmp_path):
    done = run_script(
        "data_scaling.py", "--sizes", "1000,3000", "--vocab-size", "300", "--json", str(tmp_path / "d.json")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads((tmp_path / "d.json").read_text())
    assert [(r["pairs"], r["run"]) for r in payload["results"]] == [
        (1000, "cold"), (1000, "from cache"), (3000, "cold"), (3000, "from cache")
    ]  # fmt: skip
    for result in payload["results"]:
        assert all(result[stage]["seconds"] >= 0 and result[stage]["peak_mib"] > 0 for stage in ("load", "batching"))
        assert result["until_first_step_seconds"] > result["load"]["seconds"]
    assert payload["exponent"] is not None and "Preparation time grows as pairs^" in done.stdout


def test_sliced_loss_times_both_losses_after_checking_they_agree():
    done = run_script("sliced_loss.py", "--sizes", "tiny", "--vocab-sizes", "64", "--steps", "2", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| tiny |")]
    assert [row[2] for row in rows] == ["whole logits, LabelSmoother", "sliced"]
    assert all(float(row[3]) > 0 for row in rows) and rows[0][-1] == "1.00 |"
    refused = run_script("sliced_loss.py", "--vocab-sizes", "4")
    assert refused.returncode == 2 and "every vocabulary larger than 4 tokens" in refused.stderr


def test_freed_memory_runs_the_training_command_with_and_without_the_setting(tmp_path):
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 20})
    options = toy_run_args(files, tmp_path / "unused", max_steps=3, eval_steps=3, save_steps=3, average_last=1)
    assert options[0] == "--output-dir"
    done = run_script("freed_memory.py", "--rounds", "1", "--", *options[2:])  # each run gets its own folder
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in done.stdout.splitlines() if line[:2] == "| "}
    assert {"glibc's defaults", "freed memory kept"} <= rows.keys()
    assert all(float(rows[setting][0].split()[0]) > 0 for setting in ("glibc's defaults", "freed memory kept"))
    assert "wall time, kept / defaults: median" in done.stdout


def test_the_avx2_main_job_trains_in_float32_for_the_scaled_budget_and_refuses_without_the_emulation(tmp_path):
    """Under benchmarks/avx2_emulation.sh: float32, and a budget of 12 minutes x 143 GFLOP/s / the peak it printed;
    with torch's kernels held elsewhere (here the scalar default) it refuses to run."""
    files = write_toy_corpus(tmp_path, {"train": 200, "validation": 20})
    options = toy_run_args(files, tmp_path / "run", max_steps=3, eval_steps=3, save_steps=3, average_last=1)
    assert options[0] == "--output-dir"
    script = ["bash", str(BENCHMARKS / "avx2_emulation.sh"), sys.executable, str(BENCHMARKS / "avx2_main_job.py")]
    done = subprocess.run([*script, *options[:2], "--", *options[2:]], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.split("with kernels held to AVX2: ")[1]
    peak, minutes = float(printed.split(" GFLOP/s")[0]), float(printed.split("): ")[1].split(" min")[0])
    budget = 12 * 143 / peak  # within the printed roundings: the peak to 0.1 GFLOP/s, the minutes to 0.01
    assert abs(minutes - budget) <= 0.005 + budget * 0.05 / peak + 1e-9, (peak, minutes)
    assert f"--max-train-minutes {minutes:.2f}" in done.stdout
    assert json.loads((tmp_path / "run" / "final" / "training_results.json").read_text())["precision"] == "fp32"
    refused = subprocess.run(
        [sys.executable, str(BENCHMARKS / "avx2_main_job.py"), "--output-dir", str(tmp_path / "refused")],
        capture_output=True,
        text=True,
        env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
        timeout=120,
    )
    assert refused.returncode != 0 and "run this under benchmarks/avx2_emulation.sh" in refused.stderr
