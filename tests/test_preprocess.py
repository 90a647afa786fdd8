"""The data path of training: token ids computed by `datasets` in batches and cached on disk, a joint BPE learnt
from a stream (or a sample) and cached, lengths as numpy arrays; the same result as tokenizing sentence by sentence."""

import json
import os
import random

import datasets
import numpy as np
import pytest

from training import preprocess
from training.tokenizer import train_joint_bpe

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
