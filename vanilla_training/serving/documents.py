"""A request's text (plain or HTML) as the sentences to translate, and the translated text built back from their
translations: the best one, and alternatives made of every sentence's next-best translations."""

from collections.abc import Callable

from .html_text import Block, html_segments, render_block
from .paragraphs import Budget, Piece, rejoin, sentences, split_texts

Layout = list[tuple[str, list[Piece] | None, Block | None]]  # (raw text, its sentences and spacing or None if
# kept as it is, its HTML block with the inline tags to put back)


def layout(
    text: str,
    text_format: str,
    language: str,
    fits: Callable[[str], bool] | None = None,
    budget: Budget | None = None,
) -> Layout:
    """`text` laid out alone (see `layouts`)."""
    return layouts([text], text_format, language, fits, budget)[0]


def layouts(
    texts: list[str],
    text_format: str,
    language: str,
    fits: Callable[[str], bool] | None = None,
    budget: Budget | None = None,
) -> list[Layout]:
    """Each of `texts` cut into what is kept as it is (markup, in HTML) and text split into sentences (`split_texts`:
    pysbd asked once for them all, within `budget`); in HTML a block's text is split with its inline tags taken out
    (`html_text.html_segments`)."""
    if text_format != "html":
        split = split_texts(texts, language, fits, budget)
        return [[(text, pieces, None)] for text, pieces in zip(texts, split, strict=True)]
    segmented = [html_segments(text) for text in texts]
    blocks = [block.text for segments in segmented for _, block in segments if block is not None]
    pieces = iter(split_texts(blocks, language, fits, budget))
    return [
        [(raw, None if block is None else next(pieces), block) for raw, block in segments] for segments in segmented
    ]


def layout_sentences(parts: Layout) -> list[str]:
    """The sentences to translate, in order."""
    return [sentence for _, pieces, _ in parts if pieces is not None for sentence in sentences(pieces)]


def render(parts: Layout, translations: list[str]) -> str:
    """The text with its sentences replaced by `translations` (in the order of `layout_sentences`); in HTML the
    translations are escaped, the markup kept and the inline tags placed (`html_text.render_block`)."""
    out, cursor = [], 0
    for raw, pieces, block in parts:
        if pieces is None:
            out.append(raw)
            continue
        count = sum(piece.translate for piece in pieces)
        these, cursor = translations[cursor : cursor + count], cursor + count
        out.append(rejoin(pieces, these) if block is None else render_block(block, pieces, these))
    return "".join(out)


def translated_versions(parts: Layout, hypotheses: list[list[str]]) -> tuple[str, list[str]]:
    """The best translation and the distinct alternatives (as LibreTranslate gives them: none equal to the best
    or empty): the k-th alternative takes every sentence's (k+1)-th hypothesis, or its last where it has fewer."""
    ranks = max((len(options) for options in hypotheses), default=1)
    versions = [
        render(parts, [options[min(rank, len(options) - 1)] for options in hypotheses]) for rank in range(ranks)
    ]
    seen = {versions[0], ""}
    return versions[0], [version for version in versions[1:] if not (version in seen or seen.add(version))]
