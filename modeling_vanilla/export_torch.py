"""Our model as `torch.nn.Transformer`: PyTorch's own post-LN layers, with a model's weights copied in.

`TorchTransformer` puts `torch.nn.Transformer` (`batch_first`, post-LN, no final LayerNorm on either stack, as in
the paper and in `VanillaForConditionalGeneration`) between the paper's input layer (shared embedding x
sqrt(d_model) + sinusoidal positions, then dropout) and its output layer (the embedding matrix, section 3.4).
`export_torch(model)` builds one for a `VanillaForConditionalGeneration` and copies its weights: the two compute the
same function, with PyTorch's attention, feed-forward and normalisation code doing the work. The tests use it as an
independent oracle; the benchmarks as a third system to time against ours and Marian.

Its attention-weight and FFN-inner dropout are set to ours (`attention_dropout`, `activation_dropout`), which
`nn.Transformer` would otherwise take from its single `dropout`. An untied output layer (`tie_word_embeddings=False`)
is not represented: `export_torch` refuses it.

Nothing of the model's own code is reused: the positional encoding (`positional_encoding`, section 3.5) and the
decoder input of teacher forcing (`teacher_forcing_input`) are written out again here, so that a bug in the
model's versions shows as a difference from this oracle rather than on both sides.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import Seq2SeqLMOutput

from .configuration_vanilla import VanillaConfig
from .modeling_vanilla import VanillaForConditionalGeneration

# PyTorch's layers take the activation as a function; "swish" is transformers' name for SiLU.
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu, "silu": F.silu}


def positional_encoding(length: int, d_model: int, layout: str) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i / d_model)) and PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)) for
    positions 0 .. length - 1 (section 3.5), computed in float64, returned in float32. `layout="sin_then_cos"`
    (Marian) stores the same values with every sine before every cosine: sin in dimension i, cos in d_model/2 + i."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000.0 ** (two_i / d_model)
    encoding = torch.empty(length, d_model, dtype=torch.float64)
    if layout == "interleaved":
        encoding[:, 0::2], encoding[:, 1::2] = torch.sin(angle), torch.cos(angle)
    elif layout == "sin_then_cos":
        encoding[:, : d_model // 2], encoding[:, d_model // 2 :] = torch.sin(angle), torch.cos(angle)
    else:
        raise ValueError(f"unknown positional encoding layout {layout!r}; use 'interleaved' or 'sin_then_cos'")
    return encoding.float()


def teacher_forcing_input(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads the reference target, so that position t, which predicts token t, sees
    the start token and tokens 0 .. t - 1. Labels ignored by the loss (-100) are read as pad."""
    start = labels.new_full((labels.shape[0], 1), decoder_start_token_id)
    previous = labels[:, :-1].masked_fill(labels[:, :-1] == -100, pad_token_id)
    return torch.cat((start, previous), dim=1)


class TorchTransformer(nn.Module):
    """`torch.nn.Transformer` between the paper's input layer and its tied output layer, configured to compute what
    `VanillaForConditionalGeneration` computes for the same `config` (see the module docstring)."""

    def __init__(self, config: VanillaConfig):
        super().__init__()
        if not config.tie_word_embeddings:
            raise ValueError("TorchTransformer has the paper's tied output layer; got tie_word_embeddings=False")
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = nn.Dropout(config.dropout)
        encoder_layer = self._layer(nn.TransformerEncoderLayer, config.encoder_attention_heads, config.encoder_ffn_dim)
        decoder_layer = self._layer(nn.TransformerDecoderLayer, config.decoder_attention_heads, config.decoder_ffn_dim)
        decoder_layer.multihead_attn.dropout = config.attention_dropout
        self.transformer = nn.Transformer(
            config.d_model,
            config.encoder_attention_heads,
            custom_encoder=nn.TransformerEncoder(encoder_layer, config.encoder_layers, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(decoder_layer, config.decoder_layers),
            batch_first=True,
        )
        if config.add_final_logits_bias:
            self.final_logits_bias = nn.Buffer(torch.zeros(1, config.vocab_size))
        nn.init.normal_(self.embedding.weight, 0.0, config.d_model**-0.5)

    def _layer(self, kind: type[nn.Module], heads: int, ffn_dim: int) -> nn.Module:
        """One post-LN layer whose residual dropout is `dropout` and whose attention-weight and FFN-inner dropout
        are `attention_dropout` and `activation_dropout` (one `dropout` for all three in PyTorch's layers)."""
        layer = kind(
            self.config.d_model,
            heads,
            ffn_dim,
            dropout=self.config.dropout,
            activation=ACTIVATIONS[self.config.activation_function],
            batch_first=True,
        )
        layer.self_attn.dropout = self.config.attention_dropout
        layer.dropout = nn.Dropout(self.config.activation_dropout)
        return layer

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Dropout(Embedding(ids) x scale + PE(positions)): the input layer of both stacks."""
        encoding = positional_encoding(ids.shape[1], self.config.d_model, self.config.positional_encoding_layout)
        return self.dropout(self.embedding(ids) * self.scale + encoding.to(ids.device))

    def encode(self, input_ids: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        """The encoder's output; `padding` is True at padded source positions (or None)."""
        return self.transformer.encoder(self.embed(input_ids), src_key_padding_mask=padding)

    def decode(
        self, decoder_input_ids: torch.Tensor, memory: torch.Tensor, padding: torch.Tensor | None
    ) -> torch.Tensor:
        """The decoder's output: masked self-attention, attention over `memory` (not at `padding`), FFN."""
        length = decoder_input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=decoder_input_ids.device)
        return self.transformer.decoder(
            self.embed(decoder_input_ids),
            memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            memory_key_padding_mask=padding,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqLMOutput:
        """Logits (and, with `labels`, the mean cross-entropy over labels other than -100) as
        `VanillaForConditionalGeneration` returns them. A mask without padding is dropped, as transformers does,
        so that PyTorch's kernels may skip masking."""
        if decoder_input_ids is None:
            decoder_input_ids = teacher_forcing_input(
                labels, self.config.pad_token_id, self.config.decoder_start_token_id
            )
        padding = None if attention_mask is None or bool(attention_mask.all()) else attention_mask == 0
        hidden = self.decode(decoder_input_ids, self.encode(input_ids, padding), padding)
        logits = F.linear(hidden, self.embedding.weight)
        if self.config.add_final_logits_bias:
            logits = logits + self.final_logits_bias
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits)


def torch_weights(model: VanillaForConditionalGeneration) -> dict[str, torch.Tensor]:
    """`model`'s weights under `TorchTransformer`'s names: the per-head Q, K and V projections of each attention
    concatenated into PyTorch's `in_proj`, and the norms numbered in the order of their sub-layers."""
    source = model.state_dict()
    weights = {"embedding.weight": source["model.shared.weight"]}
    if model.config.add_final_logits_bias:
        weights["final_logits_bias"] = source["final_logits_bias"]
    stacks = {
        "encoder": (model.config.encoder_layers, {"self_attn": "self_attn"}, ["self_attn_norm"]),
        "decoder": (
            model.config.decoder_layers,
            {"self_attn": "self_attn", "cross_attn": "multihead_attn"},
            ["self_attn_norm", "cross_attn_norm"],
        ),
    }
    for stack, (count, attentions, norms) in stacks.items():
        for index in range(count):
            ours, theirs = f"model.{stack}.layers.{index}.", f"transformer.{stack}.layers.{index}."
            for kind in ("weight", "bias"):
                for our_name, torch_name in attentions.items():
                    projections = [source[f"{ours}{our_name}.{p}_proj.{kind}"] for p in "qkv"]
                    weights[f"{theirs}{torch_name}.in_proj_{kind}"] = torch.cat(projections)
                    weights[f"{theirs}{torch_name}.out_proj.{kind}"] = source[f"{ours}{our_name}.out_proj.{kind}"]
                for number, norm in enumerate([*norms, "feed_forward_norm"], start=1):
                    weights[f"{theirs}norm{number}.{kind}"] = source[f"{ours}{norm}.{kind}"]
                weights[f"{theirs}linear1.{kind}"] = source[f"{ours}feed_forward.fc1.{kind}"]
                weights[f"{theirs}linear2.{kind}"] = source[f"{ours}feed_forward.fc2.{kind}"]
    return weights


def export_torch(model: VanillaForConditionalGeneration) -> TorchTransformer:
    """A `TorchTransformer` computing what `model` computes: its configuration, a copy of its weights, on its
    device and in its dtype and mode (train or eval)."""
    parameter = next(model.parameters())
    exported = TorchTransformer(model.config).to(parameter.device, parameter.dtype)
    exported.load_state_dict(torch_weights(model), strict=True)
    return exported.train(model.training)


__all__ = ["TorchTransformer", "export_torch", "positional_encoding", "teacher_forcing_input", "torch_weights"]
