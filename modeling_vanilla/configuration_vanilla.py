"""Configuration of the Transformer from "Attention Is All You Need" (Vaswani et al., 2017).

The defaults are the paper's base model (Table 3, row "base"); `VanillaConfig.from_preset("big")` gives the big
model. Field names follow transformers' seq2seq models (Marian, BART) so that generic tooling works unchanged.
"""

import difflib
from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from transformers import GenerationConfig, PreTrainedConfig

ACTIVATIONS = ("relu", "gelu", "swish", "silu")
# "interleaved" is the paper's (sin on even, cos on odd dimensions); "sin_then_cos" is Marian's (all sines first).
POSITIONAL_ENCODING_LAYOUTS = ("interleaved", "sin_then_cos")

# Keys that transformers itself writes into config.json or passes to configs, besides the fields. Generation
# parameters found in old configs are dropped by transformers (they live in generation_config.json).
TRANSFORMERS_KEYS = frozenset(
    {
        "transformers_version",
        "model_type",
        "auto_map",
        "custom_pipelines",
        "name_or_path",
        "_name_or_path",
        "_commit_hash",
        "torch_dtype",
        "attn_implementation",
        "experts_implementation",
        "output_attentions",
        "num_labels",
        "_attn_implementation_internal",
        "_experts_implementation_internal",
        *GenerationConfig._get_default_generation_params(),
    }
)

# Table 3 of the paper. Frozen: a preset names one model of the paper and is never redefined.
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "base": MappingProxyType(
            {
                "d_model": 512,
                "encoder_layers": 6,
                "decoder_layers": 6,
                "encoder_attention_heads": 8,
                "decoder_attention_heads": 8,
                "encoder_ffn_dim": 2048,
                "decoder_ffn_dim": 2048,
                "dropout": 0.1,
            }
        ),
        "big": MappingProxyType(
            {
                "d_model": 1024,
                "encoder_layers": 6,
                "decoder_layers": 6,
                "encoder_attention_heads": 16,
                "decoder_attention_heads": 16,
                "encoder_ffn_dim": 4096,
                "decoder_ffn_dim": 4096,
                "dropout": 0.3,
            }
        ),
    }
)


class VanillaConfig(PreTrainedConfig):
    """Hyper-parameters of the encoder-decoder Transformer (section 3, Table 3).

    Token ids follow the joint BPE tokenizer of `training/`: `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3. The decoder
    starts from `<s>`. `max_position_embeddings` is the longest sequence the model is meant for (it becomes the
    tokenizer's `model_max_length`); the sinusoidal encoding itself has no maximum (section 3.5).

    `positional_encoding_layout`, `add_final_logits_bias` and the "swish" activation exist only to represent Marian
    (OPUS-MT) checkpoints exactly (`modeling_vanilla.convert_marian`, which also sets Marian's token ids, the decoder
    starting from pad); their defaults are the paper's.
    """

    model_type = "vanilla"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    scale_embedding: bool = True
    positional_encoding_layout: str = "interleaved"
    add_final_logits_bias: bool = False
    max_position_embeddings: int = 1024
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = 2
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = True
    use_cache: bool = True

    def __post_init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - TRANSFORMERS_KEYS)
        if unknown:
            hints = {key: difflib.get_close_matches(key, [f.name for f in fields(self)], n=1) for key in unknown}
            named = ", ".join(
                f"{key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "") for key, hint in hints.items()
            )
            raise ValueError(f"unknown VanillaConfig keys: {named}")
        super().__post_init__(**kwargs)
        self._check_values()

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "VanillaConfig":
        """The paper's "base" or "big" model (Table 3), with `overrides` (e.g. `vocab_size`) applied on top."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; the paper's presets are {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def _check_values(self) -> None:
        for field in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"VanillaConfig.{field} must be a positive integer, got {value!r}")
        for field in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, field)
            if self.d_model % heads:
                raise ValueError(f"VanillaConfig.d_model={self.d_model} is not divisible by {field}={heads}")
        if self.d_model % 2:
            raise ValueError(
                f"VanillaConfig.d_model must be even (sin/cos pairs of the positional encoding), got {self.d_model}"
            )
        for field in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"VanillaConfig.{field} must be a probability in [0, 1), got {value!r}")
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(
                f"VanillaConfig.activation_function={self.activation_function!r} is not supported; "
                f"choose one of {ACTIVATIONS}"
            )
        if self.positional_encoding_layout not in POSITIONAL_ENCODING_LAYOUTS:
            raise ValueError(
                f"VanillaConfig.positional_encoding_layout={self.positional_encoding_layout!r} is not supported; "
                f"choose one of {POSITIONAL_ENCODING_LAYOUTS}"
            )
        if not isinstance(self.add_final_logits_bias, bool):
            raise ValueError(
                f"VanillaConfig.add_final_logits_bias must be True or False, got {self.add_final_logits_bias!r}"
            )
        for field in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, field)
            if value is None:
                raise ValueError(f"VanillaConfig.{field} must be set: training and generation need it")
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"VanillaConfig.{field}={value!r} is not a token id in [0, vocab_size={self.vocab_size})"
                )
        if self.bos_token_id is not None and not 0 <= self.bos_token_id < self.vocab_size:
            raise ValueError(
                f"VanillaConfig.bos_token_id={self.bos_token_id!r} is not a token id in [0, {self.vocab_size})"
            )
        if not self.is_encoder_decoder:
            raise ValueError("VanillaConfig.is_encoder_decoder must be True: the model is an encoder-decoder")
        if not self.tie_word_embeddings:
            raise ValueError(
                "VanillaConfig.tie_word_embeddings must be True: the paper shares one matrix between both "
                "embeddings and the pre-softmax projection (section 3.4)"
            )


__all__ = ["ACTIVATIONS", "POSITIONAL_ENCODING_LAYOUTS", "PRESETS", "VanillaConfig"]
