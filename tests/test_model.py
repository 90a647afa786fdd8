"""Model behaviour: causality, padding, cache, attention kernels, loss contract, transformers conventions."""

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, VanillaModel

from helpers import decode_step_by_step, padded_batch, tiny_config, tiny_model


def _logits(model, ids, mask, decoder_ids, **kwargs):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, **kwargs).logits


def test_decoder_is_causal():
    """Changing target tokens t+1.. never changes the logits at positions <= t (section 3.2.3)."""
    model = tiny_model(std=0.3)
    ids, mask = padded_batch()
    decoder_ids = torch.randint(4, 64, (3, 10), generator=torch.Generator().manual_seed(1))
    reference = _logits(model, ids, mask, decoder_ids)
    for t in (0, 4, 8):
        changed = decoder_ids.clone()
        changed[:, t + 1 :] = torch.randint(4, 64, changed[:, t + 1 :].shape)
        logits = _logits(model, ids, mask, changed)
        assert torch.allclose(logits[:, : t + 1], reference[:, : t + 1], atol=1e-5)
        assert not torch.allclose(logits[:, t + 1 :], reference[:, t + 1 :], atol=1e-3)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padded_batch_equals_each_sentence_alone(attn_implementation):
    model = tiny_model(std=0.3)
    model.set_attn_implementation(attn_implementation)
    ids, mask = padded_batch(lengths=(9, 6, 3))
    decoder_ids = torch.randint(4, 64, (3, 7), generator=torch.Generator().manual_seed(2))
    decoder_mask = torch.ones_like(decoder_ids)
    decoder_mask[2, 4:] = 0  # padded target too
    batched = _logits(model, ids, mask, decoder_ids, decoder_attention_mask=decoder_mask)
    for row, length in enumerate((9, 6, 3)):
        target_length = int(decoder_mask[row].sum())
        alone = _logits(model, ids[row : row + 1, :length], None, decoder_ids[row : row + 1, :target_length])
        assert torch.allclose(batched[row, :target_length], alone[0], atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_masked_decoder_positions_are_attended_by_no_position(attn_implementation):
    """`decoder_attention_mask` hides a target position from every other one, wherever it lies: left padding (row 0)
    or inside the target (rows 1 and 2). Positions are absolute, as in Marian, so a masked slot still takes a
    position: the reference is the same targets with other tokens in the masked slots, which must change no logit
    at an unmasked position. Without the mask the same change shows (a model ignoring the mask fails)."""
    model = tiny_model(std=0.3, attn_implementation=attn_implementation)
    ids, mask = padded_batch()
    generator = torch.Generator().manual_seed(2)
    decoder_ids = torch.randint(4, 64, (3, 7), generator=generator)
    decoder_mask = torch.ones_like(decoder_ids)
    decoder_mask[0, :2] = 0
    decoder_mask[1, 3] = 0
    decoder_mask[2, 1:3] = 0
    keep = decoder_mask.bool()
    replaced = torch.where(keep, decoder_ids, torch.randint(4, 64, decoder_ids.shape, generator=generator))
    assert not torch.equal(replaced, decoder_ids)
    masked = _logits(model, ids, mask, decoder_ids, decoder_attention_mask=decoder_mask)
    reference = _logits(model, ids, mask, replaced, decoder_attention_mask=decoder_mask)
    assert torch.allclose(masked[keep], reference[keep], atol=1e-5)
    unmasked = _logits(model, ids, mask, replaced)
    assert not torch.allclose(masked[keep], unmasked[keep], atol=1e-3)


def test_step_by_step_decoding_with_cache_equals_full_forward():
    model = tiny_model(std=0.3)
    ids, mask = padded_batch()
    decoder_ids = torch.randint(4, 64, (3, 8), generator=torch.Generator().manual_seed(3))
    full = _logits(model, ids, mask, decoder_ids)
    with torch.no_grad():
        stepwise, cache = decode_step_by_step(model, ids, mask, decoder_ids)
    assert cache.get_seq_length() == decoder_ids.shape[1]
    assert torch.allclose(stepwise, full, atol=1e-5)


def test_cross_attention_keys_and_values_are_projected_once():
    model = tiny_model(std=0.3)
    ids, mask = padded_batch()
    calls = []
    model.model.decoder.layers[0].cross_attn.k_proj.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=6, min_new_tokens=6)
    assert len(calls) == 1


GENERATION_MODES = {
    "greedy": {"num_beams": 1},
    "beam": {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True},
}


@pytest.mark.parametrize("mode", GENERATION_MODES)
def test_generate_with_and_without_cache_is_identical(mode):
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    kwargs = dict(GENERATION_MODES[mode], max_new_tokens=12, no_repeat_ngram_size=1, return_dict_in_generate=True)
    kwargs["output_scores"] = True
    with torch.no_grad():
        cached = model.generate(input_ids=ids, attention_mask=mask, use_cache=True, **kwargs)
        uncached = model.generate(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    assert len(set(cached.sequences[0].tolist())) > 5  # not degenerate
    if mode == "beam":
        assert torch.allclose(cached.sequences_scores, uncached.sequences_scores, atol=1e-5)
    else:
        for a, b in zip(cached.scores, uncached.scores, strict=True):
            assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("mode", GENERATION_MODES)
def test_eager_and_sdpa_agree(mode):
    ids, mask = padded_batch()
    eager = tiny_model(std=0.4, attn_implementation="eager")
    sdpa = tiny_model(std=0.4)
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    decoder_ids = torch.randint(4, 64, (3, 6), generator=torch.Generator().manual_seed(4))
    assert torch.allclose(_logits(eager, ids, mask, decoder_ids), _logits(sdpa, ids, mask, decoder_ids), atol=1e-5)
    kwargs = dict(GENERATION_MODES[mode], max_new_tokens=12, no_repeat_ngram_size=1)
    with torch.no_grad():
        assert torch.equal(
            eager.generate(input_ids=ids, attention_mask=mask, **kwargs),
            sdpa.generate(input_ids=ids, attention_mask=mask, **kwargs),
        )


def test_every_attention_module_declares_its_causality():
    model = tiny_model()
    for layer in model.model.encoder.layers:
        assert layer.self_attn.is_causal is False
    for layer in model.model.decoder.layers:
        assert layer.self_attn.is_causal is True
        assert layer.cross_attn.is_causal is False


def test_sampling_draws_every_token_from_the_models_own_top_k():
    """Sampling (top_k=3, with the cache) sees at each step the logits the model gives the prefix sampled so far,
    recomputed here without the cache, and takes one of their three highest; and it samples (unlike greedy)."""
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    options = {"input_ids": ids, "attention_mask": mask, "num_beams": 1, "max_new_tokens": 10}
    torch.manual_seed(0)
    out = model.generate(**options, do_sample=True, top_k=3, return_dict_in_generate=True, output_logits=True)
    sampled = out.sequences
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=sampled[:, :-1]).logits
    chosen = sampled[:, 1:]
    live = ((chosen == 3).long().cumsum(1) - (chosen == 3).long()) == 0  # up to the row's </s>, not padding after
    assert live.sum() > 15
    assert torch.allclose(torch.stack(out.logits, 1)[live], logits[live], atol=1e-4)
    assert (logits.topk(3, dim=-1).indices == chosen[..., None]).any(-1)[live].all()
    assert not torch.equal(sampled, model.generate(**options))


def test_generation_stops_at_input_length_plus_50():
    model = tiny_model(std=0.4)
    config = model.generation_config
    assert config.decoder_start_token_id == 2 and config.eos_token_id == 3 and config.pad_token_id == 0
    ids, mask = padded_batch(lengths=(5, 4))
    with torch.no_grad():
        # Section 6.1: at most input length + 50 output tokens when nothing else is set; eos suppressed to reach it.
        for num_beams in (1, 4):
            out = model.generate(input_ids=ids, attention_mask=mask, suppress_tokens=[3], num_beams=num_beams)
            assert out.shape[1] == 1 + 5 + 50
        assert model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=7).shape[1] <= 8


def test_loss_is_mean_cross_entropy_and_honours_num_items_in_batch():
    model = tiny_model(std=0.3)
    ids, mask = padded_batch()
    labels = torch.randint(4, 64, (3, 6), generator=torch.Generator().manual_seed(5))
    labels[1, 4:] = -100
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        keep = labels != -100
        log_probs = out.logits.log_softmax(-1)
        by_hand = -log_probs[keep].gather(-1, labels[keep][:, None]).mean()
        assert out.loss.item() == pytest.approx(by_hand.item(), rel=1e-5)
        summed = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(40))
        assert summed.loss.item() == pytest.approx(by_hand.item() * keep.sum().item() / 40, rel=1e-5)
    # decoder inputs default to the labels shifted right, starting with decoder_start_token_id
    shifted = model.prepare_decoder_input_ids_from_labels(labels)
    assert shifted[:, 0].eq(2).all() and torch.equal(shifted[0, 1:], labels[0, :-1])
    assert shifted[1, 5].item() == 0  # -100 became pad


def test_inputs_embeds_equal_input_ids():
    model = tiny_model(std=0.3)
    ids, mask = padded_batch()
    decoder_ids = torch.randint(4, 64, (3, 5))
    embed = model.get_input_embeddings()
    with torch.no_grad():
        by_ids = _logits(model, ids, mask, decoder_ids)
        by_embeds = model(
            inputs_embeds=embed(ids), attention_mask=mask, decoder_inputs_embeds=embed(decoder_ids)
        ).logits
    assert torch.allclose(by_ids, by_embeds, atol=1e-6)


def test_return_dict_false_and_optional_outputs():
    model = tiny_model(attn_implementation="eager")
    ids, mask = padded_batch()
    labels = torch.randint(4, 64, (3, 5))
    with torch.no_grad():
        as_tuple = model(input_ids=ids, attention_mask=mask, labels=labels, return_dict=False)
        out = model(
            input_ids=ids, attention_mask=mask, labels=labels, output_attentions=True, output_hidden_states=True
        )
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.loss) and torch.equal(as_tuple[1], out.logits)
    assert len(out.encoder_hidden_states) == len(out.decoder_hidden_states) == 3  # embeddings + 2 layers
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == 2
    assert out.encoder_attentions[0].shape == (3, 4, 9, 9)
    assert out.cross_attentions[0].shape == (3, 4, 5, 9)
    weights = out.decoder_attentions[0]
    assert torch.allclose(weights.sum(-1), torch.ones(3, 4, 5), atol=1e-5)
    assert weights.triu(diagonal=1).abs().max() == 0  # causal
    assert out.encoder_attentions[0][1, :, :, 6:].abs().max() == 0  # padding is never attended


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = padded_batch()
    labels = torch.randint(4, 64, (3, 5), generator=torch.Generator().manual_seed(6))
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(seed=1, dropout=0.0)
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.model.encoder.layers[0].gradient_checkpointing
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_config_aliases_and_accessors():
    model = tiny_model()
    config = model.config
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (32, 4, 2)
    assert model.get_encoder() is model.model.encoder and model.get_decoder() is model.model.decoder
    assert model.get_output_embeddings() is model.lm_head
    new = torch.nn.Embedding(64, 32)
    model.set_input_embeddings(new)
    assert model.model.encoder.embed_tokens is new and model.model.decoder.embed_tokens is new


def test_resize_token_embeddings_keeps_the_three_way_tie():
    model = tiny_model()
    model.resize_token_embeddings(80)
    shared = model.model.shared.weight
    assert shared.shape == (80, 32) and model.config.vocab_size == 80
    assert model.lm_head.weight is shared
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared
    ids, mask = padded_batch(vocab_size=80)
    ids[0, 0] = 79
    assert _logits(model, ids, mask, torch.full((3, 2), 2)).shape == (3, 2, 80)


def test_base_model_returns_seq2seq_output():
    torch.manual_seed(0)
    model = VanillaModel(tiny_config()).eval()
    ids, mask = padded_batch()
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 4), 2))
    assert out.last_hidden_state.shape == (3, 4, 32) and out.encoder_last_hidden_state.shape == (3, 9, 32)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=ids, attention_mask=mask)


def test_bf16_autocast_gives_the_float32_logits_loss_and_gradients_within_bf16_precision():
    """bf16 keeps 8 significant bits (a relative rounding of 2^-9). Under CPU autocast, on a padded batch: the
    logits (spread about 1, largest about 4) stay within 0.1 of float32 (measured: 0.03), the loss within 5e-3
    (measured: 5e-4; it is computed in float32 from the bf16 logits) and all gradients together within 10% in L2
    norm (measured: 2%; single tensors are no test: the key biases' true gradient is zero)."""
    model = tiny_model(dropout=0.0).train()
    ids, mask = padded_batch()
    labels = torch.randint(4, 64, (3, 5), generator=torch.Generator().manual_seed(0))
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            output = model(input_ids=ids, attention_mask=mask, labels=labels)
        output.loss.backward()
        gradients = torch.cat([parameter.grad.flatten() for parameter in model.parameters()])
        results.append((output.logits, output.loss, gradients))
    (logits, loss, gradients), (bf16_logits, bf16_loss, bf16_gradients) = results
    assert bf16_logits.dtype == torch.bfloat16 and bf16_loss.dtype == torch.float32
    assert (bf16_logits.float() - logits).abs().max() < 0.1
    assert (bf16_loss - loss).abs() < 5e-3
    assert (bf16_gradients - gradients).norm() < 0.1 * gradients.norm()


def test_big_preset_builds_with_dropout_03():
    with torch.device("meta"):
        model = VanillaForConditionalGeneration(VanillaConfig.from_preset("big", vocab_size=100))
    assert model.model.encoder.layers[0].dropout.p == 0.3 and model.model.encoder.dropout.p == 0.3


def test_the_decoder_refuses_to_run_without_the_encoder_output_or_with_another_cache():
    model = tiny_model()
    ids, mask = padded_batch()
    decoder_ids = torch.tensor([[2, 5, 6]] * 3)
    with pytest.raises(ValueError, match="the decoder needs encoder_hidden_states"):
        model.model.decoder(input_ids=decoder_ids)
    memory = model.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    with pytest.raises(TypeError, match="the decoder cache must be an EncoderDecoderCache, got DynamicCache"):
        model.model.decoder(input_ids=decoder_ids, encoder_hidden_states=memory, cache=DynamicCache())
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    out = model.model.decoder(
        input_ids=decoder_ids, encoder_hidden_states=memory, encoder_attention_mask=mask, cache=cache, use_cache=True
    )
    assert out.last_hidden_state.shape == (3, 3, 32) and cache.get_seq_length() == 3  # the cache it asks for works


@pytest.mark.parametrize("layout", ["interleaved", "sin_then_cos"])
def test_the_positional_encoding_layout_is_one_of_two_and_saved(layout, tmp_path):
    config = tiny_config(positional_encoding_layout=layout)
    config.save_pretrained(tmp_path)
    assert VanillaConfig.from_pretrained(tmp_path).positional_encoding_layout == layout
    with pytest.raises(ValueError, match=r"positional_encoding_layout='cos_then_sin' is not supported; choose one of"):
        tiny_config(positional_encoding_layout="cos_then_sin")
