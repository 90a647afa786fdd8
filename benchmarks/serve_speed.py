"""Serving speed: vanilla-serve's throughput and latency at 1, 8 and 32 concurrent clients against the offline batch
job of the same backend (vanilla-translate's batching: the ceiling that batching across requests aims at).

For each system (torch fp32 and bf16 with vanilla-serve's continuous batching, by default, or batch by batch: the
`-batches` systems, `--batching batches`; CTranslate2 float32 and int8), the script starts `vanilla-serve MODEL` with
that backend in a process of its own on a free port of 127.0.0.1 (no cache: `--cache-size 0`), and for each client
count runs that many client threads, each posting `--per-request` consecutive sentences as one paragraph per request
to POST /translate (1: one sentence a request), one request after the other on a connection of its own kept open
(HTTP keep-alive, as browsers and client libraries' sessions do), each taking the next request not yet sent, until
every sentence has been sent once: that many requests are in flight until the last ones (had each client a fixed
share, the clients of a worker process holding fewer connections, whose batches are smaller and steps quicker,
would finish first and leave that process idle while the others' clients still wait).
Reported: sentences per second (all sentences / wall time), the median (p50) and 95th percentile (p95) of request
latency and the server's mean batch in sentences (from its /metrics: with continuous batching, the
sentences in the batch at each decoding step); and, at the most clients, where the machine's CPU time went, per
sentence (Linux's /proc): the server's event loop (its main thread: HTTP, parsing, sentence splitting, batching),
its other threads (the model), the client threads, and the share of the machine left idle. Beside them the offline
job: the same
backend, in this process, translating all the sentences in batches of similar length within `--max-tokens` source
tokens; the same job cut first into groups of as many sentences as the most clients have in flight (clients x
per-request), each group batched alone: what batching those requests as they come can give, since no batch can hold
more; and the same groups made of sentences of similar length (all sorted by length, then cut): what a scheduler that
kept the lengths of a batch alike could give with that many in flight. Ratios printed: server at the most clients /
offline (the target: at least 0.8), / offline in groups and / in sorted groups, server at the most clients / one
client (at least 4), and CTranslate2 int8 / torch bf16 at the most clients (at least 2).

Sentences: the English side of the built-in corpus's test split (`--pair`, built on first use), or `--sentences
FILE` (a JSONL file of the corpus layout, or plain text, one sentence a line), first split into sentences as the
server splits text (so that the server and the offline job translate the same sentences), at most `--limit`.
The client threads run in this process and share the machine with the server: on 2 cores they take a part of it.
`--torch-workers N` serves the torch systems with `vanilla-serve --workers N` (N processes, each with 1/N of the
CPU threads).

    python benchmarks/serve_speed.py --model runs/demo
    python benchmarks/serve_speed.py --model runs/demo --systems torch-bf16,ct2-int8 --clients 1,32 --limit 300
"""

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vanilla_training.batching import TokenBudgetBatchSampler
from vanilla_training.serving.backends import CTranslate2Backend, TorchBackend
from vanilla_training.serving.paragraphs import sentences as sentences_of
from vanilla_training.serving.paragraphs import split_text
from vanilla_training.translator import load_translator

SYSTEMS = {  # backend, precision or quantization, vanilla-serve's --batching
    "torch-fp32": ("torch", "fp32", "continuous"),
    "torch-bf16": ("torch", "bf16", "continuous"),
    "torch-fp32-batches": ("torch", "fp32", "batches"),
    "torch-bf16-batches": ("torch", "bf16", "batches"),
    "ct2-float32": ("ctranslate2", "float32", "batches"),
    "ct2-int8": ("ctranslate2", "int8", "batches"),
}
DEFAULT_SYSTEMS = "torch-fp32,torch-bf16,ct2-float32,ct2-int8"


def read_sentences(args: argparse.Namespace) -> list[str]:
    """The source sentences to translate, split as the server splits text, at most `args.limit`."""
    if args.sentences is None:
        from vanilla_training.corpus import load_corpus

        source = args.pair.split("-")[0]
        texts = [pair[source] for pair in load_corpus(args.pair)["test"]["translation"]]
    else:
        lines = args.sentences.read_text(encoding="utf-8").splitlines()
        texts = [
            json.loads(line)["translation"][args.pair.split("-")[0]] if line.startswith("{") else line for line in lines
        ]
    language = args.pair.split("-")[0]
    sentences = [sentence for text in texts for sentence in sentences_of(split_text(text, language))]
    return sentences[: args.limit]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    model: str, system: str, cache: Path, log: Path, max_tokens: int | None, workers: int = 1
) -> tuple[subprocess.Popen, str]:
    """vanilla-serve with the system's backend (and `max_tokens` a batch, if given) in `workers` processes, once it
    answers /health."""
    backend, kind, batching = SYSTEMS[system]
    port = free_port()
    option = ["--precision", kind, "--batching", batching] if backend == "torch" else []
    option += [] if backend == "torch" else ["--quantization", kind, "--ct2-cache", str(cache)]
    command = [sys.executable, "-m", "vanilla_training.cli.serve", model, "--port", str(port), "--backend", backend]
    command += [*option, "--cache-size", "0", "--log-level", "warning", "--max-queue", "100000"]
    command += ["--workers", str(workers)]
    command += [] if max_tokens is None else ["--max-tokens", str(max_tokens)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vanilla-serve exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5):
                return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"vanilla-serve did not start: {log.read_text()}")


def connect(url: str) -> http.client.HTTPConnection:
    """A connection to the server at `url`, kept open between requests."""
    return http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=600)


def post(connection: http.client.HTTPConnection, text: str, source: str, target: str) -> float:
    """Seconds to translate `text` through POST /translate on `connection` (kept open between requests)."""
    body = json.dumps({"q": text, "source": source, "target": target})
    started = time.perf_counter()
    connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    if response.status != 200:
        raise RuntimeError(f"POST /translate answered {response.status}: {answer}")
    return time.perf_counter() - started


def warm_up(url: str, sentences: list[str], source: str, target: str) -> None:
    """One request of two sentences before the clients start: the model has run, and the sentence splitter's process
    (which a line of two sentences needs) has started and answered, so that neither is in the first measurement."""
    with contextlib.closing(connect(url)) as connection:
        post(connection, " ".join(sentences[:2]), source, target)


def batch_totals(url: str) -> tuple[float, float]:
    """Sentences translated by the model and batches run so far, from the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
        families = text_string_to_metric_families(response.read().decode())
    totals = {"sum": 0.0, "count": 0.0}
    for family in families:
        if family.name == "vanilla_serve_batch_sentences":
            for sample in family.samples:
                for kind in totals:
                    if sample.name.endswith("_" + kind):
                        totals[kind] += sample.value
    return totals["sum"], totals["count"]


def stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command's name: state, ppid, ... (field 3 onwards)."""
    return path.read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of the main threads of process `pid` and of its children (`--workers`: the worker
    processes) and of their other threads, and of the machine's idle time (all cores), from Linux's /proc; empty
    where there is none."""
    if not Path("/proc/stat").exists():
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    processes = [pid]
    for process in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError):
            if process.name.isdigit() and stat_fields(process / "stat")[1] == str(pid):
                processes.append(int(process.name))
    seconds = {"event_loop": 0.0, "other_threads": 0.0}
    for process in processes:
        for task in Path(f"/proc/{process}/task").iterdir():
            fields = stat_fields(task / "stat")
            used = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
            seconds["event_loop" if task.name == str(process) else "other_threads"] += used
    seconds["idle"] = int(Path("/proc/stat").read_text().split()[4]) / ticks
    return seconds


def measure_server(
    url: str, sentences: list[str], per_request: int, clients: int, source: str, target: str, pid: int
) -> dict:
    """Sentences per second, latency percentiles and the server's mean batch (sentences) with `clients` threads
    taking the requests in turn (each `per_request` consecutive sentences joined by a space), and the CPU
    milliseconds per sentence of the server (`pid`; its event loop and its other threads) and of the clients, and
    the machine's idle share (`cpu_seconds`)."""
    requests = [" ".join(sentences[i : i + per_request]) for i in range(0, len(sentences), per_request)]
    unsent = iter(requests)  # each client takes the next request when its last is answered (next() holds the GIL)

    def client(_: int) -> list[float]:
        with contextlib.closing(connect(url)) as connection:
            return [post(connection, text, source, target) for text in unsent]

    sentences_before, batches_before = batch_totals(url)
    cpu_before, clients_before = cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = [latency for share in pool.map(client, range(clients)) for latency in share]
    seconds = time.perf_counter() - started
    if len(latencies) != len(requests):
        raise RuntimeError(f"{len(latencies)} requests answered of {len(requests)}")
    cpu_after, clients_after = cpu_seconds(pid), time.process_time()
    sentences_after, batches_after = batch_totals(url)
    result = {
        "sentences_per_second": len(sentences) / seconds,
        "sentences_per_batch": (sentences_after - sentences_before) / max(batches_after - batches_before, 1),
        "p50": float(np.percentile(latencies, 50)),
        "p95": float(np.percentile(latencies, 95)),
    }
    if cpu_before:
        for name in ("event_loop", "other_threads"):
            result[f"{name}_ms"] = (cpu_after[name] - cpu_before[name]) * 1000 / len(sentences)
        result["clients_ms"] = (clients_after - clients_before) * 1000 / len(sentences)
        result["idle"] = (cpu_after["idle"] - cpu_before["idle"]) / (seconds * (os.cpu_count() or 1))
    return result


def measure_offline(
    model: str, system: str, sentences: list[str], max_tokens: int, group: int, cache: Path
) -> dict[str, float]:
    """Sentences per second of the same backend translating all the sentences as one batch job ("offline"), in
    groups of `group` consecutive sentences, each group batched alone ("offline_in_groups"), and in groups of `group`
    sentences of similar length ("offline_in_sorted_groups")."""
    backend_name, kind, _ = SYSTEMS[system]
    translator = load_translator(model)
    backend = TorchBackend(translator, kind) if backend_name == "torch" else CTranslate2Backend(translator, kind, cache)
    lengths = np.array(translator.token_counts(sentences))

    def batches(start: int, end: int) -> list[list[int]]:
        sampler = TokenBudgetBatchSampler(lengths[start:end], max_tokens, shuffle=False)
        return [[start + i for i in batch] for batch in sampler]

    backend.translate(sentences[:4])  # warm-up
    speeds = {}
    for name, step in (("offline", len(sentences)), ("offline_in_groups", group)):
        started = time.perf_counter()
        for start in range(0, len(sentences), step):
            for batch in batches(start, start + step):
                backend.translate([sentences[i] for i in batch])
        speeds[name] = len(sentences) / (time.perf_counter() - started)
    by_length = np.argsort(lengths, kind="stable")
    started = time.perf_counter()
    for start in range(0, len(sentences), group):
        backend.translate([sentences[i] for i in by_length[start : start + group]])
    speeds["offline_in_sorted_groups"] = len(sentences) / (time.perf_counter() - started)
    return speeds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a run folder or model folder (vanilla-serve's MODEL)")
    parser.add_argument("--pair", default="en-de", help="language pair (default: en-de)")
    parser.add_argument("--sentences", type=Path, help="JSONL or text file (default: the built-in test verses)")
    parser.add_argument("--limit", type=int, default=1000, help="at most this many sentences (default: 1000)")
    parser.add_argument("--per-request", type=int, default=1, help="sentences per request (default: 1)")
    parser.add_argument("--clients", default="1,8,32", help="concurrent client counts (default: 1,8,32)")
    parser.add_argument(
        "--systems", default=DEFAULT_SYSTEMS, help=f"of {', '.join(SYSTEMS)} (default: {DEFAULT_SYSTEMS})"
    )
    parser.add_argument("--max-tokens", type=int, default=4096, help="offline batch budget (default: 4096)")
    parser.add_argument(
        "--server-max-tokens", type=int, help="vanilla-serve's --max-tokens (default: vanilla-serve's own)"
    )
    parser.add_argument(
        "--torch-workers",
        type=int,
        default=1,
        help="vanilla-serve's --workers for the torch systems (default: 1; CTranslate2's always 1)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    args.clients = [int(count) for count in args.clients.split(",")]
    if args.per_request < 1 or min(args.clients) < 1 or args.torch_workers < 1:
        parser.error("--per-request, --clients and --torch-workers must be at least 1")
    args.systems = args.systems.split(",")
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    return args


def measure_systems(args: argparse.Namespace, sentences: list[str]) -> dict[str, dict]:
    """Each system's offline figures, then its server's at each number of clients (a server of its own each)."""
    source, target = args.pair.split("-")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="serve-speed-") as folder:
        cache = Path(folder) / "ct2"
        offline: dict[tuple[str, str], dict[str, float]] = {}  # by backend and kind: the server's batching aside
        for system in args.systems:
            group = max(args.clients) * args.per_request
            backend = SYSTEMS[system][:2]
            if backend not in offline:
                offline[backend] = measure_offline(args.model, system, sentences, args.max_tokens, group, cache)
            results[system] = dict(offline[backend])
            workers = args.torch_workers if SYSTEMS[system][0] == "torch" else 1
            process, url = start_server(
                args.model, system, cache, Path(folder) / f"{system}.log", args.server_max_tokens, workers
            )
            try:
                warm_up(url, sentences, source, target)
                for clients in args.clients:
                    results[system][clients] = measure_server(
                        url, sentences, args.per_request, clients, source, target, process.pid
                    )
            finally:
                process.terminate()
                process.wait(timeout=120)
    return results


def print_table(args: argparse.Namespace, sentences: list[str], results: dict[str, dict]) -> None:
    """The Markdown table: each system's offline figures and its server's at each number of clients."""
    print(
        f"{len(sentences)} sentences ({args.pair}), {args.per_request} a request, model {args.model}, "
        f"torch systems in {args.torch_workers} worker process(es)"
    )
    group = max(args.clients) * args.per_request
    header = f"| system | offline sent/s | offline in groups of {group} | in sorted groups of {group} | "
    print(header + " | ".join(f"{c} clients: sent/s, p50, p95, batch" for c in args.clients) + " |")
    print("|---" * (4 + len(args.clients)) + "|")
    for system, result in results.items():
        cells = [
            f"{r['sentences_per_second']:.1f}, {r['p50'] * 1000:.0f} ms, {r['p95'] * 1000:.0f} ms, "
            f"{r['sentences_per_batch']:.0f}"
            for r in (result[c] for c in args.clients)
        ]
        offline = (
            f"| {system} | {result['offline']:.1f} | {result['offline_in_groups']:.1f} | "
            f"{result['offline_in_sorted_groups']:.1f} | "
        )
        print(offline + " | ".join(cells) + " |")


def print_ratios(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """Each system's throughput at the most clients against offline and against the fewest clients, where its
    CPU time went, and ct2-int8 against torch-bf16."""
    most, fewest = max(args.clients), min(args.clients)
    for system, result in results.items():
        at_most = result[most]["sentences_per_second"]
        print(
            f"{system}: {most} clients / offline {at_most / result['offline']:.2f}x, "
            f"/ offline in groups {at_most / result['offline_in_groups']:.2f}x, "
            f"/ in sorted groups {at_most / result['offline_in_sorted_groups']:.2f}x, "
            f"{most} clients / {fewest} client(s) {at_most / result[fewest]['sentences_per_second']:.2f}x"
        )
    for system, result in results.items():
        if "idle" in result[most]:
            cpu = result[most]
            print(
                f"{system} at {most} clients, CPU per sentence: event loop {cpu['event_loop_ms']:.2f} ms, other "
                f"server threads {cpu['other_threads_ms']:.2f} ms, clients {cpu['clients_ms']:.2f} ms; "
                f"machine idle {cpu['idle']:.0%}"
            )
    if {"ct2-int8", "torch-bf16"} <= results.keys():
        ratio = results["ct2-int8"][most]["sentences_per_second"] / results["torch-bf16"][most]["sentences_per_second"]
        print(f"ct2-int8 / torch-bf16 at {most} clients: {ratio:.2f}x")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    sentences = read_sentences(args)
    results = measure_systems(args, sentences)
    print_table(args, sentences, results)
    print_ratios(args, results)
    if args.json is not None:
        summary = {"sentences": len(sentences), "per_request": args.per_request, "torch_workers": args.torch_workers}
        summary["results"] = results
        args.json.write_text(json.dumps(summary, indent=2))
    return results


if __name__ == "__main__":
    main()
