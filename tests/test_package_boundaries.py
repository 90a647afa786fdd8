"""What each package may import: the model package stands alone (nothing of `vanilla_training`, as the code saved
with a model must), and each exporter's `--help` runs with only its own extra installed. Each check runs in a fresh
process in which the forbidden modules cannot be imported (`sys.modules[name] = None`)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# [project.scripts] of pyproject.toml: each command's "module:function" (tomllib is Python 3.11's; we support 3.10)
SCRIPTS = dict(re.findall(r'^(vanilla-[a-z0-9-]+) = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE))

# The modules each optional extra installs (pyproject.toml's [project.optional-dependencies], by import name; the
# dependencies transformers itself needs, tqdm among them, left out).
EXTRA_MODULES = {
    "train": ["datasets", "evaluate", "sacrebleu", "accelerate", "matplotlib"],
    "ct2": ["ctranslate2"],
    "argos": ["ctranslate2", "sentencepiece", "spacy"],
    "serve": ["fastapi", "fastapi_offline", "uvicorn", "multipart", "prometheus_client", "pysbd", "py3langid",
              "limits", "docx", "odfdo"],
}  # fmt: skip
EXPORTERS = {"vanilla-convert-marian": None, "vanilla-export-ct2": "ct2", "vanilla-export-argos": "argos"}


def run_blocked(blocked: list[str], code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh Python of this checkout, in which importing any of `blocked` raises ImportError."""
    prelude = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, env=env
    )


def test_every_module_of_the_model_package_imports_without_the_application():
    modules = sorted(path.stem for path in (ROOT / "modeling_vanilla").glob("*.py") if path.stem != "__init__")
    assert len(modules) >= 8
    done = run_blocked(
        ["vanilla_training"],
        f"""
        import importlib
        for name in {modules!r}:
            importlib.import_module("modeling_vanilla." + name)
        print(sorted(name for name, module in sys.modules.items() if name.startswith("vanilla_training") and module))
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_blocking_a_module_makes_its_import_fail():
    """The check above could not pass for want of teeth: a blocked module's import fails."""
    done = run_blocked(["vanilla_training"], "import vanilla_training.translator")
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr


@pytest.mark.parametrize("command", sorted(EXPORTERS))
def test_each_exporters_help_runs_with_only_its_own_extra(command):
    own = EXTRA_MODULES.get(EXPORTERS[command], [])
    blocked = sorted({module for modules in EXTRA_MODULES.values() for module in modules} - set(own))
    module, function = SCRIPTS[command].split(":")
    done = run_blocked(
        blocked,
        f"""
        import importlib
        sys.argv = [{command!r}, "--help"]
        try:
            importlib.import_module({module!r}).{function}()
        except SystemExit as exit:
            sys.exit(exit.code)
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: {command} ")
