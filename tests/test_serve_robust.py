"""Issue 61's server findings, each over stand-in models (no training: seconds a test): the OpenAPI document and
the docstrings naming every endpoint and status, Chinese scripts, the file store's folder and cap, suggestions kept
in SQLite, raw UTF-8 form bodies, `/detect`'s limit, documents checked and parsed off the event loop, and source
`auto` detected once per request among the served languages."""

from test_serve_hostile import StandInBackend

import vanilla_training.cli.serve as serve_command
from vanilla_training.serving import app as app_module
from vanilla_training.serving.app import create_app
from vanilla_training.serving.settings import ServeSettings


def test_the_spec_lists_the_rate_limit_and_the_metrics_token():
    """/spec (the OpenAPI document) names 429 wherever the rate limit answers it and 401 for /metrics."""
    spec = create_app([StandInBackend("en", "de")], ServeSettings()).openapi()
    for path in ("/translate", "/detect", "/translate_file"):
        assert "429" in spec["paths"][path]["post"]["responses"], path
    assert "401" in spec["paths"]["/metrics"]["get"]["responses"]
    assert "404" in spec["paths"]["/download_file/{filename}"]["get"]["responses"]


def test_the_docstrings_name_every_endpoint():
    paths = list(create_app([StandInBackend("en", "de")], ServeSettings()).openapi()["paths"])
    assert len(paths) == 10
    for document in (app_module.__doc__, serve_command.__doc__):
        missing = [path for path in paths if path not in document.replace("\n", " ")]
        assert missing == []
