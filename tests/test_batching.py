"""Token-budget batches (`batching`): the budget refused where no batch could keep it, the greedy cut of
fairseq's `batch_by_size` (a batch ends only where the next sentence would break the budget), and batches that
depend on the seed and the epoch alone."""

import random

import numpy as np
import pytest

from vanilla_training.batching import TokenBudgetBatchSampler


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_a_budget_of_no_tokens_is_refused(max_tokens):
    with pytest.raises(ValueError, match=f"max_tokens must be positive, got {max_tokens}"):
        TokenBudgetBatchSampler([3, 4], max_tokens=max_tokens)


def test_a_sentence_longer_than_the_budget_is_refused_by_index_and_size():
    """As fairseq refuses it ("sentence at index i of size n exceeds max_tokens limit"): a batch of its own would
    break the budget that sets the memory of a training step. A budget equal to the longest sentence is kept."""
    with pytest.raises(ValueError, match=r"2 examples are longer than max_tokens=10 \(e.g. example 1 with 11 tokens\)"):
        TokenBudgetBatchSampler([5, 11, 10, 12], max_tokens=10)
    batches = list(TokenBudgetBatchSampler([5, 11, 10, 12], max_tokens=12))
    assert sorted(map(sorted, batches)) == [[0], [1], [2], [3]]  # no two of them fit 12 tokens together


def test_each_batch_is_cut_where_the_next_sentence_would_break_the_budget():
    rng = random.Random(0)
    lengths = np.array([rng.randint(1, 60) for _ in range(2000)])
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=300, shuffle=False)
    batches = list(sampler)
    order = [i for batch in batches for i in batch]
    assert sorted(order) == list(range(2000))
    assert np.all(np.diff(lengths[order]) >= 0)  # unshuffled: in order of length
    assert all(len(batch) * lengths[batch].max() <= 300 for batch in batches)
    for batch, following in zip(batches, batches[1:], strict=False):
        assert (len(batch) + 1) * max(lengths[batch].max(), lengths[following[0]]) > 300  # full: greedy


def test_the_same_seed_gives_the_same_batches_and_another_seed_others():
    rng = random.Random(1)
    lengths = [rng.randint(1, 50) for _ in range(1000)]

    def epochs(seed: int) -> list[list[list[int]]]:
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=200, seed=seed)
        result = []
        for epoch in (0, 1, 2):
            sampler.set_epoch(epoch)
            result.append(list(sampler))
        return result

    same = epochs(3)
    assert epochs(3) == same  # a new sampler (a resumed run, another process) sees the same batches
    assert same[0] != same[1] != same[2]  # in another order every epoch
    other = epochs(4)
    assert other != same
    assert [sorted(map(sorted, epoch)) for epoch in other] != [sorted(map(sorted, epoch)) for epoch in same]  # ties
