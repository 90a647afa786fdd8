"""Token-budget batches, as the paper trains (section 5.1: "each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens") and as fairseq's `--max-tokens` builds them.

Sentences of similar length go together, so padding wastes little; a batch holds as many sentences as fit in the
budget, counting padding: `len(batch) * longest_in_batch <= max_tokens`.
"""

import random
from collections.abc import Iterator, Sequence


class TokenBudgetBatchSampler:
    """Yields lists of example indices; every example appears exactly once per epoch.

    `lengths[i]` is the size of example i in tokens (the longer of its source and target). Examples are sorted by
    length (ties broken by a seeded shuffle), cut greedily into batches within `max_tokens`, and the batch order
    is shuffled each epoch (`set_epoch`), so that consecutive steps see different lengths.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, seed: int = 0, shuffle: bool = True):
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        too_long = [i for i, n in enumerate(lengths) if n > max_tokens]
        if too_long:
            raise ValueError(
                f"{len(too_long)} examples are longer than max_tokens={max_tokens} (e.g. example {too_long[0]} "
                f"with {lengths[too_long[0]]} tokens); raise max_tokens or filter them out first"
            )
        self.lengths = list(lengths)
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.batches = self._make_batches()

    def _make_batches(self) -> list[list[int]]:
        tie_breaker = list(range(len(self.lengths)))
        random.Random(self.seed).shuffle(tie_breaker)
        order = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], tie_breaker[i]))
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for index in order:
            length = self.lengths[index]
            if batch and (len(batch) + 1) * max(longest, length) > self.max_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(index)
            longest = max(longest, length)
        if batch:
            batches.append(batch)
        return batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        order = list(range(len(self.batches)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        for position in order:
            yield self.batches[position]

    def __len__(self) -> int:
        return len(self.batches)
