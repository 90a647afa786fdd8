"""One model for every direction: a three-language toy model trained in-process for a few seconds records its
languages, translates each of its 6 directions word for word (the oracle is the toy dictionary) through `generate`
with `forced_bos_token_id`, the pipeline with `src_lang`/`tgt_lang`, `vanilla-translate --source-lang/--target-lang`
and CTranslate2, alike; it is refused, naming its languages, without a target language; and a model of one
direction works as before."""

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer, pipeline

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, VanillaTokenizer, paper_generation_config
from vanilla_training.cli import translate as translate_command
from vanilla_training.corpus import multilingual
from vanilla_training.preprocess import encode_directions
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.translator import LanguageMismatchError, load_translator, translate_rows

pytestmark = pytest.mark.decoding

LANGUAGES = ["en", "de", "fr"]
# concept -> its word in en, de, fr
DICTIONARY = {
    "one": ("one", "eins", "un"),
    "two": ("two", "zwei", "deux"),
    "three": ("three", "drei", "trois"),
    "house": ("house", "Haus", "maison"),
    "the": ("the", "das", "la"),
    "big": ("big", "große", "grande"),
    "red": ("red", "rote", "rouge"),
}
SENTENCES = [["the", "big", "house"], ["one", "two", "three"], ["red", "house", "two"]]
DIRECTIONS = multilingual.directions(LANGUAGES)
SIZE = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "dropout": 0.0,
    "max_position_embeddings": 64,
}


def say(concepts: list[str], language: str) -> str:
    return " ".join(DICTIONARY[concept][LANGUAGES.index(language)] for concept in concepts)


def toy_rows(rng: random.Random, count: int) -> list[dict]:
    """`count` sentences of 2-6 words, each in every direction: rows as `multilingual.direction_rows` gives them."""
    rows = []
    for _ in range(count):
        concepts = [rng.choice(list(DICTIONARY)) for _ in range(rng.randint(2, 6))]
        for source, target in multilingual.directions(LANGUAGES):
            rows.append(
                {
                    "source_lang": source,
                    "target_lang": target,
                    "source": say(concepts, source),
                    "target": say(concepts, target),
                }
            )
    return rows


# The toy's decisions must not hang on a float: at every step of every direction's answer the dictionary's token beats
# the runner-up by this many nats (another CPU's kernels, summing in another order, move a score by about 1e-5).
MARGIN = 2.0


def train(model: VanillaForConditionalGeneration, tokenizer: VanillaTokenizer, rounds: int = 8) -> None:
    """Adam steps of 48 rows of mixed directions, encoded by `preprocess.encode_directions` (one thread: a tiny
    model), 200 at a time until every direction's answer is decided by `MARGIN` (at most `rounds` times 200 steps)."""
    rng = random.Random(0)
    rows = toy_rows(rng, 400)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(rounds):
            model.train()
            for _ in range(200):
                batch = rng.sample(rows, 48)
                encoded = encode_directions(tokenizer, {key: [row[key] for row in batch] for key in batch[0]})
                sources = tokenizer.pad({"input_ids": encoded["input_ids"]}, return_tensors="pt")
                labels = tokenizer.pad({"input_ids": encoded["labels"]}, return_tensors="pt")["input_ids"]
                labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)
                model(**sources, labels=labels).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            model.eval()
            if smallest_margin(model, tokenizer) > MARGIN:
                return
    finally:
        torch.set_num_threads(threads)


def smallest_margin(model: VanillaForConditionalGeneration, tokenizer: VanillaTokenizer) -> float:
    """The least, over the 6 directions, the test sentences and the steps after the forced language token, of the
    dictionary's next token's log-probability minus the best other token's, the decoder fed the dictionary's answer."""
    smallest = float("inf")
    for source, target in DIRECTIONS:
        batch = encode_directions(
            tokenizer,
            {
                "source": [say(s, source) for s in SENTENCES],
                "target": [say(s, target) for s in SENTENCES],
                "target_lang": [target] * len(SENTENCES),
            },
        )
        labels = tokenizer.pad({"input_ids": batch["labels"]}, return_tensors="pt")["input_ids"]
        batch = tokenizer.pad({"input_ids": batch["input_ids"]}, return_tensors="pt")
        with torch.no_grad():
            log_probs = model(**batch, labels=labels).logits.log_softmax(-1)[:, 1:]
        answer = labels[:, 1:]
        expected = log_probs.gather(-1, answer[..., None])[..., 0]
        runner_up = log_probs.scatter(-1, answer[..., None], float("-inf")).amax(-1)
        gaps = (expected - runner_up)[answer != tokenizer.pad_token_id]
        smallest = min(smallest, gaps.min().item())
    return smallest


def save_toy_model(path: Path) -> Path:
    """Train the toy model and save it in `path`, as save_pretrained writes it, with the paper's beam search as its
    decoding."""
    texts = [row["source"] for row in toy_rows(random.Random(1), 200)]
    tokenizer = train_joint_bpe(texts, vocab_size=1000, model_max_length=64, languages=LANGUAGES)
    config = VanillaConfig(**SIZE, vocab_size=len(tokenizer), languages=LANGUAGES)
    torch.manual_seed(0)
    model = VanillaForConditionalGeneration(config)
    train(model, tokenizer)
    model.generation_config = paper_generation_config(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The toy model's folder."""
    return save_toy_model(tmp_path_factory.mktemp("multilingual") / "model")


def generated(folder: Path, source: str, target: str, **options) -> list[str]:
    model = VanillaForConditionalGeneration.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.src_lang, tokenizer.tgt_lang = source, target
    inputs = tokenizer([say(s, source) for s in SENTENCES], return_tensors="pt", padding=True)
    forced = tokenizer.convert_tokens_to_ids(f"__{target}__")
    ids = model.generate(**inputs, forced_bos_token_id=forced, **options)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def test_the_toy_is_decided_by_a_wide_margin_in_every_direction(folder: Path) -> None:
    """What lets the tests below compare decodings for equality on any CPU: the answers are not near-ties."""
    model = VanillaForConditionalGeneration.from_pretrained(folder).eval()
    assert smallest_margin(model, AutoTokenizer.from_pretrained(folder)) > MARGIN


def test_the_config_and_tokenizer_record_the_languages(folder: Path) -> None:
    assert AutoConfig.from_pretrained(folder).languages == LANGUAGES
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert isinstance(tokenizer, VanillaTokenizer) and tokenizer.languages == LANGUAGES
    assert tokenizer.convert_ids_to_tokens([4, 5, 6]) == ["__en__", "__de__", "__fr__"]
    assert load_translator(folder).directions == DIRECTIONS


@pytest.mark.parametrize(("source", "target"), DIRECTIONS)
def test_generate_with_forced_bos_translates_every_direction(folder: Path, source: str, target: str) -> None:
    """The target language's token alone chooses the language: each direction is the dictionary's, word for word."""
    assert generated(folder, source, target) == [say(s, target) for s in SENTENCES]


def test_the_pipeline_takes_src_lang_and_tgt_lang(folder: Path) -> None:
    translator = pipeline("translation", model=str(folder), trust_remote_code=True)
    for source, target in DIRECTIONS:
        texts = [say(s, source) for s in SENTENCES]
        outputs = translator(texts, src_lang=source, tgt_lang=target)
        assert [output["translation_text"] for output in outputs] == generated(folder, source, target)
    fixed = pipeline("translation", model=str(folder), trust_remote_code=True, src_lang="de", tgt_lang="fr")
    assert fixed(say(SENTENCES[0], "de"))[0]["translation_text"] == say(SENTENCES[0], "fr")


def test_vanilla_translate_takes_the_direction(folder: Path, tmp_path: Path) -> None:
    for source, target in DIRECTIONS:
        given, written = tmp_path / f"in.{source}", tmp_path / f"out.{target}"
        given.write_text("".join(say(s, source) + "\n" for s in SENTENCES), encoding="utf-8")
        translate_command.main(
            [
                str(folder),
                "--source-lang",
                source,
                "--target-lang",
                target,
                "--input",
                str(given),
                "--output",
                str(written),
            ]
        )
        assert written.read_text(encoding="utf-8").splitlines() == generated(folder, source, target)


def test_ctranslate2_decodes_as_generate_with_the_target_prefix(folder: Path, tmp_path: Path) -> None:
    """The export keeps the language tokens; `target_prefix` is CTranslate2's `forced_bos_token_id`: the same tokens,
    with beam search and greedy."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from modeling_vanilla.export_ctranslate2 import export_ctranslate2

    exported = ctranslate2.Translator(str(export_ctranslate2(folder, tmp_path / "ct2")), device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for source, target in DIRECTIONS:
        ids = tokenizer([say(s, source) for s in SENTENCES])["input_ids"]
        for beams in (4, 1):
            results = exported.translate_batch(
                [tokenizer.convert_ids_to_tokens(row) for row in ids],
                target_prefix=[[f"__{target}__"]] * len(ids),
                beam_size=beams,
                length_penalty=0.6,
                min_decoding_length=0,
                max_decoding_length=max(map(len, ids)) + 50,
            )
            texts = [
                tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0]), skip_special_tokens=True)
                for result in results
            ]
            assert [result.hypotheses[0][0] for result in results] == [f"__{target}__"] * len(ids)
            assert texts == generated(folder, source, target, num_beams=beams)


def test_without_a_target_language_it_is_refused_naming_the_languages(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    named = "en, de, fr"
    translator = pipeline("translation", model=str(folder), trust_remote_code=True)
    with pytest.raises(ValueError, match="between en, de, fr: give the direction"):
        translator("the house")
    with pytest.raises(ValueError, match=f"tgt_lang='it' is not a language of this model; choose one of {named}"):
        translator("the house", src_lang="en", tgt_lang="it")
    model = VanillaForConditionalGeneration.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match=f"translates into {named}: give the target language's token"):
        model.generate(**tokenizer("the house", return_tensors="pt"))
    with pytest.raises(LanguageMismatchError, match=f"into any of {named}: choose the target language"):
        load_translator(folder).translate(["the house"])
    with pytest.raises(LanguageMismatchError, match=f"any two of {named}, not en-it"):
        load_translator(folder, "en", "it")
    (tmp_path / "in.en").write_text("the house\n", encoding="utf-8")
    for options in ([], ["--target-lang", "de"]):
        with pytest.raises(SystemExit):
            translate_command.main([str(folder), "--input", str(tmp_path / "in.en"), *options])
        assert f"any two of {named}" in capsys.readouterr().err


def test_a_translator_chooses_the_target_per_call(folder: Path) -> None:
    translator = load_translator(folder)
    for source, target in DIRECTIONS:
        texts = [say(s, source) for s in SENTENCES]
        assert translator.translate(texts, target_lang=target, progress=False) == [say(s, target) for s in SENTENCES]


def test_rows_of_every_direction_translate_in_their_order(folder: Path) -> None:
    """`translator.translate_rows`, as training and evaluation score rows of many directions at once."""
    translator = load_translator(folder)
    rows = [(concepts, source, target) for concepts in SENTENCES for source, target in DIRECTIONS]
    random.Random(3).shuffle(rows)
    columns = {
        "source": [say(concepts, source) for concepts, source, _ in rows],
        "target_lang": [target for _, _, target in rows],
    }
    translations = translate_rows(translator.model, translator.tokenizer, columns, progress=False)
    assert translations == [say(concepts, target) for concepts, _, target in rows]


def test_targets_encode_with_their_language_token_first(folder: Path) -> None:
    """`preprocess.encode_directions` of rows of mixed directions equals the tokenizer's own target mode, row by
    row; a source has no language token; an unseen character still round-trips (byte fallback kept)."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = toy_rows(random.Random(2), 2)
    encoded = encode_directions(tokenizer, {key: [row[key] for row in rows] for key in rows[0]})
    for row, input_ids, labels in zip(rows, encoded["input_ids"], encoded["labels"], strict=True):
        tokenizer.tgt_lang = row["target_lang"]
        expected = tokenizer(row["source"], text_target=row["target"])
        assert (input_ids, labels) == (expected["input_ids"], expected["labels"])
        assert labels[0] == tokenizer.convert_tokens_to_ids(f"__{row['target_lang']}__") != input_ids[0]
    unseen = "the 家 house ü"
    assert tokenizer.decode(tokenizer(unseen)["input_ids"], skip_special_tokens=True) == unseen


def test_a_model_of_one_direction_refuses_languages_and_translates_as_before(tmp_path: Path) -> None:
    tokenizer = train_joint_bpe([say(s, "en") for s in SENTENCES] * 5, vocab_size=200, model_max_length=64)
    torch.manual_seed(0)
    model = VanillaForConditionalGeneration(VanillaConfig(**{**SIZE, "vocab_size": len(tokenizer)})).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    translator = pipeline("translation", model=str(tmp_path), trust_remote_code=True, max_new_tokens=3)
    assert type(translator.tokenizer) is not VanillaTokenizer
    assert not hasattr(translator.model.config, "languages")  # the folder as loaded, not the config built here
    with torch.no_grad():
        generated = model.generate(**tokenizer("the house", return_tensors="pt"), max_new_tokens=3)
    assert translator("the house") == [
        {"translation_text": tokenizer.decode(generated[0], skip_special_tokens=True)}
    ]  # as generate() translates it: no language token forced or stripped
    with pytest.raises(ValueError, match="translates one direction .* leave out src_lang and tgt_lang"):
        translator("the house", src_lang="en", tgt_lang="de")


REMOTE_SCRIPT = """
import json, sys
sys.modules["modeling_vanilla"] = None  # the package is not importable here
from transformers import pipeline

folder, texts = sys.argv[1], json.loads(sys.argv[2])
translator = pipeline("translation", model=folder, trust_remote_code=True)
out = {"tokenizer": type(translator.tokenizer).__module__, "languages": translator.tokenizer.languages}
out["translations"] = [t["translation_text"] for t in translator(texts, src_lang="en", tgt_lang="fr")]
try:
    translator(texts)
except ValueError as error:
    out["refused"] = str(error)
print(json.dumps(out))
"""


def test_remote_code_takes_the_direction_where_the_package_is_not_installed(folder: Path, tmp_path: Path) -> None:
    """The folder's own copies of the tokenizer and the pipeline (remote code) choose the target language."""
    texts = [say(s, "en") for s in SENTENCES]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REMOTE_SCRIPT), str(folder), json.dumps(texts)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["tokenizer"].startswith("transformers_modules.") and out["tokenizer"].endswith(".tokenization_vanilla")
    assert out["languages"] == LANGUAGES
    assert out["translations"] == [say(s, "fr") for s in SENTENCES]
    assert "between en, de, fr: give the direction" in out["refused"]
