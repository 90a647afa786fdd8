"""Train a translator with the paper's recipe (section 5) on transformers' `Seq2SeqTrainer`.

    vanilla-train --preset demo --output-dir runs/demo           # minutes on 2 CPU cores
    vanilla-train --preset base --pair en-de --output-dir runs/base
    vanilla-train --preset multilingual --languages all --output-dir runs/multilingual   # one model, English-centric
    torchrun --nproc_per_node 2 -m vanilla_training.cli.train --preset demo ...   # data-parallel, same command

The recipe: Adam (beta 0.9/0.98, eps 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label
smoothing 0.1, dropout 0.1, batches of about `max_tokens` tokens of sentences of similar length, checkpoint
averaging of the last N checkpoints, and test BLEU with beam 4, length penalty 0.6, output length input + 50.
The run folder ends up Hub-ready: model, tokenizer, generation config, code, metrics and a plot, and `final/` holds
the model card (`README.md`); `vanilla-push` uploads it.
"""

import argparse
import os
import sys

from accelerate import PartialState

from modeling_vanilla import VanillaForConditionalGeneration

from .. import allocator
from ..train import ModelFactory, train
from ..train_settings import TrainingJob, add_options, settings_from, training_job


def build_parser() -> argparse.ArgumentParser:
    """The command line: an option for each field of `train_settings.TrainSettings` and of `recipe.Recipe`."""
    parser = argparse.ArgumentParser(
        prog="vanilla-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_options(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> TrainingJob:
    """The job the command line asks for, every option checked before anything is written."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    given = {word.split("=")[0] for word in argv if word.startswith("--")}
    try:
        return training_job(settings_from(parser.parse_args(argv)), given)
    except ValueError as error:
        parser.error(str(error))


def main(argv: list[str] | None = None, model_factory: ModelFactory = VanillaForConditionalGeneration) -> dict:
    """Runs the job the command line asks for and returns the results written to `final/training_results.json`.
    `model_factory` lets an experiment train another implementation (MarianMTModel) under exactly the same recipe."""
    args = parse_args(argv)
    allocator.reuse_freed_memory()
    return train(args, model_factory)


def console_main() -> None:
    """`vanilla-train`: the run, then the end of the process."""
    main()
    if PartialState().num_processes > 1:
        # A data-parallel process ends without running destructors, its files written and its output flushed: in
        # torch 2.13 a gloo process group's own teardown at exit can abort ("terminate called without an active
        # exception") or hang (py-spy: ~ProcessGroupGloo, reached from DDP's Reducer, joins its worker thread while
        # holding the GIL, and the worker waits for the GIL to free the tensors of its last work).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    console_main()
