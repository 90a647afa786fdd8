"""What byte fallback costs the shipped pairs: mean tokens per test verse of en-de and en-fr, each side, with the
joint BPE before byte fallback (every token a merge or a character) and with it (256 byte tokens in the same
vocabulary size), at the recipes' vocabulary sizes.

    python benchmarks/tokenizer_byte_fallback_cost.py
"""

import statistics

from benchmarks.tokenizer_scripts import metaspace_bpe
from vanilla_training.corpus import load_corpus
from vanilla_training.tokenizer import train_joint_bpe


def main() -> None:
    print("| pair | vocabulary | side | tokens per verse before | with byte fallback |")
    print("|---|---|---|---|---|")
    for pair in ("en-de", "en-fr"):
        source, target = pair.split("-")
        corpus = load_corpus(pair)
        train = [text for row in corpus["train"]["translation"] for text in (row[source], row[target])]
        test = corpus["test"]["translation"]
        for vocab_size in (4000, 8000, 37000):
            before, after = metaspace_bpe(train, vocab_size), train_joint_bpe(train, vocab_size)._tokenizer
            for side in (source, target):
                texts = [row[side] for row in test]
                counts = [
                    statistics.fmean(
                        len(encoding.ids) for encoding in tokenizer.encode_batch(texts, add_special_tokens=False)
                    )
                    for tokenizer in (before, after)
                ]
                print(f"| {pair} | {vocab_size:,} | {side} | {counts[0]:.2f} | {counts[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
