#!/usr/bin/env bash
# Runs a command as on a CPU with AVX2 only (no AVX-512, no native bfloat16, no VNNI), such as an AMD Zen 3 or many
# cloud VMs and CI runners: torch's own kernels, oneDNN, MKL and CTranslate2 are held to AVX2, and `--precision auto`
# then chooses float32 (vanilla_training/precision.py). Its speed is that of this machine's cores with AVX2 kernels,
# not the other CPU's: scale a time budget by the ratio of fp32 matmul peaks (benchmarks/train_speed.py prints them).
#
#   bash benchmarks/avx2_emulation.sh .venv/bin/python -m pytest -m decoding     # what .ci/run does
#   bash benchmarks/avx2_emulation.sh .venv/bin/vanilla-train --preset demo --output-dir runs/demo-avx2
set -euo pipefail
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 CT2_FORCE_CPU_ISA=AVX2
exec "$@"
