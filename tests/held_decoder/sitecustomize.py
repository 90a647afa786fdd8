"""Imported at start by every Python process whose PYTHONPATH leads here (the `vanilla-serve` processes of
tests/test_serve.py that must hold sentences in the queue, their workers included): while the file that
VANILLA_TEST_HOLD names exists, the continuous decoder takes no sentence into its batch. The decoder is held once
its module is imported (importing it here would slow every process's start: uvicorn takes a worker that does not
answer its first health check within 5 s for dead)."""

import importlib.abc
import importlib.util
import os
import sys
import time

HOLD = os.environ.get("VANILLA_TEST_HOLD")
MODULE = "vanilla_training.serving.continuous"


def hold(decoder: type) -> None:
    join = decoder.join

    def held_join(self, keys, sentences):
        while os.path.exists(HOLD):
            time.sleep(0.02)
        return join(self, keys, sentences)

    decoder.join = held_join


class HoldOnImport(importlib.abc.MetaPathFinder):
    """Finds the decoder's module as usual, and holds its decoder once the module has run."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def run_and_hold(module):
            run(module)
            hold(module.ContinuousDecoder)

        spec.loader.exec_module = run_and_hold
        return spec


if HOLD:
    sys.meta_path.insert(0, HoldOnImport())
