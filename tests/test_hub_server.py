"""The FakeHub server against the real huggingface_hub client, run in a subprocess: the protocol that the tests of
`vanilla-push` and of the converter's Hub download rely on (tests/test_push.py, tests/test_convert_marian*.py).

The client settings (``HF_ENDPOINT``, a dummy ``HF_TOKEN``, a temporary ``HF_HOME``) must be in the
environment before ``huggingface_hub`` is imported, hence a fresh Python process per client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from hub_server import FakeHub

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
