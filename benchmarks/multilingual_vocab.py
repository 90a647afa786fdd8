"""The joint vocabulary of a multilingual model: tokens per verse by language at several vocabulary sizes.

One tokenizer (the shipped design: byte-fallback BPE with every character of training, plus a language token per
language) is trained on the train verses of every language of the multilingual build (`corpus.multilingual`:
the first free version of each language) and run on its test verses. Beside it, for reference, the tokenizer of a
model of one direction: a joint BPE of `--pair-vocab-size` on English and the language alone (English's own column
is that of en-de). Prints a Markdown table: mean tokens per test verse by language and vocabulary size, the
multilingual tokenizer's tokens over the per-pair one's, the share of test tokens spelt in bytes, and how long each
tokenizer took to train. Only tokenizers are trained.

    python benchmarks/multilingual_vocab.py [--sizes 8000,16000,32000] [--languages all]
"""

import argparse
import statistics
import time

from vanilla_training.corpus import multilingual
from vanilla_training.tokenizer import BYTE_TOKENS, train_joint_bpe


def tokens_per_verse(tokenizer, texts: list[str]) -> tuple[float, float]:
    """(mean tokens per text without `</s>`, share of the tokens that are byte tokens)."""
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    byte_ids = set(tokenizer.convert_tokens_to_ids(list(BYTE_TOKENS)))
    total = sum(map(len, ids))
    return statistics.fmean(map(len, ids)), sum(i in byte_ids for row in ids for i in row) / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8000,16000,32000", help="vocabulary sizes of the joint tokenizer")
    parser.add_argument("--languages", default="all", help="comma-separated codes, or 'all' (every free language)")
    parser.add_argument("--pair-vocab-size", type=int, default=8000, help="the per-pair reference's size")
    args = parser.parse_args()
    languages = multilingual.parse_languages(args.languages)
    verses = multilingual.load_verses(languages)
    train, test = verses["train"], verses["test"]
    by_language = {code: [row["texts"][code] for row in test] for code in languages}
    print(f"{len(languages)} languages, {len(train):,} train verses, {len(test):,} test verses in every language\n")
    reference = {}
    for code in languages:
        other = "de" if code == "en" else code
        pair_texts = [row["texts"][side] for row in train for side in ("en", other) if side in row["texts"]]
        reference[code] = tokens_per_verse(train_joint_bpe(pair_texts, args.pair_vocab_size), by_language[code])[0]
    sizes = [int(size) for size in args.sizes.split(",")]
    results, seconds = {}, {}
    for size in sizes:
        start = time.perf_counter()
        tokenizer = train_joint_bpe(multilingual.tokenizer_texts(train), size, languages=languages)
        seconds[size] = time.perf_counter() - start
        results[size] = {code: tokens_per_verse(tokenizer, by_language[code]) for code in languages}
    header = [f"per pair {args.pair_vocab_size:,}", *(f"{size:,}" for size in sizes)]
    header += [f"{size:,} / per pair" for size in sizes] + [f"bytes at {sizes[0]:,}"]
    print("| language | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for code in [*languages, "mean"]:
        if code == "mean":
            ref = statistics.fmean(reference.values())
            means = [statistics.fmean(results[size][c][0] for c in languages) for size in sizes]
            byte_share = statistics.fmean(results[sizes[0]][c][1] for c in languages)
        else:
            ref, means, byte_share = (
                reference[code],
                [results[size][code][0] for size in sizes],
                results[sizes[0]][code][1],
            )
        cells = [f"{ref:.1f}", *(f"{mean:.1f}" for mean in means), *(f"{mean / ref:.2f}" for mean in means)]
        print(f"| {code} | " + " | ".join([*cells, f"{byte_share:.2%}"]) + " |")
    print("\ntraining the joint tokenizer: " + ", ".join(f"{size:,}: {seconds[size]:.0f} s" for size in sizes))


if __name__ == "__main__":
    main()
