"""Token-budget batches, as the paper trains (section 5.1: "each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens") and as fairseq's `--max-tokens` builds them.

Sentences of similar length go together, so padding wastes little; a batch holds as many sentences as fit in the
budget, counting padding: `len(batch) * longest_in_batch <= max_tokens`. Lengths, the order and the batch bounds are
numpy arrays: millions of sentences are batched in a second or two, in memory proportional to their number.
"""

from collections.abc import Iterator, Sequence

import numpy as np


class TokenBudgetBatchSampler:
    """Yields lists of example indices; every example appears exactly once per epoch, or, with `groups`, `per_group`
    examples of each group (all of a smaller group's), drawn afresh each epoch.

    `lengths[i]` is the size of example i in tokens (the longer of its source and target). Examples are sorted by
    length (ties broken by a seeded permutation), cut greedily into batches within `max_tokens`, and the batch order
    is shuffled each epoch (`set_epoch`), so that consecutive steps see different lengths. The batches and their
    order depend on `seed` and the epoch alone. An example longer than `max_tokens` is refused, as fairseq's
    `batch_by_size` refuses it: no batch may exceed the budget.

    With `groups` (e.g. the verse of each row of a multilingual split: one row a direction), the batches are cut once
    from the groups, each counted as `per_group` examples of its longest example's length, so that the number of
    batches, which the Trainer reads once to count epochs and to resume, is the same every epoch; each epoch draws
    which examples of each group go into its batch, seeded by `seed` and the epoch, so that every process of a
    data-parallel run, and a resumed run, draws the same.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        groups: Sequence[int] | np.ndarray | None = None,
        per_group: int | None = None,
    ):
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
        self.groups = None if groups is None else Groups(np.asarray(groups), lengths, per_group)
        unit_lengths, sizes = (lengths, None) if self.groups is None else (self.groups.longest, self.groups.sizes)
        if sizes is not None and np.any(too_big := sizes * unit_lengths > max_tokens):
            group = int(np.flatnonzero(too_big)[0])
            raise ValueError(
                f"group {self.groups.names[group]}'s {sizes[group]} examples of up to {unit_lengths[group]} tokens "
                f"exceed max_tokens={max_tokens}; raise max_tokens or draw fewer per group"
            )
        tie_breaker = np.random.default_rng(seed).permutation(len(unit_lengths))
        self.order = np.lexsort((tie_breaker, unit_lengths))  # by length, then by the permutation
        self.bounds = self._cut(unit_lengths[self.order], None if sizes is None else sizes[self.order])

    def _cut(self, sorted_lengths: np.ndarray, sizes: np.ndarray | None = None) -> np.ndarray:
        """Start of every batch, and the end: from each start, the most units (examples, or groups of `sizes`
        examples) whose count of examples times the longest (the last, since lengths ascend) fits the budget."""
        counts = np.arange(1, len(sorted_lengths) + 1) if sizes is None else np.cumsum(sizes)
        bounds, start = [0], 0
        while start < len(sorted_lengths):
            largest = self.max_tokens // max(int(sorted_lengths[start]), 1)  # no batch from here can hold more
            before = counts[start - 1] if start else 0
            window = slice(start, start + largest)
            start += int(np.count_nonzero((counts[window] - before) * sorted_lengths[window] <= self.max_tokens))
            bounds.append(start)
        return np.asarray(bounds)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = np.arange(len(self))
        if self.shuffle:
            np.random.default_rng([self.seed, self.epoch]).shuffle(batches)
        if self.groups is None:
            examples, bounds = self.order, self.bounds
        else:
            examples, bounds = self.groups.draw(self.order, self.bounds, np.random.default_rng([self.seed, self.epoch]))
        for batch in batches:
            yield examples[bounds[batch] : bounds[batch + 1]].tolist()

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def examples(self) -> int:
        """The examples one epoch yields."""
        return len(self.order) if self.groups is None else int(self.groups.sizes.sum())


class Groups:
    """The examples of each group (`names[g]`), the number drawn of each (`sizes`: `per_group`, or all of a
    smaller group's) and each group's longest example (`longest`)."""

    def __init__(self, groups: np.ndarray, lengths: np.ndarray, per_group: int | None):
        if len(groups) != len(lengths):
            raise ValueError(f"{len(groups)} groups given for {len(lengths)} examples")
        self.names, self.index, counts = np.unique(groups, return_inverse=True, return_counts=True)
        self.starts = np.cumsum(counts) - counts  # where each group's examples begin, sorted by group
        self.sizes = counts if per_group is None else np.minimum(counts, per_group)
        self.longest = np.zeros(len(counts), dtype=np.int64)
        np.maximum.at(self.longest, self.index, lengths)

    def draw(self, order: np.ndarray, bounds: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The examples drawn by `rng`, `sizes[g]` of each group g, laid out group after group in `order`, and the
        batch `bounds` over groups turned into bounds over those examples."""
        by_group = np.lexsort((rng.random(len(self.index)), self.index))  # each group's examples in a random order
        sizes = self.sizes[order]
        firsts = np.repeat(self.starts[order] - (np.cumsum(sizes) - sizes), sizes)
        drawn = by_group[firsts + np.arange(int(sizes.sum()))]
        return drawn, np.concatenate([[0], np.cumsum(sizes)])[bounds]
