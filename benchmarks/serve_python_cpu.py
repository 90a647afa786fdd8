"""The CPU time a verse of vanilla-serve's own Python path, in this process, without the model and without the
network: what is left to cut of the server's work a verse besides the model's.

The model folder's tokenizer is loaded (`--model`) and served by a stand-in backend that answers each sentence with
itself, so that no model time is counted. Verses: the source side of the built-in test split (`--pair`), split as
the server splits text, at most `--limit` (300: `libretranslate_speed.py`'s), sent `--per-request` at a time (joined
by a space, as that script sends them), one request after the other (one client), twice:

- splitting: `Service.lay_out` of each request (sentence splitting, the pysbd process's pipe included, and the
  length check of each sentence), on this thread;
- the whole path: POST /translate through the app's ASGI interface (FastAPI's routing, the middleware, reading the
  JSON body, checking it, laying it out, batching, putting the translations back, the JSON answer), without uvicorn's
  HTTP parsing.

CPU time is `time.process_time()` (every thread of this process) plus the pysbd process's (and its spare's), from
Linux's /proc. Each measurement has a pysbd process of its own, started and warmed up beforehand on the next
`WARM_UP` verses (so that its regular expression cache holds pysbd's patterns and none made of the measured verses,
as in a server that has run a while); pysbd is given 60 s a request rather than `SEGMENT_SECONDS`, so that on a busy
machine no text falls back to the linear cut. Each figure is the least of `--repeats` runs (the least disturbed by
other work), after a warm-up; the pysbd process's part is shown in brackets (in /proc's ticks: 10 ms over the
verses). To compare two versions of the
code, run this script twice with PYTHONPATH set to each checkout:

    PYTHONPATH=/path/to/main python benchmarks/serve_python_cpu.py --model runs/demo
    PYTHONPATH=. python benchmarks/serve_python_cpu.py --model runs/demo
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from serve_speed import read_sentences
from transformers import AutoTokenizer

from vanilla_training.serving import paragraphs
from vanilla_training.serving.app import create_app
from vanilla_training.serving.paragraphs import SEGMENTER, Budget
from vanilla_training.serving.parsing import TranslateCall
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import Translator, model_folder

WARM_UP = 200  # verses after the measured ones, laid out by each fresh pysbd process before it is measured


class EchoBackend:
    """A backend of the model folder's tokenizer that answers each sentence with itself (no model time)."""

    lanes, workers, batch_sentences, decoder, description = 1, 1, None, None, "echo"

    def __init__(self, folder: str, source: str, target: str):
        tokenizer = AutoTokenizer.from_pretrained(folder, split_special_tokens=True)
        self.translator = Translator(None, tokenizer, folder, (source, target))

    def translate(self, sentences: list[str], hypotheses: int = 1, beams: int | None = None) -> list[list[str]]:
        return [[sentence] * hypotheses for sentence in sentences]


def children_cpu_seconds() -> float:
    """CPU seconds so far of this process's child processes (the pysbd process and its spare), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for child in multiprocessing.active_children():
        fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far of this process (every thread) and of its child processes."""
    return time.process_time(), children_cpu_seconds()


async def post(app, body: bytes) -> dict:
    """POST /translate with `body` through the app's ASGI interface; the JSON answer (AssertionError if not 200)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/translate",
        "raw_path": b"/translate",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 5000),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    answer: dict = {}

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays: `is_disconnected` cancels this wait at once

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] = answer.get("body", b"") + message.get("body", b"")

    await app(scope, receive, send)
    assert answer["status"] == 200, answer
    return json.loads(answer["body"])


def fresh_pysbd(service, warm_up: list[TranslateCall]) -> None:
    """A new pysbd process (the spare takes its place, a new spare starts), both started, warmed up on `warm_up`: its
    regular expression cache holds pysbd's own patterns, as in a server that has run a while, and none of the
    measured verses'."""
    SEGMENTER.current.stop()
    SEGMENTER.start()
    for process in (SEGMENTER.current, SEGMENTER.spare):  # started: their imports are not counted
        assert process.await_ready(Budget()), "the pysbd process did not start"
    for call in warm_up:
        service.lay_out(call, Budget())


async def measure(app, texts: list[str], warm_up: list[str], pair: tuple[str, str], repeats: int) -> dict:
    """The CPU seconds (this process's, the pysbd process's) of laying out every text and of translating every
    text through the app, each with a fresh pysbd process warmed up on `warm_up`: the least of `repeats` runs (the
    one least disturbed by other work on the machine)."""
    service = app.state.service
    bodies = [json.dumps({"q": text, "source": pair[0], "target": pair[1]}).encode() for text in texts]
    calls = [TranslateCall([text], False, *pair, "text", 0) for text in texts]
    warm_calls = [TranslateCall([text], False, *pair, "text", 0) for text in warm_up]
    for body in bodies[:5]:
        await post(app, body)  # the app's first requests
    runs: dict[str, list[tuple[float, float]]] = {"splitting": [], "whole path": []}
    for _ in range(repeats):
        fresh_pysbd(service, warm_calls)
        started = cpu_seconds()
        for call in calls:
            service.lay_out(call, Budget())
        runs["splitting"].append(spent(started))
        fresh_pysbd(service, warm_calls)
        started = cpu_seconds()
        for body in bodies:
            await post(app, body)
        runs["whole path"].append(spent(started))
    return {name: min(times, key=sum) for name, times in runs.items()}


def spent(started: tuple[float, float]) -> tuple[float, float]:
    return tuple(now - then for now, then in zip(cpu_seconds(), started, strict=True))


async def run(args, sentences: list[str], warm_up: list[str]) -> None:
    pair = tuple(args.pair.split("-"))
    backend = EchoBackend(model_folder(args.model), *pair)
    app = create_app([backend], ServeSettings(cache_size=0))
    with ThreadPoolExecutor(max_workers=1) as model_thread:
        app.state.service.start(model_thread)
        for per_request in args.per_request:
            texts = [" ".join(sentences[i : i + per_request]) for i in range(0, len(sentences), per_request)]
            seconds = await measure(app, texts, warm_up, pair, args.repeats)
            shown = ", ".join(
                f"{name} {sum(times) / len(sentences) * 1000:.3f} ({times[1] / len(sentences) * 1000:.3f} pysbd)"
                for name, times in seconds.items()
            )
            print(f"{per_request} a request, {len(sentences)} verses, CPU ms a verse: {shown}", flush=True)
        await app.state.service.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="run or model folder (its tokenizer is used)")
    parser.add_argument("--pair", default="en-de", help="language pair (default: en-de)")
    parser.add_argument("--limit", type=int, default=300, help="at most this many verses (default: 300)")
    parser.add_argument("--per-request", default="1,5", help="verses a request (default: 1,5)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each measurement (default: 5)")
    args = parser.parse_args(argv)
    paragraphs.SEGMENT_SECONDS = 60.0  # on a busy machine, no text falls back to the linear cut for want of time
    args.per_request = [int(count) for count in args.per_request.split(",")]
    verses = read_sentences(argparse.Namespace(pair=args.pair, sentences=None, limit=args.limit + WARM_UP))
    asyncio.run(run(args, verses[: args.limit], verses[args.limit :]))


if __name__ == "__main__":
    main()
