"""vanilla-serve end to end, on a toy model trained here: the real server process on 127.0.0.1, every endpoint in
JSON and form bodies, answers equal to `Translator.translate` (the code of vanilla-translate), a LibreTranslate
client written elsewhere, bad input, API keys, the queue-full path, load from 64 clients, SIGTERM under load,
the web page in headless Chromium, the CTranslate2 backend and the Inference Endpoints handler."""

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import uvicorn
from fastapi.routing import APIRoute
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from vanilla_training.cli.serve import parser as serve_parser
from vanilla_training.cli.train import main as train
from vanilla_training.serving import handler as handler_module
from vanilla_training.serving.app import create_app
from vanilla_training.serving.backends import CPU_BATCH, CTranslate2Backend, TorchBackend
from vanilla_training.serving.metrics import Measure, Metrics
from vanilla_training.serving.service import Service
from vanilla_training.serving.settings import ServeSettings, settings_from
from vanilla_training.serving.workers import load_backend
from vanilla_training.translator import load_translator

from helpers import free_port, toy_pairs, toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow  # the toy training run takes about 15 s on 2 idle cores

TIMEOUT = 60  # seconds any one HTTP request may take
LINES = ["the big red house", "one", "two three one two the house", "red house", "three", "the house"]
HELD_DECODER = Path(__file__).parent / "held_decoder"  # its sitecustomize holds a server's decoder (ServerProcess)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A toy run folder (en-de, recorded by training)."""
    folder = tmp_path_factory.mktemp("run")
    files = write_toy_corpus(folder, {"train": 400, "validation": 20, "test": 25})
    train(toy_run_args(files, folder / "run", show=0))
    return folder / "run"


@pytest.fixture(scope="module")
def translator(run):
    """The run's model in float32, as vanilla-translate loads it."""
    return load_translator(run)


def request(url: str, body: bytes | None = None, content_type: str = "application/json", method: str | None = None):
    """(status, headers, decoded JSON or text) of one HTTP request; an HTTP error status is returned, not raised."""
    headers = {"Content-Type": content_type} if body is not None else {}
    call = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(call, timeout=TIMEOUT) as response:
            status, answer_headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, answer_headers, raw = error.code, error.headers, error.read()
    text = raw.decode("utf-8")
    is_json = answer_headers.get("content-type", "").startswith("application/json")
    return status, answer_headers, json.loads(text) if is_json else text


def post_json(url: str, fields) -> tuple[int, dict]:
    status, _, answer = request(url, json.dumps(fields).encode())
    return status, answer


def post_form(url: str, fields: dict) -> tuple[int, dict]:
    status, _, answer = request(url, urllib.parse.urlencode(fields).encode(), "application/x-www-form-urlencoded")
    return status, answer


class ServerProcess:
    """`python -m vanilla_training.cli.serve` on a free port of 127.0.0.1, its output in a file."""

    def __init__(self, model: Path, log: Path, *options: str, hold: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "vanilla_training.cli.serve", str(model), "--port", str(self.port)]
        command += ["--backend", "torch"]  # the held decoder and the workers' tests are the torch backend's
        environment = None
        if hold is not None:  # the decoder takes no sentence while `hold` exists (tests/held_decoder)
            path = os.pathsep.join(filter(None, [str(HELD_DECODER), os.environ.get("PYTHONPATH")]))
            environment = {**os.environ, "PYTHONPATH": path, "VANILLA_TEST_HOLD": str(hold)}
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [*command, "--precision", "fp32", *options], stdout=output, stderr=output, env=environment
            )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the server exited: {log.read_text()}"
            try:
                if request(self.url + "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"the server did not answer in 180 s: {log.read_text()}")

    def stop(self) -> int:
        """SIGTERM, then its exit status (killed after 60 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise
        return self.process.returncode


@pytest.fixture(scope="module")
def server(run, tmp_path_factory):
    process = ServerProcess(run, tmp_path_factory.mktemp("server") / "server.log")
    yield process
    assert process.stop() == 0


class InProcessServer:
    """The app of `create_app` under uvicorn in a thread of this process, on a free port."""

    def __init__(self, backends, settings: ServeSettings):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(backends, settings), host="127.0.0.1", port=self.port, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the in-process server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def offline(translator, lines: list[str]) -> dict[str, str]:
    """Each distinct line's translation by `Translator.translate` (vanilla-translate's code), as one batch job."""
    unique = sorted(set(lines))
    return dict(zip(unique, translator.translate(unique, progress=False), strict=True))


def test_it_listens_on_loopback_and_says_where(server):
    assert f"Uvicorn running on http://127.0.0.1:{server.port}" in server.log.read_text()


def test_languages_health_docs_and_openapi(server):
    assert request(server.url + "/languages")[2] == [
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["de"]},
    ]
    assert request(server.url + "/health")[2] == {"status": "ok"}
    page = request(server.url + "/docs")[2]
    assert "swagger" in page.lower() and "http" not in page  # nothing from a CDN: the assets are served here
    for asset in re.findall(r"(?:src|href)=['\"](/[^'\"]+)", page):
        with urllib.request.urlopen(server.url + asset, timeout=TIMEOUT) as response:  # a PNG is not text
            assert response.status == 200 and response.read(), asset
            assert response.headers["content-type"].startswith(("text/css", "text/javascript", "image/")), asset
    spec = request(server.url + "/openapi.json")[2]
    body = spec["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "application/x-www-form-urlencoded", "multipart/form-data"}
    fields = body["application/json"]["schema"]["properties"]
    assert set(fields) == {"q", "source", "target", "format", "alternatives", "api_key", "glossary"}
    assert all(field.get("description") for field in fields.values())


def test_json_and_form_strings_lists_and_paragraphs_equal_the_translator(server, translator):
    expected = offline(translator, LINES)
    url = server.url + "/translate"
    for line in LINES:
        assert post_json(url, {"q": line, "source": "en", "target": "de"}) == (200, {"translatedText": expected[line]})
        assert post_form(url, {"q": line, "source": "en", "target": "de"}) == (200, {"translatedText": expected[line]})
    assert post_json(url, {"q": LINES, "source": "en", "target": "de"}) == (
        200,
        {"translatedText": [expected[line] for line in LINES]},
    )
    paragraph = f"  {LINES[0]}\n\n\t{LINES[1]}\n{LINES[2]}\n"
    translation = f"  {expected[LINES[0]]}\n\n\t{expected[LINES[1]]}\n{expected[LINES[2]]}\n"
    assert post_json(url, {"q": paragraph, "source": "en", "target": "de"}) == (200, {"translatedText": translation})
    form_paragraph = paragraph.replace("\n", "\r\n")  # a form's line ends become \n, as LibreTranslate does
    assert post_form(url, {"q": form_paragraph, "source": "en", "target": "de"})[1]["translatedText"] == translation


def test_alternatives_are_the_beams_next_best(server, translator):
    sentence = "two three one two the house"
    model, tokenizer = translator.model, translator.tokenizer
    inputs = tokenizer([sentence], return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=inputs["input_ids"].shape[1] + 50, num_return_sequences=3)
    beams = tokenizer.batch_decode(output, skip_special_tokens=True)
    status, answer = post_json(
        server.url + "/translate", {"q": sentence, "source": "en", "target": "de", "alternatives": 2}
    )
    assert status == 200
    assert answer["translatedText"] == beams[0]
    assert answer["alternatives"] == [text for text in dict.fromkeys(beams[1:]) if text != beams[0]]
    status, answer = post_form(
        server.url + "/translate", {"q": sentence, "source": "en", "target": "de", "alternatives": "2"}
    )
    assert answer["alternatives"] == [text for text in dict.fromkeys(beams[1:]) if text != beams[0]]


def test_auto_detects_the_source_and_detect_ranks_every_language_it_knows(server, translator):
    english = ["In the beginning God created the heaven and the earth.", "And God said, Let there be light."]
    expected = offline(translator, english)
    status, answer = post_json(server.url + "/translate", {"q": english[0], "source": "auto", "target": "de"})
    assert status == 200 and answer["translatedText"] == expected[english[0]]
    assert answer["detectedLanguage"]["language"] == "en" and 50 < answer["detectedLanguage"]["confidence"] <= 100
    assert type(answer["detectedLanguage"]["confidence"]) is int  # as LibreTranslate's (a Kotlin client reads an Int)
    status, answer = post_json(server.url + "/translate", {"q": english, "source": "auto", "target": "de"})
    assert answer["translatedText"] == [expected[line] for line in english]
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "en"]
    german = "Und Gott sprach: Es werde Licht! Und es ward Licht."
    status, answer = post_json(server.url + "/translate", {"q": german, "source": "auto", "target": "de"})
    assert status == 400 and answer["error"] == "German (de) is not available as a target language from German (de)"
    status, ranking = post_form(server.url + "/detect", {"q": german})
    assert status == 200 and ranking[0]["language"] == "de" and len(ranking) == 3
    assert [d["confidence"] for d in ranking] == sorted((d["confidence"] for d in ranking), reverse=True)


def test_a_libretranslate_client_written_elsewhere(server, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    assert client.translate(LINES[0], "en", "de") == offline(translator, LINES[:1])[LINES[0]]
    assert [language["code"] for language in client.languages()] == ["de", "en"]
    assert client.detect("In the beginning God created the heaven and the earth.")[0]["language"] == "en"
    keyed = LibreTranslateAPI(server.url, api_key="anything")  # keys are not checked where none are configured
    assert keyed.translate(LINES[1], "en", "de") == offline(translator, LINES[1:2])[LINES[1]]


BAD_INPUT = [
    (b'{"q": "one", "source": "en"', "application/json", 400, "Invalid JSON format"),
    (b'["one"]', "application/json", 400, "Invalid JSON format"),
    (b'{"q": "one", "source": "en", "target": 5}', "application/json", 400, "5 is not supported"),
    (b'{"q": 5, "source": "en", "target": "de"}', "application/json", 400, "q parameter must be a string"),
    (b'{"q": ["a", 1], "source": "en", "target": "de"}', "application/json", 400, "q parameter must be a string"),
    (b'{"q": "", "source": "en", "target": "de"}', "application/json", 400, "missing q parameter"),
    (b'{"source": "en", "target": "de"}', "application/json", 400, "missing q parameter"),
    (b'{"q": "one", "target": "de"}', "application/json", 400, "missing source parameter"),
    (b'{"q": "one", "source": "en"}', "application/json", 400, "missing target parameter"),
    (b'{"q": "one", "source": "xx", "target": "de"}', "application/json", 400, "xx is not supported"),
    (b'{"q": "one", "source": "en", "target": "en"}', "application/json", 400, "English (en) is not available"),
    (b'{"q": "one", "source": "en", "target": "de", "format": "xml"}', "application/json", 400, "xml format"),
    (b'{"q": "one", "source": "en", "target": "de", "alternatives": "x"}', "application/json", 400, "not a number"),
    (b'{"q": "one", "source": "en", "target": "de", "alternatives": 9}', "application/json", 400, "must be <= 3"),
    (b'{"q": "one", "source": "en", "target": "de", "alternatives": [1]}', "application/json", 400, "not a number"),
    (b'{"q": "one", "source": "en", "target": "de", "alternatives": 1e999}', "application/json", 400, "not a number"),
    (b'{"q": "\xff\xfe", "source": "en", "target": "de"}', "application/json", 400, "not UTF-8"),
    (b"q=\xff\xfe&source=en&target=de", "application/x-www-form-urlencoded", 400, "not UTF-8"),
    (b"q=one&source=en", "application/x-www-form-urlencoded", 400, "missing target parameter"),
    (
        json.dumps({"q": "one " * 1300, "source": "en", "target": "de"}).encode(),
        "application/json",
        400,
        "request (5200) exceeds text limit (5000)",
    ),
    (
        json.dumps({"q": ["one"] * 101, "source": "en", "target": "de"}).encode(),
        "application/json",
        400,
        "request (101) exceeds text limit (100)",
    ),
    (
        json.dumps({"q": "one\n" * 501, "source": "en", "target": "de"}).encode(),
        "application/json",
        400,
        "request (501 sentences) exceeds sentence limit (500)",
    ),
    (
        json.dumps({"q": "one " * 300_000, "source": "en", "target": "de"}).encode(),
        "application/json",
        413,
        "over the limit of 1,000,000 bytes",
    ),
]


@pytest.mark.parametrize(("body", "content_type", "status", "message"), BAD_INPUT, ids=[m for *_, m in BAD_INPUT])
def test_bad_input_gets_a_4xx_in_libretranslates_shape(server, body, content_type, status, message):
    answered, _, answer = request(server.url + "/translate", body, content_type)
    assert (answered, list(answer)) == (status, ["error"])
    assert message in answer["error"]


def test_html_keeps_the_markup_and_translates_the_text_between_tags(server, translator):
    expected = offline(translator, LINES[:3])
    source = f"<p class='x'>{LINES[0]}</p>\n<ul><li>{LINES[1]}</li><li>{LINES[2]}</li></ul><script>var a = 1;</script>"
    status, answer = post_json(
        server.url + "/translate", {"q": source, "source": "en", "target": "de", "format": "html"}
    )
    assert status == 200
    assert answer["translatedText"] == (
        f"<p class='x'>{expected[LINES[0]]}</p>\n<ul><li>{expected[LINES[1]]}</li><li>{expected[LINES[2]]}</li></ul>"
        "<script>var a = 1;</script>"
    )


def test_a_sentence_longer_than_the_model_accepts_is_split_not_cut(server, translator):
    half = " ".join(["one"] * 550)  # 1,100 words and </s>: over the model's 1,024 tokens; each half fits
    assert translator.token_counts([f"{half} {half}"])[0] > translator.max_length
    expected = offline(translator, [half])[half]
    status, answer = post_json(server.url + "/translate", {"q": f"{half} {half}", "source": "en", "target": "de"})
    assert (status, answer) == (200, {"translatedText": f"{expected} {expected}"})


def test_several_models_each_a_language_pair(run, translator, tmp_path):
    french = tmp_path / "en-fr"
    shutil.copytree(run / "final", french)
    results = json.loads((french / "training_results.json").read_text())
    (french / "training_results.json").write_text(
        json.dumps({**results, "languages": {"source": "en", "target": "fr"}})
    )
    backends = [TorchBackend(translator, "fp32"), TorchBackend(load_translator(french), "fp32")]
    with InProcessServer(backends, ServeSettings()) as server:
        assert request(server.url + "/languages")[2] == [
            {"code": "de", "name": "German", "targets": []},
            {"code": "en", "name": "English", "targets": ["de", "fr"]},
            {"code": "fr", "name": "French", "targets": []},
        ]
        status, answer = post_json(server.url + "/translate", {"q": LINES[0], "source": "auto", "target": "fr"})
        assert status == 200 and answer["translatedText"] == offline(translator, LINES[:1])[LINES[0]]
        assert post_json(server.url + "/translate", {"q": "x", "source": "de", "target": "fr"}) == (
            400,
            {"error": "French (fr) is not available as a target language from German (de)"},
        )
    with pytest.raises(ValueError, match="two models translate en-de"):
        create_app([TorchBackend(translator, "fp32")] * 2)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
FIELD_VALUES = {
    "q": st.sampled_from(["one two", "red house. the house", ""]) | JSON_VALUES,
    "source": st.sampled_from(["en", "auto", "de", "xx"]) | JSON_VALUES,
    "target": st.sampled_from(["de", "en"]) | JSON_VALUES,
    "format": st.sampled_from(["text", "html"]) | JSON_VALUES,
    "alternatives": st.sampled_from([0, 1, "2"]) | JSON_VALUES,
    "api_key": JSON_VALUES,
}


def test_no_json_body_gets_a_500_or_another_shape(translator):
    """Any JSON object over /translate's fields (and a few others) gets 200 or a 4xx in LibreTranslate's shape."""
    with InProcessServer([TorchBackend(translator, "fp32")], ServeSettings(cache_size=0)) as server:

        @settings(max_examples=60, deadline=None)
        @given(st.fixed_dictionaries({}, optional=FIELD_VALUES) | JSON_VALUES)
        def check(fields):
            status, answer = post_json(server.url + "/translate", fields)
            assert status == 200 or (400 <= status < 500 and list(answer) == ["error"]), (status, answer)
            if status == 200:
                assert isinstance(answer["translatedText"], str | list)

        check()


def test_metrics_count_requests_sentences_batches_and_queue_time(server):
    post_json(server.url + "/translate", {"q": "one two three one", "source": "en", "target": "de"})
    post_json(server.url + "/translate", {"q": "one two three one", "source": "en", "target": "de"})  # cached
    text = request(server.url + "/metrics")[2]
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values['vanilla_serve_sentences_total{origin="model",pair="en-de"}'] >= 1
    assert values['vanilla_serve_sentences_total{origin="cache",pair="en-de"}'] >= 1
    assert values['vanilla_serve_requests_total{endpoint="/translate",status="200"}'] >= 2
    assert values['vanilla_serve_source_tokens_total{pair="en-de"}'] >= 1
    for histogram in ("batch_sentences", "batch_seconds", "queue_seconds"):
        assert values[f'vanilla_serve_{histogram}_count{{pair="en-de"}}'] >= 1
    assert values['vanilla_serve_request_seconds_count{endpoint="/translate"}'] >= 2


def test_a_request_is_counted_before_its_client_has_the_answer():
    """The metrics middleware counts a request before handing on the last part of its answer: an app that goes on
    after answering (as the ASGI stack does, with another worker's /metrics read by then) finds it counted; an app
    that fails before answering is counted as a 500 (the answer its client gets from the server)."""
    metrics = Metrics()

    def counted(name: str, status: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"endpoint": "/translate", "status": status})

    answered, finish = asyncio.Event(), asyncio.Event()

    async def app(scope, receive, send):
        scope["route"] = APIRoute("/translate", lambda: None)  # as the router marks the scope it was given
        if scope["path"] == "/translate" and scope["method"] == "GET":
            raise RuntimeError("failed before answering")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await send({"type": "http.response.body", "body": b" last"})
        await finish.wait()

    async def client_side(message):
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()

    async def main():
        scope = {"type": "http", "path": "/translate", "method": "POST"}
        serving = asyncio.create_task(Measure(app, metrics)(scope, None, client_side))
        await asyncio.wait_for(answered.wait(), TIMEOUT)
        assert counted("vanilla_serve_requests_total", "200") == 1  # counted after the app returns: None
        finish.set()
        await serving
        assert counted("vanilla_serve_requests_total", "200") == 1
        with pytest.raises(RuntimeError, match="failed before answering"):
            await Measure(app, metrics)({**scope, "method": "GET"}, None, client_side)
        assert counted("vanilla_serve_requests_total", "500") == counted("vanilla_serve_errors_total", "500") == 1

    asyncio.run(main())


def test_api_keys_are_checked_where_configured(translator):
    with InProcessServer([TorchBackend(translator, "fp32")], ServeSettings(api_keys=frozenset({"k1"}))) as server:
        fields = {"q": "one", "source": "en", "target": "de"}
        assert post_json(server.url + "/translate", fields)[0] == 200  # as LibreTranslate: a key is optional
        assert post_json(server.url + "/translate", {**fields, "api_key": "k2"}) == (403, {"error": "Invalid API key"})
        assert post_form(server.url + "/detect", {"q": "one", "api_key": "k2"})[0] == 403
        assert post_json(server.url + "/translate", {**fields, "api_key": "k1"})[0] == 200
        assert post_form(server.url + "/translate", {**fields, "api_key": "k1"})[0] == 200


def test_only_a_short_plain_request_is_laid_out_on_the_event_loop(translator, monkeypatch):
    """A short request whose lines need no pysbd is laid out on the event loop (no thread's round trip); one that
    needs pysbd, names no source, or is long, on a layout thread: pysbd's pipe never blocks the loop."""
    threads = []
    lay_out = Service.lay_out

    def recorded(self, call, budget):
        threads.append(threading.current_thread().name)
        return lay_out(self, call, budget)

    monkeypatch.setattr(Service, "lay_out", recorded)
    long_plain = " ".join(["and God is love"] * 150)  # 2,249 characters, one plain sentence
    texts = ["God is love.", 'He said, "No." Then he left.', long_plain, "God is love.\nHe left."]
    with InProcessServer([TorchBackend(translator, "fp32")], ServeSettings()) as server:
        for text in texts:
            assert post_json(server.url + "/translate", {"q": text, "source": "en", "target": "de"})[0] == 200
        assert post_json(server.url + "/translate", {"q": "God is love.", "source": "auto", "target": "de"})[0] == 200
    on_a_layout_thread = [name.startswith("layout") for name in threads]
    assert on_a_layout_thread == [False, True, True, False, True]


class HeldBackend(TorchBackend):
    """The torch backend whose continuous decoder takes no sentence until `release` is set; `joined` records the
    sentences it took."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release, self.joined = threading.Event(), []
        join = self.decoder.join

        def held_join(keys, sentences):
            self.release.wait(TIMEOUT)
            self.joined += sentences
            return join(keys, sentences)

        self.decoder.join = held_join


def wait_for_queue(url: str, sentences: int) -> None:
    """Waits until `sentences` are queued or being translated (/metrics)."""
    deadline = time.monotonic() + TIMEOUT
    while metric(url, 'vanilla_serve_queued_sentences{pair="en-de"}') < sentences:
        assert time.monotonic() < deadline, "the sentences never reached the queue"
        time.sleep(0.02)


def test_a_full_queue_answers_503_at_once(translator):
    backend = HeldBackend(translator, "fp32")
    limits = ServeSettings(max_queue=4, cache_size=0)
    with InProcessServer([backend], limits) as server, ThreadPoolExecutor(1) as pool:
        first = pool.submit(post_json, server.url + "/translate", {"q": LINES[:3], "source": "en", "target": "de"})
        wait_for_queue(server.url, 3)  # the first request's 3 sentences wait for the held decoder
        started = time.monotonic()
        status, headers, answer = request(
            server.url + "/translate", json.dumps({"q": LINES[3:5], "source": "en", "target": "de"}).encode()
        )
        assert (status, headers["retry-after"]) == (503, "1") and time.monotonic() - started < 2.0
        assert "queue is full (3 of 4 sentences waiting)" in answer["error"]
        backend.release.set()
        assert first.result(timeout=TIMEOUT)[0] == 200


def refuse_bad(sentences: list[str]) -> None:
    if any("BAD" in sentence for sentence in sentences):
        raise RuntimeError("this input breaks the model")


class FailsOnBad(TorchBackend):
    """The torch backend, failing on any batch that holds the word "BAD" (a model input it cannot take), or with
    continuous batching on any group of sentences joining the decoder's batch that holds it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.decoder is not None:
            join = self.decoder.join
            self.decoder.join = lambda keys, sentences: refuse_bad(sentences) or join(keys, sentences)

    def translate(self, sentences: list[str], hypotheses: int = 1, beams: int | None = None) -> list[list[str]]:
        refuse_bad(sentences)
        return super().translate(sentences, hypotheses, beams)


@pytest.mark.parametrize("batching", ["continuous", "batches"])
def test_a_request_the_model_fails_on_fails_alone_and_the_server_keeps_serving(translator, batching):
    expected = offline(translator, LINES[:2])
    backend = FailsOnBad(translator, "fp32", batching=batching)
    assert (backend.decoder is not None) == (batching == "continuous")
    with InProcessServer([backend], ServeSettings(batch_wait_ms=200)) as server:
        with ThreadPoolExecutor(3) as pool:  # within one batching window: one batch, then each sentence alone
            answers = list(
                pool.map(
                    lambda q: post_json(server.url + "/translate", {"q": q, "source": "en", "target": "de"}),
                    [LINES[0], "one BAD two", LINES[1]],
                )
            )
        assert answers == [
            (200, {"translatedText": expected[LINES[0]]}),
            (500, {"error": "Cannot translate text: this input breaks the model"}),
            (200, {"translatedText": expected[LINES[1]]}),
        ]
        assert post_json(server.url + "/translate", {"q": LINES[1], "source": "en", "target": "de"})[0] == 200


def metric(url: str, name: str) -> float:
    """The value of one sample of /metrics (0 if absent)."""
    for line in request(url + "/metrics")[2].splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_client_that_disconnects_costs_the_model_nothing(translator):
    """A request queued behind a held decoder whose client goes never reaches the model."""
    backend = HeldBackend(translator, "fp32")
    with InProcessServer([backend], ServeSettings(cache_size=0)) as server, ThreadPoolExecutor(1) as pool:
        first = pool.submit(post_json, server.url + "/translate", {"q": LINES[0], "source": "en", "target": "de"})
        wait_for_queue(server.url, 1)
        body = json.dumps({"q": "the big house", "source": "en", "target": "de"}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as gone:
            head = (
                f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            )
            gone.sendall(head.encode() + b"\r\n\r\n" + body)
            wait_for_queue(server.url, 2)  # its sentence waits in the queue when it goes
        time.sleep(0.3)  # the server sees it gone
        backend.release.set()
        assert first.result(timeout=TIMEOUT)[0] == 200
        status, answer = post_json(server.url + "/translate", {"q": LINES[1], "source": "en", "target": "de"})
        assert (status, answer) == (200, {"translatedText": offline(translator, LINES[1:2])[LINES[1]]})
        assert backend.joined == [LINES[0], LINES[1]]
        assert metric(server.url, 'vanilla_serve_sentences_total{origin="model",pair="en-de"}') == 2


def mixed_requests(rng: random.Random, count: int, lines: list[str]) -> list[tuple[bytes, str, int, object]]:
    """`count` requests (body, content type, expected status, expected translatedText as lines or None): strings
    of 1-4 lines, lists of 1-3 texts, JSON and form bodies, and 1 in 25 malformed."""
    requests = []
    for number in range(count):
        if number % 25 == 7:
            body, kind = rng.choice(
                [
                    (b'{"q": "one", "source": "en"}', "json"),
                    (b'{"q": [1]', "json"),
                    (b"q=one&source=en&target=xx", "form"),
                ]
            )
            requests.append((body, kind, 400, None))
            continue
        if rng.random() < 0.3:
            texts = [rng.choices(lines, k=rng.randint(1, 3)) for _ in range(rng.randint(1, 3))]
            q = ["\n".join(text) for text in texts]
            body = json.dumps({"q": q, "source": "en", "target": "de"}).encode()
            requests.append((body, "json", 200, texts))
        else:
            text = rng.choices(lines, k=rng.randint(1, 4))
            fields = {"q": "\n".join(text), "source": "en", "target": "de"}
            if rng.random() < 0.5:
                requests.append((json.dumps(fields).encode(), "json", 200, text))
            else:
                requests.append((urllib.parse.urlencode(fields).encode(), "form", 200, text))
    return requests


def send(url: str, body: bytes, kind: str):
    content_type = "application/json" if kind == "json" else "application/x-www-form-urlencoded"
    status, _, answer = request(url + "/translate", body, content_type)
    return status, answer


def expected_answer(expected: dict[str, str], lines_or_texts):
    if lines_or_texts and isinstance(lines_or_texts[0], list):
        return ["\n".join(expected[line] for line in text) for text in lines_or_texts]
    return "\n".join(expected[line] for line in lines_or_texts)


HOSTILE_MIX = [  # (body, status, the answer's text or, for a 400, a part of its error; None: any text)
    (json.dumps({"q": "..[" + " ".join(["111"] * 1249) + "]", "source": "en", "target": "de"}).encode(), 200, None),
    (json.dumps({"q": "y" * 4999, "source": "en", "target": "de"}).encode(), 200, None),
    (json.dumps({"q": "😀🎉 🙂", "source": "en", "target": "de"}).encode(), 200, "😀🎉 🙂"),
    (b'{"q": "\\ud800 Jesus wept.", "source": "en", "target": "de"}', 400, "lone surrogate"),
    (b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "source": "en", "target": "de"}', 400, "nested too deeply"),
]


def test_load_from_64_clients_loses_and_swaps_nothing(server, translator):
    """500 ordinary requests of mixed kinds, and among them 10 long or hostile ones (2 of each of `HOSTILE_MIX`),
    from 64 clients: each gets its own answer."""
    rng = random.Random(0)
    lines = sorted({english for english, _ in toy_pairs(rng, 300)})
    expected = offline(translator, lines)
    requests = mixed_requests(rng, 500, lines)
    hostile = [(body, "json", status, ("hostile", answer)) for body, status, answer in HOSTILE_MIX * 2]
    for number, hostile_request in enumerate(hostile):  # spread among the others
        requests.insert(number * 26 + 3, hostile_request)
    started = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda r: send(server.url, r[0], r[1]), requests))
    seconds = time.monotonic() - started
    counts = {"ok": 0, "malformed answered 400": 0, "long or hostile": 0}
    for (_, _, status, lines_or_texts), (answered, answer) in zip(requests, answers, strict=True):
        assert answered == status, answer
        if lines_or_texts and lines_or_texts[0] == "hostile":
            wanted = lines_or_texts[1]
            text = answer["translatedText"] if status == 200 else answer["error"]
            assert isinstance(text, str) and text and (wanted is None or wanted in text), answer
            counts["long or hostile"] += 1
        elif status == 200:
            assert answer == {"translatedText": expected_answer(expected, lines_or_texts)}
            counts["ok"] += 1
        else:
            assert list(answer) == ["error"]
            counts["malformed answered 400"] += 1
    print(f"\n{len(requests)} requests from 64 clients in {seconds:.1f} s: {counts}")
    assert counts == {"ok": 480, "malformed answered 400": 20, "long or hostile": 10}


def queued_sentences(url: str) -> float:
    for line in request(url + "/metrics")[2].splitlines():
        if line.startswith("vanilla_serve_queued_sentences{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_sigterm_under_load_finishes_every_accepted_request_then_exits_0(run, translator, tmp_path):
    """Requests wait in the queue (the decoder held) when SIGTERM comes: each is answered in full, a new
    connection is refused, and the process exits 0."""
    rng = random.Random(1)
    lines = sorted({english for english, _ in toy_pairs(rng, 60)})
    expected = offline(translator, lines)
    requests = [r for r in mixed_requests(rng, 40, lines) if r[2] == 200]
    waiting = sum(len(r[3]) if not isinstance(r[3][0], list) else sum(map(len, r[3])) for r in requests)
    hold = tmp_path / "hold"
    hold.touch()
    process = ServerProcess(run, tmp_path / "server.log", "--cache-size", "0", hold=hold)
    try:
        with ThreadPoolExecutor(len(requests)) as pool:
            futures = [pool.submit(send, process.url, body, kind) for body, kind, _, _ in requests]
            deadline = time.monotonic() + 30
            while queued_sentences(process.url) < waiting:  # every request accepted and queued
                assert time.monotonic() < deadline, "the requests did not reach the queue"
                time.sleep(0.02)
            process.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)  # shutting down, with every request waiting
            hold.unlink()
            answers = [future.result(timeout=TIMEOUT) for future in futures]
        assert process.process.wait(timeout=60) == 0
    finally:
        process.stop()
    for (_, _, _, lines_or_texts), (status, answer) in zip(requests, answers, strict=True):
        assert (status, answer) == (200, {"translatedText": expected_answer(expected, lines_or_texts)})
    with pytest.raises(OSError):
        request(process.url + "/health")
    assert "Shutting down" in process.log.read_text()


def chromium_missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    for path in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not Path(path).is_file():
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    return None


@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_the_web_page_translates_in_headless_chromium(server, translator):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        browser.set_page_load_timeout(30)
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: b.find_element(By.ID, "target").get_attribute("value") == "de")
        assert browser.find_element(By.ID, "source").get_attribute("value") == "en"
        expected = offline(translator, LINES[:2])
        text = browser.find_element(By.ID, "text")
        text.send_keys(LINES[0])
        browser.find_element(By.ID, "translate").click()
        result = browser.find_element(By.ID, "result")
        wait.until(lambda b: result.text not in ("", "Translating…"))
        assert result.text == expected[LINES[0]]
        text.clear()  # the keyboard alone: Ctrl+Enter in the text box
        text.send_keys(LINES[1])
        text.send_keys(Keys.CONTROL, Keys.ENTER)
        wait.until(lambda b: result.text == expected[LINES[1]])
        assert not browser.find_elements(By.CSS_SELECTOR, "script[src^='http'], link[href^='http']")
        browser.get(server.url + "/docs")  # the API's page, drawn by Swagger UI from files served here
        wait.until(lambda b: "/translate" in [e.text for e in b.find_elements(By.CLASS_NAME, "opblock-summary-path")])
    finally:
        browser.quit()


def worker_processes(parent: int) -> list[int]:
    """The worker processes (multiprocessing's spawned children) of process `parent`, from Linux's /proc."""
    workers = []
    for process in Path("/proc").iterdir():
        try:
            ppid = int((process / "stat").read_text().rsplit(")", 1)[1].split()[1]) if process.name.isdigit() else 0
            if ppid == parent and b"spawn_main" in (process / "cmdline").read_bytes():
                workers.append(int(process.name))
        except (OSError, IndexError):  # a process that ended meanwhile
            continue
    return workers


def environment_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the worker processes from Linux's /proc")
def test_workers_share_the_port_and_their_metrics(run, translator, tmp_path):
    """`--workers 2`: two processes, each with half of the CPU threads (and libuv accepting one connection at a
    time, to share bursts of clients out), answer clients on connections of their own as vanilla-translate does;
    /metrics counts every worker's requests, whichever worker answers it; SIGTERM stops both workers and the server
    exits 0."""
    server = ServerProcess(run, tmp_path / "server.log", "--workers", "2")
    try:
        workers = worker_processes(server.process.pid)
        assert len(workers) == 2
        threads = str(max(1, torch.get_num_threads() // 2))
        assert [environment_of(pid)["OMP_NUM_THREADS"] for pid in workers] == [threads, threads]
        assert [environment_of(pid)["UV_TCP_SINGLE_ACCEPT"] for pid in workers] == ["1", "1"]
        texts = [LINES[i % len(LINES)] for i in range(48)]
        expected = offline(translator, LINES)

        def ask(text: str) -> dict:  # urllib: a connection of its own each time
            return post_json(server.url + "/translate", {"q": text, "source": "en", "target": "de"})[1]

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(ask, texts))
        assert [answer["translatedText"] for answer in answers] == [expected[text] for text in texts]
        for _ in range(4):
            assert metric(server.url, 'vanilla_serve_requests_total{endpoint="/translate",status="200"}') == 48
        queue = 'vanilla_serve_queued_sentences{pair="en-de"} 0.0'  # one series, the workers' sum (no pid label)
        assert queue in request(server.url + "/metrics")[2].splitlines()
    finally:
        assert server.stop() == 0
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the worker processes from Linux's /proc")
def test_a_dead_workers_queue_length_leaves_the_metrics_with_it(run, tmp_path):
    """`--workers 2`: a worker killed with sentences queued (held there by a long batch wait) is replaced by
    uvicorn's supervisor, and /metrics's queue length, the sum over the workers, no longer counts the dead
    worker's sentences (kept, it would say 3 for good)."""
    hold = tmp_path / "hold"
    hold.touch()
    server = ServerProcess(run, tmp_path / "server.log", "--workers", "2", hold=hold)
    queued = 'vanilla_serve_queued_sentences{pair="en-de"}'
    try:
        workers = worker_processes(server.process.pid)
        body = json.dumps({"q": LINES[:3], "source": "en", "target": "de"}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as client:
            head = (
                f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            )
            client.sendall(head.encode() + b"\r\n\r\n" + body)
            deadline = time.monotonic() + TIMEOUT
            while metric(server.url, queued) != 3:
                assert time.monotonic() < deadline, "the request's sentences were never queued"
                time.sleep(0.05)
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            while len(replacements := worker_processes(server.process.pid)) != 2 or set(replacements) & set(workers):
                assert time.monotonic() < deadline, "the supervisor did not replace the killed workers"
                time.sleep(0.1)
        assert metric(server.url, queued) == 0  # answered once a new worker has loaded the model
    finally:
        hold.unlink()
        assert server.stop() == 0


def test_ctranslate2_float32_equals_the_translator_and_its_export_is_cached(run, translator, tmp_path):
    lines = sorted({english for english, _ in toy_pairs(random.Random(2), 150, max_words=12)})
    expected = offline(translator, lines)
    threads = torch.get_num_threads()
    backend = CTranslate2Backend(load_translator(run), "float32", cache=tmp_path / "ct2")
    assert torch.get_num_threads() == threads  # torch's threads, in the same process, left as they were
    assert backend.model.num_translators == threads  # a worker per core, ...
    assert len(lines) > 4 * CPU_BATCH  # ... each translating batches of CPU_BATCH: the answers come back in order
    assert [options[0] for options in backend.translate(lines)] == [expected[line] for line in lines]
    exported = backend.folder / "model.bin"
    written = exported.stat().st_mtime_ns
    again = CTranslate2Backend(load_translator(run), "float32", cache=tmp_path / "ct2")
    assert again.folder == backend.folder and exported.stat().st_mtime_ns == written
    best, second = again.translate([lines[-1]], hypotheses=2)[0]
    assert best == expected[lines[-1]] and second != best


def test_with_no_backend_given_the_server_picks_ctranslate2_and_answers_as_vanilla_translate(
    run, translator, tmp_path, monkeypatch, capsys
):
    """Issue 64: no --backend on a CPU without VNNI (the AVX2 EPYC's case) is CTranslate2 in float32, said with
    its reason, and its answers are vanilla-translate's (`Translator.translate`)."""
    from vanilla_training.serving import backends

    monkeypatch.setattr(backends, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(backends.torch.cuda, "is_available", lambda: False)
    lines = sorted({english for english, _ in toy_pairs(random.Random(4), 60, max_words=12)})
    settings = settings_from(serve_parser({}).parse_args([str(run), "--ct2-cache", str(tmp_path / "ct2")]))
    backend = load_backend(str(run), settings)
    said = capsys.readouterr().err
    assert "ctranslate2 float32 on cpu (auto: CTranslate2 is installed, this CPU lacks VNNI/AMX)" in said
    expected = offline(translator, lines)
    assert [options[0] for options in backend.translate(lines)] == [expected[line] for line in lines]


def test_ctranslate2_lanes_answer_concurrent_requests_in_batches_of_at_most_cpu_batch(run, translator, tmp_path):
    """The app with the CTranslate2 backend (float32) keeps two batches in flight for each of its workers (one a
    core): the requests sent at once each get their own translation (vanilla-translate's), the first batches meet
    all at once in CTranslate2's hands, as many as there are lanes (with a thread fewer to run them they never
    meet and this fails), and no batch holds more than CPU_BATCH sentences (with the limit ignored, the requests
    share one batch and this fails)."""
    lines = sorted({english for english, _ in toy_pairs(random.Random(3), 40, max_words=12)})
    expected = offline(translator, lines)
    backend = CTranslate2Backend(load_translator(run), "float32", cache=tmp_path / "ct2")
    workers = torch.get_num_threads()
    assert backend.model.num_translators == workers and backend.batch_sentences == CPU_BATCH
    assert backend.lanes == 2 * workers
    all_lanes = threading.Barrier(backend.lanes, timeout=60)  # broken (and the batches failed) if they never meet
    calls = iter(range(len(lines)))
    translate = backend.translate

    def held(sentences, hypotheses=1):
        if next(calls) < backend.lanes:  # the first batches wait until as many as there are lanes are in flight
            all_lanes.wait()
        return translate(sentences, hypotheses)

    backend.translate = held
    with InProcessServer([backend], ServeSettings(batch_wait_ms=20, cache_size=0)) as server:
        with ThreadPoolExecutor(len(lines)) as pool:
            answers = list(
                pool.map(
                    lambda line: post_json(server.url + "/translate", {"q": line, "source": "en", "target": "de"}),
                    lines,
                )
            )
        assert answers == [(200, {"translatedText": expected[line]}) for line in lines]
        batches = metric(server.url, 'vanilla_serve_batch_sentences_count{pair="en-de"}')
        within = metric(server.url, f'vanilla_serve_batch_sentences_bucket{{le="{float(CPU_BATCH)}",pair="en-de"}}')
        assert batches >= len(lines) / CPU_BATCH and within == batches
    assert not all_lanes.broken


def test_the_inference_endpoints_handler(run, translator, tmp_path):
    folder = tmp_path / "repository"
    shutil.copytree(run / "final", folder)
    shutil.copy(Path(handler_module.__file__), folder / "handler.py")  # what a pushed folder carries
    specification = importlib.util.spec_from_file_location("handler", folder / "handler.py")
    loaded = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(loaded)  # as the endpoint's toolkit imports it, from the repository
    handler = loaded.EndpointHandler(str(folder), precision="fp32")  # (bf16 where native, by default)
    expected = offline(translator, LINES[:3])
    paragraph = f"{LINES[0]}\n\n  {LINES[1]}"
    assert handler({"inputs": paragraph}) == [{"translation_text": f"{expected[LINES[0]]}\n\n  {expected[LINES[1]]}"}]
    assert handler({"inputs": LINES[:3], "parameters": {"source_lang": "en"}}) == [
        {"translation_text": expected[line]} for line in LINES[:3]
    ]
    answer = handler({"inputs": LINES[2], "parameters": {"alternatives": 2}})[0]
    assert answer["translation_text"] == expected[LINES[2]] and len(answer["alternatives"]) >= 1
    for data, message in [
        ({"inputs": 5}, "inputs"),
        ({"inputs": "x", "parameters": {"alternatives": "2"}}, "alternatives"),
        ({"inputs": "x", "parameters": {"target_lang": "fr"}}, "en-de"),
    ]:
        with pytest.raises(ValueError, match=message):
            handler(data)


def test_the_handler_under_concurrent_calls_uses_each_calls_own_beam(run, translator, monkeypatch):
    """Two calls at once with different `num_beams`: each is decoded with its own beam (a handler that set
    `backend.beams` per call let the second call's beam decode the first's text: the sentences are laid out
    between the two, here slowed to 0.3 s so that the calls meet)."""
    handler = handler_module.EndpointHandler(str(run / "final"), precision="fp32")
    layout, beams_used = handler_module.layout, {}
    translate = handler.translator.translate

    def slow_layout(*args, **kwargs):
        time.sleep(0.3)
        return layout(*args, **kwargs)

    def recorded(sentences, **options):
        beams_used[sentences[0]] = options.get("num_beams")
        return translate(sentences, **options)

    monkeypatch.setattr(handler_module, "layout", slow_layout)
    monkeypatch.setattr(handler.translator, "translate", recorded)
    calls = [(LINES[0], 1), (LINES[2], 5)]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda call: handler({"inputs": call[0], "parameters": {"num_beams": call[1]}}), calls))
    assert beams_used == {LINES[0]: 1, LINES[2]: 5}
    assert answers[0] == [{"translation_text": translator.translate([LINES[0]], num_beams=1, progress=False)[0]}]
    assert answers[1] == [{"translation_text": translator.translate([LINES[2]], num_beams=5, progress=False)[0]}]


SERVE_ONLY = """
import sys
for name in sys.argv[1:]:
    sys.modules[name] = None  # as if not installed: importing it fails
import vanilla_training.cli.serve, vanilla_training.cli.translate, vanilla_training.serving.handler
"""


def test_the_server_the_handler_and_translate_need_no_package_of_the_train_extra():
    """An install with the serve extra alone (`pip install vanilla-transformer[serve]`, or an endpoint that installs
    the handler's requirements) lacks the train extra's packages: nothing vanilla-serve, vanilla-translate or the
    handler import may need one."""
    requirements = [Requirement(text) for text in importlib.metadata.requires("vanilla-transformer")]
    train_only = {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": "train"})}
    train_only -= {r.name for r in requirements if not r.marker or r.marker.evaluate({"extra": "serve"})}
    train_only -= {"tqdm"}  # also a dependency of transformers itself: every install has it
    assert {"datasets", "evaluate", "sacrebleu", "accelerate"} <= train_only
    done = subprocess.run([sys.executable, "-c", SERVE_ONLY, *sorted(train_only)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as done:
        serve_parser().parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    options = [name for action in serve_parser()._actions for name in action.option_strings]
    assert len(options) > 15 and all(re.search(rf"{re.escape(name)}\b", text) for name in options)


def test_a_model_folder_without_a_model_is_refused_by_name(tmp_path, capsys):
    from vanilla_training.cli.serve import main

    with pytest.raises(SystemExit) as done:
        main([str(tmp_path)])
    assert done.value.code == 2
    assert "is not a saved translator" in capsys.readouterr().err
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # nothing was looked up online


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU serves in fp16")
def test_fp16_on_a_cpu_is_refused_by_name_before_serving(run, capsys):
    """vanilla-serve takes vanilla-train's precisions; one a CPU cannot compute is refused as training refuses it."""
    from vanilla_training.cli.serve import main

    with pytest.raises(SystemExit) as done:
        main([str(run), "--backend", "torch", "--precision", "fp16", "--port", str(free_port())])
    assert done.value.code == 2
    assert "--precision fp16 needs a CUDA GPU, and this machine has none" in capsys.readouterr().err


def test_the_serving_benchmark_runs_at_a_tiny_size(run, tmp_path, capsys):
    """benchmarks/serve_speed.py end to end on 6 sentences, torch in 2 worker processes and CTranslate2 (so
    `vanilla-serve --backend ctranslate2` runs from the command line), 1 and 2 clients, 2 sentences a request (not a
    measurement)."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_speed.py"
    specification = importlib.util.spec_from_file_location("serve_speed", script)
    serve_speed = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(serve_speed)
    arguments = ["--model", str(run), "--sentences", str(sentences), "--clients", "1,2"]
    arguments += ["--systems", "torch-fp32,ct2-float32"]
    arguments += ["--per-request", "2", "--torch-workers", "2"]
    serve_speed.main([*arguments, "--json", str(tmp_path / "speed.json")])
    printed = capsys.readouterr().out
    assert "torch-fp32: 2 clients / offline" in printed and "2 clients / 1 client(s)" in printed
    assert "offline in groups of 4" in printed and "in sorted groups of 4" in printed
    assert "ct2-float32: 2 clients / offline" in printed
    assert "ct2-float32 at 2 clients, CPU per sentence: event loop" in printed
    results = json.loads((tmp_path / "speed.json").read_text())
    assert results["sentences"] == len(LINES) and results["per_request"] == 2 and results["torch_workers"] == 2
    for system in ("torch-fp32", "ct2-float32"):
        assert set(results["results"][system]) == {"offline", "offline_in_groups", "offline_in_sorted_groups", "1", "2"}
        cpu = results["results"][system]["2"]
        # /proc counts in ticks of 10 ms: over a run of a few milliseconds the idle share may read above 1
        assert min(cpu["event_loop_ms"], cpu["other_threads_ms"], cpu["clients_ms"], cpu["idle"]) >= 0


def test_a_model_that_records_no_languages_takes_them_from_the_command_line(run, tmp_path):
    converted = tmp_path / "converted"
    shutil.copytree(run / "final", converted, ignore=shutil.ignore_patterns("training_results.json"))
    settings = settings_from(serve_parser().parse_args([str(converted), "--precision", "fp32", "--backend", "torch"]))
    with pytest.raises(ValueError, match="records no languages: give them as .*converted:SOURCE-TARGET"):
        load_backend(str(converted), settings)
    assert load_backend(f"{converted}:en-de", settings).translator.languages == ("en", "de")
    with pytest.raises(ValueError, match="translates en-de, not en-fr"):
        load_backend(f"{run}:en-fr", settings)


def test_vanilla_translate_paragraphs_splits_lines_into_sentences_and_keeps_their_spacing(run, translator, tmp_path):
    from vanilla_training.cli.translate import main as vanilla_translate

    half = " ".join(["one"] * 550)  # a line over the model's 1,024 tokens: split at the middle space, not refused
    sentences = ["the big red house.", "one two!", "three", half]  # the sentences, as a reader splits them
    expected = offline(translator, sentences)
    source = tmp_path / "in.txt"
    source.write_text(f"the big red house.  one two!\n\n   \n\tthree\n{half} {half}\n", encoding="utf-8")
    vanilla_translate([str(run), "--paragraphs", "--input", str(source), "--output", str(tmp_path / "out.txt")])
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == (
        f"{expected['the big red house.']}  {expected['one two!']}\n\n   \n\t{expected['three']}\n"
        f"{expected[half]} {expected[half]}\n"
    )
    with pytest.raises(SystemExit):  # without --paragraphs the long line is refused, as before
        vanilla_translate([str(run), "--input", str(source), "--output", str(tmp_path / "refused.txt")])
