"""Suggested translations (`POST /suggest`, with `--suggestions`) kept in a SQLite file, in LibreTranslate's table
`suggestions (q, s, source, target)`, so that LibreTranslate's own scripts/suggestions-to-jsonl.py reads it too.
Each is written by a connection of its own, committed at once: the workers of one server share the file (SQLite
locks it while one writes)."""

import contextlib
import sqlite3
from pathlib import Path

LOCK_SECONDS = 10.0  # how long a write waits for another worker's
TABLE = (
    "CREATE TABLE IF NOT EXISTS suggestions "
    '("q" TEXT NOT NULL, "s" TEXT NOT NULL, "source" TEXT NOT NULL, "target" TEXT NOT NULL)'
)


class Suggestions:
    """The suggestions in the SQLite file `path` (made, with its folder, where missing)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._write(TABLE, ())

    def add(self, q: str, s: str, source: str, target: str) -> None:
        """Keeps a suggestion: `s`, a better translation of `q` from `source` into `target`."""
        self._write("INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)", (q, s, source, target))

    def _write(self, statement: str, values: tuple) -> None:
        with contextlib.closing(sqlite3.connect(self.path, timeout=LOCK_SECONDS)) as connection, connection:
            connection.execute(statement, values)
