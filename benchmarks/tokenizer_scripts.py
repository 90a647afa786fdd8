"""Tokenizer designs on every script of the built-in Bible: lossless round trips, <unk> and tokens per verse.

For each language, a joint tokenizer is trained on the train-book verses of the WEB (English) and of the
language's first version in bible.db (free or not: this only measures), then run on the test-book verses
(John, Acts). Prints a Markdown table: per design and language, the share of test verses whose decoding
equals the cleaned text, the share with an <unk>, and the language's mean tokens per verse with the English
mean of the same tokenizer beside it.

    python benchmarks/tokenizer_scripts.py [--vocab-size 8000] [--languages en,de,zh,...]
"""

import argparse
import sqlite3
import statistics
from contextlib import closing

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from vanilla_training.corpus import TEST_BOOKS, VERSIONS, default_data_dir, fetch_bible_db, read_version
from vanilla_training.tokenizer import SPECIAL_TOKENS, UNK, train_joint_bpe

LANGUAGES = "de,fr,ru,uk,vi,ar,fa,hi,bn,ko,zh,ja"
CJK = r"[\p{Han}\p{Hiragana}\p{Katakana}]"
BYTES = [f"<0x{value:02X}>" for value in range(256)]


def metaspace_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    """The design before byte fallback: NFKC, Metaspace words, BPE over all characters."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    )
    return tokenizer


def byte_fallback_bpe(texts: list[str], vocab_size: int, alphabet: int = 1000) -> Tokenizer:
    """Metaspace BPE whose alphabet keeps the most frequent characters; any other character is spelt in bytes."""
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(BYTES), special_tokens=list(SPECIAL_TOKENS), limit_alphabet=alphabet
    )
    base = Tokenizer(models.BPE(unk_token=UNK))
    base.normalizer = normalizers.NFKC()
    base.pre_tokenizer = pre_tokenizers.Metaspace()
    base.train_from_iterator(texts, trainer)
    vocab = base.get_vocab()
    for token in BYTES:
        vocab.setdefault(token, len(vocab))
    merges = _merges(base)
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token=UNK, byte_fallback=True))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return tokenizer


def _merges(tokenizer: Tokenizer) -> list[tuple[str, str]]:
    import json

    return [
        tuple(merge) if isinstance(merge, list) else tuple(merge.split(" "))
        for merge in json.loads(tokenizer.to_str())["model"]["merges"]
    ]


def cjk_split_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    """Metaspace BPE that also cuts before and after every Han, Hiragana and Katakana character."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(), pre_tokenizers.Split(Regex(CJK), behavior="isolated")]
    )
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    )
    return tokenizer


def unigram(texts: list[str], vocab_size: int) -> Tokenizer:
    """A Unigram model as SentencePiece trains it (the tokenizers port), over Metaspace words."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


DESIGNS = {
    "Metaspace BPE (before)": metaspace_bpe,
    "byte-fallback BPE, every character (shipped)": lambda texts, size: train_joint_bpe(texts, size).backend_tokenizer,
    "byte-fallback BPE, 1,000 characters": byte_fallback_bpe,
    "CJK-split BPE": cjk_split_bpe,
    "Unigram": unigram,
}


def measure(tokenizer: Tokenizer, texts: list[str]) -> tuple[float, float, float]:
    """(share of exact round trips, share of texts with <unk>, mean tokens per text)."""
    unk = tokenizer.token_to_id(UNK)
    exact = with_unk = 0
    lengths = []
    for encoding, text in zip(tokenizer.encode_batch(texts, add_special_tokens=False), texts, strict=True):
        exact += tokenizer.decode(encoding.ids) == text
        with_unk += unk in encoding.ids
        lengths.append(len(encoding.ids))
    return exact / len(texts), with_unk / len(texts), statistics.fmean(lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--languages", default=LANGUAGES)
    args = parser.parse_args()
    first = {}
    for bb, version in VERSIONS.items():
        first.setdefault(version.language, bb)
    print("| design | language (bbName) | exact round trips | verses with <unk> | tokens per verse | English |")
    print("|---|---|---|---|---|---|")
    with closing(sqlite3.connect(fetch_bible_db(default_data_dir()))) as db:
        english = read_version(db, first["en"])
        for language in args.languages.split(","):
            other = read_version(db, first[language])
            keys = sorted(key for key in english if english[key] and other.get(key))
            train = [text for key in keys if key[0] not in TEST_BOOKS for text in (english[key], other[key])]
            test = [key for key in keys if key[0] in TEST_BOOKS]
            for name, design in DESIGNS.items():
                tokenizer = design(train, args.vocab_size)
                exact, unk, length = measure(tokenizer, [other[key] for key in test])
                _, _, english_length = measure(tokenizer, [english[key] for key in test])
                cells = [name, f"{language} ({first[language]})", f"{exact:.1%}", f"{unk:.1%}"]
                print("| " + " | ".join([*cells, f"{length:.1f}", f"{english_length:.1f}"]) + " |", flush=True)


if __name__ == "__main__":
    main()
