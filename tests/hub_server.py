"""A small Hugging Face Hub-compatible HTTP server for offline tests (standard library only).

It speaks the part of the Hub HTTP protocol that ``huggingface_hub`` 2.4 and ``transformers`` 5.24 use to
create a model repo, push to it (``create_commit``, ``upload_folder``, ``push_to_hub``) and read it back
(``hf_hub_download``, ``snapshot_download``, ``from_pretrained``, ``list_repo_files``, ``model_info``). Point
a client at it with ``HF_ENDPOINT`` (set before ``huggingface_hub`` is imported, so use a subprocess; see
``FakeHub.env``).

Storage is a tiny content-addressed git model under ``root``: ``models/{ns}/{name}/repo.json`` (visibility and
branch heads), ``commits/{sha}.json`` (message, parent, path -> blob oid) and ``blobs/{oid}`` (the bytes; the
oid is the git blob sha1, as on the Hub). A new repo gets an initial commit holding ``.gitattributes``, like
on the Hub. Every request is appended to ``FakeHub.requests`` and to ``root/requests.json``.

Limits: model repos only; one branch (``main``), no branch/tag creation, no pull requests; every file is
uploaded as a "regular" (base64 in the commit) file: no LFS or Xet transfer; no authentication (any token is
accepted, ``private`` is only stored); no ``.gitignore`` handling, no pagination, no YAML validation.
It checks our code and the real client against our model of the protocol, not against the real Hub.

Usage: ``with FakeHub(tmp_path) as hub: ...`` in a test, or ``python tests/hub_server.py --root DIR``
to serve in the foreground (prints the endpoint).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

USER = "user"
BRANCH = "main"
GITATTRIBUTES = b"".join(
    b"%s filter=lfs diff=lfs merge=lfs -text\n" % pattern
    for pattern in (b"*.bin", b"*.h5", b"*.model", b"*.onnx", b"*.pt", b"*.pth", b"*.safetensors", b"*.zip")
)
REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
REPO = r"(?P<repo>[^/]+/[^/]+)"
REV = r"(?P<rev>[^/]+)"


class HubError(Exception):
    """An error answered to the client as JSON ``{"error": message}``, with the Hub's ``X-Error-Code``."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def git_blob_oid(data: bytes) -> str:
    """The git blob sha1 of ``data`` (the Hub's ``oid``/``ETag`` for a non-LFS file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class RepoStore:
    """Model repos stored under ``root/models``; all methods are thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.RLock()

    def _dir(self, repo_id: str) -> Path:
        parts = repo_id.split("/")
        if len(parts) != 2 or not all(REPO_PART.fullmatch(part) for part in parts):
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return self.root / "models" / parts[0] / parts[1]

    def _meta(self, repo_id: str) -> dict[str, Any]:
        meta_path = self._dir(repo_id) / "repo.json"
        if not meta_path.exists():
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return json.loads(meta_path.read_text())

    def _write_json(self, path: Path, data: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    def create(self, repo_id: str, private: bool) -> bool:
        """Create ``repo_id`` with an initial commit; False if it already exists."""
        with self._lock:
            repo_dir = self._dir(repo_id)
            if (repo_dir / "repo.json").exists():
                return False
            self._write_json(repo_dir / "repo.json", {"private": private, "createdAt": _now(), "refs": {BRANCH: None}})
            self.commit(repo_id, BRANCH, {"summary": "initial commit"}, {".gitattributes": GITATTRIBUTES}, [])
            return True

    def info(self, repo_id: str) -> dict[str, Any]:
        """The stored repo metadata: ``private``, ``createdAt`` and ``refs`` (branch -> head sha)."""
        with self._lock:
            return self._meta(repo_id)

    def resolve(self, repo_id: str, revision: str) -> str:
        """The commit sha of a branch name or a full commit sha of ``repo_id``."""
        with self._lock:
            refs = self._meta(repo_id)["refs"]
            if revision in refs:
                return refs[revision]
            if re.fullmatch(r"[0-9a-f]{40}", revision) and self._commit_path(repo_id, revision).exists():
                return revision
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _commit_path(self, repo_id: str, sha: str) -> Path:
        return self._dir(repo_id) / "commits" / f"{sha}.json"

    def commit_info(self, repo_id: str, sha: str) -> dict[str, Any]:
        """A stored commit: ``summary``, ``description``, ``parent``, ``date``, ``files`` (path -> info)."""
        with self._lock:
            return json.loads(self._commit_path(repo_id, sha).read_text())

    def files(self, repo_id: str, sha: str) -> dict[str, dict[str, Any]]:
        """The files of commit ``sha``: path -> ``{"oid", "size"}``."""
        return self.commit_info(repo_id, sha)["files"]

    def blob(self, repo_id: str, oid: str) -> bytes:
        """The bytes of blob ``oid``."""
        return (self._dir(repo_id) / "blobs" / oid).read_bytes()

    def commit(
        self,
        repo_id: str,
        branch: str,
        header: dict[str, Any],
        added: dict[str, bytes],
        deleted: list[str],
    ) -> str:
        """Commit ``added`` files and ``deleted`` paths (a path ending in "/" is a folder) onto ``branch``."""
        with self._lock:
            meta = self._meta(repo_id)
            if branch not in meta["refs"]:
                raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            parent = meta["refs"][branch]
            if header.get("parentCommit") not in (None, parent):
                raise HubError(412, "The branch was updated since you opened this page. Please refresh and try again.")
            files = dict(self.files(repo_id, parent)) if parent else {}
            for path in deleted:
                gone = [p for p in files if p == path or (path.endswith("/") and p.startswith(path))]
                if not gone:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                for p in gone:
                    del files[p]
            blob_dir = self._dir(repo_id) / "blobs"
            blob_dir.mkdir(parents=True, exist_ok=True)
            for path, data in added.items():
                oid = git_blob_oid(data)
                if not (blob_dir / oid).exists():  # content-addressed: never rewrite a blob being read
                    (blob_dir / oid).write_bytes(data)
                files[path] = {"oid": oid, "size": len(data)}
            record = {
                "summary": header.get("summary", ""),
                "description": header.get("description", ""),
                "parent": parent,
                "date": _now(),
                "files": files,
            }
            sha = hashlib.sha1(f"{repo_id}\0{time.time_ns()}\0{json.dumps(record)}".encode()).hexdigest()
            self._write_json(self._commit_path(repo_id, sha), record)
            meta["refs"][branch] = sha
            self._write_json(self._dir(repo_id) / "repo.json", meta)
            return sha


@dataclass
class Reply:
    """An HTTP answer; ``log`` holds extra fields for the request log entry."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    log: dict[str, Any] = field(default_factory=dict)


def json_reply(data: Any, status: int = 200, **log: Any) -> Reply:
    """A JSON ``Reply``."""
    return Reply(status, json.dumps(data).encode(), {"Content-Type": "application/json"}, log)


class _Handler(BaseHTTPRequestHandler):
    """Routes one request to a ``_route_*`` method and records it in the hub's request log."""

    server: _HubHTTPServer
    query: dict[str, str]
    body: bytes
    store: RepoStore

    # (methods, path pattern, handler `_route_{name}`); named groups are URL-unquoted into arguments
    ROUTES = (
        ("POST", "/api/repos/create", "create_repo"),
        ("POST", "/api/validate-yaml", "validate_yaml"),
        ("GET", "/api/whoami-v2", "whoami"),
        ("POST", f"/api/models/{REPO}/preupload/{REV}", "preupload"),
        ("POST", f"/api/models/{REPO}/commit/{REV}", "commit"),
        ("GET", f"/api/models/{REPO}(?:/revision/{REV})?", "model_info"),
        ("GET", f"/api/models/{REPO}/tree/{REV}(?:/(?P<path>.+))?", "tree"),
        ("GET HEAD", f"/{REPO}/resolve/{REV}/(?P<path>.+)", "resolve"),
    )

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def log_message(self, *args: Any) -> None:
        """Silence the default stderr access log (the hub keeps its own)."""

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        self.query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        self.body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.store = self.server.hub.store
        reply = json_reply({"error": f"FakeHub: no route for {self.command} {url.path}"}, 404)
        try:
            for methods, pattern, name in self.ROUTES:
                match = re.fullmatch(pattern, url.path)
                if self.command in methods.split() and match:
                    args = {key: unquote(value) for key, value in match.groupdict().items() if value is not None}
                    reply = getattr(self, f"_route_{name}")(**args)
                    break
        except HubError as err:
            headers = {"X-Error-Code": err.code} if err.code else {}
            reply = json_reply({"error": str(err)}, err.status)
            reply.headers.update({**headers, **err.headers})
        except Exception as err:  # a bug here or a request we do not model: answer it instead of hanging up
            reply = json_reply({"error": f"FakeHub internal error: {err!r}"}, 500)
        entry = {"method": self.command, "path": url.path, "query": url.query, "status": reply.status}
        # logged before answering, so a client that got its answer finds the request in the log
        self.server.hub.record({**entry, **reply.log})
        self.send_response(reply.status)
        for key, value in {**reply.headers, "Content-Length": str(len(reply.body))}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    @property
    def endpoint(self) -> str:
        return self.server.hub.endpoint

    def _json_body(self) -> dict[str, Any]:
        return json.loads(self.body or b"{}")

    def _route_create_repo(self) -> Reply:
        body = self._json_body()
        if body.get("type", "model") != "model":
            raise HubError(400, "FakeHub stores model repos only")
        repo_id = f"{body.get('organization') or USER}/{body['name']}"
        url = f"{self.endpoint}/{repo_id}"
        if not self.store.create(repo_id, private=body.get("visibility") == "private"):
            return json_reply({"error": "You already created this model repo", "url": url}, 409)
        return json_reply({"url": url, "name": repo_id})

    def _route_validate_yaml(self) -> Reply:
        return json_reply({"errors": [], "warnings": []})

    def _route_whoami(self) -> Reply:
        return json_reply(
            {
                "type": "user",
                "name": USER,
                "fullname": "FakeHub user",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "fakehub", "role": "write"}},
            }
        )

    def _route_preupload(self, repo: str, rev: str) -> Reply:
        files = self.store.files(repo, self.store.resolve(repo, rev))
        answer = []
        for item in self._json_body()["files"]:
            info = {"path": item["path"], "uploadMode": "regular", "shouldIgnore": False}
            if item["path"] in files:
                info["oid"] = files[item["path"]]["oid"]
            answer.append(info)
        return json_reply({"files": answer})

    def _route_commit(self, repo: str, rev: str) -> Reply:
        if self.query.get("create_pr"):
            raise HubError(400, "FakeHub does not support pull requests")
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        header: dict[str, Any] = {}
        added: dict[str, bytes] = {}
        deleted: list[str] = []
        for line in lines:
            key, value = line["key"], line["value"]
            if key == "header":
                header = value
            elif key == "file" and value.get("encoding") == "base64":
                added[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                deleted.append(value["path"])
            elif key == "deletedFolder":
                deleted.append(value["path"].rstrip("/") + "/")
            else:
                raise HubError(400, f"FakeHub does not support commit operation {key!r} (no LFS/Xet)")
        sha = self.store.commit(repo, rev, header, added, deleted)
        return json_reply(
            {"success": True, "commitOid": sha, "commitUrl": f"{self.endpoint}/{repo}/commit/{sha}"},
            added=sorted(added),
            deleted=deleted,
        )

    def _route_model_info(self, repo: str, rev: str = BRANCH) -> Reply:
        sha = self.store.resolve(repo, rev)
        meta, commit = self.store.info(repo), self.store.commit_info(repo, sha)
        blobs = self.query.get("blobs") in ("1", "True", "true")
        siblings = [
            {"rfilename": path, **({"size": f["size"], "blobId": f["oid"]} if blobs else {})}
            for path, f in sorted(commit["files"].items())
        ]
        return json_reply(
            {
                "id": repo,
                "modelId": repo,
                "author": repo.split("/")[0],
                "sha": sha,
                "private": meta["private"],
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "createdAt": meta["createdAt"],
                "lastModified": commit["date"],
                "siblings": siblings,
            }
        )

    def _route_tree(self, repo: str, rev: str, path: str = "") -> Reply:
        files = self.store.files(repo, self.store.resolve(repo, rev))
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        recursive = self.query.get("recursive") in ("1", "True", "true")
        entries: dict[str, dict[str, Any]] = {}
        for file_path, info in files.items():
            if not file_path.startswith(prefix):
                continue
            parts = file_path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                folder = prefix + "/".join(parts[:depth])
                listing = sorted((p, f["oid"]) for p, f in files.items() if p.startswith(f"{folder}/"))
                # like a git tree id, the folder oid changes with the content
                oid = hashlib.sha1(json.dumps(listing).encode()).hexdigest()
                entries[folder] = {"type": "directory", "oid": oid, "size": 0, "path": folder}
                if not recursive:
                    break
            if recursive or len(parts) == 1:
                entries[file_path] = {
                    "type": "file",
                    "oid": info["oid"],
                    "size": info["size"],
                    "path": file_path,
                }
        if prefix and not entries:
            raise HubError(404, f"{path} does not exist on {rev}", "EntryNotFound")
        return json_reply([entries[key] for key in sorted(entries)])

    def _route_resolve(self, repo: str, rev: str, path: str) -> Reply:
        sha = self.store.resolve(repo, rev)
        info = self.store.files(repo, sha).get(path)
        if info is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": f'"{info["oid"]}"',
            "X-Repo-Commit": sha,
        }
        return Reply(200, self.store.blob(repo, info["oid"]), headers)


class _HubHTTPServer(ThreadingHTTPServer):
    def __init__(self, port: int, hub: FakeHub) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.hub = hub


class FakeHub:
    """A Hub-compatible server on 127.0.0.1, storing repos under ``root``; use it as a context manager.

    ``endpoint`` is the value for ``HF_ENDPOINT``; ``env(hf_home)`` is an environment for a client subprocess;
    ``requests`` is the request log (dicts with ``method``, ``path``, ``query``, ``status``, and for a commit
    ``added``/``deleted`` paths); ``repo_files(repo_id)`` returns a repo's files as bytes.
    """

    def __init__(self, root: str | Path, port: int = 0) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = RepoStore(self.root)
        self._port = port
        self._log: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()

    def __enter__(self) -> FakeHub:
        self._server = _HubHTTPServer(self._port, self)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def record(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` to the request log and rewrite ``root/requests.json``."""
        with self._log_lock:
            self._log.append(entry)
            tmp = self.root / "requests.json.tmp"
            tmp.write_text(json.dumps(self._log, indent=1))
            tmp.replace(self.root / "requests.json")

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of the request log, oldest first (also in ``root/requests.json``)."""
        with self._log_lock:
            return [dict(entry) for entry in self._log]

    def repo_files(self, repo_id: str, revision: str = BRANCH) -> dict[str, bytes]:
        """The files of ``repo_id`` at ``revision``: path -> bytes."""
        files = self.store.files(repo_id, self.store.resolve(repo_id, revision))
        return {path: self.store.blob(repo_id, info["oid"]) for path, info in sorted(files.items())}

    def env(self, hf_home: str | Path) -> dict[str, str]:
        """``os.environ`` without its ``HF_*`` settings, plus what a client subprocess needs to use this hub.

        They must be set before ``huggingface_hub`` is imported (read at import). Cache: ``hf_home``.
        """
        return {
            **{key: val for key, val in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE_"))},
            "HF_ENDPOINT": self.endpoint,
            "HF_TOKEN": "hf_fakehub_dummy_token",
            "HF_HOME": str(hf_home),
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }


def main() -> None:
    """Serve a FakeHub in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, type=Path, help="folder holding the repos and requests.json")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args()
    # Stop on SIGINT or SIGTERM even where SIGINT arrives ignored (a process started in the background by a
    # non-interactive shell inherits SIGINT as ignored, and Python then installs no KeyboardInterrupt handler).
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    with FakeHub(args.root, args.port) as hub:
        print(hub.endpoint, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
