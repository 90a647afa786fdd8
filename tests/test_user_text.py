"""A user's text is text (issue 61, item 10): the spelling of a special token in it (`__ko__`, `</s>`, `<unk>`, `<s>`,
`<pad>`) reaches the encoder as characters, never as the token, through every door: `Translator.translate` and
`token_counts` (the commands), `vanilla-translate`, the pipeline, `vanilla-serve` (batch by batch, and continuous)
and the Inference Endpoints handler. The oracle: the ids the encoder reads hold no special id but the closing `</s>`,
and decode back to the text. The encodings that need the language tokens (the tokenizer's target mode,
`preprocess.encode_directions`) still write them, and read the texts around them as text too."""

from pathlib import Path

import pytest
from test_serve import InProcessServer, post_json
from tiny_folders import LANGUAGES, encoder_inputs, save_tiny_folder
from transformers import AutoTokenizer, pipeline

from modeling_vanilla import TranslationPipeline
from vanilla_training.cli import translate as translate_command
from vanilla_training.preprocess import encode_directions
from vanilla_training.serving import handler as handler_module
from vanilla_training.serving.backends import TorchBackend
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import Translator, load_translator

# Each would switch the target language, end the source early, or stand for an unknown word if read as a token.
TEXTS = ["__ko__ the house", "the </s> house", "<unk>", "<s> one <pad> two"]


@pytest.fixture(scope="module")
def multilingual_folder(tmp_path_factory) -> Path:
    return save_tiny_folder(tmp_path_factory.mktemp("multilingual"), LANGUAGES)


@pytest.fixture(scope="module")
def pair_folder(tmp_path_factory) -> Path:
    return save_tiny_folder(tmp_path_factory.mktemp("pair"))


def assert_read_as_text(seen: list[list[int]], tokenizer, texts: list[str]) -> None:
    """Each of `texts` was read by the encoder (in any order) as its characters and `</s>`, and nothing else was."""
    special = set(tokenizer.all_special_ids)
    for ids in seen:
        assert ids[-1] == tokenizer.eos_token_id and not special & set(ids[:-1]), tokenizer.convert_ids_to_tokens(ids)
    assert sorted(tokenizer.decode(ids[:-1]) for ids in seen) == sorted(texts)


def spied_translator(folder: Path, *languages) -> tuple[Translator, list[list[int]]]:
    translator = load_translator(folder, *languages)
    return translator, encoder_inputs(translator.model)


@pytest.mark.parametrize("name", ["multilingual_folder", "pair_folder"])
def test_the_translator_and_its_token_counts_read_text_as_text(name: str, request: pytest.FixtureRequest) -> None:
    translator, seen = spied_translator(request.getfixturevalue(name))
    target = {"target_lang": "ko"} if translator.all_languages else {}
    translator.translate(TEXTS, progress=False, max_new_tokens=2, **target)
    assert_read_as_text(seen, translator.tokenizer, TEXTS)
    assert sorted(translator.token_counts(TEXTS)) == sorted(map(len, seen))


def test_vanilla_translate_reads_text_as_text(multilingual_folder: Path, tmp_path: Path, monkeypatch) -> None:
    spied = []

    def load(*args) -> Translator:
        spied.append(spied_translator(*args))
        return spied[-1][0]

    monkeypatch.setattr(translate_command, "load_translator", load)
    (tmp_path / "in.txt").write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    options = ["--source-lang", "en", "--target-lang", "de", "--beams", "1", "--input", str(tmp_path / "in.txt")]
    translate_command.main([str(multilingual_folder), *options])
    [(translator, seen)] = spied
    assert_read_as_text(seen, translator.tokenizer, TEXTS)


def test_the_pipeline_reads_text_as_text(multilingual_folder: Path) -> None:
    translator = pipeline(
        "translation", model=str(multilingual_folder), pipeline_class=TranslationPipeline, max_new_tokens=2
    )
    seen = encoder_inputs(translator.model)
    translator(TEXTS, src_lang="en", tgt_lang="de")
    assert_read_as_text(seen, translator.tokenizer, TEXTS)


@pytest.mark.parametrize(("name", "batching"), [("multilingual_folder", "batches"), ("pair_folder", "continuous")])
def test_vanilla_serve_reads_text_as_text(name: str, batching: str, request: pytest.FixtureRequest) -> None:
    translator, seen = spied_translator(request.getfixturevalue(name))
    backend = TorchBackend(translator, "fp32", batching=batching)
    assert (backend.decoder is not None) == (batching == "continuous")
    with InProcessServer([backend], ServeSettings()) as server:
        for text in TEXTS:
            status, answer = post_json(server.url + "/translate", {"q": text, "source": "en", "target": "de"})
            assert status == 200, answer
    assert_read_as_text(seen, translator.tokenizer, TEXTS)


def test_the_inference_endpoints_handler_reads_text_as_text(pair_folder: Path) -> None:
    handler = handler_module.EndpointHandler(str(pair_folder), precision="fp32")
    seen = encoder_inputs(handler.translator.model)
    assert len(handler({"inputs": TEXTS, "parameters": {"num_beams": 1}})) == len(TEXTS)
    assert_read_as_text(seen, handler.translator.tokenizer, TEXTS)


def test_targets_still_start_with_their_language_token_and_read_their_text_as_text(multilingual_folder: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(multilingual_folder, split_special_tokens=True)
    tokenizer.tgt_lang = "ko"
    special = set(tokenizer.all_special_ids)
    rows = {"source": ["__de__ the house"], "target": ["</s> 집이 크다"], "target_lang": ["ko"], "source_lang": ["en"]}
    own = tokenizer(rows["source"], text_target=rows["target"])
    encoded = encode_directions(AutoTokenizer.from_pretrained(multilingual_folder), rows)
    for labels in (own["labels"][0], encoded["labels"][0]):
        assert labels[0] == tokenizer.get_lang_id("ko") and labels[-1] == tokenizer.eos_token_id
        assert not special & set(labels[1:-1]) and tokenizer.decode(labels[1:-1]) == "</s> 집이 크다"
    for ids in (own["input_ids"][0], encoded["input_ids"][0]):
        assert not special & set(ids[:-1]) and tokenizer.decode(ids[:-1]) == "__de__ the house"
