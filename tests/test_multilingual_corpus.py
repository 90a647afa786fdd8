"""The many-direction corpus of a multilingual model: one verse split for every language (a held-out verse is held
out in all of its languages), no held-out text of any language in training, the directions' sampling rule, and the
languages read from `corpus.py` at run time. On a tiny bible.db, and on the real one (marked `corpus`)."""

import os
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from vanilla_training import corpus
from vanilla_training.corpus import TEST_BOOKS, VALIDATION_BOOKS, multilingual, normalise

GENESIS, ESTHER, JOHN, ACTS = 1, 17, 43, 44
LANGUAGES = ["en", "de", "fr"]
VERSIONS = {"en": "4", "de": "e", "fr": "l"}  # the first free version of each
# (book, chapter, verse) -> {language: text}; a missing language is a verse that version lacks.
VERSES = {
    (GENESIS, 1, 1): {"en": "In the beginning God created the heavens.", "de": "Im Anfang schuf Gott die Himmel.",
                      "fr": "Au commencement Dieu créa les cieux."},
    (GENESIS, 1, 2): {"en": "The earth was formless and empty.", "de": "Und die Erde war wüst und leer.",
                      "fr": "La terre était informe et vide."},
    (GENESIS, 1, 3): {"en": "God said, let there be light.", "de": "Und Gott sprach: Es werde Licht!"},
    (ESTHER, 1, 1): {"en": "Now it happened in the days of the king.", "de": "Und es geschah in den Tagen des Königs.",
                     "fr": "C'était du temps du roi."},
    (JOHN, 1, 1): {"en": "In the beginning was the Word.", "de": "Im Anfang war das Wort.",
                   "fr": "Au commencement était la Parole."},
    # its German repeats a train verse's German (its English and French do not): held out nowhere, trained nowhere
    (JOHN, 1, 2): {"en": "The same was in the beginning with God.", "de": "Und die Erde war wüst und leer.",
                   "fr": "Elle était au commencement avec Dieu."},
    (JOHN, 1, 3): {"en": "All things were made through him.", "de": "Alle Dinge wurden durch dasselbe."},  # no French
    (ACTS, 1, 1): {"en": "The first book I wrote, Theophilus.", "de": "Den ersten Bericht habe ich verfaßt.",
                   "fr": "Théophile, j'ai parlé dans mon premier livre."},
}  # fmt: skip
LEAKING, INCOMPLETE = (JOHN, 1, 2), (JOHN, 1, 3)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "bible.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
            "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
        )
        rows = [(VERSIONS[code], *key, text) for key, texts in VERSES.items() for code, text in texts.items()]
        rows.append(("s", JOHN, 1, 1, "Schlachter: not free, never read"))
        db.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(rows)])
    return path


@pytest.fixture
def verses(tmp_path: Path, db_path: Path) -> dict[str, list[dict]]:
    return multilingual.load_verses(LANGUAGES, tmp_path / "data", db_path)


def keys(rows: list[dict]) -> set[tuple[int, ...]]:
    return {tuple(row["verse"]) for row in rows}


def test_one_verse_split_for_every_language(verses: dict[str, list[dict]]) -> None:
    """Verses split by book, as corpus.py splits pairs; a held-out verse has every language or is left out."""
    assert keys(verses["train"]) == {(GENESIS, 1, 1), (GENESIS, 1, 2), (GENESIS, 1, 3)}
    assert keys(verses["validation"]) == {(ESTHER, 1, 1)}
    assert keys(verses["test"]) == {(JOHN, 1, 1), (ACTS, 1, 1)}
    assert verses["train"][2]["texts"] == VERSES[GENESIS, 1, 3]  # a train verse of two languages is kept
    for row in verses["validation"] + verses["test"]:
        assert row["texts"] == VERSES[tuple(row["verse"])]


def test_no_held_out_verse_in_any_language_appears_in_training(verses: dict[str, list[dict]]) -> None:
    """The leaking verse is held out in none of its languages, though only its German repeats a train text."""
    held_out = verses["validation"] + verses["test"]
    assert LEAKING not in keys(held_out) | keys(verses["train"])
    assert INCOMPLETE not in keys(held_out)
    assert all(key[0] not in TEST_BOOKS | VALIDATION_BOOKS for key in keys(verses["train"]))
    bounds = multilingual.length_bounds(verses["train"], multilingual.directions(LANGUAGES))
    train_rows = multilingual.direction_rows(verses["train"], multilingual.directions(LANGUAGES), bounds)
    for code in LANGUAGES:
        trained = {
            normalise(row[side]) for row in train_rows for side in ("source", "target") if row[f"{side}_lang"] == code
        }
        assert trained and not trained & {normalise(row["texts"][code]) for row in held_out}


def test_directions_are_sampled_per_verse(verses: dict[str, list[dict]], tmp_path: Path, db_path: Path) -> None:
    """Every direction of a verse, or `per_verse` of them drawn by a seed; a left-out direction never appears."""
    pairs = multilingual.directions(LANGUAGES)
    assert len(pairs) == 6 and len(set(pairs)) == 6
    bounds = multilingual.length_bounds(verses["train"], pairs)
    every = multilingual.direction_rows(verses["train"], pairs, bounds)
    assert Counter((row["source_lang"], row["target_lang"]) for row in every) == Counter(
        {pair: 3 if "fr" not in pair else 2 for pair in pairs}
    )
    sampled = multilingual.direction_rows(verses["train"], pairs, bounds, per_verse=2, seed=1)
    assert len(sampled) == 6 and sampled == multilingual.direction_rows(
        verses["train"], pairs, bounds, per_verse=2, seed=1
    )
    assert {row["source"] for row in sampled} <= {row["source"] for row in every}
    zero_shot = multilingual.directions(LANGUAGES, leave_out=[("de", "fr")])
    dataset = multilingual.load_multilingual_corpus(LANGUAGES, zero_shot, data_dir=tmp_path / "data", db_path=db_path)
    assert ("de", "fr") not in {(row["source_lang"], row["target_lang"]) for row in dataset["train"]}


def test_languages_come_from_the_corpus_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert multilingual.parse_languages("all") == corpus.free_languages()
    monkeypatch.setattr(multilingual, "free_languages", lambda: ["en", "de", "fr"])
    assert multilingual.parse_languages("all") == ["en", "de", "fr"]
    assert multilingual.parse_languages("fr, en") == ["fr", "en"]
    for spec, message in [
        ("en,xx", "unknown language 'xx'"),
        ("en,pt", r"Portuguese \(pt\) has no free version"),
        ("en,en", "two or more distinct"),
        ("en", "two or more distinct"),
    ]:
        with pytest.raises(ValueError, match=message):
            multilingual.parse_languages(spec)


@pytest.mark.corpus
def test_real_corpus_holds_out_each_verse_in_every_language(tmp_path: Path) -> None:
    """Four scripts of the real bible.db: no held-out text of any language is a train text of that language."""
    if os.environ.get("VANILLA_SKIP_CORPUS_TESTS") == "1":
        pytest.skip("VANILLA_SKIP_CORPUS_TESTS=1: the real corpus is not built")
    db = corpus.fetch_bible_db(corpus.default_data_dir())
    languages = [code for code in ("en", "ru", "ar", "ko") if code in corpus.free_languages()]
    verses = multilingual.load_verses(languages, tmp_path, db)
    assert len(verses["test"]) > 1500 and len(verses["train"]) > 25000
    assert not keys(verses["train"]) & keys(verses["validation"] + verses["test"])
    for code in languages:
        trained = {normalise(row["texts"][code]) for row in verses["train"] if code in row["texts"]}
        assert not trained & {normalise(row["texts"][code]) for row in verses["validation"] + verses["test"]}
