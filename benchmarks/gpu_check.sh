#!/usr/bin/env bash
# The GPU check in one command, for a machine with one GPU, PyTorch with CUDA and no
# package registry (see benchmarks/gpu_check.py for what it runs; under 10 minutes).
#
#   bash benchmarks/gpu_check.sh --prepare   # here, with a registry: the wheels the GPU
#                                            # image lacks and the tokenizer, into .gpu/
#   bash benchmarks/gpu_check.sh [OUT_DIR]   # there, in the repository root: the table
#
# .gpu/ travels with the repository (about 4 MB; add it to .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
# What the GPU images we met lack of the project's dependencies (their versions pinned to
# what .venv holds, so both sides run the same code).
WHEELS="pydantic pydantic_core annotated-types typing-inspection annotated-doc math-verify latex2sympy2_extended antlr4-python3-runtime bm25s fastapi starlette uvicorn gguf"

if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p .gpu/whl .gpu/cache
    pins=$(for name in $WHEELS; do .venv/bin/python -c "import importlib.metadata as m; print('$name==' + m.version('$name'))"; done)
    # shellcheck disable=SC2086
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl $pins
    .venv/bin/python -c "from agentic_rl.cache import cache_dir; from agentic_rl.models import embedded; print(embedded.tokenizer_folder(cache_dir()))" >/dev/null
    cp -r "${AGENTIC_RL_CACHE:-$HOME/.cache/agentic-rl}/smollm2-135m-tokenizer" .gpu/cache/
    du -sh .gpu
    exit 0
fi

OUT_DIR="${1:-gpu_check_out}"
PYTHON="${PYTHON:-python3}"
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/agentic-rl-site .gpu/whl/*.whl
    export PYTHONPATH="/tmp/agentic-rl-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
if [[ -d .gpu/cache ]]; then  # a writable copy: the check may build the model folder into it
    mkdir -p /tmp/agentic-rl-cache && cp -r .gpu/cache/. /tmp/agentic-rl-cache/
    export AGENTIC_RL_CACHE=/tmp/agentic-rl-cache
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$PYTHON" benchmarks/gpu_check.py --out "$OUT_DIR" "${@:2}"
