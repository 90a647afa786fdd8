"""What the routes share (`Service`, on `app.state.service`): the settings, the served pairs with their batchers,
the detector and the metrics; and the one translation path of a checked request: its texts laid out in sentences
(`documents`), the sentences batched with other requests' (`batcher`), the translations put back."""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from ..corpus import LANGUAGE_NAMES
from .access import Access
from .backends import Backend
from .batcher import Batcher, QueueFull, batcher_for
from .detect import Detector
from .documents import layout, layout_sentences, translated_versions
from .files import FileStore
from .metrics import Metrics
from .parsing import ApiError, TranslateCall
from .settings import ServeSettings

DISCONNECT_POLL_SECONDS = 0.05


def language_name(code: str) -> str:
    """The English name of a language code (the code itself where the package has no name for it)."""
    return LANGUAGE_NAMES.get(code, code)


@dataclasses.dataclass
class Pair:
    """A served model: its backend, its batcher and its languages."""

    backend: Backend
    source: str
    target: str
    batcher: Batcher | None = None


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
        self.sources = {source for source, _ in self.pairs}
        self.detector = Detector(self.codes)
        self.metrics = Metrics()
        self.access = Access(settings)  # API keys and rate limits
        self.files = FileStore()  # translated files for /download_file
        self.executors: list[ThreadPoolExecutor] = []

    def start(self, model_thread: ThreadPoolExecutor) -> None:
        """Starts a batcher for each pair (in the running event loop): on `model_thread`, or on threads of its own
        for a backend with several lanes."""
        for (source, target), pair in self.pairs.items():
            executor = model_thread
            if pair.backend.lanes > 1:
                executor = ThreadPoolExecutor(max_workers=pair.backend.lanes, thread_name_prefix=f"{source}-{target}")
                self.executors.append(executor)
            pair.batcher = batcher_for(pair.backend, executor, self.settings, f"{source}-{target}", self.metrics)
            pair.batcher.start()

    async def close(self) -> None:
        """Stops the batchers once their queues are empty, and the lanes' threads."""
        for pair in self.pairs.values():
            await pair.batcher.close()
        for executor in self.executors:
            executor.shutdown()

    def languages(self) -> list[dict]:
        """GET /languages: each served code, its name and its targets."""
        return [
            {"code": code, "name": language_name(code), "targets": sorted(t for s, t in self.pairs if s == code)}
            for code in self.codes
        ]

    def pair_for(self, call: TranslateCall) -> tuple[Pair, dict | None]:
        """The pair that translates `call`, and the detected language where its source is `auto`; ApiError 400
        where no model translates that pair."""
        source, target, detected = call.source, call.target, None
        if source == "auto":
            candidates = {code for code in self.sources if (code, target) in self.pairs}
            detected = self.detector.detect("\n".join(call.texts), among=candidates or self.sources)[0]
            source = detected["language"]
        pair = self.pairs.get((source, target))
        if pair is None:
            raise ApiError(
                400,
                f"{language_name(target)} ({target}) is not available as a target language from "
                f"{language_name(source)} ({source})",
            )
        return pair, detected

    async def translate(
        self, call: TranslateCall, disconnected: Callable[[], Awaitable[bool]]
    ) -> tuple[list[str], list[list[str]], dict | None]:
        """Each text's best translation, its alternatives, and the detected language (source `auto`)."""
        pair, detected = self.pair_for(call)
        hypotheses = 1 if call.text_format == "html" else call.alternatives + 1  # as LibreTranslate: none for HTML
        fits = pair.backend.translator.fits
        layouts = [layout(text, call.text_format, pair.source, fits) for text in call.texts]
        counts = [len(layout_sentences(parts)) for parts in layouts]
        if sum(counts) > self.settings.sentence_limit:
            raise ApiError(
                400,
                f"Invalid request: request ({sum(counts):,} sentences) exceeds sentence limit "
                f"({self.settings.sentence_limit:,})",
            )
        sentences = [sentence for parts in layouts for sentence in layout_sentences(parts)]
        results = await self._batched(pair.batcher, sentences, hypotheses, disconnected)
        best, alternatives, start = [], [], 0
        for parts, count in zip(layouts, counts, strict=True):
            text, others = translated_versions(parts, results[start : start + count], call.text_format)
            start += count
            best.append(text)
            alternatives.append(others)
        return best, alternatives, detected

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
