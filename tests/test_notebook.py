"""The notebook for learners, notebooks/paper_walkthrough.ipynb: committed without outputs, every test and code
reference of its text resolving, and run top to bottom in its fast mode by nbclient, so that a cell that breaks
(an exception, or one of its own checks of the paper's properties) fails the suite."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_walkthrough import CODE_REFERENCE, unresolved

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "paper_walkthrough.ipynb"
# The figures it draws: positional encoding, its dot product, two schedules (one figure), the toy's loss, the toy's
# cross- and decoder self-attention, the English-German cross-attention. A figure drawn where matplotlib has no
# notebook backend (the package's picture modules select Agg) is silently missing: counted here.
PICTURES = 7


def read_notebook() -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    return notebook


def test_the_notebook_is_committed_without_outputs():
    """Outputs (pictures, progress bars, timings) stay out of the repository and its diffs: `nbstripout
    notebooks/paper_walkthrough.ipynb` removes them (notebooks/README.md)."""
    code = [cell for cell in read_notebook().cells if cell.cell_type == "code"]
    assert code
    kept = [index for index, cell in enumerate(code) if cell.outputs or cell.execution_count is not None]
    assert not kept, f"code cells {kept} hold outputs: run `nbstripout {NOTEBOOK.relative_to(ROOT)}`"


def test_every_section_names_the_test_that_checks_it_and_every_reference_resolves():
    text = "\n".join(cell.source for cell in read_notebook().cells if cell.cell_type == "markdown")
    sections = [part for part in text.split("\n## ")[1:] if not part.startswith(("0 ", "Where next"))]
    assert len(sections) >= 5
    for section in sections:
        named = [path for path, _ in CODE_REFERENCE.findall(section) if path.startswith("tests/")]
        assert named, f"section {section.splitlines()[0]!r} names no test"
    missing = unresolved(text, NOTEBOOK.parent)
    assert not missing, f"{NOTEBOOK.name} refers to what does not exist: {missing}"


@pytest.mark.slow
@pytest.mark.corpus  # its last section builds the real corpus where it is not built yet
def test_the_notebook_runs_top_to_bottom_in_fast_mode(monkeypatch):
    """Two minutes on 2 cores from a fresh clone (notebooks/README.md): its toy trains for half a minute, and its
    English-German model for one minute where runs/demo holds no model."""
    if os.environ.get("VANILLA_SKIP_CORPUS_TESTS") == "1":
        pytest.skip("VANILLA_SKIP_CORPUS_TESTS=1: the notebook's last section builds the real corpus")
    monkeypatch.setenv("VANILLA_NOTEBOOK_FAST", "1")
    notebook = read_notebook()
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK.parent}}
    )
    client.execute()  # CellExecutionError, with the cell and its traceback, where a cell fails
    pictures = [
        output for cell in notebook.cells for output in cell.get("outputs", []) if "image/png" in output.get("data", {})
    ]
    assert len(pictures) == PICTURES
