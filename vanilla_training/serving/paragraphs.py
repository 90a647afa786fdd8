"""Paragraphs in, paragraphs out: text cut into sentences to translate and the spacing between them, put back
together around the translations with the input's own whitespace and line breaks.

Sentences are found line by line by pysbd (rule-based, offline) with the rules of the source language (English's
where pysbd has none); a blank line, or one that plainly holds one sentence (`plain_sentence`), is taken whole
without asking pysbd, which has nothing to split there and is the server's dearest step per request. A sentence
longer than the model accepts is cut at the clause boundary (`,` `;` `:` and the like) nearest its middle, else at
the space nearest its middle, else in the middle, until every piece fits: text is never dropped.

pysbd's rules are regular expressions, some of which backtrack exponentially on some inputs (0.3.4:
`..[111 111 111 ...]` doubles its time with each group of digits), and Python's `re` holds the GIL while it matches:
pysbd runs in a process of its own (`BoundedSegmenter`), given `SEGMENT_SECONDS` for the lines of one call (a
request's texts together); a line it has not split by then, or when the process dies, is split at its
sentence-ending marks (`SENTENCE_END`, linear), and the process is replaced by a spare started beforehand. A
request whose client has gone (its `Budget` cancelled) stops waiting for pysbd, and stops pysbd working for it.
"""

import dataclasses
import functools
import multiprocessing
import re
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import pysbd
from pysbd.languages import LANGUAGE_CODES, Language

# A dash between spaces is matched from the start of its spaces only: from each space of a long run, `\s+` would
# scan the rest of the run again (quadratic).
CLAUSE_END = re.compile(r"[,;:\u3001\uff0c\uff1b\uff1a\u060c]\s+|[—–]\s*|(?<!\s)\s+[—–-]\s+")
SPACE = re.compile(r"\s+")
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")
SENTENCE_END = re.compile(r"(?<=[.!?\u2026\u3002\uff01\uff1f\u061f\u0964])\s+")
SEGMENT_SECONDS = 0.25  # pysbd's time for the lines of a request's texts
START_SECONDS = 120.0  # the most a fresh pysbd process may take to start
QUOTES = "\"'“”‘’«»„‚"  # quotation marks that `plain_sentence` takes around words
POLL_SECONDS = 0.02  # how often a request waiting for pysbd looks whether its client has gone


@dataclasses.dataclass(frozen=True)
class Piece:
    """A run of the input: a sentence to translate, or the whitespace kept as it is between sentences."""

    text: str
    translate: bool


@functools.lru_cache(maxsize=32)
def segmenter(language: str) -> pysbd.Segmenter:
    """pysbd's segmenter for `language` (English's rules for a language pysbd does not know)."""
    return pysbd.Segmenter(language=language if language in LANGUAGE_CODES else "en", clean=False)


@functools.lru_cache(maxsize=32)
def plain_sentence(language: str) -> re.Pattern:
    """Text that pysbd's rules for `language` leave whole: words of letters and digits (apostrophes and hyphens only
    inside a word) between single spaces, commas, and colons and semicolons where the language does not end a
    sentence with them, quotes (`QUOTES`) just before or after a word or a pause, and at most one of its
    sentence-ending marks, at the very end after two letters. A quote after that mark is left to pysbd, which keeps
    it with the sentence only where it closes a quotation that the mark lies in (`He said "go."`, not `He went."`),
    as are brackets, list markers and pysbd's own placeholder letters (ȸ ȹ). Where a quote may go is never
    ambiguous (before a word; after a word or a pause), so a line that does not match fails in time linear in its
    length."""
    code = language if language in LANGUAGE_CODES else "en"
    marks = "".join(Language.get_language_code(code).Punctuations)
    pauses = "".join(mark for mark in ",;:" if mark not in marks)
    marks, pauses = re.escape(marks), re.escape(pauses)
    letter, character = rf"[^\W\d_ȸȹ{marks}]", rf"[^\W_ȸȹ{marks}]"
    quotes = rf"[{QUOTES}]*"
    word = rf"{quotes}{character}+(?:['’-]{character}+)*{quotes}"
    return re.compile(
        rf"{word}(?:(?:[{pauses}]{quotes})? {word})*(?:[{pauses}]{quotes})?(?:(?<={letter}{letter})[{marks}])?"
    )


def pysbd_sentences(line: str, language: str) -> list[str]:
    """The sentences pysbd's rules for `language` find in `line`, as `Segmenter.segment` finds them but without
    their places in the line: to find those, `segment` compiles a regular expression of each sentence found and
    searches the whole line for it (more than half of its time on unseen verses, and quadratic in the sentences of a
    line that repeats one); `_sentences_of_line` finds them itself, in one pass."""
    return segmenter(language).processor(line).process() if line else []


def serve_segments(connection: Connection) -> None:
    """The pysbd process: says it is ready, then, for each (language, lines) it is sent, sends each line's
    sentences (`pysbd_sentences`) as soon as they are found; it ends when its parent's end of the pipe closes."""
    connection.send("ready")
    while True:
        try:
            language, lines = connection.recv()
        except EOFError:
            return
        for line in lines:
            connection.send(pysbd_sentences(line, language))


class Cancelled(Exception):
    """The client of the request being laid out has gone."""


@dataclasses.dataclass
class Budget:
    """The time pysbd may still take for one request's texts: its own time, not the time spent waiting for
    another request's turn or for a fresh process to start; and whether the request's client has gone
    (`cancelled`, set from another thread)."""

    seconds: float = dataclasses.field(default_factory=lambda: SEGMENT_SECONDS)
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)

    def check(self) -> None:
        """Cancelled if the request's client has gone."""
        if self.cancelled.is_set():
            raise Cancelled("the client has gone")


class SegmenterProcess:
    """One pysbd process (`serve_segments`) and the parent's end of its pipe."""

    def __init__(self):
        context = multiprocessing.get_context("spawn")  # a fork would copy the server's threads' locks
        self.connection, child = context.Pipe()
        self.process = context.Process(target=serve_segments, args=(child,), name="pysbd", daemon=True)
        self.process.start()
        child.close()
        self.ready = False

    def await_ready(self, budget: Budget) -> bool:
        """Waits (at most `START_SECONDS`) for the process to say it is ready; False if it did not (it died)."""
        deadline = time.monotonic() + START_SECONDS
        while not self.ready:
            budget.check()
            try:
                if self.connection.poll(POLL_SECONDS):
                    self.ready = self.connection.recv() == "ready"
                    return self.ready
            except (EOFError, OSError):
                return False
            if time.monotonic() > deadline:
                return False
        return True

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.connection.close()


class BoundedSegmenter:
    """pysbd in a process of its own, one call at a time, given what is left of a request's `Budget` for a call's
    lines: one that runs over, or whose client has gone, is killed and the spare process (started beforehand)
    takes its place, a new spare starting behind it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.current: SegmenterProcess | None = None
        self.spare: SegmenterProcess | None = None

    def start(self) -> None:
        """Starts the process and its spare (where they are not running) without waiting for them."""
        if self.current is None or not self.current.process.is_alive():
            self.current, self.spare = self.spare or SegmenterProcess(), None
        if self.spare is None or not self.spare.process.is_alive():
            self.spare = SegmenterProcess()

    def _replace(self) -> None:
        """Kills the process; the spare takes its place."""
        self.current.stop()
        self.current = None
        self.start()

    def _turn(self, budget: Budget) -> None:
        """Takes the lock, waiting for it as long as the request's client is there."""
        while not self.lock.acquire(timeout=POLL_SECONDS):
            budget.check()

    def segment(self, lines: list[str], language: str, budget: Budget) -> list[list[str] | None]:
        """pysbd's sentences of each line, or None for the lines it has not split within `budget` (which is
        charged with the time it took) or because its process died. Cancelled if the client goes meanwhile."""
        self._turn(budget)
        try:
            self.start()
            found = self._ask(lines, language, budget) if self.current.await_ready(budget) else []
            if len(found) < len(lines):
                self._replace()  # still matching, dead, or working for a client that has gone
        finally:
            self.lock.release()
        budget.check()
        return found + [None] * (len(lines) - len(found))

    def _ask(self, lines: list[str], language: str, budget: Budget) -> list[list[str]]:
        """The sentences of the lines the process splits within `budget` (charged with the time it took), while
        the client is there and the process lives."""
        found: list[list[str]] = []
        started = time.monotonic()
        try:
            self.current.connection.send((language, lines))
            while len(found) < len(lines) and not budget.cancelled.is_set():
                left = budget.seconds - (time.monotonic() - started)
                if left <= 0:
                    break
                if self.current.connection.poll(min(left, POLL_SECONDS)):
                    found.append(self.current.connection.recv())
        except (EOFError, OSError):  # the process died
            pass
        budget.seconds -= time.monotonic() - started
        return found


SEGMENTER = BoundedSegmenter()


def segment_lines(lines: list[str], language: str, budget: Budget) -> list[list[str]]:
    """The sentences of each line: pysbd's (see `BoundedSegmenter`) where it split the line within `budget`, else
    the line cut after each sentence-ending mark followed by whitespace."""
    if not lines:
        return []
    found = SEGMENTER.segment(lines, language, budget) if budget.seconds > 0 else [None] * len(lines)
    return [SENTENCE_END.split(line) if split is None else split for line, split in zip(lines, found, strict=True)]


def _sentences_of_line(line: str, found_sentences: list[str]) -> list[Piece]:
    """The sentences of one line (no line break inside), as `found_sentences` says, and the whitespace around and
    between them; text they leave out (pysbd changes a sentence holding its placeholder characters, `∯` `♨` and the
    like, and such a sentence is not found in the line) is translated all the same, never kept as it is."""
    pieces: list[Piece] = []
    cursor = 0
    for found in found_sentences:
        sentence = found.strip()
        if not sentence:
            continue
        start = line.find(sentence, cursor)
        if start < 0:  # the segmenter changed the text: keep the rest of the line as one sentence
            break
        pieces += _between(line[cursor:start])
        pieces.append(Piece(sentence, True))
        cursor = start + len(sentence)
    pieces += _between(line[cursor:])
    return [piece for piece in pieces if piece.text]


def _between(text: str) -> list[Piece]:
    """Text between the sentences found: its whitespace kept as it is, anything else a sentence to translate."""
    content = text.strip()
    if not content:
        return [Piece(text, False)]
    leading = len(text) - len(text.lstrip())
    return [Piece(text[:leading], False), Piece(content, True), Piece(text[leading + len(content) :], False)]


def _cut_point(sentence: str) -> tuple[int, int]:
    """Where to cut `sentence` (no whitespace at either end) in two: (end of the first part, start of the second),
    at the clause boundary nearest the middle (its punctuation stays with the first part), else at the space
    nearest the middle, else in the middle."""
    middle = len(sentence) / 2
    clauses = [(m.start() + len(m.group().rstrip()), m.end()) for m in CLAUSE_END.finditer(sentence)]
    spaces = [(m.start(), m.end()) for m in SPACE.finditer(sentence)]
    for cuts in (clauses, spaces):
        cuts = [(end, start) for end, start in cuts if 0 < end and start < len(sentence)]
        if cuts:
            return min(cuts, key=lambda cut: abs(cut[0] - middle))
    half = max(1, len(sentence) // 2)
    return half, half


def split_long(sentence: str, fits: Callable[[str], bool]) -> list[Piece]:
    """`sentence` as pieces that each `fits`, cut at clause or word boundaries (see `_cut_point`), with the
    whitespace between them kept; a single character that does not fit is returned as it is (nothing is dropped)."""
    if fits(sentence) or len(sentence) <= 1:
        return [Piece(sentence, True)]
    end, start = _cut_point(sentence)
    gap = [Piece(sentence[end:start], False)] if start > end else []
    return split_long(sentence[:end], fits) + gap + split_long(sentence[start:], fits)


def split_text(
    text: str, language: str, fits: Callable[[str], bool] | None = None, budget: Budget | None = None
) -> list[Piece]:
    """`text` as sentences to translate and the whitespace between them: `"".join(p.text for p in pieces) == text`.
    Line breaks always end a sentence; a line that is neither blank nor plainly one sentence (`plain_sentence`) goes to
    pysbd within `budget` (`SEGMENT_SECONDS` if None: see `segment_lines`); with `fits`, a
    sentence that does not fit is split (`split_long`)."""
    return split_texts([text], language, fits, budget)[0]


def split_texts(
    texts: list[str], language: str, fits: Callable[[str], bool] | None = None, budget: Budget | None = None
) -> list[list[Piece]]:
    """Each of `texts` split as `split_text` splits one, the lines of them all that go to pysbd in one call (one
    round trip to its process for a request's texts or an HTML page's blocks)."""
    budget = Budget() if budget is None else budget
    lines = [[_line(line, language) for line in LINE.findall(text) if line] for text in texts]
    asked = [content for text_lines in lines for _, content, whole in text_lines if not whole]
    found = iter(segment_lines(asked, language, budget))
    split = []
    for text_lines in lines:
        pieces: list[Piece] = []
        for line, content, whole in text_lines:
            pieces += _sentences_of_line(content, [content.strip()] if whole else next(found))
            if len(content) < len(line):
                pieces.append(Piece(line[len(content) :], False))
        if fits is not None:
            pieces = [
                part for piece in pieces for part in (split_long(piece.text, fits) if piece.translate else [piece])
            ]
        split.append(pieces)
    return split


def _line(line: str, language: str) -> tuple[str, str, bool]:
    """(the line, its content without the line break, whether the content is taken whole: `taken_whole`)."""
    content = line.rstrip("\r\n")
    return line, content, taken_whole(content, language)


def taken_whole(line: str, language: str) -> bool:
    """Whether `line` is taken whole without pysbd: it is blank, or plainly one sentence (`plain_sentence`)."""
    return not line.strip() or plain_sentence(language).fullmatch(line.strip()) is not None


def all_taken_whole(texts: list[str], language: str) -> bool:
    """Whether every line of `texts` is taken whole (`taken_whole`): `split_texts` would not ask pysbd."""
    return all(_line(line, language)[2] for text in texts for line in LINE.findall(text) if line)


def sentences(pieces: list[Piece]) -> list[str]:
    """The sentences to translate, in order."""
    return [piece.text for piece in pieces if piece.translate]


def rejoin(pieces: list[Piece], translations: list[str]) -> str:
    """The text with each sentence replaced by its translation (in order) and the whitespace kept."""
    if len(translations) != sum(piece.translate for piece in pieces):
        raise ValueError(f"{len(translations)} translations for {sum(p.translate for p in pieces)} sentences")
    replacements = iter(translations)
    return "".join(next(replacements) if piece.translate else piece.text for piece in pieces)


def translate_paragraphs(
    texts: list[str],
    language: str,
    translate: Callable[[list[str]], list[str]],
    fits: Callable[[str], bool] | None = None,
) -> list[str]:
    """Each text translated sentence by sentence, with its spacing and line breaks kept; `translate` (a list of
    sentences in, their translations out) is called once, with the sentences of all the texts."""
    layouts = [split_text(text, language, fits) for text in texts]
    translations = iter(translate([sentence for pieces in layouts for sentence in sentences(pieces)]))
    return [rejoin(pieces, [next(translations) for _ in sentences(pieces)]) for pieces in layouts]
