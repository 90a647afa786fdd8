"""A direction of translation, the one notion of it for training, evaluation, translation and serving."""

from typing import NamedTuple


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
