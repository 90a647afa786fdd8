"""Test BLEU of the two length penalties: transformers' log P / |Y|^alpha against the paper's (section 6.1, after
GNMT) log P / ((5 + |Y|) / 6)^alpha, decoded by `modeling_vanilla.gnmt_beam_search`.

    python experiments/gnmt_length_penalty.py runs/demo/final              # the 1,866 en-de test verses
    python experiments/gnmt_length_penalty.py runs/demo/final --limit 200  # the first 200

Both forms translate the built-in en-de test set (`load_corpus("en-de")["test"]`) with beam 4, alpha 0.6, early
stopping and at most input length + 50 tokens (section 6.1), through the same `translate` as training's test BLEU.
Printed: a markdown table of form, test BLEU with the sacreBLEU signature, seconds, and the number of sentences
whose translation differs between the two forms (seconds measured on a shared machine are indicative).
"""

import argparse
import time

from modeling_vanilla import paper_generation_config
from modeling_vanilla.gnmt_beam_search import gnmt_beam_search
from vanilla_training.corpus import load_corpus
from vanilla_training.evaluation import corpus_bleu
from vanilla_training.translator import load_translator, translate

FORMS = {
    "transformers: log P / \\|Y\\|^0.6": {},
    "paper (GNMT): log P / ((5 + \\|Y\\|) / 6)^0.6": {"custom_generate": gnmt_beam_search},
}


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a saved en-de translator: model and tokenizer (e.g. runs/demo/final)")
    parser.add_argument("--limit", type=int, help="translate only the first N test verses")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    translator = load_translator(args.model_dir)
    model, tokenizer = translator.model, translator.tokenizer
    test = load_corpus("en-de")["test"]
    pairs = [row["translation"] for row in test][: args.limit]
    sources, references = [pair["en"] for pair in pairs], [pair["de"] for pair in pairs]

    translations, rows = {}, []
    for form, options in FORMS.items():
        started = time.perf_counter()
        paper = paper_generation_config(model.config)  # beam 4, alpha 0.6, early stopping (section 6.1)
        translations[form] = translate(model, tokenizer, sources, generation_config=paper, **options)
        seconds = time.perf_counter() - started
        bleu = corpus_bleu(translations[form], references)
        signature = bleu["signature"].replace("|", "\\|")  # a table cell
        rows.append((form, f"{bleu['score']:.2f} ({signature})", f"{seconds:.0f}"))
    differing = sum(a != b for a, b in zip(*translations.values(), strict=True))

    table = [
        f"{len(sources)} en-de test verses, beam 4, alpha 0.6, model {args.model_dir}",
        "",
        "| length penalty | test BLEU (sacreBLEU signature) | seconds | sentences whose output differs |",
        "| --- | --- | ---: | ---: |",
        *(f"| {form} | {bleu} | {seconds} | {differing} of {len(sources)} |" for form, bleu, seconds in rows),
    ]
    report = "\n".join(table)
    print(report)
    return report


if __name__ == "__main__":
    main()
