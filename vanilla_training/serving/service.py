"""What the routes share (`Service`, on `app.state.service`): the settings, the served pairs with their batchers,
the detector, the metrics, the file store and the suggestions; and the one translation path of a checked request:
its source detected once where it is `auto`, each text's pair chosen and its sentences laid out (`documents`, on a
thread: never on the event loop), the sentences batched with other requests' (`batcher`), the translations put
back."""

import asyncio
import copy
import dataclasses
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from transformers import PreTrainedTokenizerFast

from ..corpus import Direction, language_name
from ..corpus.direction import pivot_language
from ..glossary import Glossary, GlossaryError, GlossaryTranslation, translate_with_glossary
from ..translator import UNTRAINED_DIRECTIONS, Translator
from .access import Access
from .backends import Backend, TorchBackend
from .batcher import Batcher, QueueFull, batcher_for
from .detect import Detector, translatable
from .documents import Layout, layout_sentences, layouts, translated_versions
from .files import FileStore
from .metrics import Metrics
from .paragraphs import SEGMENTER, Budget, Cancelled, all_taken_whole
from .parsing import ApiError, TranslateCall
from .settings import ServeSettings
from .suggestions import Suggestions

INLINE_CHARACTERS = 2000  # the longest request laid out on the event loop (`plain_request`)
LAYOUT_THREADS = 32  # requests laid out at once (most of them waiting for pysbd's turn: see `paragraphs`)
SURE = 50  # percent: a language not served into the target this likely is refused for source `auto` (`detect_source`)


class TokenCounter:
    """Counts tokens for the requests' side, as `Translator.token_counts` does, one call at a time. A fast
    tokenizer's own backend (`tokenizers.Tokenizer`) is called directly, on a copy: transformers' call around it
    costs twice the count, a sentence is counted twice (its length checked in the layout, its tokens in the
    batcher), and the model's thread pads where this side does not (a fast tokenizer keeps its padding between
    calls). Another tokenizer (a converted Marian model's sentencepiece one) is called as it is, on a copy."""

    def __init__(self, translator: Translator):
        self.max_length = translator.max_length
        self.lock = threading.Lock()
        self.count: Callable[[list[str]], list[int]]
        if isinstance(translator.tokenizer, PreTrainedTokenizerFast):
            tokenizer = translator.tokenizer.backend_tokenizer
            backend = copy.deepcopy(tokenizer)
            backend.no_padding()
            backend.no_truncation()
            backend.encode_special_tokens = tokenizer.encode_special_tokens  # `split_special_tokens`: not copied
            self.count = lambda sentences: [len(encoding) for encoding in backend.encode_batch_fast(sentences)]
        else:
            copied = copy.copy(translator)
            copied.tokenizer = copy.deepcopy(translator.tokenizer)
            self.count = copied.token_counts

    def token_counts(self, sentences: list[str]) -> list[int]:
        """The number of tokens of each sentence, end token included."""
        with self.lock:
            return self.count(sentences)

    def fits(self, sentence: str) -> bool:
        """Whether the model accepts `sentence` whole (its tokens within `max_length`)."""
        return self.token_counts([sentence])[0] <= self.max_length


@dataclasses.dataclass
class Pair:
    """A served direction: its backend, the batcher it shares with the backend's other directions into the same
    target, and the requests' token counter of the backend (its own if none is given). A pivot (no model of its
    own) is two pairs, `legs`, through a language they share: its backend and counter are the first leg's. A
    `zero_shot` pair is a direction its multilingual model did not train."""

    backend: Backend
    source: str
    target: str
    counter: TokenCounter | None = None
    batcher: Batcher | None = None
    legs: tuple["Pair", "Pair"] | None = None
    zero_shot: bool = False

    def __post_init__(self):
        self.counter = self.counter or TokenCounter(self.backend.translator)

    def token_counts(self, sentences: list[str]) -> list[int]:
        return self.counter.token_counts(sentences)

    def fits(self, sentence: str) -> bool:
        return self.counter.fits(sentence)


@dataclasses.dataclass
class Text:
    """One text of a request, laid out: its pair (None: nothing to translate, given back as it is), its sentences
    and markup, and its detected language (source `auto`)."""

    text: str
    pair: Pair | None
    parts: Layout
    detected: dict | None


def direct_pairs(backends: list[Backend]) -> dict[Direction, Pair]:
    """Every direction the backends translate themselves (all of a multilingual model's); ValueError for a backend
    without languages or two of one direction."""
    pairs: dict[Direction, Pair] = {}
    for backend in backends:
        translator = backend.translator
        if not translator.directions:
            raise ValueError(f"{translator.folder} records no languages: give its source and target language")
        counter = TokenCounter(translator)
        for source, target in translator.directions:
            if (source, target) in pairs:
                raise ValueError(f"two models translate {source}-{target}")
            pairs[Direction(source, target)] = Pair(backend, source, target, counter)
    return pairs


def pivot_pairs(direct: dict[Direction, Pair]) -> dict[Direction, Pair]:
    """The directions no model translates that two can, one after the other, through a language they share (as
    LibreTranslate does with Argos packages): English where it can, else the first such language by code."""
    pivots: dict[Direction, Pair] = {}
    sources, targets = sorted({source for source, _ in direct}), sorted({target for _, target in direct})
    for source in sources:
        for target in targets:
            if source == target or (source, target) in direct:
                continue
            middle = pivot_language(source, target, direct)
            if middle is not None:
                first, second = direct[(source, middle)], direct[(middle, target)]
                pivots[Direction(source, target)] = Pair(
                    first.backend, source, target, first.counter, legs=(first, second)
                )
    return pivots


def zero_shot_pairs(
    backends: list[Backend], served: dict[Direction, Pair], allow_zero_shot: bool
) -> tuple[dict[Direction, Pair], list[Direction]]:
    """The directions a multilingual model did not train that it translates zero-shot: where no pair serves them
    yet, if `allow_zero_shot`, and where a pivot does, if `translator.UNTRAINED_DIRECTIONS` says so; and those
    refused (no pivot reaches them and zero-shot is not allowed)."""
    zero_shot: dict[Direction, Pair] = {}
    refused: list[Direction] = []
    for backend in backends:
        translator = backend.translator
        for direction in translator.untrained_directions:
            pair = served.get(direction)
            if pair is not None and (pair.legs is None or UNTRAINED_DIRECTIONS == "pivot"):
                continue  # another model's own direction, or a pivot through trained directions
            if pair is None and not allow_zero_shot:
                refused.append(direction)
                continue
            counter = next(p.counter for p in served.values() if p.backend is backend and p.legs is None)
            zero_shot[direction] = Pair(backend, *direction, counter, zero_shot=True)
    return zero_shot, refused


class Service:
    """The served pairs (one backend each) under `settings`, and what every route needs of them."""

    def __init__(self, backends: list[Backend], settings: ServeSettings):
        self.settings = settings
        self.pairs = direct_pairs(backends)
        self.pairs.update(pivot_pairs(self.pairs))
        zero_shot, self.refused = zero_shot_pairs(backends, self.pairs, settings.allow_zero_shot)
        self.pairs.update(zero_shot)
        self.codes = sorted({code for pair in self.pairs for code in pair})
        self.detector = Detector(fallback=min({source for source, _ in self.pairs}))  # /detect: every language
        self.source_detectors = {  # source `auto`: for each target, a detector among the languages served into it
            target: self.detector.among(sorted(source for source, into in self.pairs if into == target))
            for target in {target for _, target in self.pairs}
        }
        self.metrics = Metrics()
        self.access = Access(settings)  # API keys and rate limits
        self.files = FileStore(capacity=settings.file_store_bytes)  # translated files for /download_file
        self.suggestions = Suggestions(settings.suggestions_db) if settings.suggestions else None
        self.layout_threads = ThreadPoolExecutor(max_workers=LAYOUT_THREADS, thread_name_prefix="layout")
        self.executors: list[ThreadPoolExecutor] = [self.layout_threads]
        self.batchers: list[Batcher] = []
        self.model_thread: ThreadPoolExecutor | None = None  # where glossary requests decode
        self.glossary_sentences = 0  # sentences of glossary requests waiting or decoding

    def start(self, model_thread: ThreadPoolExecutor) -> None:
        """Starts a batcher for each backend and target language (in the running event loop): on `model_thread`, or
        on threads of its own for a backend with several lanes; and the sentence splitter's process."""
        SEGMENTER.start()
        self.model_thread = model_thread
        by_target: dict[tuple[int, str], Batcher] = {}
        for pair in self.pairs.values():
            if pair.legs is not None:
                continue
            key = (id(pair.backend), pair.target)
            if key not in by_target:
                by_target[key] = self._batcher(pair, model_thread)
            pair.batcher = by_target[key]
        self.batchers = list(by_target.values())

    def _batcher(self, pair: Pair, model_thread: ThreadPoolExecutor) -> Batcher:
        """A started batcher of `pair`'s backend into its target (the target given only to a multilingual model), on
        `model_thread` or, for a backend with several lanes, on threads of its own."""
        backend, executor = pair.backend, model_thread
        target_lang = pair.target if backend.translator.all_languages else None
        name = f"{pair.source}-{pair.target}" if target_lang is None else f"*-{pair.target}"
        if backend.lanes > 1:
            executor = ThreadPoolExecutor(max_workers=backend.lanes, thread_name_prefix=name)
            self.executors.append(executor)
        translate = (
            backend.translate if target_lang is None else functools.partial(backend.translate, target_lang=target_lang)
        )
        counts = pair.token_counts
        batcher = batcher_for(backend, translate, executor, self.settings, name, self.metrics, counts)
        batcher.start()
        return batcher

    async def close(self) -> None:
        """Stops the batchers once their queues are empty, and the lanes' threads."""
        for batcher in self.batchers:
            await batcher.close()
        for executor in self.executors:
            executor.shutdown()

    def failures(self) -> list[str]:
        """What is wrong with the batchers: one line for each that has stopped."""
        return [f"{batcher.name}: {batcher.failure}" for batcher in self.batchers if batcher.failure]

    def languages(self) -> list[dict]:
        """GET /languages: each served code, its name and its targets."""
        return [
            {"code": code, "name": language_name(code), "targets": sorted(t for s, t in self.pairs if s == code)}
            for code in self.codes
        ]

    def route(self, source: str, target: str) -> dict:
        """What a /translate answer says of a direction that no model trained: the language it pivots through
        (`{"pivot": "en"}`), or that it is translated zero-shot (`{"zeroShot": True}`); nothing otherwise."""
        pair = self.pairs.get((source, target))
        if pair is not None and pair.legs is not None:
            return {"pivot": pair.legs[0].target}
        return {"zeroShot": True} if pair is not None and pair.zero_shot else {}

    def detect_source(self, texts: list[str], target: str) -> dict:
        """The language of a request's `texts` for source `auto`, detected once for them all (as LibreTranslate
        detects a request or a file): the most likely of the languages served into `target`, unless py3langid,
        over the 97 languages it knows, finds the texts at least `SURE` percent likely another language (which is
        then refused, not translated as another). Short ordinary words are often more like another language
        (`Hotel` is 84% German against English): on an en-de server they are read as English, German sentences
        refused."""
        text = "\n".join(text for text in texts if translatable(text))
        overall = self.detector.detect(text)[0]
        detector = self.source_detectors.get(target)
        if detector is None or (overall["confidence"] >= SURE and overall["language"] not in detector.languages):
            return overall
        return detector.detect(text)[0]

    def lay_out(self, call: TranslateCall, budget: Budget) -> list[Text]:
        """Each text of `call` with its pair and sentences (pysbd asked once for them all, within `budget`), and the
        detected language of source `auto`; ApiError 400 where no model translates from that language into the
        target, or for sentences over the sentence limit or the queue's size."""
        detected = self.detect_source(call.texts, call.target) if call.source == "auto" else None
        source = call.source if detected is None else detected["language"]
        pairs = [self.pair_for(text, source, call.target) for text in call.texts]  # one pair, or None: nothing to do
        pair = next((pair for pair in pairs if pair is not None), None)
        translated = [text for text, its_pair in zip(call.texts, pairs, strict=True) if its_pair is not None]
        laid = iter(layouts(translated, call.text_format, pair.source, pair.fits, budget) if pair is not None else [])
        texts = [
            Text(text, its_pair, [(text, None, None)] if its_pair is None else next(laid), detected)
            for text, its_pair in zip(call.texts, pairs, strict=True)
        ]
        count = sum(len(layout_sentences(text.parts)) for text in texts)
        for limit, name in ((self.settings.sentence_limit, "sentence limit"), (self.settings.max_queue, "queue size")):
            if count > limit:
                raise ApiError(400, f"Invalid request: request ({count:,} sentences) exceeds {name} ({limit:,})")
        return texts

    def pair_for(self, text: str, source: str, target: str) -> Pair | None:
        """The pair that translates `text` from `source` into `target` (None if it holds nothing to translate);
        ApiError 400 where no model does."""
        if not translatable(text):
            return None
        pair = self.pairs.get((source, target))
        if pair is None and (source, target) in self.refused:
            raise ApiError(
                400,
                f"{source}-{target} is a direction the model did not train, and no pivot through the directions it "
                "trained reaches it: the server translates it zero-shot only with --allow-zero-shot",
            )
        if pair is None:
            raise ApiError(
                400,
                f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source)} ({source})",
            )
        return pair

    async def laid_out(self, call: TranslateCall, gone: asyncio.Future) -> list[Text]:
        """`lay_out` on a thread of `layout_threads`, or on the event loop for a short request that needs no pysbd
        (`plain_request`); a client that goes meanwhile stops its layout (ApiError 499)."""
        budget = Budget()
        if plain_request(call):
            return self.lay_out(call, budget)
        layout_work = asyncio.get_running_loop().run_in_executor(self.layout_threads, self.lay_out, call, budget)
        try:
            return await unless_gone(layout_work, gone)
        except Cancelled:
            raise ApiError(499, "Client closed the request") from None
        finally:
            budget.cancelled.set()  # the layout is done, or its client has gone: it stops, and its end is not awaited
            layout_work.cancel()

    async def translate(
        self, call: TranslateCall, gone: asyncio.Future
    ) -> tuple[list[str], list[list[str]], list[dict | None]]:
        """Each text's best translation, its alternatives, and its detected language (source `auto`). The texts are
        laid out by `laid_out`."""
        texts = await self.laid_out(call, gone)
        hypotheses = 1 if call.text_format == "html" else call.alternatives + 1  # as LibreTranslate: none for HTML
        by_pair: dict[tuple[str, str], list[str]] = {}
        for text in texts:
            if text.pair is not None:
                by_pair.setdefault((text.pair.source, text.pair.target), []).extend(layout_sentences(text.parts))
        results = await asyncio.gather(
            *(self._translated(self.pairs[key], sentences, hypotheses, gone) for key, sentences in by_pair.items())
        )
        answers = {key: iter(result) for key, result in zip(by_pair, results, strict=True)}
        best, alternatives = [], []
        for text in texts:
            if text.pair is None:
                best.append(text.text)
                alternatives.append([])
                continue
            these = [next(answers[(text.pair.source, text.pair.target)]) for _ in layout_sentences(text.parts)]
            translation, others = translated_versions(text.parts, these)
            best.append(translation)
            alternatives.append(others)
        return best, alternatives, [text.detected for text in texts]

    async def translate_with_glossary(
        self, call: TranslateCall, gone: asyncio.Future
    ) -> tuple[list[str], list[list[dict]], list]:
        """Each text's translation with `call.glossary`'s terms placed, as `vanilla-translate --glossary` gives it
        (the torch model's constrained beam search, on the model's thread, beside the batches), the terms it could
        not place, and its detected language. ApiError 400 with alternatives, for a bad term, or where the
        direction's model cannot place terms (CTranslate2 has no lexical constraints; a pivot is two models); 503
        where the queue is full."""
        if call.alternatives > 0:
            raise ApiError(400, "Invalid request: a glossary cannot be given with alternatives")
        texts = await self.laid_out(call, gone)
        pairs = {(text.pair.source, text.pair.target): text.pair for text in texts if text.pair is not None}
        glossaries = {key: await self._glossary(pair, call.glossary) for key, pair in pairs.items()}
        sentences: dict[tuple[str, str], list[str]] = {key: [] for key in pairs}
        for text in texts:
            if text.pair is not None:
                sentences[(text.pair.source, text.pair.target)].extend(layout_sentences(text.parts))
        count = sum(map(len, sentences.values()))
        if self.glossary_sentences + count > self.settings.max_queue:
            raise ApiError(503, "Slowdown: the queue is full", headers={"Retry-After": "1"})
        self.glossary_sentences += count
        try:
            answers = {
                key: iter(await self._glossary_translated(pairs[key], these, glossaries[key]))
                for key, these in sentences.items()
            }
        finally:
            self.glossary_sentences -= count
        best, not_placed = [], []
        for text in texts:
            results = (
                []
                if text.pair is None
                else [next(answers[(text.pair.source, text.pair.target)]) for _ in layout_sentences(text.parts)]
            )
            best.append(
                translated_versions(text.parts, [[result.text] for result in results])[0] if results else text.text
            )
            missing = dict.fromkeys(term for result in results for term in result.missing)
            not_placed.append([{"source": term.source, "target": term.target} for term in missing])
        return best, not_placed, [text.detected for text in texts]

    async def _glossary(self, pair: Pair, terms: dict[str, str]) -> Glossary:
        """`terms` checked against `pair`'s tokenizer, on the model's thread (the tokenizer's, which transformers'
        calls reconfigure); ApiError 400 naming a bad term, or a model that cannot place terms."""
        if pair.legs is not None or not isinstance(pair.backend, TorchBackend):
            how = "through two models" if pair.legs is not None else f"by {pair.backend.description}"
            raise ApiError(
                400,
                f"Invalid request: glossary: {pair.source}-{pair.target} is translated {how}, which cannot place "
                "glossary terms (only the torch backend's model of the direction can)",
            )
        tokenizer = pair.backend.translator.tokenizer
        build = functools.partial(Glossary.build, terms, tokenizer, self.settings.max_glossary_terms)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.model_thread, build)
        except GlossaryError as error:
            raise ApiError(400, f"Invalid request: {error}") from None

    async def _glossary_translated(
        self, pair: Pair, sentences: list[str], glossary: Glossary
    ) -> list[GlossaryTranslation]:
        """`sentences` translated by `pair`'s torch model with `glossary`, on the model's thread."""
        translator = pair.backend.translator
        options = {"max_tokens": self.settings.max_tokens, "progress": False}
        if translator.all_languages:
            options["target_lang"] = pair.target
        if pair.backend.beams is not None:
            options["num_beams"] = pair.backend.beams
        work = functools.partial(translate_with_glossary, translator, sentences, glossary, **options)
        try:
            return await asyncio.get_running_loop().run_in_executor(self.model_thread, work)
        except Exception as error:
            raise ApiError(500, f"Cannot translate text: {error}") from error

    async def _translated(
        self, pair: Pair, sentences: list[str], hypotheses: int, gone: asyncio.Future
    ) -> list[list[str]]:
        """The sentences' translations by `pair`: for a pivot, the first leg's best translation translated by the
        second (whose alternatives are the answer's)."""
        if pair.legs is None:
            return await self._batched(pair.batcher, sentences, hypotheses, gone)
        first, second = pair.legs
        middle = [best for best, *_ in await self._batched(first.batcher, sentences, 1, gone)]
        return await self._batched(second.batcher, middle, hypotheses, gone)

    @staticmethod
    async def _batched(
        batcher: Batcher, sentences: list[str], hypotheses: int, gone: asyncio.Future
    ) -> list[list[str]]:
        """The sentences' translations from `batcher`; a client that has gone takes its sentences out of the queue
        (ApiError 499). ApiError 503 where the queue is full, 500 where the model fails."""
        work = asyncio.ensure_future(batcher.translate(sentences, hypotheses))
        try:
            return await unless_gone(work, gone)
        except QueueFull as error:
            raise ApiError(503, f"Slowdown: {error}", headers={"Retry-After": "1"}) from error
        except ApiError:
            raise
        except Exception as error:
            raise ApiError(500, f"Cannot translate text: {error}") from error
        finally:
            work.cancel()


def plain_request(call: TranslateCall) -> bool:
    """Whether `call` is laid out on the event loop rather than on a layout thread: plain text of at most
    `INLINE_CHARACTERS` characters in a named source language, whose every line is taken whole without pysbd
    (`paragraphs.taken_whole`, linear in the line): a thread's round trip would cost more than the layout itself."""
    if call.source == "auto" or call.text_format == "html" or sum(map(len, call.texts)) > INLINE_CHARACTERS:
        return False
    return all_taken_whole(call.texts, call.source)


def client_departure(receive: Callable[[], Awaitable[dict]]) -> asyncio.Task:
    """A task that ends when the client of a request whose body has been read goes away: the ASGI server's
    `receive` then answers `http.disconnect` (uvicorn's does so too once the answer is sent). Awaited beside the
    request's work (`unless_gone`), it costs nothing while the client waits; cancel it once the request is
    answered."""

    async def departed() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    return asyncio.ensure_future(departed())


async def unless_gone(work: asyncio.Future, gone: asyncio.Future):
    """The result of `work`, unless `gone` (see `client_departure`) ends first: ApiError 499."""
    if not work.done():
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        raise ApiError(499, "Client closed the request")
    return work.result()
