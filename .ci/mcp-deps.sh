#!/usr/bin/env bash
# Installs the real MCP parts the MCP tests and benchmarks drive, pinned:
#   - the official Python MCP SDK (PyPI `mcp`, every transitive package
#     pinned in .ci/mcp-requirements.txt) into a virtualenv;
#   - the reference server `@modelcontextprotocol/server-everything` (npm,
#     exact tree in .ci/mcp-npm/package-lock.json, installed with `npm ci`).
#
# Where: $PYCAGE_MCP_DEPS, default <repo>/target/mcp-deps, laid out as
#   venv/bin/python                                   the SDK's interpreter
#   npm/node_modules/.bin/mcp-server-everything       the reference server
# Tests look there (same variable, same default); with
# PYCAGE_REQUIRE_ALL_TESTS=1 they fail when it is missing. Idempotent: a
# stamp records what was installed, so a second run only checks it.
set -euo pipefail
cd "$(dirname "$0")/.."

deps="${PYCAGE_MCP_DEPS:-$PWD/target/mcp-deps}"
stamp="$deps/installed.stamp"
want="$(cat .ci/mcp-requirements.txt .ci/mcp-npm/package.json .ci/mcp-npm/package-lock.json | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" \
      && -x "$deps/venv/bin/python" && -x "$deps/npm/node_modules/.bin/mcp-server-everything" ]]; then
    echo "mcp deps: up to date in $deps"
    exit 0
fi

echo "mcp deps: installing into $deps"
mkdir -p "$deps"
rm -rf "$deps/venv" "$deps/npm" "$stamp"
python3 -m venv "$deps/venv"
"$deps/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r .ci/mcp-requirements.txt
"$deps/venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'

mkdir -p "$deps/npm"
cp .ci/mcp-npm/package.json .ci/mcp-npm/package-lock.json "$deps/npm/"
(cd "$deps/npm" && npm ci --no-audit --no-fund --silent)
test -x "$deps/npm/node_modules/.bin/mcp-server-everything"
node -e 'console.log("server-everything", require(process.argv[1]).version)' \
    "$deps/npm/node_modules/@modelcontextprotocol/server-everything/package.json"
echo "$want" > "$stamp"
