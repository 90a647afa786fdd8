"""The notebook for learners, notebooks/paper_walkthrough.ipynb: committed without outputs, every test and code
reference of its text resolving, and run top to bottom in its fast mode by nbclient, so that a cell that breaks
(an exception, or one of its own checks of the paper's properties) fails the suite; then checks of this test's own
on what its decoding and English-German cells computed."""

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
# Run in the notebook's kernel after its last cell, each printing "checked" at its end: what its decoding and its
# English-German cells computed, checked against oracles of their own (a teacher-forced forward pass for the beam's
# scores, sacreBLEU itself for the scores).
CHECKS = [
    """
# decoding (section 6.1): the paper's beam, reversing most unseen strings, scored with GNMT's penalty
assert (toy.generation_config.num_beams, toy.generation_config.length_penalty) == (4, 0.6)
for name, beam_strings in beam_outputs.items():
    reversed_right = sum(out == s[::-1] for out, s in zip(beam_strings, test_strings, strict=True))
    assert reversed_right > len(test_strings) / 2, (name, reversed_right)
# `found` is the last beam search, GNMT's: each score is log P(Y | X) / ((5 + |Y|) / 6) ** 0.6, |Y| counting </s>
for row in range(8):
    generated = found.sequences[row, 1:].tolist()
    length = generated.index(toy.config.eos_token_id) + 1 if toy.config.eos_token_id in generated else len(generated)
    target = found.sequences[row : row + 1, : length + 1]
    source = {key: value[row : row + 1] for key, value in inputs.items()}
    with torch.no_grad():
        logits = toy(**source, decoder_input_ids=target).logits
    log_probability = logits[0, :-1].float().log_softmax(-1).gather(-1, target[0, 1:, None]).sum().item()
    expected = log_probability / ((5 + length) / 6) ** 0.6
    assert abs(found.sequences_scores[row].item() - expected) < 1e-4, (row, found.sequences_scores[row], expected)
print("checked")
""",
    """
# English-German (section 6): the test slice translated, scored as sacreBLEU scores it
import sacrebleu

assert demo.languages == ("en", "de") and len(translations) == len(references) == TEST_SLICE
assert all(isinstance(text, str) for text in translations) and sum(map(bool, translations)) > TEST_SLICE / 2
by_sacrebleu = sacrebleu.corpus_bleu(translations, [references], tokenize="13a")
assert abs(bleu["score"] - by_sacrebleu.score) < 1e-9 and "tok:13a" in bleu["signature"], (bleu, by_sacrebleu)
assert abs(chrf["score"] - sacrebleu.corpus_chrf(translations, [references]).score) < 1e-9, chrf
print("checked")
""",
]


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
    English-German model for one minute where runs/demo holds no model. `CHECKS` then runs in its kernel: its beam
    searches are the paper's, reverse most unseen strings and score as GNMT's penalty says; its English-German
    scores are sacreBLEU's."""
    if os.environ.get("VANILLA_SKIP_CORPUS_TESTS") == "1":
        pytest.skip("VANILLA_SKIP_CORPUS_TESTS=1: the notebook's last section builds the real corpus")
    monkeypatch.setenv("VANILLA_NOTEBOOK_FAST", "1")
    notebook = run_notebook()
    pictures = [
        output for cell in notebook.cells for output in cell.get("outputs", []) if "image/png" in output.get("data", {})
    ]
    assert len(pictures) == PICTURES
    for cell in notebook.cells[-len(CHECKS) :]:
        assert {"name": "stdout", "output_type": "stream", "text": "checked\n"} in cell.outputs, cell.outputs


def run_notebook(allow_errors: bool = False) -> nbformat.NotebookNode:
    """The notebook with `CHECKS` as its last cells, executed; CellExecutionError, with the cell and its traceback,
    where a cell fails (unless `allow_errors`: then the error is the cell's output)."""
    notebook = read_notebook()
    notebook.cells += [nbformat.v4.new_code_cell(check) for check in CHECKS]
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        allow_errors=allow_errors,
        resources={"metadata": {"path": NOTEBOOK.parent}},
    )
    client.execute()
    return notebook
