"""The cross-request batcher with a stand-in model: answers go back to their own requests in order, concurrent
requests share batches within the token budget, a full queue refuses at once, the cache answers repeats, a failing
sentence fails alone and a cancelled request's sentences are dropped; and the same with a stand-in continuous
decoder, whose batch sentences join and leave step by step."""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from vanilla_training.serving.batcher import BatchByBatch, ContinuousBatcher, QueueFull
from vanilla_training.serving.settings import ServeSettings


class StandIn:
    """Translates by reversing each word, records every batch, and fails on a sentence holding "BAD"."""

    def __init__(self, delay: float = 0.0):
        self.batches: list[tuple[list[str], int]] = []
        self.delay = delay

    def __call__(self, sentences: list[str], hypotheses: int) -> list[list[str]]:
        time.sleep(self.delay)
        self.batches.append((list(sentences), hypotheses))
        if any("BAD" in sentence for sentence in sentences):
            raise RuntimeError("the model cannot take BAD")
        return [[f"{sentence[::-1]}#{rank}" for rank in range(hypotheses)] for sentence in sentences]


def word_counts(sentences: list[str]) -> list[int]:
    return [len(sentence.split()) + 1 for sentence in sentences]


class StandInDecoder:
    """A continuous decoder that needs one step (2 ms) per word of a sentence and answers it reversed (as many
    hypotheses as `beams`); it records the sentences in its batch at every step, and fails to take "BAD"."""

    def __init__(self, beams: int = 2):
        self.beams = beams
        self.remaining: dict = {}  # steps left, by handle
        self.sentences: dict = {}
        self.steps: list[list[str]] = []

    @property
    def keys(self) -> list:
        return list(self.remaining)

    def join(self, keys: list, sentences: list[str]) -> None:
        if any("BAD" in sentence for sentence in sentences):
            raise RuntimeError("the model cannot take BAD")
        for key, sentence in zip(keys, sentences, strict=True):
            self.remaining[key], self.sentences[key] = len(sentence.split()), sentence

    def step(self) -> list:
        time.sleep(0.002)
        self.steps.append([self.sentences[key] for key in self.remaining])
        for key in self.remaining:
            self.remaining[key] -= 1
        done = [key for key, left in self.remaining.items() if left <= 0]
        for key in done:
            del self.remaining[key]
        texts = {key: self.sentences.pop(key)[::-1] for key in done}
        return [(key, [f"{texts[key]}#{rank}" for rank in range(self.beams)]) for key in done]

    def drop(self, keys: set) -> None:
        for key in keys:
            self.remaining.pop(key, None)


def run(coroutine_function, model: StandIn, decoder: StandInDecoder | None = None, **options):
    """Runs `coroutine_function(batcher)` with a started batcher over `model` (and `decoder`), and closes it."""

    async def main():
        with ThreadPoolExecutor(max_workers=options.get("lanes", 1)) as executor:
            shape = {key: options.pop(key) for key in ("lanes", "workers", "batch_sentences") if key in options}
            settings = ServeSettings(**options)
            if decoder is None:
                batcher = BatchByBatch(model, word_counts, executor, settings, **shape)
            else:
                batcher = ContinuousBatcher(model, word_counts, executor, settings, decoder=decoder)
            batcher.start()
            try:
                return await asyncio.wait_for(coroutine_function(batcher), timeout=30)
            finally:
                await asyncio.wait_for(batcher.close(), timeout=30)

    return asyncio.run(main())


def test_concurrent_requests_share_batches_and_get_their_own_answers_in_order():
    model = StandIn()
    requests = [[f"request {r} sentence {s} " + "w " * ((r * 7 + s) % 5) for s in range(r % 4 + 1)] for r in range(40)]

    async def clients(batcher):
        return await asyncio.gather(*(batcher.translate(sentences) for sentences in requests))

    answers = run(clients, model, batch_wait_ms=50, max_tokens=60, cache_size=0)
    assert answers == [[[f"{sentence[::-1]}#0"] for sentence in sentences] for sentences in requests]
    assert sum(len(batch) for batch, _ in model.batches) == sum(map(len, requests))  # each sentence once
    assert len(model.batches) < 40  # gathered across requests
    for batch, _ in model.batches:
        assert len(batch) * max(word_counts(batch)) <= 60  # within the token budget, padding included
        assert len(batch) > 1 or word_counts(batch)[0] <= 60


def test_clients_answered_by_a_batch_join_the_next_one_rather_than_taking_turns():
    """16 clients starting 10 ms apart, each sending its next sentence a few milliseconds after its answer: the
    late starters queue while the first batch (the first client's, started at once) is translated, and yet the
    batches soon hold all 16, back to back. (With the window
    opened by the first waiting sentence rather than by the model becoming free, the next batch starts at once with
    those already waiting, and the clients take turns in two groups for ever.)"""
    model = StandIn(delay=0.1)

    async def client(batcher, number):
        await asyncio.sleep(0.01 * number)
        for turn in range(8):
            await batcher.translate([f"client {number} turn {turn}"])
            await asyncio.sleep(0.002 * (number % 4))  # the answer's way back and the next request's way in

    async def clients(batcher):
        await asyncio.gather(*(client(batcher, number) for number in range(16)))

    run(clients, model, batch_wait_ms=20, cache_size=0)
    sizes = [len(batch) for batch, _ in model.batches]
    assert sum(sizes) == 16 * 8
    assert sizes[0] == 1  # the first client alone started at once
    assert any(sizes[i : i + 4] == [16] * 4 for i in range(len(sizes))), sizes


def test_lanes_translate_batches_side_by_side_within_their_sentence_limit():
    """With 2 lanes and batches of at most 3 sentences, 12 concurrent requests are translated in batches of 3 or
    fewer, two at a time, and each gets its own answer."""
    model = StandIn(delay=0.05)
    running, most = [0], [0]
    lock = threading.Lock()

    def counted(sentences, hypotheses):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return model(sentences, hypotheses)
        finally:
            with lock:
                running[0] -= 1

    async def clients(batcher):
        return await asyncio.gather(*(batcher.translate([f"request {r}"]) for r in range(12)))

    answers = run(clients, counted, batch_wait_ms=20, cache_size=0, lanes=2, batch_sentences=3)
    assert answers == [[[f"request {r}"[::-1] + "#0"]] for r in range(12)]
    assert sorted(sentence for batch, _ in model.batches for sentence in batch) == sorted(
        f"request {r}" for r in range(12)
    )
    assert max(len(batch) for batch, _ in model.batches) == 3
    assert most[0] == 2


class Concurrency:
    """Wraps a stand-in model: counts the calls in flight at once (the most in `most`)."""

    def __init__(self, model: StandIn):
        self.model, self.running, self.most = model, 0, 0
        self.lock = threading.Lock()

    def __call__(self, sentences: list[str], hypotheses: int) -> list[list[str]]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return self.model(sentences, hypotheses)
        finally:
            with self.lock:
                self.running -= 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lone_request_is_spread_over_the_idle_workers_in_batches_of_consecutive_lengths(workers):
    """A request of 5 sentences at an idle batcher goes to the model at once: as one batch with one worker, and with
    two (CTranslate2's on 2 cores: 4 lanes, batches of at most 8) as two batches side by side, the 3 shortest and
    the 2 longest, rather than one batch on one worker while the other idles."""
    model = StandIn(delay=0.1)
    counted = Concurrency(model)
    sentences = [" ".join(["w"] * length) for length in (5, 1, 4, 2, 3)]

    async def client(batcher):
        return await batcher.translate(sentences)

    answers = run(client, counted, batch_wait_ms=3_600_000, cache_size=0, lanes=4, workers=workers, batch_sentences=8)
    assert answers == [[f"{sentence[::-1]}#0"] for sentence in sentences]
    by_length = sorted(sentences, key=len)
    if workers == 1:
        assert [batch for batch, _ in model.batches] == [by_length]
    else:
        assert sorted(batch for batch, _ in model.batches) == [by_length[:3], by_length[3:]]
        assert counted.most == 2


def test_a_busy_batcher_keeps_its_batches_whole():
    """With both workers busy, a request of 5 sentences waits for a lane and goes as one batch: the batches are cut
    only for idle workers."""
    model = StandIn(delay=0.2)
    sentences = [f"sentence {n}" for n in range(5)]

    async def clients(batcher):
        busy = [asyncio.ensure_future(batcher.translate([f"busy {n}"])) for n in range(2)]
        await asyncio.sleep(0.05)  # each of the two workers translates one
        await asyncio.gather(batcher.translate(sentences), *busy)

    run(clients, model, batch_wait_ms=1, cache_size=0, lanes=4, workers=2, batch_sentences=8)
    assert sorted(batch for batch, _ in model.batches) == [["busy 0"], ["busy 1"], sentences]


def test_the_next_batch_holds_the_sentence_that_waited_longest():
    """Sentences are batched by length, but a long sentence is not passed over by shorter ones that came after it:
    the batch taken when the model is free is the one that holds the oldest waiting sentence."""
    model = StandIn(delay=0.1)
    long = "a long sentence of many words that came first"

    async def clients(batcher):
        busy = asyncio.ensure_future(batcher.translate(["blocker"]))
        await asyncio.sleep(0.05)  # the model is busy with the blocker: the rest waits
        waiting = [asyncio.ensure_future(batcher.translate([long]))]
        await asyncio.sleep(0.01)
        waiting += [asyncio.ensure_future(batcher.translate([f"short {n}"])) for n in range(4)]
        await asyncio.gather(busy, *waiting)

    run(clients, model, batch_wait_ms=1, cache_size=0, batch_sentences=2)
    assert [batch for batch, _ in model.batches[:2]] == [["blocker"], [long]]


def test_hypotheses_are_batched_apart_and_given_best_first():
    model = StandIn()

    async def clients(batcher):
        return await asyncio.gather(batcher.translate(["a b"], 3), batcher.translate(["c d"], 1))

    assert run(clients, model, batch_wait_ms=50) == [[["b a#0", "b a#1", "b a#2"]], [["d c#0"]]]
    assert sorted(model.batches) == [(["a b"], 3), (["c d"], 1)]


def test_a_full_queue_refuses_at_once_and_takes_requests_again_once_drained():
    model = StandIn(delay=0.3)

    async def clients(batcher):
        first = asyncio.ensure_future(batcher.translate([f"s{i}" for i in range(8)]))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull, match="queue is full \\(8 of 10 sentences waiting\\)"):
            await batcher.translate(["x1", "x2", "x3"])
        assert len(await first) == 8
        return await batcher.translate(["x1", "x2", "x3"])

    assert run(clients, model, max_queue=10) == [["1x#0"], ["2x#0"], ["3x#0"]]


def test_the_cache_answers_repeated_sentences_without_the_model():
    model = StandIn()

    async def clients(batcher):
        first = await batcher.translate(["one two", "three"])
        second = await batcher.translate(["three", "one two", "   "])
        return first, second

    first, second = run(clients, model, cache_size=10)
    assert second == [first[1], first[0], [""]]  # a blank sentence needs no model either
    assert [batch for batch, _ in model.batches] == [["three", "one two"]]


def test_a_failing_sentence_fails_alone():
    model = StandIn()

    async def clients(batcher):
        return await asyncio.gather(
            batcher.translate(["good one"]), batcher.translate(["BAD one"]), return_exceptions=True
        )

    good, bad = run(clients, model, batch_wait_ms=50)
    assert good == [["eno doog#0"]]
    assert isinstance(bad, RuntimeError) and "cannot take BAD" in str(bad)


def test_a_cancelled_request_costs_no_model_time():
    """A request queued behind a batch and cancelled before its turn is never translated."""
    model = StandIn(delay=0.2)

    async def clients(batcher):
        first = asyncio.ensure_future(batcher.translate(["first one"]))
        while not batcher.running:
            await asyncio.sleep(0.001)
        gone = asyncio.ensure_future(batcher.translate(["gone away"]))
        await asyncio.sleep(0.01)
        gone.cancel()
        return await first, await batcher.translate(["still here"])

    assert run(clients, model, batch_wait_ms=100) == ([["eno tsrif#0"]], [["ereh llits#0"]])
    assert [batch for batch, _ in model.batches] == [["first one"], ["still here"]]


@pytest.mark.parametrize("continuous", [False, True])
def test_a_lone_request_starts_at_once_without_waiting_for_batch_wait_ms(continuous):
    """Issue 64's rule: a request that finds nothing queued and nothing being translated starts at once; a client
    sending one request after another, alone, never waits for the gathering window (an hour here: any wait for it
    would end the test's 30 s)."""
    model = StandIn()
    decoder = StandInDecoder() if continuous else None

    async def client(batcher):
        return [await batcher.translate([f"turn {turn}"]) for turn in range(3)]

    answers = run(client, model, decoder, batch_wait_ms=3_600_000, cache_size=0)
    assert answers == [[[f"{turn} nrut#0"]] for turn in range(3)]
    assert len(model.batches if decoder is None else decoder.steps) == 3 * (1 if decoder is None else 2)


def test_with_a_continuous_decoder_sentences_join_and_leave_its_batch_step_by_step():
    model, decoder = StandIn(), StandInDecoder()
    requests = [[f"request {r} sentence {s} " + "w " * ((r * 7 + s) % 5) for s in range(r % 4 + 1)] for r in range(40)]

    async def clients(batcher):
        async def client(number, sentences):
            await asyncio.sleep(0.002 * number)  # requests arrive while others are being decoded
            return await batcher.translate(sentences, hypotheses=number % 2 + 1)

        return await asyncio.gather(*(client(n, sentences) for n, sentences in enumerate(requests)))

    answers = run(clients, model, decoder, batch_wait_ms=1, max_tokens=60, cache_size=0)
    expected = [
        [[f"{s[::-1]}#{rank}" for rank in range(n % 2 + 1)] for s in request] for n, request in enumerate(requests)
    ]
    assert answers == expected
    assert model.batches == [] and not decoder.keys  # every sentence went through the decoder, and left it
    for batch in decoder.steps:
        assert sum(word_counts(batch)) <= 2 * 60  # the token budget, or twice it with newcomers' fair shares
    pairs = zip(decoder.steps, decoder.steps[1:], strict=False)
    joined_while_decoding = [sentence for before, after in pairs for sentence in set(after) - set(before)]
    assert joined_while_decoding and max(map(len, decoder.steps)) > 4


def test_with_a_continuous_decoder_more_hypotheses_than_its_beams_go_batch_by_batch():
    model, decoder = StandIn(), StandInDecoder(beams=2)

    async def clients(batcher):
        return await asyncio.gather(batcher.translate(["a b"], hypotheses=2), batcher.translate(["c d"], hypotheses=3))

    assert run(clients, model, decoder, batch_wait_ms=20) == [[["b a#0", "b a#1"]], [["d c#0", "d c#1", "d c#2"]]]
    assert model.batches == [(["c d"], 3)] and decoder.steps == [["a b"], ["a b"]]


def test_with_a_continuous_decoder_a_failing_sentence_fails_alone():
    model, decoder = StandIn(), StandInDecoder()

    async def clients(batcher):
        return await asyncio.gather(
            batcher.translate(["good one"]), batcher.translate(["BAD one"]), return_exceptions=True
        )

    good, bad = run(clients, model, decoder, batch_wait_ms=50)
    assert good == [["eno doog#0"]]
    assert isinstance(bad, RuntimeError) and "cannot take BAD" in str(bad)


def test_with_a_continuous_decoder_a_cancelled_request_leaves_its_batch():
    model, decoder = StandIn(), StandInDecoder()

    async def clients(batcher):
        gone = asyncio.ensure_future(batcher.translate(["gone " * 400]))
        while not decoder.steps:
            await asyncio.sleep(0.001)
        gone.cancel()
        answer = await batcher.translate(["still here"])
        return answer, batcher.outstanding

    assert run(clients, model, decoder, batch_wait_ms=1) == ([["ereh llits#0"]], 0)
    assert len(decoder.steps) < 100 and decoder.steps[-1] == ["still here"]  # dropped long before its 400 steps


def test_with_a_continuous_decoder_a_long_request_cannot_hold_the_batch_against_a_short_one():
    """The `"y"*4999` case with a deterministic slow decoder: a request of 30 sentences of 40 words fills the token
    budget (4 at a time: 40 steps a round, 8 rounds); a one-sentence request sent once it decodes joins the batch
    at the next step (one of the long request's sentences leaves for the queue to make room) and is answered after
    its own few steps, not after the long request's 320 steps. Both get every answer."""
    model, decoder = StandIn(), StandInDecoder()
    long_request = [f"long {n} " + "w " * 38 for n in range(30)]

    async def clients(batcher):
        long_work = asyncio.ensure_future(batcher.translate(long_request))
        while len(decoder.steps) < 3:
            await asyncio.sleep(0.001)
        sent_at = len(decoder.steps)
        short = await batcher.translate(["short one"])
        answered_at = len(decoder.steps)
        return short, await long_work, answered_at - sent_at

    short, long_answers, steps_waited = run(clients, model, decoder, batch_wait_ms=1, max_tokens=170, cache_size=0)
    assert short == [["eno trohs#0"]]
    assert long_answers == [[f"{sentence[::-1]}#0"] for sentence in long_request]
    assert steps_waited <= 5, steps_waited  # 2 steps of its own, and the one in progress when it came
    for batch in decoder.steps:
        assert sum(word_counts(batch)) <= 170  # the token budget holds throughout


def test_with_a_continuous_decoder_two_requests_of_one_long_sentence_cannot_hold_the_batch_against_a_newcomer():
    """Issue 61's two `"y"*509` requests: two requests of one 80-word sentence each fill the token budget; a
    one-sentence request sent while they decode joins at the next step beyond the budget (its fair share, never
    more than twice the budget), rather than after their 80 steps; the long ones lose no step and get their answers."""
    model, decoder = StandIn(), StandInDecoder()
    first, second = "first " + "w " * 79, "second " + "w " * 79

    async def clients(batcher):
        long_work = asyncio.gather(batcher.translate([first]), batcher.translate([second]))
        while len(decoder.steps) < 3:
            await asyncio.sleep(0.001)
        sent_at = len(decoder.steps)
        short = await batcher.translate(["short one"])
        steps_waited = len(decoder.steps) - sent_at
        return short, await long_work, steps_waited

    short, long_answers, steps_waited = run(clients, model, decoder, batch_wait_ms=1, max_tokens=162, cache_size=0)
    assert short == [["eno trohs#0"]]
    assert long_answers == [[[f"{first[::-1]}#0"]], [[f"{second[::-1]}#0"]]]
    assert steps_waited <= 5, steps_waited  # 2 steps of its own, and the one in progress when it came
    assert len(decoder.steps) == 80  # neither long sentence started again
    for batch in decoder.steps:
        assert sum(word_counts(batch)) <= 2 * 162


def test_requests_take_turns_in_the_batch():
    """Two long requests sent together share the budget: from the first step, each holds half of the batch."""
    model, decoder = StandIn(), StandInDecoder()
    first, second = [f"first {n} " + "w " * 8 for n in range(12)], [f"second {n} " + "w " * 8 for n in range(12)]

    async def clients(batcher):
        return await asyncio.gather(batcher.translate(first), batcher.translate(second))

    run(clients, model, decoder, batch_wait_ms=20, max_tokens=88, cache_size=0)
    for batch in decoder.steps[:5]:
        assert sorted(sentence.split()[0] for sentence in batch) == ["first"] * 4 + ["second"] * 4, batch


def test_a_batcher_that_dies_fails_its_waiting_requests_and_says_why():
    """A worker task that ends with an error (here the decoder's `drop`, called outside the model thread's
    try) fails the sentences waiting for it at once, and later requests, rather than leaving them hanging."""

    class DyingDecoder(StandInDecoder):
        def drop(self, keys: set) -> None:
            if keys:
                raise MemoryError("the decoder is gone")

    model, decoder = StandIn(), DyingDecoder()

    async def clients(batcher):
        gone = asyncio.ensure_future(batcher.translate(["gone " * 400]))
        waiting = asyncio.ensure_future(batcher.translate(["waits " * 300]))
        while not decoder.steps:
            await asyncio.sleep(0.001)
        gone.cancel()  # the next step drops it: the worker dies
        failed = await asyncio.gather(waiting, return_exceptions=True)
        later = await asyncio.gather(batcher.translate(["later"]), return_exceptions=True)
        return failed[0], later[0], batcher.failure, batcher.outstanding

    failed, later, failure, outstanding = run(clients, model, decoder, batch_wait_ms=1)
    assert "MemoryError: the decoder is gone" in failure
    assert isinstance(failed, RuntimeError) and failure in str(failed)
    assert isinstance(later, RuntimeError) and failure in str(later)
    assert outstanding == 0
