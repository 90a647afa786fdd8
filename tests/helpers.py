"""What the tests share: tiny models and batches built in-process (no downloads), a toy parallel corpus and the
command line of a quick training run on it, a tiny Marian model of OPUS-MT's conventions, decoding step by step
with the cache, and free network ports."""

import json
import random
import socket
from pathlib import Path

import torch
from transformers import MarianConfig, MarianMTModel

from modeling_vanilla import PRESETS, VanillaConfig, VanillaForConditionalGeneration

TINY = {**PRESETS["tiny"], "vocab_size": 64}


def tiny_config(**overrides) -> VanillaConfig:
    return VanillaConfig(**{**TINY, **overrides})


def tiny_model(
    seed: int = 0, std: float | None = None, attn_implementation: str = "sdpa", **overrides
) -> VanillaForConditionalGeneration:
    """A tiny model in eval mode. With `std`, every weight is redrawn from N(0, std) so that decoding is not
    degenerate (freshly initialised models repeat one token), which makes generation comparisons meaningful."""
    torch.manual_seed(seed)
    model = VanillaForConditionalGeneration(tiny_config(**overrides)).eval()
    model.set_attn_implementation(attn_implementation)
    if std is not None:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0.0, std)
    return model


def padded_batch(seed: int = 0, vocab_size: int = 64, lengths: tuple[int, ...] = (9, 6, 3)):
    """Source ids (no special ids 0-3 inside sentences, `</s>`=3 at the end) right-padded with 0, and the mask."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(4, vocab_size, (length - 1,), generator=generator)
        ids[row, length - 1] = 3
        mask[row, :length] = 1
    return ids, mask


def decode_step_by_step(model, ids: torch.Tensor, mask: torch.Tensor, decoder_ids: torch.Tensor):
    """The logits of `decoder_ids` computed one position at a time with the key/value cache, and the cache."""
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache, steps = None, []
        for t in range(decoder_ids.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=decoder_ids[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            steps.append(out.logits)
    return torch.cat(steps, dim=1), cache


# A word-for-word "translation" task, learnt in a few seconds.
WORDS = {"one": "eins", "two": "zwei", "three": "drei", "house": "Haus", "the": "das", "big": "große", "red": "rote"}


def toy_pairs(rng: random.Random, count: int, min_words: int = 2, max_words: int = 7) -> list[tuple[str, str]]:
    """`count` English sentences of `min_words` to `max_words` words and their word-for-word German."""
    english = [[rng.choice(list(WORDS)) for _ in range(rng.randint(min_words, max_words))] for _ in range(count)]
    return [(" ".join(words), " ".join(WORDS[word] for word in words)) for words in english]


def train_on_toy_pairs(model, tokenizer, pairs: list[tuple[str, str]], rng: random.Random, steps: int = 150):
    """`model` trained for `steps` Adam steps of 32 toy pairs (a few seconds), in evaluation mode after."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = rng.sample(pairs, 32)
        encoded = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], padding=True, return_tensors="pt")
        labels = encoded["labels"].masked_fill(encoded["labels"] == tokenizer.pad_token_id, -100)
        loss = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def write_toy_corpus(folder: Path, sizes: dict[str, int], seed: int = 0) -> dict[str, Path]:
    """The toy task in the built-in corpus's JSONL layout, one file per split."""
    rng = random.Random(seed)
    paths = {}
    for split, size in sizes.items():
        lines = [json.dumps({"translation": {"en": en, "de": de}}) for en, de in toy_pairs(rng, size)]
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def toy_run_args(files: dict[str, Path], output_dir: Path, **options) -> list[str]:
    """The command line of a quick training run on the toy corpus (~15 s: a 64-wide 2+2-layer model, 150 steps of
    512 tokens, BLEU far above 30); `options` (e.g. `max_steps=40`) replace or add options. The model keeps the
    paper's (fairseq) initialisation: with the demo preset's N(0, 0.02) this small model reaches BLEU 3 at the same
    schedule, and none at higher learning rates."""
    model = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
    settings = {
        "model_config": json.dumps({**model, "init_std": None}),
        "vocab_size": 120,
        "max_tokens": 512,
        "max_steps": 150,
        "warmup_steps": 40,
        "lr_scale": 0.2,
        "eval_steps": 75,
        "save_steps": 40,
        "average_last": 3,
        "bleu_sentences": 20,
        "dropout": 0.0,
        "selection": "last",
        # float32 unless a test asks for another precision: the default ("auto") is bf16 on CPUs that have it, whose
        # casts cost more than they save at this size, and whose numbers differ from machine to machine
        **({} if {"precision", "fp32", "bf16", "fp16"} & options.keys() else {"precision": "fp32"}),
        **options,
    }
    args = ["--output-dir", str(output_dir)]
    for split, path in files.items():
        args += [f"--{split}-file", str(path)]
    for name, value in settings.items():
        args += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])  # True: a flag
    return args


# OPUS-MT conventions at tiny size: swish, scaled embeddings, one shared vocabulary whose last id is pad, eos = 0,
# the decoder starting from pad.
OPUS_MT = {
    "vocab_size": 64,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "activation_function": "swish",
    "scale_embedding": True,
    "max_position_embeddings": 128,
    "pad_token_id": 63,
    "decoder_start_token_id": 63,
    "eos_token_id": 0,
}
PAD, EOS = 63, 0


def opus_mt_like(seed: int = 0, std: float = 0.3, **overrides) -> MarianMTModel:
    """A MarianMTModel in eval mode with every weight but the LayerNorms (kept at 1 and 0) and the sinusoidal tables
    redrawn from N(0, std), and a random final logits bias, so that decoding differs from row to row."""
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**OPUS_MT, **overrides})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name and "layer_norm" not in name:
                parameter.normal_(0.0, std)
        model.final_logits_bias.normal_(0.0, std)
    return model


def opus_batch(lengths: tuple[int, ...] = (9, 6, 3)) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids (2..62, then eos 0) right-padded with pad 63, and the padding mask."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(2, PAD, (length - 1,), generator=generator)
        ids[row, length - 1] = EOS
        mask[row, :length] = 1
    return ids, mask


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the operating system has just handed out, for a rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fine_tune_args(files: dict[str, Path], output_dir: Path, model: Path, **options) -> list[str]:
    """`toy_run_args` fine-tuning the model folder `model`: without the new model's settings (size, vocabulary),
    which `--model-name-or-path` refuses."""
    args = toy_run_args(files, output_dir, model_name_or_path=model, **options)
    for name in ("--vocab-size", "--model-config", "--dropout"):
        index = args.index(name)
        del args[index : index + 2]
    return args
