"""Export a saved vanilla Transformer to CTranslate2, through CTranslate2's own specification API.

CTranslate2 (`pip install ctranslate2`, extra `ct2`) runs the same post-LN encoder-decoder with fused, optionally
int8-quantised kernels. The spec is `ctranslate2.specs.TransformerSpec` with `pre_norm=False`; our weights map
one to one (query/key/value projections are fused as CTranslate2 expects).

Positional encoding: CTranslate2's built-in sinusoidal encoding is not the paper's (measured with 4.8.5: positions
start at 1, frequencies are 10000^(-i/(d_model/2 - 1)) instead of 10000^(-2i/d_model), all sines before all
cosines), so the table computed by our `sinusoidal_positional_encoding`, in the model's layout, is stored in the
spec. It holds `max_position_embeddings + 50` positions (section 6.1's output allowance): sources may have, and
`max_decoding_length` may ask for, at most that many tokens; beyond it CTranslate2 raises "No position encodings
are defined for positions >= N".

Output projection: the model's `lm_head`, which is the shared embedding matrix (section 3.4) unless the model has an
output layer of its own (`tie_word_embeddings=False`, as some converted OPUS-MT checkpoints do).

Vocabulary: the tokens of the folder's tokenizer if it has one, else the ids written as tokens ("0", "1", ...).
Source sentences are given to CTranslate2 as tokens exactly as our tokenizer produces them (with `</s>`); the
decoder starts from `decoder_start_token_id`, as in `generate`.

Decoding as `generate` does with the paper's settings: `translator.translate_batch(sources, beam_size=4,
length_penalty=0.6, min_decoding_length=0, max_decoding_length=<source length + 50>)`. CTranslate2's length penalty
is transformers' (log-probability / length^alpha) and its beam search stops, like `early_stopping=True`, once
`beam_size` hypotheses are finished. Its defaults differ: `min_decoding_length=1` (never stops at the first step),
`max_decoding_length=256`, `max_input_length=1024` (longer sources are cut). A generation config's `bad_words_ids`
(OPUS-MT bans pad) is `suppress_sequences`, with one difference: CTranslate2 renormalises the remaining
probabilities and `generate` does not, so greedy outputs agree but beam scores, and sometimes beams, differ.
`forced_eos_token_id` has no counterpart (at the length limit `generate` ends with eos, CTranslate2 does not).

A multilingual model (`config.languages`): its language tokens (`__de__`, ...) are tokens of the vocabulary like any
other, so the export keeps them at their ids. What `generate(..., forced_bos_token_id=<id of "__fr__">)` does is
`translate_batch(..., target_prefix=[["__fr__"]] * len(sources))`: each hypothesis starts with the language token
(dropped by `tokenizer.decode(..., skip_special_tokens=True)`), and `max_decoding_length` counts it as
`max_new_tokens` does (measured with 4.8.5: the same tokens at the limit, greedy and beam 4).

Usage: `python -m modeling_vanilla.export_ctranslate2 MODEL_FOLDER CT2_FOLDER --quantization int8`.
"""

import argparse
from pathlib import Path

import torch
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec
from torch import nn
from transformers import AutoTokenizer

from . import QUANTIZATIONS
from .modeling_vanilla import EXTRA_OUTPUT_LENGTH, VanillaForConditionalGeneration, sinusoidal_positional_encoding

CT2_ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    "gelu": common_spec.Activation.GELU,
    "swish": common_spec.Activation.SWISH,
    "silu": common_spec.Activation.SWISH,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def vocabulary(folder: Path, vocab_size: int) -> tuple[list[str], str | None]:
    """Tokens by id and the unknown token: the folder's tokenizer's (unique, and covering every id), else the ids as
    strings and no unknown token."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return [str(i) for i in range(vocab_size)], None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    if None in tokens or len(set(tokens)) != vocab_size:
        raise ValueError(
            f"the tokenizer in {folder} does not give {vocab_size} distinct tokens for ids 0..{vocab_size - 1}"
        )
    return tokens, tokenizer.unk_token if tokenizer.unk_token in tokens else None


def _set_linear(spec: common_spec.LinearSpec, *linears: nn.Linear) -> None:
    """One CTranslate2 linear layer from ours; several are fused along the output dimension (q, k, v)."""
    spec.weight = torch.cat([linear.weight for linear in linears]).detach()
    spec.bias = torch.cat([linear.bias for linear in linears]).detach()


def _set_layer_norm(spec: common_spec.LayerNormSpec, norm: nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach()
    spec.beta = norm.bias.detach()


def _set_attention(spec, attention, norm: nn.LayerNorm, cross: bool) -> None:
    """Self-attention: one fused q/k/v projection. Cross-attention: q, then a fused k/v (over the encoder output)."""
    if cross:
        _set_linear(spec.linear[0], attention.q_proj)
        _set_linear(spec.linear[1], attention.k_proj, attention.v_proj)
    else:
        _set_linear(spec.linear[0], attention.q_proj, attention.k_proj, attention.v_proj)
    _set_linear(spec.linear[-1], attention.out_proj)
    _set_layer_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, layer) -> None:
    _set_linear(spec.linear_0, layer.feed_forward.fc1)
    _set_linear(spec.linear_1, layer.feed_forward.fc2)
    _set_layer_norm(spec.layer_norm, layer.feed_forward_norm)


def transformer_spec_from_model(
    model: VanillaForConditionalGeneration, tokens: list[str], unk_token: str | None = None
) -> transformer_spec.TransformerSpec:
    """The CTranslate2 `TransformerSpec` (post-LN) holding `model`'s weights, with vocabulary `tokens`.

    Tokens outside the vocabulary become `unk_token`, or pad without one (CTranslate2 would otherwise give them an
    id past the embedding matrix)."""
    config = model.config
    activation = CT2_ACTIVATIONS[config.activation_function]
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(
            config.encoder_layers, config.encoder_attention_heads, pre_norm=False, activation=activation
        ),
        transformer_spec.TransformerDecoderSpec(
            config.decoder_layers, config.decoder_attention_heads, pre_norm=False, activation=activation
        ),
    )
    shared = model.model.shared.weight.detach()
    positions = torch.arange(config.max_position_embeddings + EXTRA_OUTPUT_LENGTH)
    table = sinusoidal_positional_encoding(positions, config.d_model, config.positional_encoding_layout)
    for stack_spec, stack in ((spec.encoder, model.model.encoder), (spec.decoder, model.model.decoder)):
        stack_spec.scale_embeddings = stack.embed_scale
        stack_spec.position_encodings.encodings = table
    spec.encoder.embeddings[0].weight = shared
    spec.decoder.embeddings.weight = shared
    spec.decoder.projection.weight = model.get_output_embeddings().weight.detach()  # `shared` unless untied
    if config.add_final_logits_bias:
        spec.decoder.projection.bias = model.final_logits_bias.detach()[0]

    for layer_spec, layer in zip(spec.encoder.layer, model.model.encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _set_feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.model.decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, cross=True)
        _set_feed_forward(layer_spec.ffn, layer)

    spec.config.layer_norm_epsilon = model.model.encoder.layers[0].self_attn_norm.eps
    spec.config.unk_token = unk_token if unk_token is not None else tokens[config.pad_token_id]
    spec.config.bos_token = tokens[
        config.decoder_start_token_id if config.bos_token_id is None else config.bos_token_id
    ]
    spec.config.eos_token = tokens[config.eos_token_id]
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


class VanillaConverter(Converter):
    """`ctranslate2.converters.Converter` for a vanilla model folder (see `export_ctranslate2`)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _load(self) -> transformer_spec.TransformerSpec:
        model = VanillaForConditionalGeneration.from_pretrained(self.folder, dtype=torch.float32)
        return transformer_spec_from_model(model, *vocabulary(self.folder, model.config.vocab_size))


def export_ctranslate2(
    source: str | Path, destination: str | Path, quantization: str = "float32", force: bool = False
) -> Path:
    """Writes the CTranslate2 model of the vanilla model saved in `source` to `destination`; returns its path."""
    return Path(VanillaConverter(source).convert(str(destination), quantization=quantization, force=force))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-export-ct2",
        description="Export a saved vanilla Transformer folder to a CTranslate2 model directory.",
    )
    parser.add_argument("source", help="folder written by save_pretrained (a tokenizer in it gives the vocabulary)")
    parser.add_argument("destination", help="CTranslate2 model directory to write")
    parser.add_argument(
        "--quantization", choices=QUANTIZATIONS, default="float32", help="weight type (default: float32)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite the destination if it exists")
    args = parser.parse_args(argv)
    print(export_ctranslate2(args.source, args.destination, args.quantization, args.force))


if __name__ == "__main__":
    main()
