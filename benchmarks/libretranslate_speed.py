"""LibreTranslate against vanilla-serve on the same model: verses per second, p50 and p95 latency at 1, 8 and 32
clients, one verse a request and five a request, and the CPU time a verse costs each server.

The model (`--model`, a run folder) is exported with `vanilla-export-argos` (int8, as LibreTranslate's own packages)
into an argos home of this run's own, and LibreTranslate (`--libretranslate`: the console script of a virtual
environment of its own, `pip install libretranslate==1.9.6 spacy`) is started on it offline: an empty package index
(`ARGOS_PACKAGE_INDEX` holding `[]`), `--load-only SRC,TGT`, spaCy's rule-based sentence splitting from the package
(`ARGOS_CHUNK_TYPE=SPACY`). Systems, one server at a time on 127.0.0.1 (`--port` and the ports after it):

- `lt-default`: LibreTranslate with its defaults (CTranslate2 with 1 inter-thread and its own intra-threads,
  waitress with 4 threads);
- `lt-inter2`: the same with `ARGOS_INTER_THREADS=2 ARGOS_INTRA_THREADS=1`, one translation a core at once (the
  best of the thread settings on 2 cores in issue 53's first measurements);
- `torch-fp32`, `torch-bf16`, `ct2-float32`, `ct2-int8`: vanilla-serve as `serve_speed.py` starts it (no cache;
  torch in `--torch-workers` processes), with `--serve-options` added (e.g. `--batch-wait-ms 0`: at one client
  the batcher's default wait of 5 ms for other sentences is added to every request).

Each client count runs that many client threads, each sending one request after the other on a connection kept
open, taking the next request not yet sent (serve_speed.py's clients, whose `post` is used: both servers answer
LibreTranslate's `POST /translate` with JSON `{"q", "source", "target"}`). Verses: the source side of the built-in
test split (`--pair`), split into sentences as vanilla-serve splits text, at most `--limit`. The CPU time of a verse
is the server process's (all its threads and child processes, from Linux's /proc) over the verses sent. Ratios
printed: each vanilla-serve system over the faster LibreTranslate setting at each client count. With `--profile
DIR` (py-spy installed apart: `pip install py-spy`), each server is sampled while one client sends one verse a
request, and the time a verse its Python code holds the GIL (the server's own work, not the native code of the
model and tokenizers) is split by where the samples fall (`WHERE`).

    python benchmarks/libretranslate_speed.py --model runs/demo --libretranslate lt-venv/bin/libretranslate
    python benchmarks/libretranslate_speed.py --model runs/demo --libretranslate lt-venv/bin/libretranslate \\
        --systems lt-inter2,ct2-int8 --clients 1,8 --per-request 1 --limit 40
    python benchmarks/libretranslate_speed.py --model runs/demo --libretranslate lt-venv/bin/libretranslate \\
        --systems lt-inter2,ct2-int8 --clients 1 --per-request 1 --profile profiles
"""

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from serve_speed import SYSTEMS, connect, cpu_seconds, post, read_sentences, warm_up

from vanilla_training.export.argos import export_argos

LIBRETRANSLATE = {  # the settings of each LibreTranslate system (argos-translate reads them from the environment)
    "lt-default": {},
    "lt-inter2": {"ARGOS_INTER_THREADS": "2", "ARGOS_INTRA_THREADS": "1"},
}
DEFAULT_SYSTEMS = "lt-default,lt-inter2,torch-fp32,ct2-int8"
WHERE = {  # where a sample of `--profile` is: the first place whose words its frames hold (the model: the last frame)
    "sentence splitting": ("pysbd", "spacy", "minisbd", "paragraphs.py"),
    "tokenizing": ("tokenizers", "sentencepiece", "tokenization_", "tokenizer.py"),
    "the model": ("backends.py", "argostranslate/translate.py", "continuous.py", "ctranslate2", "/torch/"),
    "HTTP, framework, event loop": ("uvicorn", "starlette", "fastapi", "waitress", "flask", "werkzeug", "asyncio"),
}


def argos_home(model: str, folder: Path) -> Path:
    """An argos home in `folder` holding the package of `model` and an empty package index."""
    home = folder / "argos"
    packages = home / "data" / "argos-translate" / "packages"
    packages.mkdir(parents=True)
    (home / "index.json").write_text("[]")
    with zipfile.ZipFile(export_argos(model, folder / "model.argosmodel")) as package:
        package.extractall(packages)
    return home


def wait_until_up(process: subprocess.Popen, url: str, log: Path) -> tuple[subprocess.Popen, str]:
    """`process` and `url` once GET `url` answers; RuntimeError with the server's log if it exits or takes 5 minutes."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return process, url.rsplit("/", 1)[0]
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()}")


def start_libretranslate(
    command: str, home: Path, settings: dict[str, str], languages: tuple[str, str], port: int, log: Path
) -> tuple[subprocess.Popen, str]:
    """LibreTranslate on 127.0.0.1:`port` with the package in `home`, offline, once it answers GET /languages."""
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "ARGOS_PACKAGE_INDEX": home.as_uri() + "/",
        "ARGOS_CHUNK_TYPE": "SPACY",
        **settings,
    }
    arguments = [command, "--host", "127.0.0.1", "--port", str(port), "--load-only", ",".join(languages)]
    with log.open("wb") as output:
        process = subprocess.Popen(arguments, env=env, stdout=output, stderr=output)
    return wait_until_up(process, f"http://127.0.0.1:{port}/languages", log)


def start_vanilla_serve(args, system: str, port: int, folder: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """vanilla-serve with the system's backend on 127.0.0.1:`port` (as serve_speed.py starts it, with
    `--serve-options` added), once it answers GET /health."""
    backend, kind, batching = SYSTEMS[system]
    workers = args.torch_workers if backend == "torch" else 1
    command = [sys.executable, "-m", "vanilla_training.cli.serve", args.model, "--port", str(port)]
    command += ["--backend", backend, "--cache-size", "0", "--log-level", "warning", "--max-queue", "100000"]
    command += ["--workers", str(workers), *args.serve_options.split()]
    if backend == "torch":
        command += ["--precision", kind, "--batching", batching]
    else:
        command += ["--quantization", kind, "--ct2-cache", str(folder / "ct2")]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=output)
    return wait_until_up(process, f"http://127.0.0.1:{port}/health", log)


def measure(url: str, sentences: list[str], per_request: int, clients: int, languages: tuple, pid: int) -> dict:
    """Verses per second, p50 and p95 latency (seconds) and the server's CPU milliseconds a verse, with `clients`
    threads taking the requests (`per_request` consecutive verses joined by a space) in turn."""
    requests = [" ".join(sentences[i : i + per_request]) for i in range(0, len(sentences), per_request)]
    unsent = iter(requests)

    def client(_: int) -> list[float]:
        with contextlib.closing(connect(url)) as connection:
            return [post(connection, text, *languages) for text in unsent]

    before = cpu_seconds(pid)
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = [latency for share in pool.map(client, range(clients)) for latency in share]
    seconds = time.perf_counter() - started
    after = cpu_seconds(pid)
    if len(latencies) != len(requests):
        raise RuntimeError(f"{len(latencies)} requests answered of {len(requests)}")
    used = sum(after.get(name, 0) - before.get(name, 0) for name in ("event_loop", "other_threads"))
    return {
        "verses_per_second": len(sentences) / seconds,
        "p50": float(np.percentile(latencies, 50)),
        "p95": float(np.percentile(latencies, 95)),
        "cpu_ms": used * 1000 / len(sentences),
    }


def py_spy() -> str | None:
    """py-spy of this environment, else the PATH's, or None."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile(url: str, sentences: list[str], languages: tuple, pid: int, out: Path) -> dict[str, float]:
    """Milliseconds a verse that the server's Python code held the GIL (its own work: CTranslate2, tokenizers and
    other native code run without it), by where py-spy found it (all threads and child processes, 250 samples a
    second), while one client sends `sentences` one a request; the samples (py-spy's raw format) go to `out`."""
    command = [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--gil", "--rate", "250"]
    spy = subprocess.Popen([*command, "--format", "raw", "--output", str(out)], stdout=subprocess.DEVNULL)
    time.sleep(2)  # py-spy attaches
    measure(url, sentences, 1, 1, languages, pid)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    found = dict.fromkeys([*WHERE, "elsewhere"], 0.0)
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.rsplit(";", 1)[-1]
        where = next(
            (
                place
                for place, words in WHERE.items()
                if any(word in (leaf if place == "the model" else stack) for word in words)
            ),
            "elsewhere",
        )
        found[where] += int(count) / 250 * 1000 / len(sentences)
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a run folder of vanilla-train (vanilla-serve's MODEL)")
    parser.add_argument("--libretranslate", required=True, help="the libretranslate command of its own venv")
    parser.add_argument("--pair", default="en-de", help="language pair (default: en-de)")
    parser.add_argument("--sentences", type=Path, help="JSONL or text file (default: the built-in test verses)")
    parser.add_argument("--limit", type=int, default=300, help="at most this many verses (default: 300)")
    parser.add_argument("--per-request", default="1,5", help="verses a request (default: 1,5)")
    parser.add_argument("--clients", default="1,8,32", help="concurrent client counts (default: 1,8,32)")
    known = ", ".join([*LIBRETRANSLATE, *SYSTEMS])
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"of {known} (default: {DEFAULT_SYSTEMS})")
    parser.add_argument("--torch-workers", type=int, default=2, help="vanilla-serve --workers for torch (default 2)")
    parser.add_argument("--port", type=int, default=5301, help="the first port of the servers (default: 5301)")
    parser.add_argument(
        "--serve-options", default="", help='more options of vanilla-serve, e.g. "--batch-wait-ms 0" (default: none)'
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure the systems this many times, in turn (A, B, A, B, ...), and give each ratio's median over the "
        "rounds: on a machine whose speed drifts, a ratio within one round compares neighbours in time (default: 1)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="also sample each server with py-spy (installed apart) while one client sends one verse a request, "
        "write the samples to this folder and print where its Python code held the GIL, in ms a verse",
    )
    args = parser.parse_args(argv)
    args.clients = [int(count) for count in args.clients.split(",")]
    args.per_request = [int(count) for count in args.per_request.split(",")]
    args.systems = args.systems.split(",")
    unknown = set(args.systems) - LIBRETRANSLATE.keys() - SYSTEMS.keys()
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {known}")
    if args.profile and py_spy() is None:
        parser.error("--profile needs py-spy (pip install py-spy)")
    if min(args.clients + args.per_request + [args.rounds]) < 1:
        parser.error("--clients, --per-request and --rounds must be at least 1")
    return args


def run_system(args, system: str, home: Path, folder: Path, port: int, sentences: list[str]) -> dict:
    """The measurements of one system, its server started on `port` and stopped after."""
    languages = tuple(args.pair.split("-"))
    log = folder / f"{system}.log"
    if system in LIBRETRANSLATE:
        process, url = start_libretranslate(args.libretranslate, home, LIBRETRANSLATE[system], languages, port, log)
    else:
        process, url = start_vanilla_serve(args, system, port, folder, log)
    try:
        warm_up(url, sentences, *languages)
        cells = {
            (per_request, clients): measure(url, sentences, per_request, clients, languages, process.pid)
            for per_request, clients in itertools.product(args.per_request, args.clients)
        }
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            found = profile(url, sentences, languages, process.pid, args.profile / f"{system}.txt")
            print(f"{system}, 1 client, GIL held, ms a verse: " + ", ".join(f"{k} {v:.2f}" for k, v in found.items()))
        return cells
    finally:
        process.terminate()
        process.wait(timeout=120)


def report(args, results: dict[str, dict], count: int) -> None:
    """The table (one row a system) and the ratios to the faster LibreTranslate setting."""
    print(f"{count} verses ({args.pair}), model {args.model}; cells: verses/s, p50, p95, server CPU ms a verse")
    keys = list(itertools.product(args.per_request, args.clients))
    print("| system | " + " | ".join(f"{p} a request, {c} clients" for p, c in keys) + " |")
    print("|---" * (1 + len(keys)) + "|")
    for system, cells in results.items():
        shown = [
            f"{r['verses_per_second']:.1f}, {r['p50'] * 1000:.0f} ms, {r['p95'] * 1000:.0f} ms, {r['cpu_ms']:.1f} ms"
            for r in (cells[key] for key in keys)
        ]
        print(f"| {system} | " + " | ".join(shown) + " |")
    if not any(system in LIBRETRANSLATE for system in results):
        return
    for key in keys:
        best = fastest_libretranslate(results, key)
        speed = results[best][key]["verses_per_second"]
        ratios = ", ".join(f"{system} {ratio(results, system, key):.2f}x" for system in vanilla_systems(results))
        print(f"{key[0]} a request, {key[1]} clients, over {best} ({speed:.1f} verses/s): {ratios}")


def fastest_libretranslate(results: dict[str, dict], key: tuple[int, int]) -> str:
    """The LibreTranslate setting that served the most verses a second in the cell `key`."""
    libretranslate = [system for system in results if system in LIBRETRANSLATE]
    return max(libretranslate, key=lambda system: results[system][key]["verses_per_second"])


def vanilla_systems(results: dict[str, dict]) -> list[str]:
    return [system for system in results if system not in LIBRETRANSLATE]


def ratio(results: dict[str, dict], system: str, key: tuple[int, int]) -> float:
    """`system`'s verses a second over the faster LibreTranslate setting's, in the cell `key`."""
    return (
        results[system][key]["verses_per_second"]
        / results[fastest_libretranslate(results, key)][key]["verses_per_second"]
    )


def report_medians(args, rounds: list[dict[str, dict]]) -> None:
    """Each vanilla-serve system's ratio to the faster LibreTranslate setting of its own round: the median over the
    rounds, and the least and the most."""
    if not any(system in LIBRETRANSLATE for system in rounds[0]):
        return
    for per_request, clients in itertools.product(args.per_request, args.clients):
        for system in vanilla_systems(rounds[0]):
            ratios = [ratio(results, system, (per_request, clients)) for results in rounds]
            print(
                f"{per_request} a request, {clients} clients, {system} over LibreTranslate's faster setting, "
                f"{len(rounds)} rounds: median {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x)"
            )


def main(argv: list[str] | None = None) -> list[dict]:
    """The results of each round (a dict of each system's cells); `--profile` samples the first round's servers."""
    args = parse_args(argv)
    sentences = read_sentences(argparse.Namespace(pair=args.pair, sentences=args.sentences, limit=args.limit))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="libretranslate-speed-") as tmp:
        folder = Path(tmp)
        home = argos_home(args.model, folder) if set(args.systems) & LIBRETRANSLATE.keys() else folder
        for number in range(1, args.rounds + 1):
            results = {}
            for port, system in enumerate(args.systems, start=args.port):
                results[system] = run_system(args, system, home, folder, port, sentences)
            if args.rounds > 1:
                print(f"round {number} of {args.rounds}")
            report(args, results, len(sentences))
            rounds.append(results)
            args.profile = None
    if args.rounds > 1:
        report_medians(args, rounds)
    return rounds


if __name__ == "__main__":
    main()
