"""What the speed benchmarks share: model sizes, the three systems, FLOP counts, memory probes, fresh-process
workers, statistics, the machine line and markdown tables.

Systems, all the same architecture (post-LN, ReLU, embeddings scaled by sqrt(d_model), one shared vocabulary tied
three ways, sinusoidal positions):
- "ours": `VanillaForConditionalGeneration`;
- "marian": transformers' `MarianMTModel`, configured by `bleu_vs_marian.marian_like`;
- "torch": `torch.nn.Transformer` with the same embedding, positional encoding and tied output layer
  (`TorchTransformer`; its encoder and decoder stacks have no final LayerNorm, and its attention-weight and
  FFN-inner dropout are set to ours, so that it computes the same function).

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

MFU is model FLOP/s (these counts divided by the measured time) divided by the machine's fp32 peak, measured in
the same run as the best `torch.mm` of two n x n fp32 matrices (2 n^3 FLOP) at the same thread count.
"""

import argparse
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
from bleu_vs_marian import marian_like
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import Seq2SeqLMOutput

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration
from modeling_vanilla.convert_marian import convert_marian
from modeling_vanilla.modeling_vanilla import shift_tokens_right, sinusoidal_positional_encoding

# "tiny" is for smoke tests; "small" is a quick look; "base" is the paper's base model (Table 3).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 64, "layers": 1, "heads": 2, "ffn": 256},
    "small": {"d_model": 256, "layers": 3, "heads": 4, "ffn": 1024},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048},
}
SYSTEM_NAMES = {"ours": "ours", "marian": "MarianMTModel", "torch": "nn.Transformer"}


def vanilla_config(size: str, vocab_size: int, max_positions: int = 1024) -> VanillaConfig:
    """The configuration of a size in `SIZES` (dropout 0.1, as the paper's base model)."""
    shape = SIZES[size]
    return VanillaConfig(
        vocab_size=vocab_size,
        d_model=shape["d_model"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        dropout=0.1,
        max_position_embeddings=max_positions,
    )


def describe_size(size: str) -> str:
    """E.g. "base (d 512, 6+6 layers, 8 heads, ffn 2048)"."""
    shape = SIZES[size]
    return (
        f"{size} (d {shape['d_model']}, {shape['layers']}+{shape['layers']} layers, {shape['heads']} heads, "
        f"ffn {shape['ffn']})"
    )


class TorchTransformer(nn.Module):
    """`torch.nn.Transformer` between the paper's input layer (shared embedding x sqrt(d_model) + sinusoidal
    positions, then dropout) and its output layer (the embedding matrix), configured to compute what
    `VanillaForConditionalGeneration` computes for the same `config`; `load_vanilla` copies a model's weights."""

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = nn.Dropout(config.dropout)
        layer_options = {"dropout": config.dropout, "activation": config.activation_function, "batch_first": True}
        encoder_layer = nn.TransformerEncoderLayer(
            config.d_model, config.encoder_attention_heads, config.encoder_ffn_dim, **layer_options
        )
        decoder_layer = nn.TransformerDecoderLayer(
            config.d_model, config.decoder_attention_heads, config.decoder_ffn_dim, **layer_options
        )
        # nn.Transformer's layers drop attention weights and the FFN's inner activations with `dropout`; ours
        # use `attention_dropout` and `activation_dropout` there (0 by default).
        encoder_layer.self_attn.dropout = decoder_layer.self_attn.dropout = config.attention_dropout
        decoder_layer.multihead_attn.dropout = config.attention_dropout
        encoder_layer.dropout = nn.Dropout(config.activation_dropout)
        decoder_layer.dropout = nn.Dropout(config.activation_dropout)
        self.transformer = nn.Transformer(
            config.d_model,
            config.encoder_attention_heads,
            custom_encoder=nn.TransformerEncoder(encoder_layer, config.encoder_layers, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(decoder_layer, config.decoder_layers),
            batch_first=True,
        )
        nn.init.normal_(self.embedding.weight, 0.0, config.d_model**-0.5)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        encoding = sinusoidal_positional_encoding(
            positions, self.config.d_model, self.config.positional_encoding_layout
        )
        return self.dropout(self.embedding(ids) * self.scale + encoding)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqLMOutput:
        """Logits (and, with `labels`, the mean cross-entropy) as `VanillaForConditionalGeneration` returns them.
        A mask without padding is dropped, as transformers does, so that the kernels may skip masking."""
        if decoder_input_ids is None:
            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        padding = None if attention_mask is None or bool(attention_mask.all()) else attention_mask == 0
        target_length = decoder_input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(target_length, device=input_ids.device)
        hidden = self.transformer(
            self.embed(input_ids),
            self.embed(decoder_input_ids),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=padding,
            memory_key_padding_mask=padding,
        )
        logits = F.linear(hidden, self.embedding.weight)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits)

    def load_vanilla(self, vanilla: VanillaForConditionalGeneration) -> None:
        """Copies the weights of `vanilla` (whose config this module was built with)."""
        source = vanilla.state_dict()
        target = {"embedding.weight": source["model.shared.weight"]}
        stacks = {
            "encoder": (self.config.encoder_layers, {"self_attn": "self_attn"}, ["self_attn_norm"]),
            "decoder": (
                self.config.decoder_layers,
                {"self_attn": "self_attn", "cross_attn": "multihead_attn"},
                ["self_attn_norm", "cross_attn_norm"],
            ),
        }
        for stack, (count, attentions, norms) in stacks.items():
            for index in range(count):
                ours, theirs = f"model.{stack}.layers.{index}.", f"transformer.{stack}.layers.{index}."
                for kind in ("weight", "bias"):
                    for mine, torch_name in attentions.items():
                        projections = [source[f"{ours}{mine}.{p}_proj.{kind}"] for p in "qkv"]
                        target[f"{theirs}{torch_name}.in_proj_{kind}"] = torch.cat(projections)
                        target[f"{theirs}{torch_name}.out_proj.{kind}"] = source[f"{ours}{mine}.out_proj.{kind}"]
                    for number, norm in enumerate([*norms, "feed_forward_norm"], start=1):
                        target[f"{theirs}norm{number}.{kind}"] = source[f"{ours}{norm}.{kind}"]
                    target[f"{theirs}linear1.{kind}"] = source[f"{ours}feed_forward.fc1.{kind}"]
                    target[f"{theirs}linear2.{kind}"] = source[f"{ours}feed_forward.fc2.{kind}"]
        self.load_state_dict(target, strict=True)


def build_model(system: str, config: VanillaConfig, attn: str = "sdpa") -> nn.Module:
    """A freshly initialised model of `system` ("ours", "marian", "torch"); `attn` is transformers' attention
    implementation ("eager", "sdpa"), which nn.Transformer does not have (it always uses its own kernels)."""
    if system == "torch":
        return TorchTransformer(config)
    model = VanillaForConditionalGeneration(config) if system == "ours" else marian_like(config)
    model.set_attn_implementation(attn)
    return model


def same_function_models(config: VanillaConfig, attn: str = "sdpa") -> dict[str, nn.Module]:
    """The three systems in eval mode with one set of weights: a fresh Marian model, ours converted from it
    (`convert_marian`, which keeps Marian's positional layout and generation config) and nn.Transformer loaded from
    ours. They compute the same function, which `check_same_function` asserts."""
    marian = build_model("marian", config, attn).eval()
    ours = convert_marian(marian).eval()
    reference = TorchTransformer(ours.config).eval()
    reference.load_vanilla(ours)
    return {"ours": ours, "marian": marian, "torch": reference}


def compare_logits(models: dict[str, nn.Module]) -> dict[str, Any]:
    """The largest absolute logit difference of Marian and nn.Transformer from ours (`same_function_models`) on a
    random batch (2 sources of 9 tokens, 7 target tokens), and the largest logit."""
    config = models["ours"].config
    ids = random_ids(2, 9, config.vocab_size, config.eos_token_id)
    decoder_ids = random_ids(2, 7, config.vocab_size)
    decoder_ids[:, 0] = config.decoder_start_token_id
    with torch.inference_mode():
        logits = {
            name: model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=decoder_ids).logits
            for name, model in models.items()
        }
    return {
        "max_abs_logit": logits["ours"].abs().max().item(),
        "max_abs_diff": {name: (logits[name] - logits["ours"]).abs().max().item() for name in ("marian", "torch")},
    }


def check_same_function(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: `compare_logits` of the three systems at `task["size"]` with one set of weights."""
    return compare_logits(same_function_models(vanilla_config(task["size"], task["vocab_size"]), task["attn"]))


def require_same_function(checks: dict[str, dict[str, Any]]) -> None:
    """Stops the run unless, at every size, the logits agree within 1e-4 x max(1, largest logit) and every
    generation comparison (`same_tokens`, where the check made one) found identical tokens."""
    for size, check in checks.items():
        if "error" in check:
            raise SystemExit(f"same-function check at size {size} failed: {check['error']}")
        tolerance = 1e-4 * max(1.0, check["max_abs_logit"])
        problems = [
            f"{name} logits differ by {diff:.2e}" for name, diff in check["max_abs_diff"].items() if diff > tolerance
        ]
        problems += [f"{name} tokens differ" for name, same in check.get("same_tokens", {}).items() if not same]
        if problems:
            raise SystemExit(f"same-function check at size {size}: " + "; ".join(problems))


def check_line(checks: dict[str, dict[str, Any]]) -> str:
    """One line on the same-function checks, printed under the tables."""
    parts = []
    for size, check in checks.items():
        diffs = ", ".join(f"{SYSTEM_NAMES[name]} {diff:.1e}" for name, diff in check["max_abs_diff"].items())
        tokens = "".join(f", {name} tokens identical" for name in check.get("same_tokens", {}))
        parts.append(f"{size}: {diffs} (largest logit {check['max_abs_logit']:.1f}){tokens}")
    return "Same weights (Marian converted by convert_marian), largest |logit difference| from ours: " + "; ".join(
        parts
    )


def random_ids(batch: int, length: int, vocab_size: int, eos_token_id: int | None = None) -> torch.Tensor:
    """Token ids drawn from the non-special ids 4..vocab_size-1; with `eos_token_id`, the last one is it."""
    ids = torch.randint(4, vocab_size, (batch, length))
    if eos_token_id is not None:
        ids[:, -1] = eos_token_id
    return ids


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


def machine() -> dict[str, Any]:
    """CPU model, logical CPUs, torch threads and library versions of this process."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    return {
        "cpu": models[0] if models else platform.processor() or "unknown CPU",
        "logical_cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def measure_peak(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the best fp32 FLOP/s of `torch.mm` on two n x n matrices over `repeats` calls."""
    n = task["n"]
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    seconds = timed(lambda: torch.mm(a, b, out=out), warmup=2, repeats=task["repeats"])
    return {"flops": 2 * n**3 / min(seconds)}


def use_threads(threads: int | None) -> None:
    """Sets torch's thread count, unless `threads` is None (torch's choice, e.g. from OMP_NUM_THREADS)."""
    if threads:
        torch.set_num_threads(threads)


def serve_worker_if_asked(handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """In a worker (`--worker TASK_JSON OUT_PATH`), runs the handler of the task, writes its result and exits."""
    if len(sys.argv) != 4 or sys.argv[1] != "--worker":
        return
    task = json.loads(sys.argv[2])
    use_threads(task["threads"])
    torch.manual_seed(0)
    Path(sys.argv[3]).write_text(json.dumps(handlers[task["kind"]](task)))
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


def best_peak(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The peak fp32 FLOP/s over the rounds' matmul measurements (the best) and their median."""
    flops = [result["flops"] for result in results]
    return {"flops": max(flops), "median_flops": statistics.median(flops)}


def machine_line(peak: dict[str, float] | None = None, n: int | None = None) -> str:
    """The machine line printed above every table (this process has the workers' thread count), with the fp32
    matmul peak of `best_peak` measured with n x n matrices, if given."""
    info = machine()
    line = (
        f"Machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, {info['threads']} torch threads, "
        f"torch {info['torch']}, transformers {info['transformers']}, Python {info['python']}"
    )
    if peak is None:
        return line
    return (
        f"{line}; fp32 matmul peak {peak['flops'] / 1e9:.1f} GFLOP/s (best torch.mm {n}x{n}; median over rounds "
        f"{peak['median_flops'] / 1e9:.1f})"
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


def add_common_arguments(parser: argparse.ArgumentParser, rounds: int) -> None:
    """The flags every benchmark has: sizes, vocabulary, rounds, threads, JSON output."""
    parser.add_argument("--sizes", default="small,base", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--vocab-size", type=int, default=8000, help="shared vocabulary size")
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds (one fresh process each)")
    parser.add_argument("--threads", type=int, help="torch threads per process (default: torch's choice)")
    parser.add_argument("--json", type=Path, help="also write the raw results and tables to this JSON file")


def parse_sizes(text: str) -> list[str]:
    """The sizes named in a comma-separated `--sizes`; a SystemExit naming an unknown one."""
    sizes = [size.strip() for size in text.split(",") if size.strip()]
    unknown = [size for size in sizes if size not in SIZES]
    if unknown or not sizes:
        raise SystemExit(f"--sizes: unknown {unknown}; choose from {list(SIZES)}")
    return sizes


def add_peak_argument(parser: argparse.ArgumentParser) -> None:
    """The flag of the matmul peak measurement (for MFU)."""
    parser.add_argument("--peak-size", type=int, default=2048, help="n of the n x n fp32 matmul peak measurement")


def peak_task(args: argparse.Namespace) -> dict[str, Any]:
    """The matmul peak measurement that opens every round."""
    return {"kind": "peak", "n": args.peak_size, "repeats": 10, "threads": args.threads}


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    """Writes `payload` to `path` (if given) as indented JSON."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=str))
