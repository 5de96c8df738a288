#!/usr/bin/env bash
# The head-to-head benchmark in one command: a venv with the pinned peers,
# pycage built from this clone (pip install ., release), then the run.
# Arguments go to head_to_head.py (e.g. --rounds 2, --no-sandbox, --json out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${PYCAGE_BENCH_VENV:-target/bench-venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
# Runs use the venv's interpreter (python3 on PATH), as an installed user's would.
PATH="$PWD/$venv/bin:$PATH" exec "$venv/bin/python" benchmarks/head_to_head.py "$@"
