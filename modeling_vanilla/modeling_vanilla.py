"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a transformers model.

The file follows the paper: positional encoding (section 3.5), scaled dot-product and multi-head attention (3.2),
position-wise feed-forward network (3.3), encoder and decoder layers (3.1), the two stacks, the encoder-decoder model,
and the language-model head whose pre-softmax projection shares its weights with both embeddings (3.4).

Fidelity notes: every place where this code differs from the paper, or decides what the paper leaves open.

- Biases. The paper does not say whether projections carry biases. Every linear layer here has one, as in fairseq,
  Marian and The Annotated Transformer; only the pre-softmax projection has none (it is the embedding matrix).
- Initialisation is not in the paper. By default we follow the reference implementations (tensor2tensor, fairseq):
  Xavier uniform for projection weights, zero biases, and N(0, d_model^-0.5) for the shared embedding, so that the
  sqrt(d_model) scaling of section 3.4 gives token vectors of unit variance. `init_std` (a float) draws every
  embedding and projection weight from N(0, init_std) instead, transformers' convention (Marian, BART): the "demo"
  and "small" presets' choice (0.02), for their small corpus and short schedules.
- Dropout (section 5.4) is applied to each sub-layer output before the residual sum and to the sums of embeddings
  and positional encodings, with `dropout` (0.1 base, 0.3 big). Attention-weight and FFN-inner dropout are not in
  the paper; they exist as `attention_dropout` and `activation_dropout` and default to 0.
- Label smoothing (section 5.4, 0.1) is a training choice: the model's loss is plain cross-entropy, like every
  transformers seq2seq model, and training applies smoothing through the Trainer's `label_smoothing_factor`.
- Decoding (section 6.1: beam 4, length penalty 0.6, terminate early when possible) is a checkpoint's setting, not
  the class's: as in every transformers model, the class defaults to greedy decoding, and the paper's setup travels
  in a model folder's `generation_config.json` (`paper_generation_config`, written by training, the Marian converter
  and the examples), so `from_pretrained(...).generate()` and the pipeline decode as the paper does.
- The length penalty: transformers' beam search, the default here, divides a hypothesis' log-probability by
  length**alpha; the paper (after GNMT, Wu et al. 2016) divides by ((5 + length) / 6)**alpha. Both favour longer
  outputs, transformers' form more strongly (at alpha 0.6, 10 tokens against 5 gain a factor 1.52 instead of 1.28);
  scores, and rarely the chosen hypothesis, differ. `generate(..., custom_generate=gnmt_beam_search)`
  (`gnmt_beam_search.py`) decodes with the paper's form.
- Maximum output length is input length + 50 (section 6.1): `generate` applies it when the call and the generation
  config set no length.
- The output projection may be untied (`tie_word_embeddings=False`, not the paper's): it then has a matrix of its
  own, initialised like the embedding, while the encoder and decoder keep sharing one embedding matrix.
- The decoder starts from `<s>` (`decoder_start_token_id`); the paper does not name its start symbol. Marian
  checkpoints start from `<pad>`, which is only a different `decoder_start_token_id`.
- The positional encoding is read from a table of the formula (`SinusoidalPositionalEncoding`): nothing learned,
  nothing saved. The paper does not say how positions past the longest training sentence are handled: eager code
  grows the table; compiled code, whose shapes are fixed, raises past `max_position_embeddings`.
- Marian option `activation_function="swish"` (OPUS-MT's FFN activation) exists only to represent Marian
  checkpoints (`convert_marian.py`); the default is the paper's "relu".
- Marian option `positional_encoding_layout="sin_then_cos"` (all sines, then all cosines: the paper's values with
  permuted dimensions) exists only to represent Marian checkpoints; the default is the paper's "interleaved".
- Marian option `add_final_logits_bias=True` (a learned `(1, vocab_size)` bias added to the logits) exists only to
  represent Marian checkpoints; the default, False, is the paper's (no bias).
"""

import copy
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla import VanillaConfig
from .constrained_beam_search import constrained_beam_search

# Section 6.1: "We used beam search with a beam size of 4 and length penalty alpha = 0.6 ... We set the maximum output
# length during inference to input length + 50, but terminate early when possible."
BEAM_SIZE = 4
LENGTH_PENALTY = 0.6
EXTRA_OUTPUT_LENGTH = 50


# ---------------------------------------------------------------------------------------------------------------
# 3.5 Positional encoding
# ---------------------------------------------------------------------------------------------------------------


def sinusoidal_positional_encoding(positions: torch.Tensor, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) and PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (section 3.5).

    `positions` is a 1-D tensor of absolute positions; the result is `(len(positions), d_model)` in float32,
    computed in float64 (far positions keep their precision, and Marian's table is matched exactly). With
    angle_i = pos / 10000^(2i/d_model) for i in [0, d_model/2): `layout="interleaved"` (the paper) puts sin(angle_i)
    in dimension 2i and cos(angle_i) in dimension 2i+1; `layout="sin_then_cos"` (Marian) puts sin(angle_i) in
    dimension i and cos(angle_i) in dimension d_model/2 + i. Any position works: there is no maximum length.
    """
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=positions.device)
    angles = positions.to(torch.float64)[:, None] / torch.pow(10000.0, two_i / d_model)
    if layout == "interleaved":
        encoding = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    elif layout == "sin_then_cos":
        encoding = torch.cat((angles.sin(), angles.cos()), dim=-1)
    else:
        raise ValueError(f"unknown positional encoding layout {layout!r}; use 'interleaved' or 'sin_then_cos'")
    return encoding.to(torch.float32)


class SinusoidalPositionalEncoding(nn.Module):
    """PE of section 3.5 for positions `start .. start + length - 1`, read from a table of the formula: decoding does
    not recompute sines step by step. The table has `num_positions` rows (the config's `max_position_embeddings`),
    computed on the CPU in float64, then cast to float32. It is a non-persistent buffer: it moves with the model, is
    never saved, and is computed again after loading (`_init_weights`), since transformers builds models on the meta
    device. Eager code grows it when a longer sequence comes; compiled code, whose shapes are fixed, cannot, and
    raises instead."""

    def __init__(self, d_model: int, layout: str, num_positions: int):
        super().__init__()
        self.d_model = d_model
        self.layout = layout
        self.register_buffer("table", self.formula(num_positions).to(torch.get_default_device()), persistent=False)

    def formula(self, num_positions: int) -> torch.Tensor:
        """The first `num_positions` rows of the table, on the CPU."""
        return sinusoidal_positional_encoding(torch.arange(num_positions, device="cpu"), self.d_model, self.layout)

    def reserve(self, num_positions: int) -> None:
        """Makes the table hold positions `0 .. num_positions - 1` (at least doubling it when it grows)."""
        rows = self.table.shape[0]
        if num_positions <= rows:
            return
        if is_torchdynamo_compiling():
            raise ValueError(
                f"position {num_positions - 1} is past the positional-encoding table ({rows} rows: "
                f"max_position_embeddings), which compiled code cannot grow; raise max_position_embeddings, or run "
                "such lengths eagerly"
            )
        self.table = self.formula(max(num_positions, 2 * rows)).to(self.table.device, self.table.dtype)

    def forward(self, start: int | torch.Tensor, length: int, like: torch.Tensor) -> torch.Tensor:
        """`start` is an int, or a 0-d tensor (a static cache's length: compiled decoding steps read their positions
        from it without waiting for the device; the caller has reserved the rows), or a `(batch, length)` tensor
        holding each row's own positions (rows decoded at different steps)."""
        if isinstance(start, torch.Tensor) and start.dim() == 2:
            if not is_torchdynamo_compiling():
                self.reserve(int(start.max()) + 1)
            return self.table[start].to(like.dtype)
        if isinstance(start, int):
            self.reserve(start + length)
        positions = torch.arange(length, device=self.table.device) + start
        return self.table[positions].to(like.dtype)


# ---------------------------------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (equation 1), for all heads at once.

    `query`, `key`, `value` are `(batch, heads, length, d_k)`; `attention_mask` is additive (0 to keep, a large
    negative number to drop) and already holds the causal part. Returns the output as `(batch, length, heads, d_k)`
    and the attention weights.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class VanillaAttention(nn.Module):
    """Multi-head attention (section 3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O.

    Each head is scaled dot-product attention on its own learned projections of queries, keys and values, with
    d_k = d_v = d_model / h. The kernel comes from transformers' attention interface (`eager` is equation 1 above;
    `sdpa`, flash and flex compute the same function). `is_causal` tells the kernels whether the module masks future
    positions: only the decoder's self-attention does (section 3.2.3).
    """

    def __init__(self, config: VanillaConfig, num_heads: int, is_causal: bool, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        return states.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def keys_and_values(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of `states`, `(batch, heads, length, head_dim)` each."""
        return self._split_heads(self.k_proj(states)), self._split_heads(self.v_proj(states))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        key_value_states: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Queries come from `hidden_states`; keys and values from `key_value_states` (cross-attention: the encoder
        output) or from `hidden_states` (self-attention). With a cache, self-attention appends this step's keys
        and values, and cross-attention projects the encoder output once, on the first step, then reuses it."""
        is_cross_attention = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states))

        if is_cross_attention and cache is not None and cache.is_updated.get(self.layer_idx):
            layer_cache = cache.cross_attention_cache.layers[self.layer_idx]
            key, value = layer_cache.keys, layer_cache.values
        else:
            key, value = self.keys_and_values(key_value_states if is_cross_attention else hidden_states)
            if cache is not None:
                if is_cross_attention:
                    key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                    cache.is_updated[self.layer_idx] = True
                else:
                    key, value = cache.self_attention_cache.update(key, value, self.layer_idx)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(*hidden_states.shape[:-1], -1)
        return self.out_proj(output), weights


# ---------------------------------------------------------------------------------------------------------------
# 3.3 Position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------


class VanillaFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (equation 2), the same at every position; inner size d_ff."""

    def __init__(self, config: VanillaConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = nn.Dropout(config.activation_dropout)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(self.activation(self.fc1(hidden_states))))


# ---------------------------------------------------------------------------------------------------------------
# 3.1 Encoder and decoder layers: LayerNorm(x + Dropout(Sublayer(x)))
# ---------------------------------------------------------------------------------------------------------------


class VanillaEncoderLayer(GradientCheckpointingLayer):
    """Encoder layer (section 3.1): self-attention, then the feed-forward network, each wrapped as
    LayerNorm(x + Dropout(Sublayer(x))) (post-LN, dropout as in section 5.4)."""

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.self_attn = VanillaAttention(config, config.encoder_attention_heads, is_causal=False)
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = VanillaFeedForward(config, config.encoder_ffn_dim)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: Unpack[TransformersKwargs]
    ) -> torch.Tensor:
        attended, _ = self.self_attn(hidden_states, attention_mask, **kwargs)
        hidden_states = self.self_attn_norm(hidden_states + self.dropout(attended))
        return self.feed_forward_norm(hidden_states + self.dropout(self.feed_forward(hidden_states)))


class VanillaDecoderLayer(GradientCheckpointingLayer):
    """Decoder layer (section 3.1): masked self-attention, attention over the encoder output, then the feed-forward
    network, each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, config: VanillaConfig, layer_idx: int):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = VanillaAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.cross_attn = VanillaAttention(config, heads, is_causal=False, layer_idx=layer_idx)
        self.cross_attn_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = VanillaFeedForward(config, config.decoder_ffn_dim)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(hidden_states, attention_mask, cache=cache, **kwargs)
        hidden_states = self.self_attn_norm(hidden_states + self.dropout(attended))
        attended, _ = self.cross_attn(
            hidden_states, encoder_attention_mask, key_value_states=encoder_hidden_states, cache=cache, **kwargs
        )
        hidden_states = self.cross_attn_norm(hidden_states + self.dropout(attended))
        return self.feed_forward_norm(hidden_states + self.dropout(self.feed_forward(hidden_states)))


# ---------------------------------------------------------------------------------------------------------------
# Shared machinery: weight initialisation, input checks, the input representation of both stacks
# ---------------------------------------------------------------------------------------------------------------


class VanillaPreTrainedModel(PreTrainedModel):
    """Weight initialisation and transformers plumbing shared by all Vanilla models.

    Initialisation (not specified by the paper): with `init_std` None, as tensor2tensor and fairseq do it, Xavier
    uniform for every projection weight and N(0, d_model^-0.5) for the shared token embedding (and for an untied
    output projection); with `init_std` a float, N(0, init_std) for all of them, as Marian and BART do. Always zero
    biases, LayerNorm gain 1 and bias 0, and a zero final logits bias (Marian option) when a checkpoint does not hold
    one.
    """

    config: VanillaConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaEncoderLayer", "VanillaDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Embedding) or module is getattr(self, "lm_head", None):
            # The output projection is the embedding matrix when tied; untied, it is drawn the same way (as fairseq).
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5 if std is None else std)
        elif isinstance(module, nn.Linear):
            if std is None:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, VanillaForConditionalGeneration) and module.config.add_final_logits_bias:
            init.zeros_(module.final_logits_bias)
        elif isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.table, module.formula(module.table.shape[0]))

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> "VanillaPreTrainedModel":
        """Loads as transformers does, from safetensors only: a pickled checkpoint (`pytorch_model.bin`), which could
        run code while loading, is refused unless the caller passes `use_safetensors=False` explicitly."""
        kwargs.setdefault("use_safetensors", True)
        return super().from_pretrained(*args, **kwargs)

    def save_pretrained(self, save_directory: str, *args, **kwargs) -> None:
        """Saves as transformers does; the folder's `auto_map` names both Auto classes, so that `AutoModel` and
        `AutoModelForSeq2SeqLM` load it with `trust_remote_code=True` where this package is not installed, and its
        `custom_pipelines` declares `pipeline("translation")` (`pipeline_vanilla.py`, copied with the code)."""
        # A relative import of this file: transformers copies pipeline_vanilla.py with it when saving, and fetches it
        # with it when loading remote code, so a model loaded as remote code saves a complete folder too.
        from .pipeline_vanilla import TranslationPipeline

        if self._auto_class is not None:
            self.config.auto_map = {
                **getattr(self.config, "auto_map", {}),
                "AutoModel": "modeling_vanilla.VanillaModel",
                "AutoModelForSeq2SeqLM": "modeling_vanilla.VanillaForConditionalGeneration",
            }
            self.config.custom_pipelines = {
                "translation": {
                    "impl": f"pipeline_vanilla.{TranslationPipeline.__name__}",
                    "pt": ["AutoModelForSeq2SeqLM"],
                }
            }
        super().save_pretrained(save_directory, *args, **kwargs)


def check_token_ids(ids: torch.Tensor, vocab_size: int, name: str, ignore_index: int | None = None) -> None:
    """Raises a ValueError naming `name` if an id lies outside [0, vocab_size) (`ignore_index` excepted)."""
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if is_torchdynamo_compiling() or ids.numel() == 0:
        return
    valid = ids if ignore_index is None else ids[ids != ignore_index]
    if valid.numel() and (valid.min() < 0 or valid.max() >= vocab_size):
        bad = valid[(valid < 0) | (valid >= vocab_size)].unique()[:10].tolist()
        raise ValueError(f"{name} holds ids outside the vocabulary [0, {vocab_size}): {bad}")


def check_attention_mask(
    mask: torch.Tensor | None, expected: tuple[int, int], name: str, check_values: bool = True
) -> None:
    """Raises a ValueError naming `name` unless the 2-D padding mask has shape `expected` (batch, length) and, if
    `check_values` (it reads the mask, which on a GPU waits for it), holds only 0 and 1."""
    if mask is None or mask.dim() == 4:  # a prepared 4-D mask is passed through untouched, as transformers does
        return
    if tuple(mask.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected (batch, length) = {expected}")
    if mask.is_complex():
        raise ValueError(f"{name} must be bool, integer or float 0/1, got dtype {mask.dtype}")
    if check_values and mask.is_floating_point() and not is_torchdynamo_compiling():
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError(f"{name} must hold 0 (padding) and 1 (token), got other values")


class VanillaStack(VanillaPreTrainedModel):
    """What the encoder and decoder share: the input representation of section 3.4 and 3.5."""

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.positional_encoding = SinusoidalPositionalEncoding(
            config.d_model, config.positional_encoding_layout, config.max_position_embeddings
        )
        self.dropout = nn.Dropout(config.dropout)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def embed(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        past_length: int | torch.Tensor,
        name: str,
        check_ids: bool = True,
    ) -> torch.Tensor:
        """Dropout(Embedding(tokens) * sqrt(d_model) + PE(positions)) (sections 3.4, 3.5 and 5.4), positions from
        `past_length` on (an int, or a 0-d tensor inside a compiled decoding step with a static cache), or each
        row's own positions where `past_length` is a `(batch, length)` tensor. `check_ids`
        checks the ids against the vocabulary (a cached decoding step's ids come from generate, which checked them).

        `inputs_embeds`, if given instead of ids, is the raw embedding lookup (what `get_input_embeddings()`
        returns for the ids); it is scaled the same way, so both routes give the same result.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"pass exactly one of {name} and its embeddings, got both or neither")
        if input_ids is not None:
            if input_ids.dim() != 2:
                raise ValueError(f"{name} must be (batch, length), got shape {tuple(input_ids.shape)}")
            if check_ids:
                check_token_ids(input_ids, self.config.vocab_size, name)
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.d_model:
            raise ValueError(
                f"embeddings for {name} must be (batch, length, {self.config.d_model}), "
                f"got shape {tuple(inputs_embeds.shape)}"
            )
        if 0 in inputs_embeds.shape[:2]:
            raise ValueError(f"{name} is empty: shape {tuple(inputs_embeds.shape[:2])} has no batch or no tokens")
        encoding = self.positional_encoding(past_length, inputs_embeds.shape[1], like=inputs_embeds)
        return self.dropout(inputs_embeds * self.embed_scale + encoding)


# ---------------------------------------------------------------------------------------------------------------
# 3.1 The encoder and decoder stacks
# ---------------------------------------------------------------------------------------------------------------


class VanillaEncoder(VanillaStack):
    """The encoder (section 3.1): N identical layers over the embedded source sequence."""

    _can_record_outputs = {"hidden_states": VanillaEncoderLayer, "attentions": VanillaAttention}

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaEncoderLayer(config) for _ in range(config.encoder_layers))
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """`attention_mask` is the `(batch, source_length)` padding mask: 1 for tokens, 0 for padding."""
        hidden_states = self.embed(input_ids, inputs_embeds, past_length=0, name="input_ids")
        check_attention_mask(attention_mask, tuple(hidden_states.shape[:2]), "attention_mask")
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaDecoder(VanillaStack):
    """The decoder (section 3.1): N identical layers; self-attention is masked so that position i sees only
    positions < i of the (right-shifted) output, and every layer attends over the encoder output."""

    _can_record_outputs = {
        "hidden_states": VanillaDecoderLayer,
        "attentions": OutputRecorder(VanillaAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers))
        self.post_init()

    def cross_attention_keys_and_values(
        self, encoder_hidden_states: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's cross-attention keys and values of the encoder output: what a cache holds after the first
        step, for a caller that fills the cache of sentences joining a batch already decoding."""
        return [layer.cross_attn.keys_and_values(encoder_hidden_states) for layer in self.layers]

    @merge_with_config_defaults
    @capture_outputs
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """`attention_mask` is the target padding mask over past and current positions; `encoder_attention_mask`
        the source padding mask. With `use_cache`, keys and values are kept in an `EncoderDecoderCache`.
        `position_ids`, `(batch, length)`, gives each row's positions where rows are at different steps (a row that
        joined a running batch later: its earlier cache entries are padding, masked by `attention_mask`); by
        default every row's positions follow the cache's length."""
        if encoder_hidden_states is None:
            raise ValueError("the decoder needs encoder_hidden_states: it attends over the encoder output")
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        if cache is not None and not isinstance(cache, EncoderDecoderCache):
            raise TypeError(f"the decoder cache must be an EncoderDecoderCache, got {type(cache).__name__}")
        past_length = cache.get_seq_length() if cache is not None else 0
        if cache is not None:
            self.positional_encoding.reserve(cache.get_max_length())
        # A static cache counts its length in a 0-d tensor, from which compiled steps take their positions; eager code
        # reads it as a number. `known_length` is that number, or None inside a compiled step (on the device only).
        if isinstance(past_length, torch.Tensor) and not is_torchdynamo_compiling():
            past_length = int(past_length)
        known_length = past_length if isinstance(past_length, int) else None
        first_step = known_length == 0  # later steps read ids and masks already checked

        positions = past_length
        if position_ids is not None:
            inputs = input_ids if input_ids is not None else inputs_embeds
            if inputs is not None and tuple(position_ids.shape) != tuple(inputs.shape[:2]):
                raise ValueError(
                    f"decoder position_ids must be (batch, length) = {tuple(inputs.shape[:2])}, got shape "
                    f"{tuple(position_ids.shape)}"
                )
            positions = position_ids
        hidden_states = self.embed(input_ids, inputs_embeds, positions, "decoder_input_ids", check_ids=first_step)
        batch_size, length = hidden_states.shape[:2]
        if known_length is not None:
            expected = (batch_size, known_length + length)
            check_attention_mask(attention_mask, expected, "decoder_attention_mask", first_step)
        source_shape = tuple(encoder_hidden_states.shape[:2])
        check_attention_mask(encoder_attention_mask, source_shape, "attention_mask (source padding)", first_step)
        self_attention_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            cache=cache.self_attention_cache if cache is not None else None,
        )
        cross_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                self_attention_mask,
                encoder_hidden_states,
                encoder_attention_mask=cross_attention_mask,
                cache=cache,
                use_cache=use_cache,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, cache=cache)


# ---------------------------------------------------------------------------------------------------------------
# The encoder-decoder model, and the model with its pre-softmax projection (section 3.4)
# ---------------------------------------------------------------------------------------------------------------


def as_encoder_output(encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...]) -> BaseModelOutput:
    """Encoder outputs given as a tuple (the last hidden state, then optionally all hidden states and attentions,
    as `return_dict=False` gives them) as the `BaseModelOutput` the encoder returns."""
    if isinstance(encoder_outputs, BaseModelOutput):
        return encoder_outputs
    return BaseModelOutput(
        last_hidden_state=encoder_outputs[0],
        hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
        attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
    )


class VanillaModel(VanillaPreTrainedModel):
    """Encoder and decoder over one shared vocabulary: both stacks use the same embedding matrix (section 3.4)."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = VanillaEncoder(config)
        self.decoder = VanillaDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = self.encoder.embed_tokens = self.decoder.embed_tokens = value

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict[str, str]:
        """Both stacks always embed with `shared` (section 3.4). transformers drops every tie of a model whose config
        says `tie_word_embeddings=False`; for this model that flag unties only the output projection."""
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys)

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """Encodes the source (unless `encoder_outputs` is given) and decodes the right-shifted target
        (`decoder_position_ids`: the decoder's `position_ids`)."""
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "VanillaModel needs decoder_input_ids (the target shifted right, starting with "
                "decoder_start_token_id); VanillaForConditionalGeneration builds them from labels"
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            position_ids=decoder_position_ids,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder input from labels: start token, then the labels shifted right by one (ignored -100 become pad)."""
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def paper_generation_config(config: VanillaConfig, base: GenerationConfig | None = None) -> GenerationConfig:
    """The paper's decoding (section 6.1) for a model with `config`'s token ids: beam size 4, length penalty 0.6,
    terminating early (`generate` adds the length limit, input length + 50). Settings of `base` (e.g. a Marian
    checkpoint's banned tokens) are kept unless the paper sets them; its fixed `max_length` gives way to the paper's
    limit."""
    generation_config = copy.deepcopy(base) if base is not None else GenerationConfig()
    generation_config.update(
        num_beams=BEAM_SIZE,
        length_penalty=LENGTH_PENALTY,
        early_stopping=True,
        max_length=None,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )
    return generation_config


class VanillaForConditionalGeneration(VanillaPreTrainedModel, GenerationMixin):
    """The Transformer for translation: `VanillaModel` plus the pre-softmax projection, which is the shared
    embedding matrix itself (section 3.4), so source embedding, target embedding and output projection are one
    parameter (unless `tie_word_embeddings=False`). Like every transformers model it decodes greedily unless its
    generation config says otherwise; `paper_generation_config` is the paper's setup (section 6.1), which the
    models this project saves carry.

    With `config.add_final_logits_bias` (Marian checkpoints only), a `(1, vocab_size)` buffer `final_logits_bias` is
    added to the logits, as in Marian."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: VanillaConfig):
        super().__init__(config)
        # The labels are already aligned with the logits (the decoder reads them shifted right), so the loss is
        # transformers' plain token cross-entropy: the name "...ForConditionalGeneration" would pick its causal-LM
        # loss, which shifts the labels once more.
        self.loss_type = "ForMaskedLM"
        self.model = VanillaModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.add_final_logits_bias:
            self.final_logits_bias = nn.Buffer(torch.zeros(1, config.vocab_size))
        self.post_init()

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """transformers' resizing of the shared matrix; the final logits bias, if any, is cut or padded with zeros."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self.config.add_final_logits_bias:
            old = self.final_logits_bias
            kept = min(old.shape[1], embeddings.num_embeddings)
            self.final_logits_bias = torch.cat((old[:, :kept], old.new_zeros(1, embeddings.num_embeddings - kept)), 1)
        return embeddings

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """Logits over the shared vocabulary for every target position; with `labels` (target ids, -100 to
        ignore) also the loss, and `decoder_input_ids` default to the labels shifted right."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # the Trainer's token count of the whole batch
        if labels is not None:
            check_token_ids(labels, self.config.vocab_size, "labels", ignore_index=-100)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            decoder_position_ids=decoder_position_ids,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        if self.config.add_final_logits_bias:
            logits = logits + self.final_logits_bias
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config.vocab_size, num_items_in_batch=num_items_in_batch)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def generate(
        self, inputs: torch.Tensor | None = None, generation_config: GenerationConfig | None = None, **kwargs
    ) -> torch.LongTensor:
        """transformers' `generate`, with the paper's length limit (section 6.1): when neither the call nor the
        generation config sets `max_length` or `max_new_tokens`, at most source length + 50 new tokens. The source
        is `inputs`, `input_ids`, `inputs_embeds` or `encoder_outputs` (a `BaseModelOutput`, or a tuple as the
        forward takes it). A multilingual model (`config.languages`) needs the target language: its token as
        `forced_bos_token_id` (`tokenizer.get_lang_id(language)`; or a decoder prompt in `decoder_input_ids`);
        ValueError naming the choices without it, or with a `forced_bos_token_id` that is no language's token.
        `force_words_ids` (transformers' meaning: each sequence appears in the output) and
        `force_words_ids_per_sentence` are decoded by `constrained_beam_search` (Post & Vilar, 2018)."""
        if kwargs.get("encoder_outputs") is not None:  # transformers' beam search expands only a BaseModelOutput
            kwargs["encoder_outputs"] = as_encoder_output(kwargs["encoder_outputs"])
        config = generation_config if generation_config is not None else self.generation_config
        if any(x is not None for x in (kwargs.get("force_words_ids"), config.force_words_ids)) or kwargs.get(
            "force_words_ids_per_sentence"
        ):  # transformers 5 hands force_words_ids to the Hub; decoded here, offline (constrained_beam_search.py)
            kwargs.setdefault("custom_generate", constrained_beam_search)
        self._check_target_language(kwargs, config)
        length_unset = all(
            kwargs.get(k) is None and getattr(config, k) is None for k in ("max_length", "max_new_tokens")
        )
        if length_unset:
            source = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
            if source is None and kwargs.get("encoder_outputs") is not None:
                source = kwargs["encoder_outputs"].last_hidden_state
            if source is not None:
                kwargs["max_new_tokens"] = source.shape[1] + EXTRA_OUTPUT_LENGTH
        return super().generate(inputs, generation_config, **kwargs)

    def _check_target_language(self, kwargs: dict, config: GenerationConfig) -> None:
        """A multilingual model's `generate` is told its target: a decoder prompt, or a `forced_bos_token_id` that is
        one of `config.language_token_ids`; ValueError naming the languages otherwise."""
        languages = self.config.language_token_ids
        if not languages or kwargs.get("decoder_input_ids") is not None:
            return
        forced = kwargs.get("forced_bos_token_id")
        forced = getattr(config, "forced_bos_token_id", None) if forced is None else forced
        teach = (
            f"give the target language's token as forced_bos_token_id=tokenizer.get_lang_id(language), e.g. "
            f"generate(..., forced_bos_token_id=tokenizer.get_lang_id({next(iter(languages))!r}))"
        )
        if forced is None:
            raise ValueError(f"this model translates into {', '.join(languages)}: {teach}")
        if forced not in languages.values():
            raise ValueError(
                f"forced_bos_token_id={forced!r} is not the token of a language of this model ({', '.join(languages)}):"
                f" {teach}"
            )


__all__ = [
    "BEAM_SIZE",
    "EXTRA_OUTPUT_LENGTH",
    "LENGTH_PENALTY",
    "VanillaEncoder",
    "VanillaDecoder",
    "VanillaForConditionalGeneration",
    "VanillaModel",
    "VanillaPreTrainedModel",
    "paper_generation_config",
    "sinusoidal_positional_encoding",
]
