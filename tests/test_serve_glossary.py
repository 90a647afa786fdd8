"""The `glossary` field of POST /translate, on test_glossary's toy model served in-process: the answer equals
`vanilla-translate --glossary`'s, a request without the field is answered byte for byte as before, bad glossaries
and the limits get a 400 naming the problem, and a model that cannot place terms (the CTranslate2 backend) is
refused by name, never answered without the glossary."""

import json
import urllib.error
import urllib.request

import pytest
from test_glossary import GLOSSARY, SENTENCES, train_toy, write_tsv
from test_serve import InProcessServer

from vanilla_training.cli import translate as translate_command
from vanilla_training.serving.backends import TorchBackend
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import load_translator

TIMEOUT = 120


def post(url: str, fields: dict) -> tuple[int, bytes]:
    """(status, body bytes) of a JSON POST; an HTTP error status is returned, not raised."""
    call = urllib.request.Request(url, json.dumps(fields).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=TIMEOUT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return train_toy(tmp_path_factory.mktemp("serve-glossary") / "toy")


@pytest.fixture(scope="module")
def server(toy):
    settings = ServeSettings(cache_size=0, max_glossary_terms=3, char_limit=500)
    with InProcessServer([TorchBackend(load_translator(toy, "en", "de"), "fp32")], settings) as running:
        yield running


def command_output(toy, tmp_path, capsys, sentence: str) -> str:
    tsv = write_tsv(tmp_path / "terms.tsv", "en\tde\n" + "".join(f"{s}\t{t}\n" for s, t in GLOSSARY.items()))
    (tmp_path / "in.txt").write_text(sentence + "\n", encoding="utf-8")
    translate_command.main([str(toy), "--glossary", str(tsv), "--input", str(tmp_path / "in.txt")])
    return capsys.readouterr().out.removesuffix("\n")


def test_the_glossary_field_answers_as_the_command(server, toy, tmp_path, capsys):
    for sentence in SENTENCES:
        status, body = post(
            server.url + "/translate", {"q": sentence, "source": "en", "target": "de", "glossary": GLOSSARY}
        )
        assert status == 200
        answer = json.loads(body)
        assert answer == {"translatedText": command_output(toy, tmp_path, capsys, sentence), "glossaryNotPlaced": []}


def test_a_list_gets_one_answer_per_text_and_the_field_is_in_the_spec(server):
    status, body = post(
        server.url + "/translate",
        {"q": ["house", "one two"], "source": "en", "target": "de", "glossary": {"house": "Gebäude"}},
    )
    assert status == 200 and json.loads(body)["glossaryNotPlaced"] == [[], []]
    assert "Gebäude" in json.loads(body)["translatedText"][0]
    with urllib.request.urlopen(server.url + "/spec", timeout=TIMEOUT) as response:
        spec = json.loads(response.read())
    assert "glossary" in json.dumps(spec["paths"]["/translate"])


def test_a_request_without_glossary_is_unchanged_byte_for_byte(server, toy):
    """The answer without the field is the one a server without glossary support gives: the same bytes as with
    `glossary` absent from the code path (the batcher's translation, vanilla-translate's)."""
    translator = load_translator(toy)
    for sentence in SENTENCES:
        status, body = post(server.url + "/translate", {"q": sentence, "source": "en", "target": "de"})
        translation = translator.translate([sentence], progress=False)[0]
        expected = json.dumps({"translatedText": translation}, ensure_ascii=False, separators=(",", ":"))
        assert status == 200 and body == expected.encode()


@pytest.mark.parametrize(
    ("glossary", "message"),
    [
        ({"house": ""}, "term 1: the target term is empty"),
        ({"a": "b", "c": "d", "e": "f", "g": "h"}, "glossary: 4 terms, over the limit of 3"),
        ({"house": "Gebäude", "House": "Haus"}, "source term 'House' is given twice with different targets"),
        ({"house": "Haus " * 70}, "the target term 'Haus Haus"),
        ({"house": "x" * 500}, "request (510, glossary included) exceeds text limit (500)"),
        ([["house", "Gebäude"]], "glossary: not an object"),
    ],
)
def test_bad_glossaries_get_400_naming_the_problem(server, glossary, message):
    status, body = post(server.url + "/translate", {"q": "house", "source": "en", "target": "de", "glossary": glossary})
    assert status == 400 and message in json.loads(body)["error"]
    assert post(server.url + "/translate", {"q": "house", "source": "en", "target": "de"})[0] == 200  # still serving


def test_alternatives_with_a_glossary_are_refused(server):
    fields = {"q": "house", "source": "en", "target": "de", "glossary": GLOSSARY, "alternatives": 1}
    status, body = post(server.url + "/translate", fields)
    assert status == 400 and "a glossary cannot be given with alternatives" in json.loads(body)["error"]


def test_the_ctranslate2_backend_refuses_a_glossary_by_name(toy, tmp_path):
    pytest.importorskip("ctranslate2")
    from vanilla_training.serving.backends import CTranslate2Backend

    backend = CTranslate2Backend(load_translator(toy, "en", "de"), "float32", cache=tmp_path)
    with InProcessServer([backend], ServeSettings(cache_size=0)) as running:
        fields = {"q": "house", "source": "en", "target": "de"}
        status, body = post(running.url + "/translate", {**fields, "glossary": GLOSSARY})
        assert status == 400
        assert "en-de is translated by ctranslate2 float32 on cpu, which cannot place glossary terms" in body.decode()
        assert post(running.url + "/translate", fields)[0] == 200
