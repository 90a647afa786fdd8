"""Tiny models and batches built in-process for the tests (no downloads)."""

import torch

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
