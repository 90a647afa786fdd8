"""benchmarks/gpu_check.py in its tiny mode on the CPU (bf16 autocast works there; the data-parallel step runs two
CPU processes with gloo), so that the GPU check keeps working where no GPU is: tables, JSON and sane values."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_gpu_check(*options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[dict, str]:
    """The JSON and the printed report of one `--tiny` run."""
    path = tmp_path_factory.mktemp("gpu_check") / "gpu_check.json"
    done = run_gpu_check("--tiny", "--json", str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(path.read_text()), done.stdout


def test_bf16_training_and_generation_of_ours_and_marian_are_measured(tiny_run):
    payload, _ = tiny_run
    assert payload["peak"]["dtype"] == "bfloat16" and payload["peak"]["flops"] > 0
    groups = [(group["kind"], group.get("decoding"), group.get("cache")) for group in payload["summary"]]
    assert groups == [
        ("train", None, None),
        ("generate", "beam-4", "dynamic"),
        ("generate", "greedy", "dynamic"),
        ("generate", "greedy", "static+compile"),
    ]
    for group in payload["summary"]:
        assert list(group["systems"]) == ["ours", "MarianMTModel"]
        for stats in group["systems"].values():
            assert "error" not in stats, stats
            speed = stats["tokens_per_second"]
            assert 0 < speed["min"] <= speed["median"] <= speed["max"]
            assert stats["flops_per_second"]["median"] > 0 and stats["peak_mib"]["median"] > 0
    measurements = [result for result in payload["results"] if result["kind"] in ("train", "generate")]
    assert len(measurements) == 8
    compiled = [result["compiled_forward"] for result in measurements if result.get("cache") == "static+compile"]
    assert compiled == [True, True]  # transformers' compiled forward ran, for ours and for Marian
    assert all(result["dtype"] == "bfloat16" and result["device"] == "cpu" for result in measurements)


def test_sdpa_matches_eager_in_bf16_and_bf16_is_really_used(tiny_run):
    payload, _ = tiny_run
    check = payload["checks"]["tiny"]
    assert max(check["max_abs_diff"].values()) < 1e-4 * max(1.0, check["max_abs_logit"])  # fp32: same function
    for errors in check["bf16"].values():
        assert errors["sdpa_vs_eager"] < 0.02
        # Above fp32 rounding: the forward really ran in bf16; within bf16's precision of the fp32 logits.
        assert 1e-5 < errors["eager_vs_fp32"] < 0.05 and 1e-5 < errors["sdpa_vs_fp32"] < 0.05


def test_data_parallel_step_runs_in_two_processes_with_identical_weights(tiny_run):
    payload, _ = tiny_run
    ddp = payload["ddp"]
    assert "error" not in ddp and "skipped" not in ddp, ddp.get("error") or ddp.get("skipped")
    assert (ddp["backend"], ddp["processes"], ddp["size"]) == ("gloo", 2, "tiny")
    assert ddp["max_weight_difference"] == 0
    assert ddp["tokens_per_second"]["median"] > 0
    assert all(math.isfinite(loss) for loss in ddp["losses"])


def test_report_prints_every_table_and_is_saved(tiny_run):
    payload, stdout = tiny_run
    assert payload["report"] in stdout
    for text in (
        "| size | system | target tok/s (median) | min | max | step ms | peak RSS MiB |",
        "| size | decoding | cache | system | new tok/s (median) | min | max | s per call |",
        "| tiny | ours / MarianMTModel |",
        "| tiny | greedy | static+compile | ours / MarianMTModel |",
        "| size | system | greedy static+compile / dynamic tokens/s |",
        "| size | system | bf16 sdpa vs bf16 eager | bf16 eager vs fp32 | bf16 sdpa vs fp32 |",
        "Data-parallel training step, 2 processes",
        "Nominal bf16 peak: none (not a GPU)",
        "bf16 matmul peak",
    ):
        assert text in stdout, text


@pytest.mark.parametrize(
    "options, message",
    [
        (["--tiny", "--sizes", "huge"], "unknown size(s) ['huge']"),
        (["--tiny", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_options_are_refused_by_name(options, message):
    done = run_gpu_check(*options)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_says_what_to_run_instead():
    done = run_gpu_check("--device", "cuda")
    assert done.returncode == 2
    assert "no CUDA GPU is available here; use --tiny" in done.stderr


def test_nominal_peak_is_found_by_the_most_specific_name(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from gpu_check import nominal_peak

    assert nominal_peak("NVIDIA H200")[0] == 989e12
    assert nominal_peak("NVIDIA H100 PCIe")[0] == 756e12
    assert nominal_peak("NVIDIA H100 80GB HBM3")[0] == 989e12
    unknown, sentence = nominal_peak("NVIDIA GeForce GTX 1080")
    assert unknown is None and "unknown" in sentence
