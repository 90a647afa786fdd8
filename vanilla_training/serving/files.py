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
import math
import os
import re
import secrets
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import docx
import odfdo
from docx.table import Table
from docx.text.paragraph import Paragraph as DocxParagraph
from lxml import etree

from .html_text import Block, Tag, place_tags
from .paragraphs import Piece

FORMATS = (".txt", ".html", ".docx", ".odt")
ODT_TEXT_CHILDREN = frozenset({"text:span", "text:a", "text:s", "text:tab", "text:line-break", "text:soft-page-break"})
FILES_FOLDER = Path(tempfile.gettempdir()) / f"vanilla-serve-files-{os.getuid()}"  # this user's servers' workers
ARCHIVE_EXPANSION = 10  # a .docx or .odt may unpack to this many times the largest request body
TEXT_PARTS = {  # where a .docx or an .odt keeps its text, and the element holding it (None: every element)
    ".docx": ("word/document.xml", "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}t"),
    ".odt": ("content.xml", None),
}
ODT_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
ODT_SPACE, ODT_SPACE_COUNT = f"{{{ODT_TEXT}}}s", f"{{{ODT_TEXT}}}c"
STORED_NAME = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9_.-]+")


class DocumentError(ValueError):
    """A file that cannot be translated: its format is not supported, or it cannot be read as its format."""


@dataclasses.dataclass
class Document:
    """A file's texts to translate, their format (`text` or `html`), and how to write the file back translated."""

    texts: list[str]
    text_format: str
    write: Callable[[list[str]], bytes]  # the translations of `texts`, in order, to the translated file's bytes


def read_document(filename: str, data: bytes, char_limit: int = -1, unpacked_limit: int = 10_000_000) -> Document:
    """The `Document` of the file `filename` holding `data`; DocumentError if it is not one of `FORMATS`, not
    readable as its format, or over a limit: its text over `char_limit` characters (-1: none), counted before the
    file is parsed, or a `.docx`/`.odt` unpacking to more than `unpacked_limit` bytes."""
    suffix = Path(filename).suffix.lower()
    if suffix not in FORMATS:
        raise DocumentError(f"file format not supported ({suffix or 'no extension'}; supported: {', '.join(FORMATS)})")
    if suffix in (".txt", ".html"):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise DocumentError(f"the file is not UTF-8 text ({error.reason} at byte {error.start})") from None
        check_characters(len(text), char_limit)
        text_format = "html" if suffix == ".html" else "text"
        return Document([text], text_format, lambda translations: translations[0].encode("utf-8"))
    try:
        check_characters(archive_characters(data, suffix, unpacked_limit), char_limit)
        return _read_docx(data) if suffix == ".docx" else _read_odt(data)
    except DocumentError:
        raise
    except Exception as error:  # zipfile, lxml, python-docx and odfdo raise many kinds for a file they cannot read
        raise DocumentError(f"the file cannot be read as {suffix}: {type(error).__name__}: {error}") from None


def check_characters(characters: int, char_limit: int) -> None:
    """DocumentError where a file's `characters` are over `char_limit` (-1: no limit)."""
    if char_limit != -1 and characters > char_limit:
        raise DocumentError(f"the file's text ({characters:,}) exceeds text limit ({char_limit:,})")


def archive_characters(data: bytes, suffix: str, unpacked_limit: int) -> int:
    """The characters of the text in a `.docx` (its `w:t` runs of text) or an `.odt` (the text of its content),
    counted by lxml in one streaming pass, before python-docx or odfdo build the document; DocumentError where the
    archive unpacks to more than `unpacked_limit` bytes (sizes as its directory records them, which zipfile holds
    each member's reading to)."""
    part, text_tag = TEXT_PARTS[suffix]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(member.file_size for member in archive.infolist())
        if unpacked > unpacked_limit:
            raise DocumentError(f"the file unpacks to {unpacked:,} bytes, over the limit of {unpacked_limit:,}")
        with archive.open(part) as xml:
            characters = 0
            for _, element in etree.iterparse(xml, tag=text_tag, resolve_entities=False, no_network=True):
                characters += len(element.text or "")
                if text_tag is None:  # an .odt: the text between elements, and the spaces `text:s` stands for
                    characters += len(element.tail or "")
                    if element.tag == ODT_SPACE:
                        characters += int(element.get(ODT_SPACE_COUNT, "1"))
                element.clear(keep_tail=True)
            return characters


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


class StoreFull(Exception):
    """The store holds its capacity in files that have not expired; `retry_after` seconds until the oldest does."""

    def __init__(self, retry_after: int):
        super().__init__(f"the store of translated files is full: try again in {retry_after} s")
        self.retry_after = retry_after


def private_folder(folder: Path) -> Path:
    """`folder`, created readable by this user alone where it is missing; RuntimeError where it exists but is not a
    folder of this user's that no one else may read or write (another user could have made it first in a shared
    temporary folder)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = folder.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise RuntimeError(
            f"{folder} is not a private folder of this user (owner uid {status.st_uid}, mode "
            f"{stat.filemode(status.st_mode)}): remove it, or set TMPDIR to another temporary folder"
        )
    return folder


class FileStore:
    """Translated files kept in `folder` (this user's alone) for `lifetime` seconds (LibreTranslate keeps them 30
    minutes), `capacity` bytes at most, each under a name no one can guess: a random hex id, a dot, and the file's
    own name (the name it is downloaded as); each file is readable by this user alone."""

    def __init__(self, folder: Path | None = None, lifetime: float = 1800.0, capacity: int = 1_000_000_000):
        self.folder = private_folder(folder or FILES_FOLDER)
        self.lifetime, self.capacity = lifetime, capacity

    def check_room(self, size: int) -> None:
        """StoreFull unless a file of `size` bytes fits beside the files that have not expired."""
        kept = self.remove_expired()
        if sum(size for _, size in kept) + size > self.capacity:
            oldest = min((modified for modified, _ in kept), default=time.time())
            raise StoreFull(max(1, math.ceil(oldest + self.lifetime - time.time())))

    def put(self, filename: str, data: bytes) -> str:
        """Keeps `data` (StoreFull where it does not fit); returns the name to download it by."""
        self.check_room(len(data))
        stored = f"{secrets.token_hex(16)}.{safe_name(filename)}"
        descriptor = os.open(self.folder / stored, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(descriptor, "wb") as file:
            file.write(data)
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

    def remove_expired(self) -> list[tuple[float, int]]:
        """Deletes the files older than the lifetime; (modified time, size) of each file kept."""
        oldest, kept = time.time() - self.lifetime, []
        for path in self.folder.iterdir():
            with contextlib.suppress(FileNotFoundError):  # another worker removed it first
                if STORED_NAME.fullmatch(path.name):
                    status = path.stat()
                    if status.st_mtime < oldest:
                        path.unlink()
                    else:
                        kept.append((status.st_mtime, status.st_size))
        return kept
