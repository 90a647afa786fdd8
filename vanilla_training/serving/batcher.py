"""Batching across requests: the sentences of concurrent requests are gathered, cut into batches of similar lengths
within a token budget, translated together and handed back to their own requests.

A request that finds the model idle starts at once; requests gather while the model is busy, and a lane freed by a
batch that answered several requests waits a few milliseconds for their clients' next ones. With a
continuous decoder (the torch backend's, `continuous.py`), gathering happens only when the model is idle: while it
decodes, waiting sentences join its running batch at the next step, within the token budget, and each leaves it
with its answer as soon as its beam search is done. The queue is
bounded (in sentences): a request that would overfill it is refused at once (`QueueFull`) rather than
left to wait. Answers are kept in an LRU cache, so that a repeated sentence costs no model call. The model runs in
a worker thread, so that the event loop keeps answering while a batch is translated; a backend that translates
several batches side by side (CTranslate2 on a CPU: a worker per core) has lanes, each a thread, and a batch
starts as soon as a lane is free, holding at most the backend's number of sentences; where workers would idle, it is
cut into a part for each, so that a lone request's sentences are translated on every core at once. A request whose
client has gone is dropped from the queue before its batch is formed.
"""

import asyncio
import collections
import dataclasses
import itertools
import time
from collections.abc import Callable
from concurrent.futures import Executor

from .backends import Backend
from .continuous import ContinuousDecoder
from .metrics import Metrics
from .settings import ServeSettings

GATHER_LIMIT = 10  # the longest gathering, in batch waits
TranslateBatch = Callable[[list[str], int], list[list[str]]]  # sentences, hypotheses -> n best of each


class QueueFull(Exception):
    """The queue has no room for the request's sentences."""


@dataclasses.dataclass
class Job:
    """One sentence of one request, waiting for its `hypotheses` best translations."""

    sentence: str
    hypotheses: int
    tokens: int
    future: asyncio.Future
    queued_at: float
    request: int  # which `translate` call it came from


def token_budget_batches(jobs: list[Job], max_tokens: int, max_sentences: int | None = None) -> list[list[Job]]:
    """`jobs` sorted by length and cut greedily into batches whose count times their longest stays within
    `max_tokens` (padding included), of at most `max_sentences`; a job longer than the budget goes alone."""
    batches: list[list[Job]] = []
    for job in sorted(jobs, key=lambda job: job.tokens):
        fits = batches and (len(batches[-1]) + 1) * job.tokens <= max_tokens
        if fits and (max_sentences is None or len(batches[-1]) < max_sentences):
            batches[-1].append(job)
        else:
            batches.append([job])
    return batches


class LRUCache:
    """The `size` most recently used answers (none if `size` is 0)."""

    def __init__(self, size: int):
        self.size = size
        self.entries: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        if key not in self.entries:
            return None
        self.entries.move_to_end(key)
        return self.entries[key]

    def put(self, key, value) -> None:
        if self.size <= 0:
            return
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


class Batcher:
    """Gathers the sentences given to `translate` by concurrent requests and hands each its answer; at most
    `settings.max_queue` sentences wait or are being translated at any time. How the gathered sentences reach the
    model is a subclass's `_work`: `BatchByBatch` or `ContinuousBatcher` (`batcher_for` picks one)."""

    def __init__(
        self,
        translate_batch: TranslateBatch,
        count_tokens: Callable[[list[str]], list[int]],
        executor: Executor,
        settings: ServeSettings,
        name: str = "",
        metrics: Metrics | None = None,
    ):
        self.translate_batch = translate_batch
        self.count_tokens = count_tokens
        self.executor = executor
        self.settings = settings
        self.name = name
        self.cache = LRUCache(settings.cache_size)
        self.metrics = (metrics or Metrics()).for_pair(name)
        self.pending: list[Job] = []
        self.outstanding = 0  # sentences queued or in a batch being translated
        self.arrived = asyncio.Event()
        self.worker: asyncio.Task | None = None
        self.failure = ""  # why the worker stopped, if it did
        self.answered = (0.0, 0)  # when the last batch ended, and how many requests it answered
        self.requests = itertools.count()

    def start(self) -> None:
        """Starts the worker (in the running event loop)."""
        self.worker = asyncio.get_running_loop().create_task(self._work(), name=f"batcher {self.name}")
        self.worker.add_done_callback(self._stopped)

    def _stopped(self, worker: asyncio.Task) -> None:
        """If the worker failed: records why, and fails the sentences waiting for it."""
        if worker.cancelled() or worker.exception() is None:
            return
        error = worker.exception()
        self.failure = f"the batcher stopped: {type(error).__name__}: {error}"
        for job in self._waiting():
            if not job.future.done():
                job.future.set_exception(RuntimeError(self.failure))
        self.pending.clear()
        self._count(-self.outstanding)

    def _waiting(self) -> list[Job]:
        """Every sentence waiting for an answer."""
        return list(self.pending)

    async def close(self) -> None:
        """Stops the worker once nothing is queued (the server has stopped taking requests)."""
        while self.outstanding:
            await asyncio.sleep(0.01)
        if self.worker is not None:
            self.worker.cancel()
            await asyncio.gather(self.worker, return_exceptions=True)

    async def _work(self) -> None:
        """Forever: takes the waiting sentences to the model and hands them their answers."""
        raise NotImplementedError

    async def translate(self, sentences: list[str], hypotheses: int = 1) -> list[list[str]]:
        """The `hypotheses` best translations of each sentence (a blank one translates to "" alone), from the
        cache or from the model. QueueFull, before anything is queued, if the queue has no room for them."""
        answers: list[list[str] | None] = []
        misses: list[int] = []
        for index, sentence in enumerate(sentences):
            answer = [""] if not sentence.strip() else self.cache.get((sentence, hypotheses))
            answers.append(answer)
            if answer is None:
                misses.append(index)
        self.metrics.from_cache.inc(len(sentences) - len(misses))
        if not misses:
            return answers
        if self.failure:
            raise RuntimeError(self.failure)
        if self.outstanding + len(misses) > self.settings.max_queue:
            self.metrics.rejected.inc(len(misses))
            raise QueueFull(
                f"the translation queue is full ({self.outstanding:,} of {self.settings.max_queue:,} sentences "
                "waiting); try again shortly"
            )
        loop = asyncio.get_running_loop()
        now, request = time.monotonic(), next(self.requests)
        tokens = self.count_tokens([sentences[i] for i in misses])
        jobs = [
            Job(sentences[i], hypotheses, count, loop.create_future(), now, request)
            for i, count in zip(misses, tokens, strict=True)
        ]
        self.pending += jobs
        self._count(len(jobs))
        self.arrived.set()
        results = await asyncio.gather(*(job.future for job in jobs))
        for index, result in zip(misses, results, strict=True):
            answers[index] = result
        return answers

    def _count(self, change: int) -> None:
        self.outstanding += change
        self.metrics.queued.set(self.outstanding)

    def _full(self) -> bool:
        """Whether the waiting sentences fill a batch: `max_tokens` source tokens."""
        return sum(job.tokens for job in self.pending) >= self.settings.max_tokens

    async def _gather(self) -> None:
        """Waits for a sentence: with nothing else to wait for, it starts at once (see `BatchByBatch._gather`)."""
        while not self.pending:
            self.arrived.clear()
            await self.arrived.wait()
        self.arrived.clear()

    async def _run(self, batch: list[Job], hypotheses: int) -> None:
        """Translates one batch and hands each answer to its request; if the batch fails, each sentence is tried
        alone, so that only the sentence at fault fails."""
        live = [job for job in batch if not job.future.done()]  # a cancelled request's sentences are dropped
        self._count(len(live) - len(batch))
        batch = live
        if not batch:
            return
        started = time.monotonic()
        for job in batch:
            self.metrics.queue_seconds.observe(started - job.queued_at)
        sentences = [job.sentence for job in batch]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self.executor, self.translate_batch, sentences, hypotheses)
        except Exception as error:
            if len(batch) > 1:
                for job in batch:
                    await self._run([job], hypotheses)
                return
            results = error
        self.metrics.batch_seconds.observe(time.monotonic() - started)
        self.metrics.batch_sentences.observe(len(batch))
        if isinstance(results, Exception):
            if not batch[0].future.done():
                batch[0].future.set_exception(results)
        else:
            self.metrics.from_model.inc(len(batch))
            self.metrics.tokens.inc(sum(job.tokens for job in batch))
            for job, result in zip(batch, results, strict=True):
                self.cache.put((job.sentence, hypotheses), result)
                if not job.future.done():
                    job.future.set_result(result)
        self.answered = (time.monotonic(), len({job.request for job in batch}))
        self._count(-len(batch))


class BatchByBatch(Batcher):
    """Batches translated whole by `translate_batch`, on at most `lanes` batches at a time (each a thread of
    `executor`), which the backend computes on `workers` workers (at most `lanes`; CTranslate2's, one a core): a
    batch starts once a lane is free and a sentence waits, after gathering others (`_gather`), spread over the
    workers that would otherwise idle (`_spread`)."""

    def __init__(self, *args, lanes: int = 1, workers: int = 1, batch_sentences: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if not 1 <= workers <= lanes:
            raise ValueError(f"{workers} workers for {lanes} lanes: a worker needs a lane")
        self.free_lanes = asyncio.Semaphore(lanes)
        self.workers = workers
        self.batch_sentences = batch_sentences
        self.running: set[asyncio.Task] = set()  # the batches being translated, one a lane

    async def _work(self) -> None:
        """Forever: once a lane is free and a sentence waits, gather others (`_gather`), then translate the batch
        that holds the oldest waiting sentence on that lane, and look for the next free lane at once. The window
        opens when a lane is free, not when the first sentence came: the clients answered by the last batch are
        back in time to join the next one, rather than waiting a whole batch behind it."""
        while True:
            await self.free_lanes.acquire()
            await self._gather()
            for index, batch in enumerate(self._spread(self._oldest_batch())):
                if index:
                    await self.free_lanes.acquire()  # free: there are at least as many lanes as workers
                task = asyncio.get_running_loop().create_task(self._run(batch, batch[0].hypotheses))
                self.running.add(task)
                task.add_done_callback(self._lane_done)

    async def _gather(self) -> None:
        """Waits for a sentence; then, if the last batch answered several requests and ended less than `GATHER_LIMIT`
        batch waits ago (its clients may be on their way back), for others: until as many more requests wait as it
        answered, until no sentence has come for `batch_wait_ms`, at most `GATHER_LIMIT` times that, or until a
        batch's worth waits (`_full`). A lone client, or the first after a quiet spell, starts at once; under load,
        requests gather while the batches before them are translated."""
        expected = len({job.request for job in self.pending}) + self.answered[1]
        await super()._gather()
        wait = self.settings.batch_wait_ms / 1000
        opened = last = time.monotonic()
        if self.answered[1] < 2 or opened - self.answered[0] > GATHER_LIMIT * wait:
            return
        while not self._full() and len({job.request for job in self.pending}) < expected:
            remaining = min(last + wait, opened + GATHER_LIMIT * wait) - time.monotonic()
            if remaining <= 0:
                break
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
            last = time.monotonic()
        self.arrived.clear()

    def _lane_done(self, task: asyncio.Task) -> None:
        self.running.discard(task)
        self.free_lanes.release()

    def _full(self) -> bool:
        """Whether the waiting sentences fill a batch: `max_tokens` source tokens or `batch_sentences` sentences."""
        if self.batch_sentences is not None and len(self.pending) >= self.batch_sentences:
            return True
        return super()._full()

    def _oldest_batch(self) -> list[Job]:
        """Takes from the waiting sentences the batch of similar lengths (see `token_budget_batches`) that holds
        the one that has waited longest, among those asking as many hypotheses as it."""
        oldest = self.pending[0]
        group = [job for job in self.pending if job.hypotheses == oldest.hypotheses]
        batches = token_budget_batches(group, self.settings.max_tokens, self.batch_sentences)
        batch = next(batch for batch in batches if any(job is oldest for job in batch))
        taken = {id(job) for job in batch}
        self.pending = [job for job in self.pending if id(job) not in taken]
        return batch

    def _spread(self, batch: list[Job]) -> list[list[Job]]:
        """`batch` cut into a part for each idle worker (fewer batches in flight than workers), each of at least one
        sentence and of consecutive lengths: with a worker a core, a lone request's sentences are translated on
        every core at once rather than one after the other on one core while the others idle. A busy server has no
        idle worker, and its batches stay whole."""
        parts = max(1, min(self.workers - len(self.running), len(batch)))
        size = -(-len(batch) // parts)
        return [batch[start : start + size] for start in range(0, len(batch), size)]


class ContinuousBatcher(Batcher):
    """Sentences decoded by a continuous decoder (the torch backend's, `continuous.py`): gathering happens only
    when it is idle; while it decodes, waiting sentences join its running batch at the next step, within
    `max_tokens`, and each leaves it with its answer as soon as its beam search is done."""

    def __init__(self, *args, decoder: ContinuousDecoder, **kwargs):
        super().__init__(*args, **kwargs)
        self.decoder = decoder
        self.decoding: dict[int, Job] = {}  # the sentences in the decoder's batch, by id

    def _waiting(self) -> list[Job]:
        return [*self.pending, *self.decoding.values()]

    async def _work(self) -> None:
        """Forever: when the decoder is idle, gather (`_gather`); then, step after step, let waiting sentences join
        its batch while their source tokens fit in `max_tokens` (the first always fits), make one decoding step,
        and answer the sentences it finished. Sentences whose client has gone leave the batch; those asking more
        hypotheses than the beam holds go batch by batch (`_run`)."""
        while True:
            if not self.decoding:
                await self._gather()
            gone = {key for key, job in self.decoding.items() if job.future.done()}
            self.decoder.drop(gone)
            for key in gone:
                del self.decoding[key]
            self._count(-len(gone))
            wide = [job for job in self.pending if job.hypotheses > self.decoder.beams]
            if wide:
                self.pending = [job for job in self.pending if job.hypotheses <= self.decoder.beams]
                await self._run_batches(wide)
            joining = self._admit()
            if joining:
                await self._join(joining)
            if self.decoding:
                await self._step()

    async def _run_batches(self, jobs: list[Job]) -> None:
        """Translates `jobs` in token-budgeted batches of similar lengths, those asking the same number of
        hypotheses together."""
        by_hypotheses = collections.defaultdict(list)
        for job in jobs:
            by_hypotheses[job.hypotheses].append(job)
        for hypotheses, group in by_hypotheses.items():
            for batch in token_budget_batches(group, self.settings.max_tokens):
                await self._run(batch, hypotheses)

    def _admit(self) -> list[Job]:
        """The waiting sentences that join the decoder's batch now, the requests taking turns (see `fair_order`),
        while their source tokens fit in `max_tokens` and in their request's share of it (`max_tokens` over the
        requests in the batch or waiting; the first sentence always fits). A request with nothing in the batch does
        not wait for another's sentences to finish: those of requests over their share leave the batch for the
        queue, the latest to join first, until its first sentence fits (`_make_room`); where what is over their
        share is requests' last sentences, which always stay, its first sentence joins beyond `max_tokens` if it is
        within its share (`_fair_extra`). Sentences of requests already gone are dropped."""
        held = collections.Counter()  # source tokens in the batch, by request
        for job in self.decoding.values():
            held[job.request] += job.tokens
        live = [job for job in self.pending if not job.future.done()]
        self._count(len(live) - len(self.pending))
        share = self.settings.max_tokens / max(1, len(set(held) | {job.request for job in live}))
        joining, waiting = [], []
        for job in fair_order(live, held):
            budget = self.settings.max_tokens - sum(held.values())
            if not held[job.request] and job.tokens > budget:
                waiting += self._make_room(job.tokens - budget, held, share)
                budget = self.settings.max_tokens - sum(held.values())
            alone = not (self.decoding or joining)
            fits = job.tokens <= budget and held[job.request] + job.tokens <= max(share, job.tokens)
            if alone or fits or self._fair_extra(job, held, share):
                joining.append(job)
                held[job.request] += job.tokens
            else:
                waiting.append(job)
        self.pending = sorted(waiting, key=lambda job: job.queued_at)
        return joining

    def _fair_extra(self, job: Job, held: collections.Counter, share: float) -> bool:
        """Whether `job`, the first sentence of a request with nothing in the batch, joins beyond `max_tokens`:
        other requests hold more than their share (in their last sentences, which `_make_room` leaves), it is within
        its own, and the batch stays within twice `max_tokens`. So two requests of one long sentence each cannot
        hold the batch while a newcomer waits for their whole decode, and the batch stays bounded."""
        unfair = any(tokens > share for tokens in held.values())
        within = not held[job.request] and job.tokens <= share
        return unfair and within and sum(held.values()) + job.tokens <= 2 * self.settings.max_tokens

    def _make_room(self, needed: int, held: collections.Counter, share: float) -> list[Job]:
        """Takes sentences out of the decoder's batch, the latest to join first, from requests holding more than
        `share` source tokens and more than one sentence, until `needed` tokens are free or there are no such
        sentences; they are returned, to wait again (what they had decoded is lost). `held` is updated. A request
        keeps a sentence in the batch, so that every one that joined goes on."""
        sentences = collections.Counter(job.request for job in self.decoding.values())
        leaving = []
        for key, job in reversed(list(self.decoding.items())):
            if needed <= 0:
                break
            if held[job.request] > share and sentences[job.request] > 1:
                leaving.append(key)
                held[job.request] -= job.tokens
                sentences[job.request] -= 1
                needed -= job.tokens
        self.decoder.drop(set(leaving))
        return [self.decoding.pop(key) for key in leaving]

    async def _join(self, jobs: list[Job]) -> None:
        """Adds `jobs` to the decoder's batch; if that fails, each is tried alone, so that only the sentence at
        fault fails."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        for job in jobs:
            self.metrics.queue_seconds.observe(started - job.queued_at)
        try:
            await loop.run_in_executor(
                self.executor, self.decoder.join, [id(job) for job in jobs], [job.sentence for job in jobs]
            )
        except Exception as error:
            if len(jobs) > 1:
                for job in jobs:
                    await self._join([job])
                return
            self._count(-1)
            if not jobs[0].future.done():
                jobs[0].future.set_exception(error)
            return
        self.decoding.update((id(job), job) for job in jobs)

    async def _step(self) -> None:
        """One decoding step of the decoder's batch; if it fails, every sentence in the batch fails with it."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        self.metrics.batch_sentences.observe(len(self.decoding))
        try:
            done = await loop.run_in_executor(self.executor, self.decoder.step)
        except Exception as error:
            self.decoder.drop(set(self.decoding))
            for job in self.decoding.values():
                if not job.future.done():
                    job.future.set_exception(error)
            self._count(-len(self.decoding))
            self.decoding.clear()
            return
        self.metrics.batch_seconds.observe(time.monotonic() - started)
        self._answer(done)

    def _answer(self, done: list[tuple[int, list[str]]]) -> None:
        """Hands the decoder's finished sentences their answers (as many hypotheses as each asked)."""
        for key, hypotheses in done:
            job = self.decoding.pop(key)
            result = hypotheses[: job.hypotheses]
            self.metrics.from_model.inc()
            self.metrics.tokens.inc(job.tokens)
            self.cache.put((job.sentence, job.hypotheses), result)
            if not job.future.done():
                job.future.set_result(result)
        self._count(-len(done))


def fair_order(jobs: list[Job], held: collections.Counter) -> list[Job]:
    """`jobs` with the requests taking turns: the first waiting sentence of each request, those holding the fewest
    source tokens in the batch (`held`) first, then the second of each, and so on; first come first within a
    request."""
    rank = collections.Counter()
    turns = []
    for job in jobs:
        turns.append((rank[job.request], held[job.request], job.queued_at, job.request))
        rank[job.request] += 1
    return [job for _, job in sorted(zip(turns, jobs, strict=True), key=lambda pair: pair[0])]


def batcher_for(
    backend: Backend,
    translate: TranslateBatch,
    executor: Executor,
    settings: ServeSettings,
    name: str,
    metrics: Metrics,
    count_tokens: Callable[[list[str]], list[int]],
) -> Batcher:
    """The batcher of `backend`: its continuous decoder's where it has one, else batch by batch on its lanes by
    `translate` (the backend's, into one target language)."""
    common = (translate, count_tokens, executor, settings, name, metrics)
    if backend.decoder is not None:
        return ContinuousBatcher(*common, decoder=backend.decoder)
    return BatchByBatch(*common, lanes=backend.lanes, workers=backend.workers, batch_sentences=backend.batch_sentences)
