"""Untrained tiny model folders, saved as `vanilla-train` saves them, for tests of the doors a model goes through
(tokenizer, pipeline, commands, server, Inference Endpoints handler) rather than of what it learnt: a multilingual
one (en, de, ko: Korean has its own BLEU tokenizer) and one of a single direction, both with byte fallback, so that
any text encodes without `<unk>` and decodes back."""

import json
from pathlib import Path

import torch

from modeling_vanilla import VanillaForConditionalGeneration
from vanilla_training.tokenizer import train_joint_bpe

from helpers import tiny_config

LANGUAGES = ["en", "de", "ko"]
TEXTS = ["the house is big", "das Haus ist groß", "집이 크다", "one two three", "eins zwei drei", "하나 둘 셋"]


def save_tiny_folder(path: Path, languages: list[str] | None = None) -> Path:
    """A tiny untrained model and its tokenizer (1,000 entries: byte fallback) in `path`; multilingual with
    `languages`, else of one direction with its pair recorded (en-de) in `training_results.json`."""
    tokenizer = train_joint_bpe(TEXTS * 5, vocab_size=1000, model_max_length=64, languages=languages or ())
    overrides = {"languages": languages} if languages else {}
    torch.manual_seed(0)
    model = VanillaForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), max_position_embeddings=128, **overrides)
    ).eval()
    model.generation_config.num_beams = 2
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if not languages:
        results = {"languages": {"source": "en", "target": "de"}}
        (path / "training_results.json").write_text(json.dumps(results), encoding="utf-8")
    return path


def encoder_inputs(model: VanillaForConditionalGeneration) -> list[list[int]]:
    """A list that fills, from now on, with the ids of every source the model's encoder reads (padding left out)."""
    seen: list[list[int]] = []

    def record(module, args, kwargs) -> None:
        ids, mask = kwargs.get("input_ids", args[0] if args else None), kwargs.get("attention_mask")
        for row, row_mask in zip(ids, mask if mask is not None else torch.ones_like(ids), strict=True):
            seen.append(row[row_mask.bool()].tolist())

    model.get_encoder().register_forward_pre_hook(record, with_kwargs=True)
    return seen
