"""`evaluation.paired_bootstrap` is sacreBLEU's own paired bootstrap test: the same BLEU and p-values as the
`sacrebleu --paired-bs` command on the same files, a perfect system beats garbage, and identical systems never win."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from vanilla_training.evaluation import corpus_bleu, paired_bootstrap

WORDS = "the a king woman child sees loves finds river city house bread in of and with".split()


def references(count: int = 40) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "." for _ in range(count)]


def sacrebleu_command(tmp_path: Path, refs: list[str], baseline: list[str], system: list[str]) -> dict:
    """`sacrebleu REF -i BASELINE SYSTEM --paired-bs -m bleu -f json`: the system's score and p-value, and the
    baseline's score."""
    files = {}
    for name, lines in (("ref", refs), ("baseline", baseline), ("system", system)):
        files[name] = tmp_path / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [str(Path(sys.executable).parent / "sacrebleu"), str(files["ref"])]
    command += ["-i", str(files["baseline"]), str(files["system"]), "--paired-bs", "-m", "bleu", "-f", "json"]
    printed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout
    first, second = json.loads(printed)
    return {"baseline": first["BLEU"]["score"], "system": second["BLEU"]["score"], "p": second["BLEU"]["p_value"]}


def test_the_references_against_garbage_win_significantly_as_the_sacrebleu_command_says(tmp_path: Path) -> None:
    refs = references()
    garbage = [" ".join(reversed(ref.lower().split())) for ref in refs]
    test = paired_bootstrap(garbage, refs, refs)
    assert test.system_bleu == pytest.approx(100)
    assert test.baseline_bleu == pytest.approx(corpus_bleu(garbage, refs)["score"])  # the project's own BLEU
    assert test.p_value < 0.05 and test.significant and test.win
    assert not paired_bootstrap(refs, garbage, refs).win  # the garbage loses, significantly
    assert sacrebleu_command(tmp_path, refs, garbage, refs) == {
        "baseline": test.baseline_bleu,
        "system": test.system_bleu,
        "p": test.p_value,
    }
    assert "bs:1000" in test.signature and "tok:13a" in test.signature


def test_a_near_tie_is_not_significant_as_the_sacrebleu_command_says(tmp_path: Path) -> None:
    """Two systems that differ in one word of one of 40 sentences: sacreBLEU's p-value is far above 0.05."""
    refs = references()
    baseline = [ref.replace("the", "a", 1) for ref in refs]
    system = [*baseline[:-1], refs[-1]]
    test = paired_bootstrap(baseline, system, refs)
    assert test.p_value >= 0.05 and not test.significant and not test.win
    assert sacrebleu_command(tmp_path, refs, baseline, system)["p"] == test.p_value


def test_identical_systems_never_win() -> None:
    """sacreBLEU never attributes a zero difference to chance: identical systems get p = 1/1001 (its smallest), so
    only a higher BLEU makes a win."""
    refs = references()
    system = [ref.replace("the", "a", 1) for ref in refs]
    test = paired_bootstrap(system, list(system), refs)
    assert test.system_bleu == test.baseline_bleu and test.p_value == pytest.approx(1 / 1001)
    assert test.significant and not test.win


def test_systems_of_other_lengths_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="2 and 3 translations of 3 references"):
        paired_bootstrap(["a", "b"], ["a", "b", "c"], ["a", "b", "c"])
