"""The server's Prometheus metrics, in a registry of their own (one per app); with several worker processes
(`vanilla-serve --workers`), prometheus_client's multiprocess mode adds up theirs."""

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

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

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format: this app's, or, where the workers of a multiprocess server
        keep theirs in the folder `MULTIPROCESS_FOLDER` names, all the workers' added up."""
        if MULTIPROCESS_FOLDER not in os.environ:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)
