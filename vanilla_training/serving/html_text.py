"""HTML in, HTML out, translated a block at a time: the text of a block element together with its inline tags
(`<b>`, `<em>`, `<a>`, `<span>`, `<br>`, ...) is one text to translate, so that inline markup never cuts a sentence;
the inline tags are then put back into the translation. Everything else is kept byte for byte: block tags,
comments, attributes, and the content of `<script>`, `<style>`, `<code>`, `<pre>` and `<textarea>`.

The model is given the block's plain text alone (character references resolved, no markup, no placeholders: a
model trained on plain sentences mangles tokens it has never seen). Each inline tag is placed in the translation by
a diagonal alignment within its sentence: a tag found at a fraction f of a source sentence goes at the fraction f of
that sentence's translation, snapped to the nearest word boundary of its kind (an opening tag before a word, a
closing tag after one, never before its own opening tag). Tags between sentences stay in the whitespace kept there.
No text and no tag is ever dropped; a tag may land a word away from the words it wrapped where the two languages
order their words differently.
"""

import dataclasses
import html
from html.parser import HTMLParser

from .paragraphs import Piece

UNTRANSLATED = frozenset({"script", "style", "code", "pre", "textarea"})
INLINE = frozenset(
    {"a", "abbr", "b", "bdi", "bdo", "br", "cite", "data", "del", "dfn", "em", "font", "i", "img", "ins", "kbd"}
    | {"label", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u"}
    | {"var", "wbr"}
)
VOID = frozenset({"br", "img", "wbr"})
STAND_INS = {"br": "\n"}  # the plain text a tag stands for: a line break ends a sentence as in plain text


@dataclasses.dataclass(frozen=True)
class Tag:
    """An inline tag inside a block: where it stands in the block's plain text and its source as written."""

    offset: int
    raw: str
    kind: str  # "open", "close" or "void"
    stand_in: str = ""  # the plain text the tag stands for in the block's text ("\n" for <br>)


@dataclasses.dataclass(frozen=True)
class Block:
    """A run of text and inline tags: the plain text to translate and its tags, in order."""

    text: str
    tags: tuple[Tag, ...]


class _Events(HTMLParser):
    """Where each parser event starts in the source: (offset, kind, tag name or text), kind being "text" (text to
    translate), "inline" (an inline tag: "open", "close" or "void" with its name) or "markup" (kept as it is)."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.line_starts = [0]  # the parser counts lines by "\n" alone
        for index, character in enumerate(source):
            if character == "\n":
                self.line_starts.append(index + 1)
        self.events: list[tuple[int, str, tuple[str, str] | str | None]] = []
        self.open_untranslated = 0

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _tag(self, tag: str, kind: str) -> None:
        inline = tag in INLINE and not self.open_untranslated
        self.events.append((self._offset(), "inline" if inline else "markup", (kind, tag) if inline else None))

    def handle_starttag(self, tag, attrs):
        self._tag(tag, "void" if tag in VOID else "open")
        self.open_untranslated += tag in UNTRANSLATED

    def handle_endtag(self, tag):
        if tag in UNTRANSLATED and self.open_untranslated:
            self.open_untranslated -= 1
        self._tag(tag, "close")

    def handle_startendtag(self, tag, attrs):
        self._tag(tag, "void")

    def handle_data(self, data):
        self.events.append((self._offset(), "markup" if self.open_untranslated else "text", data))

    def _markup(self, data=None) -> None:
        self.events.append((self._offset(), "markup", None))

    handle_comment = handle_decl = handle_pi = unknown_decl = _markup


def _block(items: list[tuple[str, str, tuple[str, str] | str]]) -> Block | None:
    """The block made of `items` (raw source, kind, name or text), or None where it has no text to translate."""
    text, tags = [], []
    offset = 0
    for raw, kind, value in items:
        if kind == "text":
            text.append(value)
            offset += len(value)
            continue
        tag_kind, name = value
        stand_in = STAND_INS.get(name, "") if tag_kind != "close" else ""
        tags.append(Tag(offset, raw, tag_kind, stand_in))
        text.append(stand_in)
        offset += len(stand_in)
    plain = "".join(text)
    if not any(kind == "text" and value.strip() for _, kind, value in items):
        return None
    return Block(plain, tuple(tags))


def html_segments(source: str) -> list[tuple[str, Block | None]]:
    """`source` cut into (raw source, block to translate or None where it is kept as it is): the raw sources put
    together give `source`. A block is a run of text and inline tags with text in it."""
    parser = _Events(source)
    parser.feed(source)
    parser.close()
    offsets = [offset for offset, *_ in parser.events] + [len(source)]
    segments: list[tuple[str, Block | None]] = []
    if parser.events and offsets[0] > 0:
        segments.append((source[: offsets[0]], None))
    run: list[tuple[str, str, tuple[str, str] | str]] = []

    def end_run() -> None:
        if run:
            segments.append(("".join(raw for raw, *_ in run), _block(run)))
            run.clear()

    for (start, kind, value), end in zip(parser.events, offsets[1:], strict=True):
        if start >= end:
            continue
        if kind == "markup":
            end_run()
            segments.append((source[start:end], None))
        else:
            run.append((source[start:end], kind, value))
    end_run()
    return segments or [(source, None)]


def _word_edges(text: str, kind: str) -> list[int]:
    """The offsets in `text` where a word starts (for an opening tag), ends (a closing tag), or either (void)."""
    edges = []
    for index in range(len(text) + 1):
        before = index > 0 and text[index - 1].isalnum()
        after = index < len(text) and text[index].isalnum()
        if (after and not before and kind != "close") or (before and not after and kind != "open"):
            edges.append(index)
    return edges


def _place(fraction: float, translation: str, kind: str, after: int) -> int:
    """Where in `translation` a tag found at `fraction` of its source sentence goes: the word edge of its kind
    nearest that fraction, at or after `after`."""
    target = fraction * len(translation)
    edges = [edge for edge in _word_edges(translation, kind) if edge >= after]
    return min(edges, key=lambda edge: abs(edge - target)) if edges else max(after, round(target))


def render_block(block: Block, pieces: list[Piece], translations: list[str]) -> str:
    """The block's HTML with its sentences (the pieces of `block.text` to translate) replaced by `translations`,
    its text escaped and its inline tags placed (see the module's docstring)."""
    return _insert_tags(*place_tags(block, pieces, translations))


def place_tags(block: Block, pieces: list[Piece], translations: list[str]) -> tuple[str, tuple[Tag, ...], list[int]]:
    """(the block's text with its sentences replaced by `translations`, its tags, where each tag goes in it)."""
    if len(translations) != sum(piece.translate for piece in pieces):
        raise ValueError(f"{len(translations)} translations for {sum(p.translate for p in pieces)} sentences")
    replacements = iter(translations)
    text, positions = [], []
    source_start = target_start = 0
    tags = iter(enumerate(block.tags))
    pending = next(tags, None)
    for piece in pieces:
        source_end = source_start + len(piece.text)
        output = next(replacements) if piece.translate else piece.text
        floor = 0  # where the last tag placed in this piece went, relative to the piece
        while pending is not None and pending[1].offset <= source_end:
            index, tag = pending
            inside = tag.offset - source_start
            if inside in (0, len(piece.text)) or not piece.translate:
                where = len(output) if inside == len(piece.text) else inside
            else:  # at or after the tags placed before it, so a closing tag never precedes its opening tag
                where = _place(inside / len(piece.text), output, tag.kind, floor)
            where = max(where, floor)
            positions.append(target_start + where)
            floor = where
            pending = next(tags, None)
        text.append(output)
        source_start, target_start = source_end, target_start + len(output)
    return "".join(text), block.tags, positions


def _insert_tags(text: str, tags: tuple[Tag, ...], positions: list[int]) -> str:
    """`text` escaped, with each tag's source put at its position in place of the plain text it stands for."""
    out, cursor = [], 0
    for tag, position in zip(tags, positions, strict=True):
        position = max(position, cursor)
        out += [escape_text(text[cursor:position]), tag.raw]
        cursor = position + (len(tag.stand_in) if text.startswith(tag.stand_in, position) else 0)
    out.append(escape_text(text[cursor:]))
    return "".join(out)


def escape_text(text: str) -> str:
    """`text` made safe between tags (`&`, `<`, `>` escaped; quotes left as they are)."""
    return html.escape(text, quote=False)
