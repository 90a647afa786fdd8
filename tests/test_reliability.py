"""Reliability of the model itself: properties over random configs and inputs (hypothesis), numerics, lengths far
beyond training, empty and malformed input, and what loading may and may not execute."""

import ast
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration

from helpers import decode_step_by_step, padded_batch, tiny_model


@st.composite
def configs_and_batches(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    d_model = heads * draw(st.sampled_from([2, 4, 8]))
    config = VanillaConfig(
        vocab_size=draw(st.integers(8, 40)),
        d_model=d_model,
        encoder_layers=draw(st.integers(1, 2)),
        decoder_layers=draw(st.integers(1, 2)),
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=draw(st.integers(1, 32)),
        decoder_ffn_dim=draw(st.integers(1, 32)),
        activation_function=draw(st.sampled_from(["relu", "gelu", "swish"])),
        positional_encoding_layout=draw(st.sampled_from(["interleaved", "sin_then_cos"])),
    )
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4))
    target_length = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    return config, lengths, target_length, seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs_and_batches())
def test_random_configs_and_inputs(case):
    """Forward never fails, outputs are finite, padding does not leak, the decoder is causal, and decoding with
    the cache equals the full forward pass."""
    config, lengths, target_length, seed = case
    torch.manual_seed(seed)
    model = VanillaForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, config.vocab_size, (len(lengths), max(lengths)), generator=generator)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    decoder_ids = torch.randint(4, config.vocab_size, (len(lengths), target_length), generator=generator)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        assert torch.isfinite(logits).all()
        for row, length in enumerate(lengths):  # padding invariance
            alone = model(input_ids=ids[row : row + 1, :length], decoder_input_ids=decoder_ids[row : row + 1]).logits
            assert torch.allclose(alone[0], logits[row], atol=1e-4)
        changed = decoder_ids.clone()
        changed[:, -1] = (changed[:, -1] + 1 - 4) % (config.vocab_size - 4) + 4
        causal = model(input_ids=ids, attention_mask=mask, decoder_input_ids=changed).logits
        assert torch.allclose(causal[:, :-1], logits[:, :-1], atol=1e-5)
        stepwise, _ = decode_step_by_step(model, ids, mask, decoder_ids)
        assert torch.allclose(stepwise, logits, atol=1e-4)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_a_fully_padded_row_does_not_spoil_the_others(attn_implementation):
    model = tiny_model(std=0.3, attn_implementation=attn_implementation)
    ids, mask = padded_batch(lengths=(6, 4))
    ids = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)])
    mask = torch.cat([mask, torch.zeros(1, 6, dtype=torch.long)])
    decoder_ids = torch.full((3, 3), 2)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        alone = model(input_ids=ids[:2], attention_mask=mask[:2], decoder_input_ids=decoder_ids[:2]).logits
    assert torch.isfinite(logits[:2]).all()
    assert torch.allclose(logits[:2], alone, atol=1e-5)


def test_sequences_four_times_longer_than_the_intended_maximum():
    """The sinusoidal encoding has no maximum (section 3.5): 4x max_position_embeddings works, in forward and in
    cached decoding, with the positional values of the formula."""
    model = tiny_model(std=0.3, max_position_embeddings=64)
    ids = torch.randint(4, 64, (2, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=ids, decoder_input_ids=ids)
        assert torch.isfinite(out.logits).all()
        generated = model.generate(input_ids=ids[:, :8], num_beams=1, max_new_tokens=256, min_new_tokens=256)
    assert generated.shape[1] == 257
    encoding = model.model.encoder.embed
    hidden = encoding(ids, None, past_length=0, name="input_ids")
    expected_last = model.model.shared(ids[:, 255]) * math.sqrt(32) + torch.tensor(
        [math.sin(255 / 10000 ** (2 * (i // 2) / 32) + (math.pi / 2 if i % 2 else 0)) for i in range(32)]
    )
    assert torch.allclose(hidden[:, 255], expected_last, atol=1e-4)


def test_empty_batches_and_mask_dtypes():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"input_ids is empty: shape \(0, 5\)"):
        model(input_ids=torch.zeros(0, 5, dtype=torch.long), decoder_input_ids=torch.zeros(0, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids is empty: shape \(2, 0\)"):
        model(input_ids=torch.zeros(2, 0, dtype=torch.long), decoder_input_ids=torch.full((2, 1), 2))
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match="attention_mask must be bool, integer or float 0/1, got dtype torch.complex"):
        model(input_ids=ids, attention_mask=mask.to(torch.complex64), decoder_input_ids=torch.full((3, 1), 2))
    with torch.no_grad():  # bool, int and float 0/1 masks all mean the same
        outputs = [
            model(input_ids=ids, attention_mask=m, decoder_input_ids=torch.full((3, 2), 2)).logits
            for m in (mask, mask.bool(), mask.float())
        ]
    assert torch.allclose(outputs[0], outputs[1]) and torch.allclose(outputs[0], outputs[2])


def test_weights_load_from_safetensors_only(tmp_path):
    model = tiny_model(std=0.3)
    model.save_pretrained(tmp_path)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    (tmp_path / "model.safetensors").unlink()
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match="model.safetensors"):
        VanillaForConditionalGeneration.from_pretrained(tmp_path)
    loaded = VanillaForConditionalGeneration.from_pretrained(tmp_path, use_safetensors=False)  # explicit opt-in
    assert torch.equal(loaded.model.shared.weight, model.model.shared.weight)


def test_remote_code_files_import_only_torch_and_transformers(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    code = sorted(tmp_path.glob("*.py"))
    assert {"configuration_vanilla.py", "modeling_vanilla.py"} <= {p.name for p in code}
    for path in code:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {"." if node.level else node.module.split(".")[0]}
            else:
                continue
            allowed = {"torch", "transformers", "huggingface_hub", ".", "math", "copy", "warnings", "collections",
                       "dataclasses", "types", "typing", "shutil", "pathlib"}  # fmt: skip
            assert roots <= allowed, (path.name, roots)
