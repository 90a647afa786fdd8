"""GPU check: ours against MarianMTModel at identical dimensions on one GPU in bf16, one run meant to take < 8 minutes.

Measured, for each size (`--sizes`, default the paper's base and big; vocabulary 37000):

- training steps in bf16 mixed precision (`torch.autocast`; fp32 weights, Adam with the paper's betas and eps,
  dropout of the size's preset): target tokens/s, model FLOP/s and MFU against the bf16 matmul peak measured in
  the same run (the best `torch.mm` of two `--peak-size` square bf16 matrices) and against the GPU's nominal dense
  bf16 peak where its name is known;
- beam-4 `generate` (length penalty 0.6, exactly `--new-tokens` new tokens) at batch 64 under the same autocast,
  and greedy `generate` with the dynamic cache and with the static cache and compiled forward (transformers' fast
  path): generated tokens/s, and the compiled path's gain over the dynamic cache per system;
- the peak GPU memory of every measurement (`torch.cuda.max_memory_allocated`, reset after the model is built) and
  its increase over the built model;
- sdpa against eager attention in bf16: the largest |logit difference| between the two, and of each from the fp32
  logits, all relative to the largest fp32 logit; before that, in fp32, the same-function check of the other
  benchmarks (ours converted from a fresh Marian model and exported to nn.Transformer give Marian's logits);
- a data-parallel training step over 2 processes (`torch.distributed`, nccl, `DistributedDataParallel`) at the
  first size when 2 GPUs exist: tokens/s of both, its scaling against one process, and whether the two processes'
  weights stay identical. With one GPU it is skipped with the reason printed.

Method as in the other benchmarks (common.py): every measurement is a fresh process; training and generation of
ours and Marian alternate over `--rounds` rounds, each round opened by the matmul peak measurement; tables give
median, min and max over the rounds and ratios ours / Marian of the medians. Timed calls wait for the GPU
(`torch.cuda.synchronize`).

`--tiny` runs the same code on the CPU in seconds (size tiny, small batches, 1 round, 1 thread; memory is then the
peak RSS, and the data-parallel step runs 2 CPU processes with gloo): the test suite runs it so that this script
keeps working where no GPU is. Options given beside `--tiny` override its settings.

    python benchmarks/gpu_check.py --json runs/gpu_check.json        # on a GPU machine: about 5-6 minutes (estimate)
    python benchmarks/gpu_check.py --tiny                             # CPU, seconds
"""

import argparse
import datetime
import faulthandler
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import generate_speed
import systems
import torch
import train_speed
from torch import distributed, multiprocessing
from torch.nn.parallel import DistributedDataParallel

from modeling_vanilla import VanillaConfig

SYSTEMS = {systems.SYSTEM_NAMES[name]: {"system": name} for name in ("ours", "marian")}
PAIRS = [("ours", "MarianMTModel")]
DDP_PROCESSES = 2
DDP_TIMEOUT_SECONDS = 180  # a stuck process group fails the measurement instead of the whole run
# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s from NVIDIA's datasheets, by a part of the device name;
# the first match counts, so the more specific names come first.
NOMINAL_BF16_TFLOPS = (
    ("H200 NVL", 835),
    ("H200", 989),
    ("H100 NVL", 835),
    ("H100 PCIe", 756),
    ("H100", 989),
    ("A100", 312),
)
TINY = {
    "device": "cpu",
    "sizes": "tiny",
    "vocab_size": 64,
    "rounds": 1,
    "threads": 1,
    "peak_size": 128,
    "batch_size": 4,
    "source_length": 8,
    "target_length": 8,
    "warmup": 1,
    "steps": 2,
    "generate_batch_size": 2,
    "generate_source_length": 8,
    "new_tokens": 4,
    "generate_repeats": 1,
}


def nominal_peak(device_name: str | None) -> tuple[float | None, str]:
    """The nominal dense bf16 peak FLOP/s of a GPU by name (None if unknown), and a sentence saying so."""
    if device_name is None:
        return None, "Nominal bf16 peak: none (not a GPU); MFU against the measured peak only."
    for part, tflops in NOMINAL_BF16_TFLOPS:
        if part in device_name:
            return tflops * 1e12, f"Nominal dense bf16 peak of {device_name}: {tflops} TFLOP/s (NVIDIA's datasheet)."
    return None, f"Nominal bf16 peak of {device_name}: unknown to this script; MFU against the measured peak only."


def attention_errors(model: torch.nn.Module, batch: dict[str, torch.Tensor], task: dict[str, Any]) -> dict[str, Any]:
    """Largest |logit difference|s of eager and sdpa attention under bf16 autocast, from each other and from the
    fp32 eager logits, relative to the largest fp32 logit."""
    logits = {}
    with torch.inference_mode():
        model.set_attn_implementation("eager")
        reference = model(**batch).logits.float()
        for attn in ("eager", "sdpa"):
            model.set_attn_implementation(attn)
            with common.autocast(task):
                logits[attn] = model(**batch).logits.float()
    scale = reference.abs().max().item()
    return {
        "largest_fp32_logit": scale,
        "sdpa_vs_eager": (logits["sdpa"] - logits["eager"]).abs().max().item() / scale,
        "eager_vs_fp32": (logits["eager"] - reference).abs().max().item() / scale,
        "sdpa_vs_fp32": (logits["sdpa"] - reference).abs().max().item() / scale,
    }


def check(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the fp32 same-function check on the task's device, and `attention_errors` of ours and Marian."""
    config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
    models = systems.same_function_models(config, "sdpa", task["device"])
    batch = systems.comparison_batch(models["ours"].config, models["ours"].device)
    bf16 = {systems.SYSTEM_NAMES[name]: attention_errors(models[name], batch, task) for name in ("ours", "marian")}
    return {**systems.compare_logits(models), "bf16": bf16}


def ddp_process(rank: int, task: dict[str, Any], folder: str, port: int) -> None:
    """One of the data-parallel processes: ours wrapped in `DistributedDataParallel`, training steps on a batch of
    its own (train_speed's step), then the largest weight difference from rank 0; rank 0 writes the result into
    `folder`. The processes meet on 127.0.0.1:`port`, as torchrun's do; on the CPU gloo talks over the loopback
    device. Should the process group hang, each process writes its stack into `folder` before the deadline."""
    stack = open(Path(folder) / f"stack-{rank}.txt", "w")  # noqa: SIM115 (open until the process ends)
    faulthandler.dump_traceback_later(DDP_TIMEOUT_SECONDS - 20, file=stack)
    cuda = torch.device(task["device"]).type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if not cuda:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    distributed.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=DDP_PROCESSES,
        timeout=datetime.timedelta(seconds=DDP_TIMEOUT_SECONDS),
    )
    try:
        device = f"cuda:{rank}" if cuda else "cpu"
        if cuda:
            torch.cuda.set_device(device)
        else:  # the processes share the CPU
            torch.set_num_threads(max(1, torch.get_num_threads() // DDP_PROCESSES))
        torch.manual_seed(rank)  # a batch of its own; DDP gives every process rank 0's initial weights
        config = VanillaConfig.from_preset(task["size"], vocab_size=task["vocab_size"])
        model = systems.build_model("ours", config, task["attn"], device).train()
        parallel = DistributedDataParallel(model, device_ids=[rank] if cuda else None)
        step, losses = train_speed.training_step(parallel, config, {**task, "device": device}), []
        with common.memory_probe(device) as memory:
            seconds = common.timed(lambda: losses.append(step()), task["warmup"], task["steps"])
        weights = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
        rank_zero = weights.clone()
        distributed.broadcast(rank_zero, src=0)
        difference = (weights - rank_zero).abs().max()
        distributed.all_reduce(difference, op=distributed.ReduceOp.MAX)
        tokens = DDP_PROCESSES * task["batch_size"] * task["target_length"]
        result = {
            "backend": backend,
            "processes": DDP_PROCESSES,
            "tokens_per_second": common.spread([tokens / second for second in seconds]),
            "seconds": common.spread(seconds),
            "max_weight_difference": difference.item(),
            "losses": losses,
            **memory.result(),
        }
        if rank == 0:
            (Path(folder) / "result.json").write_text(json.dumps(result))
    finally:
        faulthandler.cancel_dump_traceback_later()
        distributed.destroy_process_group()
    # No destructors: the gloo process group's teardown can hang at exit (see vanilla_training.cli.train.console_main).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def stuck_frames(folder: Path) -> str:
    """Where each process was when its stack was dumped: the innermost three frames of its main thread."""
    where = []
    for rank in range(DDP_PROCESSES):
        path = folder / f"stack-{rank}.txt"
        dump = path.read_text() if path.exists() else ""
        frames = [line.strip() for line in dump.split("\n\n")[-1].splitlines() if line.strip().startswith("File")]
        where.append(f"rank {rank}: " + (" <- ".join(frames[:3]) or "no stack written"))
    return "; ".join(where)


def measure_ddp(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: `ddp_process` in `DDP_PROCESSES` spawned processes, stopped after `DDP_TIMEOUT_SECONDS`."""
    with tempfile.TemporaryDirectory() as folder, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # free again for rank 0's store, which binds it next
        processes = multiprocessing.spawn(ddp_process, args=(task, folder, port), nprocs=DDP_PROCESSES, join=False)
        deadline = time.monotonic() + DDP_TIMEOUT_SECONDS
        while not processes.join(timeout=1):
            if time.monotonic() > deadline:
                for process in processes.processes:
                    process.kill()
                raise RuntimeError(
                    f"the data-parallel processes did not finish within {DDP_TIMEOUT_SECONDS} s; "
                    + stuck_frames(Path(folder))
                )
        return json.loads((Path(folder) / "result.json").read_text())


def run_ddp(args: argparse.Namespace, plan: common.Plan) -> dict[str, Any]:
    """The data-parallel measurement (the plan's first group: training at the first size) in a fresh process, or
    {"skipped": reason}."""
    if args.device == "cuda" and torch.cuda.device_count() < DDP_PROCESSES:
        gpus = torch.cuda.device_count()
        return {"skipped": f"{gpus} GPU here; the data-parallel step needs {DDP_PROCESSES}"}
    return common.run_fresh(__file__, {**plan.settings, **plan.groups[0], "kind": "ddp", "threads": args.threads})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU, size tiny, small batches: a check in seconds")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where the models run")
    common.add_common_arguments(parser, rounds=3, sizes="base,big", vocab_size=37000)
    common.add_peak_argument(parser, default=8192)
    train_speed.add_training_arguments(parser, batch_size=128, warmup=5, steps=20)
    parser.add_argument("--generate-batch-size", type=int, default=64, help="sentences per generate call")
    parser.add_argument("--generate-source-length", type=int, default=32, help="tokens per source, with </s>")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sentence")
    parser.add_argument("--generate-repeats", type=int, default=3, help="timed generate calls per process")
    if parser.parse_known_args()[0].tiny:
        parser.set_defaults(**TINY)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is available here; use --tiny (or --device cpu) on a CPU")
    return args


# Beam search with the dynamic cache (the paper's decoding), and greedy decoding with the dynamic cache and with
# transformers' fast path, a static cache and the compiled forward (CUDA graphs on a GPU; its beam search calls the
# eager forward, so greedy is where compile applies).
GENERATION_MODES = (
    {"decoding": "beam-4", "beams": 4, "cache": "dynamic"},
    {"decoding": "greedy", "beams": 1, "cache": "dynamic"},
    {"decoding": "greedy", "beams": 1, "cache": "static+compile"},
)


def compile_gain_table(generation: list[dict[str, Any]]) -> str:
    """Greedy tokens per second with the static cache and compiled forward over the dynamic cache's, per system."""
    rows = []
    for group in generation:
        if group["cache"] != "static+compile":
            continue
        dynamic = next(
            other
            for other in generation
            if (other["size"], other["decoding"], other["cache"]) == (group["size"], group["decoding"], "dynamic")
        )
        for system, stats in group["systems"].items():
            rows.append([group["size"], system, common.ratio(stats, dynamic["systems"][system], "tokens_per_second")])
    return common.markdown_table(["size", "system", "greedy static+compile / dynamic tokens/s"], rows)


def plan_for(args: argparse.Namespace) -> common.Plan:
    """Training and generation of ours and Marian at every size, interleaved, after the checks."""
    training = train_speed.training_task(args)
    generation = {
        "kind": "generate",
        "batch_size": args.generate_batch_size,
        "source_length": args.generate_source_length,
        "new_tokens": args.new_tokens,
        "warmup": 1,
        "repeats": args.generate_repeats,
    }
    settings = {"vocab_size": args.vocab_size, "attn": "sdpa", "device": args.device, "dtype": "bfloat16"}
    return common.Plan(
        script=__file__,
        groups=[
            *({**training, "size": size} for size in args.sizes),
            *({**generation, **decoding, "size": size} for size in args.sizes for decoding in GENERATION_MODES),
        ],
        systems=SYSTEMS,
        settings=settings,
        fields=common.THROUGHPUT_FIELDS,
        checks={size: {"size": size, **settings} for size in args.sizes},
        peak={"n": args.peak_size, "repeats": 50, "device": args.device, "dtype": "bfloat16"},
    )


def attention_table(checks: dict[str, dict[str, Any]]) -> str:
    rows = [
        [size, system, *(f"{errors[key]:.1e}" for key in ("sdpa_vs_eager", "eager_vs_fp32", "sdpa_vs_fp32"))]
        for size, check in checks.items()
        for system, errors in check["bf16"].items()
    ]
    headers = ["size", "system", "bf16 sdpa vs bf16 eager", "bf16 eager vs fp32", "bf16 sdpa vs fp32"]
    return common.markdown_table(headers, rows)


def ddp_section(ddp: dict[str, Any], training: list[dict[str, Any]], memory: str) -> str:
    """The data-parallel result with its scaling against one process of ours at the same size, or why not."""
    if "skipped" in ddp or "error" in ddp:
        return f"Data-parallel training step: {ddp.get('skipped') or 'failed: ' + ddp['error']}"
    one = next(group["systems"]["ours"] for group in training if group["size"] == ddp["size"])
    speed = ddp["tokens_per_second"]
    single = None if "error" in one else one["tokens_per_second"]["median"]
    scaling = "-" if single is None else f"{speed['median'] / (ddp['processes'] * single):.2f}"
    headers = ["size", "processes", "backend", "target tok/s (median)", "min", "max", "step ms"]
    headers += [f"peak {memory} MiB (rank 0)", "+ over model MiB", f"/ ({ddp['processes']} x one process)"]
    headers.append("weights identical")
    row = [ddp["size"], ddp["processes"], ddp["backend"], *(f"{speed[key]:.0f}" for key in ("median", "min", "max"))]
    row += [common.significant(ddp["seconds"]["median"] * 1000), f"{ddp['peak_mib']:.0f}", f"{ddp['delta_mib']:.0f}"]
    row += [scaling, "yes" if ddp["max_weight_difference"] == 0 else f"no ({ddp['max_weight_difference']:.1e})"]
    title = f"Data-parallel training step, {ddp['processes']} processes (median, min, max over the timed steps)"
    return title + "\n\n" + common.markdown_table(headers, [row])


def report_sections(args: argparse.Namespace, outcome: common.Outcome, ddp: dict[str, Any]) -> list[str]:
    cuda = args.device == "cuda"
    nominal, nominal_line = nominal_peak(torch.cuda.get_device_name(0) if cuda else None)
    memory = "GPU" if cuda else "RSS"
    peaks = {"MFU (measured peak)": outcome.peak["flops"], "MFU (nominal)": nominal}
    training = [group for group in outcome.summary if group["kind"] == "train"]
    generation = [group for group in outcome.summary if group["kind"] == "generate"]
    labels = {"size": "size"}
    generate_labels = {"size": "size", "decoding": "decoding", "cache": "cache"}
    setup = (
        f"bf16 autocast on {'the GPU' if cuda else 'the CPU (no GPU: memory is the peak RSS)'}, vocabulary "
        f"{args.vocab_size}, attention sdpa, {args.rounds} rounds; " + common.describe_sizes(args.sizes)
    )
    train_columns = common.throughput_columns("target tok/s", ("step ms", 1000), memory, peaks)
    generate_columns = common.throughput_columns("new tok/s", ("s per call", 1), memory, peaks)
    return [
        nominal_line,
        setup,
        f"Training step (forward + backward + Adam), batch {args.batch_size} x {args.source_length} source + "
        f"{args.target_length} target tokens, {args.warmup} warm-up + {args.steps} timed steps per process",
        *common.throughput_tables(training, labels, train_columns, PAIRS),
        f"generate, batch {args.generate_batch_size}, {args.generate_source_length} source tokens, exactly "
        f"{args.new_tokens} new tokens per sentence, 1 warm-up (where static+compile compiles) + "
        f"{args.generate_repeats} timed calls per process",
        *common.throughput_tables(generation, generate_labels, generate_columns, PAIRS),
        compile_gain_table(generation),
        "sdpa against eager attention in bf16: largest |logit difference| / largest |fp32 logit| (fp32 reference: "
        "eager)",
        attention_table(outcome.checks),
        ddp_section(ddp, training, memory),
    ]


def main() -> None:
    common.serve_worker_if_asked(
        {
            "check": check,
            "train": train_speed.measure_training,
            "generate": generate_speed.measure_generation,
            "ddp": measure_ddp,
        }
    )
    start = time.perf_counter()
    args = parse_args()
    plan = plan_for(args)
    outcome = common.execute(plan, args.rounds, args.threads)
    ddp = run_ddp(args, plan)
    sections = report_sections(args, outcome, ddp)
    seconds = time.perf_counter() - start
    sections.append(f"Run time {seconds:.0f} s.")
    common.publish(args, outcome, sections, ddp=ddp, run_seconds=seconds)


if __name__ == "__main__":
    main()
