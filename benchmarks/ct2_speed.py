"""CPU speed of beam-4 translation: transformers `generate` against CTranslate2 float32 and int8, one model.

A randomly initialised model (the paper's base size by default) is saved, exported to CTranslate2 twice
(`modeling_vanilla.export_ctranslate2`), and the three systems translate the same batch of random sources in
interleaved rounds (the order rotates every round, after one warm-up round). Every system generates exactly
`--new-tokens` tokens per sentence (end of sentence suppressed until then, at most that many), so that the work is
identical whatever a random model prefers. Reported: generated tokens per second (batch x new tokens / seconds),
median, min and max over the rounds, and each median's ratio to `generate`'s.

    python benchmarks/ct2_speed.py --rounds 5
    python benchmarks/ct2_speed.py --small --rounds 3     # d_model 256, 3 + 3 layers: a quick look
"""

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ctranslate2
import torch

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from modeling_vanilla.export_ctranslate2 import export_ctranslate2

SMALL = {
    "d_model": 256,
    "encoder_layers": 3,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 1024,
    "decoder_ffn_dim": 1024,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="d_model 256, 3 + 3 layers instead of the base model")
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary (paper: 37000)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=25, help="tokens per source sentence, with </s>")
    parser.add_argument("--new-tokens", type=int, default=25, help="tokens generated per sentence")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per system (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch and for CTranslate2")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    overrides = SMALL if args.small else {}
    model = VanillaForConditionalGeneration(VanillaConfig.from_preset("base", vocab_size=args.vocab_size, **overrides))
    model.eval()
    ids = torch.randint(4, args.vocab_size, (args.batch_size, args.source_length))
    ids[:, -1] = model.config.eos_token_id
    mask = torch.ones_like(ids)
    sources = [[str(i) for i in row] for row in ids.tolist()]  # the export writes ids as tokens (no tokenizer)

    def run_generate() -> int:
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                num_beams=4,
                length_penalty=0.6,
                min_new_tokens=args.new_tokens,
                max_new_tokens=args.new_tokens,
            )
        return (out.shape[1] - 1) * out.shape[0]

    def ct2_runner(path: Path) -> Callable[[], int]:
        translator = ctranslate2.Translator(str(path), device="cpu", intra_threads=args.threads, inter_threads=1)

        def run() -> int:
            results = translator.translate_batch(
                sources,
                beam_size=4,
                length_penalty=0.6,
                max_batch_size=args.batch_size,
                min_decoding_length=args.new_tokens,
                max_decoding_length=args.new_tokens,
            )
            return sum(len(result.hypotheses[0]) for result in results)

        return run

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(Path(folder) / "model")
        for quantization in ("float32", "int8"):
            export_ctranslate2(Path(folder) / "model", Path(folder) / quantization, quantization=quantization)
        systems = {
            "transformers generate (float32)": run_generate,
            "CTranslate2 float32": ct2_runner(Path(folder) / "float32"),
            "CTranslate2 int8": ct2_runner(Path(folder) / "int8"),
        }
        speeds: dict[str, list[float]] = {name: [] for name in systems}
        names = list(systems)
        for round_index in range(args.rounds + 1):
            for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
                start = time.perf_counter()
                tokens = systems[name]()
                seconds = time.perf_counter() - start
                if tokens != args.batch_size * args.new_tokens:
                    raise RuntimeError(
                        f"{name} generated {tokens} tokens, expected {args.batch_size * args.new_tokens}"
                    )
                if round_index:  # round 0 warms up
                    speeds[name].append(tokens / seconds)

    size = "small (d_model 256, 3+3 layers)" if args.small else "base (d_model 512, 6+6 layers)"
    print(
        f"{size}, vocabulary {args.vocab_size}, batch {args.batch_size}, source {args.source_length} tokens, "
        f"{args.new_tokens} new tokens, beam 4, {args.threads} thread(s), {args.rounds} rounds, "
        f"torch {torch.__version__}, ctranslate2 {ctranslate2.__version__}"
    )
    baseline = statistics.median(speeds[names[0]])
    print("| system | tokens/s median | min | max | x generate |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in names:
        median = statistics.median(speeds[name])
        print(
            f"| {name} | {median:.0f} | {min(speeds[name]):.0f} | {max(speeds[name]):.0f} | {median / baseline:.2f} |"
        )


if __name__ == "__main__":
    main()
