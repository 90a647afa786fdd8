"""The conventions every model inside transformers meets (its common tests: ConfigTester, ModelTesterMixin,
GenerationTesterMixin), written here from their intent: open configs, an untied output layer, greedy decoding by
default with a checkpoint's decoding setup in its generation_config.json."""

import json
import warnings

import pytest
import torch
from huggingface_hub.errors import StrictDataclassFieldValidationError
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM, GenerationConfig

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config

from helpers import TINY, padded_batch, tiny_model

# Keys that tooling writes into a config: transformers' own common tests set norm epsilons, quantization writes its
# config, and a newer transformers may add a key of its own.
TOOLING_KEYS = {
    "layer_norm_eps": 1e-5,
    "quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True},
    "some_key_of_a_later_transformers": [1, 2, 3],
}


def test_unknown_keys_are_kept_as_attributes_and_round_trip(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these is a near-miss of our own names
        config = VanillaConfig(**TINY, **TOOLING_KEYS)
    assert config.layer_norm_eps == 1e-5 and config.some_key_of_a_later_transformers == [1, 2, 3]
    assert VanillaConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["quantization_config"] == TOOLING_KEYS["quantization_config"]
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is VanillaConfig
    assert {**loaded.to_dict(), "_name_or_path": ""} == config.to_dict()  # only the folder it came from is new


def test_a_model_folder_whose_config_tooling_extended_still_loads(tmp_path):
    model = tiny_model(std=0.3)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    # (quantization_config is left out here: loading would quantize, which needs its library)
    extended = {key: value for key, value in TOOLING_KEYS.items() if key != "quantization_config"}
    (tmp_path / "config.json").write_text(json.dumps({**config, **extended}))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert loaded.config.layer_norm_eps == 1e-5
    ids, mask = padded_batch()
    decoder_ids = torch.full((3, 2), 2)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        actual = loaded(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    assert torch.equal(actual, expected)
    loaded.save_pretrained(tmp_path / "again")  # and it saves again, keys included
    assert json.loads((tmp_path / "again" / "config.json").read_text())["some_key_of_a_later_transformers"] == [1, 2, 3]


@pytest.mark.parametrize(
    ("key", "meant"), [("d_modle", "d_model"), ("drop_out", "dropout"), ("vocabsize", "vocab_size")]
)
def test_a_near_miss_of_our_field_names_warns_with_the_name_meant(key, meant, tmp_path):
    with pytest.warns(UserWarning, match=f"unknown key '{key}' .*did you mean '{meant}'"):
        config = VanillaConfig(**TINY, **{key: 256})
    assert getattr(config, key) == 256  # kept: a warning, so that nothing becomes unloadable
    config.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=f"did you mean '{meant}'"):
        VanillaConfig.from_pretrained(tmp_path)


def test_invalid_values_stay_value_errors_and_wrong_types_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"VanillaConfig.dropout must be a probability in \[0, 1\), got 1.5"):
        VanillaConfig(**{**TINY, "dropout": 1.5})
    with pytest.raises(StrictDataclassFieldValidationError, match="'encoder_layers' expected int, got str"):
        VanillaConfig(**{**TINY, "encoder_layers": "6"})
    config = VanillaConfig(**TINY)
    with pytest.raises(StrictDataclassFieldValidationError, match="'d_model' expected int, got float"):
        config.d_model = 32.0  # checked on assignment too


def test_generic_config_attributes_work():
    """What ConfigTester checks of every config: the common names, label maps, construction without arguments."""
    config = VanillaConfig(**TINY, num_labels=5)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (32, 4, 2)
    assert len(config.id2label) == 5
    assert VanillaConfig().to_dict() == VanillaConfig.from_preset("base").to_dict()
    decoder = config.get_text_config(decoder=True)  # what generate reads to build its cache
    assert (decoder.num_hidden_layers, decoder.num_attention_heads) == (2, 4)


# ---------------------------------------------------------------------------------------------------------------
# An untied output layer
# ---------------------------------------------------------------------------------------------------------------


def test_untied_output_layer_is_its_own_matrix_and_the_stacks_still_share_one_embedding():
    model = tiny_model(tie_word_embeddings=False)
    shared = model.model.shared.weight
    assert model.lm_head.weight is not shared and not torch.equal(model.lm_head.weight, shared)
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight.std().item() == pytest.approx(32**-0.5, rel=0.1)  # drawn like the embedding
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == sum(p.numel() for p in tiny_model().parameters()) + 64 * 32


def test_untied_output_layer_trains_separately(tmp_path):
    model = tiny_model(tie_word_embeddings=False)
    model.train()
    ids, mask = padded_batch()
    labels = torch.randint(4, 64, (3, 5), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    assert model.lm_head.weight.grad is not None and model.model.shared.weight.grad is not None
    assert not torch.allclose(model.lm_head.weight.grad, model.model.shared.weight.grad)


def test_untied_output_layer_saves_and_loads(tmp_path):
    model = tiny_model(std=0.3, tie_word_embeddings=False)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        stored = {name for name in weights.keys() if "embed" in name or "shared" in name or "lm_head" in name}
    assert stored == {"model.shared.weight", "lm_head.weight"}
    loaded, info = VanillaForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert loaded.config.tie_word_embeddings is False
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.lm_head.weight is not loaded.model.shared.weight
    assert loaded.model.encoder.embed_tokens.weight is loaded.model.shared.weight
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(
            loaded.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6),
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6),
        )


def test_resizing_an_untied_model_resizes_both_matrices():
    model = tiny_model(tie_word_embeddings=False)
    model.resize_token_embeddings(80)
    assert model.model.shared.weight.shape == model.lm_head.weight.shape == (80, 32)
    assert model.lm_head.weight is not model.model.shared.weight
    assert model.model.decoder.embed_tokens.weight is model.model.shared.weight


# ---------------------------------------------------------------------------------------------------------------
# Decoding defaults: greedy for the class, the paper's setup in the folders this project writes
# ---------------------------------------------------------------------------------------------------------------


def test_the_class_decodes_greedily_as_every_transformers_model():
    model = tiny_model(std=0.4)
    assert model.generation_config.num_beams in (None, 1) and model.generation_config.length_penalty in (None, 1.0)
    ids, mask = padded_batch()
    with torch.no_grad():
        default = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
        greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, num_beams=1, do_sample=False)
    assert torch.equal(default, greedy)


def test_paper_generation_config_is_section_6_1_and_travels_with_the_folder(tmp_path):
    model = tiny_model(std=0.4)
    model.generation_config = paper_generation_config(model.config)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert (saved["num_beams"], saved["length_penalty"], saved["early_stopping"]) == (4, 0.6, True)
    assert (saved["decoder_start_token_id"], saved["eos_token_id"], saved["pad_token_id"]) == (2, 3, 0)
    assert "max_length" not in saved  # the length limit is the paper's input length + 50, applied by generate
    loaded = VanillaForConditionalGeneration.from_pretrained(tmp_path)
    ids, mask = padded_batch()
    with torch.no_grad():
        by_folder = loaded.generate(input_ids=ids, attention_mask=mask, no_repeat_ngram_size=1)
        by_hand = tiny_model(std=0.4).generate(
            input_ids=ids,
            attention_mask=mask,
            no_repeat_ngram_size=1,
            num_beams=4,
            length_penalty=0.6,
            early_stopping=True,
            max_new_tokens=ids.shape[1] + 50,
        )
    assert torch.equal(by_folder, by_hand)


def test_paper_generation_config_keeps_a_base_configs_other_settings():
    base = GenerationConfig(bad_words_ids=[[63]], max_length=512, num_beams=6, forced_eos_token_id=0)
    config = paper_generation_config(VanillaConfig(**TINY), base=base)
    assert (config.num_beams, config.length_penalty, config.max_length) == (4, 0.6, None)
    assert config.bad_words_ids == [[63]] and config.forced_eos_token_id == 0
    assert base.num_beams == 6  # the base is not changed


def test_greedy_generation_continues_exactly_from_its_returned_cache():
    """Four tokens at once equal three tokens, then one more from the returned cache (transformers' common test
    `test_generate_continue_from_past_key_values`, which assumes greedy decoding by default)."""
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    options = {"eos_token_id": -1, "use_cache": True, "return_dict_in_generate": True}
    with torch.no_grad():
        whole = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, **options)
        first = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, **options)
        continued = model.generate(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=first.sequences,
            cache=first.cache,
            max_new_tokens=1,
            **options,
        )
    assert torch.equal(continued.sequences, whole.sequences)
