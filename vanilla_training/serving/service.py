"""What the routes share (`Service`, on `app.state.service`): the settings, the served pairs with their batchers,
the detector and the metrics; and the one translation path of a checked request: each text's pair chosen (its
language detected where the source is `auto`), its sentences laid out (`documents`, on a thread: never on the event
loop), the sentences batched with other requests' (`batcher`), the translations put back."""

import asyncio
import copy
import dataclasses
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from ..corpus import LANGUAGE_NAMES
from ..translator import Translator
from .access import Access
from .backends import Backend
from .batcher import Batcher, QueueFull, batcher_for
from .detect import Detector, translatable
from .documents import Layout, layout, layout_sentences, translated_versions
from .files import FileStore
from .metrics import Metrics
from .paragraphs import SEGMENTER, Budget
from .parsing import ApiError, TranslateCall
from .settings import ServeSettings

DISCONNECT_POLL_SECONDS = 0.05


def language_name(code: str) -> str:
    """The English name of a language code (the code itself where the package has no name for it)."""
    return LANGUAGE_NAMES.get(code, code)


@dataclasses.dataclass
class Pair:
    """A served model: its backend, its batcher and its languages. The requests' side counts tokens with a
    tokenizer of its own (`counter`, one call at a time): a fast tokenizer keeps its padding settings between
    calls, and the model's thread pads where this side does not."""

    backend: Backend
    source: str
    target: str
    batcher: Batcher | None = None
    counter: Translator = dataclasses.field(init=False)
    lock: threading.Lock = dataclasses.field(init=False, default_factory=threading.Lock)

    def __post_init__(self):
        self.counter = copy.copy(self.backend.translator)
        self.counter.tokenizer = copy.deepcopy(self.backend.translator.tokenizer)

    def token_counts(self, sentences: list[str]) -> list[int]:
        with self.lock:
            return self.counter.token_counts(sentences)

    def fits(self, sentence: str) -> bool:
        with self.lock:
            return self.counter.fits(sentence)


@dataclasses.dataclass
class Text:
    """One text of a request, laid out: its pair (None: nothing to translate, given back as it is), its sentences
    and markup, and its detected language (source `auto`)."""

    text: str
    pair: Pair | None
    parts: Layout
    detected: dict | None


class Service:
    """The served pairs (one backend each) under `settings`, and what every route needs of them."""

    def __init__(self, backends: list[Backend], settings: ServeSettings):
        self.settings = settings
        self.pairs: dict[tuple[str, str], Pair] = {}
        for backend in backends:
            if backend.translator.languages is None:
                raise ValueError(
                    f"{backend.translator.folder} records no languages: give its source and target language"
                )
            source, target = backend.translator.languages
            if (source, target) in self.pairs:
                raise ValueError(f"two models translate {source}-{target}")
            self.pairs[(source, target)] = Pair(backend, source, target)
        self.codes = sorted({code for pair in self.pairs for code in pair})
        self.detector = Detector(fallback=min({source for source, _ in self.pairs}))
        self.metrics = Metrics()
        self.access = Access(settings)  # API keys and rate limits
        self.files = FileStore()  # translated files for /download_file
        self.executors: list[ThreadPoolExecutor] = []

    def start(self, model_thread: ThreadPoolExecutor) -> None:
        """Starts a batcher for each pair (in the running event loop): on `model_thread`, or on threads of its own
        for a backend with several lanes; and the sentence splitter's process."""
        SEGMENTER.start()
        for (source, target), pair in self.pairs.items():
            executor = model_thread
            if pair.backend.lanes > 1:
                executor = ThreadPoolExecutor(max_workers=pair.backend.lanes, thread_name_prefix=f"{source}-{target}")
                self.executors.append(executor)
            name = f"{source}-{target}"
            pair.batcher = batcher_for(pair.backend, executor, self.settings, name, self.metrics, pair.token_counts)
            pair.batcher.start()

    async def close(self) -> None:
        """Stops the batchers once their queues are empty, and the lanes' threads."""
        for pair in self.pairs.values():
            await pair.batcher.close()
        for executor in self.executors:
            executor.shutdown()

    def failures(self) -> list[str]:
        """What is wrong with the batchers: one line for each that has stopped."""
        return [
            f"{pair.source}-{pair.target}: {pair.batcher.failure}"
            for pair in self.pairs.values()
            if pair.batcher.failure
        ]

    def languages(self) -> list[dict]:
        """GET /languages: each served code, its name and its targets."""
        return [
            {"code": code, "name": language_name(code), "targets": sorted(t for s, t in self.pairs if s == code)}
            for code in self.codes
        ]

    def pair_for(self, text: str, source: str, target: str) -> tuple[Pair | None, dict | None]:
        """The pair that translates `text` (None if it holds nothing to translate) and, for source `auto`, its
        detected language; ApiError 400 where no model translates from that language into `target`."""
        detected = None
        if source == "auto":
            detected = self.detector.detect(text)[0]
            source = detected["language"]
        if not translatable(text):
            return None, detected
        pair = self.pairs.get((source, target))
        if pair is None:
            raise ApiError(
                400,
                f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source)} ({source})",
            )
        return pair, detected

    def lay_out(self, call: TranslateCall) -> list[Text]:
        """Each text of `call` with its pair and sentences (pysbd given one `paragraphs.Budget` for them all); ApiError
        400 for a text no model translates, or sentences over the sentence limit or the queue's size."""
        budget = Budget()
        texts = []
        for text in call.texts:
            pair, detected = self.pair_for(text, call.source, call.target)
            parts = (
                [(text, None, None)] if pair is None else layout(text, call.text_format, pair.source, pair.fits, budget)
            )
            texts.append(Text(text, pair, parts, detected))
        count = sum(len(layout_sentences(text.parts)) for text in texts)
        for limit, name in ((self.settings.sentence_limit, "sentence limit"), (self.settings.max_queue, "queue size")):
            if count > limit:
                raise ApiError(400, f"Invalid request: request ({count:,} sentences) exceeds {name} ({limit:,})")
        return texts

    async def translate(
        self, call: TranslateCall, disconnected: Callable[[], Awaitable[bool]]
    ) -> tuple[list[str], list[list[str]], list[dict | None]]:
        """Each text's best translation, its alternatives, and its detected language (source `auto`)."""
        texts = await asyncio.to_thread(self.lay_out, call)
        hypotheses = 1 if call.text_format == "html" else call.alternatives + 1  # as LibreTranslate: none for HTML
        by_pair: dict[tuple[str, str], list[str]] = {}
        for text in texts:
            if text.pair is not None:
                by_pair.setdefault((text.pair.source, text.pair.target), []).extend(layout_sentences(text.parts))
        results = await asyncio.gather(
            *(
                self._batched(self.pairs[key].batcher, sentences, hypotheses, disconnected)
                for key, sentences in by_pair.items()
            )
        )
        answers = {key: iter(result) for key, result in zip(by_pair, results, strict=True)}
        best, alternatives = [], []
        for text in texts:
            if text.pair is None:
                best.append(text.text)
                alternatives.append([])
                continue
            these = [next(answers[(text.pair.source, text.pair.target)]) for _ in layout_sentences(text.parts)]
            translation, others = translated_versions(text.parts, these, call.text_format)
            best.append(translation)
            alternatives.append(others)
        return best, alternatives, [text.detected for text in texts]

    @staticmethod
    async def _batched(
        batcher: Batcher, sentences: list[str], hypotheses: int, disconnected: Callable[[], Awaitable[bool]]
    ) -> list[list[str]]:
        """The sentences' translations from `batcher`; a client that has gone takes its sentences out of the queue
        (ApiError 499). ApiError 503 where the queue is full, 500 where the model fails."""
        work = asyncio.ensure_future(batcher.translate(sentences, hypotheses))
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_SECONDS)
                if not work.done() and await disconnected():
                    raise ApiError(499, "Client closed the request")
            return work.result()
        except QueueFull as error:
            raise ApiError(503, f"Slowdown: {error}", headers={"Retry-After": "1"}) from error
        except ApiError:
            raise
        except Exception as error:
            raise ApiError(500, f"Cannot translate text: {error}") from error
        finally:
            work.cancel()
