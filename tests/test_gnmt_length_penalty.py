"""The paper's length penalty (section 6.1, after GNMT) through `generate(custom_generate=gnmt_beam_search)`."""

import ast
import importlib
import itertools
import sys
from pathlib import Path

import pytest
import torch

from modeling_vanilla.gnmt_beam_search import gnmt_beam_search, gnmt_length_penalty, save_custom_generate

from helpers import padded_batch, tiny_model

EOS = 3


def ending_model():
    """A tiny random model whose logits favour </s> a little (a final logits bias), so that beam hypotheses end at
    different lengths (with `no_repeat_ngram_size=1`, which `beam_search` sets): only then can a penalty matter."""
    model = tiny_model(std=0.4, add_final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias[0, EOS] = 1.0
    return model


def generated_lengths(sequences: torch.Tensor) -> list[int]:
    """|Y| of each returned hypothesis: tokens after the start token, up to and including the first </s>."""
    lengths = []
    for row in sequences[:, 1:].tolist():
        lengths.append(row.index(EOS) + 1 if EOS in row else len(row))
    return lengths


def beam_search(model, seed: int = 0, **options):
    """Beam search over four padded sources; transformers' own unless `options` name a `custom_generate`."""
    ids, mask = padded_batch(seed=seed, lengths=(9, 6, 3, 7))
    options = {"num_beams": 4, "max_new_tokens": 12, "no_repeat_ngram_size": 1, **options}
    return model.generate(
        input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **options
    )


def test_the_penalty_is_gnmt_equation_14():
    """lp(Y) = ((5 + |Y|) / 6) ** alpha, by hand: 1 for a one-token output, 2 where (5 + |Y|) / 6 = 2 and alpha = 1,
    or (5 + |Y|) / 6 = 4 and alpha = 1/2; 1 for any length when alpha = 0."""
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 1.0) == 2.0
    assert gnmt_length_penalty(19, 0.5) == 2.0
    assert all(gnmt_length_penalty(length, 0.0) == 1.0 for length in range(1, 100))


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
def test_with_alpha_0_it_is_transformers_beam_search_exactly(early_stopping):
    """With alpha = 0 neither form penalises length, so the searches must agree to the last bit."""
    model = ending_model()
    for seed in range(3):
        options = {"length_penalty": 0.0, "early_stopping": early_stopping, "num_return_sequences": 2}
        ours = beam_search(model, seed, custom_generate=gnmt_beam_search, **options)
        theirs = beam_search(model, seed, **options)
        assert len(set(generated_lengths(theirs.sequences))) > 1  # hypotheses of several lengths
        assert torch.equal(ours.sequences, theirs.sequences)
        assert torch.equal(ours.sequences_scores, theirs.sequences_scores)


def test_where_every_hypothesis_has_one_length_the_forms_differ_only_by_a_factor():
    """With exactly 8 new tokens the penalty cannot change the ranking: same output, and the scores are the same
    log-probabilities divided by ((5 + 8) / 6) ** alpha (ours) or 8 ** alpha (transformers)."""
    model = tiny_model(std=0.4)
    options = {"length_penalty": 0.6, "min_new_tokens": 8, "max_new_tokens": 8}
    ours = beam_search(model, custom_generate=gnmt_beam_search, **options)
    theirs = beam_search(model, **options)
    assert torch.equal(ours.sequences, theirs.sequences)
    log_probabilities = theirs.sequences_scores * 8**0.6
    assert torch.allclose(ours.sequences_scores, log_probabilities / (13 / 6) ** 0.6, atol=1e-5)
    assert not torch.allclose(ours.sequences_scores, theirs.sequences_scores, atol=1e-2)


def test_scores_are_log_probabilities_divided_by_the_gnmt_penalty():
    """Each returned score equals log P(Y | X), summed from a teacher-forced forward pass over the hypothesis,
    divided by ((5 + |Y|) / 6) ** 0.6."""
    model = ending_model()
    ids, mask = padded_batch(seed=2, lengths=(9, 6, 3, 7))
    output = beam_search(model, seed=2, custom_generate=gnmt_beam_search, length_penalty=0.6)
    lengths = generated_lengths(output.sequences)
    assert len(set(lengths)) > 1 and any(EOS in row for row in output.sequences.tolist())
    for row, (sequence, length) in enumerate(zip(output.sequences, lengths, strict=True)):
        target = sequence[: length + 1][None]  # start token, then |Y| generated tokens
        with torch.no_grad():
            logits = model(input_ids=ids[row : row + 1], attention_mask=mask[row : row + 1], decoder_input_ids=target)
        log_probs = torch.log_softmax(logits.logits[0, :-1].float(), dim=-1)
        log_probability = log_probs.gather(-1, target[0, 1:, None]).sum().item()
        assert output.sequences_scores[row].item() == pytest.approx(
            log_probability / ((5 + length) / 6) ** 0.6, abs=1e-4
        )
        if length > 1:
            assert output.sequences_scores[row].item() != pytest.approx(log_probability / length**0.6, abs=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# Oracles on a vocabulary of six tokens: every hypothesis enumerated, and beam search's rules run on the model's
# exact log-probabilities
# ---------------------------------------------------------------------------------------------------------------

VOCAB = 6  # <pad>, <unk>, <s>, </s> and two words: every token but </s> continues a hypothesis
CONTINUING = [token for token in range(VOCAB) if token != EOS]


def six_token_model(seed: int, std: float, eos_bias: float):
    """A random model over six tokens whose logits favour </s> by `eos_bias`, so that hypotheses of several lengths
    compete."""
    model = tiny_model(seed=seed, std=std, vocab_size=VOCAB, add_final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias.zero_()
        model.final_logits_bias[0, EOS] = eos_bias
    return model


def six_token_sources(seed: int, count: int = 6) -> torch.Tensor:
    """`count` sources of four words (ids 4 and 5) and </s>."""
    ids = torch.randint(4, VOCAB, (count, 5), generator=torch.Generator().manual_seed(seed))
    ids[:, -1] = EOS
    return ids


def next_token_log_probs(model, source: torch.Tensor):
    """log P(y | prefix, source) of every token y after a prefix of generated tokens, from a teacher-forced forward
    pass (memoised): the model's exact distribution, computed without the search's cache."""
    memo = {}

    def log_probs(prefix: tuple[int, ...]) -> list[float]:
        if prefix not in memo:
            decoder_ids = torch.tensor([[model.config.decoder_start_token_id, *prefix]])
            with torch.no_grad():
                logits = model(input_ids=source[None], decoder_input_ids=decoder_ids).logits
            memo[prefix] = logits[0, -1].log_softmax(-1).tolist()
        return memo[prefix]

    return log_probs


def every_hypothesis(max_new_tokens: int):
    """Every output of at most `max_new_tokens` tokens: continuing tokens then </s>, or `max_new_tokens` tokens
    (the length limit ends a hypothesis whatever its last token is)."""
    for length in range(1, max_new_tokens + 1):
        for prefix in itertools.product(CONTINUING, repeat=length - 1):
            for last in range(VOCAB) if length == max_new_tokens else (EOS,):
                yield (*prefix, last)


def log_probability(log_probs, hypothesis: tuple[int, ...]) -> float:
    """log P(Y | X) = sum over t of log P(y_t | y_<t, X)."""
    return sum(log_probs(hypothesis[:t])[token] for t, token in enumerate(hypothesis))


def returned_hypotheses(output, num_return_sequences: int) -> list[list[tuple[tuple[int, ...], float]]]:
    """Per source, the returned (hypothesis, score) pairs: tokens after the start token, up to the first </s>."""
    pairs = []
    for row, score in zip(output.sequences[:, 1:].tolist(), output.sequences_scores.tolist(), strict=True):
        pairs.append((tuple(row[: row.index(EOS) + 1] if EOS in row else row), score))
    return [pairs[i : i + num_return_sequences] for i in range(0, len(pairs), num_return_sequences)]


def test_a_beam_holding_every_hypothesis_returns_the_best_by_the_gnmt_formula():
    """Brute force: with at most 4 new tokens over six tokens there are 781 hypotheses per source, ranked by
    log P(Y | X) / ((5 + |Y|) / 6) ** 0.6. Beam search is exact when it never prunes: 750 beams hold every
    extension of every step (6 x 5**3 at the last), so every hypothesis competes, for each `early_stopping`. The
    three best returned are the oracle's three best, with their scores. The oracle's best differs, for some sources,
    from the best by log P alone and from the best by transformers' log P / |Y| ** 0.6."""
    model, sources = six_token_model(seed=2, std=0.6, eos_bias=1.2), six_token_sources(seed=2)
    max_new_tokens, alpha = 4, 0.6
    oracle, other_rankings_differ = [], set()
    for source in sources:
        log_probs = next_token_log_probs(model, source)
        scored = [(y, log_probability(log_probs, y)) for y in every_hypothesis(max_new_tokens)]
        assert len(scored) == 781
        ranked = sorted(scored, key=lambda pair: pair[1] / gnmt_length_penalty(len(pair[0]), alpha), reverse=True)
        oracle.append([(y, score / gnmt_length_penalty(len(y), alpha)) for y, score in ranked[:3]])
        assert oracle[-1][0][1] - oracle[-1][1][1] > 1e-4 and oracle[-1][1][1] - oracle[-1][2][1] > 1e-4  # no ties
        if max(scored, key=lambda pair: pair[1])[0] != ranked[0][0]:
            other_rankings_differ.add("log P")
        if max(scored, key=lambda pair: pair[1] / len(pair[0]) ** alpha)[0] != ranked[0][0]:
            other_rankings_differ.add("transformers' penalty")
    assert other_rankings_differ == {"log P", "transformers' penalty"}
    for early_stopping in (True, False, "never"):
        with torch.no_grad():
            output = model.generate(
                input_ids=sources,
                num_beams=750,
                num_return_sequences=3,
                max_new_tokens=max_new_tokens,
                length_penalty=alpha,
                early_stopping=early_stopping,
                return_dict_in_generate=True,
                output_scores=True,
                custom_generate=gnmt_beam_search,
            )
        for returned, expected in zip(returned_hypotheses(output, 3), oracle, strict=True):
            assert [y for y, _ in returned] == [y for y, _ in expected]
            assert [score for _, score in returned] == pytest.approx([score for _, score in expected], abs=1e-4)


def test_several_end_of_sequence_ids_each_end_a_hypothesis():
    """With `eos_token_id=[3, 5]` either token ends a hypothesis. Brute force as above (six tokens, at most 4 new
    ones: the continuing tokens 0, 1, 2, 4, then 3 or 5; 426 hypotheses, all held by 750 beams): the three best
    returned are the oracle's, |Y| counted to the first of either id, and some of them end with each id."""
    ends, alpha = (EOS, 5), 0.6
    model, sources = six_token_model(seed=2, std=0.6, eos_bias=1.2), six_token_sources(seed=2)
    with torch.no_grad():
        model.final_logits_bias[0, 5] = 1.2
    continuing = [token for token in range(VOCAB) if token not in ends]
    hypotheses = [
        (*prefix, last)
        for length in range(1, 5)
        for prefix in itertools.product(continuing, repeat=length - 1)
        for last in (range(VOCAB) if length == 4 else ends)
    ]
    assert len(hypotheses) == 426
    oracle = []
    for source in sources:
        log_probs = next_token_log_probs(model, source)
        scored = [(y, log_probability(log_probs, y) / gnmt_length_penalty(len(y), alpha)) for y in hypotheses]
        oracle.append(sorted(scored, key=lambda pair: pair[1], reverse=True)[:3])
    with torch.no_grad():
        output = model.generate(
            input_ids=sources,
            num_beams=750,
            num_return_sequences=3,
            max_new_tokens=4,
            length_penalty=alpha,
            eos_token_id=list(ends),
            return_dict_in_generate=True,
            output_scores=True,
            custom_generate=gnmt_beam_search,
        )
    returned = []
    for row in output.sequences[:, 1:].tolist():
        end = next((t for t, token in enumerate(row) if token in ends), len(row) - 1)
        returned.append(tuple(row[: end + 1]))
    expected = [y for best in oracle for y, _ in best]
    assert returned == expected
    assert output.sequences_scores.tolist() == pytest.approx([score for best in oracle for _, score in best], abs=1e-4)
    assert {y[-1] for y in expected if len(y) < 4} == set(ends)
    # A pruning beam where more extensions end than 2 x num_beams candidates hold: transformers' search keeps
    # (1 + the number of ids) x num_beams candidates a step, and so must this one (alpha 0: the same search).
    two_ends = ending_model()
    with torch.no_grad():
        two_ends.final_logits_bias[0, 5] = 1.0
    for seed in range(3):
        options = {"num_beams": 2, "length_penalty": 0.0, "eos_token_id": list(ends)}
        ours = beam_search(two_ends, seed, custom_generate=gnmt_beam_search, **options)
        theirs = beam_search(two_ends, seed, **options)
        assert torch.equal(ours.sequences, theirs.sequences)
        assert torch.equal(ours.sequences_scores, theirs.sequences_scores)


def reference_beam_search(log_probs, num_beams: int, max_new_tokens: int, alpha: float, early_stopping) -> list:
    """The rules of transformers' beam search with the GNMT penalty, on one source, in plain Python: each step takes
    the 2 * num_beams best extensions by log P; those among the best num_beams that end (</s> or the length limit)
    join the finished set by their penalised score (the num_beams best are kept); the num_beams best that did not
    end keep running. It stops when every candidate ended, when the finished set is full (`early_stopping=True`), or
    when the best running hypothesis cannot beat the worst finished one: judged at the current length
    (`early_stopping=False`) or at the length limit (`"never"`, alpha > 0: log P only falls, lp only grows).
    Returns the finished set, best first, as (hypothesis, score) pairs."""
    running, finished = [((), 0.0)], []
    for length in range(1, max_new_tokens + 1):
        extensions = [(y + (token,), score + lp) for y, score in running for token, lp in enumerate(log_probs(y))]
        extensions = sorted(extensions, key=lambda pair: pair[1], reverse=True)[: 2 * num_beams]
        ends = [y[-1] == EOS or length == max_new_tokens for y, _ in extensions]
        penalty = gnmt_length_penalty(length, alpha)
        finished += [
            (y, score / penalty)
            for (y, score), end in zip(extensions[:num_beams], ends[:num_beams], strict=True)
            if end
        ]
        finished = sorted(finished, key=lambda pair: pair[1], reverse=True)[:num_beams]
        running = [pair for pair, end in zip(extensions, ends, strict=True) if not end][:num_beams]
        if all(ends) or (early_stopping is True and len(finished) == num_beams):
            break
        bound_length = max_new_tokens if early_stopping == "never" and alpha > 0 else length
        if len(finished) == num_beams and running[0][1] / gnmt_length_penalty(bound_length, alpha) <= finished[-1][1]:
            break
    return finished


@pytest.mark.parametrize(
    ("seed", "std", "eos_bias", "differing"),
    [
        (1, 0.6, 1.2, (True, False)),  # the finished set fills early: True stops there, False goes on
        (3, 1.0, 1.0, (False, "never")),  # False gives up at the current length; "never" goes on, finishes others
        (0, 0.6, 2.0, None),  # hypotheses often end outside the best num_beams, where they may not join the set
    ],
    ids=["true-stops-first", "never-goes-on", "ends-outside-the-beam"],
)
def test_a_pruning_beam_follows_the_rules_of_beam_search(seed, std, eos_bias, differing):
    """Beam search with 3 beams over six tokens prunes, so it is not exact: what holds is its rules. For each
    `early_stopping`, the returned hypotheses and scores equal those of `reference_beam_search` run on the model's
    exact log-probabilities (10 new tokens at most, alpha = 0.6); `differing` names two settings whose results
    must differ on this model (so that the test tells them apart)."""
    model, sources = six_token_model(seed, std, eos_bias), six_token_sources(seed)
    log_probs = [next_token_log_probs(model, source) for source in sources]
    results = {}
    for early_stopping in (True, False, "never"):
        with torch.no_grad():
            output = model.generate(
                input_ids=sources,
                num_beams=3,
                num_return_sequences=3,
                max_new_tokens=10,
                length_penalty=0.6,
                early_stopping=early_stopping,
                return_dict_in_generate=True,
                output_scores=True,
                custom_generate=gnmt_beam_search,
            )
        results[early_stopping] = [
            reference_beam_search(source_log_probs, 3, 10, 0.6, early_stopping) for source_log_probs in log_probs
        ]
        for returned, expected in zip(returned_hypotheses(output, 3), results[early_stopping], strict=True):
            assert [y for y, _ in returned] == [y for y, _ in expected]
            assert [score for _, score in returned] == pytest.approx([score for _, score in expected], abs=1e-4)
    if differing is not None:
        assert results[differing[0]] != results[differing[1]]


def test_the_folder_route_runs_the_same_search(tmp_path):
    """`custom_generate=FOLDER` (remote code) runs the file that `save_custom_generate` copies there."""
    assert save_custom_generate(tmp_path) == tmp_path / "custom_generate" / "generate.py"
    model = ending_model()
    direct = beam_search(model, custom_generate=gnmt_beam_search, length_penalty=0.6)
    via_folder = beam_search(model, custom_generate=str(tmp_path), trust_remote_code=True, length_penalty=0.6)
    assert torch.equal(direct.sequences, via_folder.sequences)
    assert torch.equal(direct.sequences_scores, via_folder.sequences_scores)


def test_the_file_imports_only_torch_transformers_and_the_standard_library():
    """What remote code may import where this package is not installed."""
    module = importlib.import_module("modeling_vanilla.gnmt_beam_search")  # the package exports a function of that name
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
    assert imported - set(sys.stdlib_module_names) == {"torch", "transformers"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"do_sample": True}, "do_sample=True is not supported"),
        ({"output_attentions": True}, "output_attentions=True is not supported"),
    ],
)
def test_settings_it_cannot_honour_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        beam_search(tiny_model(), custom_generate=gnmt_beam_search, **options)
