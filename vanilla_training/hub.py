"""Upload a trained translator to the Hugging Face Hub in one commit.

The folder is the `final/` folder written by `vanilla-train`: weights, config, generation config, tokenizer, the
model and pipeline code, and `training_results.json`. Its model card (`README.md`) is rendered again for the repo
id, so that the card's snippets load the model from the Hub.
"""

from importlib.resources import files
from pathlib import Path

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi

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


# What Hugging Face Inference Endpoints need to serve the repository with this package's custom handler.
ENDPOINT_FILES = {
    "handler.py": (files("vanilla_training.serving") / "handler.py").read_bytes(),
    "requirements.txt": b"vanilla-transformer[serve]\n",
}


def push_translator(folder: str | Path, repo_id: str, private: bool = False, token: str | None = None) -> CommitInfo:
    """Create `repo_id` if needed and commit every file of `folder` with the model card rendered for `repo_id`
    as `README.md`, and the Inference Endpoints handler (`handler.py`, `requirements.txt`). FileNotFoundError names
    the files a complete folder has and `folder` lacks."""
    folder = Path(folder)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a complete model folder: it lacks {', '.join(missing)}")
    card = render_card(folder, model_id=repo_id).encode()
    local = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in ("README.md", *ENDPOINT_FILES))
    operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=p) for p in local]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card))
    operations += [CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in ENDPOINT_FILES.items()]
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    return api.create_commit(
        repo_id, operations=operations, commit_message="Upload translator (model, tokenizer, code, card)"
    )
