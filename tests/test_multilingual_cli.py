"""Issue 52, phase 2: a three-language model trained from the command line (`vanilla-train --languages en,de,fr`) on a
tiny bible.db, then used in every direction by the other commands: the model records its languages, each of the six
directions translates through `vanilla-translate` as `generate` with its `forced_bos_token_id` does and is scored by
`vanilla-evaluate --pair`, the results hold every direction's test scores, and the card lists them in `model-index`."""

import itertools
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import yaml
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_training.attention_heatmaps import attention_maps
from vanilla_training.card import licence_values, render_card
from vanilla_training.cli.train import parse_args
from vanilla_training.corpus import VERSIONS, free_versions, load_corpus, multilingual
from vanilla_training.preprocess import sentences
from vanilla_training.translator import translate

from hub_server import FakeHub

LANGUAGES = ["en", "de", "fr"]
DIRECTIONS = [f"{source}-{target}" for source, target in itertools.permutations(LANGUAGES, 2)]
WORDS = {
    "en": ["the king", "the woman", "the child", "the shepherd", "the river", "the city", "the house", "the bread"],
    "de": ["der König", "die Frau", "das Kind", "der Hirte", "der Fluss", "die Stadt", "das Haus", "das Brot"],
    "fr": ["le roi", "la femme", "l'enfant", "le berger", "le fleuve", "la ville", "la maison", "le pain"],
    "ko": ["왕이", "여자가", "아이가", "목자가", "강이", "도시가", "집이", "빵이"],  # BLEU's own tokenizer: char
}
VERBS = {
    "en": ["sees", "loves", "finds", "blesses"],
    "de": ["sieht", "liebt", "findet", "segnet"],
    "fr": ["voit", "aime", "trouve", "bénit"],
    "ko": ["본다", "사랑한다", "찾는다", "축복한다"],
}
GENESIS, ESTHER, JOHN = 1, 17, 43


def say(code: str, subject: int, verb: int, obj: int) -> str:
    """'The king sees the woman.' in the language `code`."""
    return f"{WORDS[code][subject]} {VERBS[code][verb]} {WORDS[code][obj]}.".capitalize()


BIN = Path(sys.executable).parent


def bible_db(path: Path) -> Path:
    """Verses 'A verb B.' in three languages: 160 in Genesis (train) with the first three verbs, 12 in Esther
    (validation) and 12 in John (test) with the fourth, so that no held-out verse shares a word 4-gram with a train
    verse (`corpus.py`'s leak rule would drop it)."""
    pairs = list(itertools.permutations(range(len(WORDS["en"])), 2))
    train = [(a, v, b) for a, b in pairs for v in range(3)]
    held_out = [(a, 3, b) for a, b in pairs]
    random.Random(0).shuffle(train)
    random.Random(1).shuffle(held_out)
    books = [(GENESIS, train[:160]), (ESTHER, held_out[:12]), (JOHN, held_out[12:24])]
    rows = []
    for book, verses in books:
        for number, (a, v, b) in enumerate(verses, start=1):
            for (
                code
            ) in LANGUAGES:  # every free version of the language worded alike (`vanilla-evaluate --pair` reads them)
                rows += [(bb, book, 1, number, say(code, a, v, b)) for bb in free_versions(code)]
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
            "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
        )
        db.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(rows)])
    return path


def own_words(code: str) -> set[str]:
    """The words of the toy's language `code` that no other of its languages has."""
    words = {language: set(" ".join(WORDS[language] + VERBS[language]).lower().split()) for language in WORDS}
    return words[code] - set().union(*(words[language] for language in words if language != code))


def command(name: str, *args: str, env: dict, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / name), *args], input=stdin, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict:
    data = tmp_path_factory.mktemp("data")
    bible_db(data / "bible.db")
    return {**os.environ, "VANILLA_DATA_DIR": str(data), "OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(data)}


@pytest.fixture(scope="module")
def run(tmp_path_factory, environment: dict) -> Path:
    output = tmp_path_factory.mktemp("run") / "multilingual"
    sizes = ["--size", "tiny", "--vocab-size", "120", "--max-tokens", "400", "--warmup-steps", "50"]
    steps = ["--max-steps", "300", "--eval-steps", "300", "--save-steps", "300", "--average-last", "1"]
    evaluation = ["--bleu-sentences", "12", "--test-beams", "1", "--show", "0", "--fp32"]
    command(
        "vanilla-train",
        *("--languages", ",".join(LANGUAGES), "--output-dir", str(output), *sizes, *steps, *evaluation),
        env=environment,
    )
    return output / "final"


def test_the_model_records_its_languages_and_every_direction_s_test_scores(run: Path) -> None:
    assert json.loads((run / "config.json").read_text())["languages"] == LANGUAGES
    assert AutoTokenizer.from_pretrained(run).languages == LANGUAGES
    results = json.loads((run / "training_results.json").read_text())
    assert results["multilingual"] == {"languages": LANGUAGES, "directions": DIRECTIONS}
    assert sorted(results["test"]["directions"]) == sorted(DIRECTIONS)
    assert all(score["sentences"] == 12 for score in results["test"]["directions"].values())
    for example in results["test"]["examples"]:  # one a direction: in its target language (words of no other)
        target = example["direction"].split("-")[1]
        assert own_words(target) & set(example["translation"].lower().rstrip(".").split()), example


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_each_direction_translates_through_vanilla_translate_as_generate_does(
    run: Path, environment: dict, direction: str
) -> None:
    source, target = direction.split("-")
    sentence = say(source, 0, 1, 2)  # a train verse's words
    printed = command(
        "vanilla-translate", str(run), "--source-lang", source, "--target-lang", target, env=environment, stdin=sentence
    ).stdout.strip()
    assert own_words(target) & set(printed.lower().rstrip(".").split()), printed  # the target's words
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(run).eval(), AutoTokenizer.from_pretrained(run)
    expected = translate(model, tokenizer, [sentence], forced_bos_token_id=tokenizer.get_lang_id(target))
    assert printed == expected[0]


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_each_direction_is_scored_by_vanilla_evaluate_pair(
    run: Path, environment: dict, direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pair's built-in test split holds the same 12 verses as the multilingual one here: decoded as the training's
    test was (greedy), its scores are sacreBLEU's of vanilla-translate's translations, and the training's scores of
    that direction."""
    printed = command("vanilla-evaluate", str(run), "--pair", direction, "--beams", "1", "--json", env=environment)
    scores = json.loads(printed.stdout)
    for name in ("VANILLA_DATA_DIR", "HF_DATASETS_CACHE"):
        monkeypatch.setenv(name, environment[name])
    source, target = direction.split("-")
    sources, references = sentences(load_corpus(direction)["test"], source, target)
    options = ("--source-lang", source, "--target-lang", target, "--beams", "1")
    translated = command("vanilla-translate", str(run), *options, env=environment, stdin="\n".join(sources) + "\n")
    translations = translated.stdout.splitlines()
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(translations, [references]).score)
    assert scores["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(translations, [references]).score)
    recorded = json.loads((run / "training_results.json").read_text())["test"]["directions"][direction]
    assert (scores["test"], scores["sentences"]) == (direction, recorded["sentences"])
    assert (round(scores["bleu"]["score"], 2), scores["bleu"]["signature"]) == (recorded["bleu"], recorded["signature"])
    assert round(scores["chrf"]["score"], 2) == recorded["chrf"]


def test_the_card_lists_every_direction_in_model_index(run: Path) -> None:
    card = (run / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["language"] == LANGUAGES
    tasks = [result["task"]["name"] for result in metadata["model-index"][0]["results"]]
    assert tasks == [f"Translation {direction}" for direction in DIRECTIONS]
    results = json.loads((run / "training_results.json").read_text())["test"]["directions"]
    for entry in metadata["model-index"][0]["results"]:
        direction = entry["task"]["name"].split()[-1]
        assert [metric["value"] for metric in entry["metrics"]] == [
            results[direction]["bleu"],
            results[direction]["chrf"],
        ]


def test_show_attention_takes_the_direction_and_decodes_from_its_language_token(
    run: Path, environment: dict, tmp_path: Path
) -> None:
    sentence = "Der König liebt das Kind."
    options = ("--source-lang", "de", "--target-lang", "fr")
    printed = command(
        "vanilla-show-attention", str(run), sentence, *options, "--output-dir", str(tmp_path), env=environment
    )
    translated = command("vanilla-translate", str(run), *options, env=environment, stdin=sentence).stdout.strip()
    assert f"translation: {translated}\n" in printed.stdout
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(run).eval(), AutoTokenizer.from_pretrained(run)
    maps = attention_maps(model, tokenizer, sentence, forced_bos_token_id=tokenizer.get_lang_id("fr"))
    assert maps.target_tokens[:2] == ["<s>", "__fr__"] and maps.translation == translated
    refused = subprocess.run(
        [str(BIN / "vanilla-show-attention"), str(run), sentence, "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert refused.returncode == 2 and "choose the target language" in refused.stderr, refused.stderr


def test_the_direction_matrix_prints_each_direction_s_chrf_in_its_cell_and_draws_it(run: Path, tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "experiments" / "direction_matrix.py"
    picture = tmp_path / "chrf.png"
    printed = subprocess.run(
        [sys.executable, str(script), str(run), "--out", str(picture)], capture_output=True, text=True, timeout=120
    )
    assert printed.returncode == 0, printed.stderr
    table = [line for line in printed.stdout.splitlines() if line.startswith("| ")]
    assert table[0] == "| source \\ target | en | de | fr |"
    directions = json.loads((run / "training_results.json").read_text())["test"]["directions"]
    for row, source in zip(table[1:], LANGUAGES, strict=True):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        expected = [
            "" if source == target else f"{directions[f'{source}-{target}']['chrf']:.1f}" for target in LANGUAGES
        ]
        assert cells == [source, *expected]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vanilla_push_uploads_the_card_with_every_direction_s_scores(run: Path, tmp_path: Path) -> None:
    with FakeHub(tmp_path / "hub") as fake:
        pushed = subprocess.run(
            [str(BIN / "vanilla-push"), "--model-dir", str(run), "--repo-id", "someone/multilingual"],
            capture_output=True,
            text=True,
            env={**fake.env(tmp_path / "home"), "OMP_NUM_THREADS": "1"},
            timeout=300,
        )
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        card = fake.repo_files("someone/multilingual")["README.md"].decode()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["model-index"][0]["name"] == "someone/multilingual"
    assert [r["task"]["name"] for r in metadata["model-index"][0]["results"]] == [
        f"Translation {d}" for d in DIRECTIONS
    ]
    assert "license: apache-2.0" in pushed.stdout  # the WEB, the Elberfelder 1905, Segond 1910: no ShareAlike text


def test_the_licence_covers_every_language_trained_on() -> None:
    """Hindi's IRV is CC BY-SA: a multilingual run that trains on it declares cc-by-sa-4.0 and credits it."""
    for languages, licence in ((["en", "de", "fr"], "apache-2.0"), (["en", "hi", "fr"], "cc-by-sa-4.0")):
        results = {"multilingual": {"languages": languages}, "data": {"corpus": "built-in"}}
        values = licence_values(results)
        assert values["license"] == licence
        assert (VERSIONS[free_versions("hi")[0]].name in values["licence_section"]) == ("hi" in languages)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--preset", "multilingual"], "--preset multilingual trains one model on many directions: give --languages"),
        (["--languages", "en,xx"], "unknown language 'xx'"),
        (["--languages", "en,de", "--pair", "en-de"], "--pair does not go with --languages"),
        (["--languages", "en,de", "--leave-out", "en-fr"], "--leave-out en-fr: not a direction of --languages en,de"),
        (["--languages", "en,de", "--leave-out", "en-de", "--leave-out", "de-en"], "leaves no direction to train"),
        (["--leave-out", "en-de"], "--leave-out goes with --languages"),
        (["--languages", "en,de", "--directions-per-verse", "0"], "give a positive whole number, or 'all'"),
        (["--languages", "en,de", "--tokenizer", "some/tokenizer"], "--tokenizer does not go with --languages yet"),
    ],
)
def test_the_command_line_refuses_what_a_multilingual_run_cannot_do(
    options: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        parse_args([*options, "--output-dir", "unused"])
    assert message in capsys.readouterr().err


def test_own_files_of_four_columns_train_with_a_direction_left_out_and_still_tested(
    tmp_path: Path, environment: dict
) -> None:
    """Own files in English, German and Korean, de-ko left out: every direction is tested, each with its target's BLEU
    tokenizer (char into Korean, 13a otherwise), and `vanilla-evaluate` scores text files into Korean as sacreBLEU
    does vanilla-translate's translations."""
    languages = ["en", "de", "ko"]
    directions = [f"{s}-{t}" for s, t in itertools.permutations(languages, 2)]
    pairs = {
        verb: [
            (s, t, say(s, a, verb, b), say(t, a, verb, b))
            for a, b in itertools.permutations(range(4), 2)
            for s, t in itertools.permutations(languages, 2)
        ]
        for verb in range(3)
    }

    def write(name: str, verb: int) -> str:
        rows = [dict(zip(multilingual.COLUMNS, row, strict=True)) for row in pairs[verb]]
        (tmp_path / name).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return str(tmp_path / name)

    files = ["--train-file", write("train.jsonl", 0), "--validation-file", write("validation.jsonl", 1)]
    files += ["--test-file", write("test.jsonl", 2)]
    sizes = ["--size", "tiny", "--vocab-size", "160", "--max-tokens", "400", "--max-steps", "4", "--eval-steps", "4"]
    sizes += ["--save-steps", "4", "--average-last", "1", "--bleu-sentences", "4", "--test-beams", "1", "--show", "0"]
    output = tmp_path / "run"
    options = ["--languages", ",".join(languages), "--leave-out", "de-ko", *files, *sizes, "--output-dir", str(output)]
    command("vanilla-train", *options, env=environment)
    results = json.loads((output / "final" / "training_results.json").read_text())
    assert results["multilingual"]["directions"] == [d for d in directions if d != "de-ko"]
    assert results["data"]["left_out"] == ["de-ko"] and results["data"]["corpus"] == "files"
    assert sorted(results["test"]["directions"]) == sorted(directions)  # the left-out direction is tested
    for direction, scores in results["test"]["directions"].items():
        assert f"|tok:{'char' if direction.endswith('-ko') else '13a'}|" in scores["signature"], (direction, scores)
    assert results["data"]["train_pairs"] == 12 * 5  # 12 sentence pairs in each of the 5 directions trained
    assert "de-ko were left out of training" in (output / "final" / "README.md").read_text()
    english = [source for s, t, source, _ in pairs[2] if (s, t) == ("en", "ko")]
    korean = [target for s, t, _, target in pairs[2] if (s, t) == ("en", "ko")]
    (tmp_path / "test.en").write_text("".join(f"{line}\n" for line in english), encoding="utf-8")
    (tmp_path / "test.ko").write_text("".join(f"{line}\n" for line in korean), encoding="utf-8")
    direction = ("--source-lang", "en", "--target-lang", "ko", "--beams", "1")
    evaluated = command(
        "vanilla-evaluate",
        str(output),
        "--source",
        str(tmp_path / "test.en"),
        "--reference",
        str(tmp_path / "test.ko"),
        *direction,
        "--json",
        env=environment,
    )
    scores = json.loads(evaluated.stdout)
    translations = command(
        "vanilla-translate", str(output), *direction, "--input", str(tmp_path / "test.en"), env=environment
    ).stdout.splitlines()
    assert "|tok:char|" in scores["bleu"]["signature"] and scores["sentences"] == 12
    assert scores["bleu"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(translations, [korean], tokenize="char").score
    )


def test_the_card_s_snippets_translate_in_their_direction(run: Path, tmp_path: Path) -> None:
    """The card rendered for the folder's own path as the repo id: its two Python snippets run as written and print
    the translation of the first test example's direction (the pipeline with src_lang/tgt_lang, generate with
    forced_bos_token_id)."""
    card = render_card(run, model_id=str(run))
    example = json.loads((run / "training_results.json").read_text())["test"]["examples"][0]
    target = example["direction"].split("-")[1]
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(run).eval(), AutoTokenizer.from_pretrained(run)
    expected = translate(model, tokenizer, [example["source"]], forced_bos_token_id=tokenizer.get_lang_id(target))[0]
    snippets = re.findall(r"```python\n(.*?)```", card, re.DOTALL)
    assert len(snippets) == 2 and f'forced_bos_token_id=tokenizer.get_lang_id("{target}")' in snippets[1]
    for snippet in snippets:
        printed = subprocess.run(
            [sys.executable, "-c", snippet],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
            timeout=120,
        )
        assert printed.returncode == 0, printed.stderr[-2000:]
        assert repr(expected) in printed.stdout, (expected, printed.stdout)


def test_a_corpus_without_validation_verses_is_refused_by_name(tmp_path: Path, monkeypatch) -> None:
    with sqlite3.connect(bible_db(tmp_path / "bible.db")) as db:
        db.execute("DELETE FROM bible WHERE bNumber = ?", (ESTHER,))
    monkeypatch.setenv("VANILLA_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="the corpus of en, de, fr has no validation verse that every language has"):
        multilingual.training_splits(LANGUAGES)


def test_the_multilingual_table_scores_each_direction_as_vanilla_evaluate_does_beside_the_per_pair_record(
    run: Path, environment: dict, tmp_path: Path
) -> None:
    experiments = Path(__file__).resolve().parents[1] / "experiments"
    scores = tmp_path / "table.json"
    printed = subprocess.run(
        [sys.executable, str(experiments / "multilingual_table.py"), str(run), "--directions", "en-de,en-fr"]
        + ["--json", str(scores)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert printed.returncode == 0, printed.stderr[-3000:]
    rows = json.loads(scores.read_text())["directions"]
    evaluated = json.loads(command("vanilla-evaluate", str(run), "--pair", "en-fr", "--json", env=environment).stdout)
    assert rows["en-fr"]["multilingual"] == {
        "bleu": round(evaluated["bleu"]["score"], 2),
        "chrf": round(evaluated["chrf"]["score"], 2),
        "sentences": 12,
    }
    assert rows["en-de"]["per_pair"] == {"bleu": 19.88, "chrf": 46.3, "sentences": 1866}  # docs/corpus.md's row
    table = {line.split("|")[1].strip(): line for line in printed.stdout.splitlines() if line.startswith("| ")}
    for direction, row in rows.items():
        pair, one = row["per_pair"], row["multilingual"]
        assert table[direction].split("|")[3].strip() == f"{pair['bleu']:.2f} / {pair['chrf']:.2f}"
        assert f"{one['bleu'] - pair['bleu']:+.2f} / {one['chrf'] - pair['chrf']:+.2f}" in table[direction]
        assert f"12 (per-pair: {pair['sentences']:,})" in table[direction]  # the tiny corpus is not the real one
    assert "wins on bleu: 0 of 2 (none)" in printed.stdout  # 12 verses of a tiny model against the real demo models
