#!/usr/bin/env bash
# BENCHMARKS.md's tables, measured again: runs each lane's command, keeps
# its raw output in target/bench-report/, and prints each lane's table in
# BENCHMARKS.md's format (heading, command, date, commit, machine, then the
# table from benchmarks/report.py), also written to
# target/bench-report/report.md. Paste each lane over its section; the
# `speed` block goes into BENCHMARKS.md and the README's Speed section
# alike (crates/pycage-cli/tests/readme.rs checks that they match).
#
#   bash benchmarks/run.sh                 # every lane this machine can run
#   bash benchmarks/run.sh runs package    # some lanes
#   bash benchmarks/run.sh --quick runs    # tiny counts: checks the scripts, not the figures
#   bash benchmarks/run.sh --no-install package   # the venv as it is (no pip install .)
#   bash benchmarks/run.sh --latency-only --baseline DIR   # as before: head_to_head.py's own arguments
#
# Lanes: runs (`pycage bench`, and the chart docs/img/bench.svg), cpu
# (cpu_per_run.py), package (head_to_head.py), sessions
# (session_spaced.py), datasci (`pycage bench --venv` and `--plot`, needs
# .ci/datasci-deps.sh), ray (ray_bench.py, needs .ci/python-package.sh's
# venv), mcp (crates/pycage-cli/benches/mcp.rs, needs .ci/mcp-deps.sh),
# codec (crates/pycage-protocol/benches/codec.rs). A lane whose
# prerequisites are missing is skipped with the command that provides them.
#
# The package lanes use a venv with the pinned peers (benchmarks/
# requirements.txt) and pycage built from this clone (`pip install .`, a
# release build): $PYCAGE_BENCH_VENV, default target/bench-venv. The CLI
# lanes use $PYCAGE_BIN, default target/release/pycage (built here).
# Figures mean something only on a machine that is otherwise quiet: the
# report states the load average at the start of each lane.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv="${PYCAGE_BENCH_VENV:-target/bench-venv}"
out="target/bench-report"

install_venv() {
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
    PATH="$root/$venv/bin:$PATH" \
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
}

# The head-to-head alone, with its own arguments (what this script did
# before it ran every lane; docs/perf-log.md's commands use it).
if [[ $# -gt 0 && $1 == -* && $1 != --quick && $1 != --no-install ]]; then
    install_venv
    # Runs use the venv's interpreter (python3 on PATH), as an installed user's would.
    PATH="$root/$venv/bin:$PATH" exec "$venv/bin/python" benchmarks/head_to_head.py "$@"
fi

quick=0
install=1
lanes=()
for arg in "$@"; do
    case $arg in
        --quick) quick=1 ;;
        --no-install) install=0 ;;
        runs | cpu | package | sessions | datasci | ray | mcp | codec) lanes+=("$arg") ;;
        *)
            echo "run.sh: unknown lane or flag: $arg" >&2
            exit 2
            ;;
    esac
done
[[ ${#lanes[@]} -gt 0 ]] || lanes=(runs cpu package sessions datasci ray mcp codec)
mkdir -p "$out"
report="$out/report.md"
: >"$report"

commit=$(git rev-parse --short HEAD)
[[ -z $(git status --porcelain --untracked-files=no) ]] || commit="$commit (with uncommitted changes)"
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
machine="$(nproc) vCPUs ($model), Linux $(uname -r), $mem"
who=$([[ $(id -u) == 0 ]] && echo root || id -un)

# Prints (and keeps) one lane's heading and where it was measured.
heading() {
    local title=$1 command=$2
    {
        echo "## $title"
        echo
        echo "\`$command\`"
        echo
        echo "Measured $(date -u +%F) at $commit, as $who, on $machine; load average" \
            "$(cut -d' ' -f1-3 /proc/loadavg) at the start.$([[ $quick == 1 ]] && echo ' QUICK RUN: tiny counts, not figures.')"
        echo
    } | tee -a "$report"
}

emit() { tee -a "$report"; echo | tee -a "$report"; }

skip() { echo "skipped $1: $2" | tee -a "$report" >&2; }

pycage_bin() {
    if [[ -n ${PYCAGE_BIN:-} ]]; then
        echo "$PYCAGE_BIN"
        return
    fi
    cargo build -q --release -p pycage-cli >&2
    echo target/release/pycage
}

package_venv() {
    if [[ $install == 1 && ! -f $out/.venv-ready ]]; then
        install_venv
        touch "$out/.venv-ready"
    fi
    [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import pycage, pydantic_monty' 2>/dev/null
}

in_venv() { PATH="$root/$venv/bin:$PATH" "$venv/bin/python" "$@"; }

rm -f "$out/.venv-ready"
for lane in "${lanes[@]}"; do
    case $lane in
        runs)
            bin=$(pycage_bin)
            iterations=$([[ $quick == 1 ]] && echo 2 || echo 30)
            # A quick run's chart is not the README's.
            svg=$([[ $quick == 1 ]] && echo "$out/bench.svg" || echo docs/img/bench.svg)
            heading "Whole runs: \`pycage bench\`" "pycage bench --iterations $iterations --svg $svg"
            "$bin" bench --iterations "$iterations" --json --svg "$svg" >"$out/runs.json" || true
            python3 benchmarks/report.py runs "$out/runs.json" | emit
            echo "The block BENCHMARKS.md and the README's Speed section share:" | emit
            python3 benchmarks/report.py speed "$out/runs.json" \
                --measured "with \`pycage bench\` $(date -u +%F) at $commit, as $who, on $machine" | emit
            ;;
        cpu)
            package_venv || { skip cpu "no venv with pycage at $venv (run without --no-install)"; continue; }
            args=(--isolation process,sandbox --seconds 6 --spaced 50 --rounds 2)
            [[ $quick == 1 ]] && args=(--isolation process,sandbox --seconds 1 --spaced 5)
            heading "CPU per run: \`cpu_per_run.py\`" "python benchmarks/cpu_per_run.py ${args[*]}"
            in_venv benchmarks/cpu_per_run.py "${args[@]}" --json >"$out/cpu.jsonl"
            python3 benchmarks/report.py cpu "$out/cpu.jsonl" | emit
            ;;
        package)
            package_venv || { skip package "no venv with pycage and pydantic-monty at $venv"; continue; }
            rounds=$([[ $quick == 1 ]] && echo 0.02 || echo 1)
            heading "The Python package, head to head" "python benchmarks/head_to_head.py --rounds $rounds"
            in_venv benchmarks/head_to_head.py --rounds "$rounds" --json "$out/package.json" >"$out/package.md"
            python3 benchmarks/report.py package "$out/package.json" | emit
            ;;
        sessions)
            package_venv || { skip sessions "no venv with pycage and pydantic-monty at $venv"; continue; }
            cells=$([[ $quick == 1 ]] && echo 5 || echo 200)
            heading "Sessions" "python benchmarks/session_spaced.py --isolation process|sandbox --gaps-ms 0,5,20 --cells $cells"
            for iso in process sandbox; do
                in_venv benchmarks/session_spaced.py --isolation "$iso" --gaps-ms 0,5,20 --cells "$cells" \
                    --json "$out/sessions-$iso.json" >/dev/null
            done
            python3 benchmarks/report.py sessions "$out/sessions-process.json" "$out/sessions-sandbox.json" | emit
            ;;
        datasci)
            data="${PYCAGE_DATASCI_VENV:-target/datasci-venv}"
            [[ -x $data/bin/python ]] || { skip datasci "no $data (bash .ci/datasci-deps.sh)"; continue; }
            bin=$(pycage_bin)
            iterations=$([[ $quick == 1 ]] && echo 2 || echo 10)
            heading "numpy and pandas with a preload: \`pycage bench --venv\`" "pycage bench --venv $data --iterations $iterations"
            "$bin" bench --venv "$data" --iterations "$iterations" --json >"$out/datasci.json" || true
            python3 benchmarks/report.py datasci "$out/datasci.json" | emit
            "$bin" bench --plot "$data/bin/python" --iterations "$iterations" --json >"$out/plot.json" || true
            echo "\`pycage bench --plot $data/bin/python --iterations $iterations\`:" | emit
            python3 benchmarks/report.py plot "$out/plot.json" | emit
            ;;
        ray)
            rv=target/python-package-venv
            "$rv/bin/python" -c 'import pycage, ray' 2>/dev/null || { skip ray "no $rv with ray (bash .ci/python-package.sh)"; continue; }
            args=()
            [[ $quick == 1 ]] && args=(--runs 10 --rounds 1 --binding-rounds 2 --concurrency 1 4)
            heading "pycage on Ray" "python benchmarks/ray_bench.py ${args[*]}"
            PATH="$root/$rv/bin:$PATH" "$rv/bin/python" benchmarks/ray_bench.py "${args[@]}" --json "$out/ray.json" | emit
            ;;
        mcp)
            [[ -d target/mcp-deps ]] || { skip mcp "no target/mcp-deps (bash .ci/mcp-deps.sh)"; continue; }
            args=()
            [[ $quick == 1 ]] && args=(-- --quick)
            heading "MCP" "cargo bench -p pycage-cli --bench mcp ${args[*]}"
            cargo bench -q -p pycage-cli --bench mcp "${args[@]}" 2>/dev/null | grep '^|' | emit
            ;;
        codec)
            args=()
            [[ $quick == 1 ]] && args=(-- --quick)
            heading "Protocol codec" "cargo bench -p pycage-protocol --bench codec ${args[*]}"
            cargo bench -q -p pycage-protocol --bench codec "${args[@]}" >"$out/codec.txt" 2>&1
            python3 benchmarks/report.py codec target/criterion | emit
            ;;
    esac
done
# Binding calls: rows of the runs and package lanes, when both ran now.
if [[ " ${lanes[*]} " == *" runs "* && " ${lanes[*]} " == *" package "* && -s $out/runs.json && -s $out/package.json ]]; then
    heading "Binding calls" "the runs and package lanes above"
    python3 benchmarks/report.py calls "$out/runs.json" "$out/package.json" | emit
fi
echo "report: $report" >&2
