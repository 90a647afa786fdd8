#!/usr/bin/env bash
# Creates .venv and installs the package with its training and test extras, CPU-only.
# torch is pinned first to the 2.13.0 CPU wheel: a bare `torch` requirement can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[train,dev,ct2,serve,argos]"
