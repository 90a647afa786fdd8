"""Many directions of the built-in corpus for one multilingual model (Johnson et al. 2017, "Google's Multilingual
NMT": the target language's token is the only change; see `modeling_vanilla/tokenization_vanilla.py`).

The Bible of `bible.py` is many-way parallel: a verse exists in every language. A multilingual build reads the first
free version of each language, cleaned as `bible.py` cleans it, and splits *verses* by book with `pairs.py`'s rule,
so that a verse is in the same split in every language: a held-out verse is held out in all of its languages. A
held-out verse is kept only where every language has it and none of its texts repeats a train text of its language,
or shares half of its word 4-grams with one (`pairs.py`'s leak rule, applied to every language); every direction is
therefore scored on the same verses. The build is `<data dir>/multilingual-<codes>/{train,validation,test}.jsonl`,
one verse a line: `{"verse": [book, chapter, verse], "texts": {"en": ..., "de": ...}}` (a train verse lists the
languages that have it), and `stats.json`.

A run trains the directions chosen (`parse_directions`: a list such as "en-de,de-en", English to and from every
other language, or every ordered pair) and is tested in those and in any direction it leaves out (a zero-shot probe).
Training rows come from verses (`direction_rows`), each `{"source_lang", "target_lang", "source", "target"}`. The
sampling rule: every direction of every verse (`per_verse=None`), or, for each verse, `per_verse` directions drawn
uniformly without replacement from the directions asked for (seeded). The train split holds every direction of every
verse with the verse's index (`VERSE`), and the draw is made afresh each epoch, seeded by the seed and the epoch
(`batching.TokenBudgetBatchSampler`'s groups); validation is drawn once. Every direction has about the same verses
here, so this draws directions uniformly, as temperature sampling over directions (p proportional to n^(1/T)) does at
any T for equal sizes, and shows every train verse in each epoch. A pair is kept where both sides pass `pairs.py`'s
length filter for that direction (bounds from the direction's train verses) and, in training, where its normalised
source is new to its direction (`pairs.py`'s de-duplication).
"""

import itertools
import json
import random
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

import datasets

from .bible import LANGUAGE_NAMES, Verse, default_data_dir, fetch_bible_db, free_languages, free_versions, read_version
from .direction import Direction
from .pairs import SPLITS, LeakIndex, keep_pair, normalise, pair_length_bounds, split_of

RECIPE_VERSION = 1
# The columns of a split of many directions: what `direction_rows` writes, and what the user's files must hold.
COLUMNS = ("source_lang", "target_lang", "source", "target")
VERSE = "verse"  # the column of a train row's verse (its index): the directions of a verse are drawn from its rows
ENGLISH = "en"
DIRECTION_SETS = ("english-centric", "all")  # the named sets of directions (`parse_directions`)


def check_language(code: str, spec: str) -> None:
    """ValueError naming `code` (read from `spec`) where it is no language of the corpus, or has no free version."""
    free = free_languages()
    if code not in LANGUAGE_NAMES:
        raise ValueError(f"unknown language {code!r} in {spec!r}; the corpus's free languages: {', '.join(free)}")
    if code not in free:
        raise ValueError(
            f"{LANGUAGE_NAMES[code]} ({code}) has no free version in the corpus (see `vanilla-corpus "
            f"--list-pairs`); the free languages: {', '.join(free)}"
        )


def parse_languages(spec: str) -> list[str]:
    """`"en,de,fr"` -> `["en", "de", "fr"]`; `"all"` -> every language with a free version (read from `bible.py`
    now). ValueError naming the problem: an unknown language, one with no free version, a repeat, fewer than two."""
    if spec.strip() == "all":
        return free_languages()
    codes = [code.strip() for code in spec.split(",")]
    for code in codes:
        check_language(code, spec)
    if len(set(codes)) != len(codes) or len(codes) < 2:
        raise ValueError(f"languages {spec!r}: give two or more distinct languages, or 'all'")
    return codes


def directions(languages: Sequence[str], leave_out: Sequence[Direction] = ()) -> list[Direction]:
    """Every ordered pair of two of `languages`, less those of `leave_out` (e.g. for a zero-shot probe)."""
    return [Direction(*pair) for pair in itertools.permutations(languages, 2) if pair not in set(leave_out)]


def english_centric(languages: Sequence[str]) -> list[Direction]:
    """English into and out of every other of `languages` (ValueError where English is not one of them)."""
    if ENGLISH not in languages:
        raise ValueError(f"english-centric: English (en) is not one of the languages {','.join(languages)}")
    others = [code for code in languages if code != ENGLISH]
    return [direction for code in others for direction in (Direction(ENGLISH, code), Direction(code, ENGLISH))]


def parse_directions(spec: str, languages: Sequence[str] | None = None) -> list[Direction]:
    """The directions of `spec`: `"en-de,de-en,..."`, `"english-centric"` (`english_centric`) or `"all"` (every
    ordered pair), the named sets over `languages` (default: every language with a free version). ValueError naming
    the problem: a malformed direction, an unknown language or one with no free version, a language outside
    `languages`, a language into itself, a repeat."""
    spec = spec.strip()
    if spec in DIRECTION_SETS:
        codes = list(languages) if languages is not None else free_languages()
        return english_centric(codes) if spec == "english-centric" else directions(codes)
    chosen: list[Direction] = []
    for text in (part.strip() for part in spec.split(",")):
        try:
            direction = Direction.parse(text)
        except ValueError:
            raise ValueError(
                f"{text!r} in {spec!r} is no direction: give SRC-TGT directions (e.g. en-de,de-en), or one of "
                f"{', '.join(DIRECTION_SETS)}"
            ) from None
        for code in direction:
            check_language(code, spec)
            if languages is not None and code not in languages:
                raise ValueError(f"direction {text}: {code} is not one of the languages {','.join(languages)}")
        if direction.source == direction.target:
            raise ValueError(f"direction {text} translates {LANGUAGE_NAMES[direction.source]} into itself")
        if direction in chosen:
            raise ValueError(f"direction {text} is given twice in {spec!r}")
        chosen.append(direction)
    return chosen


def languages_of(pairs: Sequence[Direction]) -> list[str]:
    """The languages of `pairs`, in the order they first appear."""
    return list(dict.fromkeys(code for pair in pairs for code in pair))


def multilingual_folder(languages: Sequence[str], out_dir: Path | None = None) -> Path:
    """`<data dir>/multilingual-<codes joined by '+'>`, the codes in the order given."""
    return (Path(out_dir) if out_dir is not None else default_data_dir()) / f"multilingual-{'+'.join(languages)}"


def _read_texts(db_path: Path, languages: Sequence[str]) -> dict[str, dict[Verse, str]]:
    """Each language's first free version, cleaned, by verse (empty verses left out)."""
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        texts = {code: read_version(db, free_versions(code)[0]) for code in languages}
    return {code: {key: text for key, text in verses.items() if text} for code, verses in texts.items()}


def split_verses(texts: dict[str, dict[Verse, str]]) -> dict[str, list[dict]]:
    """Verses by split (see the module docstring): train verses that two or more languages have; held-out verses
    that every language has and whose texts do not leak from the train texts of their language."""
    keys = sorted(set().union(*texts.values()))
    by_split = {split: [key for key in keys if split_of(key[0]) == split] for split in SPLITS}
    train = [
        {"verse": list(key), "texts": {code: verses[key] for code, verses in texts.items() if key in verses}}
        for key in by_split["train"]
    ]
    train = [row for row in train if len(row["texts"]) >= 2]
    indexes = {code: LeakIndex((row["texts"][code] for row in train if code in row["texts"]), code) for code in texts}
    splits = {"train": train}
    for split in ("validation", "test"):
        complete = [key for key in by_split[split] if all(key in verses for verses in texts.values())]
        splits[split] = [
            {"verse": list(key), "texts": {code: verses[key] for code, verses in texts.items()}}
            for key in complete
            if not any(indexes[code].leaks(verses[key]) for code, verses in texts.items())
        ]
    return splits


def build_multilingual_corpus(
    languages: Sequence[str], out_dir: Path | None = None, db_path: Path | None = None
) -> dict[str, Path]:
    """Build the verse splits of `languages` (see the module docstring) and return their files; an existing build of
    this recipe is reused. `db_path` defaults to the cached real `bible.db` (downloaded on first use)."""
    languages = parse_languages(",".join(languages))
    folder = multilingual_folder(languages, out_dir)
    files = {split: folder / f"{split}.jsonl" for split in SPLITS}
    stats_path = folder / "stats.json"
    if (
        stats_path.is_file()
        and json.loads(stats_path.read_text(encoding="utf-8")).get("recipe_version") == RECIPE_VERSION
    ):
        return files
    out_dir = Path(out_dir) if out_dir is not None else default_data_dir()
    db_path = Path(db_path) if db_path is not None else fetch_bible_db(out_dir)
    splits = split_verses(_read_texts(db_path, languages))
    folder.mkdir(parents=True, exist_ok=True)
    stats_path.unlink(missing_ok=True)  # written last: an interrupted build is never taken as cached
    for split, path in files.items():
        lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in splits[split])
        path.write_text("".join(lines), encoding="utf-8", newline="\n")
    stats = {
        "languages": languages,
        "recipe_version": RECIPE_VERSION,
        "versions": {code: free_versions(code)[0] for code in languages},
        "verses": {split: len(rows) for split, rows in splits.items()},
    }
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return files


def load_verses(
    languages: Sequence[str], data_dir: Path | None = None, db_path: Path | None = None
) -> dict[str, list[dict]]:
    """The verse splits of `languages`, built first if needed."""
    files = build_multilingual_corpus(languages, data_dir, db_path)
    return {
        split: [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for split, path in files.items()
    }


def length_bounds(train: list[dict], pairs: Sequence[Direction]) -> dict[Direction, tuple[float, float]]:
    """`pairs.py`'s length-ratio bounds of each direction, from the train verses both of its languages have."""
    bounds = {}
    for source, target in pairs:
        rows = [row["texts"] for row in train if source in row["texts"] and target in row["texts"]]
        keys = range(len(rows))
        sides = ({i: rows[i][source] for i in keys}, {i: rows[i][target] for i in keys})
        bounds[source, target] = pair_length_bounds(f"{source}-{target}", *sides)
    return bounds


def direction_rows(
    verses: list[dict],
    pairs: Sequence[Direction],
    bounds: dict[Direction, tuple[float, float]],
    per_verse: int | None = None,
    seed: int = 0,
    dedupe: bool = False,
    verse_index: bool = False,
) -> list[dict]:
    """The translation rows of `verses` in the directions `pairs` by the sampling rule of the module docstring;
    with `dedupe`, a row whose normalised source its direction already has is left out; with `verse_index`, each
    row holds the index of its verse in `verses` (column `VERSE`)."""
    rng = random.Random(seed)
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for index, verse in enumerate(verses):
        texts = verse["texts"]
        candidates = [(s, t) for s, t in pairs if s in texts and t in texts]
        if per_verse is not None and per_verse < len(candidates):
            candidates = rng.sample(candidates, per_verse)
        for source, target in candidates:
            if not keep_pair(texts[source], texts[target], bounds[source, target]):
                continue
            if dedupe:
                key = (source, target, normalise(texts[source]))
                if key in seen:
                    continue
                seen.add(key)
            row = {"source_lang": source, "target_lang": target, "source": texts[source], "target": texts[target]}
            rows.append({**row, VERSE: index} if verse_index else row)
    return rows


def load_multilingual_corpus(
    languages: Sequence[str],
    pairs: Sequence[Direction] | None = None,
    per_verse: int | None = None,
    seed: int = 0,
    data_dir: Path | None = None,
    db_path: Path | None = None,
    tested: Sequence[Direction] | None = None,
) -> datasets.DatasetDict:
    """Train, validation and test rows of `languages` in the directions `pairs` (default: every one): train in every
    direction of `pairs` with each row's verse (`VERSE`; de-duplicated), for the sampler to draw `per_verse` of them
    each epoch; validation by the sampling rule (`per_verse`, `seed`), drawn once; test in every direction of `tested`
    (default: `pairs`)."""
    verses = load_verses(languages, data_dir, db_path)
    pairs = list(pairs) if pairs is not None else directions(languages)
    tested = list(tested) if tested is not None else pairs
    bounds = length_bounds(verses["train"], list(dict.fromkeys([*pairs, *tested])))
    rows = {
        "train": direction_rows(verses["train"], pairs, bounds, dedupe=True, verse_index=True),
        "validation": direction_rows(verses["validation"], pairs, bounds, per_verse, seed),
        "test": direction_rows(verses["test"], tested, bounds),
    }
    return datasets.DatasetDict({split: datasets.Dataset.from_list(split_rows) for split, split_rows in rows.items()})


def training_splits(
    languages: Sequence[str],
    trained: Sequence[Direction] | None = None,
    tested: Sequence[Direction] | None = None,
    per_verse: int | None = None,
    seed: int = 0,
) -> datasets.DatasetDict:
    """`load_multilingual_corpus` of the directions `trained` (default: every one) for training and validation, and a
    test split of those of `tested` (default: `trained`; a direction not trained is a zero-shot probe)."""
    splits = load_multilingual_corpus(languages, trained, per_verse, seed, tested=tested)
    if empty := [split for split, rows in splits.items() if not len(rows)]:
        raise ValueError(
            f"the corpus of {', '.join(languages)} has no {' and no '.join(empty)} verse that every language has "
            "(or whose texts do not repeat train texts): choose other languages"
        )
    return splits


def check_rows(
    splits: datasets.DatasetDict, languages: Sequence[str], trained: Sequence[Direction] | None = None
) -> datasets.DatasetDict:
    """The user's splits of many directions, checked: the columns `COLUMNS` and no language outside `languages`
    (ValueError naming the problem); rows of a direction not in `trained` (default: every one) dropped from train and
    validation."""
    for split, rows in splits.items():
        if missing := [column for column in COLUMNS if column not in rows.column_names]:
            raise ValueError(
                f"the {split} data of a multilingual run needs the columns {', '.join(COLUMNS)}; it lacks "
                f"{', '.join(missing)}"
            )
        found = set(rows.unique("source_lang")) | set(rows.unique("target_lang"))
        if unknown := sorted(found - set(languages)):
            raise ValueError(f"the {split} data has languages {unknown} outside --languages {','.join(languages)}")
    if trained is None or set(trained) >= set(directions(languages)):
        return splits
    kept = {f"{source}-{target}" for source, target in trained}
    for split in ("train", "validation"):
        splits[split] = splits[split].filter(lambda row: f"{row['source_lang']}-{row['target_lang']}" in kept)
    return splits


def tokenizer_texts(train: list[dict]) -> Iterator[str]:
    """Every text of every train verse, in every language: what the joint tokenizer is trained on."""
    for row in train:
        yield from row["texts"].values()
