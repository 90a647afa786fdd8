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

`--caches` adds transformers' static cache and its compiled decoding path to the default dynamic cache: "static"
(`cache_implementation="static"`, eager) and "static+compile" (the same, with a `CompileConfig` allowed on the CPU:
transformers compiles the forward of every decoding step after the first, one graph for all steps). The compile
happens in the warm-up call and is not timed. transformers' beam search always calls the eager forward, so its
"static+compile" rows measure the static cache alone (the JSON's `compiled_forward` says whether the compiled
forward ran). The check before the rounds then also requires each cache to give the dynamic cache's tokens.

Reported per size, decoding, batch and system: generated tokens per second (batch x new tokens / seconds; median,
min, max over rounds), peak RSS of the process and its increase over the RSS after building the model, model
FLOP/s and MFU (the FLOP formula is in common.py); and the ratios ours/Marian of tokens per second (> 1: ours is
faster) and of the memory increase (< 1: ours uses less).

    python benchmarks/generate_speed.py                                  # small and base, 5 rounds
    python benchmarks/generate_speed.py --sizes base --json runs/generate_speed.json
    python benchmarks/generate_speed.py --caches dynamic,static,static+compile --json runs/generate_caches.json
    OMP_NUM_THREADS=1 python benchmarks/generate_speed.py --sizes tiny --rounds 2 --repeats 1 --peak-size 512
"""

import argparse
from typing import Any

import common
import systems
import torch
from transformers import CompileConfig, GenerationConfig, PreTrainedConfig

from modeling_vanilla import VanillaConfig
from modeling_vanilla.modeling_vanilla import LENGTH_PENALTY

SYSTEMS = {systems.SYSTEM_NAMES[name]: {"system": name} for name in ("ours", "marian")}
CACHES = ("dynamic", "static", "static+compile")


def cache_options(cache: str) -> dict[str, Any]:
    """Generation options of a cache mode: none for "dynamic", a static cache, and for "static+compile" a compile
    configuration that transformers also applies on the CPU (by default it compiles on accelerators only)."""
    if cache == "dynamic":
        return {}
    if cache == "static":
        return {"cache_implementation": "static"}
    compile_config = CompileConfig()
    compile_config._compile_all_devices = True
    return {"cache_implementation": "static", "compile_config": compile_config}


def generation_config(
    config: PreTrainedConfig, beams: int, new_tokens: int, cache: str = "dynamic"
) -> GenerationConfig:
    """Greedy (`beams` 1) or beam search with the paper's length penalty, exactly `new_tokens` new tokens, with the
    cache mode `cache` (`cache_options`)."""
    beam_options = {"length_penalty": LENGTH_PENALTY, "early_stopping": True} if beams > 1 else {}
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
        **cache_options(cache),
    )


def generate(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`model.generate` under the model's own generation config (set by `generation_config`)."""
    with torch.inference_mode():
        return model.generate(input_ids=ids, attention_mask=mask)


def check_generation(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: `systems.compare_logits`, and whether ours and Marian, with one set of weights, generate identical
    greedy and beam-search tokens (2 sources of 9 tokens, 8 new tokens) under every cache mode of the task, equal
    to ours with the dynamic cache."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    models = systems.same_function_models(config, task["attn"], "cpu")
    config = models["ours"].config
    ids = systems.random_ids(2, 9, config.vocab_size, config.eos_token_id)
    same_tokens = {}
    for decoding, beams in (("greedy", 1), (f"beam-{task['beams']}", task["beams"])):
        outputs = []
        for cache in ("dynamic", *(cache for cache in task["caches"] if cache != "dynamic")):
            for name in ("ours", "marian"):
                models[name].generation_config = generation_config(config, beams, new_tokens=8, cache=cache)
                outputs.append(generate(models[name], ids, torch.ones_like(ids)))
        label = decoding if task["caches"] == ["dynamic"] else f"{decoding} ({', '.join(task['caches'])})"
        same_tokens[label] = all(torch.equal(outputs[0], output) for output in outputs[1:])
    return {**systems.compare_logits(models), "same_tokens": same_tokens}


def measure_generation(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: generated tokens per second and memory of one system at one decoding and batch size, on the task's
    device under its autocast."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    model = systems.build_model(task["system"], config, task["attn"], task["device"]).eval()
    batch, source, new_tokens, beams = task["batch_size"], task["source_length"], task["new_tokens"], task["beams"]
    # Set as the model's own, so that no default of the model's generation config leaks in.
    model.generation_config = generation_config(config, beams, new_tokens, task["cache"])
    ids = systems.random_ids(batch, source, config.vocab_size, config.eos_token_id).to(task["device"])
    mask = torch.ones_like(ids)
    shapes = []

    def call() -> None:
        with common.autocast(task):
            shapes.append(tuple(generate(model, ids, mask).shape))

    with common.memory_probe(task["device"]) as memory:
        seconds = common.timed(common.synchronized(call, task["device"]), task["warmup"], task["repeats"])
    if set(shapes) != {(batch, new_tokens + 1)}:  # the start token, then exactly the new tokens
        raise RuntimeError(f"generated shapes {set(shapes)}, expected {(batch, new_tokens + 1)}")
    call_seconds = sum(seconds) / len(seconds)
    flops = common.generation_flops(config, batch, beams, source, new_tokens)
    return {
        "tokens_per_second": batch * new_tokens / call_seconds,
        "seconds": call_seconds,
        "flops_per_second": flops / call_seconds,
        "compiled_forward": hasattr(model, "_compiled_call"),
        **memory.result(),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_arguments(parser, rounds=5)
    common.add_peak_argument(parser)
    parser.add_argument("--batch-sizes", type=common.int_list, default="1,32", help="comma-separated, per call")
    parser.add_argument("--beams", type=int, default=4, help="beam size of the beam-search measurements")
    parser.add_argument("--source-length", type=int, default=32, help="tokens per source sentence, with </s>")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sentence")
    parser.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"), help="attention implementation")
    parser.add_argument(
        "--caches",
        type=common.choice_list(CACHES, "cache mode"),
        default="dynamic",
        help=f"comma-separated cache modes, of {list(CACHES)}",
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed generate calls per process")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls per process")
    return parser.parse_args()


def main() -> None:
    common.serve_worker_if_asked({"check": check_generation, "generate": measure_generation})
    args = parse_args()
    shared = {"vocab_size": args.vocab_size, "attn": args.attn}
    decodings = {"greedy": 1, f"beam-{args.beams}": args.beams}
    plan = common.Plan(
        script=__file__,
        groups=[
            {"size": size, "decoding": decoding, "beams": beams, "batch_size": batch_size, "cache": cache}
            for size in args.sizes
            for decoding, beams in decodings.items()
            for batch_size in args.batch_sizes
            for cache in args.caches
        ],
        systems=SYSTEMS,
        settings={
            "kind": "generate",
            "source_length": args.source_length,
            "new_tokens": args.new_tokens,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "device": "cpu",
            "dtype": "float32",
            **shared,
        },
        fields=common.THROUGHPUT_FIELDS,
        checks={size: {"size": size, "beams": args.beams, "caches": args.caches, **shared} for size in args.sizes},
        peak=common.cpu_peak(args),
    )
    outcome = common.execute(plan, args.rounds, args.threads)
    labels = {"size": "size", "decoding": "decoding", "batch_size": "batch", "cache": "cache"}
    columns = common.throughput_columns("new tok/s", ("s per call", 1), "RSS", {"MFU": outcome.peak["flops"]})
    setup = (
        f"generate: {args.source_length} source tokens, exactly {args.new_tokens} new tokens per sentence, vocabulary "
        f"{args.vocab_size}, attention {args.attn}, {args.warmup} warm-up + {args.repeats} timed calls per process, "
        f"{args.rounds} rounds; caches: {', '.join(args.caches)}; " + common.describe_sizes(args.sizes)
    )
    tables = common.throughput_tables(outcome.summary, labels, columns, [("ours", "MarianMTModel")])
    common.publish(args, outcome, [setup, *tables])


if __name__ == "__main__":
    main()
