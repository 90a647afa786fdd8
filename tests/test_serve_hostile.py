"""The server against hostile and awkward requests, over stand-in models (no training: each test takes seconds): the
pysbd backtracking family with /health probed from another process, limits checked before any work, fair share of
the running batch, texts with nothing to translate, a list detected once, language aliases, bodies that must be 4xx,
a dead batcher, and the races of issue 50 (the tokenizer under two threads, the Endpoints handler under concurrent
calls, the CTranslate2 export of a Hub id's new revision)."""

import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_serve import InProcessServer, post_json, request

from vanilla_training.serving.parsing import ApiError, check_limits, json_fields, language_code
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import Translator

from helpers import toy_pairs

PROBE = """
import sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
slowest, end = 0.0, time.monotonic() + seconds
while time.monotonic() < end:
    started = time.monotonic()
    urllib.request.urlopen(url, timeout=60).read()
    slowest = max(slowest, time.monotonic() - started)
    time.sleep(0.02)
print(slowest)
"""


class CharacterTokenizer:
    """A stand-in tokenizer: a token for every 4 characters, and the end token."""

    model_max_length = 64

    def __call__(self, sentences: list[str], **options) -> dict:
        return {"input_ids": [[1] * (len(sentence) // 4 + 1) for sentence in sentences]}


class StepDecoder:
    """A continuous decoder whose sentences need a step per token, each step costing `seconds_per_token` for every
    source token in the batch (as a real decoder's step grows with its batch); answers `[src>tgt] sentence`."""

    beams = 1

    def __init__(self, tag: str, seconds_per_token: float = 0.0):
        self.tag, self.seconds_per_token = tag, seconds_per_token
        self.remaining: dict = {}
        self.tokens: dict = {}
        self.sentences: dict = {}

    def join(self, keys: list, sentences: list[str]) -> None:
        for key, sentence in zip(keys, sentences, strict=True):
            self.remaining[key] = self.tokens[key] = len(sentence) // 4 + 1
            self.sentences[key] = sentence

    def step(self) -> list:
        time.sleep(self.seconds_per_token * sum(self.tokens.values()))
        done = []
        for key in list(self.remaining):
            self.remaining[key] -= 1
            if self.remaining[key] <= 0:
                done.append((key, [f"{self.tag} {self.sentences.pop(key)}"]))
                del self.remaining[key], self.tokens[key]
        return done

    def drop(self, keys: set) -> None:
        for key in keys:
            for table in (self.remaining, self.tokens, self.sentences):
                table.pop(key, None)


class StandInBackend:
    """A backend for `source`-`target` that answers `[src>tgt] sentence` (batch by batch, or through `decoder`),
    recording the sentences it was given and, batch by batch, its batches."""

    lanes, workers, batch_sentences, description = 1, 1, None, "stand-in"

    def __init__(self, source: str, target: str, seconds_per_token: float | None = None):
        self.translator = Translator(None, CharacterTokenizer(), "stand-in", (source, target))
        self.tag = f"[{source}>{target}]"
        self.decoder = None if seconds_per_token is None else StepDecoder(self.tag, seconds_per_token)
        self.given: list[str] = []
        self.batches: list[list[str]] = []

    def translate(self, sentences: list[str], hypotheses: int = 1, beams: int | None = None) -> list[list[str]]:
        self.given += sentences
        self.batches.append(list(sentences))
        return [[f"{self.tag} {sentence}"] * hypotheses for sentence in sentences]


def probe_health(url: str, seconds: float) -> subprocess.Popen:
    """Another process asking `url`/health every 20 ms for `seconds`; it prints the slowest answer's time."""
    return subprocess.Popen([sys.executable, "-c", PROBE, url + "/health", str(seconds)], stdout=subprocess.PIPE)


def timed_post(url: str, fields) -> tuple[float, int, dict]:
    started = time.monotonic()
    status, answer = post_json(url, fields)
    return time.monotonic() - started, status, answer


def test_the_backtracking_family_answers_at_once_and_health_answers_during_it():
    """pysbd 0.3.4 takes 0.3 s on 7 groups of digits and 8 times more for each further group: up to 5,000
    characters the request is answered in seconds at most (9 groups alone would take 19 s), its text kept whole,
    and /health, probed from another process throughout, never waits that long."""
    backend = StandInBackend("en", "de")
    with InProcessServer([backend], ServeSettings()) as server:
        post_json(server.url + "/translate", {"q": "Warm. Up.", "source": "en", "target": "de"})
        probe = probe_health(server.url, 4.0)
        time.sleep(0.5)  # the probe is asking
        times = []
        for groups in (7, 9, 12, 1249):
            text = "..[" + " ".join(["111"] * groups) + "]"
            seconds, status, answer = timed_post(server.url + "/translate", {"q": text, "source": "en", "target": "de"})
            assert status == 200 and answer["translatedText"].replace("[en>de] ", "") == text
            times.append(seconds)
        slowest_health = float(probe.communicate(timeout=60)[0])
    assert max(times) < 3.0, times
    assert slowest_health < 1.0, slowest_health


def test_the_character_limit_sums_the_request_and_a_refusal_costs_no_splitting():
    """100 texts of 5,000 characters (each within the limit, 500,000 together) are refused by the summed limit at
    once: nothing is split or sent to the model (before, all were laid out on the event loop first: 9.4 s)."""
    backend = StandInBackend("en", "de")
    paragraph = ("In the beginning God created the heaven and the earth. Dr. Smith went home. " * 70)[:5000]
    with InProcessServer([backend], ServeSettings(batch_limit=100)) as server:
        seconds, status, answer = timed_post(
            server.url + "/translate", {"q": [paragraph] * 100, "source": "en", "target": "de"}
        )
        assert status == 400 and answer["error"] == "Invalid request: request (500000) exceeds text limit (5000)"
        assert seconds < 3.0, seconds
        assert backend.given == []
        status, _ = post_json(server.url + "/translate", {"q": [paragraph[:2500]] * 2, "source": "en", "target": "de"})
        assert status == 200


def test_check_limits_without_http():
    settings = ServeSettings(char_limit=10, batch_limit=2)
    check_limits(["12345", "12345"], True, settings)
    with pytest.raises(ApiError, match=r"request \(11\) exceeds text limit \(10\)"):
        check_limits(["12345", "123456"], True, settings)
    with pytest.raises(ApiError, match=r"request \(3\) exceeds text limit \(2\)"):
        check_limits(["a", "b", "c"], True, settings)


def test_a_short_request_is_answered_beside_a_long_one():
    """The `"y"*4999` case with a slow stand-in decoder (a step costs 0.1 ms per source token in the batch): the
    long request's 79 pieces overfill the budget of 512 tokens and take seconds; a one-sentence request sent
    while they decode is answered in a small part of that (before: after all of them, behind their pieces)."""
    backend = StandInBackend("en", "de", seconds_per_token=0.0001)
    long_text = "y" * 4999
    with InProcessServer([backend], ServeSettings(max_tokens=512, cache_size=0)) as server:
        results = {}

        def send_long():
            results["long"] = timed_post(server.url + "/translate", {"q": long_text, "source": "en", "target": "de"})

        sender = threading.Thread(target=send_long)
        sender.start()
        while not backend.decoder.remaining:
            time.sleep(0.005)
        time.sleep(0.2)  # the long request decodes
        short_seconds, status, answer = timed_post(
            server.url + "/translate", {"q": "Jesus wept.", "source": "en", "target": "de"}
        )
        sender.join(timeout=120)
    long_seconds, long_status, long_answer = results["long"]
    assert status == 200 and answer["translatedText"] == "[en>de] Jesus wept."
    assert long_status == 200 and long_answer["translatedText"].replace("[en>de] ", "") == long_text
    assert long_seconds > 2.0 and short_seconds < long_seconds / 4, (short_seconds, long_seconds)


def test_texts_with_nothing_to_translate_come_back_as_they_are():
    backend = StandInBackend("en", "de")
    with InProcessServer([backend], ServeSettings()) as server:
        status, answer = post_json(
            server.url + "/translate",
            {"q": ["😀🎉 🙂", "  \n ", "Jesus wept.", "!!! ..."], "source": "en", "target": "de"},
        )
        assert status == 200
        assert answer["translatedText"] == ["😀🎉 🙂", "  \n ", "[en>de] Jesus wept.", "!!! ..."]
        assert backend.given == ["Jesus wept."]
        status, answer = post_json(server.url + "/translate", {"q": "🙂", "source": "auto", "target": "de"})
        assert status == 200 and answer == {
            "translatedText": "🙂",
            "detectedLanguage": {"confidence": 0, "language": "en"},
        }


def test_a_list_is_detected_once_and_a_language_not_served_into_the_target_is_refused():
    """Two sources served into French: a list is detected once, as LibreTranslate detects a request, and every
    text goes to that language's model with the same detected language (a whole-number confidence); a Spanish
    text, alone or beside English, is refused, not translated as something else; /detect says Spanish, though no
    model translates it."""
    english = "In the beginning God created the heaven and the earth."
    german = "Im Anfang schuf Gott Himmel und Erde, und die Erde war wüst und leer."
    spanish = "En el principio creó Dios los cielos y la tierra, y la tierra estaba desordenada y vacía."
    with InProcessServer([StandInBackend("en", "fr"), StandInBackend("de", "fr")], ServeSettings()) as server:
        status, answer = post_json(
            server.url + "/translate", {"q": [english, "Hotel"], "source": "auto", "target": "fr"}
        )
        assert status == 200
        assert answer["translatedText"] == [f"[en>fr] {english}", "[en>fr] Hotel"]
        assert answer["detectedLanguage"][0] == answer["detectedLanguage"][1]
        assert answer["detectedLanguage"][0]["language"] == "en"
        assert type(answer["detectedLanguage"][0]["confidence"]) is int
        status, answer = post_json(
            server.url + "/translate", {"q": [german, "Hotel"], "source": "auto", "target": "fr"}
        )
        assert status == 200 and answer["translatedText"] == [f"[de>fr] {german}", "[de>fr] Hotel"]
        for q in (spanish, [english, spanish, spanish]):
            status, answer = post_json(server.url + "/translate", {"q": q, "source": "auto", "target": "fr"})
            assert (status, answer) == (
                400,
                {"error": "French (fr) is not available as a target language from Spanish (es)"},
            )
        status, answer = post_json(server.url + "/detect", {"q": spanish})
        assert status == 200 and answer[0]["language"] == "es" and answer[0]["confidence"] > 50
        assert all(type(ranked["confidence"]) is int for ranked in answer)


def test_language_codes_are_read_as_libretranslate_reads_them():
    assert [language_code(code) for code in ("EN", "pt-BR", "pb", "zh-Hans", "zh-Hant", "zt", "De")] == [
        "en",
        "pt",
        "pt",
        "zh",
        "zt",
        "zt",
        "de",
    ]
    backends = [StandInBackend("en", "pt"), StandInBackend("en", "zh")]
    with InProcessServer(backends, ServeSettings()) as server:
        for source, target, tag in (("EN", "pt-BR", "[en>pt]"), ("En", "zh-Hans", "[en>zh]"), ("en", "PT", "[en>pt]")):
            status, answer = post_json(
                server.url + "/translate", {"q": "Jesus wept.", "source": source, "target": target}
            )
            assert (status, answer) == (200, {"translatedText": f"{tag} Jesus wept."}), (source, target)
        for target in ("zh-Hant", "zt", "ZH-HANT"):  # Traditional Chinese: refused, not served as Simplified
            status, answer = post_json(
                server.url + "/translate", {"q": "Jesus wept.", "source": "en", "target": target}
            )
            assert (status, answer) == (400, {"error": "zt is not supported"}), target


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"q": "\\ud800 Jesus wept.", "source": "en", "target": "de"}',
            "a lone surrogate (\\ud800) is not a character",
        ),
        (b'{"q": "x", "source": "\\udfff", "target": "de"}', "a lone surrogate (\\udfff) is not a character"),
        (b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "source": "en", "target": "de"}', "nested too deeply"),
        (b'{"q": {"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}", "nested too deeply"),
    ],
)
def test_hostile_json_bodies_get_a_400_naming_the_problem_with_cors(body, message):
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        call = urllib.request.Request(
            server.url + "/translate", data=body, headers={"Content-Type": "application/json", "Origin": "http://page"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(call, timeout=60)
        status, headers, answer = refused.value.code, refused.value.headers, json.loads(refused.value.read())
    assert status == 400 and message in answer["error"], answer
    assert headers["access-control-allow-origin"] == "*"


def test_json_fields_without_http():
    assert json_fields(b'{"q": "\\ud83d\\ude00"}') == {"q": "😀"}  # a surrogate pair is one character
    with pytest.raises(ApiError, match="lone surrogate"):
        json_fields(b'{"q": ["ok", "\\ud83d"]}')


def test_a_request_bigger_than_the_queue_is_refused_for_good_not_asked_to_retry():
    with InProcessServer([StandInBackend("en", "de")], ServeSettings(max_queue=4)) as server:
        status, answer = post_json(
            server.url + "/translate", {"q": "One. Two. Three. Four. Five.", "source": "en", "target": "de"}
        )
        assert status == 400 and answer["error"] == "Invalid request: request (5 sentences) exceeds queue size (4)"
        status, _ = post_json(
            server.url + "/translate", {"q": "One. Two. Three. Four.", "source": "en", "target": "de"}
        )
        assert status == 200


def test_a_dead_batcher_turns_health_to_503_and_fails_requests():
    """A batcher's worker that ends with an error (here the decoder's `drop`, which it calls outside the model
    thread's error handling) fails the request waiting for it with a 500 naming why, and /health answers 503."""
    backend = StandInBackend("en", "de", seconds_per_token=0.0)

    def broken(keys: set) -> None:
        raise MemoryError("the decoder is gone")

    with InProcessServer([backend], ServeSettings()) as server:
        assert request(server.url + "/health")[0] == 200
        backend.decoder.drop = broken
        status, answer = post_json(server.url + "/translate", {"q": "Jesus wept.", "source": "en", "target": "de"})
        assert status == 500 and "the batcher stopped: MemoryError: the decoder is gone" in answer["error"]
        status, _, health = request(server.url + "/health")
        assert status == 503 and "en-de: the batcher stopped: MemoryError: the decoder is gone" in health["error"]
        status, answer = post_json(
            server.url + "/translate", {"q": "Jesus wept again.", "source": "en", "target": "de"}
        )
        assert status == 500 and "the batcher stopped" in answer["error"]


def test_the_requests_side_counts_tokens_with_a_tokenizer_of_its_own():
    """A fast tokenizer keeps its padding settings between calls: one object called padded from one thread (the
    model's) and unpadded from another (the requests') fails some padded calls ("Unable to create tensor").
    The requests' side of a served pair counts on its own copy: 3,000 padded calls beside it all succeed."""
    from vanilla_training.serving.service import Pair
    from vanilla_training.tokenizer import train_joint_bpe

    texts = [text for pair in toy_pairs(random.Random(0), 300) for text in pair]
    tokenizer = train_joint_bpe(texts, vocab_size=80, model_max_length=64)
    backend = StandInBackend("en", "de")
    backend.translator = Translator(None, tokenizer, "toy", ("en", "de"))
    pair = Pair(backend, "en", "de")
    failures, done = [], threading.Event()

    def requests_side():
        rng = random.Random(1)
        while not done.is_set():
            pair.token_counts(rng.sample(texts, 4))
            pair.fits(rng.choice(texts))

    counting = threading.Thread(target=requests_side)
    counting.start()
    rng = random.Random(2)
    try:
        for _ in range(3000):
            try:
                backend.translator.tokenizer(rng.sample(texts, 8), return_tensors="pt", padding=True)
            except ValueError as error:
                failures.append(str(error))
    finally:
        done.set()
        counting.join()
    assert failures == []


def test_the_ctranslate2_export_of_a_hub_id_follows_its_revision(tmp_path, monkeypatch):
    """A model given by Hub id is exported from the snapshot of the revision loaded: a new revision (new weights)
    is exported anew, and the old one's export is found again."""
    from modeling_vanilla import export_ctranslate2 as exporter
    from vanilla_training import translator as translator_module
    from vanilla_training.serving.backends import ct2_model_folder

    snapshots = {}
    for revision, weights in (("1" * 40, b"first"), ("2" * 40, b"second")):
        folder = tmp_path / "hub" / "models--user--toy" / "snapshots" / revision
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(weights)
        snapshots[revision] = folder
    current, exported = ["1" * 40], []
    monkeypatch.setattr(translator_module, "snapshot_download", lambda model, **_: str(snapshots[current[0]]))

    def export(folder, destination, quantization, force):
        exported.append(Path(folder))
        destination.mkdir(parents=True)
        (destination / "model.bin").write_bytes(b"")

    monkeypatch.setattr(exporter, "export_ctranslate2", export)
    translator = Translator(None, None, "user/toy", ("en", "de"))
    first = ct2_model_folder(translator, "int8", tmp_path / "cache")
    current[0] = "2" * 40
    second = ct2_model_folder(translator, "int8", tmp_path / "cache")
    current[0] = "1" * 40
    again = ct2_model_folder(translator, "int8", tmp_path / "cache")
    assert first != second and again == first
    assert exported == [snapshots["1" * 40], snapshots["2" * 40]]
