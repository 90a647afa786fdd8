"""Paragraphs in, paragraphs out: sentences found and put back with the input's exact whitespace; over-long sentences
cut at clause or word boundaries, never truncated; HTML markup kept byte for byte."""

import subprocess
import sys
import threading
import time

import pysbd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vanilla_training.serving import paragraphs
from vanilla_training.serving.html_text import html_segments
from vanilla_training.serving.paragraphs import (
    Piece,
    plain_sentence,
    pysbd_sentences,
    rejoin,
    segmenter,
    sentences,
    split_long,
    split_text,
    translate_paragraphs,
)


def shout(batch: list[str]) -> list[str]:
    """A stand-in translator whose output shows which sentence it came from."""
    return [f"<{sentence.upper()}>" for sentence in batch]


def test_blank_lines_indentation_and_the_trailing_newline_survive():
    text = (
        "  In the beginning God created the heaven and the earth. And the earth was without form.\n\n"
        "\tMr. Smith left!  Then he came back.\r\n"
    )
    assert translate_paragraphs([text, "", " Two. Lines."], "en", shout) == [
        "  <IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH.> <AND THE EARTH WAS WITHOUT FORM.>\n\n"
        "\t<MR. SMITH LEFT!>  <THEN HE CAME BACK.>\r\n",
        "",
        " <TWO.> <LINES.>",
    ]


@pytest.mark.parametrize(
    ("language", "text", "expected"),
    [
        (
            "en",
            "Dr. Watson came at 3 p.m. to the house. He left.",
            ["Dr. Watson came at 3 p.m. to the house.", "He left."],
        ),
        ("de", "Dr. Müller kam am 3. Mai. Er ging wieder.", ["Dr. Müller kam am 3. Mai.", "Er ging wieder."]),
        ("fr", "M. Dupont est là. Il part.", ["M. Dupont est là.", "Il part."]),
        ("xx", "One. Two.", ["One.", "Two."]),  # a language pysbd does not know: English rules
    ],
)
def test_sentences_are_split_with_the_rules_of_the_language(language, text, expected):
    assert sentences(split_text(text, language)) == expected


def test_a_line_break_always_ends_a_sentence():
    assert sentences(split_text("a line without a stop\nanother one", "en")) == ["a line without a stop", "another one"]


# Letters, digits and every mark pysbd's rules look at (the sentence ends of its languages, quotes, brackets, list
# markers, its placeholder letters), in words as users write them.
WORDS = ["a", "I", "b", "ii", "Mr", "God", "went", "x1", "12", "3", "é", "ȸ", "il", "Müller", "日本", "नमस्ते", "ورد"]
MARKS = list(".!?,;:'’\"“”‘«»„‚()[]-–—…|•*/")
MARKS += ["。", "．", "！", "？", "؟", "،", "۔", "।", "።", "፧", "։", "՜", "။", "၏"]


PAUSES = [" "] * 60 + [", "] * 10 + [": ", "; "] * 5 + ["  ", ""]
SEPARATORS = PAUSES * 8 + [mark + " " for mark in MARKS] + [" " + mark for mark in MARKS]  # a mark: 1 in 9


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(["en", "de", "fr", "el", "ar", "fa", "hi", "hy", "am", "my", "ur", "zh", "ja", "xx"]),
    st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), min_size=1, max_size=8),
    st.lists(st.sampled_from(MARKS), max_size=2).map("".join),  # none, a mark, or two (a stop and a quote)
)
def test_a_line_taken_whole_without_pysbd_is_one_sentence_for_pysbd(language, words, end):
    """pysbd itself is the oracle: whatever line `plain_sentence` takes whole, pysbd's rules for that language
    (English's for a language it does not know) find exactly that one sentence in it."""
    line = ("".join(word + separator for word, separator in words[:-1]) + words[-1][0] + end).strip()
    if plain_sentence(language).fullmatch(line):
        rules = pysbd.Segmenter(language=language if language != "xx" else "en", clean=False)
        assert [found.strip() for found in rules.segment(line) if found.strip()] == [line]


@pytest.fixture
def lines_sent_to_pysbd(monkeypatch) -> list[str]:
    """The lines the splitter sends to the pysbd process, in order, as the test goes on."""
    asked = []
    segment = paragraphs.SEGMENTER.segment

    def watched(lines, language, budget):
        asked.extend(lines)
        return segment(lines, language, budget)

    monkeypatch.setattr(paragraphs.SEGMENTER, "segment", watched)
    return asked


def test_plain_verses_are_taken_whole_and_the_others_go_to_pysbd(lines_sent_to_pysbd):
    for language, text in [
        ("en", "And God said, Let there be light: and there was light."),
        ("en", "He confessed, and didn't deny; he was God's servant!"),
        ("en", 'He said "Go" and went.'),
        ("en", "He said, 'Make straight the way of the Lord,' as Isaiah the prophet said."),
        ("fr", "Il répondit: «Non»"),
        ("de", "Und Gott sprach: Es werde Licht."),
        ("el", "Και είπεν ο Θεός, Γενηθήτω φως."),
        ("zh", "神说要有光就有了光。"),
    ]:
        assert sentences(split_text(text, language)) == [text]
    assert lines_sent_to_pysbd == []
    for language, text, expected in [
        ("en", "Let there be light. And there was light.", ["Let there be light.", "And there was light."]),
        ("en", 'He said, "No." Then he left.', ['He said, "No."', "Then he left."]),
        ("en", 'He went."', ["He went.", '"']),  # a closing quote with no opening one: pysbd cuts it off
        ("el", "Τι είναι; Είναι φως.", ["Τι είναι;", "Είναι φως."]),  # ; asks a question in Greek
        ("en", "It costs 5.", ["It costs 5."]),
    ]:
        assert sentences(split_text(text, language)) == expected
    assert len(lines_sent_to_pysbd) == 5


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("en", 'He said, "I am not." "Are you the prophet?" He answered, "No."'),
        ("en", "Dr. Watson came at 3 p.m. to the house. He left at 5. The U.S. Army, e.g. Co. Ltd., was there!"),
        ("en", 'Jesus said to him, "Go your way." Then he left. (Which is, being interpreted, Christ.) Amen.'),
        ("en", 'He answered (see above). They went home. "Why?" she asked. It is 3.5 km.'),
        ("en", "a. a. a. a. b. a. a."),
        ("de", 'Dr. Müller kam am 3. Mai. Er sagte: "Ich gehe." Dann ging er.'),
        ("fr", "M. Dupont est là. « Tu viens ? » Il part."),
        ("el", "Τι είναι; Είναι φως. Ναι!"),
        ("zh", "神说要有光。就有了光！好吗？"),
        ("hi", "यह एक वाक्य है। यह दूसरा है?"),
    ],
)
def test_pysbd_sentences_are_those_of_pysbd_segment(language, text):
    """The pysbd process finds sentences without `Segmenter.segment`'s character spans (`pysbd_sentences`): the
    sentences are those `segment` finds, the oracle, on ordinary text."""
    expected = [found.strip() for found in segmenter(language).segment(text) if found.strip()]
    assert len(expected) > 1
    assert [found.strip() for found in pysbd_sentences(text, language)] == expected
    assert sentences(split_text(text, language)) == expected  # through the pysbd process


def test_blank_lines_are_not_sent_to_pysbd(lines_sent_to_pysbd):
    text = "\n  \t\nOne. Two.\r\n\u00a0\n"
    assert [(piece.text, piece.translate) for piece in split_text(text, "en")] == [
        ("\n", False),
        ("  \t", False),
        ("\n", False),
        ("One.", True),
        (" ", False),
        ("Two.", True),
        ("\r\n", False),
        ("\u00a0", False),
        ("\n", False),
    ]
    assert lines_sent_to_pysbd == ["One. Two."]


def test_a_sentence_pysbd_changes_is_translated_with_the_rest_of_its_line():
    """pysbd gives `Use the ∯ sign.` back as `Use the . sign.` (∯ is one of its placeholders), which is not in the
    line: the rest of the line from there is one sentence, rather than text kept untranslated."""
    assert segmenter("en").segment("Use the ∯ sign. Then stop.") == ["Then stop."]  # pysbd drops it
    assert sentences(split_text("Use the ∯ sign. Then stop.", "en")) == ["Use the ∯ sign. Then stop."]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([*'ab A.?!,"“”() \u00a0∯♨☝ȸȹ&ᓰ', "Dr.", "p.m.", "3.5"]), max_size=30).map("".join))
def test_only_whitespace_is_kept_untranslated(text):
    """Whatever pysbd does with text holding its placeholder characters, the text is put back exactly and the
    pieces not translated are whitespace."""
    pieces = split_text(text, "en")
    assert "".join(piece.text for piece in pieces) == text
    assert all(not piece.text.strip() for piece in pieces if not piece.translate)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .!?,;:\n\r\t\u00a0Dr.")), max_size=80))
def test_any_text_is_put_back_exactly(text):
    pieces = split_text(text, "en", fits=lambda sentence: len(sentence) <= 7)
    assert "".join(piece.text for piece in pieces) == text
    assert rejoin(pieces, sentences(pieces)) == text
    assert all(piece.text.strip() == piece.text and piece.text for piece in pieces if piece.translate)


def test_an_overlong_sentence_is_cut_at_clauses_then_words_and_nothing_is_lost():
    sentence = "one two three four, five six seven eight; nine ten eleven twelve thirteen fourteen"
    pieces = split_long(sentence, lambda part: len(part.split()) <= 4)
    assert "".join(piece.text for piece in pieces) == sentence
    assert sentences(pieces) == [
        "one two three four,",
        "five six seven eight;",
        "nine ten eleven twelve",  # the space nearest the middle
        "thirteen fourteen",
    ]


def test_a_sentence_without_spaces_is_cut_in_the_middle():
    assert sentences(split_long("abcdefgh", lambda part: len(part) <= 4)) == ["abcd", "efgh"]


def test_rejoin_refuses_a_wrong_number_of_translations():
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        rejoin([Piece("a", True), Piece(" ", False), Piece("b", True)], ["x"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<p>",
                "</p>",
                "<b class='x'>",
                "</b>",
                "<br/>",
                "Hi. ",
                "a &amp; b",
                "<!-- c -->",
                "<script>var s = '<b>';</script>",
                "\n",
                " ",
                "<",
                ">",
                "&lt;",
            ]
        ),
        max_size=12,
    )
)
def test_html_markup_is_kept_byte_for_byte(parts):
    source = "".join(parts)
    segments = html_segments(source)
    assert "".join(raw for raw, _ in segments) == source
    if "<" not in parts:  # a stray "<" may open a tag that swallows the <script> (browsers parse it so too)
        assert not any(block and "var s" in block.text for _, block in segments)  # script content is kept


def test_html_text_between_tags_is_given_unescaped():
    segments = html_segments("<p class='a'>Fish &amp; chips.</p><script>x()</script>")
    assert [(raw, block and block.text) for raw, block in segments] == [
        ("<p class='a'>", None),
        ("Fish &amp; chips.", "Fish & chips."),
        ("</p>", None),
        ("<script>", None),
        ("x()", None),
        ("</script>", None),
    ]


@pytest.mark.parametrize("groups", [7, 9, 30, 1249])
def test_the_backtracking_family_is_split_within_seconds_and_kept_whole(groups):
    """pysbd 0.3.4 takes 0.3 s on `..[111 111 111 111 111 111 111]` and about 8 times more for each further group
    of digits (9 groups: 39 s measured); pysbd is given `SEGMENT_SECONDS`, then the line is cut at its
    sentence-ending marks, and the next text is split by a fresh pysbd."""
    text = "..[" + " ".join(["111"] * groups) + "]\nThen more. And more."  # hostile where `]` ends the line
    split_text("Warm up. The process is started.", "en")
    started = time.monotonic()
    pieces = split_text(text, "en")
    assert time.monotonic() - started < 2.0  # 9 groups unbounded: 39 s
    assert "".join(piece.text for piece in pieces) == text
    assert sentences(split_text("Let there be light. And there was light.", "en")) == [
        "Let there be light.",
        "And there was light.",
    ]


def test_a_line_pysbd_has_no_time_for_is_cut_at_its_sentence_ends(monkeypatch):
    monkeypatch.setattr(paragraphs, "SEGMENT_SECONDS", 0.0)
    assert sentences(split_text("Dr. Smith came. He left!  Did he? Yes", "en")) == [
        "Dr.",
        "Smith came.",
        "He left!",
        "Did he?",
        "Yes",
    ]


def test_waiting_for_another_requests_turn_costs_no_budget():
    """pysbd splits one request's lines at a time: a request that waits its turn longer than `SEGMENT_SECONDS`
    still gets pysbd's split (`Dr.` kept with its name), not the fallback's."""
    results = []
    with paragraphs.SEGMENTER.lock:
        waiting = threading.Thread(
            target=lambda: results.append(sentences(split_text("Dr. Smith came. He left.", "en")))
        )
        waiting.start()
        time.sleep(2 * paragraphs.SEGMENT_SECONDS)
    waiting.join(timeout=60)
    assert results == [["Dr. Smith came.", "He left."]]


def test_a_request_whose_client_has_gone_stops_waiting_for_its_turn():
    """Issue 61's starvation by abandoned requests: a layout waiting for pysbd's turn (another request holds it)
    stops as soon as its `Budget` is cancelled, freeing its thread, rather than waiting for every request ahead."""
    budget, outcome = paragraphs.Budget(), []

    def lay_out():
        try:
            split_text("Dr. Smith came. He left.", "en", budget=budget)
            outcome.append("split")
        except paragraphs.Cancelled:
            outcome.append("cancelled")

    with paragraphs.SEGMENTER.lock:
        waiting = threading.Thread(target=lay_out)
        waiting.start()
        time.sleep(0.1)
        budget.cancelled.set()
        waiting.join(timeout=10)
        assert outcome == ["cancelled"]  # while the other request still holds pysbd


def test_pysbd_stops_working_for_a_client_that_has_gone_and_the_next_request_is_split_by_pysbd():
    """A hostile line given all the time in the world: its client goes, pysbd's process is replaced at once (the
    spare takes its place) and the next request gets pysbd's split (`Dr.` kept with its name)."""
    budget, outcome = paragraphs.Budget(seconds=600.0), []
    hostile = "..[" + " ".join(["111"] * 30) + "]"  # 17 s at 8 groups, 8 times more for each further one

    def lay_out():
        try:
            split_text(hostile, "en", budget=budget)
        except paragraphs.Cancelled:
            outcome.append("cancelled")

    split_text("Warm up. The process is started.", "en")
    working = threading.Thread(target=lay_out)
    working.start()
    time.sleep(1.0)  # pysbd is matching the hostile line
    budget.cancelled.set()
    working.join(timeout=10)
    assert outcome == ["cancelled"] and not working.is_alive()
    assert sentences(split_text("Dr. Smith came. He left.", "en")) == ["Dr. Smith came.", "He left."]


def test_a_pysbd_process_that_dies_is_replaced_and_its_text_cut_at_sentence_ends():
    """pysbd's process killed while it splits a request's text (issue 61: a 500 before): that text is cut at its
    sentence-ending marks, and the next is split by pysbd in the spare process."""
    split_text("Warm up. The process is started.", "en")
    budget, results = paragraphs.Budget(seconds=600.0), []
    hostile = "Dr. Smith came. ..[" + " ".join(["111"] * 30) + "]"
    working = threading.Thread(target=lambda: results.append(sentences(split_text(hostile, "en", budget=budget))))
    working.start()
    time.sleep(1.0)  # pysbd is matching the hostile line
    paragraphs.SEGMENTER.current.process.kill()
    working.join(timeout=60)
    assert results == [["Dr.", "Smith came.", hostile[len("Dr. Smith came. ") :]]]
    assert sentences(split_text("Dr. Smith came. He left.", "en")) == ["Dr. Smith came.", "He left."]


@pytest.mark.parametrize("run", [" " * 50_000, " - " * 20_000, ", " * 20_000])
def test_cutting_a_long_run_of_spaces_or_clause_marks_takes_linear_time(run):
    """Issue 61: cutting a sentence at a long whitespace run was quadratic (a dash between spaces looked for from
    every space of the run: 0.26 s of held GIL at 5,000 characters, about 26 s at 50,000); a hang guard, far above
    the linear time, sees it."""
    sentence = "a" + run + "b"
    started = time.monotonic()
    pieces = split_long(sentence, lambda piece: len(piece) <= 100)
    assert time.monotonic() - started < 5
    assert "".join(piece.text for piece in pieces) == sentence
    assert all(len(piece.text) <= 100 for piece in pieces if piece.translate)


def test_the_pysbd_process_of_vanilla_serve_does_not_load_torch(tmp_path):
    """A spawned process starts by importing the parent's main module: for vanilla-serve, the console script, which
    imports `vanilla_training.cli.serve`. Loading torch there cost each of the two pysbd processes 3 s of CPU and
    330 MiB, counted as the server's own."""
    script = tmp_path / "vanilla_serve_like.py"
    script.write_text(
        "from vanilla_training.cli.serve import main  # as the console script does\n"
        "if __name__ == '__main__':\n"
        "    from vanilla_training.serving.paragraphs import Budget, SegmenterProcess\n"
        "    child = SegmenterProcess()\n"
        "    assert child.await_ready(Budget(seconds=60))\n"
        "    print('libtorch' in open(f'/proc/{child.process.pid}/maps').read())\n"
        "    child.stop()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
