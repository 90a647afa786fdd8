"""Checkpoint averaging (section 6.1: "we used a single model obtained by averaging the last 5 checkpoints").

vanilla-average-checkpoints runs/base/checkpoint-* --output runs/base/averaged
vanilla-average-checkpoints --last 5 runs/base --output runs/base/averaged

The averaged model decodes as the run's final model does (its final/generation_config.json: beam 4 and the recipe's
length penalty), or, in a run that has no final model yet, as the paper does (beam 4, length penalty 0.6); the
checkpoints themselves carry the greedy decoding used for validation while training.
"""

import argparse
from pathlib import Path

from transformers import AutoTokenizer, GenerationConfig
from transformers.trainer_utils import sort_checkpoints

from modeling_vanilla import paper_generation_config

from ..average_checkpoints import average_checkpoints


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-average-checkpoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", help="checkpoint folders, or one run folder with --last")
    parser.add_argument("--last", type=int, help="average the last N checkpoints of the run folder")
    parser.add_argument("--output", required=True, help="folder for the averaged model")
    args = parser.parse_args(argv)
    checkpoints = args.paths
    if args.last is not None:
        if args.last < 1:
            parser.error(f"--last must be at least 1, got {args.last}")
        if len(args.paths) != 1:
            parser.error(f"--last takes one run folder, got {len(args.paths)} paths")
        found = sort_checkpoints(args.paths[0]) if Path(args.paths[0]).is_dir() else []
        if len(found) < args.last:
            parser.error(f"--last {args.last}: {args.paths[0]} holds {len(found)} checkpoint-<step> folders")
        checkpoints = found[-args.last :]
    model = average_checkpoints(checkpoints)
    last = Path(checkpoints[-1])
    final = last.parent / "final"
    if (final / "generation_config.json").is_file():
        model.generation_config, decoding = GenerationConfig.from_pretrained(final), f"as {final} does"
    else:
        model.generation_config = paper_generation_config(model.config, model.generation_config)
        decoding = "as the paper does (no final model beside the checkpoints)"
    model.save_pretrained(args.output)
    print(f"averaged {len(checkpoints)} checkpoints into {args.output}: {', '.join(str(c) for c in checkpoints)}")
    decoder = model.generation_config
    print(f"it decodes {decoding}: beam {decoder.num_beams}, length penalty {decoder.length_penalty}")
    holder = next((folder for folder in (last, last.parent) if (folder / "tokenizer_config.json").is_file()), None)
    if holder is None:
        print(f"no tokenizer in {last} or {last.parent}: {args.output} holds the model alone; save its tokenizer there")
        return
    AutoTokenizer.from_pretrained(holder).save_pretrained(args.output)  # a model folder that vanilla-translate takes
    print(f"tokenizer of {holder} saved beside it")


if __name__ == "__main__":
    main()
