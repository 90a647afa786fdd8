"""One notion of a direction (`corpus.Direction`), and the languages of a trained folder read by one function
(`translator.trained_languages`), each file once, even where `vanilla-translate --target-lang` checks them first."""

import json
from collections import Counter
from pathlib import Path

import pytest

from vanilla_training import translator
from vanilla_training.cli import translate as translate_command
from vanilla_training.corpus import Direction, multilingual, parse_pair
from vanilla_training.evaluation import score_directions
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.translator import TrainedLanguages, trained_languages

from helpers import tiny_model


def test_a_direction_is_text_a_tuple_and_json_as_before():
    direction = Direction.parse("ko-ar")
    assert (direction.source, direction.target) == ("ko", "ar") and str(direction) == f"{direction}" == "ko-ar"
    source, target = direction
    assert (source, target) == direction and hash(direction) == hash(("ko", "ar"))
    assert json.dumps({"languages": direction}) == '{"languages": ["ko", "ar"]}'
    for text in ("en", "en-de-fr", "-de", "en-", "", None):
        with pytest.raises(ValueError, match="is not of the form SRC-TGT"):
            Direction.parse(text)


def test_training_evaluation_and_the_corpus_speak_of_directions():
    assert parse_pair("de-fr") == Direction("de", "fr") and type(parse_pair("de-fr")) is Direction
    assert multilingual.directions(["en", "de"]) == [Direction("en", "de"), Direction("de", "en")]
    assert all(type(direction) is Direction for direction in multilingual.directions(["en", "de", "fr"]))
    rows = {"source_lang": ["en", "de"], "target_lang": ["de", "en"], "target": ["ein Haus", "a house"]}
    assert list(score_directions(rows, ["ein Haus", "a house"])) == ["en-de", "de-en"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny model saved three times: recording a pair (training_results.json), several languages (its config),
    nothing (as a converted model)."""
    root = tmp_path_factory.mktemp("trained")
    texts = ["the house is red", "das Haus ist rot", "la maison est rouge"] * 20
    folders = {}
    for name in ("pair", "multilingual", "converted"):
        model = tiny_model()
        languages = ["en", "de", "fr"] if name == "multilingual" else []
        if languages:
            model.config.languages = languages
        folders[name] = root / name
        model.save_pretrained(folders[name])
        train_joint_bpe(texts, vocab_size=60, languages=languages).save_pretrained(folders[name])
    results = {"languages": {"source": "en", "target": "de"}}
    (folders["pair"] / translator.RESULTS).write_text(json.dumps(results), encoding="utf-8")
    return folders


def test_the_languages_of_any_trained_folder(folders):
    assert trained_languages(folders["pair"]) == TrainedLanguages(direction=Direction("en", "de"))
    assert trained_languages(folders["multilingual"]) == TrainedLanguages(languages=("en", "de", "fr"))
    assert not trained_languages(folders["converted"])


def test_vanilla_translate_reads_each_file_once(folders, monkeypatch):
    reads = Counter()

    def counted(folder, name, **options):
        reads[name] += 1
        return cached_file(folder, name, **options)

    cached_file = translator.cached_file
    monkeypatch.setattr(translator, "cached_file", counted)
    parser = translate_command.build_parser()
    args = parser.parse_args([str(folders["pair"]), "--target-lang", "de"])
    loaded = translate_command.load_checked_translator(args, parser)
    assert loaded.languages == ("en", "de") and reads == {"config.json": 1, translator.RESULTS: 1}
    reads.clear()
    args = parser.parse_args([str(folders["multilingual"]), "--source-lang", "fr", "--target-lang", "en"])
    assert translate_command.load_checked_translator(args, parser).languages == ("fr", "en")
    assert reads == {"config.json": 1}
