"""`convert_marian_folder` checks the configuration before it reads a weight, and for a Hub id before it downloads
one: a refused configuration is the error even where the weights are damaged or absent."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from transformers import MarianConfig, MarianMTModel

from modeling_vanilla.convert_marian import convert_marian_folder

from helpers import OPUS_MT
from hub_server import FakeHub

REFUSED = "cannot convert this Marian checkpoint exactly: normalize_before=True marks a variant"


def refused_marian_folder(folder: Path, weights: bytes | None) -> Path:
    """A tiny Marian folder whose config.json marks a pre-LN variant, with `weights` as its model.safetensors
    (None: no weights file at all)."""
    MarianMTModel(MarianConfig(**OPUS_MT)).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "normalize_before": True}))
    (folder / "model.safetensors").unlink()
    if weights is not None:
        (folder / "model.safetensors").write_bytes(weights)
    return folder


@pytest.mark.parametrize("weights", [b"\x00" * 64, None], ids=["corrupt weights", "no weights"])
def test_a_refused_config_is_the_error_whatever_the_weights(tmp_path, weights):
    folder = refused_marian_folder(tmp_path / "marian", weights)
    with pytest.raises(ValueError, match=REFUSED):
        convert_marian_folder(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


HUB_SCRIPT = """
import sys
from huggingface_hub import HfApi
from modeling_vanilla.convert_marian import convert_marian_folder
HfApi().create_repo("user/pre-ln-opus-mt")
HfApi().upload_folder(repo_id="user/pre-ln-opus-mt", folder_path=sys.argv[1])
try:
    convert_marian_folder("user/pre-ln-opus-mt", sys.argv[2])
except ValueError as error:
    print(f"refused: {error}", flush=True)
"""


@pytest.mark.slow
def test_a_hub_checkpoint_with_a_refused_config_is_refused_before_its_weights_are_downloaded(tmp_path):
    """`python -m modeling_vanilla.convert_marian user/repo DST` on a loopback Hub: config.json alone is fetched."""
    folder = refused_marian_folder(tmp_path / "marian", b"\x00" * 4096)
    with FakeHub(tmp_path / "hub") as hub:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(HUB_SCRIPT), str(folder), str(tmp_path / "out")],
            env=hub.env(tmp_path / "hf_home"),
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=300,
        )
        downloaded = [r["path"] for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"refused: {REFUSED}" in done.stdout
    assert [path.rsplit("/", 1)[1] for path in downloaded] == ["config.json"]
    assert not (tmp_path / "out").exists()
