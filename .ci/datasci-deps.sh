#!/usr/bin/env bash
# Installs the data-science test venv, pinned (.ci/datasci-requirements.txt):
# numpy, pandas, matplotlib, uv (its binary installs a run's declared
# packages), ty (the type checker of `type_check` runs), threadpoolctl and
# certifi, from PyPI, into a normal
# (symlinked) venv of `python3`.
#
# Where: $PYCAGE_DATASCI_VENV, default <repo>/target/datasci-venv. The
# tests of --venv, --preload and PEP 723 dependencies (Rust and the Python
# package) look there, through the same variable and default; with
# PYCAGE_REQUIRE_ALL_TESTS=1 they fail when it is missing. Idempotent: a
# stamp records what was installed, so a second run only checks it.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${PYCAGE_DATASCI_VENV:-$PWD/target/datasci-venv}"
stamp="$venv/installed.stamp"
want="$( (cat .ci/datasci-requirements.txt; python3 -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" && -x "$venv/bin/uv" && -x "$venv/bin/ty" ]]; then
    echo "datasci venv: up to date in $venv"
    exit 0
fi

echo "datasci venv: installing into $venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r .ci/datasci-requirements.txt
"$venv/bin/python" -c 'import numpy, pandas, matplotlib; print("numpy", numpy.__version__, "pandas", pandas.__version__, "matplotlib", matplotlib.__version__)'
"$venv/bin/uv" --version
"$venv/bin/ty" --version
echo "$want" > "$stamp"
