"""The suite's own set-up: tests sharing a module-scoped fixture run on one pytest-xdist worker (conftest.py), so
that the fixture (a built wheel and its environment, a GPU-check run, a trained model) is built once, not once per
worker."""

import os

import pytest


@pytest.fixture(scope="module")
def built_once() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "no worker")


def test_a_test_with_a_module_fixture_is_tagged_with_its_modules_group(request, built_once):
    if request.config.getoption("dist", "no") == "no" and built_once == "no worker":
        pytest.skip("one process (-n 0): nothing is distributed")
    assert request.node.nodeid.endswith("@test_suite"), (
        f"{request.node.nodeid} carries no xdist group: --dist loadgroup will split the module's tests over the "
        "workers and build its module-scoped fixtures on each (pytest-xdist cannot tag ids under this pytest)"
    )


def test_a_hanging_test_is_stopped_by_pytest_timeout(request):
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (the dev extra)"
    assert float(request.config.getini("timeout")) > 0, "no per-test timeout: a hanging test would hold CI"


def test_each_worker_compiles_into_its_own_inductor_cache():
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    assert os.path.basename(cache).startswith("vanilla-tests-inductor-"), cache
