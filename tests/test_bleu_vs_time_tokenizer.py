"""experiments/bleu_vs_time.py scores each pair with the sacreBLEU tokenizer the project uses for its target (Korean:
characters, Chinese: "zh", others: 13a), as `vanilla-train` and `vanilla-evaluate` do; the checkpoints, the model and
its translations are stand-ins (the script's own end-to-end test, in test_experiments.py, trains a toy run)."""

import importlib.util
import json
from pathlib import Path

import pytest

from vanilla_training.evaluation import bleu_tokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "bleu_vs_time.py"


@pytest.fixture
def bleu_vs_time(monkeypatch: pytest.MonkeyPatch):
    """The script as a module, each checkpoint's translation of a sentence being its reference with one word
    dropped (a score below 100 that depends on how the reference is tokenized)."""
    spec = importlib.util.spec_from_file_location("bleu_vs_time", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    references: list[str] = []
    monkeypatch.setattr(module.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: None)
    monkeypatch.setattr(module, "checkpoints_up_to", lambda run_dir, step, count: [f"{run_dir}/checkpoint-{step}"])
    monkeypatch.setattr(module, "average_checkpoints", lambda chosen: type("Model", (), {"config": None})())
    monkeypatch.setattr(module, "paper_generation_config", lambda config: None)
    monkeypatch.setattr(module, "elapsed_seconds", lambda run_dir, step: None)
    monkeypatch.setattr(
        module, "translate", lambda model, tokenizer, sources: [" ".join(r.split()[1:]) for r in references]
    )
    original = module.preprocess.sentences

    def sentences(test, source, target):
        found = original(test, source, target)
        references[:] = found[1]
        return found

    monkeypatch.setattr(module.preprocess, "sentences", sentences)
    return module


@pytest.mark.parametrize("target", ["ko", "zh", "de"])
def test_each_pair_is_scored_with_its_targets_tokenizer(bleu_vs_time, target: str, tmp_path: Path) -> None:
    texts = {
        "ko": "태초에 하나님이 천지를 창조하시니라",
        "zh": "起初神创造天地",
        "de": "Im Anfang schuf Gott die Himmel",
    }
    rows = [{"translation": {"en": "In the beginning God created", target: f"{texts[target]} {n}"}} for n in range(3)]
    test_file = tmp_path / "test.jsonl"
    test_file.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    report = bleu_vs_time.main([str(tmp_path), "--steps", "5", "--pair", f"en-{target}", "--test-file", str(test_file)])
    assert f"|tok:{bleu_tokenizer(target)}|" in report and bleu_tokenizer(target) == {"ko": "char", "zh": "zh"}.get(
        target, "13a"
    )
