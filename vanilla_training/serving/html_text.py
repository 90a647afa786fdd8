"""HTML in, HTML out: the markup is kept byte for byte and the text between tags is translated (not the text of
`<script>`, `<style>`, `<code>`, `<pre>` or `<textarea>` elements, nor comments or attributes)."""

import html
from html.parser import HTMLParser

UNTRANSLATED = frozenset({"script", "style", "code", "pre", "textarea"})


class _Events(HTMLParser):
    """Where each parser event starts in the source, and the text of the data events to translate."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.line_starts = [0]  # the parser counts lines by "\n" alone
        for index, character in enumerate(source):
            if character == "\n":
                self.line_starts.append(index + 1)
        self.events: list[tuple[int, str | None]] = []  # (offset, text to translate or None for markup)
        self.open_untranslated = 0

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _markup(self) -> None:
        self.events.append((self._offset(), None))

    def handle_starttag(self, tag, attrs):
        self._markup()
        self.open_untranslated += tag in UNTRANSLATED

    def handle_endtag(self, tag):
        self._markup()
        if tag in UNTRANSLATED and self.open_untranslated:
            self.open_untranslated -= 1

    def handle_startendtag(self, tag, attrs):
        self._markup()

    def handle_data(self, data):
        self.events.append((self._offset(), None if self.open_untranslated else data))

    handle_comment = handle_decl = handle_pi = unknown_decl = lambda self, data: self._markup()  # noqa: E731


def html_segments(source: str) -> list[tuple[str, str | None]]:
    """`source` cut into (raw text, text to translate or None): the raw texts put together give `source`; the text
    to translate is the raw text with its character references resolved."""
    parser = _Events(source)
    parser.feed(source)
    parser.close()
    offsets = [offset for offset, _ in parser.events] + [len(source)]
    segments = []
    if parser.events and offsets[0] > 0:
        segments.append((source[: offsets[0]], None))
    for (start, text), end in zip(parser.events, offsets[1:], strict=True):
        if start < end:
            segments.append((source[start:end], text if text and text.strip() else None))
    return segments or [(source, None)]


def escape_text(text: str) -> str:
    """`text` made safe between tags (`&`, `<`, `>` escaped; quotes left as they are)."""
    return html.escape(text, quote=False)
