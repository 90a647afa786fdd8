"""Quality bar: train our model and transformers' MarianMTModel at the same size, with the same data, tokenizer,
recipe, steps and seed, and print the test BLEU of both (with the sacreBLEU signature).

    python benchmarks/bleu_vs_marian.py                      # the demo recipe, a few minutes per model on 2 cores
    python benchmarks/bleu_vs_marian.py --max-steps 3000      # longer runs

MarianMTModel is configured as the same architecture: post-LN, ReLU, embeddings scaled by sqrt(d_model), one
shared vocabulary tied three ways, sinusoidal positions (Marian's sin-then-cos layout), same special tokens.
What stays different is each implementation's own weight initialisation.
"""

import argparse
import json
from pathlib import Path

from transformers import MarianConfig, MarianMTModel

from modeling_vanilla import VanillaConfig
from training.train import main as train


def marian_like(config: VanillaConfig) -> MarianMTModel:
    """A MarianMTModel with the dimensions and token ids of `config`."""
    marian = MarianConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        scale_embedding=config.scale_embedding,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        max_position_embeddings=config.max_position_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        forced_eos_token_id=None,
        decoder_start_token_id=config.decoder_start_token_id,
    )
    return MarianMTModel(marian)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/bleu_vs_marian")
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--pair", default="en-de")
    parser.add_argument("--max-steps", type=int, help="overrides the preset")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    common = ["--preset", args.preset, "--pair", args.pair, "--seed", str(args.seed), "--show", "0"]
    if args.max_steps:
        common += ["--max-steps", str(args.max_steps)]
    root = Path(args.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    results = {}
    ours_dir = root / "vanilla"
    results["vanilla"] = train(["--output-dir", str(ours_dir), *common])
    # The same tokenizer file for both: Marian's run loads the one our run trained.
    results["marian"] = train(
        ["--output-dir", str(root / "marian"), "--tokenizer", str(ours_dir / "final"), *common],
        model_factory=marian_like,
    )
    rows = []
    for name, result in results.items():
        test = result["test"]
        rows.append(f"| {name} | {test['bleu']:.2f} | {result['train_seconds']} | {test['signature']} |")
    table = "\n".join(["| model | test BLEU | train seconds | sacreBLEU signature |", "|---|---|---|---|", *rows])
    difference = results["vanilla"]["test"]["bleu"] - results["marian"]["test"]["bleu"]
    print(f"\n{table}\n\nvanilla - marian = {difference:+.2f} BLEU ({args.preset} recipe, {args.pair})")
    (root / "results.json").write_text(json.dumps({"table": table, "difference": difference}, indent=2))


if __name__ == "__main__":
    main()
