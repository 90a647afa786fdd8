"""Save, load, Auto classes, and remote code in a process where the package cannot be imported."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, VanillaModel

from helpers import padded_batch, tiny_model


def _assert_tied(model) -> None:
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared


@pytest.fixture
def saved(tmp_path: Path):
    model = tiny_model(std=0.3)
    model.save_pretrained(tmp_path)
    return model, tmp_path


def _outputs(model):
    ids, mask = padded_batch()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 4), 2)).logits
        generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
    return logits, generated


def test_saved_folder_holds_safetensors_code_and_auto_map(saved):
    _, folder = saved
    files = sorted(p.name for p in folder.iterdir())
    assert files == [
        "config.json",
        "configuration_vanilla.py",
        "constrained_beam_search.py",  # generate(force_words_ids=...), copied with the code it imports
        "generation_config.json",
        "gnmt_beam_search.py",
        "model.safetensors",
        "modeling_vanilla.py",
        "pipeline_vanilla.py",  # pipeline("translation"), declared in config.json (tests/test_pipeline.py)
    ]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "vanilla" and config["tie_word_embeddings"] is True
    assert config["auto_map"] == {
        "AutoConfig": "configuration_vanilla.VanillaConfig",
        "AutoModel": "modeling_vanilla.VanillaModel",
        "AutoModelForSeq2SeqLM": "modeling_vanilla.VanillaForConditionalGeneration",
    }
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (
        "num_beams" not in generation
    )  # a model of the class decodes greedily (tests/test_transformers_conventions.py)
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as weights:
        names = set(weights.keys())
    assert "model.shared.weight" in names and "lm_head.weight" not in names  # one matrix stored once


def test_round_trip_through_every_entry_point(saved):
    model, folder = saved
    logits, generated = _outputs(model)
    for loaded in (
        VanillaForConditionalGeneration.from_pretrained(folder),
        AutoModelForSeq2SeqLM.from_pretrained(folder),
    ):
        assert type(loaded) is VanillaForConditionalGeneration
        _assert_tied(loaded)
        loaded_logits, loaded_generated = _outputs(loaded)
        assert torch.allclose(loaded_logits, logits, atol=1e-6)  # also: the positional encoding survived meta init
        assert torch.equal(loaded_generated, generated)
    assert isinstance(AutoConfig.from_pretrained(folder), VanillaConfig)
    base = AutoModel.from_pretrained(folder)
    assert type(base) is VanillaModel and base.shared.weight is base.encoder.embed_tokens.weight
    assert torch.equal(base.shared.weight, model.model.shared.weight)


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["modeling_vanilla"] = None  # the package is not importable here
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
    folder = sys.argv[1]
    try:
        AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=False)
        refused = ""
    except ValueError as error:
        refused = str(error)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    base = AutoModel.from_pretrained(folder, trust_remote_code=True)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    eager = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager")
    shared = model.model.shared.weight
    ids, mask = torch.load(folder + "/batch.pt")
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 4), 2)).logits
        generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
        eager_generated = eager.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
    torch.save((logits, generated, eager_generated), folder + "/remote.pt")
    print(json.dumps({
        "module": type(model).__module__,
        "base": type(base).__name__,
        "config": type(config).__name__,
        "tied": model.lm_head.weight is shared and model.model.encoder.embed_tokens.weight is shared
                and model.model.decoder.embed_tokens.weight is shared,
        "refused": refused,
    }))
    """
)


def test_remote_code_loads_where_the_package_is_not_installed(saved, tmp_path_factory):
    model, folder = saved
    torch.save(padded_batch(), folder / "batch.pt")
    env = {**os.environ, "HF_HOME": str(tmp_path_factory.mktemp("remote_home"))}
    done = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path_factory.mktemp("elsewhere"),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    assert (report["base"], report["config"], report["tied"]) == ("VanillaModel", "VanillaConfig", True)
    assert "trust_remote_code=True" in report["refused"]
    logits, generated, eager_generated = torch.load(folder / "remote.pt")
    expected_logits, expected_generated = _outputs(model)
    assert torch.allclose(logits, expected_logits, atol=1e-6)
    assert torch.equal(generated, expected_generated) and torch.equal(eager_generated, expected_generated)
