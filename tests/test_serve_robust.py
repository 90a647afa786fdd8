"""Issue 61's server findings, each over stand-in models (no training: seconds a test): the OpenAPI document and
the docstrings naming every endpoint and status, Chinese scripts, the file store's folder and cap, suggestions kept
in SQLite, raw UTF-8 form bodies, `/detect`'s limit, documents checked and parsed off the event loop, and source
`auto` detected once per request among the served languages."""

import time

from test_serve import InProcessServer
from test_serve_endpoints import as_json, call, multipart
from test_serve_files import empty_paragraphs_docx
from test_serve_hostile import StandInBackend, probe_health

import vanilla_training.cli.serve as serve_command
from vanilla_training.serving import app as app_module
from vanilla_training.serving import files
from vanilla_training.serving.app import create_app
from vanilla_training.serving.settings import ServeSettings


def test_the_spec_lists_the_rate_limit_and_the_metrics_token():
    """/spec (the OpenAPI document) names 429 wherever the rate limit answers it and 401 for /metrics."""
    spec = create_app([StandInBackend("en", "de")], ServeSettings()).openapi()
    for path in ("/translate", "/detect", "/translate_file"):
        assert "429" in spec["paths"][path]["post"]["responses"], path
    assert "401" in spec["paths"]["/metrics"]["get"]["responses"]
    assert "404" in spec["paths"]["/download_file/{filename}"]["get"]["responses"]


def test_the_docstrings_name_every_endpoint():
    paths = list(create_app([StandInBackend("en", "de")], ServeSettings()).openapi()["paths"])
    assert len(paths) == 10
    for document in (app_module.__doc__, serve_command.__doc__):
        missing = [path for path in paths if path not in document.replace("\n", " ")]
        assert missing == []


def upload(url: str, filename: str, data: bytes, source: str = "en", target: str = "de") -> tuple[int, dict, dict]:
    """POST /translate_file as LibreTranslate's page sends it: (status, headers, answer)."""
    body, headers = multipart({"source": source, "target": target}, {"file": (filename, data)})
    status, answer_headers, raw = call(url + "/translate_file", body, headers)
    return status, answer_headers, as_json((status, answer_headers, raw))[1]


def test_a_docx_of_60000_empty_paragraphs_does_not_hold_the_event_loop():
    """The issue's .docx (60,000 empty paragraphs, one sentence; python-docx takes seconds over it) is parsed on a
    thread: /health, asked from another process every 20 ms meanwhile, answers at once (before: held for the
    whole parse)."""
    data = empty_paragraphs_docx(60_000)
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        probe = probe_health(server.url, 3.0)
        time.sleep(0.5)  # the probe is asking
        started = time.monotonic()
        status, _, answer = upload(server.url, "empty.docx", data)
        parse_seconds = time.monotonic() - started
        slowest_health = float(probe.communicate(timeout=60)[0])
    assert status == 200, answer
    assert parse_seconds > 0.5 and slowest_health < 0.3, (parse_seconds, slowest_health)


def test_a_full_file_store_answers_503_with_retry_after_before_translating(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "FILES_FOLDER", tmp_path)
    backend = StandInBackend("en", "de")
    with InProcessServer([backend], ServeSettings(file_store_bytes=100)) as server:
        status, _, answer = upload(server.url, "a.txt", b"Jesus wept.")
        assert status == 200, answer
        status, headers, answer = upload(server.url, "b.txt", b"x" * 90)
        assert status == 503 and answer["error"].startswith("Slowdown: the store of translated files is full")
        assert 1 <= int(headers["Retry-After"]) <= 1800
    assert backend.given == ["Jesus wept."]
