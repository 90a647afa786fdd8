"""See what a trained model attends to (section 3.2.3): translate one sentence and draw its attention weights.

    vanilla-show-attention runs/demo "In the beginning God created the heaven and the earth."
    vanilla-show-attention runs/demo "..." --output-dir attention
    vanilla-show-attention runs/multilingual "Im Anfang schuf Gott..." --source-lang de --target-lang fr

MODEL is what `vanilla-translate` takes (a run folder, a model folder or a Hub id). Six PNG heatmaps, tokens on the
axes: cross-attention (the alignment), encoder self-attention and decoder self-attention, each with the heads
averaged (one panel per layer) and per head (`vanilla_training.attention_heatmaps`). A multilingual model needs the
direction: its decoder starts from `<s>` and the target's language token (`forced_bos_token_id`), which the
pictures show as its first output.
"""

import argparse
from pathlib import Path

from ..attention_heatmaps import EAGER_NOTE, attention_maps, write_attention_pictures
from ..translator import load_translator


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(
        prog="vanilla-show-attention", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", metavar="MODEL", help="a run folder (its final/), a model folder, or a Hub id")
    parser.add_argument("sentence", help="a sentence in the model's source language")
    parser.add_argument("--output-dir", default="attention", help="where the PNG files go (default: attention)")
    parser.add_argument("--source-lang", metavar="LANG", help="the sentence's language (a multilingual model's)")
    parser.add_argument(
        "--target-lang", metavar="LANG", help="the language to translate into (needed by a multilingual model)"
    )
    args = parser.parse_args(argv)
    try:
        translator = load_translator(args.model, args.source_lang, args.target_lang)
        target = translator.target_options()
    except ValueError as error:  # a language the model has not, or a multilingual model without a target
        parser.error(str(error))
    maps = attention_maps(translator.model, translator.tokenizer, args.sentence, **target)
    if maps.previous_attn_implementation != "eager":
        print(EAGER_NOTE.format(previous=maps.previous_attn_implementation))
    print(f"translation: {maps.translation}")
    written = write_attention_pictures(maps, args.output_dir)
    print("wrote " + ", ".join(str(path) for path in written))
    return written


def console_main() -> None:
    """`vanilla-show-attention`: `main`, whose return value would become the exit status."""
    main()


if __name__ == "__main__":
    console_main()
