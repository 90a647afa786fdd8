"""Token-budget batches, as the paper trains (section 5.1: "each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens") and as fairseq's `--max-tokens` builds them.

Sentences of similar length go together, so padding wastes little; a batch holds as many sentences as fit in the
budget, counting padding: `len(batch) * longest_in_batch <= max_tokens`. Lengths, the order and the batch bounds are
numpy arrays: millions of sentences are batched in a second or two, in memory proportional to their number.
"""

from collections.abc import Iterator, Sequence

import numpy as np


class TokenBudgetBatchSampler:
    """Yields lists of example indices; every example appears exactly once per epoch.

    `lengths[i]` is the size of example i in tokens (the longer of its source and target). Examples are sorted by
    length (ties broken by a seeded permutation), cut greedily into batches within `max_tokens`, and the batch order
    is shuffled each epoch (`set_epoch`), so that consecutive steps see different lengths. The batches and their
    order depend on `seed` and the epoch alone. An example longer than `max_tokens` is refused, as fairseq's
    `batch_by_size` refuses it: no batch may exceed the budget.
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, max_tokens: int, seed: int = 0, shuffle: bool = True):
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        lengths = np.asarray(lengths, dtype=np.int64)
        too_long = np.flatnonzero(lengths > max_tokens)
        if too_long.size:
            raise ValueError(
                f"{too_long.size} examples are longer than max_tokens={max_tokens} (e.g. example {too_long[0]} "
                f"with {lengths[too_long[0]]} tokens); raise max_tokens or filter them out first"
            )
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        tie_breaker = np.random.default_rng(seed).permutation(len(lengths))
        self.order = np.lexsort((tie_breaker, lengths))  # by length, then by the permutation
        self.bounds = self._cut(lengths[self.order])

    def _cut(self, sorted_lengths: np.ndarray) -> np.ndarray:
        """Start of every batch, and the end: from each start, the most sentences whose count times the longest
        (the last, since lengths ascend) fits the budget."""
        bounds, start = [0], 0
        while start < len(sorted_lengths):
            largest = self.max_tokens // max(int(sorted_lengths[start]), 1)  # no batch from here can hold more
            window = sorted_lengths[start : start + largest]
            start += int(np.count_nonzero(np.arange(1, len(window) + 1) * window <= self.max_tokens))
            bounds.append(start)
        return np.asarray(bounds)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = np.arange(len(self))
        if self.shuffle:
            np.random.default_rng([self.seed, self.epoch]).shuffle(batches)
        for batch in batches:
            yield self.order[self.bounds[batch] : self.bounds[batch + 1]].tolist()

    def __len__(self) -> int:
        return len(self.bounds) - 1
