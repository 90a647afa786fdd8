"""The data of a training run: its splits (the built-in corpus, the user's files or a `datasets` dataset), the joint
BPE tokenizer and the token ids, computed by `datasets` in batches and kept on disk in Arrow files. Memory stays
bounded whatever the corpus size: no split is held as Python objects, and the tokenizer learns from a stream.

Both the tokenizer and the token ids are cached beside the split's own Arrow files, under a key of the data and the
settings: a second run over the same data, and every other process of a data-parallel run, reads them instead of
computing them again.
"""

import csv
import dataclasses
import hashlib
from collections.abc import Iterator
from itertools import compress
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.fingerprint import Hasher
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from .corpus import Direction, load_corpus, multilingual
from .tokenizer import train_joint_bpe

# The column of each tokenized pair that token-budget batching reads: the longer side, in tokens.
LENGTH = "length"


def check_text_file(path: str) -> str:
    """Refuses a data file that is not UTF-8, naming the first bad lines; counts blank lines aloud (they are
    skipped when the file is read). Returns the SHA-256 of its bytes."""
    bad, blank, digest = [], 0, hashlib.sha256()
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            digest.update(line)
            try:
                blank += not line.decode("utf-8").strip()
            except UnicodeDecodeError:
                bad.append(number)
    if bad:
        raise ValueError(f"{path} is not UTF-8 text: {len(bad)} bad lines, first at lines {bad[:5]}")
    if blank:
        print(f"{path}: {blank} blank lines skipped")
    return digest.hexdigest()


def load_file(split: str, path: str) -> datasets.Dataset:
    """One split from a JSONL file, or from a CSV file (by its extension) whose cells are all read as text: no
    "NA" or "null" becomes a missing value, no column of digits a number.

    `datasets` caches what it reads under a key of the file's path and modification time only, so a file rewritten
    with the same time would be read as it was: the cache is keyed by the file's SHA-256 as well (the builder's
    config name)."""
    name = f"sha256-{check_text_file(path)}"
    if not path.endswith(".csv"):
        return datasets.load_dataset("json", name=name, data_files={split: path}, split=split)
    with open(path, encoding="utf-8", newline="") as file:
        header = next(csv.reader(file), [])
    text = datasets.Features({column: datasets.Value("string") for column in header})
    return datasets.load_dataset(
        "csv", name=name, data_files={split: path}, split=split, features=text, na_filter=False
    )


def load_splits(
    pair: str,
    files: dict[str, str] | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
    versions: str = "one",
) -> datasets.DatasetDict:
    """The user's `files` (split -> JSONL or CSV path, each read by its own extension; all with the same columns),
    a `datasets` dataset (a Hub id, a local folder of data files, or a folder written by `save_to_disk`), or else
    the built-in corpus of `pair` (with `versions`, see `corpus.build_corpus`). The splits are train, validation
    and, optionally, test."""
    if files:
        splits = datasets.DatasetDict({split: load_file(split, path) for split, path in files.items()})
        columns = {split: sorted(data.column_names) for split, data in splits.items()}
        if len({tuple(names) for names in columns.values()}) > 1:
            raise ValueError(
                "the data files differ in layout: "
                + ", ".join(f"{split} ({files[split]}) has columns {names}" for split, names in columns.items())
                + "; give every file the same columns: 'translation', or one per language"
            )
    elif dataset_name:
        splits = load_named_dataset(dataset_name, dataset_config)
    else:
        splits = load_corpus(pair, versions=versions)
    if "validation" not in splits:
        raise ValueError("the data needs a validation split (pass --validation-file)")
    return splits


def load_named_dataset(name: str, config: str | None) -> datasets.DatasetDict:
    """A `datasets` dataset by name (`datasets.load_dataset`: a Hub id or a local folder of data files, `config`
    naming one of its configurations), or a folder written by `DatasetDict.save_to_disk`, read in place."""
    saved = Path(name)
    if (saved / datasets.config.DATASETDICT_JSON_FILENAME).is_file():
        if config is not None:
            raise ValueError(f"{name} is a dataset saved by save_to_disk, which has no configurations: drop {config!r}")
        return datasets.load_from_disk(saved)
    if (saved / datasets.config.DATASET_STATE_JSON_FILENAME).is_file():
        raise ValueError(
            f"{name} holds a single split saved by Dataset.save_to_disk; the data needs train and validation splits: "
            "save a DatasetDict"
        )
    return datasets.load_dataset(name, config)


def sides(batch: dict[str, list], source: str, target: str) -> tuple[list[str], list[str]]:
    """Source and target sentences of a batch of rows in the `{"translation": {lang: text}}` layout, or with one
    column per language (CSV)."""
    if "translation" in batch:
        return [row[source] for row in batch["translation"]], [row[target] for row in batch["translation"]]
    missing = {source, target} - set(batch)
    if missing:
        raise ValueError(f"the data has neither a 'translation' column nor columns {sorted(missing)}")
    return list(batch[source]), list(batch[target])


def sentences(split: datasets.Dataset, source: str, target: str) -> tuple[list[str], list[str]]:
    """All source and all target sentences of a split (for translating and scoring the validation or test set)."""
    return sides(split.to_dict(), source, target)


def joint_texts(
    split: datasets.Dataset, source: str, target: str, rows: np.ndarray | None = None, batch_size: int = 10_000
) -> Iterator[str]:
    """Every source sentence, then every target sentence (of the pairs where the boolean array `rows` is True, if
    given), read batch by batch: the joint BPE's training text."""
    for index in (0, 1):
        for start in range(0, len(split), batch_size):
            texts = sides(split[start : start + batch_size], source, target)[index]
            yield from texts if rows is None else compress(texts, rows[start : start + batch_size])


def joint_bpe(
    split: datasets.Dataset,
    source: str,
    target: str,
    vocab_size: int,
    model_max_length: int,
    sample: int | None = None,
    seed: int = 0,
) -> PreTrainedTokenizerBase:
    """The joint BPE of the split's sentences, or of `sample` pairs drawn from it with `seed` (for corpora of
    millions of pairs, whose merges a sample already gives), read from the cache when it holds one."""
    # "byte-fallback": tokenizers cached before train_joint_bpe gained byte fallback are not reused
    settings = (split._fingerprint, source, target, vocab_size, model_max_length, sample, seed, "byte-fallback")
    cache = cache_dir(split) / f"vanilla-bpe-{Hasher.hash(settings)}" if split.cache_files else None
    if cache is not None and (cache / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cache)
    rows = None
    if sample is not None and sample < len(split):  # a mask, not `select`: see `keep_pairs`
        rows = np.zeros(len(split), dtype=bool)
        rows[np.random.default_rng(seed).choice(len(split), sample, replace=False)] = True
    texts = joint_texts(split, source, target, rows)
    tokenizer = train_joint_bpe(texts, vocab_size, model_max_length=model_max_length)
    if cache is not None:
        tokenizer.save_pretrained(cache)
    return tokenizer


def cache_dir(split: datasets.Dataset) -> Path:
    """The folder of the split's Arrow files (in `datasets`' cache), where what is derived from it is cached too."""
    return Path(split.cache_files[0]["filename"]).parent


def encode_directions(tokenizer: PreTrainedTokenizerBase, rows: dict[str, list]) -> dict[str, list[list[int]]]:
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


def tokenize(
    split: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    source: str,
    target: str,
    max_length: int,
    name: str,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """`input_ids`, `labels` and `length` (the longer side) of every pair, in the split's order, computed by
    `num_proc` processes; pairs with an empty side or longer than `max_length` tokens are left out, and counted
    aloud. The result is cached under a key of the split, the tokenizer and the languages. A split of many directions
    (`multilingual.COLUMNS`) is encoded by `encode_directions`, each target after its language's token, and keeps
    its rows' verses (`multilingual.VERSE`) where it has them."""
    many_directions = "target_lang" in split.column_names

    def encode(batch: dict[str, list]) -> dict[str, list]:
        if many_directions:
            sources, targets, encoded = batch["source"], batch["target"], encode_directions(tokenizer, batch)
        else:
            sources, targets = sides(batch, source, target)
            encoded = tokenizer(sources, text_target=targets)
        return {
            "input_ids": encoded["input_ids"],
            "labels": encoded["labels"],
            LENGTH: [max(len(a), len(b)) for a, b in zip(encoded["input_ids"], encoded["labels"], strict=True)],
            "empty": [not a.strip() or not b.strip() for a, b in zip(sources, targets, strict=True)],
            **({multilingual.VERSE: batch[multilingual.VERSE]} if multilingual.VERSE in batch else {}),
        }

    key = Hasher.hash((split._fingerprint, tokenizer.backend_tokenizer.to_str(), source, target, "tokenize-v1"))
    encoded = split.map(
        encode,
        batched=True,
        remove_columns=split.column_names,
        num_proc=num_proc,
        new_fingerprint=key,
        desc=f"tokenizing {name}",
    )
    columns = encoded.with_format("numpy", columns=[LENGTH, "empty"])[:]
    empty, too_long = columns["empty"], ~columns["empty"] & (columns[LENGTH] > max_length)
    print(
        f"{name}: {len(encoded) - empty.sum() - too_long.sum()} pairs kept, {empty.sum()} with an empty side and "
        f"{too_long.sum()} longer than {max_length} tokens left out"
    )
    return keep_pairs(encoded, max_length, new_fingerprint=Hasher.hash((key, max_length)))


def keep_pairs(encoded: datasets.Dataset, max_length: int, new_fingerprint: str) -> datasets.Dataset:
    """The pairs of `encoded` with no empty side and at most `max_length` tokens, as Arrow files of their own
    (cached), filtered batch by batch as Arrow tables. (`select` or `filter` would keep an indices mapping instead,
    through which `datasets` reads a column by making a Python int of every row index: 10 s and 500 MiB per million
    pairs for each read of the lengths.)"""

    def kept(batch: pa.Table) -> pa.Table:
        keep = pc.and_(pc.invert(batch["empty"]), pc.less_equal(batch[LENGTH], max_length))
        return batch.filter(keep).drop_columns("empty")

    arrow = encoded.with_format("arrow")
    columns = encoded.column_names
    filtered = arrow.map(kept, batched=True, batch_size=10_000, remove_columns=columns, new_fingerprint=new_fingerprint)
    return filtered.with_format(None)


def lengths(tokenized: datasets.Dataset) -> np.ndarray:
    """The `length` column of a tokenized split, read from Arrow as a numpy array."""
    return tokenized.with_format("numpy", columns=[LENGTH])[:][LENGTH]


def verses(tokenized: datasets.Dataset) -> np.ndarray | None:
    """The verse of each row of a tokenized split of many directions (`multilingual.VERSE`), None where it has
    none (a split of one pair, the user's files, a validation split)."""
    if multilingual.VERSE not in tokenized.column_names:
        return None
    return tokenized.with_format("numpy", columns=[multilingual.VERSE])[:][multilingual.VERSE]


def data_origin(
    pair: str,
    files: dict[str, str] | None,
    dataset_name: str | None,
    dataset_config: str | None,
    versions: str = "one",
) -> dict:
    """Where `load_splits` takes the data from, for the model card."""
    if files:
        return {"corpus": "files", "files": {split: Path(path).name for split, path in files.items()}}
    if dataset_name:
        return {"corpus": "dataset", "name": dataset_name, "config": dataset_config}
    return {"corpus": "built-in", "pair": pair, "versions": versions}


@dataclasses.dataclass(frozen=True)
class DataSource:
    """Where a run's sentence pairs come from, resolved once from the command line: the user's `files` (split ->
    path), a `datasets` dataset, or else the built-in corpus of `pair`; `source` and `target` name the languages
    (the columns of files and datasets)."""

    source: str
    target: str
    pair: str = "en-de"
    files: dict[str, str] | None = None
    dataset_name: str | None = None
    dataset_config: str | None = None
    versions: str = "one"
    # A multilingual run (`--languages`, `--directions`): its languages, the directions it trains, those left out of
    # training and validation (a zero-shot probe: still tested), and `multilingual.direction_rows`'s sampling rule
    # and seed.
    languages: tuple[str, ...] = ()
    directions: tuple[Direction, ...] = ()
    leave_out: tuple[Direction, ...] = ()
    directions_per_verse: int | None = None
    seed: int = 0

    @property
    def built_in(self) -> bool:
        """Whether the pairs are the built-in corpus's."""
        return not self.files and not self.dataset_name

    @property
    def tested(self) -> list[Direction]:
        """The directions a multilingual run is tested in: those it trains and those it leaves out."""
        return [d for d in multilingual.directions(self.languages) if d in self.directions or d in self.leave_out]

    def load_splits(self) -> datasets.DatasetDict:
        if self.languages:
            if self.files:
                return multilingual.check_rows(load_splits(self.pair, self.files), self.languages, self.directions)
            per_verse, seed = self.directions_per_verse, self.seed
            return multilingual.training_splits(self.languages, self.directions, self.tested, per_verse, seed)
        return load_splits(self.pair, self.files, self.dataset_name, self.dataset_config, self.versions)

    def origin(self) -> dict:
        """Where the data comes from, for the model card."""
        origin = data_origin(self.pair, self.files, self.dataset_name, self.dataset_config, self.versions)
        if not self.languages:
            return origin
        origin.pop("pair", None)
        left_out = {"left_out": [f"{source}-{target}" for source, target in self.leave_out]}
        if self.built_in:
            return {**origin, "directions_per_verse": self.directions_per_verse, **left_out}
        return {**origin, **left_out}
