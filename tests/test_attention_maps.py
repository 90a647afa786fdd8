"""show-attention: the attention weights it records (equation 1, section 3.2.3) and the pictures it draws."""

import math

import matplotlib.image
import numpy
import pytest
import torch

from modeling_vanilla import paper_generation_config, sinusoidal_positional_encoding
from vanilla_training.attention_heatmaps import attention_maps, plot_attention, record_attention
from vanilla_training.cli.show_attention import main
from vanilla_training.tokenizer import train_joint_bpe

from helpers import tiny_model

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song", "we read the old book"]
SENTENCE = "the old cat sang in the park"


@pytest.fixture(scope="module")
def translator():
    """A tiny random model with the paper's decoding, and a BPE tokenizer of at most 64 tokens."""
    tokenizer = train_joint_bpe(SENTENCES, vocab_size=64)
    model = tiny_model(std=0.4, vocab_size=len(tokenizer))
    model.generation_config = paper_generation_config(model.config)
    return model, tokenizer


@pytest.fixture(scope="module")
def maps(translator):
    return attention_maps(*translator, SENTENCE)


def test_maps_have_a_row_per_query_and_a_column_per_key(translator, maps):
    model, tokenizer = translator
    source = tokenizer(SENTENCE)["input_ids"]
    assert maps.source_tokens == tokenizer.convert_ids_to_tokens(source)
    target_length = len(maps.target_tokens)
    assert maps.target_tokens[0] == "<s>" and maps.produced_tokens[:-1] == maps.target_tokens[1:]
    layers, heads = model.config.encoder_layers, model.config.encoder_attention_heads
    assert maps.encoder_self_attention.shape == (layers, heads, len(source), len(source))
    assert maps.decoder_self_attention.shape == (layers, heads, target_length, target_length)
    assert maps.cross_attention.shape == (layers, heads, target_length, len(source))


def test_every_row_is_a_probability_distribution(maps):
    for weights in (maps.encoder_self_attention, maps.decoder_self_attention, maps.cross_attention):
        assert (weights >= 0).all()
        assert torch.allclose(weights.sum(dim=-1), torch.ones(weights.shape[:-1]), atol=1e-5)


def test_only_the_decoder_self_attention_is_masked_above_the_diagonal(maps):
    """Section 3.2.3: position i of the decoder attends to positions up to i; the encoder sees every position."""
    above_diagonal = torch.ones(maps.decoder_self_attention.shape[-2:], dtype=torch.bool).triu(diagonal=1)
    assert (maps.decoder_self_attention[..., above_diagonal] == 0).all()
    assert (maps.decoder_self_attention.diagonal(dim1=-2, dim2=-1) > 0).all()
    encoder_above = torch.ones(maps.encoder_self_attention.shape[-2:], dtype=torch.bool).triu(diagonal=1)
    assert (maps.encoder_self_attention[..., encoder_above] > 0).any()


def test_first_encoder_layer_is_equation_1_by_hand(translator, maps):
    """softmax(Q K^T / sqrt(d_k)) from the first layer's own projections of the embedded source (sections 3.4, 3.5)."""
    model, tokenizer = translator
    ids = torch.tensor(tokenizer(SENTENCE)["input_ids"])
    d_model, heads = model.config.d_model, model.config.encoder_attention_heads
    d_k = d_model // heads
    with torch.no_grad():
        positions = sinusoidal_positional_encoding(torch.arange(len(ids)), d_model)
        x = model.model.shared(ids) * math.sqrt(d_model) + positions
        attention = model.model.encoder.layers[0].self_attn
        q = attention.q_proj(x).view(len(ids), heads, d_k).transpose(0, 1)
        k = attention.k_proj(x).view(len(ids), heads, d_k).transpose(0, 1)
        by_hand = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k), dim=-1)
    assert torch.allclose(maps.encoder_self_attention[0], by_hand, atol=1e-5)


def test_weights_are_recorded_on_eager_and_the_model_goes_back_to_sdpa(translator, maps):
    model, tokenizer = translator
    assert maps.previous_attn_implementation == "sdpa"
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")
    try:
        on_eager = attention_maps(model, tokenizer, SENTENCE)
    finally:
        model.set_attn_implementation("sdpa")
    assert on_eager.previous_attn_implementation == "eager"
    assert on_eager.produced_tokens == maps.produced_tokens
    assert torch.allclose(on_eager.cross_attention, maps.cross_attention, atol=1e-6)


def test_command_writes_six_pictures_and_says_it_switched_to_eager(translator, tmp_path, capsys):
    model, tokenizer = translator
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    written = main([str(folder), SENTENCE, "--output-dir", str(tmp_path / "pictures")])
    names = {"cross_attention", "encoder_self_attention", "decoder_self_attention"}
    assert sorted(path.name for path in written) == sorted(f"{n}{s}.png" for n in names for s in ("", "_heads"))
    for path in written:
        picture = matplotlib.image.imread(path)  # a PNG that decodes, of a drawing: many colours, not one
        assert picture.shape[0] > 200 and picture.shape[1] > 200, path.name
        assert len(numpy.unique(picture.reshape(-1, picture.shape[-1]), axis=0)) > 20, path.name
    printed = capsys.readouterr().out
    assert "switched from sdpa to eager" in printed and "translation:" in printed


def test_a_picture_shows_its_weights(tmp_path):
    """The same labels and colour scale, the weights transposed: another picture; the same weights: the same."""
    weights = torch.tensor([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]])  # causal: not symmetric
    drawn = {}
    for name, shown in (("first", weights), ("again", weights), ("transposed", weights.transpose(-1, -2))):
        plot_attention(
            shown, ["a", "b", "c"], ["x", "y", "z"], "t", ("keys", "queries"), tmp_path / f"{name}.png", False
        )
        drawn[name] = matplotlib.image.imread(tmp_path / f"{name}.png")
    assert numpy.array_equal(drawn["first"], drawn["again"])
    assert drawn["first"].shape == drawn["transposed"].shape
    assert not numpy.array_equal(drawn["first"], drawn["transposed"])


def test_a_batch_of_more_than_one_sentence_is_refused_and_the_model_keeps_its_attention(translator):
    model, tokenizer = translator
    pair = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True).input_ids
    one = pair[:1]
    with pytest.raises(ValueError, match="one sentence at a time: got source and target batches of 2 and 1"):
        record_attention(model, pair, one)
    with pytest.raises(ValueError, match="one sentence at a time: got source and target batches of 1 and 2"):
        record_attention(model, one, pair)
    assert model.config._attn_implementation == "sdpa"
    encoder, decoder, cross, previous = record_attention(model, one, one)
    assert previous == "sdpa" and encoder.shape[2:] == decoder.shape[2:] == cross.shape[2:] == (one.shape[1],) * 2


def test_bad_input_is_named(translator, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main([str(tmp_path / "missing"), SENTENCE])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="is not a saved translator: it has no config.json"):
        main([str(tmp_path / "empty"), SENTENCE])
    with pytest.raises(ValueError, match="the sentence is empty"):
        attention_maps(*translator, "   ")
