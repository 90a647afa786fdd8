"""`vanilla-translate` and `vanilla-evaluate` end to end on a run folder of a toy training run: a file in and a file
out (order, blank lines, bad input named), standard input and output, and scores equal to sacreBLEU's own and to the
test BLEU that training reported."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import sacrebleu
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from modeling_vanilla import VanillaForConditionalGeneration
from modeling_vanilla.convert_marian import convert_marian_folder
from vanilla_training.cli import evaluate as evaluate_model
from vanilla_training.cli import translate
from vanilla_training.cli.train import main as train
from vanilla_training.preprocess import load_file

from helpers import EOS, PAD, opus_mt_like, toy_run_args, write_toy_corpus

pytestmark = pytest.mark.slow  # the toy training run of `run` takes about 20 s; each test then a second or two

ROOT = Path(__file__).resolve().parents[1]
# In-domain sentences of different lengths (batches sort them by length) around blank and whitespace-only lines.
LINES = ["the big red house", "", "one", "two three one two the house", "   ", "red house", "three"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict, Path]:
    """A toy run folder (about 15 s of training), the results training returned, and its test file."""
    folder = tmp_path_factory.mktemp("run")
    files = write_toy_corpus(folder, {"train": 400, "validation": 20, "test": 25})
    results = train(toy_run_args(files, folder / "run", show=0))
    return folder / "run", results, files["test"]


def one_by_one(folder: Path, lines: list[str], **options) -> list[str]:
    """Each non-blank line translated alone by `generate` with the folder's decoding; "" for a blank line."""
    model = VanillaForConditionalGeneration.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
            continue
        inputs = tokenizer(line, return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**inputs, **options)
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


def output_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


def test_a_file_is_translated_line_by_line_in_order_with_blank_lines_kept(run, tmp_path):
    folder, _, _ = run
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes("\r\n".join(LINES).encode() + b"\r\n")  # Windows line ends too
    translate.main([str(folder), "--input", str(source), "--output", str(target)])
    expected = one_by_one(folder / "final", LINES)
    assert output_lines(target) == expected
    assert len(set(expected)) == len(LINES) - 1  # every sentence translates differently: order is checked
    translate.main([str(folder / "final"), "--input", str(source), "--output", str(target), "--beams", "1"])
    assert output_lines(target) == one_by_one(folder / "final", LINES, num_beams=1)


def test_the_models_own_decoding_unless_beams_says_otherwise(run, tmp_path, monkeypatch):
    folder, _, _ = run
    calls = []
    original = VanillaForConditionalGeneration.generate

    def spy(self, *args, **kwargs):
        calls.append((self.generation_config.num_beams, self.generation_config.length_penalty, kwargs.get("num_beams")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(VanillaForConditionalGeneration, "generate", spy)
    source = tmp_path / "in.txt"
    source.write_text("one two\n", encoding="utf-8")
    translate.main([str(folder), "--input", str(source), "--output", str(tmp_path / "a.txt")])
    translate.main([str(folder), "--input", str(source), "--output", str(tmp_path / "b.txt"), "--beams", "2"])
    assert calls == [(4, 1.0, None), (4, 1.0, 2)]  # as saved: beam 4, the demo recipe's length penalty


def test_a_line_that_is_not_utf8_is_named_and_nothing_is_written(run, tmp_path, capsys):
    folder, _, _ = run
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"one two\n\nthe house \xff\xfe\nred\n\xc3\n")
    with pytest.raises(SystemExit) as exit_info:
        translate.main([str(folder), "--input", str(source), "--output", str(target)])
    assert exit_info.value.code == 2
    assert f"{source} is not UTF-8 text: line 3, 5 (2 in all)" in capsys.readouterr().err
    assert not target.exists()


def test_a_line_longer_than_the_model_takes_is_refused_with_its_number(run, tmp_path, capsys):
    folder, _, _ = run
    tokenizer = AutoTokenizer.from_pretrained(folder / "final")
    limit = tokenizer.model_max_length
    long_line, longest_allowed = " ".join(["one"] * limit), " ".join(["one"] * (limit - 1))  # a word a token, </s>
    assert [len(ids) for ids in tokenizer([long_line, longest_allowed])["input_ids"]] == [limit + 1, limit]
    source = tmp_path / "in.txt"
    source.write_text(f"one two\n{long_line}\n{longest_allowed}\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        translate.main([str(folder), "--input", str(source), "--output", str(tmp_path / "out.txt")])
    assert (
        f"{source}: 1 line(s) longer than the model's limit of {limit:,} tokens (the tokenizer's model_max_length), "
        f"line 2 ({limit + 1:,} tokens); split them"
    ) in capsys.readouterr().err
    assert not (tmp_path / "out.txt").exists()


def test_standard_input_to_standard_output(run, tmp_path):
    folder, _, _ = run
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "vanilla_training.cli.translate", str(folder)],
        input="\n".join(LINES).encode(),  # no line end after the last line
        capture_output=True,
        cwd=ROOT,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().split("\n") == [*one_by_one(folder / "final", LINES), ""]
    assert b"translating" not in done.stderr  # a progress bar only for a file


def test_languages_are_checked_against_the_run(run, tmp_path, capsys):
    folder, _, _ = run
    source = tmp_path / "in.txt"
    source.write_text("one\n", encoding="utf-8")
    arguments = [str(folder), "--input", str(source), "--output", str(tmp_path / "out.txt")]
    translate.main([*arguments, "--source-lang", "en", "--target-lang", "de"])
    assert output_lines(tmp_path / "out.txt") == one_by_one(folder / "final", ["one"])
    with pytest.raises(SystemExit):
        translate.main([*arguments, "--target-lang", "fr"])
    assert f"{folder} translates en-de, not en-fr" in capsys.readouterr().err


def scores(arguments: list[str], capsys) -> dict:
    evaluate_model.main([*arguments, "--json"])
    return json.loads(capsys.readouterr().out)


def test_evaluate_gives_sacrebleus_scores_and_the_test_bleu_training_reported(run, tmp_path, capsys):
    folder, results, test_file = run
    test = load_file("test", str(test_file))
    sources = [pair["en"] for pair in test["translation"]]
    references = [pair["de"] for pair in test["translation"]]
    (tmp_path / "test.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("\n".join(references) + "\n", encoding="utf-8")
    translate.main([str(folder), "--input", str(tmp_path / "test.en"), "--output", str(tmp_path / "out.de")])
    translations = output_lines(tmp_path / "out.de")
    bleu, chrf = sacrebleu.corpus_bleu(translations, [references]), sacrebleu.corpus_chrf(translations, [references])

    from_file = scores([str(folder), "--test-file", str(test_file)], capsys)
    assert from_file["sentences"] == len(sources) == results["test"]["sentences"] and from_file["num_beams"] == 4
    assert from_file["bleu"]["score"] == pytest.approx(bleu.score, abs=1e-9)
    assert from_file["chrf"]["score"] == pytest.approx(chrf.score, abs=1e-9)
    assert round(from_file["bleu"]["score"], 2) == results["test"]["bleu"]
    assert round(from_file["chrf"]["score"], 2) == results["test"]["chrf"]
    assert from_file["bleu"]["signature"] == results["test"]["signature"]
    assert from_file["chrf"]["signature"] == results["test"]["chrf_signature"]
    assert from_file["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert from_file["chrf"]["signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    plain = scores(
        [str(folder), "--source", str(tmp_path / "test.en"), "--reference", str(tmp_path / "test.de")], capsys
    )
    assert (plain["bleu"], plain["chrf"]) == (from_file["bleu"], from_file["chrf"])
    greedy = scores([str(folder), "--test-file", str(test_file), "--beams", "1"], capsys)
    expected = one_by_one(folder / "final", sources, num_beams=1)
    assert greedy["num_beams"] == 1
    assert greedy["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(expected, [references]).score, abs=1e-9)

    evaluate_model.main([str(folder), "--test-file", str(test_file)])
    text = capsys.readouterr().out.splitlines()
    assert text[0] == f"BLEU {bleu.score:.2f}  {from_file['bleu']['signature']}"
    assert text[1] == f"chrF {chrf.score:.2f}  {from_file['chrf']['signature']}"


def test_evaluate_scores_plain_files_with_the_tokenizer_of_the_models_target(run, tmp_path, capsys):
    """A model that records Korean as its target is scored with sacreBLEU's `char` tokenizer on plain text files too
    (13a before), and `--target-lang` names the target of a model that records none."""
    folder, _, test_file = run
    test = load_file("test", str(test_file))
    (tmp_path / "test.en").write_text("".join(pair["en"] + "\n" for pair in test["translation"]), encoding="utf-8")
    (tmp_path / "test.ko").write_text("".join(pair["de"] + "\n" for pair in test["translation"]), encoding="utf-8")
    files = ["--source", str(tmp_path / "test.en"), "--reference", str(tmp_path / "test.ko")]
    korean = shutil.copytree(folder / "final", tmp_path / "korean")
    results = json.loads((korean / "training_results.json").read_text())
    (korean / "training_results.json").write_text(
        json.dumps({**results, "languages": {"source": "en", "target": "ko"}})
    )
    assert "|tok:char|" in scores([str(korean), *files], capsys)["bleu"]["signature"]
    (korean / "training_results.json").unlink()  # a model that records no languages
    assert "|tok:13a|" in scores([str(korean), *files], capsys)["bleu"]["signature"]
    assert (
        "|tok:char|"
        in scores([str(korean), *files, "--source-lang", "en", "--target-lang", "ko"], capsys)["bleu"]["signature"]
    )


def test_evaluate_on_a_built_in_pair_reads_its_test_split(run, capsys, monkeypatch):
    folder, results, test_file = run
    monkeypatch.setattr(
        evaluate_model, "load_corpus", lambda pair: datasets.DatasetDict(test=load_file("test", str(test_file)))
    )
    row = {"bleu": {"score": 1.5, "signature": "nrefs:1|b"}, "chrf": {"score": 2.5, "signature": "nrefs:1|c"}}
    wordings = {"multi_reference": {"references": ["e"], **row}, "sources": {"4": {"name": "WEB", "verses": 3, **row}}}
    calls = []
    monkeypatch.setattr(
        evaluate_model, "wording_scores", lambda translate, pair, predictions: calls.append(pair) or wordings
    )
    found = scores([str(folder), "--pair", "en-de"], capsys)
    assert round(found["bleu"]["score"], 2) == results["test"]["bleu"] and calls == ["en-de"]
    assert found["multi_reference"]["bleu"] == 1.5 and found["sources"]["4"]["chrf_signature"] == "nrefs:1|c"
    with pytest.raises(SystemExit):
        evaluate_model.main([str(folder), "--pair", "en-fr"])
    assert f"{folder} translates en-de, not en-fr" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--source", "a.txt"], "--source and --reference go together"),
        (["--pair", "en-de", "--source-lang", "en"], "--pair names its own"),
        (["--source", "a.txt", "--reference", "b.txt"], "a.txt has 2 lines but b.txt has 1"),
        (["--test-file", "u.jsonl"], "u.jsonl has no de (it has en, fr)"),
        # languages that are not the model's are refused before anything is read or translated, as --pair's are
        (["--test-file", "t.jsonl", "--source-lang", "de", "--target-lang", "en"], "translates en-de, not de-en"),
        (["--test-file", "t.jsonl", "--source-lang", "en", "--target-lang", "xx"], "translates en-de, not en-xx"),
        (["--source", "a.txt", "--reference", "b.txt", "--target-lang", "fr"], "translates en-de, not en-fr"),
        (["--pair", "en-uk"], "--train-file train.jsonl --validation-file validation.jsonl --source-lang en"),
    ],
)
def test_evaluate_names_bad_input(run, tmp_path, capsys, monkeypatch, extra, message):
    folder, _, _ = run
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text("one\ntwo\n", encoding="utf-8")
    Path("b.txt").write_text("eins\n", encoding="utf-8")
    Path("t.jsonl").write_text(json.dumps({"translation": {"en": "one", "de": "eins"}}) + "\n", encoding="utf-8")
    Path("u.jsonl").write_text(json.dumps({"translation": {"en": "one", "fr": "un"}}) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        evaluate_model.main([str(folder), *extra])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def word_tokenizer_of_opus_mt() -> PreTrainedTokenizerFast:
    """Words `t1`..`t62` with OPUS-MT's ids (`</s>` 0, pad 63), `</s>` appended: a tokenizer for `opus_mt_like`."""
    vocab = {"</s>": EOS, **{f"t{i}": i for i in range(1, PAD)}, "<pad>": PAD}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="t1"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="t1")


def test_a_marian_folder_and_its_conversion_translate_alike(tmp_path):
    marian = opus_mt_like()
    marian.save_pretrained(tmp_path / "marian")
    word_tokenizer_of_opus_mt().save_pretrained(tmp_path / "marian")
    convert_marian_folder(tmp_path / "marian", tmp_path / "converted")
    source = tmp_path / "in.txt"
    source.write_text("t5 t9 t17 t40\n\nt33\nt2 t8 t2 t8 t61 t7\n", encoding="utf-8")
    for name in ("marian", "converted"):  # greedy: the conversion decodes as the paper does, Marian's folder greedily
        output = str(tmp_path / f"{name}.txt")
        translate.main([str(tmp_path / name), "--input", str(source), "--output", output, "--beams", "1"])
    translations = output_lines(tmp_path / "marian.txt")
    assert translations == output_lines(tmp_path / "converted.txt")
    assert translations[1] == "" and all(translations[i] for i in (0, 2, 3))


# Where this package cannot be imported, transformers 5.24's AutoTokenizer.from_pretrained loads the folder's config
# first (AutoConfig, whose `auto_map` names configuration_vanilla.py), which asks "Do you wish to run the custom
# code?" and, refused (or with no terminal), falls back to a base config of model type "" with a warning. Nothing the
# folder declares avoids that: tokenizer_config.json is read only after the config. What to pass instead, each way
# in turn ("plain" first: the others would leave a config class behind), its output after a marker on both streams:
LOAD_TOKENIZER = """
import json, sys
sys.modules["modeling_vanilla"] = None  # the package is not importable here
from transformers import AutoTokenizer, PreTrainedTokenizerFast
ways = {
    "plain": lambda folder: AutoTokenizer.from_pretrained(folder),
    "class": lambda folder: PreTrainedTokenizerFast.from_pretrained(folder),
    "trust_remote_code": lambda folder: AutoTokenizer.from_pretrained(folder, trust_remote_code=True),
}
for how, load in ways.items():
    print(f"=={how}", flush=True)
    print(f"=={how}", file=sys.stderr, flush=True)
    ids = load(sys.argv[1])(["the big red house", "drei zwei"])["input_ids"]
    print("\\n" + json.dumps(ids), flush=True)  # after a line end: a prompt has none
"""


def sections(text: str) -> dict[str, str]:
    """What each way printed, by the `==way` markers of `LOAD_TOKENIZER`."""
    return {name: body for name, _, body in (part.partition("\n") for part in ("\n" + text).split("\n==")[1:])}


def test_a_run_folders_tokenizer_loads_without_the_package_as_the_card_says(run, tmp_path):
    folder, _, _ = run
    done = subprocess.run(
        [sys.executable, "-c", LOAD_TOKENIZER, str(folder / "final")],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = AutoTokenizer.from_pretrained(folder / "final")(["the big red house", "drei zwei"])["input_ids"]
    out, err = sections(done.stdout), sections(done.stderr)
    assert list(out) == list(err) == ["plain", "class", "trust_remote_code"]
    for how in out:
        assert json.loads(out[how].strip().splitlines()[-1]) == expected, how
        asked = "Do you wish to run the custom code?" in out[how]
        warned = "You are using a model of type `vanilla` to instantiate a model of type ``" in err[how]
        assert (asked, warned) == (how == "plain", how == "plain"), how
