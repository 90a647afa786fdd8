"""A direction of translation, the one notion of it for training, evaluation, translation and serving."""

from collections.abc import Collection
from typing import NamedTuple

PIVOT = "en"  # the language to pivot through where several are shared


class Direction(NamedTuple):
    """From `source` into `target` (ISO 639-1 codes); "en-de" as text. A tuple, so that it unpacks as
    `source, target = direction`, and is written to JSON as `["en", "de"]`."""

    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.source}-{self.target}"

    @classmethod
    def parse(cls, text: str) -> "Direction":
        """`"de-en"` -> `Direction("de", "en")`; ValueError for text not of the form SRC-TGT."""
        parts = text.split("-") if isinstance(text, str) else []
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"language pair {text!r} is not of the form SRC-TGT (ISO 639-1 codes, e.g. de-en)")
        return cls(*parts)


def pivot_language(source: str, target: str, directions: Collection[tuple[str, str]]) -> str | None:
    """The language through which two of `directions`, one after the other, translate `source` into `target`
    (`PIVOT` where it can, else the first such language by code); None where none does."""
    middles = [middle for start, middle in directions if start == source and (middle, target) in directions]
    return min(middles, key=lambda code: (code != PIVOT, code)) if middles else None
