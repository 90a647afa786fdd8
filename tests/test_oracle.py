"""Independent oracle: PyTorch's own post-LN Transformer layers, with our weights copied in
(`modeling_vanilla.export_torch`), give our hidden states, logits and loss. The oracle's positional encoding and
teacher-forcing input are its own, checked here by hand."""

import ast
import math
from pathlib import Path

import pytest
import torch

from modeling_vanilla import export_torch as export_torch_module
from modeling_vanilla.export_torch import export_torch, positional_encoding, teacher_forcing_input

from helpers import padded_batch, tiny_model


def _decoder_ids(seed: int = 7) -> torch.Tensor:
    return torch.randint(4, 64, (3, 7), generator=torch.Generator().manual_seed(seed))


def test_encoder_and_decoder_match_torch_nn_transformer_layers():
    model = tiny_model(std=0.2)
    exported = export_torch(model).eval()
    ids, mask = padded_batch()
    decoder_ids = _decoder_ids()
    padding = mask == 0
    with torch.no_grad():
        memory = exported.encode(ids, padding)
        target = exported.decode(decoder_ids, memory, padding)
        ours = model.model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)

    keep = mask.bool()
    assert torch.allclose(ours.encoder_last_hidden_state[keep], memory[keep], atol=1e-5)
    assert torch.allclose(ours.last_hidden_state, target, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        # The options that represent Marian checkpoints.
        {"positional_encoding_layout": "sin_then_cos", "add_final_logits_bias": True, "activation_function": "swish"},
        # Decoder shaped unlike the encoder, embeddings not scaled.
        {"decoder_layers": 1, "decoder_attention_heads": 2, "decoder_ffn_dim": 48, "scale_embedding": False},
    ],
    ids=["paper", "marian-options", "asymmetric"],
)
def test_exported_torch_transformer_gives_our_logits_and_loss(overrides):
    model = tiny_model(std=0.2, **overrides)
    if model.config.add_final_logits_bias:
        model.final_logits_bias.normal_(0.0, 1.0)
    exported = export_torch(model)
    assert not exported.training
    ids, mask = padded_batch()
    labels = _decoder_ids(seed=8)
    labels[1, 5:] = -100
    with torch.no_grad():
        ours = model(input_ids=ids, attention_mask=mask, labels=labels)
        theirs = exported(input_ids=ids, attention_mask=mask, labels=labels)

    assert theirs.logits.shape == ours.logits.shape == (3, 7, 64)
    assert torch.allclose(theirs.logits, ours.logits, atol=1e-5)
    assert torch.allclose(theirs.loss, ours.loss, atol=1e-6)


def layout_free_dropout(self: torch.nn.Dropout, input: torch.Tensor) -> torch.Tensor:
    """`nn.Dropout` with its mask drawn in the tensor's logical order. torch draws it in memory order, and PyTorch's
    layers hand their dropout a transposed attention output where ours hand a contiguous one: the same random
    numbers would then fall on different elements."""
    if not self.training or self.p == 0:
        return input
    keep = torch.rand(input.shape, dtype=input.dtype, device=input.device) >= self.p
    return input * keep / (1 - self.p)


DROPOUTS = {
    "residual-and-embedding": {"dropout": 0.3},
    "attention-weights": {"dropout": 0.0, "attention_dropout": 0.2},
    "feed-forward-inner": {"dropout": 0.0, "activation_dropout": 0.25},
    "all-three": {"dropout": 0.3, "attention_dropout": 0.2, "activation_dropout": 0.25},
}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("dropouts", DROPOUTS)
def test_dropout_in_training_mode_falls_where_the_oracles_does(dropouts, attention, monkeypatch):
    """In training mode, under the same random numbers, the model and PyTorch's layers drop the same elements of the
    same tensors in the same order, each with its own rate: the paper's dropout of every sub-layer's output and of
    the embeddings (section 5.4), and `attention_dropout` and `activation_dropout`. A dropout call left out, added or
    given another rate shifts every mask after it."""
    monkeypatch.setattr(torch.nn.Dropout, "forward", layout_free_dropout)
    model = tiny_model(std=0.2, attn_implementation=attention, **DROPOUTS[dropouts]).train()
    exported = export_torch(model)
    ids, mask = padded_batch()
    labels = _decoder_ids(seed=8)
    torch.manual_seed(5)
    ours = model(input_ids=ids, attention_mask=mask, labels=labels)
    torch.manual_seed(5)
    theirs = exported(input_ids=ids, attention_mask=mask, labels=labels)
    assert torch.allclose(theirs.logits, ours.logits, atol=1e-5)
    assert torch.allclose(theirs.loss, ours.loss, atol=1e-6)
    with torch.no_grad():
        evaluated = model.eval()(input_ids=ids, attention_mask=mask, labels=labels)
    assert (evaluated.logits - ours.logits).abs().max() > 0.05  # dropout did act


def test_export_keeps_the_models_mode_and_dtype():
    model = tiny_model().train().to(torch.float64)
    exported = export_torch(model)
    assert exported.training
    assert exported.embedding.weight.dtype == torch.float64
    assert torch.equal(exported.embedding.weight, model.model.shared.weight)


def test_untied_output_layer_is_refused_by_name():
    with pytest.raises(ValueError, match="tie_word_embeddings=False"):
        export_torch(tiny_model(tie_word_embeddings=False))


def test_the_oracle_takes_nothing_but_the_model_class_from_the_model_code():
    """Its positional encoding and teacher-forcing input are its own: a bug in the model's cannot appear on both
    sides of the comparisons above."""
    tree = ast.parse(Path(export_torch_module.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "modeling_vanilla"
        for alias in node.names
    }
    assert imported == {"VanillaForConditionalGeneration"}


@pytest.mark.parametrize(
    ("layout", "order"),
    [
        ("interleaved", lambda s0, c0, s1, c1: [s0, c0, s1, c1]),
        ("sin_then_cos", lambda s0, c0, s1, c1: [s0, s1, c0, c1]),
    ],
)
def test_the_oracles_positional_encoding_is_section_3_5_by_hand(layout, order):
    """d_model = 4: PE(pos) holds sin and cos of pos / 10000^(0/4) = pos and of pos / 10000^(2/4) = pos / 100."""
    expected = [order(math.sin(pos), math.cos(pos), math.sin(pos / 100), math.cos(pos / 100)) for pos in range(3)]
    assert torch.allclose(positional_encoding(3, 4, layout), torch.tensor(expected), atol=1e-7)
    with pytest.raises(ValueError, match="unknown positional encoding layout 'cos_first'"):
        positional_encoding(3, 4, "cos_first")


def test_the_oracles_teacher_forcing_input_is_the_target_one_step_late():
    """Position t reads the start token (2) then targets 0 .. t - 1; ignored labels (-100) are read as pad (0)."""
    labels = torch.tensor([[5, 6, 7], [8, -100, -100]])
    assert teacher_forcing_input(labels, 0, 2).tolist() == [[2, 5, 6], [2, 8, 0]]
    assert labels.tolist() == [[5, 6, 7], [8, -100, -100]]  # not modified in place
