"""Documents for /translate_file: the texts read from .txt, .html, .docx and .odt files and the files written back
translated (formatting kept where the format allows), and the store of translated files (names, expiry)."""

import io
import os
import stat
import time
import zipfile

import docx
import odfdo
import pytest

from vanilla_training.serving import files
from vanilla_training.serving.files import (
    DocumentError,
    FileStore,
    StoreFull,
    read_document,
    safe_name,
    share_out,
)


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


def test_the_store_keeps_its_files_in_a_folder_of_this_user_alone(tmp_path):
    """The store's folder is made private (0700) and each file readable by its owner alone (0600); a folder that
    someone else could read, such as one another user made first in a shared /tmp, is refused."""
    store = FileStore(tmp_path / "store")
    stored = store.put("a.txt", b"secret")
    assert stat.S_IMODE((tmp_path / "store").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "store" / stored).stat().st_mode) == 0o600
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="is not a private folder of this user"):
        FileStore(shared)
    (tmp_path / "link").symlink_to(tmp_path / "store")
    with pytest.raises(RuntimeError, match="is not a private folder of this user"):
        FileStore(tmp_path / "link")


def test_the_store_refuses_a_file_over_its_capacity_until_older_files_expire(tmp_path):
    store = FileStore(tmp_path, lifetime=600, capacity=10)
    first = store.put("a.txt", b"12345678")
    with pytest.raises(StoreFull) as full:
        store.put("b.txt", b"123")
    assert 1 <= full.value.retry_after <= 600
    assert [path.name for path in tmp_path.iterdir()] == [first]
    store.put("c.txt", b"12")  # what fits is kept
    ten_minutes_ago = time.time() - 601
    os.utime(tmp_path / first, (ten_minutes_ago, ten_minutes_ago))
    store.put("b.txt", b"123")


def empty_paragraphs_docx(paragraphs: int, text: str = "Hello world.") -> bytes:
    document = docx.Document()
    for _ in range(paragraphs):
        document.add_paragraph("")
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_documents_characters_are_counted_before_it_is_parsed(monkeypatch):
    """A .docx or .odt over --char-limit is refused from lxml's streaming count, python-docx and odfdo never
    called; the count is the one the parsed document gives (an .odt's `text:s` spaces included)."""
    long_docx = empty_paragraphs_docx(0, "word " * 40)
    odt = odfdo.Document("text")
    odt.body.append(odfdo.Paragraph("In the" + " " * 20 + "beginning."))  # 19 of the spaces a `text:s`
    odt.body.append(odfdo.Header(1, "A title."))
    out = io.BytesIO()
    odt.save(out)
    long_odt = out.getvalue()
    assert sum(map(len, read_document("a.docx", long_docx).texts)) == 200
    assert sum(map(len, read_document("a.odt", long_odt).texts)) == 44

    def never(data):
        raise AssertionError("parsed")

    monkeypatch.setattr(files, "_read_docx", never)
    monkeypatch.setattr(files, "_read_odt", never)
    with pytest.raises(DocumentError, match=r"the file's text \(200\) exceeds text limit \(199\)"):
        read_document("a.docx", long_docx, char_limit=199)
    with pytest.raises(DocumentError, match=r"the file's text \(44\) exceeds text limit \(43\)"):
        read_document("a.odt", long_odt, char_limit=43)
    with pytest.raises(DocumentError, match=r"the file's text \(7\) exceeds text limit \(6\)"):
        read_document("a.txt", b"1234567", char_limit=6)


def test_a_document_that_unpacks_past_the_limit_is_refused_before_it_is_parsed():
    """60,000 empty paragraphs: a .docx of tens of kB unpacking to some MB (the size of the template's styles with
    them) is refused by the unpacked size its archive records."""
    data = empty_paragraphs_docx(60_000)
    unpacked = sum(member.file_size for member in zipfile.ZipFile(io.BytesIO(data)).infolist())
    assert len(data) < 100_000 < unpacked
    with pytest.raises(DocumentError, match=f"the file unpacks to {unpacked:,} bytes, over the limit of 100,000"):
        read_document("a.docx", data, unpacked_limit=100_000)
