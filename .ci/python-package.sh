#!/usr/bin/env bash
# CI for the `pycage` Python package: build it from this clone into a venv
# (`pip install .`, the way a user installs it) and run its pytest suite.
# Pinned tools come from crates/pycage-py/tests/requirements.txt; maturin is
# used from there (no build isolation), so the build is pinned too. It also
# pins Ray, for test_ray.py (pycage.ray on a two-node ray.cluster_utils
# cluster on this machine; it fails, not skips, without Ray under
# PYCAGE_REQUIRE_ALL_TESTS=1).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${PYCAGE_PY_VENV:-target/python-package-venv}"
echo "== python package: venv $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r crates/pycage-py/tests/requirements.txt

echo "== ruff (the package, its tests, the benchmark, the child side in python/)"
py_paths=(crates/pycage-py/python crates/pycage-py/tests benchmarks python)
"$venv/bin/ruff" check --select E,F,W,B,I "${py_paths[@]}"
"$venv/bin/ruff" format --check "${py_paths[@]}"

echo "== python package: pip install . (release build of crates/pycage-py)"
start=$SECONDS
PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
echo "built and installed in $((SECONDS - start)) s"

echo "== python package: pytest"
# Runs use the venv's interpreter (python3 on PATH), as an installed user's would.
PATH="$PWD/$venv/bin:$PATH" PYCAGE_REQUIRE_ALL_TESTS=1 \
    "$venv/bin/python" -m pytest crates/pycage-py/tests -q -p no:cacheprovider
