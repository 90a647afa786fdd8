"""LibreTranslate's endpoints beyond /translate, each called as a LibreTranslate client calls it: libretranslatepy
where it does (translate, detect), else raw HTTP in the shapes LibreTranslate's own web page (FormData, so
multipart) and its PHP client (jefs42/libretranslate: cURL, multipart for files, urlencoded for suggestions) send;
with the toy model of test_serve. Also HTML blocks through the server, keys, 429 and the /metrics token."""

import contextlib
import io
import json
import os
import re
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import docx
import pytest
from libretranslatepy import LibreTranslateAPI
from test_serve import LINES, InProcessServer, chromium_missing, offline, run, translator  # noqa: F401 (fixtures)

from vanilla_training.serving.backends import TorchBackend
from vanilla_training.serving.files import FILES_FOLDER
from vanilla_training.serving.settings import ServeSettings

pytestmark = pytest.mark.slow  # the toy training run of test_serve's fixture
TIMEOUT = 60


def call(url: str, body: bytes | None = None, headers: dict | None = None, method: str | None = None):
    """(status, headers, body bytes) of one HTTP request; an HTTP error status is returned, not raised."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=body, headers=headers or {}, method=method), timeout=TIMEOUT
        ) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, dict]:
    """A multipart/form-data body as a browser's FormData or PHP's cURL with a CURLFile sends it."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    for name, (filename, data) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), {
        "Content-Type": f"multipart/form-data; boundary={boundary}"
    }


def as_json(answer: tuple) -> tuple[int, object]:
    status, _, body = answer
    return status, json.loads(body)


@pytest.fixture(scope="module")
def default_server(translator):  # noqa: F811 (the fixture imported above)
    with InProcessServer([TorchBackend(translator, "fp32")], ServeSettings()) as server:
        yield server


def web_page_file_upload(
    url: str, filename: str, data: bytes, api_key: str = "", source: str = "en", target: str = "de"
) -> tuple[int, dict]:
    """POST /translate_file as LibreTranslate's page sends it (FormData: file, source, target, api_key)."""
    body, headers = multipart({"source": source, "target": target, "api_key": api_key}, {"file": (filename, data)})
    return as_json(call(url + "/translate_file", body, headers))


def test_frontend_settings_tell_the_servers_real_settings(default_server, translator, tmp_path):  # noqa: F811
    # LibreTranslate's page and the PHP client: a GET with no body
    assert as_json(call(default_server.url + "/frontend/settings")) == (
        200,
        {
            "charLimit": 5000,
            "frontendTimeout": 500,
            "apiKeys": False,
            "keyRequired": False,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": [".txt", ".html", ".docx", ".odt"],
            "language": {"source": {"code": "auto", "name": "Auto Detect"}, "target": {"code": "de", "name": "German"}},
        },
    )
    settings = ServeSettings(
        api_keys=frozenset({"k"}),
        require_api_key_origin="https://mine",
        suggestions=True,
        suggestions_db=tmp_path / "suggestions.db",
        disable_files_translation=True,
        char_limit=77,
    )
    with InProcessServer([TorchBackend(translator, "fp32")], settings) as server:
        status, answer = as_json(call(server.url + "/frontend/settings", method="GET"))
    assert status == 200
    assert {name: answer[name] for name in ("charLimit", "apiKeys", "keyRequired", "suggestions")} == {
        "charLimit": 77,
        "apiKeys": True,
        "keyRequired": True,
        "suggestions": True,
    }
    assert (answer["filesTranslation"], answer["supportedFilesFormat"]) == (False, [])


def test_a_text_file_is_translated_and_downloaded_from_the_url_answered(default_server, translator):  # noqa: F811
    expected = offline(translator, LINES[:2])
    status, answer = web_page_file_upload(default_server.url, "verses.txt", f"{LINES[0]}\n{LINES[1]}\n".encode())
    assert status == 200 and list(answer) == ["translatedFileUrl"]
    url = answer["translatedFileUrl"]
    assert re.fullmatch(re.escape(default_server.url) + r"/download_file/[0-9a-f]{32}\.verses\.txt", url)
    status, headers, data = call(url)
    assert status == 200
    assert headers["content-disposition"] == 'attachment; filename="verses.txt"'
    assert data.decode() == f"{expected[LINES[0]]}\n{expected[LINES[1]]}\n"
    hour_ago = time.time() - 3600  # the stored file expires
    os.utime(FILES_FOLDER / url.rsplit("/", 1)[1], (hour_ago, hour_ago))
    assert call(url)[0] == 404


def test_the_php_client_translates_an_html_file_and_a_docx_file(default_server, translator):  # noqa: F811
    expected = offline(translator, [LINES[0], LINES[2]])
    fields = {"format": "html", "source": "en", "target": "de", "api_key": ""}  # as jefs42/libretranslate sends
    body, headers = multipart(fields, {"file": ("page.html", f"<h1>{LINES[0]}</h1><script>x()</script>".encode())})
    status, answer = as_json(call(default_server.url + "/translate_file", body, headers))
    assert status == 200
    assert call(answer["translatedFileUrl"])[2].decode() == f"<h1>{expected[LINES[0]]}</h1><script>x()</script>"
    document = docx.Document()
    document.add_paragraph(LINES[0])
    document.add_paragraph(LINES[2], style="Heading 2")
    out = io.BytesIO()
    document.save(out)
    body, headers = multipart(fields, {"file": ("report.docx", out.getvalue())})
    status, answer = as_json(call(default_server.url + "/translate_file", body, headers))
    assert status == 200
    written = docx.Document(io.BytesIO(call(answer["translatedFileUrl"])[2]))
    assert [(p.text, p.style.name) for p in written.paragraphs] == [
        (expected[LINES[0]], "Normal"),
        (expected[LINES[2]], "Heading 2"),
    ]


@pytest.mark.parametrize(
    ("filename", "data", "status", "message"),
    [
        ("long.txt", b"one two three. " * 400, 400, "the file's text (6,000) exceeds text limit (5,000)"),
        ("image.png", b"\x89PNG", 400, "file format not supported"),
        ("", b"one", 400, "Invalid request: empty file"),
    ],
)
def test_a_file_over_the_limit_or_of_another_format_is_refused(default_server, filename, data, status, message):
    answered, answer = web_page_file_upload(default_server.url, filename, data)
    assert answered == status and message in answer["error"]


def test_file_languages_are_read_as_translates_are(default_server):
    assert web_page_file_upload(default_server.url, "a.txt", b"one", source="EN", target="De")[0] == 200
    assert web_page_file_upload(default_server.url, "a.txt", b"one", source="xx") == (
        400,
        {"error": "xx is not supported"},
    )


def test_a_form_without_a_file_or_not_a_form_is_refused(default_server):
    body, headers = multipart({"source": "en", "target": "de"}, {})
    assert as_json(call(default_server.url + "/translate_file", body, headers)) == (
        400,
        {"error": "Invalid request: missing file parameter"},
    )
    status, answer = as_json(call(default_server.url + "/translate_file", b"{}", {"Content-Type": "application/json"}))
    assert status == 400 and answer["error"].startswith("Invalid request")


@pytest.mark.parametrize("name", ["..%2F..%2Fetc%2Fpasswd", "0" * 32 + ".gone.txt"])
def test_download_file_refuses_a_name_it_never_gave(default_server, name):
    status, _, body = call(default_server.url + "/download_file/" + name)
    assert status in (400, 404) and "error" in json.loads(body)


def test_suggest_is_403_by_default_and_kept_in_sqlite_when_enabled(default_server, translator, tmp_path):  # noqa: F811
    """Suggestions land in LibreTranslate's SQLite table, read back here as its scripts/suggestions-to-jsonl.py
    reads them (before: a log line that went nowhere outside pytest)."""
    fields = {"q": "Hello", "s": "Hallo", "source": "en", "target": "de", "api_key": ""}
    php = urllib.parse.urlencode(fields).encode()  # the PHP client: http_build_query
    assert as_json(call(default_server.url + "/suggest", php)) == (
        403,
        {"error": "Suggestions are disabled on this server."},
    )
    database = tmp_path / "db" / "suggestions.db"
    settings = ServeSettings(suggestions=True, suggestions_db=database)
    with InProcessServer([TorchBackend(translator, "fp32")], settings) as server:
        assert as_json(call(server.url + "/suggest", php)) == (200, {"success": True})
        body, headers = multipart(fields, {})  # LibreTranslate's page: FormData
        assert as_json(call(server.url + "/suggest", body, headers)) == (200, {"success": True})
        assert as_json(call(server.url + "/suggest", urllib.parse.urlencode({"q": "x"}).encode()))[0] == 400
    with contextlib.closing(sqlite3.connect(database)) as connection:
        rows = connection.execute("SELECT q, s, source, target FROM suggestions").fetchall()
    assert rows == [("Hello", "Hallo", "en", "de")] * 2


def test_spec_is_the_openapi_document_with_every_endpoint(default_server):
    status, spec = as_json(call(default_server.url + "/spec"))
    assert status == 200 and spec["openapi"].startswith("3.")
    for path in ("/translate", "/detect", "/languages", "/translate_file", "/download_file/{filename}", "/suggest"):
        assert path in spec["paths"]


def test_html_blocks_reach_the_model_whole_through_the_server(translator):  # noqa: F811
    class Recording(TorchBackend):
        """The torch backend, keeping every sentence the model is given."""

        given: list[str] = []  # noqa: RUF012 (one backend in this test)

        def translate(self, sentences, hypotheses=1, beams=None):
            self.given += sentences
            return super().translate(sentences, hypotheses, beams)

    sentence = "two three one two the house."
    expected = offline(translator, [sentence])[sentence]
    backend = Recording(translator, "fp32", batching="batches")
    with InProcessServer([backend], ServeSettings(cache_size=0)) as server:
        fields = {"q": "<p>two three <b>one</b> two the house.</p>", "source": "en", "target": "de", "format": "html"}
        status, answer = as_json(call(server.url + "/translate", urllib.parse.urlencode(fields).encode()))
    assert status == 200 and backend.given == [sentence]
    translated = answer["translatedText"]
    assert translated.count("<b>") == translated.count("</b>") == 1
    assert re.sub("</?b>", "", translated) == f"<p>{expected}</p>"


def test_429_with_retry_after_per_client_and_a_key_raises_the_limit(translator):  # noqa: F811
    settings = ServeSettings(req_limit=2, api_keys=frozenset({"big-key 50"}))
    with InProcessServer([TorchBackend(translator, "fp32")], settings) as server:
        client = LibreTranslateAPI(server.url)
        expected = offline(translator, [LINES[1]])[LINES[1]]
        assert [client.translate(LINES[1], "en", "de") for _ in range(2)] == [expected] * 2
        with pytest.raises(urllib.error.HTTPError) as caught:
            client.translate(LINES[1], "en", "de")
        assert caught.value.code == 429 and 1 <= int(caught.value.headers["Retry-After"]) <= 60
        assert json.loads(caught.value.read()) == {"error": "Slowdown: 2 per 1 minute"}
        with pytest.raises(urllib.error.HTTPError, match="429"):
            client.detect(LINES[1])
        keyed = LibreTranslateAPI(server.url, api_key="big-key")
        assert len([keyed.translate(LINES[1], "en", "de") for _ in range(5)]) == 5


def test_keys_are_optional_unless_asked_for(translator):  # noqa: F811
    backends = [TorchBackend(translator, "fp32")]
    with InProcessServer(backends, ServeSettings(api_keys=frozenset({"k1"}))) as server:
        assert LibreTranslateAPI(server.url).translate(LINES[1], "en", "de")
        with pytest.raises(urllib.error.HTTPError, match="403"):
            LibreTranslateAPI(server.url, api_key="k2").translate(LINES[1], "en", "de")
    with InProcessServer(backends, ServeSettings(api_keys=frozenset({"k1"}), under_attack=True)) as server:
        with pytest.raises(urllib.error.HTTPError) as caught:
            LibreTranslateAPI(server.url).translate(LINES[1], "en", "de")
        assert caught.value.code == 400
        assert json.loads(caught.value.read()) == {"error": "Please contact the server operator to get an API key"}
        assert LibreTranslateAPI(server.url, api_key="k1").translate(LINES[1], "en", "de")
        assert web_page_file_upload(server.url, "a.txt", b"one")[0] == 400
        assert web_page_file_upload(server.url, "a.txt", b"one", api_key="k1")[0] == 200


def test_metrics_answer_only_with_their_token_where_one_is_set(translator):  # noqa: F811
    with InProcessServer([TorchBackend(translator, "fp32")], ServeSettings(metrics_auth_token="s3cret")) as server:
        assert as_json(call(server.url + "/metrics")) == (401, {"error": "Unauthorized"})
        assert call(server.url + "/metrics", headers={"Authorization": "Bearer nope"})[0] == 401
        status, _, body = call(server.url + "/metrics", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and b"vanilla_serve_requests_total" in body


@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_the_web_pages_api_key_field_lets_it_translate_where_keys_are_required(translator):  # noqa: F811
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    settings = ServeSettings(api_keys=frozenset({"page-key"}), under_attack=True)
    with InProcessServer([TorchBackend(translator, "fp32")], settings) as server:
        browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            browser.get(server.url + "/")
            wait = WebDriverWait(browser, 30)
            wait.until(lambda b: b.find_element(By.ID, "target").get_attribute("value") == "de")
            browser.find_element(By.ID, "text").send_keys(LINES[0])
            browser.find_element(By.ID, "translate").click()
            error = browser.find_element(By.ID, "error")
            wait.until(lambda b: error.text == "Please contact the server operator to get an API key")
            browser.find_element(By.ID, "api-key").send_keys("page-key")
            browser.find_element(By.ID, "translate").click()
            result = browser.find_element(By.ID, "result")
            wait.until(lambda b: result.text == offline(translator, [LINES[0]])[LINES[0]])
            browser.refresh()  # the key is kept in the browser
            wait.until(lambda b: b.find_element(By.ID, "api-key").get_attribute("value") == "page-key")
        finally:
            browser.quit()
