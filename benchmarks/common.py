"""What the speed benchmarks share: the run skeleton, fresh-process workers, FLOP counts, memory probes, timing,
statistics, the machine line, markdown tables and command-line flags. The systems compared are in systems.py.

Run skeleton (`Plan`, `execute`, `publish`): a benchmark names its groups (the labels of a table row, e.g. a size),
its systems and its worker; `execute` runs the same-function checks (one fresh process each; the run stops unless
they pass), then every group for every system, one fresh worker process per measurement, interleaved (A B C A B C
...) over the rounds, each round opened by a matmul peak measurement when the benchmark reports MFU; it summarises
each group and system by median, min and max over the rounds. `publish` prints the report (machine line, the
benchmark's own sections, the checks) and writes the JSON.

Worker protocol: the parent runs `python SCRIPT --worker TASK_JSON OUT_PATH` for every measurement, so that each
one starts from a fresh process (no allocator, cache or warm-up state shared with the others). The worker sets the
thread count (`TASK["threads"]`, when not null), runs the handler named by `TASK["kind"]` and writes its result, a
JSON object, to OUT_PATH. A worker that fails or is killed (for instance out of memory) is recorded as
`{"error": ...}`, and the tables show "failed".

FLOP counts: matrix multiplications only, 2 FLOP per multiply-add (layer norms, softmax, activations, embedding
lookups, positional encodings and the loss are left out). With d = d_model, f = d_ff, V = vocabulary size,
N_e / N_d = encoder / decoder layers, S / T = source / target length, one sequence costs, forward:

    encoder layer  8 S d^2 (Q, K, V, output projections) + 4 S^2 d (Q K^T and weights x V) + 4 S d f (FFN)
    decoder layer  8 T d^2 + 4 T^2 d (masked self-attention, counted in full)
                   + 4 T d^2 + 4 S d^2 + 4 T S d (cross-attention: Q and output projections on T positions,
                   K and V projections on S positions, Q K^T and weights x V)
                   + 4 T d f (FFN)
    output layer   2 T d V
    forward        N_e * encoder layer + N_d * decoder layer + output layer
    training step  3 * forward (backward: two matmuls, for the input and the weight gradient, per forward matmul)

Generation with a key/value cache, n new tokens, k hypotheses per source (greedy: k = 1, beam search: k = beams):
the encoder runs once per source, N_e * encoder layer(S); each hypothesis then decodes n steps, step t attending
over t target positions, and projects the encoder output to cross-attention keys and values once, at step 1:

    per hypothesis  N_d * (n (12 d^2 + 4 d f + 4 S d) + 2 d n (n + 1) + 4 S d^2) + 2 n d V

MFU is model FLOP/s (these counts divided by the measured time) divided by the machine's peak, measured in the same
run as the best `torch.mm` of two n x n matrices (2 n^3 FLOP) at the same thread count (fp32 on the CPU; the GPU
check measures bf16).
"""

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from systems import check_line, describe_size, require_same_function

from modeling_vanilla import PRESETS, VanillaConfig
from vanilla_training.precision import cpu_model

Handler = Callable[[dict[str, Any]], dict[str, Any]]
# A table column: its header and the cell it shows for one system's summary (see `summarize`).
Column = tuple[str, Callable[[dict[str, Any]], str]]
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16"}
# What the throughput workers (training steps, generate calls) report and `throughput_columns` shows.
THROUGHPUT_FIELDS = ("tokens_per_second", "seconds", "flops_per_second", "peak_mib", "delta_mib")


# ---------------------------------------------------------------------------------------------------------------
# FLOP counts
# ---------------------------------------------------------------------------------------------------------------


def encoder_layer_flops(d: int, f: int, source: int) -> int:
    return 8 * source * d * d + 4 * source * source * d + 4 * source * d * f


def decoder_layer_flops(d: int, f: int, source: int, target: int) -> int:
    self_attention = 8 * target * d * d + 4 * target * target * d
    cross_attention = 4 * target * d * d + 4 * source * d * d + 4 * target * source * d
    return self_attention + cross_attention + 4 * target * d * f


def forward_flops(config: VanillaConfig, batch: int, source: int, target: int) -> int:
    """Matmul FLOPs of one forward pass over `batch` pairs (see the module docstring)."""
    d = config.d_model
    per_sequence = (
        config.encoder_layers * encoder_layer_flops(d, config.encoder_ffn_dim, source)
        + config.decoder_layers * decoder_layer_flops(d, config.decoder_ffn_dim, source, target)
        + 2 * target * d * config.vocab_size
    )
    return batch * per_sequence


def training_flops(config: VanillaConfig, batch: int, source: int, target: int) -> int:
    """Matmul FLOPs of one training step: forward and backward, 3 x forward."""
    return 3 * forward_flops(config, batch, source, target)


def generation_flops(config: VanillaConfig, batch: int, hypotheses: int, source: int, new_tokens: int) -> int:
    """Matmul FLOPs of generating `new_tokens` per source with `hypotheses` per source (beams; 1 for greedy)."""
    d, f, n = config.d_model, config.decoder_ffn_dim, new_tokens
    encoder = config.encoder_layers * encoder_layer_flops(d, config.encoder_ffn_dim, source)
    decoder_layer = n * (12 * d * d + 4 * d * f + 4 * source * d) + 2 * d * n * (n + 1) + 4 * source * d * d
    per_hypothesis = config.decoder_layers * decoder_layer + 2 * n * d * config.vocab_size
    return batch * (encoder + hypotheses * per_hypothesis)


# ---------------------------------------------------------------------------------------------------------------
# Inside a worker: memory, timing, precision, the machine
# ---------------------------------------------------------------------------------------------------------------


def rss_mib() -> float:
    """Resident set size of this process now, in MiB."""
    resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakMemory:
    """Peak RSS of a block over the RSS just before it (after the model was built).

    The process' high-water mark is reset on entry (`/proc/self/clear_refs`, Linux), so that `ru_maxrss` read on
    exit is the peak of the block alone; where the reset is refused, it is the peak of the whole process (which the
    block usually sets) and `peak_reset` is False."""

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        self.baseline = rss_mib()
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.peak_reset = True
        except OSError:
            self.peak_reset = False
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB

    def result(self) -> dict[str, Any]:
        return {
            "baseline_mib": self.baseline,
            "peak_mib": self.peak,
            "delta_mib": self.peak - self.baseline,
            "peak_reset": self.peak_reset,
        }


class CudaPeakMemory(PeakMemory):
    """Peak GPU memory allocated by tensors during a block (`torch.cuda.max_memory_allocated`, its high-water mark
    reset on entry) over what was allocated just before it."""

    def __enter__(self) -> "CudaPeakMemory":
        torch.cuda.synchronize()
        self.baseline = torch.cuda.memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
        self.peak_reset = True
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.synchronize()
        self.peak = torch.cuda.max_memory_allocated() / 2**20


def memory_probe(device: str) -> PeakMemory:
    """The peak-memory probe of `device`: GPU memory on CUDA, the process' RSS on the CPU."""
    return CudaPeakMemory() if torch.device(device).type == "cuda" else PeakMemory()


def timed(run: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `run`, after `warmup` untimed calls."""
    for _ in range(warmup):
        run()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


def synchronized(run: Callable[[], object], device: str) -> Callable[[], None]:
    """`run`, then waiting for the GPU's queued work on CUDA (so that `timed` times the work, not its launch)."""
    if torch.device(device).type != "cuda":
        return run

    def run_and_wait() -> None:
        run()
        torch.cuda.synchronize()

    return run_and_wait


def autocast(task: dict[str, Any]) -> contextlib.AbstractContextManager:
    """`torch.autocast` to the task's "dtype" on its "device"; nothing when the dtype is float32."""
    if task["dtype"] == "float32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(task["device"]).type, dtype=getattr(torch, task["dtype"]))


def machine() -> dict[str, Any]:
    """CPU model, logical CPUs, GPUs, torch threads and library versions of this process."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": cpu_model() or platform.processor() or "unknown CPU",
        "logical_cpus": os.cpu_count(),
        "gpus": gpus,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def measure_peak(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the best FLOP/s of `torch.mm` on two n x n matrices of the task's dtype and device over `repeats`
    calls (after 2 untimed)."""
    n, device, dtype = task["n"], task["device"], getattr(torch, task["dtype"])
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    seconds = timed(synchronized(lambda: torch.mm(a, b, out=out), device), warmup=2, repeats=task["repeats"])
    return {"flops": 2 * n**3 / min(seconds)}


def use_threads(threads: int | None) -> None:
    """Sets torch's thread count, unless `threads` is None (torch's choice, e.g. from OMP_NUM_THREADS)."""
    if threads:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------------------------
# Fresh worker processes
# ---------------------------------------------------------------------------------------------------------------


def serve_worker_if_asked(handlers: dict[str, Handler]) -> None:
    """In a worker (`--worker TASK_JSON OUT_PATH`), runs the handler of the task (`handlers`, or `measure_peak` for
    "peak"), writes its result and exits."""
    if len(sys.argv) != 4 or sys.argv[1] != "--worker":
        return
    task = json.loads(sys.argv[2])
    use_threads(task["threads"])
    torch.manual_seed(0)
    Path(sys.argv[3]).write_text(json.dumps({"peak": measure_peak, **handlers}[task["kind"]](task)))
    sys.exit(0)


def run_fresh(script: str, task: dict[str, Any]) -> dict[str, Any]:
    """Runs `task` in a fresh worker process of `script`; the result gains `process_seconds` (start to exit)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, script, "--worker", json.dumps(task), str(out)], capture_output=True, text=True
        )
        seconds = time.perf_counter() - start
        if done.returncode == 0:
            result = json.loads(out.read_text())
        else:
            lines = done.stderr.strip().splitlines()
            reason = lines[-1] if lines else f"exit status {done.returncode}"
            if done.returncode < 0:
                reason = f"killed by signal {-done.returncode} (out of memory?)"
            result = {"error": reason}
    return {**task, **result, "process_seconds": seconds}


def run_interleaved(script: str, tasks: Sequence[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Runs the tasks in order, A B C A B C ..., `rounds` times, each in a fresh process; progress on stderr."""
    results = []
    start = time.perf_counter()
    for round_index in range(rounds):
        for number, task in enumerate(tasks, start=1):
            result = {**run_fresh(script, task), "round": round_index}
            results.append(result)
            label = " ".join(f"{key}={value}" for key, value in task.items() if key not in ("kind", "threads"))
            status = f"error: {result['error']}" if "error" in result else "ok"
            print(
                f"[round {round_index + 1}/{rounds}, {number}/{len(tasks)}] {task['kind']} {label}: {status}, "
                f"{result['process_seconds']:.1f} s (total {time.perf_counter() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    return results


# ---------------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------------


def select(results: Iterable[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """The results whose fields equal `match`."""
    return [result for result in results if all(result.get(key) == value for key, value in match.items())]


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results: Sequence[dict[str, Any]], fields: Sequence[str]) -> dict[str, Any]:
    """Median, min and max of each field over the rounds; `{"error": ...}` if a round failed or none ran."""
    failed = [result["error"] for result in results if "error" in result]
    if failed or not results:
        return {"error": failed[0] if failed else "not measured"}
    return {field: spread([result[field] for result in results]) for field in fields}


def best_peak(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The peak FLOP/s over the rounds' matmul measurements (the best) and their median, with the matrix size,
    dtype and device; a SystemExit if none succeeded (MFU needs it)."""
    measured = [result for result in results if "error" not in result]
    if not measured:
        raise SystemExit(f"the matmul peak measurement failed: {results[0]['error'] if results else 'not run'}")
    flops = [result["flops"] for result in measured]
    shape = {key: measured[0][key] for key in ("n", "dtype", "device")}
    return {"flops": max(flops), "median_flops": statistics.median(flops), **shape}


# ---------------------------------------------------------------------------------------------------------------
# The run skeleton
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """What a benchmark measures: each of `groups` (task fields that label a table row, e.g. {"size": "base"}) for
    each of `systems` (a display name and the task fields that select the system), with `settings` (task fields all
    measurements share, among them "kind", the worker handler, unless a group sets it), summarising the result
    `fields`. `checks` are same-function check tasks by label (handler "check"), run before the rounds; `peak` is
    the matmul peak task (`measure_peak`'s fields) that opens every round, None where no MFU is reported."""

    script: str
    groups: list[dict[str, Any]]
    systems: dict[str, dict[str, Any]]
    settings: dict[str, Any]
    fields: tuple[str, ...]
    checks: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    peak: dict[str, Any] | None = None

    def measurements(self) -> list[dict[str, Any]]:
        """Every group for every system, in table order."""
        return [{**self.settings, **group, **selector} for group in self.groups for selector in self.systems.values()]


@dataclasses.dataclass
class Outcome:
    """What `execute` measured: check results by label, every raw result, the best peak, and per group (its
    fields) the `summarize` of each system under "systems"."""

    checks: dict[str, dict[str, Any]]
    results: list[dict[str, Any]]
    peak: dict[str, Any] | None
    summary: list[dict[str, Any]]


def execute(plan: Plan, rounds: int, threads: int | None) -> Outcome:
    """The checks (the run stops unless the systems compute the same function), then the rounds; see `Plan`."""
    use_threads(threads)
    checks = {
        label: run_fresh(plan.script, {"kind": "check", **task, "threads": threads})
        for label, task in plan.checks.items()
    }
    require_same_function(checks)
    opening = [{"kind": "peak", **plan.peak}] if plan.peak else []
    tasks = [{**task, "threads": threads} for task in opening + plan.measurements()]
    results = run_interleaved(plan.script, tasks, rounds)
    peak = best_peak(select(results, kind="peak")) if plan.peak else None
    summary = []
    for group in plan.groups:
        kind = {**plan.settings, **group}["kind"]
        systems = {
            name: summarize(select(results, **{"kind": kind, **group, **selector}), plan.fields)
            for name, selector in plan.systems.items()
        }
        summary.append({**group, "systems": systems})
    return Outcome(checks, results, peak, summary)


def publish(args: argparse.Namespace, outcome: Outcome, sections: Sequence[str], **extra: Any) -> None:
    """Prints the report (machine line, `sections`, the checks' line) and writes the JSON of `args.json` (the
    arguments, machine, peak, checks, summary, raw results, report and `extra`)."""
    parts = [machine_line(outcome.peak), *sections]
    if outcome.checks:
        parts.append(check_line(outcome.checks))
    report = "\n\n".join(parts)
    print(report)
    payload = {"args": vars(args), "machine": machine(), "peak": outcome.peak, "checks": outcome.checks}
    payload |= {"summary": outcome.summary, "results": outcome.results, **extra, "report": report}
    write_json(args.json, payload)


# ---------------------------------------------------------------------------------------------------------------
# Report: machine line, cells, tables
# ---------------------------------------------------------------------------------------------------------------


def significant(value: float, digits: int = 3) -> str:
    """`value` with `digits` significant digits and no exponent: 1234.5 -> "1234", 0.012345 -> "0.0123"."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.0f}"
    return f"{value:.{max(0, digits - 1 - math.floor(math.log10(abs(value))))}f}"


def flops_text(flops: float) -> str:
    """E.g. "103 GFLOP/s" or "812 TFLOP/s"."""
    return f"{significant(flops / 1e12)} TFLOP/s" if flops >= 1e13 else f"{significant(flops / 1e9)} GFLOP/s"


def machine_line(peak: dict[str, Any] | None = None) -> str:
    """The machine line printed above every report (this process has the workers' thread count), with the matmul
    peak of `best_peak`, if given."""
    info = machine()
    gpus = f", GPU {info['gpus'][0]} x {len(info['gpus'])}" if info["gpus"] else ""
    line = (
        f"Machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, {info['threads']} torch threads{gpus}, "
        f"torch {info['torch']}, transformers {info['transformers']}, Python {info['python']}"
    )
    if peak is None:
        return line
    on_gpu = " on the GPU" if torch.device(peak["device"]).type == "cuda" else ""
    return (
        f"{line}; {DTYPE_NAMES[peak['dtype']]} matmul peak {flops_text(peak['flops'])} (best torch.mm "
        f"{peak['n']}x{peak['n']}{on_gpu}; median over rounds {flops_text(peak['median_flops'])})"
    )


def spread_cell(stats: dict[str, Any], field: str, scale: float, number: str) -> str:
    """Median (min-max) of `field` times `scale`, each formatted with `number`; or "failed"."""
    if "error" in stats:
        return "failed"
    values = [number.format(stats[field][key] * scale) for key in ("median", "min", "max")]
    return f"{values[0]} ({values[1]}-{values[2]})"


def ratio(numerator: dict[str, Any], denominator: dict[str, Any], field: str) -> str:
    """Ratio of the medians of `field`, or "-" when either side failed."""
    if "error" in numerator or "error" in denominator:
        return "-"
    return f"{numerator[field]['median'] / denominator[field]['median']:.2f}"


def failed_row(labels: Sequence[object], error: str, columns: int) -> list[object]:
    """A table row for a failed measurement: its labels, "failed: ERROR", then "-" up to `columns` cells."""
    return [*labels, f"failed: {error}", *["-"] * (columns - len(labels) - 1)]


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table; columns after the first text ones are right-aligned when their cells are numbers."""
    rows = [[str(cell) for cell in row] for row in rows]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _is_number(cell: str) -> bool:
    try:
        float(cell.rstrip("%x"))
    except ValueError:
        return cell == "-"
    return True


def throughput_columns(
    speed: str, duration: tuple[str, float], memory: str, peaks: dict[str, float | None]
) -> list[Column]:
    """Tokens/s (median, min, max; `speed` names them), the median seconds of a step or call (`duration`: header,
    scale), peak memory and its increase over the built model (`memory`: "RSS" or "GPU"); with `peaks`
    (header: peak FLOP/s, None where unknown), model FLOP/s and the MFU against each."""
    time_header, time_scale = duration
    columns: list[Column] = [
        (f"{speed} (median)", lambda stats: f"{stats['tokens_per_second']['median']:.0f}"),
        ("min", lambda stats: f"{stats['tokens_per_second']['min']:.0f}"),
        ("max", lambda stats: f"{stats['tokens_per_second']['max']:.0f}"),
        (time_header, lambda stats: significant(stats["seconds"]["median"] * time_scale)),
        (f"peak {memory} MiB", lambda stats: f"{stats['peak_mib']['median']:.0f}"),
        ("+ over model MiB", lambda stats: f"{stats['delta_mib']['median']:.0f}"),
    ]
    if not peaks:
        return columns
    unit, per = ("TFLOP/s", 1e12) if max(peak or 0 for peak in peaks.values()) >= 1e13 else ("GFLOP/s", 1e9)
    columns.append((unit, lambda stats: significant(stats["flops_per_second"]["median"] / per)))
    for header, peak in peaks.items():
        columns.append((header, lambda stats, peak=peak: _mfu(stats["flops_per_second"]["median"], peak)))
    return columns


def _mfu(flops: float, peak: float | None) -> str:
    return "-" if peak is None else f"{significant(100 * flops / peak)}%"


def system_table(summary: Sequence[dict[str, Any]], labels: dict[str, str], columns: Sequence[Column]) -> str:
    """One row per group and system: the group's `labels` (field: header), the system, then `columns`."""
    headers = [*labels.values(), "system", *(header for header, _ in columns)]
    rows = []
    for group in summary:
        for system, stats in group["systems"].items():
            cells = [*(group[key] for key in labels), system]
            if "error" in stats:
                rows.append(failed_row(cells, stats["error"], len(headers)))
            else:
                rows.append(cells + [cell(stats) for _, cell in columns])
    return markdown_table(headers, rows)


def ratio_table(summary: Sequence[dict[str, Any]], labels: dict[str, str], pairs: Sequence[tuple[str, str]]) -> str:
    """One row per group and pair of systems (numerator, denominator): the ratios of the medians of tokens/s and of
    the memory increase."""
    fields = {"tokens/s ratio": "tokens_per_second", "memory increase ratio": "delta_mib"}
    rows = [
        [*(group[key] for key in labels), f"{mine} / {theirs}"]
        + [ratio(group["systems"][mine], group["systems"][theirs], field) for field in fields.values()]
        for group in summary
        for mine, theirs in pairs
    ]
    return markdown_table([*labels.values(), "pair", *fields], rows)


def throughput_tables(
    summary: Sequence[dict[str, Any]],
    labels: dict[str, str],
    columns: Sequence[Column],
    pairs: Sequence[tuple[str, str]],
) -> list[str]:
    """A throughput benchmark's two tables: every system's `columns`, and the ratios of `pairs`."""
    return [system_table(summary, labels, columns), ratio_table(summary, labels, pairs)]


# ---------------------------------------------------------------------------------------------------------------
# Command line and JSON
# ---------------------------------------------------------------------------------------------------------------


def size_list(text: str) -> list[str]:
    """The model sizes of a comma-separated `--sizes`, names of the registry `modeling_vanilla.PRESETS`."""
    sizes = [size.strip() for size in text.split(",") if size.strip()]
    unknown = [size for size in sizes if size not in PRESETS]
    if unknown or not sizes:
        raise argparse.ArgumentTypeError(f"unknown size(s) {unknown or [text]}; choose from {sorted(PRESETS)}")
    return sizes


def choice_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type for a comma-separated list of `choices`, e.g. "dynamic,static"; `what` names them in the
    error ("cache mode")."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {unknown or [text]}; choose from {list(choices)}")
        return names

    return parse


def int_list(text: str) -> list[int]:
    """The positive integers of a comma-separated option, e.g. "1,32"."""
    try:
        numbers = [int(number) for number in text.split(",")]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return numbers


def add_common_arguments(
    parser: argparse.ArgumentParser,
    rounds: int,
    sizes: str = "small,base",
    vocab_size: int = 8000,
    threads: int | None = None,
) -> None:
    """The flags every benchmark has: sizes, vocabulary, rounds, threads, JSON output (with these defaults)."""
    parser.add_argument("--sizes", type=size_list, default=sizes, help=f"comma-separated, of {sorted(PRESETS)}")
    parser.add_argument("--vocab-size", type=int, default=vocab_size, help="shared vocabulary size")
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds (one fresh process each)")
    parser.add_argument("--threads", type=int, default=threads, help="torch threads per process (none: torch's)")
    parser.add_argument("--json", type=Path, help="also write the raw results and tables to this JSON file")


def add_peak_argument(parser: argparse.ArgumentParser, default: int = 2048) -> None:
    """The flag of the matmul peak measurement (for MFU)."""
    parser.add_argument("--peak-size", type=int, default=default, help="n of the n x n matmul peak measurement")


def cpu_peak(args: argparse.Namespace) -> dict[str, Any]:
    """The fp32 CPU matmul peak measurement that opens every round."""
    return {"n": args.peak_size, "repeats": 10, "device": "cpu", "dtype": "float32"}


def describe_sizes(sizes: Sequence[str]) -> str:
    """E.g. "sizes: small (d 256, ...); base (d 512, ...)"."""
    return "sizes: " + "; ".join(describe_size(size) for size in sizes)


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    """Writes `payload` to `path` (if given) as indented JSON."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=str))
