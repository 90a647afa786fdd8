"""Configuration of the Transformer from "Attention Is All You Need" (Vaswani et al., 2017).

The defaults are the paper's base model (Table 3, row "base"); `VanillaConfig.from_preset("big")` gives the big
model. Field names follow transformers' seq2seq models (Marian, BART) so that generic tooling works unchanged.

Like every transformers 5 config, `VanillaConfig` is a `@strict` dataclass: each field is type-checked when it is
set, and the `validate_*` methods check values together. It is also an open attribute bag: keys it does not know
(written by tooling, quantization, or a newer transformers) are kept as attributes and saved again, so that any
`config.json` loads; a key within two typing mistakes of one of our field names gets a "did you mean" warning.
"""

import warnings
from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import PreTrainedConfig

ACTIVATIONS = ("relu", "gelu", "swish", "silu")
# "interleaved" is the paper's (sin on even, cos on odd dimensions); "sin_then_cos" is Marian's (all sines first).
POSITIONAL_ENCODING_LAYOUTS = ("interleaved", "sin_then_cos")
# A multilingual model's language tokens follow the four special tokens (<pad> 0, <unk> 1, <s> 2, </s> 3), in the
# order of `languages`: where `vanilla_training.tokenizer.train_joint_bpe` puts them.
FIRST_LANGUAGE_TOKEN_ID = 4


def _size(
    d_model: int, layers: int, heads: int, ffn_dim: int, dropout: float, init_std: float | None = None
) -> Mapping[str, Any]:
    return MappingProxyType(
        {
            "d_model": d_model,
            "encoder_layers": layers,
            "decoder_layers": layers,
            "encoder_attention_heads": heads,
            "decoder_attention_heads": heads,
            "encoder_ffn_dim": ffn_dim,
            "decoder_ffn_dim": ffn_dim,
            "dropout": dropout,
            "init_std": init_std,
        }
    )


# Every named model size of the project, in VanillaConfig's own fields; `VanillaConfig.from_preset(name)` builds one.
# "base" and "big" are Table 3 of the paper and are frozen: a preset names one model of the paper and is never
# redefined. The others are this project's: "demo" is the model of the README's main job, "small" the model of the
# hour recipe and a quick benchmark size (docs/recipes.md says why), "tiny" the size of
# tests and smoke runs.
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "base": _size(d_model=512, layers=6, heads=8, ffn_dim=2048, dropout=0.1),
        "big": _size(d_model=1024, layers=6, heads=16, ffn_dim=4096, dropout=0.3),
        "demo": _size(d_model=128, layers=3, heads=4, ffn_dim=512, dropout=0.0, init_std=0.02),
        "small": _size(d_model=256, layers=3, heads=4, ffn_dim=1024, dropout=0.1, init_std=0.02),
        "tiny": _size(d_model=32, layers=2, heads=4, ffn_dim=64, dropout=0.1),
    }
)
PAPER_PRESETS = ("base", "big")


def typing_distance(a: str, b: str, limit: int) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) turning `a` into `b`, or `limit + 1` if more."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous, current = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        before, previous, current = previous, current, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
    return current[-1]


@strict
class VanillaConfig(PreTrainedConfig):
    """Hyper-parameters of the encoder-decoder Transformer (section 3, Table 3).

    Token ids follow the project's joint BPE tokenizer: `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3. The decoder
    starts from `<s>`. `max_position_embeddings` becomes the tokenizer's `model_max_length` (the longest input the
    pipeline accepts before truncating) and is the size of the table of sinusoidal encodings (section 3.5). Eager
    code takes longer sequences too (the table grows, with the formula's values); a compiled forward raises past it.

    `tie_word_embeddings=False` gives the output projection a matrix of its own; the encoder and decoder still share
    one embedding matrix (the paper's shared vocabulary). `positional_encoding_layout`, `add_final_logits_bias` and
    the "swish" activation exist only to represent Marian (OPUS-MT) checkpoints exactly
    (`modeling_vanilla.convert_marian`, which also sets Marian's token ids, the decoder starting from pad); their
    defaults, like every default here, are the paper's.

    `init_std` chooses the initialisation, which the paper leaves open: None (the default) initialises as the
    reference implementations of the paper's models do (tensor2tensor, fairseq); a float draws every embedding and
    projection weight from N(0, init_std), as transformers' Marian and BART do with their `init_std` (0.02). The
    "demo" and "small" presets use 0.02, for their small data and short schedules (docs/recipes.md says why).

    A multilingual model records its languages (ISO 639-1 codes) as `config.languages`, an open attribute as
    `VanillaConfig(languages=["en", "de", "fr"])` gives it; its tokenizer has a target-language token for each
    (`tokenization_vanilla.py`), with the ids of `language_token_ids`, and `generate` needs the target's as
    `forced_bos_token_id`. A model of one direction has no `languages`.
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
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
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
    init_std: float | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        own_fields = [field.name for field in fields(self)]
        for key in kwargs:
            near = [name for name in own_fields if typing_distance(key, name, limit=2) <= 2]
            if near:
                warnings.warn(
                    f"VanillaConfig got the unknown key {key!r} (kept as an attribute, unused); did you mean "
                    f"{near[0]!r}?",
                    stacklevel=3,
                )
        super().__post_init__(**kwargs)
        # `@strict` runs the validate_* methods right after __init__ too, but wraps their ValueError in its own
        # exception type; running them here first keeps an invalid value a ValueError that names the field.
        try:
            self.validate()
        except StrictDataclassClassValidationError as error:
            raise error.__cause__ from None

    @property
    def language_token_ids(self) -> dict[str, int]:
        """A multilingual model's target-language token ids by language (`FIRST_LANGUAGE_TOKEN_ID` on, in the order
        of `languages`); empty for a model of one direction."""
        languages = getattr(self, "languages", None) or []
        return {language: FIRST_LANGUAGE_TOKEN_ID + index for index, language in enumerate(languages)}

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "VanillaConfig":
        """The named model size `name` of `PRESETS` (the paper's "base" and "big" of Table 3, or one of this
        project's), with `overrides` (e.g. `vocab_size`) applied on top."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)} (the paper's: {PAPER_PRESETS})")
        return cls(**{**PRESETS[name], **overrides})

    def validate_architecture(self) -> None:
        """Sizes are positive, every head gets d_model / h dimensions, and sin/cos pairs fill d_model (3.2.2, 3.5)."""
        for name in (
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
            if getattr(self, name) <= 0:
                raise ValueError(f"VanillaConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if self.d_model % heads:
                raise ValueError(f"VanillaConfig.d_model={self.d_model} is not divisible by {name}={heads}")
        if self.d_model % 2:
            raise ValueError(
                f"VanillaConfig.d_model must be even (sin/cos pairs of the positional encoding), got {self.d_model}"
            )
        if not self.is_encoder_decoder:
            raise ValueError("VanillaConfig.is_encoder_decoder must be True: the model is an encoder-decoder")

    def validate_dropout(self) -> None:
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"VanillaConfig.{name} must be a probability in [0, 1), got {getattr(self, name)!r}")

    def validate_init_std(self) -> None:
        if self.init_std is not None and not self.init_std > 0:
            raise ValueError(
                f"VanillaConfig.init_std must be None or a positive standard deviation, got {self.init_std!r}"
            )

    def validate_choices(self) -> None:
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

    def validate_languages(self) -> None:
        """`languages`, where set, names two or more distinct languages."""
        languages = getattr(self, "languages", None)
        if languages is None:
            return
        if (
            not isinstance(languages, list | tuple)
            or not all(isinstance(code, str) and code for code in languages)
            or len(set(languages)) != len(languages)
            or len(languages) < 2
        ):
            raise ValueError(f"VanillaConfig.languages must be two or more distinct language codes, got {languages!r}")

    def validate_token_ids(self) -> None:
        """Padding, end of sequence and the decoder's start are token ids of the vocabulary (training and generation
        need all three); `bos_token_id` may be unset."""
        for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id", "bos_token_id"):
            value = getattr(self, name)
            if value is None and name != "bos_token_id":
                raise ValueError(f"VanillaConfig.{name} must be set: training and generation need it")
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"VanillaConfig.{name}={value!r} is not a token id in [0, vocab_size={self.vocab_size})"
                )


__all__ = [
    "ACTIVATIONS",
    "FIRST_LANGUAGE_TOKEN_ID",
    "PAPER_PRESETS",
    "POSITIONAL_ENCODING_LAYOUTS",
    "PRESETS",
    "VanillaConfig",
]
