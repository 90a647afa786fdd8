"""Upload a trained translator to the Hugging Face Hub in one commit.

The folder is the `final/` folder written by `vanilla-train`: weights, config, generation config, tokenizer, the
model and pipeline code, and `training_results.json`. Its model card (`README.md`) is rendered again for the repo
id, so that the card's snippets load the model from the Hub.
"""

import importlib.metadata
from importlib.resources import files
from pathlib import Path

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi
from packaging.requirements import Requirement

from .card import render_card

REQUIRED_FILES = (
    "config.json",
    "configuration_vanilla.py",
    "generation_config.json",
    "model.safetensors",
    "modeling_vanilla.py",
    "pipeline_vanilla.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "training_results.json",
)


# The code the Inference Endpoints handler runs, carried in the repository under `endpoint_code/` (this package is
# not on PyPI, so the endpoint cannot install it): the handler puts that folder first on its import path.
ENDPOINT_CODE = "endpoint_code"
HANDLER_MODULES = (
    "modeling_vanilla/__init__.py",
    "modeling_vanilla/configuration_vanilla.py",
    "modeling_vanilla/constrained_beam_search.py",
    "modeling_vanilla/gnmt_beam_search.py",
    "modeling_vanilla/modeling_vanilla.py",
    "modeling_vanilla/pipeline_vanilla.py",
    "modeling_vanilla/tokenization_vanilla.py",
    "vanilla_training/__init__.py",
    "vanilla_training/batching.py",
    "vanilla_training/corpus/__init__.py",
    "vanilla_training/corpus/bible.py",
    "vanilla_training/corpus/direction.py",
    "vanilla_training/corpus/pairs.py",
    "vanilla_training/precision.py",
    "vanilla_training/translator.py",
    "vanilla_training/serving/__init__.py",
    "vanilla_training/serving/backends.py",
    "vanilla_training/serving/continuous.py",
    "vanilla_training/serving/documents.py",
    "vanilla_training/serving/html_text.py",
    "vanilla_training/serving/paragraphs.py",
)


def endpoint_requirements() -> bytes:
    """`requirements.txt` for the endpoint: the published packages the handler's code needs, which are this
    package's own requirements and those of its `serve` extra (as installed here)."""
    lines = []
    for text in importlib.metadata.requires("vanilla-transformer") or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "serve"}):
            requirement.marker = None  # the extra's, and platform markers that hold on Linux, the endpoints' system
            lines.append(str(requirement))
    return "".join(f"{line}\n" for line in lines).encode()


def endpoint_files() -> dict[str, bytes]:
    """What Hugging Face Inference Endpoints need to serve the repository with this package's custom handler."""
    package_files = {path: (files(path.split("/")[0]) / path.split("/", 1)[1]).read_bytes() for path in HANDLER_MODULES}
    return {
        "handler.py": (files("vanilla_training.serving") / "handler.py").read_bytes(),
        "requirements.txt": endpoint_requirements(),
        **{f"{ENDPOINT_CODE}/{path}": data for path, data in package_files.items()},
    }


def push_translator(folder: str | Path, repo_id: str, private: bool = False, token: str | None = None) -> CommitInfo:
    """Create `repo_id` if needed and commit every file of `folder` with the model card rendered for `repo_id`
    as `README.md`, and the Inference Endpoints handler (`handler.py`, `requirements.txt`, the code under
    `endpoint_code/`). FileNotFoundError names the files a complete folder has and `folder` lacks."""
    folder = Path(folder)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a complete model folder: it lacks {', '.join(missing)}")
    card = render_card(folder, model_id=repo_id).encode()
    endpoint = endpoint_files()
    local = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in ("README.md", *endpoint))
    operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=p) for p in local]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card))
    operations += [CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in endpoint.items()]
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    return api.create_commit(
        repo_id, operations=operations, commit_message="Upload translator (model, tokenizer, code, card)"
    )
