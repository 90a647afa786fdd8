"""Has a trained model's encoder collapsed? Two measures per model folder (a run's final/ or a checkpoint):

- spread: for the first test verse of the run's pair, how much the encoder's states differ from token to token
  (the standard deviation over positions, averaged over dimensions), after the embeddings and after each layer.
  A working encoder keeps them apart; a collapsed one gives every token the same state (spread 0).
- cosine: how alike the embeddings are within each group of tokens (the mean cosine of each embedding with its
  group's mean) among the tokens the first 3,000 training pairs use: on the source side only, on both sides, on
  the target side only. 1.0 means the group is one vector.

    python experiments/encoder_collapse.py runs/demo/final runs/languages/demo-en-ar/final
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast

import modeling_vanilla  # noqa: F401  (registers the model with the Auto classes)
from vanilla_training.corpus import load_corpus


def measure(folder: Path) -> str:
    """One line: the folder, the spread after each stage and the cosine of each token group."""
    results = json.loads((folder / "training_results.json").read_text())
    source, target = results["languages"]["source"], results["languages"]["target"]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    corpus = load_corpus(results["data"]["pair"])
    verse = corpus["test"][0]["translation"][source]
    with torch.no_grad():
        states = model.get_encoder()(**tokenizer([verse], return_tensors="pt"), output_hidden_states=True)
    spread = [f"{state[0].std(0).mean().item():.4f}" for state in states.hidden_states]
    pairs = corpus["train"]["translation"][:3000]
    used = {side: {i for pair in pairs for i in tokenizer(pair[side])["input_ids"]} for side in (source, target)}
    groups = {
        "source only": used[source] - used[target],
        "both": used[source] & used[target],
        "target only": used[target] - used[source],
    }
    embeddings = model.get_input_embeddings().weight.detach()
    cosines = []
    for name, ids in groups.items():
        if ids:
            group = embeddings[sorted(ids)]
            cosine = torch.nn.functional.cosine_similarity(group, group.mean(0, keepdim=True)).mean().item()
            cosines.append(f"{name} {cosine:.3f} ({len(ids):,} tokens)")
    return f"{folder}: spread {' / '.join(spread)}; cosine {', '.join(cosines)}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="model folders trained on the built-in corpus")
    for folder in parser.parse_args(argv).folders:
        print(measure(folder), flush=True)


if __name__ == "__main__":
    main()
