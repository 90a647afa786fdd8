"""The systems the benchmarks compare, all the paper's architecture at one registry size (post-LN, ReLU, embeddings
scaled by sqrt(d_model), one shared vocabulary tied three ways, sinusoidal positions):

- "ours": `VanillaForConditionalGeneration`;
- "marian": transformers' `MarianMTModel` with the same dimensions and token ids (`marian_like`);
- "torch": `torch.nn.Transformer` between the same input and output layers (`modeling_vanilla.export_torch`).

Before measuring, a benchmark checks that they compute the same function: a fresh Marian model is converted into
ours (`convert_marian`), ours is exported to nn.Transformer, and the three must give the same logits.

This module imports only torch, transformers and modeling_vanilla (bleu_vs_marian.py imports `marian_like` from it).
"""

from typing import Any

import torch
from torch import nn
from transformers import MarianConfig, MarianMTModel

from modeling_vanilla import PRESETS, VanillaConfig, VanillaForConditionalGeneration
from modeling_vanilla.convert_marian import convert_marian
from modeling_vanilla.export_torch import TorchTransformer, export_torch

SYSTEM_NAMES = {"ours": "ours", "marian": "MarianMTModel", "torch": "nn.Transformer"}
# The fields of VanillaConfig that MarianConfig has under the same name and meaning.
MARIAN_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "activation_function",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "scale_embedding",
    "max_position_embeddings",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)


def marian_like(config: VanillaConfig) -> MarianMTModel:
    """A MarianMTModel with the dimensions, dropout and token ids of `config`, one vocabulary tied three ways."""
    shared = {name: getattr(config, name) for name in MARIAN_FIELDS}
    marian = MarianConfig(
        **shared, share_encoder_decoder_embeddings=True, tie_word_embeddings=True, forced_eos_token_id=None
    )
    return MarianMTModel(marian)


def describe_size(size: str) -> str:
    """E.g. "base (d 512, 6+6 layers, 8 heads, ffn 2048, dropout 0.1)"."""
    shape = PRESETS[size]
    return (
        f"{size} (d {shape['d_model']}, {shape['encoder_layers']}+{shape['decoder_layers']} layers, "
        f"{shape['encoder_attention_heads']} heads, ffn {shape['encoder_ffn_dim']}, dropout {shape['dropout']})"
    )


def build_model(system: str, config: VanillaConfig, attn: str, device: str) -> nn.Module:
    """A freshly initialised model of `system` ("ours", "marian", "torch") on `device`; `attn` is transformers'
    attention implementation ("eager", "sdpa"), which nn.Transformer does not have (it always uses its own)."""
    with torch.device(device):
        if system == "torch":
            return TorchTransformer(config)
        model = VanillaForConditionalGeneration(config) if system == "ours" else marian_like(config)
    model.set_attn_implementation(attn)
    return model


def same_function_models(config: VanillaConfig, attn: str, device: str) -> dict[str, nn.Module]:
    """The three systems in eval mode on `device` with one set of weights: a fresh Marian model, ours converted from
    it (`convert_marian`, which keeps Marian's positional layout and generation config) and nn.Transformer exported
    from ours. They compute the same function, which `compare_logits` measures."""
    marian = build_model("marian", config, attn, "cpu").eval()
    ours = convert_marian(marian).eval()
    models = {"ours": ours, "marian": marian, "torch": export_torch(ours)}
    return {name: model.to(device) for name, model in models.items()}


def random_ids(batch: int, length: int, vocab_size: int, eos_token_id: int | None = None) -> torch.Tensor:
    """Token ids drawn from the non-special ids 4..vocab_size-1; with `eos_token_id`, the last one is it."""
    ids = torch.randint(4, vocab_size, (batch, length))
    if eos_token_id is not None:
        ids[:, -1] = eos_token_id
    return ids


def comparison_batch(config: VanillaConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """The inputs of the same-function checks: 2 sources of 9 tokens (ending with </s>), 7 target tokens."""
    ids = random_ids(2, 9, config.vocab_size, config.eos_token_id)
    decoder_ids = random_ids(2, 7, config.vocab_size)
    decoder_ids[:, 0] = config.decoder_start_token_id
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": decoder_ids}
    return {name: tensor.to(device) for name, tensor in batch.items()}


def compare_logits(models: dict[str, nn.Module]) -> dict[str, Any]:
    """The largest absolute logit difference of Marian and nn.Transformer from ours (`same_function_models`) on
    `comparison_batch`, and the largest logit."""
    batch = comparison_batch(models["ours"].config, models["ours"].device)
    with torch.inference_mode():
        logits = {name: model(**batch).logits for name, model in models.items()}
    return {
        "max_abs_logit": logits["ours"].abs().max().item(),
        "max_abs_diff": {name: (logits[name] - logits["ours"]).abs().max().item() for name in ("marian", "torch")},
    }


def check_same_function(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: `compare_logits` of the three systems at `task["size"]` with one set of weights, on the CPU."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    return compare_logits(same_function_models(config, task["attn"], "cpu"))


def require_same_function(checks: dict[str, dict[str, Any]]) -> None:
    """Stops the run unless, at every size, the logits agree within 1e-4 x max(1, largest logit) and every
    generation comparison (`same_tokens`, where the check made one) found identical tokens."""
    for size, check in checks.items():
        if "error" in check:
            raise SystemExit(f"same-function check at size {size} failed: {check['error']}")
        tolerance = 1e-4 * max(1.0, check["max_abs_logit"])
        problems = [
            f"{name} logits differ by {diff:.2e}" for name, diff in check["max_abs_diff"].items() if diff > tolerance
        ]
        problems += [f"{name} tokens differ" for name, same in check.get("same_tokens", {}).items() if not same]
        if problems:
            raise SystemExit(f"same-function check at size {size}: " + "; ".join(problems))


def check_line(checks: dict[str, dict[str, Any]]) -> str:
    """One line on the same-function checks, printed under the tables."""
    parts = []
    for size, check in checks.items():
        diffs = ", ".join(f"{SYSTEM_NAMES[name]} {diff:.1e}" for name, diff in check["max_abs_diff"].items())
        tokens = "".join(f", {name} tokens identical" for name in check.get("same_tokens", {}))
        parts.append(f"{size}: {diffs} (largest logit {check['max_abs_logit']:.1f}){tokens}")
    return "Same weights (Marian converted by convert_marian), largest |logit difference| from ours: " + "; ".join(
        parts
    )
