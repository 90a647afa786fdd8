"""CPU speed of beam-4 translation: transformers `generate` against CTranslate2 float32 and int8, one model.

Per size (`--sizes`, registry names; default the paper's base), a randomly initialised model is saved and exported
to CTranslate2 twice (`modeling_vanilla.export_ctranslate2`). Each measurement is a fresh process that loads one
system (the saved model for `generate`, an exported folder for CTranslate2, with the same thread count) and
translates one batch of random sources, the same in every process: `--warmup` untimed and `--repeats` timed calls;
the systems alternate (A B C A B C ...) over `--rounds` rounds. Every system generates exactly `--new-tokens`
tokens per sentence (end of sentence suppressed until then, at most that many), so that the work is identical
whatever a random model prefers. Reported: generated tokens per second (batch x new tokens / seconds; median, min
and max over the rounds), peak RSS and its increase over the loaded model, and the ratios of each CTranslate2
model to `generate` (tokens/s > 1: faster; memory < 1: less).

    python benchmarks/ct2_speed.py --rounds 5
    python benchmarks/ct2_speed.py --sizes small --rounds 3      # d_model 256, 3 + 3 layers: a quick look
    python benchmarks/ct2_speed.py --sizes tiny --vocab-size 64 --rounds 1 --batch-size 2 --new-tokens 4   # smoke
"""

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import ctranslate2
import systems
import torch

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from modeling_vanilla.export_ctranslate2 import export_ctranslate2
from modeling_vanilla.modeling_vanilla import BEAM_SIZE, LENGTH_PENALTY

SYSTEMS = {
    "generate (float32)": {"system": "generate"},
    "CTranslate2 float32": {"system": "ct2", "quantization": "float32"},
    "CTranslate2 int8": {"system": "ct2", "quantization": "int8"},
}
PAIRS = [("CTranslate2 float32", "generate (float32)"), ("CTranslate2 int8", "generate (float32)")]


def generate_runner(folder: Path, ids: torch.Tensor, task: dict[str, Any]) -> Callable[[], int]:
    """Beam-4 `generate` of the saved model; each call returns the number of generated tokens."""
    model = VanillaForConditionalGeneration.from_pretrained(folder / "model").eval()
    mask = torch.ones_like(ids)

    def translate() -> int:
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                num_beams=BEAM_SIZE,
                length_penalty=LENGTH_PENALTY,
                min_new_tokens=task["new_tokens"],
                max_new_tokens=task["new_tokens"],
            )
        return (out.shape[1] - 1) * out.shape[0]

    return translate


def ct2_runner(folder: Path, ids: torch.Tensor, task: dict[str, Any]) -> Callable[[], int]:
    """Beam-4 translation of the CTranslate2 export (its tokens are the ids as strings), with torch's thread count."""
    path = folder / task["quantization"]
    translator = ctranslate2.Translator(str(path), device="cpu", intra_threads=torch.get_num_threads())
    sources = [[str(i) for i in row] for row in ids.tolist()]

    def translate() -> int:
        results = translator.translate_batch(
            sources,
            beam_size=BEAM_SIZE,
            length_penalty=LENGTH_PENALTY,
            max_batch_size=len(sources),
            min_decoding_length=task["new_tokens"],
            max_decoding_length=task["new_tokens"],
        )
        return sum(len(result.hypotheses[0]) for result in results)

    return translate


def measure_translation(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: generated tokens per second and memory of one system translating the batch."""
    folder = Path(task["folder"]) / task["size"]
    config = VanillaConfig.from_pretrained(folder / "model")
    ids = systems.random_ids(task["batch_size"], task["source_length"], config.vocab_size, config.eos_token_id)
    translate = (generate_runner if task["system"] == "generate" else ct2_runner)(folder, ids, task)
    expected = task["batch_size"] * task["new_tokens"]

    def call() -> None:
        tokens = translate()
        if tokens != expected:
            raise RuntimeError(f"{task['system']} generated {tokens} tokens, expected {expected}")

    with common.PeakMemory() as memory:
        seconds = common.timed(call, task["warmup"], task["repeats"])
    call_seconds = sum(seconds) / len(seconds)
    return {"tokens_per_second": expected / call_seconds, "seconds": call_seconds, **memory.result()}


def export_models(folder: Path, sizes: list[str], vocab_size: int) -> None:
    """Saves a random model per size under `folder/SIZE/model` and its CTranslate2 exports beside it."""
    torch.manual_seed(0)
    for size in sizes:
        model = VanillaForConditionalGeneration(VanillaConfig.from_preset(size, vocab_size=vocab_size))
        model.save_pretrained(folder / size / "model")
        for quantization in ("float32", "int8"):
            export_ctranslate2(folder / size / "model", folder / size / quantization, quantization=quantization)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=5, sizes="base", vocab_size=37000, threads=1)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per call")
    parser.add_argument("--source-length", type=int, default=25, help="tokens per source sentence, with </s>")
    parser.add_argument("--new-tokens", type=int, default=25, help="tokens generated per sentence")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per process")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per process")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked({"translate": measure_translation})
    args = parse_args()
    with tempfile.TemporaryDirectory() as folder:
        export_models(Path(folder), args.sizes, args.vocab_size)
        plan = common.Plan(
            script=__file__,
            groups=[{"size": size} for size in args.sizes],
            systems=SYSTEMS,
            settings={
                "kind": "translate",
                "folder": folder,
                "batch_size": args.batch_size,
                "source_length": args.source_length,
                "new_tokens": args.new_tokens,
                "warmup": args.warmup,
                "repeats": args.repeats,
            },
            fields=("tokens_per_second", "seconds", "peak_mib", "delta_mib"),
        )
        outcome = common.execute(plan, args.rounds, args.threads)
    columns = common.throughput_columns("new tok/s", ("s per call", 1), "RSS", {})
    setup = (
        f"Beam 4 (length penalty 0.6), batch {args.batch_size}, {args.source_length} source tokens, exactly "
        f"{args.new_tokens} new tokens per sentence, vocabulary {args.vocab_size}, {args.warmup} warm-up + "
        f"{args.repeats} timed calls per process, {args.rounds} rounds, ctranslate2 {ctranslate2.__version__}; "
        + common.describe_sizes(args.sizes)
    )
    tables = common.throughput_tables(outcome.summary, {"size": "size"}, columns, PAIRS)
    common.publish(args, outcome, [setup, *tables])


if __name__ == "__main__":
    main()
