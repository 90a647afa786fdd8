"""vanilla_training/allocator.py: with glibc's malloc set to keep freed memory, a process that allocates and frees the
same tensors step after step stops paying a page fault for every page of them; `vanilla-train` sets it."""

import platform
import subprocess
import sys

import pytest

import vanilla_training.allocator as allocator
from vanilla_training.cli import train as train_command

# Twenty tensors of 4 to 20 MB (240 MB), made and freed five times, as a training step makes and frees its activations;
# prints the page faults of the five steps after a first one.
STEPS = """
import resource, sys, torch
from vanilla_training.allocator import reuse_freed_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
def step():
    tensors = [torch.ones(n << 20) for n in (1, 3, 2, 5, 4) * 4]
    del tensors
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_OF_ONE_STEP = 15 * (1 << 20) * 4 * 4 // 4096  # 15 Mi floats a round, 4 rounds, 4 bytes each, 4 KiB pages

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's malloc's")


def page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@glibc
def test_freed_tensors_are_reused_without_new_page_faults():
    default, reused = page_faults("default"), page_faults("reuse")
    assert default > PAGES_OF_ONE_STEP  # glibc's defaults hand the memory back and fault it in again, step after step
    assert reused < PAGES_OF_ONE_STEP / 2  # five steps cost less than half of one step's pages


def test_the_training_command_sets_it_before_training(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(allocator, "reuse_freed_memory", lambda: calls.append("allocator"))
    monkeypatch.setattr(train_command, "train", lambda args, factory: calls.append("train"))
    train_command.main(["--preset", "demo", "--output-dir", str(tmp_path)])
    assert calls == ["allocator", "train"]
