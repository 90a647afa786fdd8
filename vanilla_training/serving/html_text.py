"""HTML in, HTML out, translated a block at a time: the text of a block element together with its inline tags
(`<b>`, `<em>`, `<a>`, `<span>`, `<br>`, ...) is one text to translate, so that inline markup never cuts a sentence;
the inline tags are then put back into the translation. Everything else is kept byte for byte: block tags,
comments (one left open at the end too), attributes, and the content of `<script>`, `<style>` and `<pre>`. An inline
element whose content is not text to translate (`<code>`, `<textarea>`, `<svg>`, `<math>`, ...) is kept whole, as one
unit of its sentence, like a `<br>` or an `<img>`; a custom element (`<my-widget>`) is inline.

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

UNTRANSLATED = frozenset({"script", "style", "pre"})  # blocks whose content is kept as it is
ATOMIC = frozenset(  # inline elements kept whole, content and all, as one unit of their sentence
    {"code", "textarea", "select", "svg", "math", "canvas", "audio", "video", "iframe", "object"}
)
INLINE = frozenset(
    {"a", "abbr", "b", "bdi", "bdo", "br", "button", "cite", "data", "del", "dfn", "em", "font", "i", "img", "input"}
    | {"ins", "kbd", "label", "mark", "output", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup"}
    | {"time", "tt", "u", "var", "wbr"}
)
VOID = frozenset({"br", "img", "input", "wbr"})
STAND_INS = {"br": "\n"}  # the plain text a tag stands for: a line break ends a sentence as in plain text


def is_inline(tag: str) -> bool:
    """Whether `tag` sits inside a sentence: an inline element, an atomic one, or a custom element (a name with a
    hyphen, as the HTML standard requires of them)."""
    return tag in INLINE or tag in ATOMIC or "-" in tag


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
    translate), "inline" (an inline tag: "open", "close" or "void" with its name; an `ATOMIC` element, from its
    opening tag to the end of its closing tag, one "void") or "markup" (kept as it is). What is left unclosed at the
    end behind `<!` or `<?` (a comment, a declaration) is markup, as a browser hides it, not text."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.source = source
        self.line_starts = [0]  # the parser counts lines by "\n" alone
        for index, character in enumerate(source):
            if character == "\n":
                self.line_starts.append(index + 1)
        self.events: list[tuple[int, str, tuple[str, str] | str | None]] = []
        self.open_untranslated = 0
        self.atomic: list | None = None  # the open atomic element: [its name, how many of it are open]
        self.closing = self.unclosed = False

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _tag(self, tag: str, kind: str) -> None:
        inline = is_inline(tag) and not self.open_untranslated
        self.events.append((self._offset(), "inline" if inline else "markup", (kind, tag) if inline else None))

    def _inside_atomic(self, tag: str, step: int) -> bool:
        """Whether an atomic element is open (its content then belongs to it), counting its own nested tags."""
        if self.atomic is None:
            return False
        if tag == self.atomic[0]:
            self.atomic[1] += step
            if not self.atomic[1]:
                self.atomic = None
        return True

    def handle_starttag(self, tag, attrs):
        if self._inside_atomic(tag, 1):
            return
        if tag in ATOMIC and not self.open_untranslated:
            self.atomic = [tag, 1]
            self._tag(tag, "void")
            return
        self._tag(tag, "void" if tag in VOID else "open")
        self.open_untranslated += tag in UNTRANSLATED

    def handle_endtag(self, tag):
        if self._inside_atomic(tag, -1):
            return
        if tag in UNTRANSLATED and self.open_untranslated:
            self.open_untranslated -= 1
        self._tag(tag, "close")

    def handle_startendtag(self, tag, attrs):
        if self.atomic is None:
            self._tag(tag, "void")

    def handle_data(self, data):
        if self.atomic is not None:
            return
        offset = self._offset()
        if self.closing and (self.unclosed or self.source.startswith(("<!", "<?"), offset)):
            self.unclosed = True  # the parser hands what it could not close back as data
        markup = self.open_untranslated or self.unclosed
        self.events.append((offset, "markup" if markup else "text", data))

    def _markup(self, data=None) -> None:
        if self.atomic is None:
            self.events.append((self._offset(), "markup", None))

    handle_comment = handle_decl = handle_pi = unknown_decl = _markup

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        """`<![CDATA[...]]>` and the like as Python reads them; anything else after `<![` (where Python's parser
        raises AssertionError) as a browser reads it: a bogus comment up to the next `>`."""
        position = self.getpos()
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            self.lineno, self.offset = position  # moved past `<![` before it raised
            end = self.rawdata.find(">", i + 3)
            if end < 0:
                return -1  # not closed yet: at the end, markup
            self._markup()
            return end + 1

    def close(self) -> None:
        self.closing = True
        super().close()


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
