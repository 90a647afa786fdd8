"""Bad configuration values and bad inputs get a ValueError that names the problem."""

import pytest
import torch

from modeling_vanilla import VanillaConfig

from helpers import TINY, padded_batch, tiny_model


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 30}, "d_model=30 is not divisible by encoder_attention_heads=4"),
        ({"decoder_attention_heads": 5}, "d_model=32 is not divisible by decoder_attention_heads=5"),
        ({"d_model": 33, "encoder_attention_heads": 3, "decoder_attention_heads": 3}, "d_model must be even"),
        ({"vocab_size": 0}, "vocab_size must be a positive integer, got 0"),
        ({"encoder_layers": -1}, "encoder_layers must be a positive integer, got -1"),
        ({"decoder_ffn_dim": 0}, "decoder_ffn_dim must be a positive integer, got 0"),
        ({"dropout": 1.0}, r"dropout must be a probability in \[0, 1\), got 1.0"),
        ({"attention_dropout": -0.1}, r"attention_dropout must be a probability in \[0, 1\), got -0.1"),
        ({"activation_function": "tanhh"}, "activation_function='tanhh' is not supported"),
        ({"eos_token_id": None}, "eos_token_id must be set"),
        ({"decoder_start_token_id": None}, "decoder_start_token_id must be set"),
        ({"pad_token_id": 64}, r"pad_token_id=64 is not a token id in \[0, vocab_size=64\)"),
        ({"bos_token_id": -1}, r"bos_token_id=-1 is not a token id"),
        ({"is_encoder_decoder": False}, "is_encoder_decoder must be True"),
        ({"init_std": 0.0}, "init_std must be None or a positive standard deviation, got 0.0"),
    ],
)
def test_invalid_config_values_name_the_field_and_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        VanillaConfig(**{**TINY, **overrides})


def test_invalid_values_in_a_saved_config_are_refused_on_load(tmp_path):
    config = VanillaConfig(**TINY)
    config.save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_text().replace('"dropout": 0.1', '"dropout": 1.5')
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match="dropout must be a probability"):
        VanillaConfig.from_pretrained(tmp_path)


def test_token_ids_outside_the_vocabulary():
    model = tiny_model()
    ids, mask = padded_batch()
    bad = ids.clone()
    bad[0, 0] = 64
    with pytest.raises(ValueError, match=r"input_ids holds ids outside the vocabulary \[0, 64\): \[64\]"):
        model(input_ids=bad, attention_mask=mask, decoder_input_ids=torch.full((3, 2), 2))
    with pytest.raises(ValueError, match=r"decoder_input_ids holds ids outside the vocabulary \[0, 64\): \[-5\]"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 2), -5))
    with pytest.raises(ValueError, match=r"labels holds ids outside the vocabulary \[0, 64\): \[100\]"):
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([[5, 100, -100]] * 3))
    with pytest.raises(ValueError, match="input_ids must hold integer token ids"):
        model(input_ids=ids.float(), attention_mask=mask, decoder_input_ids=torch.full((3, 2), 2))
    with pytest.raises(ValueError, match=r"input_ids holds ids outside the vocabulary"):
        model.generate(input_ids=bad, attention_mask=mask, max_new_tokens=3)


def test_attention_mask_of_the_wrong_shape():
    model = tiny_model()
    ids, mask = padded_batch()
    decoder_ids = torch.full((3, 2), 2)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 8\), expected \(batch, length\) = \(3, 9\)"):
        model(input_ids=ids, attention_mask=mask[:, :8], decoder_input_ids=decoder_ids)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 9\)"):
        model(input_ids=ids, attention_mask=mask[:2], decoder_input_ids=decoder_ids)
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape \(3, 5\), expected .* \(3, 2\)"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, decoder_attention_mask=mask[:, :5])
    with pytest.raises(ValueError, match="attention_mask must hold 0 .padding. and 1"):
        model(input_ids=ids, attention_mask=mask * 0.5, decoder_input_ids=decoder_ids)


def test_input_shapes_and_missing_inputs():
    model = tiny_model()
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, length\), got shape \(9,\)"):
        model(input_ids=ids[0], decoder_input_ids=torch.full((3, 2), 2))
    with pytest.raises(ValueError, match="pass exactly one of input_ids and its embeddings"):
        model(attention_mask=mask, decoder_input_ids=torch.full((3, 2), 2))
    embeds = model.get_input_embeddings()(ids)
    with pytest.raises(ValueError, match="pass exactly one of input_ids and its embeddings"):
        model(input_ids=ids, inputs_embeds=embeds, decoder_input_ids=torch.full((3, 2), 2))
    with pytest.raises(ValueError, match=r"embeddings for input_ids must be \(batch, length, 32\)"):
        model(inputs_embeds=embeds[..., :16], decoder_input_ids=torch.full((3, 2), 2))
