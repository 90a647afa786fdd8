"""The continuous decoder (vanilla_training/serving/continuous.py) against transformers' own `generate`, the oracle:
sentences that join a running batch at different steps, and leave it as each is done, get the hypotheses that
`generate` gives each of them alone, for beam search with and without early stopping, other length penalties, and
greedy search; a sentence dropped midway leaves the others' translations unchanged."""

import random

import pytest
import torch

from modeling_vanilla import EXTRA_OUTPUT_LENGTH, paper_generation_config
from vanilla_training.serving.continuous import ContinuousDecoder, unsupported_settings
from vanilla_training.tokenizer import train_joint_bpe

from helpers import tiny_model, toy_pairs, train_on_toy_pairs

TOKEN_SETTINGS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


@pytest.fixture(scope="module")
def toy():
    """A tiny model trained for a few seconds on the word-for-word toy task, and its tokenizer: its translations end
    with the end token, at lengths that differ from sentence to sentence."""
    rng = random.Random(0)
    pairs = toy_pairs(rng, 300, min_words=1, max_words=6)
    tokenizer = train_joint_bpe([text for pair in pairs for text in pair], vocab_size=80, model_max_length=64)
    torch.manual_seed(0)
    model = tiny_model(
        seed=0,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    return train_on_toy_pairs(model, tokenizer, pairs, rng), tokenizer


def sentences(count: int, seed: int) -> list[str]:
    return [source for source, _ in toy_pairs(random.Random(seed), count, min_words=1, max_words=6)]


def with_generation(toy, kind: str, **settings):
    """The toy model ("toy"), or one of its size with weights drawn from N(0, 0.3) ("random": it decodes every
    sentence up to its length limit), with its tokenizer, decoding as the paper says, changed by `settings`."""
    model, tokenizer = toy
    if kind == "random":
        model = tiny_model(seed=3, std=0.3, **{name: getattr(model.config, name) for name in TOKEN_SETTINGS})
    model.generation_config = paper_generation_config(model.config)
    model.generation_config.update(**settings)
    return model, tokenizer


def alone(model, tokenizer, sentence: str, beams: int) -> list[str]:
    """transformers' `generate` for one sentence: its `beams` best hypotheses (its best, for greedy search)."""
    inputs = tokenizer([sentence], return_tensors="pt")
    output = model.generate(
        **inputs,
        max_new_tokens=inputs["input_ids"].shape[1] + EXTRA_OUTPUT_LENGTH,
        num_return_sequences=beams,
    )
    return tokenizer.batch_decode(output, skip_special_tokens=True)


def decode_continuously(decoder: ContinuousDecoder, arrivals: dict[int, list[str]], drop_at: int):
    """Runs the decoder step after step: at step t the sentences `arrivals[t]` join (numbered in order of arrival),
    the first alone and then the others (two joins before a step, as when the server retries a failed join
    sentence by sentence); at step `drop_at` the first sentence still in the batch is taken out. Returns each
    finished sentence's hypotheses, the number of the dropped one, and the batch sizes seen."""
    answers, sizes, dropped, number, step = {}, [], None, 0, 0
    while step <= max(arrivals) or decoder.keys:
        if step == drop_at:
            dropped = decoder.keys[0]
            decoder.drop({dropped})
        if step in arrivals:
            keys = list(range(number, number + len(arrivals[step])))
            number += len(keys)
            decoder.join(keys[:1], arrivals[step][:1])
            if len(keys) > 1:
                decoder.join(keys[1:], arrivals[step][1:])
        sizes.append(len(decoder.keys))
        answers.update(decoder.step())
        step += 1
    return answers, dropped, sizes


@pytest.mark.parametrize("kind", ["toy", "random"])
@pytest.mark.parametrize(
    "generation",
    [
        {},  # the paper's: beam 4, length penalty 0.6, early stopping
        {"num_beams": 3, "length_penalty": 1.0, "early_stopping": False},
        {"num_beams": 2, "length_penalty": 0.0, "early_stopping": "never"},
        {"num_beams": 1},  # greedy search
        {"banned": "das Haus eins"},  # the tokens of these words, as `bad_words_ids` of one token each
    ],
    ids=["paper", "no-early-stopping", "never", "greedy", "banned-tokens"],
)
def test_sentences_joining_at_any_step_get_what_generate_gives_each_alone(toy, kind, generation):
    if "banned" in generation:  # single tokens, as OPUS-MT bans its pad token
        banned = toy[1](generation["banned"], add_special_tokens=False)["input_ids"]
        generation = {"bad_words_ids": [[token] for token in banned]}
    model, tokenizer = with_generation(toy, kind, **generation)
    beams = model.generation_config.num_beams
    arrivals = {0: sentences(3, seed=10), 2: sentences(4, seed=11), 4: sentences(1, seed=12), 20: sentences(2, 13)}
    order = [sentence for step in sorted(arrivals) for sentence in arrivals[step]]
    answers, dropped, sizes = decode_continuously(ContinuousDecoder(model, tokenizer), arrivals, drop_at=3)
    assert sorted(answers) == [n for n in range(len(order)) if n != dropped]  # all but the dropped one, once each
    for number, hypotheses in answers.items():
        assert hypotheses == alone(model, tokenizer, order[number], beams), (number, order[number])
    assert max(sizes) >= 4 and min(sizes[1:]) < max(sizes)  # they shared the batch, and left it when done
    # Most of the toy model's translations end with the end token, the random model's all at the length limit.
    extra = [len(tokenizer(answers[n][0])["input_ids"]) - len(tokenizer(order[n])["input_ids"]) for n in answers]
    ended = sum(tokens < 10 for tokens in extra)
    assert ended >= len(extra) / 2 if kind == "toy" else ended == 0 and min(extra) > 40, extra


def test_settings_the_decoder_does_not_apply_are_refused_by_name(toy):
    model, tokenizer = with_generation(toy, "toy")
    assert unsupported_settings(model.generation_config) == []
    model, tokenizer = with_generation(toy, "toy", bad_words_ids=[[4, 5]], no_repeat_ngram_size=3)
    assert unsupported_settings(model.generation_config) == ["bad_words_ids", "no_repeat_ngram_size"]
    with pytest.raises(ValueError, match="bad_words_ids"):
        ContinuousDecoder(model, tokenizer)


def test_positions_given_row_by_row_equal_the_default_ones(toy):
    """The decoder's `position_ids` (each row's own positions) give the logits of the default positions."""
    model, tokenizer = with_generation(toy, "toy")
    inputs = tokenizer(sentences(2, seed=5), return_tensors="pt", padding=True)
    target = torch.randint(4, len(tokenizer), (2, 6))
    default = model(**inputs, decoder_input_ids=target).logits
    positions = torch.arange(6).expand(2, -1)
    given = model(**inputs, decoder_input_ids=target, decoder_position_ids=positions).logits
    torch.testing.assert_close(given, default, rtol=0, atol=0)
    shifted = model(**inputs, decoder_input_ids=target, decoder_position_ids=positions + 1).logits
    assert not torch.allclose(shifted, default)
    with pytest.raises(ValueError, match="position_ids must be"):
        model(**inputs, decoder_input_ids=target, decoder_position_ids=positions[:, :3])


def test_cross_attention_keys_and_values_are_what_the_cache_holds_after_a_first_step(toy):
    model, tokenizer = with_generation(toy, "toy")
    inputs = tokenizer(sentences(3, seed=6), return_tensors="pt", padding=True)
    start = torch.full((3, 1), model.config.decoder_start_token_id)
    output = model(**inputs, decoder_input_ids=start, use_cache=True)
    computed = model.get_decoder().cross_attention_keys_and_values(output.encoder_last_hidden_state)
    layers = output.cache.cross_attention_cache.layers
    assert len(computed) == len(layers) == model.config.decoder_layers
    for (key, value), layer in zip(computed, layers, strict=True):
        torch.testing.assert_close(key, layer.keys, rtol=0, atol=0)
        torch.testing.assert_close(value, layer.values, rtol=0, atol=0)


def test_a_sentence_dropped_before_the_first_step_leaves_the_others_as_generate_gives_them(toy):
    model, tokenizer = with_generation(toy, "toy")
    first, second = sentences(2, seed=7)
    decoder = ContinuousDecoder(model, tokenizer)
    decoder.join(["first", "second"], [first, second])
    decoder.drop({"first"})
    answers = {}
    while decoder.keys:
        answers.update(decoder.step())
    assert answers == {"second": alone(model, tokenizer, second, model.generation_config.num_beams)}
