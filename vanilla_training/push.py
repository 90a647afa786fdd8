"""Upload a trained translator to the Hugging Face Hub in one commit.

    python -m vanilla_training.push --model-dir runs/demo/final --repo-id NAMESPACE/NAME [--private]

The folder is the `final/` folder written by `vanilla-train`: weights, config, generation config, tokenizer, the
model and pipeline code, and `training_results.json`. Its model card (`README.md`) is rendered again for the repo
id, so that the card's snippets load the model from the Hub.
"""

import argparse
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


def push_translator(folder: str | Path, repo_id: str, private: bool = False, token: str | None = None) -> CommitInfo:
    """Create `repo_id` if needed and commit every file of `folder` with the model card rendered for `repo_id`
    as `README.md`. FileNotFoundError names the files a complete folder has and `folder` lacks."""
    folder = Path(folder)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a complete model folder: it lacks {', '.join(missing)}")
    card = render_card(folder, model_id=repo_id).encode()
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != "README.md")
    operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=p) for p in files]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card))
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    return api.create_commit(
        repo_id, operations=operations, commit_message="Upload translator (model, tokenizer, code, card)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vanilla-push", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a final/ folder written by vanilla_training.train")
    parser.add_argument("--repo-id", required=True, help="NAMESPACE/NAME on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    args = parser.parse_args(argv)
    commit = push_translator(args.model_dir, args.repo_id, private=args.private)
    print(commit.commit_url)


if __name__ == "__main__":
    main()
