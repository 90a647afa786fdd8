"""One endpoint, every direction: the three-language toy model of test_multilingual served by vanilla-serve lists its
6 directions in /languages and translates each as `Translator.translate(..., target_lang=...)` does, with the torch
and the CTranslate2 backend; `source=auto` chooses among the served languages; and two models of one direction each
serve the direction between them by a pivot, equal to translating twice."""

from pathlib import Path

import pytest
from test_multilingual import LANGUAGES, SENTENCES, save_toy_model, say
from test_serve import InProcessServer, post_json, request

from modeling_vanilla import VanillaForConditionalGeneration
from vanilla_training.corpus import multilingual
from vanilla_training.serving.backends import CTranslate2Backend, TorchBackend
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import Translator, load_translator

pytestmark = pytest.mark.decoding

DIRECTIONS = multilingual.directions(LANGUAGES)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The toy model's folder (trained as test_multilingual's), decoding by the paper's beam search."""
    return save_toy_model(tmp_path_factory.mktemp("multilingual") / "model")


def served_translations(url: str, source: str, target: str) -> list[str]:
    status, answer = post_json(
        url + "/translate", {"q": [say(s, source) for s in SENTENCES], "source": source, "target": target}
    )
    assert status == 200, answer
    return answer["translatedText"]


def test_torch_serves_every_direction_and_detects_among_the_models_languages(folder: Path) -> None:
    translator = load_translator(folder)
    with InProcessServer([TorchBackend(load_translator(folder), "fp32")], ServeSettings()) as server:
        assert request(server.url + "/languages")[2] == [
            {"code": "de", "name": "German", "targets": ["en", "fr"]},
            {"code": "en", "name": "English", "targets": ["de", "fr"]},
            {"code": "fr", "name": "French", "targets": ["de", "en"]},
        ]
        for source, target in DIRECTIONS:
            expected = translator.translate([say(s, source) for s in SENTENCES], target_lang=target, progress=False)
            assert served_translations(server.url, source, target) == expected, (source, target)
            assert expected == [say(s, target) for s in SENTENCES]  # the toy learnt its dictionary
        for source, target in DIRECTIONS:
            # "das rote Haus" is Lithuanian to py3langid over all its languages; among the model's, German
            text = say(["the", "red", "house"], source)
            status, answer = post_json(server.url + "/translate", {"q": text, "source": "auto", "target": target})
            assert status == 200 and answer["detectedLanguage"]["language"] == source, (source, answer)
            assert answer["translatedText"] == translator.translate([text], target_lang=target, progress=False)[0]
        spanish = "Y en el principio creó Dios los cielos y la tierra."  # 89% Spanish: refused, not read as another
        assert post_json(server.url + "/translate", {"q": spanish, "source": "auto", "target": "en"}) == (
            400,
            {"error": "English (en) is not available as a target language from Spanish (es)"},
        )


def test_ctranslate2_serves_every_direction(folder: Path, tmp_path: Path) -> None:
    translator = load_translator(folder)
    backend = CTranslate2Backend(load_translator(folder), "float32", tmp_path / "ct2")
    with InProcessServer([backend], ServeSettings()) as server:
        assert len([t for code in request(server.url + "/languages")[2] for t in code["targets"]]) == 6
        for source, target in DIRECTIONS:
            expected = translator.translate([say(s, source) for s in SENTENCES], target_lang=target, progress=False)
            assert served_translations(server.url, source, target) == expected, (source, target)


def one_direction(folder: Path, source: str, target: str) -> Translator:
    """The toy as a model of one direction: no languages of its own, its target's token forced by its generation
    config (as a model trained for one pair knows its target)."""
    model = VanillaForConditionalGeneration.from_pretrained(folder).eval()
    tokenizer = load_translator(folder).tokenizer
    model.generation_config.forced_bos_token_id = tokenizer.get_lang_id(target)
    return Translator(model, tokenizer, f"{folder}:{source}-{target}", (source, target))


def test_two_single_pair_models_serve_the_direction_between_them_by_a_pivot(folder: Path) -> None:
    german_english, english_french = one_direction(folder, "de", "en"), one_direction(folder, "en", "fr")
    backends = [TorchBackend(german_english, "fp32"), TorchBackend(english_french, "fp32")]
    with InProcessServer(backends, ServeSettings()) as server:
        assert request(server.url + "/languages")[2] == [
            {"code": "de", "name": "German", "targets": ["en", "fr"]},
            {"code": "en", "name": "English", "targets": ["fr"]},
            {"code": "fr", "name": "French", "targets": []},
        ]
        german = [say(s, "de") for s in SENTENCES]
        twice = english_french.translate(german_english.translate(german, progress=False), progress=False)
        assert served_translations(server.url, "de", "fr") == twice
        assert twice == [say(s, "fr") for s in SENTENCES]
        assert post_json(server.url + "/translate", {"q": "drei", "source": "fr", "target": "de"}) == (
            400,
            {"error": "German (de) is not available as a target language from French (fr)"},
        )
