"""The paper's length penalty (section 6.1, after GNMT) through `generate(custom_generate=gnmt_beam_search)`."""

import ast
import importlib
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
