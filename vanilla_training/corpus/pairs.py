"""Building the corpus of one direction from the Bible's free versions (`bible.py`): the recipe of
``vanilla_training/DATA_NOTICE.md`` (whole-book split, length filter, de-duplication, leak removal), the split files
and their statistics, and the parser of a pair of the corpus.
"""

import itertools
import json
import sqlite3
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import regex
from tqdm import tqdm

from .bible import LANGUAGE_NAMES, VERSIONS, default_data_dir, fetch_bible_db, free_versions, languages, read_version
from .direction import Direction

if TYPE_CHECKING:
    import datasets

RECIPE_VERSION = 1

SPLITS = ("train", "validation", "test")
VERSION_CHOICES = ("one", "mixed", "all")
MIXED_EVERY = 12  # versions="mixed": one train verse in this many also comes in the second free source version
VALIDATION_BOOKS = frozenset({17, 27, 62, 63, 64, 65})  # Esther, Daniel, 1-3 John, Jude
TEST_BOOKS = frozenset({43, 44})  # John, Acts
MIN_CHARS = 3
LENGTH_RATIO = (0.5, 2.2)  # bounds on (len(target) + 10) / (len(source) + 10), times the pair's median ratio
TEST_VERSIONS_FILE = "test_versions.jsonl"
# The pairs first published, whose splits stay as they were: their length bounds are LENGTH_RATIO itself (not
# scaled by their median ratio) and their held-out rows are leak-checked on the source side only (the target side
# too would drop 3 en-de and 6 en-fr rows). Every other pair uses the scaled bounds and checks both sides.
FROZEN_PAIRS = frozenset({"en-de", "en-fr"})
# A token for de-duplication and leak checks: one Han, Hiragana or Katakana character (those scripts are written
# without spaces), else a run of letters, marks, digits and underscores.
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}"
_TOKEN = regex.compile(rf"[{_CJK}]|(?:(?![{_CJK}])[\p{{L}}\p{{M}}\p{{N}}_])+")


def own_data_hint(source: str, target: str) -> str:
    """How to train on pairs of one's own where the built-in corpus cannot give them."""
    return (
        f"to train {source}-{target} on your own pairs: vanilla-train --train-file train.jsonl --validation-file "
        f"validation.jsonl --source-lang {source} --target-lang {target} (one "
        f'{{"translation": {{"{source}": ..., "{target}": ...}}}} per line; CSV with one column per language too), '
        "or on a `datasets` dataset: --dataset-name NAME (a Hub id or a local folder)"
    )


def parse_pair(pair: str) -> Direction:
    """``"de-en"`` -> ``Direction("de", "en")``; ValueError, saying why, for a malformed pair, an unknown language,
    the same language twice, or a side with no free version; a refused language's message says how to train on one's
    own data instead."""
    direction = source, target = Direction.parse(pair)
    for code in direction:
        if code not in LANGUAGE_NAMES:
            raise ValueError(
                f"unknown language {code!r} in pair {pair!r}; the corpus has: {', '.join(languages())} "
                f"(`vanilla-corpus --list-pairs` lists them); {own_data_hint(source, target)}"
            )
    if source == target:
        raise ValueError(f"language pair {pair!r} translates {LANGUAGE_NAMES[source]} into itself")
    for code in direction:
        if not free_versions(code):
            ruled_out = "; ".join(
                f"{v.name} {v.year} ({v.bb_name}): {v.status}" for v in VERSIONS.values() if v.language == code
            )
            raise ValueError(
                f"language pair {pair!r} is refused: the corpus has no free version of {LANGUAGE_NAMES[code]} "
                f"({ruled_out}); only public-domain or openly licensed text is used (see DATA_NOTICE.md); "
                f"{own_data_hint(source, target)}"
            )
    return direction


def normalise(text: str) -> str:
    """Lower-cased tokens joined by single spaces (words; single characters of Chinese and Japanese): the form
    used for de-duplication and leak checks."""
    return " ".join(_TOKEN.findall(text.lower()))


def _four_grams(normalised: str) -> set[tuple[str, ...]]:
    words = normalised.split()
    return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}


def _length_ratio(source: str, target: str) -> float:
    return (len(target) + 10) / (len(source) + 10)


def pair_length_bounds(pair: str, source: dict, target: dict) -> tuple[float, float]:
    """LENGTH_RATIO for a frozen pair; else LENGTH_RATIO times the median length ratio of the pair's verses, so
    that scripts denser than the Latin alphabet (Korean, Chinese) keep their pairs."""
    if pair in FROZEN_PAIRS:
        return LENGTH_RATIO
    ratios = [_length_ratio(source[key], target[key]) for key in source.keys() & target.keys()]
    median = statistics.median(ratios) if ratios else 1.0
    return LENGTH_RATIO[0] * median, LENGTH_RATIO[1] * median


def keep_pair(source: str, target: str, bounds: tuple[float, float] = LENGTH_RATIO) -> bool:
    low, high = bounds
    return len(source) >= MIN_CHARS and len(target) >= MIN_CHARS and low <= _length_ratio(source, target) <= high


def split_of(book: int) -> str:
    if book in VALIDATION_BOOKS:
        return "validation"
    return "test" if book in TEST_BOOKS else "train"


def _dedupe(pairs: Iterable[tuple[str, str]], on_target: bool = False) -> list[tuple[str, str]]:
    """Keep the first pair of each normalised source text (of each normalised (source, target) with
    ``on_target``)."""
    seen: set[str | tuple[str, str]] = set()
    kept = []
    for source, translation in pairs:
        key = (normalise(source), normalise(translation)) if on_target else normalise(source)
        if key not in seen:
            seen.add(key)
            kept.append((source, translation))
    return kept


class LeakIndex:
    """The normalised train texts of one side and their word 4-grams, to find held-out texts near them."""

    def __init__(self, texts: Iterable[str], side: str) -> None:
        normalised = [normalise(text) for text in texts]
        self.seen = set(normalised)
        self.verses_with: defaultdict[tuple[str, ...], list[int]] = defaultdict(list)
        for index, text in enumerate(tqdm(normalised, desc=f"indexing train 4-grams ({side})", unit="verse")):
            for gram in _four_grams(text):
                self.verses_with[gram].append(index)

    def leaks(self, text: str) -> bool:
        """Whether ``text`` repeats a train text or shares at least half of its 4-grams with one train text."""
        normalised = normalise(text)
        grams = _four_grams(normalised)
        shared = Counter(index for gram in grams for index in self.verses_with.get(gram, ()))
        return normalised in self.seen or (bool(shared) and 2 * max(shared.values()) >= len(grams))


def _drop_leaks(splits: dict[str, list], check_target: bool) -> dict[str, list]:
    """Drop validation and test rows whose normalised source (and target, with ``check_target``) repeats a train
    text or shares at least half of its word 4-grams with one train text of the same side."""
    train = splits["train"]
    sides = [(0, LeakIndex((row[0] for row in train), "source"))]
    if check_target:
        sides.append((1, LeakIndex((row[1] for row in train), "target")))
    kept = {"train": train}
    for split in ("validation", "test"):
        rows = tqdm(splits[split], desc=f"leak check {split}", unit="verse")
        kept[split] = [row for row in rows if not any(index.leaks(row[side]) for side, index in sides)]
    return kept


def _version_pairs(
    texts: dict[str, dict], keys: list, combinations: list[tuple[str, str]], bounds: tuple[float, float]
) -> Iterator[tuple[str, str]]:
    """The (source, target) texts of each verse of `keys` in each (source version, target version) of
    `combinations`, where both have the verse and the pair passes the filters."""
    for key in keys:
        for s, t in combinations:
            if key in texts[s] and key in texts[t] and keep_pair(texts[s][key], texts[t][key], bounds):
                yield texts[s][key], texts[t][key]


def _build_splits(db_path: Path, source: str, target: str, versions: str) -> tuple[dict[str, list], dict]:
    """Cleaned, filtered, de-duplicated and leak-checked rows per split, and the versions used.

    Validation and test rows are (source, target, verse) in the first free version of each side; train rows are
    (source, target) of that version pair (``versions="one"``), those and one train verse in `MIXED_EVERY` in the
    second free source version with the first target version (``"mixed"``), or every free source version with
    every free target version (``"all"``), in canonical verse order.
    """
    source_versions, target_versions = free_versions(source), free_versions(target)
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        texts = {bb: read_version(db, bb) for bb in dict.fromkeys(source_versions + target_versions)}
    first_source, first_target = texts[source_versions[0]], texts[target_versions[0]]
    pair = f"{source}-{target}"
    bounds = pair_length_bounds(pair, first_source, first_target)
    splits: dict[str, list] = {split: [] for split in SPLITS}
    for key in tqdm(sorted(first_source.keys() & first_target.keys()), desc=f"pairing {pair}"):
        if keep_pair(first_source[key], first_target[key], bounds):
            splits[split_of(key[0])].append((first_source[key], first_target[key], key))
    if versions == "one":
        splits["train"] = _dedupe((s, t) for s, t, _ in splits["train"])
    elif versions == "mixed":
        one_train = _dedupe((s, t) for s, t, _ in splits["train"])
        second = [(source_versions[1], target_versions[0])]
        keys = sorted(key for key in first_source if split_of(key[0]) == "train")[::MIXED_EVERY]
        mixed = itertools.chain(one_train, _version_pairs(texts, keys, second, bounds))
        splits["train"] = _dedupe(mixed, on_target=True)
    else:
        train_keys = sorted(key for key in first_source if split_of(key[0]) == "train")
        combinations = list(itertools.product(source_versions, target_versions))
        splits["train"] = _dedupe(_version_pairs(texts, train_keys, combinations, bounds), on_target=True)
    # Leaks are checked against the one-version train split, so that every setting shares its test verses.
    one_train = splits["train"] if versions == "one" else _build_splits(db_path, source, target, "one")[0]["train"]
    checked = _drop_leaks({**splits, "train": one_train}, check_target=pair not in FROZEN_PAIRS)
    splits = {**checked, "train": splits["train"]}
    held_out_versions = {"sources": source_versions, "references": target_versions, "texts": texts}
    return splits, held_out_versions


def corpus_folder(pair: str, versions: str = "one", out_dir: Path | None = None) -> Path:
    """The folder of a pair's build: ``<data dir>/<pair>`` for one version a side, ``<pair>-mixed`` or
    ``<pair>-all`` for the others."""
    out_dir = Path(out_dir) if out_dir is not None else default_data_dir()
    return out_dir / (pair if versions == "one" else f"{pair}-{versions}")


def check_versions(versions: str, source: str) -> None:
    """ValueError naming the problem: a setting not in VERSION_CHOICES, or "mixed" for a source language with a
    single free version (it has no second one to mix in)."""
    if versions not in VERSION_CHOICES:
        raise ValueError(f"versions={versions!r}: expected one of {', '.join(VERSION_CHOICES)}")
    if versions == "mixed" and len(free_versions(source)) < 2:
        raise ValueError(f"versions='mixed' adds the source's second free version, and {source} has only one")


def build_corpus(
    pair: str = "en-de", out_dir: Path | None = None, db_path: Path | None = None, versions: str = "one"
) -> dict[str, Path]:
    """Build ``<pair folder>/{train,validation,test}.jsonl``, ``test_versions.jsonl`` and ``stats.json``; return
    the split files.

    ``versions="one"`` pairs the first free version of each side; ``"mixed"`` adds one train verse in
    `MIXED_EVERY` worded as the second free source version (robustness to the source's wording at little cost in
    size; English's second is the KJV, its third the BBE's paraphrase); ``"all"`` trains on every free source
    version with every free target version. Validation and test are the same for all three.
    ``test_versions.jsonl`` has, line by line with ``test.jsonl``, the verse and its text in every free version of
    each side (``null`` where a version's verse is empty after cleaning): the references for multi-reference
    scoring and the source wordings for robustness rows. ``out_dir`` defaults to :func:`default_data_dir`;
    ``db_path`` to the cached real database (downloaded on first use by :func:`fetch_bible_db`). The output is
    deterministic; an existing build with the current recipe version is reused as is.
    """
    source, target = parse_pair(pair)
    check_versions(versions, source)
    out_dir = Path(out_dir) if out_dir is not None else default_data_dir()
    folder = corpus_folder(pair, versions, out_dir)
    files = {split: folder / f"{split}.jsonl" for split in SPLITS}
    stats_path = folder / "stats.json"
    if stats_path.is_file() and all(path.is_file() for path in [*files.values(), folder / TEST_VERSIONS_FILE]):
        if json.loads(stats_path.read_text(encoding="utf-8")).get("recipe_version") == RECIPE_VERSION:
            return files

    db_path = Path(db_path) if db_path is not None else fetch_bible_db(out_dir)
    splits, held_out = _build_splits(db_path, source, target, versions)

    folder.mkdir(parents=True, exist_ok=True)
    stats_path.unlink(missing_ok=True)  # written last, so an interrupted build is never taken as cached
    for split, path in files.items():
        with path.open("w", encoding="utf-8", newline="\n") as f:
            for row in splits[split]:
                f.write(json.dumps({"translation": {source: row[0], target: row[1]}}, ensure_ascii=False) + "\n")
    texts = held_out["texts"]
    with (folder / TEST_VERSIONS_FILE).open("w", encoding="utf-8", newline="\n") as f:
        for _, _, key in splits["test"]:
            row = {
                "verse": list(key),
                "sources": {bb: texts[bb].get(key) or None for bb in held_out["sources"]},
                "references": {bb: texts[bb].get(key) or None for bb in held_out["references"]},
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    used = held_out["sources"], held_out["references"]
    stats = {
        "pair": pair,
        "recipe_version": RECIPE_VERSION,
        "versions": {source: used[0][0], target: used[1][0]},
        "sizes": {split: len(splits[split]) for split in SPLITS},
    }
    if versions != "one":
        stats["versions"] = {source: used[0], target: used[1]}
        stats["train_versions"] = versions
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return files


def load_corpus(pair: str = "en-de", data_dir: Path | None = None, versions: str = "one") -> "datasets.DatasetDict":
    """The corpus of ``pair`` as a DatasetDict with train/validation/test, built first if needed."""
    import datasets  # the train extra: `vanilla-export-argos` builds pairs without it

    files = build_corpus(pair, data_dir, versions=versions)
    return datasets.load_dataset("json", data_files={split: str(path) for split, path in files.items()})


def load_test_versions(pair: str = "en-de", data_dir: Path | None = None, versions: str = "one") -> list[dict]:
    """The test split's verses in every free version of each side (``test_versions.jsonl``), built first if
    needed: one dict per test row, {"verse": [book, chapter, verse], "sources": {bbName: text or None}, ...}."""
    files = build_corpus(pair, data_dir, versions=versions)
    path = files["test"].parent / TEST_VERSIONS_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
