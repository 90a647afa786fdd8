"""Many directions of the built-in corpus for one multilingual model (Johnson et al. 2017, "Google's Multilingual
NMT": the target language's token is the only change; see `modeling_vanilla/tokenization_vanilla.py`).

The Bible of `corpus.py` is many-way parallel: a verse exists in every language. A multilingual build reads the first
free version of each language, cleaned as `corpus.py` cleans it, and splits *verses* by book with `corpus.py`'s rule,
so that a verse is in the same split in every language: a held-out verse is held out in all of its languages. A
held-out verse is kept only where every language has it and none of its texts repeats a train text of its language,
or shares half of its word 4-grams with one (`corpus.py`'s leak rule, applied to every language); every direction is
therefore scored on the same verses. The build is `<data dir>/multilingual-<codes>/{train,validation,test}.jsonl`,
one verse a line: `{"verse": [book, chapter, verse], "texts": {"en": ..., "de": ...}}` (a train verse lists the
languages that have it), and `stats.json`.

Training rows come from verses (`direction_rows`), each `{"source_lang", "target_lang", "source", "target"}`. The
sampling rule: every direction of every verse (`per_verse=None`), or, for each verse, `per_verse` directions drawn
uniformly without replacement from the directions asked for (seeded). Every direction has about the same verses here,
so this draws directions uniformly, as temperature sampling over directions (p proportional to n^(1/T)) does at any
T for equal sizes, and shows every train verse in each epoch. A pair is kept where both sides pass `corpus.py`'s
length filter for that direction (bounds from the direction's train verses) and, in training, where its normalised
source is new to its direction (`corpus.py`'s de-duplication).
"""

import itertools
import json
import random
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import corpus
from .corpus import SPLITS, Verse
from .evaluation import corpus_bleu, corpus_chrf
from .translator import translate

RECIPE_VERSION = 1
Direction = tuple[str, str]
# The columns of a split of many directions: what `direction_rows` writes, and what the user's files must hold.
COLUMNS = ("source_lang", "target_lang", "source", "target")


def parse_languages(spec: str) -> list[str]:
    """`"en,de,fr"` -> `["en", "de", "fr"]`; `"all"` -> every language with a free version (read from `corpus.py`
    now). ValueError naming the problem: an unknown language, one with no free version, a repeat, fewer than two."""
    free = corpus.free_languages()
    if spec.strip() == "all":
        return free
    codes = [code.strip() for code in spec.split(",")]
    for code in codes:
        if code not in corpus.LANGUAGE_NAMES:
            raise ValueError(f"unknown language {code!r} in {spec!r}; the corpus's free languages: {', '.join(free)}")
        if code not in free:
            raise ValueError(
                f"{corpus.LANGUAGE_NAMES[code]} ({code}) has no free version in the corpus (see `vanilla-corpus "
                f"--list-pairs`); the free languages: {', '.join(free)}"
            )
    if len(set(codes)) != len(codes) or len(codes) < 2:
        raise ValueError(f"languages {spec!r}: give two or more distinct languages, or 'all'")
    return codes


def directions(languages: Sequence[str], leave_out: Sequence[Direction] = ()) -> list[Direction]:
    """Every ordered pair of two of `languages`, less those of `leave_out` (e.g. for a zero-shot probe)."""
    return [pair for pair in itertools.permutations(languages, 2) if pair not in set(leave_out)]


def multilingual_folder(languages: Sequence[str], out_dir: Path | None = None) -> Path:
    """`<data dir>/multilingual-<codes joined by '+'>`, the codes in the order given."""
    return (Path(out_dir) if out_dir is not None else corpus.default_data_dir()) / f"multilingual-{'+'.join(languages)}"


def _read_texts(db_path: Path, languages: Sequence[str]) -> dict[str, dict[Verse, str]]:
    """Each language's first free version, cleaned, by verse (empty verses left out)."""
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        texts = {code: corpus.read_version(db, corpus.free_versions(code)[0]) for code in languages}
    return {code: {key: text for key, text in verses.items() if text} for code, verses in texts.items()}


def split_verses(texts: dict[str, dict[Verse, str]]) -> dict[str, list[dict]]:
    """Verses by split (see the module docstring): train verses that two or more languages have; held-out verses
    that every language has and whose texts do not leak from the train texts of their language."""
    keys = sorted(set().union(*texts.values()))
    by_split = {split: [key for key in keys if corpus._split_of(key[0]) == split] for split in SPLITS}
    train = [
        {"verse": list(key), "texts": {code: verses[key] for code, verses in texts.items() if key in verses}}
        for key in by_split["train"]
    ]
    train = [row for row in train if len(row["texts"]) >= 2]
    indexes = {
        code: corpus._LeakIndex((row["texts"][code] for row in train if code in row["texts"]), code) for code in texts
    }
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
    out_dir = Path(out_dir) if out_dir is not None else corpus.default_data_dir()
    db_path = Path(db_path) if db_path is not None else corpus.fetch_bible_db(out_dir)
    splits = split_verses(_read_texts(db_path, languages))
    folder.mkdir(parents=True, exist_ok=True)
    stats_path.unlink(missing_ok=True)  # written last: an interrupted build is never taken as cached
    for split, path in files.items():
        lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in splits[split])
        path.write_text("".join(lines), encoding="utf-8", newline="\n")
    stats = {
        "languages": languages,
        "recipe_version": RECIPE_VERSION,
        "versions": {code: corpus.free_versions(code)[0] for code in languages},
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
    """`corpus.py`'s length-ratio bounds of each direction, from the train verses both of its languages have."""
    bounds = {}
    for source, target in pairs:
        rows = [row["texts"] for row in train if source in row["texts"] and target in row["texts"]]
        keys = range(len(rows))
        sides = ({i: rows[i][source] for i in keys}, {i: rows[i][target] for i in keys})
        bounds[source, target] = corpus._length_bounds(f"{source}-{target}", *sides)
    return bounds


def direction_rows(
    verses: list[dict],
    pairs: Sequence[Direction],
    bounds: dict[Direction, tuple[float, float]],
    per_verse: int | None = None,
    seed: int = 0,
    dedupe: bool = False,
) -> list[dict]:
    """The translation rows of `verses` in the directions `pairs` by the sampling rule of the module docstring;
    with `dedupe`, a row whose normalised source its direction already has is left out."""
    rng = random.Random(seed)
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for verse in verses:
        texts = verse["texts"]
        candidates = [(s, t) for s, t in pairs if s in texts and t in texts]
        if per_verse is not None and per_verse < len(candidates):
            candidates = rng.sample(candidates, per_verse)
        for source, target in candidates:
            if not corpus._keep_pair(texts[source], texts[target], bounds[source, target]):
                continue
            if dedupe:
                key = (source, target, corpus.normalise(texts[source]))
                if key in seen:
                    continue
                seen.add(key)
            rows.append(
                {"source_lang": source, "target_lang": target, "source": texts[source], "target": texts[target]}
            )
    return rows


def load_multilingual_corpus(
    languages: Sequence[str],
    pairs: Sequence[Direction] | None = None,
    per_verse: int | None = None,
    seed: int = 0,
    data_dir: Path | None = None,
    db_path: Path | None = None,
) -> datasets.DatasetDict:
    """Train, validation and test rows of `languages` in the directions `pairs` (default: every one): train and
    validation by the sampling rule (`per_verse`, `seed`; train de-duplicated), test in every direction of `pairs`."""
    verses = load_verses(languages, data_dir, db_path)
    pairs = list(pairs) if pairs is not None else directions(languages)
    bounds = length_bounds(verses["train"], pairs)
    rows = {
        "train": direction_rows(verses["train"], pairs, bounds, per_verse, seed, dedupe=True),
        "validation": direction_rows(verses["validation"], pairs, bounds, per_verse, seed),
        "test": direction_rows(verses["test"], pairs, bounds),
    }
    return datasets.DatasetDict({split: datasets.Dataset.from_list(split_rows) for split, split_rows in rows.items()})


def training_splits(
    languages: Sequence[str], leave_out: Sequence[Direction] = (), per_verse: int | None = None, seed: int = 0
) -> datasets.DatasetDict:
    """`load_multilingual_corpus` of every direction but `leave_out` for training and validation, and a test split of
    every direction, the left-out ones included (a zero-shot probe scores them)."""
    splits = load_multilingual_corpus(languages, directions(languages, leave_out), per_verse, seed)
    if leave_out:
        splits["test"] = load_multilingual_corpus(languages)["test"]
    if empty := [split for split, rows in splits.items() if not len(rows)]:
        raise ValueError(
            f"the corpus of {', '.join(languages)} has no {' and no '.join(empty)} verse that every language has "
            "(or whose texts do not repeat train texts): choose other languages"
        )
    return splits


def check_rows(
    splits: datasets.DatasetDict, languages: Sequence[str], leave_out: Sequence[Direction] = ()
) -> datasets.DatasetDict:
    """The user's splits of many directions, checked: the columns `COLUMNS` and no language outside `languages`
    (ValueError naming the problem); rows of a `leave_out` direction dropped from train and validation."""
    for split, rows in splits.items():
        if missing := [column for column in COLUMNS if column not in rows.column_names]:
            raise ValueError(
                f"the {split} data of a multilingual run needs the columns {', '.join(COLUMNS)}; it lacks "
                f"{', '.join(missing)}"
            )
        found = set(rows.unique("source_lang")) | set(rows.unique("target_lang"))
        if unknown := sorted(found - set(languages)):
            raise ValueError(f"the {split} data has languages {unknown} outside --languages {','.join(languages)}")
    if not leave_out:
        return splits
    left_out = {f"{source}-{target}" for source, target in leave_out}
    for split in ("train", "validation"):
        splits[split] = splits[split].filter(lambda row: f"{row['source_lang']}-{row['target_lang']}" not in left_out)
    return splits


def score_directions(rows: dict[str, list], predictions: list[str]) -> dict[str, dict]:
    """BLEU (with the target's tokenizer, `evaluation.bleu_tokenizer`) and chrF of `predictions` of `rows`, by
    direction ("de-fr"), in the order of the directions' first rows."""
    by_direction: dict[str, list[int]] = {}
    for i, (source, target) in enumerate(zip(rows["source_lang"], rows["target_lang"], strict=True)):
        by_direction.setdefault(f"{source}-{target}", []).append(i)
    scores = {}
    for direction, indices in by_direction.items():
        predicted, references = [predictions[i] for i in indices], [rows["target"][i] for i in indices]
        bleu, chrf = corpus_bleu(predicted, references, direction.split("-")[1]), corpus_chrf(predicted, references)
        scores[direction] = {
            "bleu": round(bleu["score"], 2),
            "signature": bleu["signature"],
            "chrf": round(chrf["score"], 2),
            "chrf_signature": chrf["signature"],
            "sentences": len(indices),
        }
    return scores


def tokenizer_texts(train: list[dict]) -> Iterator[str]:
    """Every text of every train verse, in every language: what the joint tokenizer is trained on."""
    for row in train:
        yield from row["texts"].values()


def encode(tokenizer: PreTrainedTokenizerBase, rows: dict[str, list]) -> dict[str, list[list[int]]]:
    """`input_ids` and `labels` of a batch of rows of any directions (columns `source`, `target`, `target_lang`):
    what `tokenizer(source, text_target=target)` gives with `tokenizer.tgt_lang` set to each row's target language
    (`source </s>` and `__tgt__ target </s>`), in one pass over the batch. The texts are read as text: a special
    token's spelling in them is not the token."""
    sources = tokenizer(rows["source"], split_special_tokens=True)["input_ids"]
    targets = tokenizer(rows["target"], add_special_tokens=False, split_special_tokens=True)["input_ids"]
    labels = [
        [tokenizer.get_lang_id(language), *ids, tokenizer.eos_token_id]
        for language, ids in zip(rows["target_lang"], targets, strict=True)
    ]
    return {"input_ids": sources, "labels": labels}


def translate_rows(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: dict[str, list], **options
) -> list[str]:
    """The translation of each row's `source` into its `target_lang`, in the rows' order: `translator.translate`
    (whose keyword `options` these are) once per target language, with its token as `forced_bos_token_id`."""
    translations = [""] * len(rows["source"])
    for language in dict.fromkeys(rows["target_lang"]):
        indices = [i for i, target in enumerate(rows["target_lang"]) if target == language]
        sources = [rows["source"][i] for i in indices]
        texts = translate(model, tokenizer, sources, forced_bos_token_id=tokenizer.get_lang_id(language), **options)
        for i, text in zip(indices, texts, strict=True):
            translations[i] = text
    return translations
