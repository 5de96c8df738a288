#!/usr/bin/env bash
# Installs the data-science test venv the display tests and benchmark run
# programs in: python3 -m venv --copies (a copied interpreter, so the venv's
# site-packages are its own inside the sandbox) with the packages of
# .ci/data-requirements.txt, pinned, from PyPI.
#
# Where: $PYCAGE_DATA_VENV, default <repo>/target/data-venv (its
# bin/python). Tests look there (same variable, same default); with
# PYCAGE_REQUIRE_ALL_TESTS=1 they fail when it is missing. Idempotent: a
# stamp records what was installed, so a second run only checks it.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${PYCAGE_DATA_VENV:-$PWD/target/data-venv}"
stamp="$venv/installed.stamp"
want="$( (cat .ci/data-requirements.txt; python3 --version) | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "data venv: up to date in $venv"
    exit 0
fi

echo "data venv: installing into $venv"
rm -rf "$venv"
python3 -m venv --copies "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r .ci/data-requirements.txt
"$venv/bin/python" -c 'import matplotlib; print("matplotlib", matplotlib.__version__)'
echo "$want" > "$stamp"
