"""`vanilla-export-argos`: the SentencePiece model splits as our tokenizer does on every script of the corpus, a
tokenizer that it cannot reproduce is refused, and the package, installed into argos-translate (LibreTranslate's
fork, argos-translate-lt), translates offline exactly as `vanilla-translate` does under argos's decoding."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from contextlib import closing
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from vanilla_training.cli import translate
from vanilla_training.cli.train import main as train
from vanilla_training.corpus import (
    TEST_BOOKS,
    CorpusDownloadError,
    default_data_dir,
    fetch_bible_db,
    free_versions,
    read_version,
)
from vanilla_training.tokenizer import BYTE_TOKENS, SPECIAL_TOKENS, train_joint_bpe

from helpers import toy_run_args, write_toy_corpus
from hub_server import FakeHub

sentencepiece = pytest.importorskip("sentencepiece")
pytest.importorskip("ctranslate2")
pytest.importorskip("spacy")
from vanilla_training.export.argos import export_argos, main, sentencepiece_of  # noqa: E402
from vanilla_training.export.sentencepiece_bpe import differences, sentencepiece_model  # noqa: E402

pytestmark = pytest.mark.slow  # a toy training run (about 20 s) and argos in a process of its own
SKIP_CORPUS = "VANILLA_SKIP_CORPUS_TESTS"  # as in test_corpus: "1" leaves the real corpus out
# One language of each script of the corpus (Vietnamese: Latin letters under stacked diacritics, NFKC at work).
SCRIPTS = {"Latin": "de", "Vietnamese": "vi", "Cyrillic": "ru", "Arabic": "ar", "Devanagari": "hi", "Hangul": "ko"}
TRAIN_VERSES = 1500  # a side: a tiny tokenizer, so that test verses hold characters it never saw (byte fallback)
UNSEEN = "起初神創造天地 ☃"  # Han (no free version) and a snowman: characters no train verse has, spelt in bytes
# Toy sentences (helpers.WORDS) of different lengths, one with two sentences and a word never seen in training, and
# one out of the toy domain, whose translation depends on the length penalty.
LINES = ["the big red house", "one two three", "the house", "two red houses. three big ones", "red", "Jesus wept."]


def saved(tokenizer: PreTrainedTokenizerFast, folder: Path) -> sentencepiece.SentencePieceProcessor:
    tokenizer.save_pretrained(folder)
    return sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model(folder / "tokenizer.json"))


@pytest.mark.parametrize("language", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_sentencepiece_splits_every_test_verse_as_ours(language: str, tmp_path: Path) -> None:
    """A tokenizer trained on a few train verses of English and of the language; every test-book verse (John,
    Acts) of every free version of both, the pair's test split and more, is split into the same pieces."""
    if os.environ.get(SKIP_CORPUS) == "1":
        pytest.skip(f"{SKIP_CORPUS}=1: the real corpus is not read")
    try:
        db_path = fetch_bible_db(default_data_dir())
    except CorpusDownloadError as error:
        pytest.fail(f"bible.db cannot be downloaded ({SKIP_CORPUS}=1 skips this): {error}")
    train_texts, test_texts = [], []
    with closing(sqlite3.connect(db_path)) as db:
        for side in ("en", language):
            for rank, bb_name in enumerate(free_versions(side)):
                verses = [(key, text) for key, text in read_version(db, bb_name).items() if text]
                test_texts += [text for key, text in verses if key[0] in TEST_BOOKS]
                if rank == 0:
                    train_texts += [text for key, text in verses if key[0] not in TEST_BOOKS][:TRAIN_VERSES]
    test_texts.append(UNSEEN)
    tokenizer = train_joint_bpe(train_texts, vocab_size=2000)
    processor = saved(tokenizer, tmp_path)
    assert differences(tokenizer, processor, test_texts) == []
    pieces = processor.encode(test_texts, out_type=str)
    assert any(piece in BYTE_TOKENS for verse in pieces for piece in verse)  # characters spelt in bytes agree too
    assert processor.decode(pieces[0]) == tokenizer.decode(
        tokenizer(test_texts[0])["input_ids"], skip_special_tokens=True
    )


def merge_order_tokenizer() -> PreTrainedTokenizerFast:
    """A BPE whose pieces `▁a`, `bc` and `▁abc` come from the merges `b c`, `▁ a`, `▁a b`, `▁ab c`: ours stops at
    `▁a` `bc` (no merge joins them); SentencePiece joins any two pieces whose join is a piece."""
    tokens = [*SPECIAL_TOKENS, "▁", "a", "b", "c", "bc", "▁a", "▁ab", "▁abc", *BYTE_TOKENS]
    merges = [("b", "c"), ("▁", "a"), ("▁a", "b"), ("▁ab", "c")]
    backend = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, unk_token="<unk>", byte_fallback=True))
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")


def test_a_tokenizer_that_sentencepiece_splits_otherwise_is_refused(tmp_path: Path) -> None:
    tokenizer = merge_order_tokenizer()
    processor = saved(tokenizer, tmp_path)
    assert differences(tokenizer, processor, ["abc", "ab", "ac"]) == [("abc", ["▁a", "bc"], ["▁abc"])]
    with pytest.raises(ValueError, match=r"splits 1 of 2 test texts otherwise .*'abc': \['▁a', 'bc'\] against"):
        sentencepiece_of(tmp_path, ["ab", "abc"])


def test_a_tokenizer_without_byte_fallback_is_refused(tmp_path: Path) -> None:
    """Below 1,000 entries our tokenizer has no byte tokens; SentencePiece would join unknown characters."""
    train_joint_bpe(["the big red house", "das große rote Haus"], vocab_size=200).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no SentencePiece equivalent: its byte_fallback"):
        sentencepiece_model(tmp_path / "tokenizer.json")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A toy en-de run folder whose tokenizer has byte fallback (1,000 entries at most), about 20 s of training."""
    folder = tmp_path_factory.mktemp("run")
    files = write_toy_corpus(folder, {"train": 400, "validation": 20, "test": 25})
    train(toy_run_args(files, folder / "run", show=0, vocab_size=1000))
    return folder / "run"


def argos_translations(package: Path, home: Path, lines: list[str]) -> list[str]:
    """`lines` translated en-de by argos-translate in a process of its own, `package` installed into an empty
    argos home, offline: an empty package index and spaCy sentence splitting from the package."""
    home.mkdir()
    (home / "index.json").write_text("[]")
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "ARGOS_PACKAGE_INDEX": home.as_uri() + "/",
        "ARGOS_CHUNK_TYPE": "SPACY",
    }
    script = (
        "import json, sys\n"
        "from argostranslate import package, translate\n"
        "package.install_from_path(sys.argv[1])\n"
        "print(json.dumps([translate.translate(line, 'en', 'de') for line in json.loads(sys.argv[2])]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(package), json.dumps(lines)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_argos_translates_the_package_as_vanilla_translate_does(run: Path, tmp_path: Path) -> None:
    """Argos decodes at beam 4 with length penalty 0.2 (fixed in argos-translate): `vanilla-translate` on the same
    model with that generation config gives the same text, sentence by sentence (argos splits the two-sentence
    line with spaCy and joins the translations with a space)."""
    package = export_argos(run, tmp_path / "en_de.argosmodel", quantization="float32")
    translations = argos_translations(package, tmp_path / "argos", LINES)

    model = tmp_path / "model"
    shutil.copytree(run / "final", model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "num_beams": 4, "length_penalty": 0.2}))
    sentences = [*LINES[:3], "two red houses.", "three big ones", *LINES[4:]]
    (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    translate.main([str(model), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")])
    expected = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    expected[3:5] = [" ".join(expected[3:5])]
    assert translations == expected
    assert len(set(translations)) == len(LINES) and "das große rote Haus" in translations


def test_the_package_holds_what_argos_reads(run: Path, tmp_path: Path) -> None:
    package = export_argos(run, tmp_path / "en_de.argosmodel")  # int8 by default
    with zipfile.ZipFile(package) as archive:
        names = set(archive.namelist())
        assert {
            f"translate-en_de/{name}" for name in ("metadata.json", "sentencepiece.model", "spacy/meta.json")
        } <= names
        metadata = json.loads(archive.read("translate-en_de/metadata.json"))
        config = json.loads(archive.read("translate-en_de/model/config.json"))
        readme = archive.read("translate-en_de/README.md").decode()
    assert metadata | {"type": "translate", "from_code": "en", "to_code": "de"} == metadata
    assert (metadata["from_name"], metadata["to_name"]) == ("English", "German")
    assert config["add_source_eos"] is True
    assert "(int8 weights)" in readme and "Local card" not in readme
    assert "Test BLEU **" in readme and "## Licence" in readme  # the card's scores and licences


def test_bad_arguments_are_named(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken.argosmodel").write_text("")
    folder_without_languages = tmp_path / "bare"
    shutil.copytree(run / "final", folder_without_languages)
    (folder_without_languages / "training_results.json").unlink()
    multilingual = tmp_path / "multilingual"
    shutil.copytree(run / "final", multilingual)
    config = json.loads((multilingual / "config.json").read_text())
    (multilingual / "config.json").write_text(json.dumps({**config, "languages": ["en", "de", "fr"]}))
    cases = [
        ([str(run), str(tmp_path / "x.zip")], "must end in .argosmodel"),
        ([str(run), str(tmp_path / "taken.argosmodel")], "exists"),
        ([str(folder_without_languages), str(tmp_path / "y.argosmodel")], "records no languages"),
        ([str(tmp_path / "nowhere"), str(tmp_path / "z.argosmodel")], "does not exist"),
        ([str(multilingual), str(tmp_path / "m.argosmodel")], "a multilingual model (en, de, fr)"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


def test_a_model_on_the_hub_is_packaged(run: Path, tmp_path: Path) -> None:
    """A Hub id in (the run pushed by `vanilla-push` to a local Hub-compatible server), a package out."""
    root = Path(__file__).resolve().parents[1]
    with FakeHub(tmp_path / "hub") as hub:
        env = {**hub.env(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
        commands = [
            ["vanilla_training.cli.push", "--model-dir", str(run / "final"), "--repo-id", "someone/en-de"],
            ["vanilla_training.export.argos", "someone/en-de", str(tmp_path / "hub.argosmodel")],
        ]
        for command in commands:
            done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, env=env, cwd=root)
            assert done.returncode == 0, done.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "hub.argosmodel") as archive:
        metadata = json.loads(archive.read("translate-en_de/metadata.json"))
    assert (metadata["from_code"], metadata["to_code"]) == ("en", "de")
