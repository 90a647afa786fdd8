"""Documents for `/translate_file`: the texts of a `.txt`, `.html`, `.docx` or `.odt` file, and the same file with
its texts translated; and the store that keeps translated files for `/download_file` until they expire.

A `.txt` file is one plain text and an `.html` file one HTML text (translated as `/translate` does with
`format=html`). A `.docx` file (python-docx) is translated a paragraph at a time, in the body and in tables, each
paragraph's translation shared out over its runs (the stretches of one character style) at the word edges nearest
their boundaries, as `html_text` places inline tags. An `.odt` file (odfdo) is translated a paragraph or heading at
a time; the paragraph keeps its own style, and its character styles (`text:span`) are given up to its style. A
paragraph that holds more than text (a frame, a note, a field) is kept as it is.
"""

import contextlib
import dataclasses
import io
import itertools
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docx
import odfdo
from docx.table import Table
from docx.text.paragraph import Paragraph as DocxParagraph

from .html_text import Block, Tag, place_tags
from .paragraphs import Piece

FORMATS = (".txt", ".html", ".docx", ".odt")
ODT_TEXT_CHILDREN = frozenset({"text:span", "text:a", "text:s", "text:tab", "text:line-break", "text:soft-page-break"})
FILES_FOLDER = Path(tempfile.gettempdir()) / "vanilla-serve-files"  # shared by a server's workers
STORED_NAME = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9_.-]+")


class DocumentError(ValueError):
    """A file that cannot be translated: its format is not supported, or it cannot be read as its format."""


@dataclasses.dataclass
class Document:
    """A file's texts to translate, their format (`text` or `html`), and how to write the file back translated."""

    texts: list[str]
    text_format: str
    write: Callable[[list[str]], bytes]  # the translations of `texts`, in order, to the translated file's bytes


def read_document(filename: str, data: bytes) -> Document:
    """The `Document` of the file `filename` holding `data`; DocumentError if it is not one of `FORMATS` or not
    readable as its format."""
    suffix = Path(filename).suffix.lower()
    if suffix not in FORMATS:
        raise DocumentError(f"file format not supported ({suffix or 'no extension'}; supported: {', '.join(FORMATS)})")
    if suffix in (".txt", ".html"):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise DocumentError(f"the file is not UTF-8 text ({error.reason} at byte {error.start})") from None
        text_format = "html" if suffix == ".html" else "text"
        return Document([text], text_format, lambda translations: translations[0].encode("utf-8"))
    try:
        return _read_docx(data) if suffix == ".docx" else _read_odt(data)
    except Exception as error:  # python-docx and odfdo raise many kinds for a file they cannot read
        raise DocumentError(f"the file cannot be read as {suffix}: {type(error).__name__}: {error}") from None


def share_out(parts: list[str], translation: str) -> list[str]:
    """`translation` (of the text `"".join(parts)`) cut into as many parts, each boundary at the word edge nearest
    its place in the source by the diagonal alignment of `html_text`; `"".join` of the result is `translation`."""
    text = "".join(parts)
    boundaries = list(itertools.accumulate(len(part) for part in parts))[:-1]
    block = Block(text, tuple(Tag(offset, "", "void") for offset in boundaries))
    _, _, positions = place_tags(block, [Piece(text, True)], [translation])
    cuts = [0, *positions, len(translation)]
    return [translation[start:end] for start, end in itertools.pairwise(cuts)]


def _docx_paragraphs(container) -> Iterator[DocxParagraph]:
    """The paragraphs of a python-docx document or table cell, in order, with those of its tables (a merged cell
    once)."""
    for item in container.iter_inner_content():
        if isinstance(item, Table):
            seen = set()
            for row in item.rows:
                for cell in row.cells:
                    if id(cell._tc) not in seen:  # a merged cell is given once per grid column it spans
                        seen.add(id(cell._tc))
                        yield from _docx_paragraphs(cell)
        else:
            yield item


def _docx_runs(paragraph: DocxParagraph) -> list:
    """The paragraph's runs in order, those inside its hyperlinks included."""
    return [run for item in paragraph.iter_inner_content() for run in getattr(item, "runs", [item])]


def _read_docx(data: bytes) -> Document:
    document = docx.Document(io.BytesIO(data))
    paragraphs = [
        runs for p in _docx_paragraphs(document) if (runs := _docx_runs(p)) and "".join(r.text for r in runs).strip()
    ]

    def write(translations: list[str]) -> bytes:
        for runs, translation in zip(paragraphs, translations, strict=True):
            for run, part in zip(runs, share_out([run.text for run in runs], translation), strict=True):
                if part != run.text:  # a run left as it was keeps what it holds beside text (a picture)
                    run.text = part
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document(["".join(run.text for run in runs) for runs in paragraphs], "text", write)


def _read_odt(data: bytes) -> Document:
    document = odfdo.Document(io.BytesIO(data))
    elements = [
        element
        for element in document.body.get_elements("descendant::text:p | descendant::text:h")
        if element.text_recursive.strip() and all(child.tag in ODT_TEXT_CHILDREN for child in element.children)
    ]

    def write(translations: list[str]) -> bytes:
        for element, translation in zip(elements, translations, strict=True):
            attributes = dict(element.attributes)
            element.clear()
            for name, value in attributes.items():
                element.set_attribute(name, value)
            element.append_plain_text(translation)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document([element.text_recursive for element in elements], "text", write)


def safe_name(filename: str) -> str:
    """The file's name as a download may carry it: its last path part, with characters other than letters, digits,
    `.`, `_` and `-` made `_`."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(filename.replace("\\", "/")).name).strip("._")
    return name or "file"


class FileStore:
    """Translated files kept in `folder` for `lifetime` seconds (LibreTranslate keeps them 30 minutes), each under a
    name no one can guess: a random hex id, a dot, and the file's own name (the name it is downloaded as)."""

    def __init__(self, folder: Path = FILES_FOLDER, lifetime: float = 1800.0):
        self.folder, self.lifetime = folder, lifetime
        folder.mkdir(parents=True, exist_ok=True)

    def put(self, filename: str, data: bytes) -> str:
        """Keeps `data`; returns the name to download it by."""
        self.remove_expired()
        stored = f"{secrets.token_hex(16)}.{safe_name(filename)}"
        (self.folder / stored).write_bytes(data)
        return stored

    def get(self, stored: str) -> tuple[str, bytes]:
        """(the name to download as, the file's bytes); KeyError if there is no such file or it has expired;
        ValueError for a name that is not one `put` gives."""
        if not STORED_NAME.fullmatch(stored):
            raise ValueError("Invalid filename")
        self.remove_expired()
        path = self.folder / stored
        if not path.is_file():
            raise KeyError(stored)
        return stored.split(".", 1)[1], path.read_bytes()

    def remove_expired(self) -> None:
        """Deletes the files older than the lifetime."""
        oldest = time.time() - self.lifetime
        for path in self.folder.iterdir():
            with contextlib.suppress(FileNotFoundError):  # another worker removed it first
                if STORED_NAME.fullmatch(path.name) and path.stat().st_mtime < oldest:
                    path.unlink()
