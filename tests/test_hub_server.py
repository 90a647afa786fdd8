"""The FakeHub server against the real huggingface_hub / transformers clients, each run in a subprocess.

The client settings (``HF_ENDPOINT``, a dummy ``HF_TOKEN``, a temporary ``HF_HOME``) must be in the
environment before ``huggingface_hub`` is imported, hence a fresh Python process per client.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from hub_server import FakeHub

SERVER_SCRIPT = Path(__file__).with_name("hub_server.py")

ROUND_TRIP = """
import json, sys
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
)

src, repo = sys.argv[1], "user/round-trip"
api = HfApi()
out = {"url": api.create_repo(repo), "url_again": api.create_repo(repo, exist_ok=True)}
try:
    api.create_repo(repo)
except HfHubHTTPError as err:
    out["create_again_status"] = err.response.status_code
out["commit"] = api.upload_folder(repo_id=repo, folder_path=src).oid
out["unchanged_upload"] = api.upload_folder(repo_id=repo, folder_path=src).oid
out["files"] = api.list_repo_files(repo)
out["top_level"] = sorted((e.path, type(e).__name__) for e in api.list_repo_tree(repo))
out["in_folder"] = [e.path for e in api.list_repo_tree(repo, path_in_repo="weights")]
out["download"] = hf_hub_download(repo, "weights/blob.bin")
out["snapshot"] = snapshot_download(repo)
api.delete_file("empty.txt", repo)
out["last_commit"] = api.delete_folder("weights", repo).oid
out["files_after_delete"] = api.list_repo_files(repo)
out["info_sha"] = api.model_info(repo).sha
try:
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, parent_commit=out["commit"])
except HfHubHTTPError as err:
    out["stale_parent_status"] = err.response.status_code
api.create_repo("user/secret", private=True)
out["private"] = api.model_info("user/secret").private
for name, call, error in [
    ("missing_file", lambda: hf_hub_download(repo, "missing.txt"), EntryNotFoundError),
    ("missing_repo", lambda: hf_hub_download("user/nope", "README.md"), RepositoryNotFoundError),
    ("missing_revision", lambda: hf_hub_download(repo, "README.md", revision="v9"), RevisionNotFoundError),
]:
    try:
        call()
    except error as err:
        out[name] = type(err).__name__
print(json.dumps(out))
"""

MARIAN = """
import json, os, sys
import torch
from transformers import MarianConfig, MarianMTModel

action, repo = sys.argv[1], "user/tiny-marian"
if action == "push":
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
    )
    model = MarianMTModel(config).eval()
    commit = model.push_to_hub(repo).oid
else:
    model = MarianMTModel.from_pretrained(repo)
    commit = None
with torch.no_grad():
    logits = model(input_ids=torch.tensor([[5, 7, 9, 1]]), decoder_input_ids=torch.tensor([[0, 5, 7]])).logits
print(json.dumps({"commit": commit, "logits": logits.flatten().tolist()}), flush=True)
os._exit(0)  # skip torch's interpreter teardown (~2 s); everything is written and flushed
"""


def run_client(hub: FakeHub, hf_home: Path, script: str, *args: str) -> dict:
    """Run ``script`` in a fresh Python pointed at ``hub``; return the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=hub.env(hf_home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def calls(hub: FakeHub) -> list[tuple[str, str, int]]:
    """The request log as (method, path, status)."""
    return [(r["method"], r["path"], r["status"]) for r in hub.requests]


def test_hf_hub_client_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "weights").mkdir(parents=True)
    files = {
        "README.md": b"---\nlicense: mit\n---\n# Round trip\n",
        "config.json": b'{"d_model": 16}\n',
        "weights/blob.bin": bytes(range(256)) * 41,
        "empty.txt": b"",
    }
    for name, data in files.items():
        (src / name).write_bytes(data)

    with FakeHub(tmp_path / "hub") as hub:
        out = run_client(hub, tmp_path / "hf_home", ROUND_TRIP, str(src))
        after_upload = hub.repo_files("user/round-trip", out["commit"])
        after_delete = hub.repo_files("user/round-trip")
        log = calls(hub)
        commits = [r for r in hub.requests if r["path"] == "/api/models/user/round-trip/commit/main"]

    assert out["url"] == out["url_again"] == f"{hub.endpoint}/user/round-trip"
    assert out["create_again_status"] == 409
    assert out["unchanged_upload"] == out["commit"]  # preupload's oids let the client skip unchanged files
    assert sorted(out["files"]) == sorted([".gitattributes", *files])
    assert out["top_level"] == [
        [".gitattributes", "RepoFile"],
        ["README.md", "RepoFile"],
        ["config.json", "RepoFile"],
        ["empty.txt", "RepoFile"],
        ["weights", "RepoFolder"],
    ]
    assert out["in_folder"] == ["weights/blob.bin"]
    assert Path(out["download"]).read_bytes() == files["weights/blob.bin"]
    for name, data in files.items():
        assert (Path(out["snapshot"]) / name).read_bytes() == data
        assert after_upload[name] == data
    assert sorted(out["files_after_delete"]) == sorted(after_delete) == [".gitattributes", "README.md", "config.json"]
    assert out["info_sha"] == out["last_commit"]
    assert out["stale_parent_status"] == 412
    assert out["private"] is True
    assert out["missing_file"] == "RemoteEntryNotFoundError"
    assert out["missing_repo"] == "RepositoryNotFoundError"
    assert out["missing_revision"] == "RevisionNotFoundError"

    assert log.count(("POST", "/api/repos/create", 200)) == 2
    assert log.count(("POST", "/api/repos/create", 409)) == 2
    assert ("POST", "/api/validate-yaml", 200) in log
    assert ("POST", "/api/models/user/round-trip/preupload/main", 200) in log
    assert [(c["status"], c.get("added"), c.get("deleted")) for c in commits] == [
        (200, sorted(files), []),
        (200, [], ["empty.txt"]),
        (200, [], ["weights/"]),
        (412, None, None),
    ]
    assert ("HEAD", "/user/round-trip/resolve/main/missing.txt", 404) in log
    assert ("HEAD", "/user/nope/resolve/main/README.md", 404) in log
    assert ("HEAD", "/user/round-trip/resolve/v9/README.md", 404) in log
    assert all(status < 500 for _, _, status in log), log


@pytest.mark.slow
def test_marian_push_to_hub_and_from_pretrained(tmp_path: Path) -> None:
    with FakeHub(tmp_path / "hub") as hub:
        pushed = run_client(hub, tmp_path / "home_push", MARIAN, "push")
        pushed_files = hub.repo_files("user/tiny-marian")
        n_push_requests = len(hub.requests)
        loaded = run_client(hub, tmp_path / "home_load", MARIAN, "load")
        push_log, load_log = calls(hub)[:n_push_requests], calls(hub)[n_push_requests:]
        commits = [r for r in hub.requests if r["path"].endswith("/commit/main")]

    assert loaded["logits"] == pushed["logits"]
    assert len(pushed["logits"]) == 3 * 50

    expected = ["README.md", "config.json", "generation_config.json", "model.safetensors"]
    assert [(c["status"], c["added"]) for c in commits] == [(200, expected)]
    assert sorted(pushed_files) == sorted([".gitattributes", *expected])
    assert ("POST", "/api/repos/create", 200) in push_log
    # the model card is loaded first; a missing README.md must be an EntryNotFound 404 to get the template
    assert ("HEAD", "/user/tiny-marian/resolve/main/README.md", 404) in push_log

    # from_pretrained resolves main to a commit once, then reads every file at that commit
    sha = pushed["commit"]
    assert load_log[0] == ("GET", "/api/models/user/tiny-marian/revision/main", 200)
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        assert ("GET", f"/user/tiny-marian/resolve/{sha}/{name}", 200) in load_log
    assert all(status == 200 for _, _, status in load_log), load_log


def test_command_line_server(tmp_path: Path) -> None:
    # Started with SIGINT ignored, as by a non-interactive shell's `&`: the server must still stop on SIGINT.
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--root", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        endpoint = proc.stdout.readline().strip()
        with urllib.request.urlopen(f"{endpoint}/api/whoami-v2", timeout=10) as response:
            assert json.load(response)["name"] == "user"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    log = json.loads((tmp_path / "requests.json").read_text())
    assert log == [{"method": "GET", "path": "/api/whoami-v2", "query": "", "status": 200}]
