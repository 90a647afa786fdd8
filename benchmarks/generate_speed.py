"""Generation speed: ours against MarianMTModel at the same dimensions, greedy and beam search, batch 1 and 32.

Both models run transformers' `generate` with one generation config, set as each model's own: greedy or beam
search (`--beams`, default 4, length penalty 0.6, early stopping), and `min_new_tokens == max_new_tokens`
(`--new-tokens`), so that the end of sentence is suppressed until then and every sentence gets exactly that many
tokens whatever a random model prefers: both do identical work. Sources are random ids ending with `</s>`
(`--source-length` tokens, no padding), passed with their attention mask. Each measurement is a fresh process that
builds one model and runs `--warmup` untimed and `--repeats` timed `generate` calls; the measurements alternate
(A B C ...) over `--rounds` rounds, each round opened by a fp32 matmul peak measurement. Before the rounds, one
process per size gives Marian's weights to ours (`convert_marian`) and checks identical logits and identical
greedy and beam tokens. (torch.nn.Transformer has no `generate` and is not measured here.)

Reported per size, decoding, batch and system: generated tokens per second (batch x new tokens / seconds; median,
min, max over rounds), peak RSS of the process and its increase over the RSS after building the model, model
FLOP/s and MFU (the FLOP formula is in common.py); and the ratios ours/Marian of tokens per second (> 1: ours is
faster) and of the memory increase (< 1: ours uses less).

    python benchmarks/generate_speed.py                                  # small and base, 5 rounds
    python benchmarks/generate_speed.py --sizes base --json runs/generate_speed.json
    OMP_NUM_THREADS=1 python benchmarks/generate_speed.py --sizes tiny --rounds 2 --repeats 1 --peak-size 512
"""

import argparse
from typing import Any

import common
import torch
from transformers import GenerationConfig, PreTrainedConfig

SYSTEMS = ("ours", "marian")


def generation_config(config: PreTrainedConfig, beams: int, new_tokens: int) -> GenerationConfig:
    """Greedy (`beams` 1) or beam search with the paper's length penalty, exactly `new_tokens` new tokens."""
    beam_options = {"length_penalty": 0.6, "early_stopping": True} if beams > 1 else {}
    return GenerationConfig(
        num_beams=beams,
        do_sample=False,
        min_new_tokens=new_tokens,
        max_new_tokens=new_tokens,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        **beam_options,
    )


def generate(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`model.generate` under the model's own generation config (set by `generation_config`)."""
    with torch.inference_mode():
        return model.generate(input_ids=ids, attention_mask=mask)


def check_generation(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: `common.compare_logits`, and whether ours and Marian, with one set of weights, generate identical
    greedy and beam-search tokens (2 sources of 9 tokens, 8 new tokens)."""
    models = common.same_function_models(common.vanilla_config(task["size"], task["vocab_size"]), task["attn"])
    config = models["ours"].config
    ids = common.random_ids(2, 9, config.vocab_size, config.eos_token_id)
    same_tokens = {}
    for decoding, beams in (("greedy", 1), (f"beam-{task['beams']}", task["beams"])):
        for name in SYSTEMS:
            models[name].generation_config = generation_config(config, beams, new_tokens=8)
        same_tokens[decoding] = torch.equal(*(generate(models[name], ids, torch.ones_like(ids)) for name in SYSTEMS))
    return {**common.compare_logits(models), "same_tokens": same_tokens}


def measure_generation(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: generated tokens per second and memory of one system at one decoding and batch size."""
    config = common.vanilla_config(task["size"], task["vocab_size"])
    model = common.build_model(task["system"], config, task["attn"]).eval()
    batch, source, new_tokens, beams = task["batch_size"], task["source_length"], task["new_tokens"], task["beams"]
    # Set as the model's own, so that no default of the model's generation config leaks in.
    model.generation_config = generation_config(config, beams, new_tokens)
    ids = common.random_ids(batch, source, config.vocab_size, config.eos_token_id)
    mask = torch.ones_like(ids)
    shapes = []
    with common.PeakMemory() as memory:
        seconds = common.timed(
            lambda: shapes.append(tuple(generate(model, ids, mask).shape)), task["warmup"], task["repeats"]
        )
    if set(shapes) != {(batch, new_tokens + 1)}:  # the start token, then exactly the new tokens
        raise RuntimeError(f"generated shapes {set(shapes)}, expected {(batch, new_tokens + 1)}")
    call_seconds = sum(seconds) / len(seconds)
    flops = common.generation_flops(config, batch, beams, source, new_tokens)
    return {
        "tokens_per_second": batch * new_tokens / call_seconds,
        "call_seconds": call_seconds,
        "flops_per_second": flops / call_seconds,
        **memory.result(),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=5)
    common.add_peak_argument(parser)
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated sentences per generate call")
    parser.add_argument("--beams", type=int, default=4, help="beam size of the beam-search measurements")
    parser.add_argument("--source-length", type=int, default=32, help="tokens per source sentence, with </s>")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sentence")
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="attention implementation")
    parser.add_argument("--warmup", type=int, default=1, help="untimed generate calls per process")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls per process")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked(
        {"peak": common.measure_peak, "check": check_generation, "generate": measure_generation}
    )
    args = parse_args()
    common.use_threads(args.threads)
    sizes = common.parse_sizes(args.sizes)
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    decodings = {"greedy": 1, f"beam-{args.beams}": args.beams}
    shared = {"vocab_size": args.vocab_size, "attn": args.attn, "threads": args.threads}
    checks = {
        size: common.run_fresh(__file__, {"kind": "check", "size": size, "beams": args.beams, **shared})
        for size in sizes
    }
    common.require_same_function(checks)
    tasks = [common.peak_task(args)] + [
        {
            "kind": "generate",
            "size": size,
            "decoding": decoding,
            "beams": beams,
            "batch_size": batch_size,
            "system": system,
            "source_length": args.source_length,
            "new_tokens": args.new_tokens,
            "warmup": args.warmup,
            "repeats": args.repeats,
            **shared,
        }
        for size in sizes
        for decoding, beams in decodings.items()
        for batch_size in batch_sizes
        for system in SYSTEMS
    ]
    results = common.run_interleaved(__file__, tasks, args.rounds)
    peak = common.best_peak(common.select(results, kind="peak"))
    fields = ("tokens_per_second", "call_seconds", "flops_per_second", "peak_mib", "delta_mib")
    summary = [
        {
            "size": size,
            "decoding": decoding,
            "batch_size": batch_size,
            "systems": {
                system: common.summarize(
                    common.select(results, size=size, decoding=decoding, batch_size=batch_size, system=system), fields
                )
                for system in SYSTEMS
            },
        }
        for size in sizes
        for decoding in decodings
        for batch_size in batch_sizes
    ]
    rows, ratio_rows = [], []
    for phase in summary:
        labels = [phase["size"], phase["decoding"], phase["batch_size"]]
        systems = phase["systems"]
        for system, stats in systems.items():
            if "error" in stats:
                rows.append(common.failed_row([*labels, common.SYSTEM_NAMES[system]], stats["error"], 12))
                continue
            speed, flops = stats["tokens_per_second"], stats["flops_per_second"]["median"]
            rows.append(
                [
                    *labels,
                    common.SYSTEM_NAMES[system],
                    f"{speed['median']:.0f}",
                    f"{speed['min']:.0f}",
                    f"{speed['max']:.0f}",
                    f"{stats['call_seconds']['median']:.2f}",
                    f"{stats['peak_mib']['median']:.0f}",
                    f"{stats['delta_mib']['median']:.0f}",
                    f"{flops / 1e9:.2f}",
                    f"{100 * flops / peak['flops']:.2f}%",
                ]
            )
        ratio_rows.append(
            [
                *labels,
                common.ratio(systems["ours"], systems["marian"], "tokens_per_second"),
                common.ratio(systems["ours"], systems["marian"], "delta_mib"),
            ]
        )
    headers = ["size", "decoding", "batch", "system", "new tok/s (median)", "min", "max", "s per call"]
    headers += ["peak RSS MiB", "+ over model MiB", "GFLOP/s", "MFU"]
    table = common.markdown_table(headers, rows)
    ratios = common.markdown_table(
        ["size", "decoding", "batch", "ours / Marian tokens/s", "ours / Marian memory increase"], ratio_rows
    )
    setup = (
        f"generate: {args.source_length} source tokens, exactly {args.new_tokens} new tokens per sentence, vocabulary "
        f"{args.vocab_size}, attention {args.attn}, {args.warmup} warm-up + {args.repeats} timed calls per process, "
        f"{args.rounds} rounds; sizes: " + "; ".join(common.describe_size(size) for size in sizes)
    )
    report = "\n\n".join([common.machine_line(peak, args.peak_size), setup, table, ratios, common.check_line(checks)])
    print(report)
    common.write_json(
        args.json,
        {
            "args": vars(args),
            "machine": common.machine(),
            "peak": peak,
            "checks": checks,
            "summary": summary,
            "results": results,
            "report": report,
        },
    )


if __name__ == "__main__":
    main()
