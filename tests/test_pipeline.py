"""`pipeline("translation")` on transformers 5: `TranslationPipeline` against `model.generate`, its defined edge cases,
the folder that `save_pretrained` writes for it, and remote code in a process where the package is not importable."""

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import pipeline

from modeling_vanilla import TranslationPipeline, VanillaConfig, VanillaForConditionalGeneration
from vanilla_training.tokenizer import train_joint_bpe

from helpers import toy_pairs, train_on_toy_pairs

IN_DOMAIN = ["one two three", "the big red house", "house", "two two one big the red three house big"]
UNKNOWN = "hello world"  # words the model never saw: it translates them up to the length limit
MAX_LENGTH = 24  # the tokenizer's model_max_length


@pytest.fixture(scope="module")
def translator() -> tuple[VanillaForConditionalGeneration, object]:
    """A tiny model trained for a few seconds on the word-for-word toy task, and its tokenizer: it translates
    in-domain sentences and stops, which makes comparisons meaningful (random weights repeat one token)."""
    rng = random.Random(0)
    pairs = toy_pairs(rng, 300, min_words=1, max_words=6)
    tokenizer = train_joint_bpe([text for pair in pairs for text in pair], vocab_size=80, model_max_length=MAX_LENGTH)
    torch.manual_seed(0)
    config = VanillaConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
    )
    return train_on_toy_pairs(VanillaForConditionalGeneration(config), tokenizer, pairs, rng), tokenizer


@pytest.fixture(scope="module")
def pipe(translator) -> TranslationPipeline:
    model, tokenizer = translator
    return TranslationPipeline(model=model, tokenizer=tokenizer)


def generated(translator, texts: list[str], **options) -> list[str]:
    """`model.generate` on `texts` one at a time, decoded: what the pipeline must give."""
    model, tokenizer = translator
    out = []
    for text in texts:
        inputs = tokenizer(text, return_tensors="pt", truncation=True).to(model.device)  # a pipeline may move it
        with torch.no_grad():
            ids = model.generate(**inputs, **options)
        out.extend(tokenizer.batch_decode(ids, skip_special_tokens=True))
    return out


def texts_of(result: list[dict[str, str]]) -> list[str]:
    assert all(list(r) == ["translation_text"] for r in result)
    return [r["translation_text"] for r in result]


def test_a_string_gives_what_generate_gives(pipe, translator):
    for text in [*IN_DOMAIN, UNKNOWN]:
        result = pipe(text)
        assert isinstance(result, list) and len(result) == 1
        assert texts_of(result) == generated(translator, [text])
    assert texts_of(pipe("the big red house")) == ["das große rote Haus"]  # it did learn the task


def test_a_list_gives_one_dict_per_input_and_batches_like_one_by_one(pipe, translator):
    expected = generated(translator, IN_DOMAIN)
    assert texts_of(pipe(IN_DOMAIN)) == expected
    assert texts_of(pipe(IN_DOMAIN, batch_size=3)) == expected
    # an input that runs to the length limit: in a batch the limit follows the longest input, so fix it
    texts = [*IN_DOMAIN, UNKNOWN]
    assert texts_of(pipe(texts, batch_size=5, max_new_tokens=9)) == generated(translator, texts, max_new_tokens=9)
    assert pipe([]) == []


@pytest.mark.parametrize(
    "options",
    [
        {"num_beams": 1},
        {"num_beams": 3, "length_penalty": 2.0, "max_new_tokens": 4},
        {"num_beams": 2, "early_stopping": False, "no_repeat_ngram_size": 1},
        {"max_length": 3},
    ],
)
def test_generation_options_pass_through(pipe, translator, options):
    assert texts_of(pipe([*IN_DOMAIN, UNKNOWN], batch_size=2, **options)) == generated(
        translator, [*IN_DOMAIN, UNKNOWN], **options
    )


def test_sampling_passes_through(pipe, translator):
    torch.manual_seed(3)
    sampled = texts_of(pipe(UNKNOWN, do_sample=True, num_beams=1, top_k=5, max_new_tokens=6))
    torch.manual_seed(3)
    assert sampled == generated(translator, [UNKNOWN], do_sample=True, num_beams=1, top_k=5, max_new_tokens=6)


def test_generate_outputs_as_a_dict_give_the_same_translations(pipe):
    assert pipe(IN_DOMAIN, batch_size=2, return_dict_in_generate=True, output_scores=True) == pipe(IN_DOMAIN)


def test_options_given_to_the_pipeline_apply_to_every_call(translator):
    model, tokenizer = translator
    greedy = TranslationPipeline(model=model, tokenizer=tokenizer, num_beams=1, max_new_tokens=5)
    assert texts_of(greedy(UNKNOWN)) == generated(translator, [UNKNOWN], num_beams=1, max_new_tokens=5)
    assert texts_of(greedy(UNKNOWN, max_new_tokens=2)) == generated(
        translator, [UNKNOWN], num_beams=1, max_new_tokens=2
    )


def test_several_sequences_per_input(pipe, translator):
    options = {"num_beams": 3, "num_return_sequences": 2}
    single = pipe("one two three", **options)
    assert texts_of(single) == generated(translator, ["one two three"], **options)
    assert len(single) == 2
    nested = pipe(IN_DOMAIN[:3], batch_size=2, **options)
    assert [texts_of(per_input) for per_input in nested] == [
        generated(translator, [t], **options) for t in IN_DOMAIN[:3]
    ]


class GenerateSpy:
    """Wraps `model.generate` to record the shape of what each call returned."""

    def __init__(self, model: VanillaForConditionalGeneration, monkeypatch: pytest.MonkeyPatch):
        self.shapes: list[tuple[int, int]] = []
        original = model.generate

        def spy(*args, **kwargs):
            out = original(*args, **kwargs)
            self.shapes.append(tuple(out.shape))
            return out

        monkeypatch.setattr(model, "generate", spy)


def test_output_length_defaults_to_input_length_plus_50(pipe, translator, monkeypatch):
    model, tokenizer = translator
    spy = GenerateSpy(model, monkeypatch)
    source_length = len(tokenizer(UNKNOWN)["input_ids"])
    pipe(UNKNOWN)
    pipe(UNKNOWN, max_new_tokens=7)
    assert [length for _, length in spy.shapes] == [1 + source_length + 50, 1 + 7]  # 1: the start token


def test_in_a_batch_the_output_length_follows_the_longest_input(pipe, translator, monkeypatch):
    """Inputs the model never ends translate up to the limit: in one batch, the longest input's length + 50 for
    every row; alone, each its own."""
    model, tokenizer = translator
    spy = GenerateSpy(model, monkeypatch)
    short, long = UNKNOWN, " ".join([UNKNOWN] * 2)
    lengths = [len(tokenizer(text)["input_ids"]) for text in (short, long)]
    assert lengths[0] < lengths[1] <= MAX_LENGTH  # not truncated
    batched = pipe([short, long], batch_size=2)
    assert spy.shapes == [(2, 1 + lengths[1] + 50)]
    spy.shapes.clear()
    alone = pipe([short, long], batch_size=1)
    assert spy.shapes == [(1, 1 + lengths[0] + 50), (1, 1 + lengths[1] + 50)]
    assert batched[1] == alone[1] and len(batched[0]["translation_text"]) > len(alone[0]["translation_text"])


def test_empty_inputs_translate_to_empty_strings_without_the_model(pipe, translator, monkeypatch):
    model, _ = translator
    spy = GenerateSpy(model, monkeypatch)
    assert pipe("") == [{"translation_text": ""}]
    assert pipe(" \n ", num_return_sequences=2, num_beams=2) == [{"translation_text": ""}] * 2
    assert pipe(["", "  "], batch_size=2) == [{"translation_text": ""}] * 2
    assert spy.shapes == []  # the model never ran
    mixed = pipe(["", "the big red house", ""], batch_size=3)
    assert texts_of(mixed) == ["", "das große rote Haus", ""]
    assert [rows for rows, _ in spy.shapes] == [1]  # one generate call, for the one non-empty input


def test_a_long_input_is_truncated_with_a_warning(pipe, translator, caplog):
    model, tokenizer = translator
    text = " ".join(["one two three house"] * 10)
    length = len(tokenizer(text)["input_ids"])
    assert length > MAX_LENGTH
    with caplog.at_level(logging.WARNING):
        result = pipe(text, max_new_tokens=5)
    assert f"an input of {length} tokens" in caplog.text
    assert f"its last {length - MAX_LENGTH} tokens are dropped" in caplog.text
    assert texts_of(result) == generated(translator, [text], max_new_tokens=5)  # generated() truncates too
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pipe("one two three")
    assert caplog.text == ""


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (3, "got int"),
        (None, "got NoneType"),
        (("one", "two"), "got tuple"),
        ({"text": "one"}, "got dict"),
        (["one", 2], r"inputs\[1\] is a int"),
        ([b"one"], r"inputs\[0\] is a bytes"),
    ],
)
def test_inputs_that_are_not_strings_raise_type_error(pipe, inputs, message):
    with pytest.raises(TypeError, match=message):
        pipe(inputs)


@pytest.fixture(scope="module")
def folder(translator, tmp_path_factory) -> Path:
    model, tokenizer = translator
    path = tmp_path_factory.mktemp("translator")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_saved_folder_declares_the_pipeline(folder):
    assert (folder / "pipeline_vanilla.py").read_text() == Path(
        sys.modules[TranslationPipeline.__module__].__file__
    ).read_text()
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"] == {
        "translation": {"impl": "pipeline_vanilla.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
    }


def test_installed_package_pipeline_class_loads_a_folder_without_remote_code(folder, translator):
    installed = pipeline("translation", model=str(folder), pipeline_class=TranslationPipeline)
    assert type(installed) is TranslationPipeline and type(installed.model) is VanillaForConditionalGeneration
    assert texts_of(installed(IN_DOMAIN, batch_size=2)) == generated(translator, IN_DOMAIN)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        pipeline("translation", model=str(folder))  # the folder's pipeline file is code: it needs the flag


REMOTE_SCRIPT = """
import json, sys
sys.modules["modeling_vanilla"] = None  # the package is not importable here
from transformers import AutoModelForSeq2SeqLM, pipeline

folder, resaved, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
try:
    pipeline("translation", model=folder, trust_remote_code=False)
except ValueError as error:
    out["refused"] = str(error)
translator = pipeline("translation", model=folder, trust_remote_code=True)
out["module"] = type(translator).__module__
out["single"] = translator(texts[0])
out["batched"] = translator(texts, batch_size=2)
out["sequences"] = translator(texts[:2], num_beams=3, num_return_sequences=2)
inferred = pipeline(model=folder, trust_remote_code=True)
out["inferred_task"], out["inferred"] = inferred.task, inferred(texts[0])
# a model loaded as remote code saves a folder that is complete again
AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).save_pretrained(resaved)
translator.tokenizer.save_pretrained(resaved)
out["resaved"] = pipeline("translation", model=resaved, trust_remote_code=True)(texts[0])
print(json.dumps(out))
"""


def test_remote_code_pipeline_where_the_package_is_not_installed(folder, pipe, tmp_path):
    texts = [*IN_DOMAIN, ""]
    resaved = tmp_path / "resaved"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REMOTE_SCRIPT), str(folder), str(resaved), json.dumps(texts)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "trust_remote_code=True" in out["refused"]
    assert out["module"].startswith("transformers_modules.") and out["module"].endswith(".pipeline_vanilla")
    assert out["single"] == out["inferred"] == out["resaved"] == pipe(texts[0])
    assert out["inferred_task"] == "translation"
    assert out["batched"] == pipe(texts)
    assert out["sequences"] == pipe(texts[:2], num_beams=3, num_return_sequences=2)
    assert sorted(p.name for p in resaved.iterdir() if p.suffix == ".py") == [
        "configuration_vanilla.py",
        "constrained_beam_search.py",
        "gnmt_beam_search.py",
        "modeling_vanilla.py",
        "pipeline_vanilla.py",
    ]
    assert "custom_pipelines" in json.loads((resaved / "config.json").read_text())
