"""Documents for /translate_file: the texts read from .txt, .html, .docx and .odt files and the files written back
translated (formatting kept where the format allows), and the store of translated files (names, expiry)."""

import io
import os
import time

import docx
import odfdo
import pytest

from vanilla_training.serving.files import DocumentError, FileStore, read_document, safe_name, share_out


def upper(texts: list[str]) -> list[str]:
    return [text.upper() for text in texts]


def test_a_text_file_is_one_text_and_comes_back_translated_in_utf8():
    document = read_document("notes.TXT", "\ufeffIn the beginning.\nJesus wept. ü".encode())
    assert (document.texts, document.text_format) == (["In the beginning.\nJesus wept. ü"], "text")
    assert document.write(upper(document.texts)) == "IN THE BEGINNING.\nJESUS WEPT. Ü".encode()


def test_an_html_file_is_one_html_text():
    document = read_document("page.html", b"<p>Hello <b>world</b>.</p>")
    assert (document.texts, document.text_format) == (["<p>Hello <b>world</b>.</p>"], "html")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("picture.png", b"\x89PNG", "file format not supported (.png"),
        ("README", b"text", "file format not supported (no extension"),
        ("latin1.txt", "café".encode("latin-1"), "not UTF-8 text"),
        ("broken.docx", b"not a zip", "cannot be read as .docx"),
        ("broken.odt", b"PK\x03\x04 not really", "cannot be read as .odt"),
    ],
)
def test_a_file_that_cannot_be_translated_is_refused_naming_why(name, data, message):
    with pytest.raises(DocumentError, match=message.replace("(", r"\(").replace(".", r"\.")):
        read_document(name, data)


def docx_bytes() -> bytes:
    document = docx.Document()
    paragraph = document.add_paragraph("Hello ", style="Heading 1")
    paragraph.add_run("bold world").bold = True
    paragraph.add_run(". More.")
    document.add_paragraph("")  # nothing to translate
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).merge(table.cell(0, 1)).paragraphs[0].add_run("In a merged cell.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_docx_file_is_translated_a_paragraph_at_a_time_keeping_its_runs_and_styles():
    document = read_document("letter.docx", docx_bytes())
    assert document.texts == ["Hello bold world. More.", "In a merged cell."]  # the merged cell once
    written = docx.Document(io.BytesIO(document.write(["Hallo fette Welt. Mehr.", "In einer Zelle."])))
    first = written.paragraphs[0]
    assert [(run.text, run.bold) for run in first.runs] == [("Hallo ", None), ("fette Welt", True), (". Mehr.", None)]
    assert first.style.name == "Heading 1"
    assert written.tables[0].cell(0, 0).text == "In einer Zelle."


def odt_bytes() -> bytes:
    document = odfdo.Document("text")
    document.body.append(odfdo.Header(1, "A title."))
    paragraph = odfdo.Paragraph("Hello ", style="Standard")
    paragraph.append(odfdo.Span("bold", style="Strong"))
    paragraph.append(" world.")
    document.body.append(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_an_odt_file_is_translated_a_paragraph_at_a_time_keeping_paragraph_styles():
    document = read_document("letter.odt", odt_bytes())
    assert document.texts == ["A title.", "Hello bold world."]
    written = odfdo.Document(io.BytesIO(document.write(["Ein Titel.", "Hallo  fette Welt."])))
    elements = written.body.get_elements("descendant::text:p | descendant::text:h")
    translated = [
        (element.tag, element.style, element.text_recursive) for element in elements if element.text_recursive
    ]
    assert translated == [("text:h", None, "Ein Titel."), ("text:p", "Standard", "Hallo  fette Welt.")]


def test_share_out_cuts_a_translation_at_the_word_edges_nearest_the_parts_boundaries():
    assert share_out(["Hello ", "bold world", ". More."], "Hallo fette Welt. Mehr.") == [
        "Hallo ",
        "fette Welt",
        ". Mehr.",
    ]
    assert share_out(["one"], "eins") == ["eins"]
    assert "".join(share_out(["a ", "", "b c"], "x y z")) == "x y z"


def test_stored_files_are_named_unguessably_given_back_by_name_and_expire(tmp_path):
    store = FileStore(tmp_path, lifetime=60)
    stored = store.put("../../etc/my letter.docx", b"data")
    assert stored.endswith(".my_letter.docx") and len(stored.split(".")[0]) == 32
    assert store.get(stored) == ("my_letter.docx", b"data")
    assert store.put("a.txt", b"") != store.put("a.txt", b"")
    hour_ago = time.time() - 3600
    os.utime(tmp_path / stored, (hour_ago, hour_ago))
    with pytest.raises(KeyError):
        store.get(stored)
    assert not (tmp_path / stored).exists()


@pytest.mark.parametrize("name", ["../secret.txt", "x.txt", "0" * 32, "0" * 32 + "./../a", "0" * 32 + ".a/b"])
def test_a_name_that_the_store_never_gives_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="Invalid filename"):
        FileStore(tmp_path).get(name)


def test_safe_name_keeps_the_last_path_part_in_safe_characters():
    assert [safe_name(name) for name in ("C:\\Users\\me\\résumé.docx", "../a b.txt", "..")] == [
        "r_sum_.docx",
        "a_b.txt",
        "file",
    ]
