"""A multilingual model through every door (issue 61, items 11, 12 and the handler's part of 9), on an untrained tiny
folder of en, de and ko (`tiny_folders.py`): `generate` refuses a `forced_bos_token_id` that is no language of the
model, naming them, and teaches `tokenizer.get_lang_id`; the tokenizer has M2M-100's `lang_code_to_id` and
`id_to_lang_token`; the Inference Endpoints handler translates into the `target_lang` of its parameters, within
vanilla-serve's limits and one splitting budget for all the texts of a request; `vanilla-evaluate` scores files in
the direction named, with the target's BLEU tokenizer; and a Vanilla folder whose tokenizer names no class loads
the default tokenizer, not the multilingual one."""

import json
import re
from pathlib import Path

import pytest
import sacrebleu
import torch
from tiny_folders import LANGUAGES, save_tiny_folder
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vanilla import VanillaConfig, VanillaTokenizer
from vanilla_training.cli import evaluate as evaluate_command
from vanilla_training.serving import handler as handler_module
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.translator import load_translator, translate

SOURCES = ["the house is big", "one two three"]
REFERENCES = ["집이 크다", "하나 둘 셋"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_tiny_folder(tmp_path_factory.mktemp("multilingual"), LANGUAGES)


@pytest.fixture(scope="module")
def handler(folder: Path) -> handler_module.EndpointHandler:
    return handler_module.EndpointHandler(str(folder), precision="fp32")


def test_generate_refuses_a_forced_bos_token_id_that_is_no_language_of_the_model(folder: Path) -> None:
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    inputs = tokenizer(SOURCES[:1], return_tensors="pt")
    italian = tokenizer.convert_tokens_to_ids("__it__")  # no Italian here: <unk>'s id
    assert italian == tokenizer.unk_token_id
    for forced in (italian, tokenizer.eos_token_id, len(tokenizer) - 1):
        with pytest.raises(
            ValueError,
            match=rf"forced_bos_token_id={forced} is not the token of a language of this "
            r"model \(en, de, ko\): give the target language's token as forced_bos_token_id="
            r"tokenizer.get_lang_id\(language\)",
        ):
            model.generate(**inputs, forced_bos_token_id=forced, max_new_tokens=2)
    model.generation_config.forced_bos_token_id = italian  # in the generation config, likewise
    with pytest.raises(ValueError, match="forced_bos_token_id=1 is not the token of a language"):
        model.generate(**inputs, max_new_tokens=2)
    for language in LANGUAGES:  # each language's own token is taken, and starts the translation
        output = model.generate(**inputs, forced_bos_token_id=tokenizer.get_lang_id(language), max_new_tokens=2)
        assert tokenizer.convert_ids_to_tokens(output[0, 1].item()) == f"__{language}__"


def test_the_refusal_without_a_target_teaches_a_call_that_works(folder: Path) -> None:
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match="this model translates into en, de, ko") as refused:
        model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), max_new_tokens=2)
    taught = re.search(r"forced_bos_token_id=(tokenizer\.get_lang_id\('\w+'\))\)", str(refused.value)).group(1)
    forced = eval(taught, {"tokenizer": tokenizer})  # the example the message gives, run as written
    output = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), forced_bos_token_id=forced, max_new_tokens=2)
    assert tokenizer.convert_ids_to_tokens(output[0, 1].item()) == "__en__"


@pytest.mark.parametrize("languages", [LANGUAGES, ["ko", "fr", "en", "de"]])
def test_language_ids_are_m2m_100_s_and_the_config_s(languages: list[str]) -> None:
    """`lang_code_to_id` and `id_to_lang_token` as M2M-100's tokenizer has them ("ko" -> the id of "__ko__" ->
    "__ko__"), equal to the ids `generate` takes from the config (`language_token_ids`); `get_lang_id` refuses a
    language the model does not have, naming the choices."""
    tokenizer = train_joint_bpe(["a b c", "d e f"], vocab_size=60, model_max_length=16, languages=languages)
    expected = {language: tokenizer.convert_tokens_to_ids(f"__{language}__") for language in languages}
    assert len(set(expected.values())) == len(languages) and tokenizer.unk_token_id not in expected.values()
    assert tokenizer.lang_code_to_id == expected == VanillaConfig(languages=languages).language_token_ids
    assert tokenizer.id_to_lang_token == {ids: f"__{language}__" for language, ids in expected.items()}
    assert all(tokenizer.get_lang_id(language) == expected[language] for language in languages)
    with pytest.raises(
        ValueError, match=f"language='it' is not a language of this model; choose one of {', '.join(languages)}"
    ):
        tokenizer.get_lang_id("it")
    assert VanillaConfig().language_token_ids == {}


def forced_targets(model) -> list[int | None]:
    """A list that fills with the `forced_bos_token_id` of each later `generate` call of `model`."""
    forced, generate = [], model.generate

    def recorded(*args, **kwargs):
        forced.append(kwargs.get("forced_bos_token_id"))
        return generate(*args, **kwargs)

    model.generate = recorded
    return forced


def test_the_handler_translates_into_the_target_lang_of_its_parameters(folder: Path, handler) -> None:
    translator = load_translator(folder)
    forced = forced_targets(handler.translator.model)
    for target in ("ko", "de"):
        answers = handler(
            {"inputs": SOURCES, "parameters": {"target_lang": target, "source_lang": "en", "num_beams": 1}}
        )
        expected = [
            translator.translate([text], target_lang=target, num_beams=1, progress=False)[0] for text in SOURCES
        ]
        assert answers == [{"translation_text": text} for text in expected]
        assert forced[-2:] == [translator.tokenizer.get_lang_id(target)] * 2


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({}, 'this model translates into any of en, de, ko: give "target_lang" in "parameters"'),
        ({"target_lang": "fr"}, "target_lang 'fr' is not a language of this model; choose one of en, de, ko"),
        ({"target_lang": "ko", "source_lang": "it"}, "source_lang 'it' is not a language of this model"),
        ({"target_lang": "ko", "source_lang": "ko"}, '"source_lang" and "target_lang" are both \'ko\''),
    ],
)
def test_the_handler_refuses_a_direction_the_model_lacks_by_name(handler, parameters: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        handler({"inputs": "the house", "parameters": parameters})


def test_the_handler_holds_vanilla_serve_s_limits_before_any_work(handler, monkeypatch) -> None:
    defaults = ServeSettings()
    assert (handler_module.TEXT_LIMIT, handler_module.CHAR_LIMIT, handler_module.SENTENCE_LIMIT) == (
        defaults.batch_limit,
        defaults.char_limit,
        defaults.sentence_limit,
    )
    forced = forced_targets(handler.translator.model)
    target = {"target_lang": "ko"}
    for inputs, message in [
        (["a"] * 101, '"inputs" holds 101 texts, more than the limit of 100'),
        (["a" * 2500, "b" * 2501], '"inputs" holds 5,001 characters, more than the limit of 5,000'),
        (
            ["\n".join(["one"] * 300), "\n".join(["two"] * 201)],
            '"inputs" holds 501 sentences, more than the limit of 500',
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            handler({"inputs": inputs, "parameters": target})
    assert forced == []  # nothing was translated
    budgets = []
    layout = handler_module.layout

    def recorded(text, text_format, language, fits, budget=None):
        budgets.append(budget)
        return layout(text, text_format, language, fits, budget)

    monkeypatch.setattr(handler_module, "layout", recorded)
    handler({"inputs": ["one. Two three.", "three two. One."], "parameters": {**target, "num_beams": 1}})
    assert len(budgets) == 2 and budgets[0] is not None and budgets[0] is budgets[1]  # one budget for the request


def evaluate(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """`vanilla-evaluate argv` in this process: its exit status, standard output and standard error."""
    try:
        evaluate_command.main(argv)
        status = 0
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def test_vanilla_evaluate_scores_a_multilingual_model_in_the_direction_named(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "test.en").write_text("".join(f"{line}\n" for line in SOURCES), encoding="utf-8")
    (tmp_path / "test.ko").write_text("".join(f"{line}\n" for line in REFERENCES), encoding="utf-8")
    rows = [{"translation": {"en": s, "ko": r}} for s, r in zip(SOURCES, REFERENCES, strict=True)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        predictions = translate(model, tokenizer, SOURCES, num_beams=1, forced_bos_token_id=tokenizer.get_lang_id("ko"))
    bleu = sacrebleu.corpus_bleu(predictions, [REFERENCES], tokenize="char")  # Korean's tokenizer
    files = {
        "plain": ["--source", str(tmp_path / "test.en"), "--reference", str(tmp_path / "test.ko")],
        "jsonl": ["--test-file", str(tmp_path / "test.jsonl")],
    }
    for test in files.values():
        status, out, err = evaluate([str(folder), *test, "--beams", "1", "--json"], capsys)
        assert status == 2 and "translates between any two of en, de, ko: name the test set's direction" in err, err
        assert "records no languages" not in err and "Traceback" not in err
        status, out, err = evaluate(
            [str(folder), *test, "--source-lang", "en", "--target-lang", "ko", "--beams", "1", "--json"], capsys
        )
        assert status == 0, err
        scores = json.loads(out)
        assert scores["sentences"] == 2 and "tok:char" in scores["bleu"]["signature"]
        assert scores["bleu"]["score"] == pytest.approx(bleu.score)


def test_a_vanilla_folder_whose_tokenizer_names_no_class_loads_the_default_tokenizer(
    tmp_path: Path, folder: Path
) -> None:
    """Before, AutoTokenizer mapped every Vanilla config to the multilingual class, whose target mode then failed."""
    pair = save_tiny_folder(tmp_path / "pair")
    settings = json.loads((pair / "tokenizer_config.json").read_text())
    settings.pop("tokenizer_class")
    (pair / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer = AutoTokenizer.from_pretrained(pair)
    assert not isinstance(tokenizer, VanillaTokenizer)
    encoded = tokenizer("the house", text_target="the house")
    assert encoded["labels"] == encoded["input_ids"] and encoded["labels"][-1] == tokenizer.eos_token_id
    assert isinstance(AutoTokenizer.from_pretrained(folder), VanillaTokenizer)  # a multilingual folder's class
