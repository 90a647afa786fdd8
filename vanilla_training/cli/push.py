"""Upload a trained translator to the Hugging Face Hub in one commit.

    vanilla-push --model-dir runs/demo/final --repo-id NAMESPACE/NAME [--private]

The folder is the `final/` folder written by `vanilla-train`: weights, config, generation config, tokenizer, the
model and pipeline code, and `training_results.json`. Its model card (`README.md`) is rendered again for the repo
id, so that the card's snippets load the model from the Hub. It prints the licence the card declares (CC BY-SA 4.0
for a model trained on a CC BY-SA text of the built-in corpus, else Apache-2.0) and why.
"""

import argparse
import json
from pathlib import Path

from ..card import licence_declaration
from ..hub import push_translator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vanilla-push", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a final/ folder written by vanilla-train")
    parser.add_argument("--repo-id", required=True, help="NAMESPACE/NAME on the Hub")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    args = parser.parse_args(argv)
    commit = push_translator(args.model_dir, args.repo_id, private=args.private)
    results = json.loads((Path(args.model_dir) / "training_results.json").read_text())  # push needed it: it is there
    print(licence_declaration(results))
    print(commit.commit_url)


if __name__ == "__main__":
    main()
