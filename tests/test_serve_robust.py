"""Issue 61's server findings, each over stand-in models (no training: seconds a test): the OpenAPI document and
the docstrings naming every endpoint and status, Chinese scripts, the file store's folder and cap, suggestions kept
in SQLite, raw UTF-8 form bodies, `/detect`'s limit, documents checked and parsed off the event loop, and source
`auto` detected once per request among the served languages."""

import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse

from test_serve import InProcessServer, post_json
from test_serve_endpoints import as_json, call, multipart
from test_serve_files import empty_paragraphs_docx
from test_serve_hostile import StandInBackend, probe_health

import vanilla_training.cli.serve as serve_command
from vanilla_training.serving import app as app_module
from vanilla_training.serving import files
from vanilla_training.serving.app import create_app
from vanilla_training.serving.settings import ServeSettings

from helpers import free_port


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
    thread: /health, asked from another process every 20 ms meanwhile, waits at most a part of the parse (before:
    held for the whole parse). The bound is relative, so a machine busy with other work slows both sides alike."""
    data = empty_paragraphs_docx(60_000)
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        probe = probe_health(server.url, 3.0)
        time.sleep(0.5)  # the probe is asking
        started = time.monotonic()
        status, _, answer = upload(server.url, "empty.docx", data)
        parse_seconds = time.monotonic() - started
        slowest_health = float(probe.communicate(timeout=60)[0])
    assert status == 200, answer
    assert parse_seconds > 0.5 and slowest_health < parse_seconds / 2, (parse_seconds, slowest_health)


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


def test_suggestions_are_kept_in_sqlite_by_a_real_process(tmp_path):
    """`vanilla-serve --suggestions` in a process of its own (no test logging attached): a suggestion sent as a
    raw UTF-8 form, as curl --data sends it, is in the SQLite file, readable once the server has stopped."""
    database = tmp_path / "suggestions.db"
    script = (
        "import sys, uvicorn; sys.path.insert(0, 'tests'); from test_serve_hostile import StandInBackend; "
        "from vanilla_training.serving.app import create_app; from vanilla_training.serving.settings import "
        "ServeSettings; from pathlib import Path; "
        "settings = ServeSettings(suggestions=True, suggestions_db=Path(sys.argv[1])); "
        "uvicorn.run(create_app([StandInBackend('en', 'de')], settings), port=int(sys.argv[2]), log_level='error')"
    )
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", script, str(database), str(port)])
    try:
        url = f"http://127.0.0.1:{port}/suggest"
        deadline = time.monotonic() + 60
        while True:
            try:
                body = "q=Köln&s=Cologne&source=de&target=en".encode()
                status, _, answer = call(url, body, {"Content-Type": "application/x-www-form-urlencoded"})
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        assert (status, json.loads(answer)) == (200, {"success": True})
    finally:
        process.terminate()
        process.wait(timeout=30)
    with contextlib.closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT q, s, source, target FROM suggestions").fetchall() == [
            ("Köln", "Cologne", "de", "en")
        ]


def post_raw_form(url: str, body: bytes) -> tuple[int, object]:
    """A urlencoded POST as `curl --data` sends it: the text's UTF-8 bytes as they are."""
    return as_json(call(url, body, {"Content-Type": "application/x-www-form-urlencoded"}))


def test_raw_utf8_form_bodies_are_read_as_utf8():
    """`curl --data 'q=Grüße aus Köln'` sends raw UTF-8: read as UTF-8, as LibreTranslate reads it (before: as
    Latin-1, "Köln" became "KÃ¶ln" and German was 13% likely); %-escapes are UTF-8 too, and one that is not is a
    400."""
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        raw = "q=Grüße aus Köln&source=en&target=de".encode()
        assert post_raw_form(server.url + "/translate", raw) == (200, {"translatedText": "[en>de] Grüße aus Köln"})
        escaped = urllib.parse.urlencode({"q": "Grüße aus Köln", "source": "en", "target": "de"}).encode()
        assert post_raw_form(server.url + "/translate", escaped) == (200, {"translatedText": "[en>de] Grüße aus Köln"})
        status, answer = post_raw_form(server.url + "/detect", "q=Grüße aus Köln".encode())
        assert status == 200 and answer[0]["language"] == "de" and answer[0]["confidence"] > 80, answer
        status, answer = post_raw_form(server.url + "/translate", b"q=K%F6ln&source=en&target=de")
        assert status == 400 and "not UTF-8" in answer["error"]


SHORT_ENGLISH = ["OK", "Menu", "Hotel", "Taxi", "Pizza", "Help", "Stop", "Home", "Water", "Bank", "Open", "Sale"]


def test_short_ordinary_english_is_read_as_english_on_an_en_de_server():
    """py3langid finds each of these words more German than English (`Hotel` 84%): on an en-de server they are
    translated, alone, in a list and in a file, where before 14 of 34 such words were refused as German, and one
    refused its whole list; a German sentence is still refused, not translated as English."""
    backend = StandInBackend("en", "de")
    with InProcessServer([backend], ServeSettings()) as server:
        for word in SHORT_ENGLISH:
            status, answer = post_json(server.url + "/translate", {"q": word, "source": "auto", "target": "de"})
            assert (status, answer["translatedText"]) == (200, f"[en>de] {word}"), answer
            assert answer["detectedLanguage"]["language"] == "en"
        status, answer = post_json(server.url + "/translate", {"q": SHORT_ENGLISH, "source": "auto", "target": "de"})
        assert status == 200 and answer["translatedText"] == [f"[en>de] {word}" for word in SHORT_ENGLISH]
        status, _, answer = upload(server.url, "menu.txt", "\n".join(SHORT_ENGLISH).encode(), source="auto")
        assert status == 200, answer
        german = "Im Anfang schuf Gott den Himmel und die Erde."
        assert post_json(server.url + "/translate", {"q": german, "source": "auto", "target": "de"}) == (
            400,
            {"error": "German (de) is not available as a target language from German (de)"},
        )


def test_detect_checks_the_character_limit_first_and_runs_off_the_event_loop(monkeypatch):
    """990,000 characters (within the body limit) are refused by --char-limit before any detection (before: 0.24 s
    of blocked event loop each); a text within it is detected on a thread, while /health answers."""
    with InProcessServer([StandInBackend("en", "de")], ServeSettings(char_limit=5000)) as server:
        service = server.server.config.app.state.service
        threads = []
        detect = service.detector.detect

        def recording_detect(text):
            threads.append(threading.current_thread())
            return detect(text)

        monkeypatch.setattr(service.detector, "detect", recording_detect)
        status, answer = post_json(server.url + "/detect", {"q": "Guten Tag. " * 90_000})
        assert (status, answer) == (400, {"error": "Invalid request: request (990000) exceeds text limit (5000)"})
        assert threads == []
        status, answer = post_json(server.url + "/detect", {"q": ["Guten Tag.", "Wie geht es Ihnen?"]})
        assert status == 200 and answer[0]["language"] == "de"
        assert len(threads) == 1 and threads[0] is not server.thread


def test_hostile_html_is_answered_not_a_500():
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        for text, expected in (
            ("Hello <![ world", "[en&gt;de] Hello <![ world"),  # before: 500, an AssertionError in Python's parser
            ("Hello world. <!-- a note", "[en&gt;de] Hello world. <!-- a note"),
            ("Use <code>ls</code> now.", "[en&gt;de] <code>ls</code>Use  now."),  # placed by the diagonal
        ):
            fields = {"q": text, "source": "en", "target": "de", "format": "html"}
            assert post_json(server.url + "/translate", fields) == (200, {"translatedText": expected}), text
