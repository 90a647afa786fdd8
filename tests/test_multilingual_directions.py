"""A multilingual model trains the directions chosen (`vanilla-train --directions`: a list or a named set),
records them (results, card, config), draws its K directions of a verse afresh each epoch, and translates a direction
it did not train through a pivot inside it (equal to translating twice) or, only when asked, zero-shot, in
`vanilla-translate`, `vanilla-evaluate` and `vanilla-serve` alike; the off-target rate of known sentences."""

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_multilingual import SENTENCES, save_toy_model, say
from test_multilingual_cli import bible_db
from test_serve import InProcessServer, post_json, request

from vanilla_training.batching import TokenBudgetBatchSampler
from vanilla_training.cli import evaluate as evaluate_command
from vanilla_training.cli import translate as translate_command
from vanilla_training.cli.train import main as train_main
from vanilla_training.cli.train import parse_args
from vanilla_training.corpus import Direction, multilingual
from vanilla_training.evaluation import corpus_chrf, off_target_rate
from vanilla_training.serving.backends import TorchBackend
from vanilla_training.serving.settings import ServeSettings
from vanilla_training.translator import load_translator

# The toy model of test_multilingual (en, de, fr) as if it had trained only de-en and en-fr: de-fr is reached through
# English; fr-de by no pivot (nothing is trained from French).
TRAINED = ["de-en", "en-fr"]


def test_directions_are_a_list_or_a_named_set_and_refused_by_name() -> None:
    assert multilingual.parse_directions("english-centric", ["en", "de", "fr"]) == [
        Direction("en", "de"), Direction("de", "en"), Direction("en", "fr"), Direction("fr", "en"),
    ]  # fmt: skip
    assert multilingual.parse_directions("all", ["en", "de"]) == [Direction("en", "de"), Direction("de", "en")]
    assert multilingual.parse_directions("de-en, en-fr") == [Direction("de", "en"), Direction("en", "fr")]
    for spec, languages, message in [
        ("en-xx", None, "unknown language 'xx'"),
        ("en-pt", None, r"Portuguese \(pt\) has no free version"),
        ("en-de,en-de", None, "direction en-de is given twice"),
        ("en-en", None, "translates English into itself"),
        ("en-de-fr", None, "'en-de-fr' in 'en-de-fr' is no direction"),
        ("en-fr", ["en", "de"], "direction en-fr: fr is not one of the languages en,de"),
        ("english-centric", ["de", "fr"], r"English \(en\) is not one of the languages de,fr"),
    ]:
        with pytest.raises(ValueError, match=message):
            multilingual.parse_directions(spec, languages)


def test_the_command_line_takes_directions_with_or_without_languages(capsys: pytest.CaptureFixture) -> None:
    job = parse_args(["--directions", "de-en,en-fr", "--output-dir", "unused"])
    assert job.multilingual and job.data.languages == ("de", "en", "fr")
    assert job.data.directions == (Direction("de", "en"), Direction("en", "fr"))
    job = parse_args(
        ["--languages", "en,de,fr", "--directions", "english-centric", "--leave-out", "fr-en", "--output-dir", "x"]
    )
    assert [str(d) for d in job.data.directions] == ["en-de", "de-en", "en-fr"]
    assert [str(d) for d in job.data.tested] == ["en-de", "en-fr", "de-en", "fr-en"]  # the left-out one tested
    for options, message in [
        (["--languages", "en,de,fr", "--directions", "en-de"], "has no direction from or into fr"),
        (["--languages", "en,de", "--directions", "en-fr"], "fr is not one of the languages en,de"),
        (["--directions", "en-de,en-de"], "direction en-de is given twice"),
        (["--directions", "en-de", "--pair", "en-de"], "--pair does not go with --directions"),
    ]:
        with pytest.raises(SystemExit):
            parse_args([*options, "--output-dir", "unused"])
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "trained"),
    [
        (["--languages", "en,de,fr", "--directions", "english-centric"], ["en-de", "de-en", "en-fr", "fr-en"]),
        (["--directions", "de-en,en-fr", "--directions-per-verse", "1"], TRAINED),
    ],
)
def test_a_run_trains_exactly_the_directions_chosen_and_records_them(
    options: list[str], trained: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few steps of a tiny model on the toy bible.db of test_multilingual_cli: its train split holds the chosen
    directions only; the results, the card and the config name them; the test split holds them too."""
    bible_db(tmp_path / "bible.db")
    monkeypatch.setenv("VANILLA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    output = tmp_path / "run"
    argv = [*options, "--output-dir", str(output), "--size", "tiny", "--vocab-size", "120", "--max-tokens", "400"]
    argv += ["--warmup-steps", "2", "--max-steps", "2", "--eval-steps", "2", "--save-steps", "2", "--average-last", "1"]
    argv += ["--bleu-sentences", "2", "--test-beams", "1", "--test-limit", "1", "--show", "0", "--fp32"]
    job = parse_args(argv)
    train_split = job.data.load_splits()["train"]
    assert set(map("-".join, zip(train_split["source_lang"], train_split["target_lang"], strict=True))) == set(trained)
    results = train_main(argv)
    assert results["multilingual"]["directions"] == trained
    assert list(results["test"]["directions"]) == [d for d in results["test"]["directions"] if d in trained]
    assert sorted(results["test"]["directions"]) == sorted(trained)
    assert json.loads((output / "final" / "config.json").read_text())["trained_directions"] == trained
    assert (
        f"It trained {len(trained)} directions: {', '.join(trained)}." in (output / "final" / "README.md").read_text()
    )


def drawn(sampler: TokenBudgetBatchSampler, epoch: int, groups: np.ndarray) -> dict[int, set[int]]:
    """The examples of each group that `sampler` yields in `epoch`."""
    sampler.set_epoch(epoch)
    chosen: dict[int, set[int]] = {}
    for batch in sampler:
        for example in batch:
            chosen.setdefault(int(groups[example]), set()).add(example)
    return chosen


def test_each_epoch_draws_its_own_directions_of_a_verse_and_the_same_seed_the_same() -> None:
    """40 verses of 6 rows (directions), 2 drawn a verse: each epoch gives 2 of every verse, within the budget and in
    as many batches as every other epoch; two epochs draw differently for most verses; a sampler of the same seed
    draws the same, one of another seed otherwise."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 6)
    lengths = rng.integers(3, 40, size=len(groups))

    def sampler(seed: int) -> TokenBudgetBatchSampler:
        return TokenBudgetBatchSampler(lengths, 160, seed=seed, groups=groups, per_group=2)

    first = sampler(1)
    epochs = [drawn(first, epoch, groups) for epoch in (0, 1)]
    for epoch in (0, 1):
        first.set_epoch(epoch)
        batches = list(first)
        assert len(batches) == len(first) and all(len(b) * lengths[b].max() <= 160 for b in batches)
        assert Counter(len(rows) for rows in epochs[epoch].values()) == Counter({2: 40})
    assert sum(epochs[0][verse] != epochs[1][verse] for verse in range(40)) > 20
    assert drawn(sampler(1), 1, groups) == epochs[1]
    assert drawn(sampler(2), 1, groups) != epochs[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The toy model of test_multilingual, recording that it trained `TRAINED` only."""
    folder = save_toy_model(tmp_path_factory.mktemp("directions") / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "trained_directions": TRAINED}))
    return folder


def translated(folder: Path, tmp_path: Path, source: str, target: str, *options: str) -> list[str]:
    given, written = tmp_path / f"in.{source}", tmp_path / f"out.{target}"
    given.write_text("".join(say(s, source) + "\n" for s in SENTENCES), encoding="utf-8")
    argv = [str(folder), "--source-lang", source, "--target-lang", target, "--input", str(given)]
    translate_command.main([*argv, "--output", str(written), *options])
    return written.read_text(encoding="utf-8").splitlines()


def test_vanilla_translate_pivots_inside_the_model_and_translates_zero_shot_only_when_asked(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    translator = load_translator(folder)
    assert translator.directions == [Direction("de", "en"), Direction("en", "fr")]
    german, french = [say(s, "de") for s in SENTENCES], [say(s, "fr") for s in SENTENCES]
    twice = translator.translate(translator.translate(german, target_lang="en"), target_lang="fr")
    assert translated(folder, tmp_path, "de", "fr") == twice == french  # the toy knows its dictionary
    assert "did not train de-fr: translating it through English (de-en, then en-fr)" in capsys.readouterr().err
    assert translated(folder, tmp_path, "de", "en") == translator.translate(german, target_lang="en")
    assert "did not train" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        translated(folder, tmp_path, "fr", "de")
    assert "did not train fr-de, and no pivot" in capsys.readouterr().err
    direct = translator.translate(french, target_lang="de")
    assert translated(folder, tmp_path, "fr", "de", "--allow-zero-shot") == direct == german
    assert "did not train fr-de: translating it zero-shot" in capsys.readouterr().err


def evaluated(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture, source: str, target: str, *options: str
) -> tuple[dict, str]:
    """`vanilla-evaluate --json` of the toy's sentences in `source` against their words in `target`: the scores and
    what it wrote on standard error."""
    given, references = tmp_path / f"test.{source}", tmp_path / f"test.{target}"
    given.write_text("".join(say(s, source) + "\n" for s in SENTENCES), encoding="utf-8")
    references.write_text("".join(say(s, target) + "\n" for s in SENTENCES), encoding="utf-8")
    argv = [str(folder), "--source", str(given), "--reference", str(references), "--json", *options]
    evaluate_command.main([*argv, "--source-lang", source, "--target-lang", target])
    printed = capsys.readouterr()
    return json.loads(printed.out), printed.err


def test_vanilla_evaluate_pivots_inside_the_model_and_translates_zero_shot_only_when_asked(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A direction not trained is scored on its route's translations (through English: those of translating twice,
    chrF 100 on the toy's dictionary; zero-shot only when asked), which standard error names and the scores record;
    a trained one as before."""
    translator = load_translator(folder)
    german, french = [say(s, "de") for s in SENTENCES], [say(s, "fr") for s in SENTENCES]
    twice = translator.translate(translator.translate(german, target_lang="en"), target_lang="fr")
    scores, said = evaluated(folder, tmp_path, capsys, "de", "fr")
    assert scores["pivot"] == "en" and "zero_shot" not in scores
    assert twice == french and scores["chrf"]["score"] == corpus_chrf(twice, french)["score"] == 100
    assert "did not train de-fr: translating it through English (de-en, then en-fr)" in said
    scores, said = evaluated(folder, tmp_path, capsys, "de", "en")
    assert "pivot" not in scores and "zero_shot" not in scores and "did not train" not in said
    with pytest.raises(SystemExit):
        evaluated(folder, tmp_path, capsys, "fr", "de")
    assert "did not train fr-de, and no pivot" in capsys.readouterr().err
    direct = translator.translate(french, target_lang="de")
    scores, said = evaluated(folder, tmp_path, capsys, "fr", "de", "--allow-zero-shot")
    assert scores["zero_shot"] is True and "pivot" not in scores
    assert direct == german and scores["chrf"]["score"] == corpus_chrf(direct, german)["score"] == 100
    assert "did not train fr-de: translating it zero-shot" in said


def test_vanilla_serve_pivots_inside_the_model_and_translates_zero_shot_only_when_asked(folder: Path) -> None:
    translator = load_translator(folder)
    german, french = [say(s, "de") for s in SENTENCES], [say(s, "fr") for s in SENTENCES]
    with InProcessServer([TorchBackend(load_translator(folder), "fp32")], ServeSettings()) as server:
        assert request(server.url + "/languages")[2] == [
            {"code": "de", "name": "German", "targets": ["en", "fr"]},
            {"code": "en", "name": "English", "targets": ["fr"]},
            {"code": "fr", "name": "French", "targets": []},
        ]
        status, answer = post_json(server.url + "/translate", {"q": german, "source": "de", "target": "fr"})
        twice = translator.translate(translator.translate(german, target_lang="en"), target_lang="fr")
        assert (status, answer) == (200, {"translatedText": twice, "pivot": "en"}) and twice == french
        assert post_json(server.url + "/translate", {"q": german, "source": "de", "target": "en"})[1].keys() == {
            "translatedText"
        }
        status, answer = post_json(server.url + "/translate", {"q": french, "source": "fr", "target": "de"})
        assert status == 400 and answer["error"].startswith("fr-de is a direction the model did not train")
        assert "--allow-zero-shot" in answer["error"]
    backends = [TorchBackend(load_translator(folder), "fp32")]
    with InProcessServer(backends, ServeSettings(allow_zero_shot=True)) as server:
        status, answer = post_json(server.url + "/translate", {"q": french, "source": "fr", "target": "de"})
        direct = translator.translate(french, target_lang="de")
        assert (status, answer) == (200, {"translatedText": direct, "zeroShot": True}) and direct == german


def test_the_off_target_rate_of_sentences_in_known_languages() -> None:
    """Two German sentences, one English, one French and one without letters, into German: 3 of 5 off target; among
    the model's languages alike; into French 4 of 5."""
    sentences = [
        "Im Anfang schuf Gott die Himmel und die Erde.",
        "Und die Erde war wüst und leer, und Finsternis war über der Tiefe.",
        "In the beginning God created the heavens and the earth.",
        "Au commencement, Dieu créa les cieux et la terre.",
        "...",
    ]
    assert off_target_rate(sentences, "de") == pytest.approx(3 / 5)
    assert off_target_rate(sentences, "de", ["en", "de", "fr"]) == pytest.approx(3 / 5)
    assert off_target_rate(sentences, "fr") == pytest.approx(4 / 5)
    with pytest.raises(ValueError, match="no predictions"):
        off_target_rate([], "de")


def test_a_copy_of_the_toy_without_trained_directions_trains_every_direction(folder: Path, tmp_path: Path) -> None:
    """A model whose config records no trained directions (every model trained before them) trained every one."""
    copy = Path(shutil.copytree(folder, tmp_path / "all"))
    config = json.loads((copy / "config.json").read_text())
    del config["trained_directions"]
    (copy / "config.json").write_text(json.dumps(config))
    translator = load_translator(copy)
    assert translator.directions == multilingual.directions(["en", "de", "fr"])
    assert translator.untrained_directions == []
