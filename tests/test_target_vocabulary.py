"""The training loss over the target vocabulary (`TargetVocabularySmoother`): transformers' label smoothing
restricted to the tokens the targets use, checked against transformers' own `LabelSmoother`, and the property
it exists for: a token no target uses gets no gradient through the tied output projection."""

import torch
from transformers.trainer_pt_utils import LabelSmoother

from vanilla_training.trainer import TargetVocabularySmoother


def tied_logits(seed: int = 0, vocab: int = 12, width: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(embeddings with grad, logits = decoder states x embeddings^T, labels with padding) of a batch of 2 x 5."""
    generator = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(vocab, width, generator=generator, requires_grad=True)
    states = torch.randn(2, 5, width, generator=generator)
    labels = torch.tensor([[1, 3, 3, 5, 2], [5, 1, 2, -100, -100]])
    return embeddings, states @ embeddings.T, labels


def test_over_the_whole_vocabulary_it_is_transformers_label_smoother():
    _, logits, labels = tied_logits()
    everything = torch.ones(logits.shape[-1], dtype=torch.bool)
    ours = TargetVocabularySmoother(0.1, everything)({"logits": logits}, labels)
    assert torch.allclose(ours, LabelSmoother(0.1)({"logits": logits}, labels))


def test_over_the_target_vocabulary_it_is_transformers_label_smoother_on_those_columns():
    _, logits, labels = tied_logits()
    allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
    allowed[[1, 2, 3, 5, 7]] = True
    columns = torch.nonzero(allowed).flatten().tolist()
    remapped = labels.clone()
    remapped[labels >= 0] = torch.tensor([columns.index(token) for token in labels[labels >= 0].tolist()])
    expected = LabelSmoother(0.1)({"logits": logits[..., allowed]}, remapped)
    for bias in (torch.zeros(logits.shape[-1]), torch.zeros(logits.shape[-1]).masked_fill(~allowed, float("-inf"))):
        ours = TargetVocabularySmoother(0.1, allowed)({"logits": logits + bias}, labels)
        assert torch.allclose(ours, expected)


def test_a_token_no_target_uses_gets_no_gradient_through_the_output_projection():
    embeddings, logits, labels = tied_logits()
    allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
    allowed[[1, 2, 3, 5]] = True
    TargetVocabularySmoother(0.1, allowed)({"logits": logits}, labels).backward()
    assert torch.all(embeddings.grad[~allowed] == 0) and torch.all(embeddings.grad[allowed].abs().sum(1) > 0)
    # transformers' smoother over the whole vocabulary moves them all: the drift that made them one vector
    embeddings, logits, labels = tied_logits()
    LabelSmoother(0.1)({"logits": logits}, labels).backward()
    assert torch.all(embeddings.grad[~allowed].abs().sum(1) > 0)
