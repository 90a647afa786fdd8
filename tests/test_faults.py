"""Faults during training: a run killed hard resumes to the same result, checkpoints are never half-written,
damaged checkpoints are refused, and a data-parallel job loses a process without hanging."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vanilla_training.checkpoints import CHECKSUMS, STAGING, CorruptCheckpointError, verify_checkpoint

from helpers import free_port, toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow

RUN = {"max_tokens": 256, "max_steps": 40, "warmup_steps": 10, "lr_scale": 0.3, "save_steps": 10, "average_last": 2,
       "eval_steps": 5, "bleu_sentences": 0}  # eval_steps 5: the training loss is logged at every step  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return write_toy_corpus(tmp_path_factory.mktemp("corpus"), {"train": 600, "validation": 20})


def _run_args(output: Path, corpus: dict[str, Path], **options) -> list[str]:
    return toy_run_args(corpus, output, **{**RUN, **options})


def _train(output: Path, corpus: dict[str, Path], **options) -> subprocess.Popen:
    command = [sys.executable, "-m", "vanilla_training.cli.train", *_run_args(output, corpus, **options)]
    return subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None, f"the run ended before {path.name} appeared: {process.stderr.read()[-2000:]}"
        assert time.time() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


def _finish(process: subprocess.Popen, timeout: float = 300) -> None:
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-3000:]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, corpus) -> Path:
    """The run folder of the run that the interrupted ones must reproduce, trained without interruption."""
    run = tmp_path_factory.mktemp("straight") / "run"
    _finish(_train(run, corpus))
    return run


def _assert_same_result(straight: Path, resumed: Path) -> None:
    """The same final weights and the same training loss at every step."""
    expected, got = (load_file(run / "final" / "model.safetensors") for run in (straight, resumed))
    for name, tensor in expected.items():
        assert torch.allclose(tensor, got[name], atol=1e-6), name

    def losses(run: Path) -> dict[int, float]:
        history = json.loads((run / "final" / "training_results.json").read_text())["log_history"]
        return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}

    assert len(losses(straight)) == 40
    assert losses(resumed) == pytest.approx(losses(straight), rel=1e-5)


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_result(tmp_path, corpus, straight):
    interrupted = tmp_path / "interrupted"
    process = _train(interrupted, corpus)
    _wait_for(interrupted / "checkpoint-20", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (interrupted / "final").exists(), "the run finished before it could be killed"
    for checkpoint in interrupted.glob("checkpoint-*"):
        verify_checkpoint(checkpoint)  # every checkpoint in place is complete
    _finish(_train(interrupted, corpus, resume_from_checkpoint="last"))
    _assert_same_result(straight, interrupted)


# A training run that dies (SIGKILL) half-way through writing the optimizer state of checkpoint-20, its weights
# and configuration already written: the moment a kill can catch a checkpoint half-written.
KILLED_WHILE_SAVING = """
import io, os, signal, sys
import torch
save = torch.save
def save_and_die_half_way(obj, path, *args, **kwargs):
    if str(path).endswith(os.path.join("checkpoint-20", "optimizer.pt")):
        buffer = io.BytesIO()
        save(obj, buffer, *args, **kwargs)
        with open(path, "wb") as file:
            file.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return save(obj, path, *args, **kwargs)
torch.save = save_and_die_half_way
from vanilla_training.cli.train import main
main(sys.argv[1:])
"""


def test_a_run_killed_while_writing_a_checkpoint_leaves_none_half_written_and_resumes(tmp_path, corpus, straight):
    run = tmp_path / "run"
    command = [sys.executable, "-c", KILLED_WHILE_SAVING, *_run_args(run, corpus)]
    killed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert sorted(path.name for path in run.glob("checkpoint-*")) == ["checkpoint-10"]  # not checkpoint-20
    partial = sorted(path.name for path in (run / STAGING / "checkpoint-20").iterdir())  # where it was written
    assert "model.safetensors" in partial and "optimizer.pt" in partial and "trainer_state.json" not in partial
    verify_checkpoint(run / "checkpoint-10")
    (run / STAGING / "checkpoint-20" / "rng_state_7.pth").write_bytes(b"of another run")  # e.g. of more processes
    _finish(_train(run, corpus, resume_from_checkpoint="last", keep_checkpoints=True))
    _assert_same_result(straight, run)
    for checkpoint in run.glob("checkpoint-*"):
        verify_checkpoint(checkpoint)
    assert not (run / "checkpoint-20" / "rng_state_7.pth").exists()  # the killed save's files were not reused
    assert not list((run / STAGING).iterdir())


def test_damaged_checkpoints_are_refused_by_name(tmp_path, corpus):
    run = tmp_path / "run"
    _finish(_train(run, corpus, max_steps=10, save_steps=5))
    checkpoint = run / "checkpoint-10"
    verify_checkpoint(checkpoint)
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a tensor: safetensors itself would load it silently
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="model.safetensors is corrupted"):
        verify_checkpoint(checkpoint)
    weights.write_bytes(bytes(data[: len(data) // 3]))
    with pytest.raises(CorruptCheckpointError, match="model.safetensors is truncated"):
        verify_checkpoint(checkpoint)
    (run / "checkpoint-5" / CHECKSUMS).unlink()
    with pytest.raises(CorruptCheckpointError, match="no checksums.json"):
        verify_checkpoint(run / "checkpoint-5")
    resume = [sys.executable, "-m", "vanilla_training.cli.train"]
    resume += _run_args(run, corpus, resume_from_checkpoint=checkpoint)
    done = subprocess.run(resume, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "CorruptCheckpointError" in done.stderr and "is truncated" in done.stderr


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def test_a_data_parallel_job_losing_a_process_stops_with_an_error_and_resumes(tmp_path, corpus):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), "-m", "vanilla_training.cli.train", *_run_args(run, corpus)]  # fmt: skip
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(run / "checkpoint-10", process)
    workers = _children(process.pid)
    assert len(workers) == 2, workers
    os.kill(workers[1], signal.SIGKILL)
    started = time.time()
    _, stderr = process.communicate(timeout=180)  # bounded: a hang fails the test here
    print(f"the job stopped {time.time() - started:.1f} s after a worker was killed")
    assert process.returncode != 0
    assert "SIGKILL" in stderr or "Signal 9" in stderr or "exitcode  : -9" in stderr, stderr[-3000:]
    assert not (run / "final").exists()
    options = {"gradient_accumulation_steps": 2, "resume_from_checkpoint": "last"}
    resume = [sys.executable, "-m", "vanilla_training.cli.train", *_run_args(run, corpus, **options)]
    done = subprocess.run(resume, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "final" / "model.safetensors").is_file()
