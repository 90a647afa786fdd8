"""Hostile inputs against a real `vanilla-serve`: each answered (status, seconds) while /health is asked every 20 ms
from another process, and a one-sentence request's latency alone and beside long requests (issues 50 and 61).

Issue 61's requests: a .docx of 60,000 empty paragraphs to /translate_file, /detect of 990,000 characters, HTML
with `<![`, an unclosed comment and `<code>` in a sentence, /detect of a raw UTF-8 form (as `curl --data` sends it),
short English words with `source=auto` (as a list, then each alone), a `zh-Hant` target, and a suggestion sent as a
raw UTF-8 form then read back from the server's SQLite file (`--suggestions --suggestions-db` in a temporary
folder).

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
import contextlib
import dataclasses
import io
import json
import multiprocessing
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from serve_speed import free_port, read_sentences

SHORT = "Jesus wept."
ANSWER_SHOWN = 60  # characters of each answer printed


JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
SHORT_ENGLISH = ("OK", "Menu", "Hotel", "Taxi", "Pizza", "Help", "Stop", "Home")  # issue 61: refused as German


@dataclasses.dataclass(frozen=True)
class Hostile:
    """A hostile request: what it is, where it goes, its body and content type."""

    name: str
    path: str
    body: bytes
    content_type: str = JSON


def empty_paragraphs_docx(paragraphs: int) -> bytes:
    """A .docx of `paragraphs` empty paragraphs and one sentence (issue 61: python-docx takes seconds over it)."""
    import docx

    document = docx.Document()
    for _ in range(paragraphs):
        document.add_paragraph("")
    document.add_paragraph(SHORT)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def multipart(fields: dict[str, str], filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with `fields` and the file `filename`, and its content type."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'
    body = "".join(parts).encode() + head.encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def hostile_requests(source: str, target: str) -> list[Hostile]:
    """Each hostile request: issue 50's to /translate, then issue 61's (files, /detect, HTML, forms, detection)."""

    def body(q: object, source: str = source, **fields) -> bytes:
        return json.dumps({"q": q, "source": source, "target": target, **fields}).encode()

    groups = (4999 - 3) // 4  # "..[" + "111 " * groups with the last space a "]": 4,999 characters
    docx_body, docx_type = multipart({"source": source, "target": target}, "empty.docx", empty_paragraphs_docx(60_000))
    return [
        Hostile(
            "`..[111 111 111 111 111 111 111 111 111]` (39 characters)",
            "/translate",
            body("..[" + " ".join(["111"] * 9) + "]"),
        ),
        Hostile(
            f"the same family at 4,999 characters ({groups:,} groups)",
            "/translate",
            body("..[" + " ".join(["111"] * groups) + "]"),
        ),
        Hostile('`"y"*4999`', "/translate", body("y" * 4999)),
        Hostile("emoji only", "/translate", body("\U0001f642\U0001f44d \U0001f389")),
        Hostile('a lone surrogate, `"\\ud800 Jesus wept."`', "/translate", body("\ud800 " + SHORT)),
        Hostile("JSON nested 100,000 deep", "/translate", b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        Hostile("100 texts of 5,000 characters", "/translate", body(["Jesus wept. " * 416 + "Amen"] * 100)),
        Hostile(
            "German text, `source=auto`",
            "/translate",
            body("Im Anfang schuf Gott den Himmel und die Erde.", source="auto"),
        ),
        Hostile(".docx of 60,000 empty paragraphs (6.8 kB-ish)", "/translate_file", docx_body, docx_type),
        Hostile("/detect of 990,000 characters", "/detect", json.dumps({"q": "Guten Tag. " * 90_000}).encode()),
        Hostile('`"Hello <![ world"`, `format=html`', "/translate", body("Hello <![ world", format="html")),
        Hostile(
            "an unclosed trailing `<!--`, `format=html`", "/translate", body(f"{SHORT} <!-- a note", format="html")
        ),
        Hostile(
            "`<code>` inside a sentence, `format=html`",
            "/translate",
            body("Use <code>ls</code> to list the files.", format="html"),
        ),
        Hostile("/detect of raw UTF-8 `q=Grüße aus Köln` (curl --data)", "/detect", "q=Grüße aus Köln".encode(), FORM),
        Hostile(
            f"{', '.join(SHORT_ENGLISH)} as a list, `source=auto`",
            "/translate",
            body(list(SHORT_ENGLISH), source="auto"),
        ),
        Hostile(
            "target `zh-Hant` (not served)",
            "/translate",
            json.dumps({"q": SHORT, "source": source, "target": "zh-Hant"}).encode(),
        ),
    ]


def send(url: str, payload: bytes, path: str = "/translate", content_type: str = JSON) -> tuple[int, float, bytes]:
    """(HTTP status, seconds, answer) of a POST of `payload` to `path`."""
    request = urllib.request.Request(url + path, payload, {"Content-Type": content_type})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        answer = error.read()
        status = error.code
    return status, time.perf_counter() - started, answer


def short_english_alone(url: str, target: str) -> int:
    """How many of `SHORT_ENGLISH`, each sent alone with `source=auto`, are answered 200."""
    bodies = [json.dumps({"q": word, "source": "auto", "target": target}).encode() for word in SHORT_ENGLISH]
    return sum(send(url, payload)[0] == 200 for payload in bodies)


def suggestion_kept(url: str, database: Path) -> bool:
    """Whether a suggestion sent as a raw UTF-8 form is in the server's SQLite file, as sent."""
    send(url, "q=Köln&s=Cologne&source=de&target=en".encode(), "/suggest", FORM)
    with contextlib.closing(sqlite3.connect(database)) as connection:
        return connection.execute("SELECT q, s FROM suggestions").fetchall() == [("Köln", "Cologne")]


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
        shorts = [send(url, short)[:2]]
        while not all(future.done() for future in longs):
            time.sleep(0.1)
            shorts.append(send(url, short)[:2])
        answers = [future.result()[:2] for future in longs]
    return {
        "short": max(seconds for _, seconds in shorts),
        "short_not_200": sum(status != 200 for status, _ in shorts),
        "long": max(seconds for _, seconds in answers),
        "long_statuses": {str(code): sum(status == code for status, _ in answers) for code, _ in answers},
    }


def short_after_abandoned(url: str, clients: int, source: str, target: str) -> float:
    """The seconds of the short request sent once `clients` clients have each sent the backtracking family at 4,999
    characters and closed their connection after 0.3 s, unanswered (issue 61's starvation by abandoned requests)."""
    hostile = json.dumps({"q": "..[" + "111 " * 1240 + "]", "source": source, "target": target}).encode()

    def abandon() -> None:
        request = urllib.request.Request(url + "/translate", hostile, {"Content-Type": JSON})
        with contextlib.suppress(OSError):  # the timeout, as the client gives up
            urllib.request.urlopen(request, timeout=0.3).read()

    with ThreadPoolExecutor(clients) as pool:
        for _ in range(clients):
            pool.submit(abandon)
    return send(url, json.dumps({"q": SHORT, "source": source, "target": target}).encode())[1]


def abandoned_cases(url: str, source: str, target: str) -> dict[str, float]:
    """`short_after_abandoned` after 12 and after 24 clients, printed."""
    found = {}
    for clients in (12, 24):
        seconds = found[f"after {clients} abandoned"] = short_after_abandoned(url, clients, source, target)
        print(f"`{SHORT}` after {clients} clients sent the family at 4,999 characters and left: {seconds:.2f} s")
    return found


def start(model: str, port: int, options: list[str]) -> subprocess.Popen:
    """`vanilla-serve MODEL --cache-size 0` with `options` on `port`, once it answers /health."""
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


def verses_of_5000_characters(pair: str) -> str:
    """The pair's first test verses, as many as fit in 5,000 characters (the server's default --char-limit)."""
    text = ""
    for verse in read_sentences(argparse.Namespace(pair=pair, sentences=None, limit=10_000)):
        if len(text) + len(verse) + 1 > 5000:
            break
        text += verse + " "
    return text.strip()


def send_hostile_requests(url: str, source: str, target: str) -> list[dict]:
    """Each of `hostile_requests`, one after the other: its status, seconds and the start of its answer (printed as
    a table row)."""
    print("| request | answer | seconds |\n|---|---|---|")
    sent = []
    for hostile in hostile_requests(source, target):
        status, seconds, answer = send(url, hostile.body, hostile.path, hostile.content_type)
        shown = answer.decode("utf-8", "replace")[:ANSWER_SHOWN]
        sent.append({"request": hostile.name, "status": status, "seconds": seconds, "answer": shown})
        print(f"| {hostile.name} | {status} `{shown}` | {seconds:.2f} |")
    return sent


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a run folder or model folder (vanilla-serve's MODEL)")
    parser.add_argument("--pair", default="en-de", help="the model's language pair (default: en-de)")
    parser.add_argument("--clients", type=int, default=32, help="long clients at once in the last case (default: 32)")
    parser.add_argument("--serve-options", default="", help='more vanilla-serve options, e.g. "--max-tokens 4096"')
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    source, target = args.pair.split("-")
    long_body = json.dumps({"q": verses_of_5000_characters(args.pair), "source": source, "target": target}).encode()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    database = Path(tempfile.mkdtemp()) / "suggestions.db"
    server = start(args.model, port, [*args.serve_options.split(), "--suggestions", "--suggestions-db", str(database)])
    stop, slowest = multiprocessing.Event(), multiprocessing.Value("d", 0.0)
    prober = multiprocessing.Process(target=probe_health, args=(url, stop, slowest))
    results: dict = {"hostile": [], "short": {}}
    try:
        short = json.dumps({"q": SHORT, "source": source, "target": target}).encode()
        for _ in range(2):
            send(url, short)
        prober.start()
        results["hostile"] = send_hostile_requests(url, source, target)
        results["short_english_alone"] = short_english_alone(url, target)
        results["suggestion_kept"] = suggestion_kept(url, database)
        print(f"\n{', '.join(SHORT_ENGLISH)} alone, `source=auto`: {results['short_english_alone']} answered 200")
        print(f"a raw UTF-8 suggestion kept in SQLite as sent: {results['suggestion_kept']}")
        stop.set()
        prober.join()
        results["slowest_health_seconds"] = slowest.value
        print(f"\nslowest /health during them: {slowest.value:.3f} s")
        results["short"]["alone"] = statistics.median(send(url, short)[1] for _ in range(7))
        cases = {
            "beside 5,000 characters of verses": [long_body],
            'beside "y"*4999': [json.dumps({"q": "y" * 4999, "source": source, "target": target}).encode()],
            f"beside {args.clients} clients of 5,000 characters": [long_body] * args.clients,
            'beside two "y"*509 (one sentence each, --max-tokens full)': [
                json.dumps({"q": "y" * 509, "source": source, "target": target}).encode()
            ]
            * 2,
        }
        print(f"`{SHORT}` alone: median {results['short']['alone']:.3f} s of 7")
        results["short"].update(abandoned_cases(url, source, target))
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
