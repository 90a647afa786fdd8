"""The precision a run trains (or a server translates) in, and the machine facts that choose it: float32, or bf16 /
fp16 mixed precision where the GPU or CPU computes it natively. The one reader of `/proc/cpuinfo` for the package
and the benchmarks."""

import os
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
# What a run trains in, as the model card words it; `vanilla-train --precision` and `vanilla-serve --precision` take
# one or auto (`resolve_precision`). A server's torch backend computes in the type itself (`DTYPES`), not mixed.
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16 mixed precision", "fp16": "float16 mixed precision"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86 AVX512-BF16 or AMX-BF16, Arm BF16
# oneDNN's instruction sets (ONEDNN_MAX_CPU_ISA) that have no bfloat16 arithmetic
ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's model name in `cpuinfo`, or None where it names none."""
    if not cpuinfo.is_file():
        return None
    names = [
        line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
    ]
    return names[0] if names else None


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The CPU's feature flags in `cpuinfo` (x86 `flags`, Arm `Features`)."""
    if not cpuinfo.is_file():
        return set()
    flags = set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return flags


def kernels_held_below_bf16() -> bool:
    """Whether torch's kernels are held to an instruction set without bfloat16 (`ATEN_CPU_CAPABILITY=avx2`,
    `ONEDNN_MAX_CPU_ISA=AVX2`), as benchmarks/avx2_emulation.sh holds them to stand in for a CPU without it."""
    held = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ONEDNN_ISAS_WITHOUT_BF16
    return held or torch.backends.cpu.get_cpu_capability() == "AVX2"


def cpu_class(cpuinfo: Path = CPUINFO) -> str:
    """The class of CPU that decides the main job's speed, as README.md's table names it: "AMX", "AVX-512 with
    bfloat16", "AVX-512", "AVX2" (also where the kernels are held to it), "Arm with bfloat16", or "other"."""
    flags = cpu_flags(cpuinfo)
    if "avx2" in flags and kernels_held_below_bf16():
        return "AVX2"
    for needed, name in (
        ("amx_bf16", "AMX"),
        ("avx512_bf16", "AVX-512 with bfloat16"),
        ("avx512f", "AVX-512"),
        ("avx2", "AVX2"),
        ("bf16", "Arm with bfloat16"),
    ):
        if needed in flags:
            return name
    return "other"


def native_bf16_cpu(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this CPU computes in bfloat16 natively, per its flags in `cpuinfo`, and torch's kernels may use it.
    Without it torch emulates bf16 matmuls, and mixed precision is slower than float32."""
    return bool(cpu_flags(cpuinfo) & NATIVE_BF16_FLAGS) and not kernels_held_below_bf16()


def resolve_precision(precision: str) -> str:
    """`auto` made concrete for this machine: bf16 where the GPU or the CPU has it natively, else fp32."""
    if precision != "auto":
        return precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if native_bf16_cpu() else "fp32"


def precision_reason(asked: str, precision: str) -> str:
    """Why a run asked for `asked` trains in `precision`, for the log."""
    if asked != "auto":
        return "asked for"
    if torch.cuda.is_available():
        return f"auto: the GPU {'has' if precision == 'bf16' else 'lacks'} bfloat16"
    return f"auto: this CPU {'computes' if precision == 'bf16' else 'does not compute'} bfloat16 natively"


def precision_problem(precision: str) -> str | None:
    """Why this machine cannot compute in `precision` (train in it, or serve with it), or None."""
    if precision == "fp16" and not torch.cuda.is_available():
        return "--precision fp16 needs a CUDA GPU, and this machine has none; on a CPU, use bf16"
    if precision == "bf16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        return f"--precision bf16: this GPU ({torch.cuda.get_device_name()}) has no bfloat16; use fp16"
    return None


def training_attention(precision: str) -> str | None:
    """The attention kernel to train with, if not the model's own: bf16 on a CPU trains with "eager" (equation 1 as
    matmuls, which autocast runs in bf16), because torch's fused CPU kernel behind sdpa is slower in bf16 than in
    fp32 (benchmarks/bf16_training.py measures both). The saved model keeps the default kernel."""
    return "eager" if precision == "bf16" and not torch.cuda.is_available() else None
