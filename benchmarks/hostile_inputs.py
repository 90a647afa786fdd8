"""Hostile inputs against a real `vanilla-serve`: each answered (status, seconds) while /health is asked every 20 ms
from another process, and a one-sentence request's latency alone and beside long requests (issue 50).

The server is `vanilla-serve MODEL --cache-size 0` (torch, its defaults otherwise: the cache off so that nothing is
answered from it) on a free port of 127.0.0.1. Each hostile request is sent alone, after two warm-up requests, by a
client in this process (the time from sending to the whole answer read). Then `Jesus wept.` (the short request) is
timed alone (median of 7), and sent 0.15 s after a long request starts and every 0.1 s while it runs (the slowest of
those answers reported): beside one request of 5,000 characters of test verses, beside `"y"*4999`, and beside
`--clients` clients each sending 5,000 characters of verses at once.

    python benchmarks/hostile_inputs.py --model runs/demo
    python benchmarks/hostile_inputs.py --model runs/demo --serve-options "--max-tokens 4096"
"""

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from serve_speed import free_port, read_sentences

SHORT = "Jesus wept."


def hostile_requests(source: str, target: str) -> list[tuple[str, bytes]]:
    """(what it is, JSON body) of each hostile request."""

    def body(q: object, source: str = source) -> bytes:
        return json.dumps({"q": q, "source": source, "target": target}).encode()

    groups = (4999 - 3) // 4  # "..[" + "111 " * groups with the last space a "]": 4,999 characters
    return [
        ("`..[111 111 111 111 111 111 111 111 111]` (39 characters)", body("..[" + " ".join(["111"] * 9) + "]")),
        (f"the same family at 4,999 characters ({groups:,} groups)", body("..[" + " ".join(["111"] * groups) + "]")),
        ('`"y"*4999`', body("y" * 4999)),
        ("emoji only", body("\U0001f642\U0001f44d \U0001f389")),
        ('a lone surrogate, `"\\ud800 Jesus wept."`', body("\ud800 " + SHORT)),
        ("JSON nested 100,000 deep", b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("100 texts of 5,000 characters", body(["Jesus wept. " * 416 + "Amen"] * 100)),
        ("German text, `source=auto`", body("Im Anfang schuf Gott den Himmel und die Erde.", source="auto")),
    ]


def send(url: str, payload: bytes) -> tuple[int, float]:
    """(HTTP status, seconds) of POST /translate with `payload`."""
    request = urllib.request.Request(url + "/translate", payload, {"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        error.read()
        status = error.code
    return status, time.perf_counter() - started


def probe_health(url: str, stop: multiprocessing.Event, slowest: multiprocessing.Value) -> None:
    """Asks /health every 20 ms until `stop`, keeping the slowest answer's seconds (an unanswered one counts as 60)."""
    while not stop.is_set():
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url + "/health", timeout=60) as response:
                response.read()
            seconds = time.perf_counter() - started
        except OSError:
            seconds = 60.0
        slowest.value = max(slowest.value, seconds)
        time.sleep(0.02)


def short_beside(url: str, long_bodies: list[bytes], source: str, target: str) -> dict:
    """The slowest short request (and how many were not answered 200), the slowest long one and the long ones'
    statuses, with the short one sent 0.15 s after the long ones start and every 0.1 s while any runs."""
    short = json.dumps({"q": SHORT, "source": source, "target": target}).encode()
    with ThreadPoolExecutor(len(long_bodies)) as pool:
        longs = [pool.submit(send, url, payload) for payload in long_bodies]
        time.sleep(0.15)
        shorts = [send(url, short)]
        while not all(future.done() for future in longs):
            time.sleep(0.1)
            shorts.append(send(url, short))
        answers = [future.result() for future in longs]
    return {
        "short": max(seconds for _, seconds in shorts),
        "short_not_200": sum(status != 200 for status, _ in shorts),
        "long": max(seconds for _, seconds in answers),
        "long_statuses": {str(code): sum(status == code for status, _ in answers) for code, _ in answers},
    }


def start(model: str, port: int, options: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "vanilla_training.cli.serve", model, "--port", str(port), "--cache-size", "0"]
    process = subprocess.Popen([*command, "--log-level", "warning", *options])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("vanilla-serve did not answer /health in 300 s")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a run folder or model folder (vanilla-serve's MODEL)")
    parser.add_argument("--pair", default="en-de", help="the model's language pair (default: en-de)")
    parser.add_argument("--clients", type=int, default=32, help="long clients at once in the last case (default: 32)")
    parser.add_argument("--serve-options", default="", help='more vanilla-serve options, e.g. "--max-tokens 4096"')
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    source, target = args.pair.split("-")
    verses = read_sentences(argparse.Namespace(pair=args.pair, sentences=None, limit=10_000))
    long_text = ""
    for verse in verses:
        if len(long_text) + len(verse) + 1 > 5000:
            break
        long_text += verse + " "
    long_body = json.dumps({"q": long_text.strip(), "source": source, "target": target}).encode()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start(args.model, port, args.serve_options.split())
    stop, slowest = multiprocessing.Event(), multiprocessing.Value("d", 0.0)
    prober = multiprocessing.Process(target=probe_health, args=(url, stop, slowest))
    results: dict = {"hostile": [], "short": {}}
    try:
        short = json.dumps({"q": SHORT, "source": source, "target": target}).encode()
        for _ in range(2):
            send(url, short)
        prober.start()
        print("| request | answer | seconds |\n|---|---|---|")
        for name, payload in hostile_requests(source, target):
            status, seconds = send(url, payload)
            results["hostile"].append({"request": name, "status": status, "seconds": seconds})
            print(f"| {name} | {status} | {seconds:.2f} |")
        stop.set()
        prober.join()
        results["slowest_health_seconds"] = slowest.value
        print(f"\nslowest /health during them: {slowest.value:.3f} s")
        results["short"]["alone"] = statistics.median(send(url, short)[1] for _ in range(7))
        cases = {
            "beside 5,000 characters of verses": [long_body],
            'beside "y"*4999': [json.dumps({"q": "y" * 4999, "source": source, "target": target}).encode()],
            f"beside {args.clients} clients of 5,000 characters": [long_body] * args.clients,
        }
        print(f"`{SHORT}` alone: median {results['short']['alone']:.3f} s of 7")
        for name, bodies in cases.items():
            found = results["short"][name] = short_beside(url, bodies, source, target)
            print(
                f"`{SHORT}` {name}: at most {found['short']:.2f} s ({found['short_not_200']} not answered 200);"
                f" the slowest long one {found['long']:.2f} s, statuses {found['long_statuses']}"
            )
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=60)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
