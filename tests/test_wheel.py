"""The package as a user installs it: a wheel built from the repository, installed into a fresh virtual environment,
used from a folder that is not the checkout. Everything the code reads at run time must be in the wheel."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from helpers import toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

# Run by the fresh environment's Python, from an empty folder: the model, pipeline("translation"), the Marian
# converter and the CTranslate2 exporter, each from the installed package.
USE_THE_PACKAGE = """
import json, os, subprocess, sys
import ctranslate2, torch
import modeling_vanilla
from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel, pipeline
from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config
from vanilla_training.tokenizer import train_joint_bpe

sentences = ["the house is red", "the big house", "one two three", "red and big"]
tokenizer = train_joint_bpe(sentences * 20, vocab_size=60)
config = VanillaConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
model = VanillaForConditionalGeneration(config).eval()
model.generation_config = paper_generation_config(config)
model.save_pretrained("model")
tokenizer.save_pretrained("model")
loaded = AutoModelForSeq2SeqLM.from_pretrained("model")
translator = pipeline("translation", model="model", trust_remote_code=True)
translation = translator("the house")[0]["translation_text"]
marian = MarianMTModel(MarianConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, pad_token_id=63, decoder_start_token_id=63)).eval()
marian.save_pretrained("marian")
run = lambda *args: subprocess.run([sys.executable, "-m", *args], check=True, capture_output=True, text=True)
run("modeling_vanilla.convert_marian", "marian", "converted")
run("modeling_vanilla.export_ctranslate2", "model", "model-ct2")
ct2 = ctranslate2.Translator("model-ct2", device="cpu")
ids = torch.tensor([[5, 9, 3]])
with torch.no_grad():
    converted = VanillaForConditionalGeneration.from_pretrained("converted")
    same = torch.allclose(converted(input_ids=ids, decoder_input_ids=ids).logits,
                          marian(input_ids=ids, decoder_input_ids=ids).logits, atol=1e-5)
print(json.dumps({
    "package": modeling_vanilla.__file__,
    "translation_is_text": isinstance(translation, str),
    "loaded": type(loaded).__name__,
    "converted_equals_marian": same,
    "ct2_translates": bool(ct2.translate_batch([["▁the", "▁house", "</s>"]], beam_size=4)[0].hypotheses),
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = folder.glob("vanilla_transformer-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel with its train and ct2 extras (torch pinned first, as
    scripts/setup.sh does, so that pip takes the CPU build)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    for requirement in ("torch==2.13.0", f"{wheel}[train,ct2]"):
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", requirement], capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return python


def _run(program: Path, args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`program ARGS` (the fresh environment's Python, or one of its commands) in `cwd`, isolated from this checkout:
    no PYTHONPATH, no user site, an offline private Hub home."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HOME=str(cwd / "hf_home"), HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1")
    return subprocess.run(
        [str(program), *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600
    )


def _write_toy_data(folder: Path) -> None:
    """train/validation/test.jsonl of a word-for-word toy task: the same 36 pairs of two words in every split."""
    words = {"one": "eins", "two": "zwei", "three": "drei", "house": "Haus", "the": "das", "red": "rote"}
    lines = [
        json.dumps({"translation": {"en": " ".join(pair), "de": " ".join(words[w] for w in pair)}})
        for pair in [(a, b) for a in words for b in words]
    ]
    for split in ("train", "validation", "test"):
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


# A tiny model trained for 4 steps on the toy data: seconds.
TOY_MODEL = {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 16, "decoder_ffn_dim": 16}
TOY_TRAINING = ["--output-dir", "run", "--train-file", "train.jsonl", "--validation-file", "validation.jsonl",
                "--test-file", "test.jsonl", "--vocab-size", "60", "--model-config", json.dumps(TOY_MODEL),
                "--max-steps", "4", "--eval-steps", "2", "--save-steps", "2"]  # fmt: skip
COMMANDS = [
    "vanilla-train",
    "vanilla-translate",
    "vanilla-evaluate",
    "vanilla-push",
    "vanilla-average-checkpoints",
    "vanilla-show-attention",
    "vanilla-show-positional-encoding",
    "vanilla-convert-marian",
    "vanilla-export-ct2",
    "vanilla-export-argos",
    "vanilla-serve",
    "vanilla-corpus",
]

# Each console script's entry point called as its script calls it, with `--help`: its exit status and usage line.
HELP_OF_EVERY_COMMAND = """
import contextlib, io, json, sys
from importlib.metadata import entry_points
found = {}
for entry in entry_points(group="console_scripts"):
    if entry.name.startswith("vanilla-"):
        sys.argv, text = [entry.name, "--help"], io.StringIO()
        with contextlib.redirect_stdout(text):
            try:
                entry.load()()
            except SystemExit as exit:
                found[entry.name] = [exit.code, text.getvalue()[: len(entry.name) + 8]]
print(json.dumps(found))
"""


def test_the_wheel_holds_the_files_the_code_reads_and_no_top_level_training(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        card = archive.read("vanilla_training/hub_card.md").decode()
    for name in (
        "modeling_vanilla/modeling_vanilla.py",
        "modeling_vanilla/pipeline_vanilla.py",
        "vanilla_training/sacrebleu_metric/sacrebleu_metric.py",
        "vanilla_training/DATA_NOTICE.md",
        "vanilla_training/corpus/bible.py",
        "vanilla_training/export/argos.py",
        *(str(path.relative_to(ROOT)) for path in (ROOT / "vanilla_training" / "serving" / "static").iterdir()),
    ):
        assert name in names, name  # the web page's files among them
    assert card == (ROOT / "vanilla_training" / "hub_card.md").read_text()
    assert not any(name.startswith("training/") for name in names)
    top_level = next(name for name in names if name.endswith("top_level.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(top_level).decode().split() == ["modeling_vanilla", "vanilla_training"]


def test_model_pipeline_converter_and_exporter_run_from_the_installed_wheel(installed, tmp_path):
    done = _run(installed, ["-c", textwrap.dedent(USE_THE_PACKAGE)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "site-packages" in report["package"] and str(ROOT) not in report["package"]
    assert report["translation_is_text"] and report["loaded"] == "VanillaForConditionalGeneration"
    assert report["converted_equals_marian"] and report["ct2_translates"]


def test_training_runs_from_the_installed_wheel_with_its_card_and_bleu(installed, tmp_path):
    _write_toy_data(tmp_path)
    args = ["-m", "vanilla_training.cli.train", *TOY_TRAINING, "--test-limit", "5"]
    done = _run(installed, args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "test BLEU" in done.stdout
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "pipeline_tag: translation" in card and "${" not in card


def test_console_scripts_run_from_another_folder(installed, tmp_path):
    commands = installed.parent
    done = _run(installed, ["-c", HELP_OF_EVERY_COMMAND], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {name: [0, f"usage: {name} "] for name in COMMANDS}
    assert all((commands / name).is_file() for name in COMMANDS)
    files = write_toy_corpus(tmp_path, {"train": 400, "validation": 20, "test": 25})
    trained = _run(commands / "vanilla-train", toy_run_args(files, tmp_path / "run", show=0), cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-4000:]  # main's results dict would make it exit status 1
    text = "one two\n\nthe big red house\n"
    (tmp_path / "in.txt").write_text(text)
    translated = _run(commands / "vanilla-translate", ["run", "--input", "in.txt", "--output", "out.txt"], tmp_path)
    assert translated.returncode == 0, translated.stderr[-4000:]
    lines = (tmp_path / "out.txt").read_text().split("\n")
    assert len(lines) == 4 and lines[1] == lines[3] == "" and lines[0] and lines[2]
    piped = _run(commands / "vanilla-translate", ["run"], tmp_path, stdin=text)
    assert piped.returncode == 0 and piped.stdout == (tmp_path / "out.txt").read_text(), piped.stderr[-4000:]
    evaluated = _run(commands / "vanilla-evaluate", ["run", "--test-file", str(files["test"]), "--json"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    scores = json.loads(evaluated.stdout)
    test = json.loads((tmp_path / "run" / "final" / "training_results.json").read_text())["test"]
    assert (round(scores["bleu"]["score"], 2), round(scores["chrf"]["score"], 2)) == (test["bleu"], test["chrf"])
    assert scores["sentences"] == 25 and test["bleu"] > 30  # the toy run translates
    pictured = _run(commands / "vanilla-show-positional-encoding", ["--output", "pe.png"], tmp_path)
    assert pictured.returncode == 0 and (tmp_path / "pe.png").is_file(), pictured.stderr[-4000:]
