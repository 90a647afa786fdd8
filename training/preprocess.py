"""The data of a training run: its splits (the built-in corpus, the user's files or a `datasets` dataset), and their
token ids, computed by `datasets` in batches, kept on disk in Arrow files, and cached between runs."""

from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from .data import load_corpus

# The column of each tokenized pair that token-budget batching reads: the longer side, in tokens.
LENGTH = "length"


def check_text_file(path: str) -> None:
    """Refuses a data file that is not UTF-8, naming the first bad lines; counts blank lines aloud (they are
    skipped when the file is read)."""
    bad, blank = [], 0
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            try:
                blank += not line.decode("utf-8").strip()
            except UnicodeDecodeError:
                bad.append(number)
    if bad:
        raise ValueError(f"{path} is not UTF-8 text: {len(bad)} bad lines, first at lines {bad[:5]}")
    if blank:
        print(f"{path}: {blank} blank lines skipped")


def load_splits(
    pair: str,
    files: dict[str, str] | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
) -> datasets.DatasetDict:
    """The user's `files` (split -> JSONL or CSV path), a `datasets` dataset, or else the built-in corpus of `pair`.
    The splits are train, validation and, optionally, test."""
    if files:
        for path in files.values():
            check_text_file(path)
        builder = "csv" if files["train"].endswith(".csv") else "json"
        splits = datasets.load_dataset(builder, data_files=files)
    elif dataset_name:
        splits = datasets.load_dataset(dataset_name, dataset_config)
    else:
        splits = load_corpus(pair)
    if "validation" not in splits:
        raise ValueError("the data needs a validation split (pass --validation-file)")
    return splits


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


def joint_texts(split: datasets.Dataset, source: str, target: str, batch_size: int = 10_000) -> Iterator[str]:
    """Every source sentence, then every target sentence, read batch by batch (the joint BPE's training text)."""
    for index in (0, 1):
        for start in range(0, len(split), batch_size):
            yield from sides(split[start : start + batch_size], source, target)[index]


def tokenize(
    split: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    source: str,
    target: str,
    max_length: int,
    name: str,
) -> datasets.Dataset:
    """`input_ids`, `labels` and `length` (the longer side) of every pair, in the split's order; pairs with an empty
    side or longer than `max_length` tokens are left out, and counted aloud."""

    def encode(batch: dict[str, list]) -> dict[str, list]:
        sources, targets = sides(batch, source, target)
        encoded = tokenizer(sources, text_target=targets)
        return {
            "input_ids": encoded["input_ids"],
            "labels": encoded["labels"],
            LENGTH: [max(len(a), len(b)) for a, b in zip(encoded["input_ids"], encoded["labels"], strict=True)],
            "empty": [not a.strip() or not b.strip() for a, b in zip(sources, targets, strict=True)],
        }

    encoded = split.map(encode, batched=True, remove_columns=split.column_names, desc=f"tokenizing {name}")
    columns = encoded.with_format("numpy", columns=[LENGTH, "empty"])[:]
    empty, too_long = columns["empty"], ~columns["empty"] & (columns[LENGTH] > max_length)
    print(
        f"{name}: {len(encoded) - empty.sum() - too_long.sum()} pairs kept, {empty.sum()} with an empty side and "
        f"{too_long.sum()} longer than {max_length} tokens left out"
    )
    kept = np.flatnonzero(~empty & ~too_long)
    return encoded.select(kept).remove_columns("empty")


def lengths(tokenized: datasets.Dataset) -> np.ndarray:
    """The `length` column of a tokenized split, read from Arrow as a numpy array."""
    return tokenized.with_format("numpy", columns=[LENGTH])[LENGTH]


def data_origin(pair: str, files: dict[str, str] | None, dataset_name: str | None, dataset_config: str | None) -> dict:
    """Where `load_splits` takes the data from, for the model card."""
    if files:
        return {"corpus": "files", "files": {split: Path(path).name for split, path in files.items()}}
    if dataset_name:
        return {"corpus": "dataset", "name": dataset_name, "config": dataset_config}
    return {"corpus": "built-in", "pair": pair}
