"""experiments/multilingual_paired.py end to end on the toy bible.db of test_multilingual_cli: the toy multilingual
model of test_multilingual (as if it had trained de-en and en-fr only) against tiny per-pair models, each direction
scored as `vanilla-evaluate --pair` scores it, with sacreBLEU's paired test; the untrained directions zero-shot and
through English, with their off-target rates."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from test_multilingual import save_toy_model
from test_multilingual_cli import bible_db

from vanilla_training.cli import evaluate as evaluate_command
from vanilla_training.corpus import load_corpus
from vanilla_training.evaluation import off_target_rate
from vanilla_training.preprocess import sentences
from vanilla_training.translator import load_translator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import multilingual_paired  # noqa: E402

TABLE = ["de-en", "en-fr", "en-de", "de-fr"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The toy multilingual model (trained de-en and en-fr, by its config) and RUNS/demo-PAIR per-pair models."""
    root = tmp_path_factory.mktemp("paired")
    model = save_toy_model(root / "multilingual")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "trained_directions": ["de-en", "en-fr"]}))
    one_direction = {key: value for key, value in config.items() if key != "languages"}
    for pair in TABLE:  # the toy's weights, decoding without a target token: a model of one direction
        folder = Path(shutil.copytree(model, root / "runs" / f"demo-{pair}"))
        (folder / "config.json").write_text(json.dumps(one_direction))
        source, target = pair.split("-")
        results = {"languages": {"source": source, "target": target}}
        (folder / "training_results.json").write_text(json.dumps(results), encoding="utf-8")
    return {"model": model, "runs": root / "runs"}


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bible_db(tmp_path / "bible.db")
    monkeypatch.setenv("VANILLA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))


def evaluated(folder: Path, pair: str, capsys: pytest.CaptureFixture) -> float:
    """`vanilla-evaluate FOLDER --pair PAIR --json`'s BLEU (a multilingual model routes an untrained pair)."""
    capsys.readouterr()
    evaluate_command.main([str(folder), "--pair", pair, "--json", "--allow-zero-shot"])
    return round(json.loads(capsys.readouterr().out)["bleu"]["score"], 2)


def test_the_table_scores_both_systems_as_vanilla_evaluate_does_with_the_paired_test(
    folders: dict[str, Path], corpus: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    written = tmp_path / "paired.json"
    argv = [str(folders["model"]), "--per-pair-runs", str(folders["runs"]), "--directions", ",".join(TABLE)]
    results = multilingual_paired.main([*argv, "--untrained", "de-fr,fr-de", "--untrained-verses", "5"] + [
        "--json", str(written)])  # fmt: skip
    printed = capsys.readouterr().out
    assert json.loads(written.read_text()) == results
    table = results["table"]
    assert [table[pair]["route"] for pair in TABLE] == ["trained", "trained", "zero-shot", "through en"]
    for pair in TABLE:
        row = table[pair]
        assert row["verses"] == 12 and 1 / 1001 <= row["p_value"] <= 1
        assert row["per_pair"]["bleu"] == evaluated(folders["runs"] / f"demo-{pair}", pair, capsys)
        assert row["multilingual"]["bleu"] == evaluated(folders["model"], pair, capsys)
        assert row["win"] == (row["multilingual"]["bleu"] > row["per_pair"]["bleu"] and row["p_value"] < 0.05)
        line = next(line for line in printed.splitlines() if line.startswith(f"| {pair} |"))
        assert f"| {row['per_pair']['bleu']:.2f} | {row['multilingual']['bleu']:.2f} |" in line
        assert line.endswith(f"| {row['p_value']:.4f} | {'yes' if row['win'] else 'no'} |")
    wins = sum(row["win"] for row in table.values())
    assert f"the multilingual model wins {wins} of 4 (p < 0.05)" in printed

    untrained = results["untrained"]
    assert untrained["fr-de"].keys() == {"verses", "zero_shot"} and "| fr-de | 5 |" in printed  # no pivot reaches it
    translator = load_translator(folders["model"])
    german = sentences(load_corpus("de-fr")["test"], "de", "fr")[0][:5]
    zero_shot = translator.translate(german, target_lang="fr")
    twice = translator.translate(translator.translate(german, target_lang="en"), target_lang="fr")
    row = untrained["de-fr"]
    assert row["pivot"]["through"] == "en" and row["verses"] == 5
    assert row["zero_shot"]["off_target"] == round(off_target_rate(zero_shot, "fr", ["en", "de", "fr"]), 4)
    assert row["pivot"]["off_target"] == round(off_target_rate(twice, "fr", ["en", "de", "fr"]), 4)
    assert "where a pivot reaches (1 of 2)" in printed


def test_a_missing_per_pair_run_or_a_trained_direction_asked_as_untrained_is_refused_by_name(
    folders: dict[str, Path], corpus: None
) -> None:
    argv = [str(folders["model"]), "--per-pair-runs", str(folders["runs"])]
    with pytest.raises(SystemExit, match="demo-de-ru: no per-pair run of de-ru"):
        multilingual_paired.main([*argv, "--directions", "de-ru"])
    with pytest.raises(SystemExit, match="--untrained de-en: not a direction between the model's languages"):
        multilingual_paired.main([*argv, "--directions", "de-en", "--untrained", "de-en"])
    (folders["runs"] / "demo-en-de" / "training_results.json").rename(folders["runs"] / "kept.json")
    try:
        with pytest.raises(SystemExit, match="demo-en-de translates no recorded direction, not en-de"):
            multilingual_paired.main([*argv, "--directions", "en-de"])
    finally:
        (folders["runs"] / "kept.json").rename(folders["runs"] / "demo-en-de" / "training_results.json")


def test_without_per_pair_runs_only_the_untrained_directions_are_scored(
    folders: dict[str, Path], corpus: None, capsys: pytest.CaptureFixture
) -> None:
    results = multilingual_paired.main([str(folders["model"]), "--untrained", "de-fr", "--untrained-verses", "5"])
    printed = capsys.readouterr().out
    assert results["table"] == {} and list(results["untrained"]) == ["de-fr"]
    assert "per-pair BLEU" not in printed and "| de-fr |" in printed
