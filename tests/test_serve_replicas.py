"""Replicas that act as one: two real `vanilla-serve` processes on loopback sharing a real Redis
(`--req-limit-storage redis://...`, as LibreTranslate's) limit one client across both; every option can also come
from the environment, LibreTranslate's LT_ names included."""

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_multilingual import LANGUAGES, SIZE, toy_rows
from test_serve import ServerProcess, post_json, request

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config
from vanilla_training.cli.serve import parser as serve_parser
from vanilla_training.serving.settings import settings_from
from vanilla_training.tokenizer import train_joint_bpe

from helpers import free_port


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An untrained three-language toy model: the limits are counted before any translating (/detect here)."""
    path = tmp_path_factory.mktemp("replicas") / "model"
    texts = [row["source"] for row in toy_rows(random.Random(1), 200)]
    tokenizer = train_joint_bpe(texts, vocab_size=1000, model_max_length=64, languages=LANGUAGES)
    config = VanillaConfig(**SIZE, vocab_size=len(tokenizer), languages=LANGUAGES)
    model = VanillaForConditionalGeneration(config)
    model.generation_config = paper_generation_config(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def redis_url(tmp_path):
    """A real Redis (Debian's redis-server) on a free loopback port, persisting nothing."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH (Debian's redis-server package; .ci/run installs it)")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
        assert time.monotonic() < deadline and server.poll() is None, "redis-server did not start"
        time.sleep(0.1)
    yield url
    server.terminate()
    server.wait(timeout=30)


def test_two_replicas_sharing_redis_limit_one_client_across_both(folder, redis_url, tmp_path):
    """--req-limit 4 on each replica, counted in one Redis: a client's requests spread over both are 4 in all,
    the fifth refused (429 with Retry-After) by either replica; with the default (memory://) each would let 4
    through."""
    replicas = [
        ServerProcess(folder, tmp_path / f"replica{n}.log", "--req-limit", "4", "--req-limit-storage", redis_url)
        for n in range(2)
    ]
    try:
        answers = [post_json(replicas[n % 2].url + "/detect", {"q": "the house"})[0] for n in range(4)]
        assert answers == [200] * 4
        for replica in replicas:
            status, headers, answer = request(replica.url + "/detect", b'{"q": "the house"}')
            assert (status, answer) == (429, {"error": "Slowdown: 4 per 1 minute"}) and int(headers["retry-after"]) > 0
    finally:
        for replica in replicas:
            assert replica.stop() == 0


def test_a_storage_that_does_not_answer_is_a_command_line_error(folder, tmp_path):
    port = free_port()  # nothing listens there
    storage = ["--req-limit-storage", f"redis://127.0.0.1:{port}"]
    command = [sys.executable, "-m", "vanilla_training.cli.serve", str(folder), *storage, "--port", "0"]
    finished = subprocess.run(command, capture_output=True, timeout=300)
    assert finished.returncode == 2
    assert f"--req-limit-storage redis://127.0.0.1:{port}: the storage does not answer" in finished.stderr.decode()


def test_options_come_from_the_environment_and_libretranslates_names():
    environ = {
        "LT_CHAR_LIMIT": "300",
        "LT_REQ_LIMIT_STORAGE": "redis://cache:6379",
        "LT_SUGGESTIONS": "true",
        "LT_API_KEYS": "true",  # LibreTranslate's switch, not our key file: not read
        "VANILLA_SERVE_PORT": "5100",
        "LT_PORT": "5200",  # ours wins
        "VANILLA_SERVE_BACKEND": "ctranslate2",
    }
    settings = settings_from(serve_parser(environ).parse_args(["model", "--char-limit", "400"]))
    assert (settings.char_limit, settings.req_limit_storage, settings.suggestions) == (400, "redis://cache:6379", True)
    assert (settings.port, settings.backend, settings.api_keys) == (5100, "ctranslate2", frozenset())
    with pytest.raises(SystemExit):
        serve_parser({"LT_REQ_LIMIT": "lots"})
