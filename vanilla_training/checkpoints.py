"""Checkpoints that are either complete or absent, and verified before a run resumes from them.

A checkpoint is written under `<run>/.staging/`, every file's SHA-256 is recorded in `checksums.json`, and only
then is the folder renamed to `<run>/checkpoint-<step>` (a rename within one file system is atomic). A run killed
while saving therefore leaves no half-written checkpoint, and a checkpoint damaged later (truncated, bit flips) is
refused with an error that names the file, instead of resuming from garbage.
"""

import json
import os
import shutil
from pathlib import Path

from transformers.trainer_utils import sort_checkpoints

from .corpus import file_sha256

CHECKSUMS = "checksums.json"
STAGING = ".staging"


class CorruptCheckpointError(ValueError):
    """A checkpoint folder whose files do not match the checksums recorded when it was saved."""


def write_checksums(folder: Path) -> None:
    """Records the SHA-256 and size of every file in `folder` (flushed to disk) in `folder/checksums.json`."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != CHECKSUMS)
    record = {p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size} for p in files}
    path = folder / CHECKSUMS
    with path.open("w") as file:
        json.dump(record, file, indent=1)
        file.flush()
        os.fsync(file.fileno())


def commit(staged: Path, final: Path) -> None:
    """Moves a fully written, checksummed checkpoint into place in one rename."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)


def verify_checkpoint(folder: str | Path) -> None:
    """Raises CorruptCheckpointError naming the problem unless every recorded file is present and intact."""
    folder = Path(folder)
    if not (folder / CHECKSUMS).is_file():
        raise CorruptCheckpointError(f"{folder} has no {CHECKSUMS}: it was not completely saved by this trainer")
    for name, expected in json.loads((folder / CHECKSUMS).read_text()).items():
        path = folder / name
        if not path.is_file():
            raise CorruptCheckpointError(f"{folder} is missing {name}")
        if path.stat().st_size != expected["bytes"]:
            raise CorruptCheckpointError(
                f"{path} is truncated or grown: {path.stat().st_size} bytes, {expected['bytes']} when saved"
            )
        if file_sha256(path) != expected["sha256"]:
            raise CorruptCheckpointError(f"{path} is corrupted: its SHA-256 differs from the one recorded when saved")


def step_of(checkpoint: str | Path) -> int:
    """The step of a `checkpoint-<step>` folder."""
    return int(Path(checkpoint).name.rsplit("-", 1)[1])


def window(run_dir: str | Path, count: int, last_step: int | None = None) -> list[str]:
    """The last `count` checkpoints of `run_dir` (oldest first) at or before `last_step` (at any step if None)."""
    found = [c for c in sort_checkpoints(str(run_dir)) if last_step is None or step_of(c) <= last_step]
    return found[-count:]


def prune(run_dir: str | Path, count: int, best_step: int | None = None) -> None:
    """Deletes every checkpoint of `run_dir` except the last `count` (to resume and average from) and the `count`
    ending at `best_step` (to average around the best evaluation). transformers' `rotate_checkpoints` protects the
    one best checkpoint only."""
    keep = set(window(run_dir, count)) | (set(window(run_dir, count, best_step)) if best_step else set())
    for checkpoint in sort_checkpoints(str(run_dir)):
        if checkpoint not in keep:
            shutil.rmtree(checkpoint)
