"""`vanilla-export-argos`: the SentencePiece model normalises every code point and splits text as users type it as
our tokenizer does, and every test verse of every script of the corpus; a tokenizer that it cannot reproduce is
refused; the package, installed into argos-translate (LibreTranslate's fork, argos-translate-lt), translates offline
exactly as `vanilla-translate` does under argos's decoding, one direction of a multilingual model included, and is not
replaced by argos's updates.

The argos extra is needed (`scripts/setup.sh` installs it): without it this module fails, unless
`VANILLA_SKIP_ARGOS_TESTS=1` says the extra is left out on purpose."""

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
from packaging.version import Version
from test_multilingual import save_toy_model, say
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

if os.environ.get("VANILLA_SKIP_ARGOS_TESTS") == "1":
    pytest.skip("VANILLA_SKIP_ARGOS_TESTS=1: the argos extra is left out", allow_module_level=True)
import sentencepiece  # noqa: E402  (the argos extra: its absence fails the module)

from vanilla_training.export.argos import export_argos, main, sentencepiece_of  # noqa: E402
from vanilla_training.export.sentencepiece_bpe import RAW_TEXTS, differences, sentencepiece_model  # noqa: E402

pytestmark = pytest.mark.slow  # a toy training run (about 20 s) and argos in a process of its own
SKIP_CORPUS = "VANILLA_SKIP_CORPUS_TESTS"  # as in test_corpus: "1" leaves the real corpus out
# One language of each script of the corpus's free versions (Vietnamese, whose version is not free, is in RAW_TEXTS).
SCRIPTS = {"Latin": "de", "Cyrillic": "ru", "Arabic": "ar", "Devanagari": "hi", "Hangul": "ko"}
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


@pytest.fixture(scope="module")
def verses_tokenizer(tmp_path_factory) -> tuple[PreTrainedTokenizerFast, sentencepiece.SentencePieceProcessor]:
    """A tokenizer with byte fallback trained on a few verses of English, German and Vietnamese (NFKC-composed, as
    the corpus is), and its SentencePiece model."""
    texts = [
        "In the beginning God created the heavens and the earth.",
        "Im Anfang schuf Gott die Himmel und die Erde.",
        "Ban đầu Đức Chúa Trời dựng nên trời đất.",
        "Vì Đức Chúa Trời yêu thương thế gian, đến nỗi đã ban Con một của Ngài.",
    ]
    tokenizer = train_joint_bpe(texts * 20, vocab_size=1000)
    return tokenizer, saved(tokenizer, tmp_path_factory.mktemp("verses"))


def test_sentencepiece_normalises_every_code_point_as_ours(verses_tokenizer) -> None:
    """Every code point after a letter ("a" + c: a combining mark composes with it), and every Vietnamese letter
    typed as a precomposed letter and a combining tone mark, are normalised by the SentencePiece model as by our
    NFKC then Metaspace."""
    tokenizer, processor = verses_tokenizer
    ours = tokenizer.backend_tokenizer.normalizer
    texts = ["a" + chr(code_point) for code_point in range(1, 0x110000) if not 0xD800 <= code_point < 0xE000]
    texts += [base + tone for base in "aăâeêioôơuưy" for tone in "\u0300\u0301\u0303\u0309\u0323"]
    expected = ["\u2581" + ours.normalize_str(text).replace(" ", "\u2581") for text in texts]
    normalized = zip(texts, expected, strict=True)
    assert [text for text, normal in normalized if processor.normalize(text) != normal] == []


def test_sentencepiece_splits_text_as_users_type_it_as_ours(verses_tokenizer) -> None:
    """`RAW_TEXTS` (Vietnamese typed with combining tone marks, non-breaking and ideographic spaces, special-token
    text, code points newer than SentencePiece's own tables) and the verses' words in it are split into the same
    pieces; special-token text is text to both."""
    tokenizer, processor = verses_tokenizer
    assert RAW_TEXTS[0] != "Vì Đức Chúa Trời yêu thương thế gian, đến nỗi đã ban Con một của Ngài."  # typed, not NFKC
    assert differences(tokenizer, processor, list(RAW_TEXTS)) == []
    pieces = processor.encode(RAW_TEXTS[0], out_type=str)
    assert "Đức" in "".join(pieces) and not any(piece in BYTE_TOKENS for piece in pieces[:8])
    assert "</s>" not in processor.encode("a </s> b", out_type=str)


def test_a_text_starting_with_whitespace_has_one_more_piece(verses_tokenizer) -> None:
    """The one difference no SentencePiece model avoids (docs/argos.md): Metaspace puts no "▁" before a text that
    starts with a space, SentencePiece always does."""
    tokenizer, processor = verses_tokenizer
    for text in (" Gott", "\u00a0Gott", "\u3000Gott", "  Gott"):
        ours = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert processor.encode(text, out_type=str) == ["\u2581", *ours]


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


ARGOS_LIKE_VERSION = "1.9"  # a version of the kind Argos's index gives its own packages (1.x)


def argos_translations(
    package: Path, home: Path, lines: list[str], source: str = "en", target: str = "de"
) -> list[str]:
    """`lines` translated by argos-translate in a process of its own, `package` installed into an empty argos home
    and kept by argos's update (`Package.update`, what `libretranslate --update-models` runs) against an index
    that offers a package of the same languages at `ARGOS_LIKE_VERSION`, from an address that cannot be reached;
    offline: spaCy sentence splitting from the package."""
    home.mkdir()
    offered = {"from_code": source, "to_code": target, "package_version": ARGOS_LIKE_VERSION, "argos_version": "1.9"}
    (home / "index.json").write_text(json.dumps([{**offered, "links": ["http://127.0.0.1:9/argos.argosmodel"]}]))
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
        "[installed.update() for installed in package.get_installed_packages()]\n"
        "source, target = sys.argv[3:]\n"
        "print(json.dumps([translate.translate(line, source, target) for line in json.loads(sys.argv[2])]))\n"
    )
    command = [sys.executable, "-c", script, str(package), json.dumps(lines), source, target]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
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
    assert Version(metadata["package_version"]) > Version(ARGOS_LIKE_VERSION) and "target_prefix" not in metadata
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
        ([str(multilingual), str(tmp_path / "m.argosmodel")], "a multilingual model (en, de, fr): a package holds"),
        ([str(multilingual), str(tmp_path / "m.argosmodel"), "--source", "de", "--target", "ko"], "--source and"),
        ([str(run), str(tmp_path / "w.argosmodel"), "--source", "de", "--target", "en"], "translates en into de only"),
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


def test_a_run_trained_without_a_test_is_packaged(run: Path, tmp_path: Path) -> None:
    """A run on one's own files without `--test-file` records no test (and writes no card): the package says so."""
    folder = tmp_path / "untested"
    shutil.copytree(run / "final", folder)
    results = json.loads((folder / "training_results.json").read_text())
    del results["test"]
    (folder / "training_results.json").write_text(json.dumps(results))
    (folder / "README.md").unlink()
    with zipfile.ZipFile(export_argos(folder, tmp_path / "untested.argosmodel")) as archive:
        readme = archive.read("translate-en_de/README.md").decode()
    assert "The run recorded no test" in readme and "Test BLEU" not in readme


def test_a_hub_id_that_cannot_be_downloaded_is_named(tmp_path: Path) -> None:
    """Offline, or a repository the Hub does not have: an error naming the model, no traceback."""
    root = Path(__file__).resolve().parents[1]
    with FakeHub(tmp_path / "hub") as hub:
        online = {**hub.env(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
        for env in (online, {**online, "HF_HUB_OFFLINE": "1"}):
            command = ["-m", "vanilla_training.export.argos", "someone/absent", str(tmp_path / "absent.argosmodel")]
            done = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, cwd=root)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
            assert "'someone/absent' is no local folder, and the Hub cannot give it" in done.stderr


def test_one_direction_of_a_multilingual_model_is_packaged(tmp_path: Path) -> None:
    """The toy en-de-fr model of test_multilingual, its de-fr direction packaged: argos, given the package's
    `target_prefix`, translates German into French word for word (the oracle is the toy dictionary)."""
    folder = save_toy_model(tmp_path / "multilingual")
    package = export_argos(folder, tmp_path / "de_fr.argosmodel", quantization="float32", direction=("de", "fr"))
    with zipfile.ZipFile(package) as archive:
        metadata = json.loads(archive.read("translate-de_fr/metadata.json"))
    assert (metadata["from_code"], metadata["to_code"], metadata["target_prefix"]) == ("de", "fr", "__fr__")
    sentences = [["the", "big", "house"], ["one", "two", "three"], ["red", "house", "two"]]
    translations = argos_translations(package, tmp_path / "argos", [say(s, "de") for s in sentences], "de", "fr")
    assert translations == [say(s, "fr") for s in sentences]
