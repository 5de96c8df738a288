#!/usr/bin/env bash
# CI for the `pycage-run` Python distribution (import name `pycage`): build
# the release wheel once with scripts/build-wheels.sh (the module and the
# `pycage` command, linked for manylinux_2_17 with zig), install that wheel
# into the test venv, and run the pytest suite against it. The suite's
# test_wheel.py also installs it into a fresh venv on a PATH without cargo
# or rustc (PYCAGE_WHEEL names it) and runs the command, `import pycage`
# and sandboxed runs there, and the README's wheel commands as written.
# Pinned tools come from crates/pycage-py/tests/requirements.txt (the
# build's from scripts/wheel-requirements.txt). It also pins Ray, for
# test_ray.py (pycage.ray on a two-node ray.cluster_utils cluster on this
# machine; it fails, not skips, without Ray under PYCAGE_REQUIRE_ALL_TESTS=1),
# and requirements-integrations.txt pins the agent frameworks of the
# test_*_integration*.py tests.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${PYCAGE_PY_VENV:-target/python-package-venv}"
echo "== python package: venv $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r crates/pycage-py/tests/requirements.txt \
    -r crates/pycage-py/tests/requirements-integrations.txt

echo "== ruff (the package, its tests, the benchmark, the child side in python/)"
py_paths=(crates/pycage-py/python crates/pycage-py/tests benchmarks python)
"$venv/bin/ruff" check --select E,F,W,B,I "${py_paths[@]}"
"$venv/bin/ruff" format --check "${py_paths[@]}"

echo "== python package: the release wheel (scripts/build-wheels.sh)"
start=$SECONDS
bash scripts/build-wheels.sh | tee target/build-wheels.log
wheel=$(tail -n 1 target/build-wheels.log | sed -n 's/^wheel: //p')
if [ ! -f "$wheel" ]; then
    echo "python-package.sh: scripts/build-wheels.sh named no wheel" >&2
    exit 1
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "built and installed in $((SECONDS - start)) s: $wheel ($(du -h "$wheel" | cut -f1))"

echo "== python package: pytest"
# Runs use the venv's interpreter (python3 on PATH), as an installed user's would.
PATH="$PWD/$venv/bin:$PATH" PYCAGE_REQUIRE_ALL_TESTS=1 PYCAGE_WHEEL="$PWD/$wheel" \
    "$venv/bin/python" -m pytest crates/pycage-py/tests -q -p no:cacheprovider
