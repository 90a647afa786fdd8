"""Data preparation against corpus size: wall time and peak memory of each stage of training for synthetic
corpora of 10k, 100k, 1M and 4.5M sentence pairs (WMT14 En-De has 4.5M), a fit of time against size, and a second
run that reads the caches of the first.

    python benchmarks/data_scaling.py                                  # 10k, 100k, 1M and 4.5M pairs
    python benchmarks/data_scaling.py --sizes 10000,100000 --json runs/data_scaling.json

A corpus is generated on the fly: word-like tokens (syllables) drawn with Zipf frequencies from a 30,000-word
vocabulary, 3 to 40 words a sentence (20 on average), each word with a fixed "translation" of another spelling; it is
written as the JSONL files users pass with `--train-file` (plus 2,000 validation pairs). Each size runs twice, each
time in a fresh process, with one private datasets cache: the first run computes everything, the second reads back
the Arrow files, the tokenizer and the token ids. Stages, as `vanilla-train` runs them: load (JSONL to Arrow),
tokenizer (joint BPE on at most `--tokenizer-sample` pairs), tokenization (`datasets.map`), batching (token budgets),
and first step (the demo model and the Trainer built and one training step begun). For each stage: seconds and the
peak resident memory of the process during it (the high-water mark is reset before each stage).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import numpy as np

STAGES = ("load", "tokenizer", "tokenization", "batching", "first step")
SYLLABLES = [c + v for c in "bdfgklmnprstvwz" for v in "aeiou"] + ["th", "ch", "sh", "er", "an", "in", "on"]


def vocabulary(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`size` distinct source words of 1 to 4 syllables and their target spellings (reversed syllables + "en")."""
    words: dict[str, None] = {}
    while len(words) < size:
        count = int(rng.integers(1, 5))
        words["".join(rng.choice(SYLLABLES, count))] = None
    source = np.array(list(words))
    return source, np.array([word[::-1] + "en" for word in source])


def write_corpus(path: Path, pairs: int, seed: int, chunk: int = 100_000) -> None:
    """`pairs` synthetic sentence pairs as JSONL (see the module docstring), written chunk by chunk."""
    rng = np.random.default_rng(seed)
    source_words, target_words = vocabulary(np.random.default_rng(0), 30_000)
    zipf = 1.0 / np.arange(1, len(source_words) + 1)
    zipf /= zipf.sum()
    with path.open("w", encoding="utf-8") as file:
        for start in range(0, pairs, chunk):
            count = min(chunk, pairs - start)
            lengths = np.clip(rng.poisson(20, count), 3, 40)
            words = rng.choice(len(source_words), int(lengths.sum()), p=zipf)
            for sentence in np.split(words, np.cumsum(lengths)[:-1]):
                english, german = " ".join(source_words[sentence]), " ".join(target_words[sentence])
                file.write(json.dumps({"translation": {"en": english.capitalize(), "de": german}}) + "\n")


def measure_stages(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the stages of one run of `vanilla-train` on the task's corpus; seconds and peak RSS of each."""
    from transformers import TrainerCallback

    from vanilla_training import preprocess, train
    from vanilla_training.batching import TokenBudgetBatchSampler
    from vanilla_training.cli.train import parse_args

    job = parse_args(task["argv"])
    run = job.recipe
    config = train.model_config(job)
    results: dict[str, Any] = {}

    def stage(name: str, work):
        begun = time.perf_counter()
        with common.PeakMemory() as memory:
            value = work()
        results[name] = {"seconds": time.perf_counter() - begun, "peak_mib": memory.peak}
        return value

    splits = stage("load", job.data.load_splits)
    tokenizer = stage("tokenizer", lambda: train.load_or_train_tokenizer(job, splits["train"], config, True))
    train_set, validation = stage(
        "tokenization",
        lambda: [
            preprocess.tokenize(splits[name], tokenizer, "en", "de", run.max_length, name)
            for name in ("train", "validation")
        ],
    )
    stage(
        "batching",
        lambda: TokenBudgetBatchSampler(preprocess.lengths(train_set), run.max_tokens, seed=job.settings.seed),
    )

    class StopAtFirstStep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            results["until_first_step_seconds"] = time.time() - task["launched_at"]  # from the process' start
            control.should_training_stop = True

    def first_step() -> None:
        model = train.build_model(job, config, tokenizer, train.VanillaForConditionalGeneration)
        trainer = train.build_trainer(job, model, tokenizer, train_set, validation, splits["validation"])
        trainer.add_callback(StopAtFirstStep)
        trainer.train()

    stage("first step", first_step)
    results["train_pairs"] = len(train_set)
    return results


def run_size(script: str, pairs: int, folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The corpus of `pairs` pairs, then two runs of the stages (cold and from the caches) in fresh processes."""
    files = {"train": folder / "train.jsonl", "validation": folder / "validation.jsonl"}
    begun = time.perf_counter()
    write_corpus(files["train"], pairs, seed=1)
    write_corpus(files["validation"], 2000, seed=2)
    print(f"{pairs:,} pairs written in {time.perf_counter() - begun:.0f} s", file=sys.stderr, flush=True)
    argv = ["--output-dir", str(folder / "run"), "--train-file", str(files["train"]), "--validation-file",
            str(files["validation"]), "--vocab-size", str(args.vocab_size), "--tokenizer-sample",
            str(args.tokenizer_sample), "--bleu-sentences", "0"]  # fmt: skip
    runs = []
    os.environ.update(HF_HOME=str(folder / "hf_home"), HF_HUB_OFFLINE="1")  # the workers' private datasets cache
    for attempt in ("cold", "from cache"):
        task = {"kind": "stages", "argv": argv, "threads": args.threads, "launched_at": time.time()}
        result = common.run_fresh(script, task)
        runs.append({"pairs": pairs, "run": attempt, **result})
        status = result["error"] if "error" in result else f"{result['process_seconds']:.0f} s"
        print(f"{pairs:,} pairs, {attempt}: {status}", file=sys.stderr, flush=True)
    return runs


def preparation_seconds(result: dict[str, Any]) -> float:
    """Load, tokenizer, tokenization and batching: what happens before the model exists."""
    return sum(result[stage]["seconds"] for stage in STAGES[:4])


def fitted_exponent(results: list[dict[str, Any]]) -> float | None:
    """b of seconds = a * pairs^b, fitted by least squares on the logarithms of the cold runs' preparation."""
    cold = [r for r in results if r["run"] == "cold" and "error" not in r]
    if len(cold) < 2:
        return None
    x = np.log([r["pairs"] for r in cold])
    y = np.log([preparation_seconds(r) for r in cold])
    return float(np.polyfit(x, y, 1)[0])


def report(results: list[dict[str, Any]]) -> str:
    headers = ["pairs", "run", *[f"{stage} s (peak MiB)" for stage in STAGES], "preparation s", "until 1st step s"]
    rows = []
    for r in results:
        if "error" in r:
            rows.append(common.failed_row([f"{r['pairs']:,}", r["run"]], r["error"], len(headers)))
            continue
        cells = [f"{r[s]['seconds']:.1f} ({r[s]['peak_mib']:.0f})" for s in STAGES]
        rows.append(
            [
                f"{r['pairs']:,}",
                r["run"],
                *cells,
                f"{preparation_seconds(r):.1f}",
                f"{r['until_first_step_seconds']:.1f}",
            ]
        )
    lines = [common.machine_line(), "", common.markdown_table(headers, rows), ""]
    exponent = fitted_exponent(results)
    if exponent is not None:
        lines.append(f"Preparation time grows as pairs^{exponent:.2f} (least squares on the cold runs).")
    for pairs in sorted({r["pairs"] for r in results}):
        cold, warm = (
            next((r for r in results if r["pairs"] == pairs and r["run"] == run), {}) for run in ("cold", "from cache")
        )
        if "load" in cold and "load" in warm:
            speedup = preparation_seconds(cold) / preparation_seconds(warm)
            peak = max(r[s]["peak_mib"] for r in (cold, warm) for s in STAGES)
            lines.append(
                f"{pairs:,} pairs: the run from the cache prepares {speedup:.1f}x faster; peak RSS {peak:,.0f} MiB."
            )
    return "\n".join(lines)


def main() -> None:
    common.serve_worker_if_asked({"stages": measure_stages})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=common.int_list, default=[10_000, 100_000, 1_000_000, 4_500_000])
    parser.add_argument("--vocab-size", type=int, default=37_000, help="joint BPE size (the paper's: 37,000)")
    parser.add_argument("--tokenizer-sample", type=int, default=1_000_000, help="pairs the BPE learns from")
    parser.add_argument("--threads", type=int, help="torch threads per process (default: torch's choice)")
    parser.add_argument("--json", type=Path, help="also write the raw results and the table to this JSON file")
    args = parser.parse_args()
    results = []
    for pairs in args.sizes:
        with tempfile.TemporaryDirectory(prefix=f"data-scaling-{pairs}-") as folder:
            results += run_size(__file__, pairs, Path(folder), args)
    table = report(results)
    print(table)
    common.write_json(args.json, {"results": results, "table": table, "exponent": fitted_exponent(results)})


if __name__ == "__main__":
    main()
