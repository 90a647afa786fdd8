"""What a trained model attends to (section 3.2.3): the attention weights of one translated sentence, recorded in
one teacher-forced pass, and their pictures.

The sentence is translated as the model's generation config says (the paper's beam search for the models this
project saves); the translation is then fed back to the decoder in one teacher-forced pass that records every
attention weight. Six PNG heatmaps, tokens on the axes, one panel per layer (heads averaged) or per layer and head:

    cross_attention.png, cross_attention_heads.png                    encoder-decoder attention: the alignment
    encoder_self_attention.png, encoder_self_attention_heads.png      every source position over the source
    decoder_self_attention.png, decoder_self_attention_heads.png      masked: nothing above the diagonal

Attention weights come from `eager` attention, equation 1 as written. `sdpa`, the default, computes them inside one
fused kernel and returns none, so the model is switched to eager for the recording pass and switched back after.
"""

import dataclasses
import textwrap
from pathlib import Path

import matplotlib
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

EAGER_NOTE = (
    "attention weights need eager attention (sdpa computes them inside one fused kernel and returns none): "
    "the model was switched from {previous} to eager for the recording pass, and back"
)
KINDS = ("cross_attention", "encoder_self_attention", "decoder_self_attention")


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """The attention weights of one translated sentence, each `(layers, heads, queries, keys)`; rows sum to 1.

    `target_tokens` are the decoder's inputs (start token, then the translation); `produced_tokens` the token that
    each decoder position predicts (the translation, then the end token), which labels the cross-attention rows.
    """

    translation: str
    source_tokens: list[str]
    target_tokens: list[str]
    produced_tokens: list[str]
    encoder_self_attention: torch.Tensor
    decoder_self_attention: torch.Tensor
    cross_attention: torch.Tensor
    previous_attn_implementation: str


@torch.no_grad()
def record_attention(
    model: PreTrainedModel, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Encoder self-, decoder self- and cross-attention weights of one sentence pair, each `(layers, heads,
    queries, keys)`, from one teacher-forced forward pass on eager attention, and the implementation the model had
    (restored before returning)."""
    if input_ids.shape[0] != 1 or decoder_input_ids.shape[0] != 1:
        batches = (input_ids.shape[0], decoder_input_ids.shape[0])
        raise ValueError(f"one sentence at a time: got source and target batches of {batches[0]} and {batches[1]}")
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        outputs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    layers = (outputs.encoder_attentions, outputs.decoder_attentions, outputs.cross_attentions)
    encoder, decoder, cross = (torch.stack([w[0] for w in per_layer]).float().cpu() for per_layer in layers)
    return encoder, decoder, cross, previous


def attention_maps(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sentence: str, **generate_kwargs
) -> AttentionMaps:
    """Translates `sentence` (the model's generation config decides how, with `generate_kwargs` on top: a multilingual
    model's `forced_bos_token_id`, whose language token is then the decoder's second input and first output) and
    records its attention weights."""
    if not sentence.strip():
        raise ValueError("the sentence is empty: give a sentence in the model's source language")
    inputs = tokenizer(sentence, return_tensors="pt").to(model.device)
    generated = model.generate(**inputs, **generate_kwargs)[:1]  # start token, translation, end token
    encoder, decoder, cross, previous = record_attention(model, inputs["input_ids"], generated[:, :-1])
    return AttentionMaps(
        translation=tokenizer.decode(generated[0], skip_special_tokens=True),
        source_tokens=tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist()),
        target_tokens=tokenizer.convert_ids_to_tokens(generated[0, :-1].tolist()),
        produced_tokens=tokenizer.convert_ids_to_tokens(generated[0, 1:].tolist()),
        encoder_self_attention=encoder,
        decoder_self_attention=decoder,
        cross_attention=cross,
        previous_attn_implementation=previous,
    )


def plot_attention(
    weights: torch.Tensor,
    rows: list[str],
    columns: list[str],
    title: str,
    axis_names: tuple[str, str],
    path: Path,
    per_head: bool,
) -> None:
    """Writes a PNG of `(layers, heads, queries, keys)` weights: one panel per layer with the heads averaged, or
    with `per_head` a grid of every layer (rows) and head (columns). `axis_names` name the keys and the queries.
    All panels share one colour scale, from 0 to the largest weight shown."""
    layers, heads = weights.shape[:2]
    panels = {}  # grid position: (weights, title)
    for layer in range(layers):
        if per_head:
            for head in range(heads):
                panels[layer, head] = (weights[layer, head], f"layer {layer + 1}, head {head + 1}")
        else:
            panels[0, layer] = (weights[layer].mean(dim=0), f"layer {layer + 1}, heads averaged")
    grid_rows, grid_columns = (layers, heads) if per_head else (1, layers)
    largest = max(float(panel.max()) for panel, _ in panels.values())
    side = min(5.0, max(2.2, 0.2 * max(len(rows), len(columns))))
    figure, axes = plt.subplots(
        grid_rows, grid_columns, figsize=(side * grid_columns + 1.5, side * grid_rows + 1.5), squeeze=False
    )
    for (row, column), (panel, panel_title) in panels.items():
        axis = axes[row][column]
        image = axis.imshow(panel.numpy(), cmap="viridis", vmin=0.0, vmax=largest, aspect="auto")
        # Token labels along the bottom row and the left column.
        axis.set_xticks(range(len(columns)), columns if row == grid_rows - 1 else [], rotation=90, fontsize=7)
        axis.set_yticks(range(len(rows)), rows if column == 0 else [], fontsize=7)
        axis.set_title(panel_title, fontsize=9)
    axes[-1][0].set_xlabel(axis_names[0])
    axes[-1][0].set_ylabel(axis_names[1])
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    figure.suptitle(textwrap.fill(title, width=40 * grid_columns))
    figure.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(figure)


def write_attention_pictures(maps: AttentionMaps, output_dir: str | Path) -> list[Path]:
    """Writes the six PNG files named in the module docstring into `output_dir`; returns their paths."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    source, target, produced = maps.source_tokens, maps.target_tokens, maps.produced_tokens
    views = {
        "cross_attention": (maps.cross_attention, produced, source, ("source token", "target token produced")),
        "encoder_self_attention": (maps.encoder_self_attention, source, source, ("source token", "source token")),
        "decoder_self_attention": (maps.decoder_self_attention, target, target, ("decoder input", "decoder input")),
    }
    written = []
    for kind in KINDS:
        weights, rows, columns, axis_names = views[kind]
        title = f"{kind.replace('_', ' ')}: {maps.translation!r}"
        for path, per_head in ((folder / f"{kind}.png", False), (folder / f"{kind}_heads.png", True)):
            plot_attention(weights, rows, columns, title, axis_names, path, per_head)
            written.append(path)
    return written
