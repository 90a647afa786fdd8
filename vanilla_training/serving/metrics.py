"""The server's Prometheus metrics, in a registry of their own (one per app); with several worker processes
(`vanilla-serve --workers`), prometheus_client's multiprocess mode adds up theirs."""

import contextlib
import dataclasses
import os
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

MULTIPROCESS_FOLDER = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's: where each process keeps its metrics
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """Requests and errors by endpoint and status, their latency, sentences (from the model or the cache) and
    source tokens translated, batch sizes, model time per batch, queue time and the sentences waiting."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter(
            "vanilla_serve_requests", "HTTP requests answered", ["endpoint", "status"], registry=registry
        )
        self.errors = Counter(
            "vanilla_serve_errors",
            "HTTP requests answered with an error (4xx, 5xx)",
            ["endpoint", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "vanilla_serve_request_seconds",
            "Time to answer a request",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.sentences = Counter(
            "vanilla_serve_sentences",
            "Sentences translated, by language pair and by where the answer came from (model or cache)",
            ["pair", "origin"],
            registry=registry,
        )
        self.tokens = Counter(
            "vanilla_serve_source_tokens", "Source tokens translated by the model", ["pair"], registry=registry
        )
        self.batch_sentences = Histogram(
            "vanilla_serve_batch_sentences",
            "Sentences per model batch",
            ["pair"],
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "vanilla_serve_batch_seconds", "Model time per batch", ["pair"], buckets=LATENCY_BUCKETS, registry=registry
        )
        self.queue_seconds = Histogram(
            "vanilla_serve_queue_seconds",
            "Time a sentence waited before its batch started",
            ["pair"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queued = Gauge(
            "vanilla_serve_queued_sentences",
            "Sentences waiting or being translated",
            ["pair"],
            registry=registry,
            multiprocess_mode="livesum",  # with several workers: the sum over those running
        )
        self.rejected = Counter(
            "vanilla_serve_rejected_sentences",
            "Sentences refused because the queue was full",
            ["pair"],
            registry=registry,
        )

    def for_pair(self, pair: str) -> "PairMetrics":
        """The metrics of one batcher (`pair`: its name), labelled once: prometheus_client's `labels` looks its
        child up under a lock at every call, which a batch would otherwise do a dozen times."""
        return PairMetrics(
            from_model=self.sentences.labels(pair, "model"),
            from_cache=self.sentences.labels(pair, "cache"),
            tokens=self.tokens.labels(pair),
            batch_sentences=self.batch_sentences.labels(pair),
            batch_seconds=self.batch_seconds.labels(pair),
            queue_seconds=self.queue_seconds.labels(pair),
            queued=self.queued.labels(pair),
            rejected=self.rejected.labels(pair),
        )

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format: this app's, or, where the workers of a multiprocess server
        keep theirs in the folder `MULTIPROCESS_FOLDER` names, all the workers' added up."""
        if MULTIPROCESS_FOLDER not in os.environ:
            return generate_latest(self.registry)
        forget_dead_workers(os.environ[MULTIPROCESS_FOLDER])
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)


@dataclasses.dataclass(frozen=True)
class PairMetrics:
    """`Metrics`' children of one batcher (see `Metrics.for_pair`)."""

    from_model: Counter
    from_cache: Counter
    tokens: Counter
    batch_sentences: Histogram
    batch_seconds: Histogram
    queue_seconds: Histogram
    queued: Gauge
    rejected: Counter


def forget_dead_workers(folder: str) -> None:
    """Removes from `folder` the live gauges (the queue length) of the worker processes that have ended: a worker
    that died is replaced by uvicorn's supervisor, and its last queue length would otherwise be added to the live
    workers' for good. Their counters and histograms stay: what they counted happened."""
    for path in Path(folder).glob("gauge_live*_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        try:
            os.kill(pid, 0)
        except OSError:  # no such process, or another user's: the pid taken again since the worker ended
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile by another worker's scrape
                mark_process_dead(pid, folder)


class Measure:
    """ASGI middleware counting the HTTP requests by endpoint (the path of the route that answered; `other` where
    none did) and status, and timing them. A request is counted before the last part of its answer is sent, so a
    client that has its answer finds it in /metrics."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics
        self.labelled: dict[tuple[str, int], tuple[Histogram, Counter, Counter | None]] = {}

    def children(self, endpoint: str, status: int) -> tuple[Histogram, Counter, Counter | None]:
        """The latency, request and error (None below 400) children of `endpoint` and `status`, labelled once (a
        route's path, or `other`, and an HTTP status: a few dozen at most)."""
        key = (endpoint, status)
        if key not in self.labelled:
            metrics, label = self.metrics, str(status)
            errors = metrics.errors.labels(endpoint, label) if status >= 400 else None
            self.labelled[key] = (metrics.latency.labels(endpoint), metrics.requests.labels(endpoint, label), errors)
        return self.labelled[key]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status, counted = time.monotonic(), 500, False

        def count() -> None:
            nonlocal counted
            counted = True
            route = scope.get("route")  # set by the router on the scope it was given, once a route matched
            latency, requests, errors = self.children(getattr(route, "path", None) or "other", status)
            latency.observe(time.monotonic() - started)
            requests.inc()
            if errors is not None:
                errors.inc()

        async def send_and_count(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                count()
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            if not counted:  # the app failed before answering, or its answer was cut off
                count()
