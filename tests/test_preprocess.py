"""The data path of training: token ids computed by `datasets` in batches and cached on disk, a joint BPE learnt
from a stream (or a sample) and cached, lengths as numpy arrays; the same result as tokenizing sentence by sentence."""

import csv
import json
import os
import random

import datasets
import numpy as np
import pytest

from vanilla_training import preprocess
from vanilla_training.tokenizer import train_joint_bpe

from helpers import toy_pairs


@pytest.fixture
def corpus(tmp_path) -> datasets.DatasetDict:
    """A toy corpus loaded as the training run loads user files: Arrow files in the (test session's) datasets
    cache."""
    rng = random.Random(0)
    files = {}
    for split, size in (("train", 300), ("validation", 20)):
        pairs = toy_pairs(rng, size) + ([("", "leer")] if split == "train" else [])
        lines = [json.dumps({"translation": {"en": en, "de": de}}) for en, de in pairs]
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("\n".join(lines) + "\n")
    return preprocess.load_splits("en-de", {split: str(path) for split, path in files.items()})


def test_token_ids_equal_the_tokenizer_sentence_by_sentence_and_leave_out_what_they_say(corpus, capsys):
    tokenizer = train_joint_bpe(preprocess.joint_texts(corpus["train"], "en", "de"), vocab_size=80)
    tokenized = preprocess.tokenize(corpus["train"], tokenizer, "en", "de", max_length=7, name="train")
    kept = [(row["translation"]["en"], row["translation"]["de"]) for row in corpus["train"]]
    kept = [(en, de) for en, de in kept if en and de]
    kept = [(en, de) for en, de in kept if max(len(tokenizer(en).input_ids), len(tokenizer(de).input_ids)) <= 7]
    assert len(tokenized) == len(kept) and 0 < len(kept) < 300
    for row, (en, de) in zip(tokenized, kept, strict=True):
        assert row["input_ids"] == tokenizer(en).input_ids and row["labels"] == tokenizer(de).input_ids
        assert row["length"] == max(len(row["input_ids"]), len(row["labels"]))
    too_long = 300 - len(kept)
    printed = capsys.readouterr().out
    assert f"train: {len(kept)} pairs kept, 1 with an empty side and {too_long} longer than 7 tokens" in printed
    lengths = preprocess.lengths(tokenized)
    assert isinstance(lengths, np.ndarray) and lengths.tolist() == tokenized["length"]
    # The kept pairs are Arrow files of their own, not an indices mapping over all pairs (through which `datasets`
    # reads a column by making a Python int of every row index).
    assert tokenized._indices is None and tokenized.cache_files


def test_token_ids_are_cached_on_disk_and_read_again(corpus):
    tokenizer = train_joint_bpe(preprocess.joint_texts(corpus["train"], "en", "de"), vocab_size=80)
    first = preprocess.tokenize(corpus["train"], tokenizer, "en", "de", max_length=100, name="train")
    arrow_files = {f["filename"] for f in first.cache_files}
    assert arrow_files and all(str(preprocess.cache_dir(corpus["train"])) in name for name in arrow_files)
    modified = {name: os.stat(name).st_mtime_ns for name in arrow_files}
    again = preprocess.tokenize(corpus["train"], tokenizer, "en", "de", max_length=100, name="train")
    assert {f["filename"] for f in again.cache_files} == arrow_files  # read, not written again
    assert {name: os.stat(name).st_mtime_ns for name in arrow_files} == modified
    assert again["input_ids"] == first["input_ids"]


def test_the_joint_bpe_learns_from_a_sample_and_is_cached(corpus):
    split = corpus["train"]
    full = preprocess.joint_bpe(split, "en", "de", vocab_size=80, model_max_length=64)
    assert (
        full.backend_tokenizer.to_str()
        == train_joint_bpe(
            preprocess.joint_texts(split, "en", "de"), vocab_size=80, model_max_length=64
        ).backend_tokenizer.to_str()
    )
    cached = list(preprocess.cache_dir(split).glob("vanilla-bpe-*"))
    assert len(cached) == 1 and (cached[0] / "tokenizer.json").is_file()
    again = preprocess.joint_bpe(split, "en", "de", vocab_size=80, model_max_length=64)
    assert again.backend_tokenizer.to_str() == full.backend_tokenizer.to_str()
    assert len(list(preprocess.cache_dir(split).glob("vanilla-bpe-*"))) == 1  # read from the cache
    sampled = preprocess.joint_bpe(split, "en", "de", vocab_size=80, model_max_length=64, sample=5, seed=3)
    assert len(sampled) < len(full)  # five pairs hold fewer distinct pieces than the whole corpus
    drawn = np.sort(np.random.default_rng(3).choice(len(split), 5, replace=False))
    by_select = train_joint_bpe(preprocess.joint_texts(split.select(drawn), "en", "de"), 80, model_max_length=64)
    assert sampled.backend_tokenizer.to_str() == by_select.backend_tokenizer.to_str()  # exactly those five pairs
    assert len(list(preprocess.cache_dir(split).glob("vanilla-bpe-*"))) == 2


def _write_csv(path, rows: list[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows([("en", "de"), *rows])


def test_csv_files_with_one_column_per_language_are_read_cell_for_cell(tmp_path, capsys):
    """Every cell is text as written: quoted commas and quotes, words that pandas would read as missing ("NA",
    "null": German for zero), a column of digits only; an empty cell is an empty side, left out and counted."""
    rows = {
        "train": [("one, two", 'eins, "zwei"'), ("NA", "null"), ("2020", "2021"), ("", "leer"), ("the house", "das")],
        "validation": [("007", "sieben"), ("12", "zwölf")],  # pandas would make 7 and 12 of the first column
    }
    for split, split_rows in rows.items():
        _write_csv(tmp_path / f"{split}.csv", split_rows)
    splits = preprocess.load_splits("en-de", {split: str(tmp_path / f"{split}.csv") for split in rows})
    for split in rows:
        with open(tmp_path / f"{split}.csv", encoding="utf-8", newline="") as file:
            written = list(csv.DictReader(file))  # the standard library's reading: the oracle
        assert splits[split].column_names == ["en", "de"]
        assert preprocess.sentences(splits[split], "en", "de") == (
            [r["en"] for r in written],
            [r["de"] for r in written],
        )
    tokenizer = train_joint_bpe(preprocess.joint_texts(splits["train"], "en", "de"), vocab_size=60)
    tokenized = preprocess.tokenize(splits["train"], tokenizer, "en", "de", max_length=100, name="train")
    assert "train: 4 pairs kept, 1 with an empty side" in capsys.readouterr().out
    kept = [(en, de) for en, de in rows["train"] if en]
    assert tokenized["input_ids"] == [tokenizer(en).input_ids for en, _ in kept]
    assert tokenized["labels"] == [tokenizer(de).input_ids for _, de in kept]


def test_each_data_file_is_read_by_its_own_extension_and_the_layouts_must_agree(tmp_path):
    pairs = toy_pairs(random.Random(1), 30)
    train = tmp_path / "train.jsonl"  # one key per language: the CSV file's layout
    train.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in pairs[:20]))
    _write_csv(tmp_path / "validation.csv", pairs[20:])
    splits = preprocess.load_splits("en-de", {"train": str(train), "validation": str(tmp_path / "validation.csv")})
    assert preprocess.sentences(splits["train"], "en", "de") == tuple(map(list, zip(*pairs[:20], strict=True)))
    assert preprocess.sentences(splits["validation"], "en", "de") == tuple(map(list, zip(*pairs[20:], strict=True)))

    nested = tmp_path / "nested.jsonl"  # the built-in corpus's layout beside a CSV file: refused, not misread
    nested.write_text("".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs[:20]))
    with pytest.raises(ValueError, match=r"differ in layout: train \(.*nested.jsonl\) has columns \['translation'\], "
                                         r"validation \(.*validation.csv\) has columns \['de', 'en'\]"):  # fmt: skip
        preprocess.load_splits("en-de", {"train": str(nested), "validation": str(tmp_path / "validation.csv")})


def test_a_saved_dataset_and_a_local_dataset_folder_with_configurations_load_by_name(tmp_path):
    """`--dataset-name` / `--dataset-config`: what `datasets.load_dataset` reads offline, a folder written by
    `save_to_disk` and a folder of data files whose README names its configurations."""
    pairs = toy_pairs(random.Random(2), 40)
    rows = {"train": pairs[:30], "validation": pairs[30:]}
    saved = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict({"en": [en for en, _ in p], "de": [de for _, de in p]})
            for split, p in rows.items()
        }
    )
    saved.save_to_disk(tmp_path / "saved", num_shards={"train": 3, "validation": 1})
    loaded = preprocess.load_splits("en-de", dataset_name=str(tmp_path / "saved"))
    for split, expected in rows.items():
        assert preprocess.sentences(loaded[split], "en", "de") == tuple(map(list, zip(*expected, strict=True)))

    folder = tmp_path / "folder"
    configs = []
    for pair, swap in (("en-de", False), ("de-en", True)):
        (folder / pair).mkdir(parents=True)
        for split, split_pairs in rows.items():
            lines = [{"translation": {"en": de if swap else en, "de": en if swap else de}} for en, de in split_pairs]
            (folder / pair / f"{split}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        configs.append(
            f"- config_name: {pair}\n  data_files:\n"
            + "".join(f"  - split: {split}\n    path: {pair}/{split}.jsonl\n" for split in rows)
        )
    (folder / "README.md").write_text("---\nconfigs:\n" + "".join(configs) + "---\n")
    for pair, swap in (("en-de", False), ("de-en", True)):
        loaded = preprocess.load_splits("en-de", dataset_name=str(folder), dataset_config=pair)
        sources, targets = preprocess.sentences(loaded["train"], "en", "de")
        assert (sources, targets)[swap] == [en for en, _ in rows["train"]], pair
    with pytest.raises(ValueError, match=r"'fr-en' not found. Available: \['en-de', 'de-en'\]"):
        preprocess.load_splits("en-de", dataset_name=str(folder), dataset_config="fr-en")
    with pytest.raises(ValueError, match="saved by save_to_disk, which has no configurations: drop 'en-de'"):
        preprocess.load_splits("en-de", dataset_name=str(tmp_path / "saved"), dataset_config="en-de")
    saved["train"].save_to_disk(tmp_path / "one_split")  # a Dataset, not a DatasetDict: no validation split
    with pytest.raises(ValueError, match="one_split holds a single split saved by Dataset.save_to_disk"):
        preprocess.load_splits("en-de", dataset_name=str(tmp_path / "one_split"))


def _bpe(texts, vocab_size: int = 80, model_max_length: int = 64):
    return train_joint_bpe(texts, vocab_size=vocab_size, model_max_length=model_max_length)


def test_a_data_file_rewritten_with_the_same_modification_time_is_not_read_from_the_cache(tmp_path):
    """`datasets` keys its cache of a data file by path and modification time; new bytes must still be read, and
    the tokenizer and token ids derived from them computed again."""
    first = toy_pairs(random.Random(3), 50)
    second = [(en.upper(), de.upper()) for en, de in toy_pairs(random.Random(4), 50)]  # other words
    path = tmp_path / "train.jsonl"

    def load(pairs: list[tuple[str, str]]) -> datasets.Dataset:
        path.write_text("".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in pairs))
        os.utime(path, ns=(1_700_000_000_000_000_000,) * 2)  # the same time for both contents
        return preprocess.load_splits("en-de", {"train": str(path), "validation": str(path)})["train"]

    for pairs in (first, second):
        split = load(pairs)
        tokenizer = preprocess.joint_bpe(split, "en", "de", vocab_size=80, model_max_length=64)
        tokenized = preprocess.tokenize(split, tokenizer, "en", "de", max_length=100, name="train")
        assert preprocess.sentences(split, "en", "de") == tuple(map(list, zip(*pairs, strict=True)))
        expected = _bpe([en for en, _ in pairs] + [de for _, de in pairs])
        assert tokenizer.backend_tokenizer.to_str() == expected.backend_tokenizer.to_str()
        assert tokenized["input_ids"] == [expected(en).input_ids for en, _ in pairs]


def test_token_ids_are_computed_again_for_another_tokenizer_or_max_length(corpus):
    split = corpus["train"]
    pairs = [(row["translation"]["en"], row["translation"]["de"]) for row in split]
    pairs = [(en, de) for en, de in pairs if en and de]
    for vocab_size in (80, 50):  # the second tokenizer splits words into more pieces
        tokenizer = _bpe(preprocess.joint_texts(split, "en", "de"), vocab_size)
        for max_length in (100, 7):
            tokenized = preprocess.tokenize(split, tokenizer, "en", "de", max_length=max_length, name="train")
            expected = [(tokenizer(en).input_ids, tokenizer(de).input_ids) for en, de in pairs]
            expected = [(a, b) for a, b in expected if max(len(a), len(b)) <= max_length]
            assert list(zip(tokenized["input_ids"], tokenized["labels"], strict=True)) == expected
    swapped = preprocess.tokenize(split, tokenizer, "de", "en", max_length=100, name="train")  # other languages
    assert swapped["input_ids"] == [tokenizer(de).input_ids for _, de in pairs]


def test_the_joint_bpe_is_trained_again_for_other_settings(corpus):
    split = corpus["train"]
    preprocess.joint_bpe(split, "en", "de", vocab_size=80, model_max_length=64)  # the cache now holds one
    variants = [
        {"vocab_size": 60},
        {"model_max_length": 32},
        {"sample": 5, "seed": 3},
        {"sample": 5, "seed": 4},
        {"sample": 9, "seed": 4},
    ]
    for variant in variants:
        settings = {"vocab_size": 80, "model_max_length": 64, **variant}
        tokenizer = preprocess.joint_bpe(split, "en", "de", **settings)
        rows = split
        if "sample" in variant:
            rows = split.select(
                np.sort(np.random.default_rng(variant["seed"]).choice(len(split), variant["sample"], replace=False))
            )
        expected = _bpe(preprocess.joint_texts(rows, "en", "de"), settings["vocab_size"], settings["model_max_length"])
        assert tokenizer.backend_tokenizer.to_str() == expected.backend_tokenizer.to_str(), variant
        assert tokenizer.model_max_length == settings["model_max_length"], variant
    assert len(list(preprocess.cache_dir(split).glob("vanilla-bpe-*"))) == 1 + len(variants)
