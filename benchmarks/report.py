"""BENCHMARKS.md's tables, printed from one lane's raw output.

``benchmarks/run.sh`` runs each lane's command, keeps what it wrote in
``target/bench-report/``, and calls this for each lane::

    python3 benchmarks/report.py runs target/bench-report/runs.json
    python3 benchmarks/report.py speed target/bench-report/runs.json --measured "2026-12-05, abc1234"

Each lane prints the table BENCHMARKS.md shows for it, in the same shape
and the same row names, every figure beside its floor from the same run,
so that a maintainer replaces the lane's table with what this prints.
``speed`` prints the marked block that BENCHMARKS.md and the README's Speed
section share (a test checks that the two are the same).

Lanes and what they read: ``runs`` (``pycage bench --json``), ``cpu``
(``cpu_per_run.py --json``, one object a line), ``package``
(``head_to_head.py --json``), ``sessions`` (``session_spaced.py --json``),
``calls`` (``pycage bench --json`` and ``head_to_head.py --json``),
``datasci`` (``pycage bench --venv ... --json``), ``plot`` (``pycage bench
--plot ... --json``), ``codec`` (criterion's ``estimates.json`` files under
the directory given). Ray and MCP print their own tables.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

DASH = "—"


def num(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:,.{digits}f}"


def ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    if a is None or b is None or b == 0:
        return DASH
    return f"{a / b:.{digits}f}"


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# --- runs: `pycage bench --json` ---------------------------------------------


def by_variant(items: list[dict], key: str = "variant") -> dict[str, dict]:
    return {i[key]: i for i in items}


def runs_table(report: dict) -> str:
    floors = report.get("floors", {})
    passed, imported, pipe = (
        floors.get("pythonPassMs"),
        floors.get("pythonImportAsyncioJsonMs"),
        floors.get("pipeRoundTripUs"),
    )
    trivial = {(t["spawn"], t["isolation"]): t for t in report.get("trivialRun", [])}
    loops = by_variant(report.get("closedLoop", []))
    cells = by_variant(report.get("sessionCell", []))
    rates: dict[tuple[str, int], float] = {
        (r["variant"], r["concurrency"]): r["runsPerSecond"] for r in report.get("runsPerSecond", [])
    }
    isolations = ("process", "sandbox")

    def both(f) -> list[str]:
        return [f(i) for i in isolations]

    def t(spawn: str, iso: str, key: str) -> float | None:
        return trivial.get((spawn, iso), {}).get(key)

    def loop(iso: str, key: str) -> float | None:
        return loops.get(f"zygote / {iso}", {}).get(key)

    def cell(iso: str) -> float | None:
        return cells.get(f"zygote / {iso}", {}).get("p50Ms")

    def rate(iso: str, c: int) -> float | None:
        return rates.get((f"zygote / {iso}", c))

    fork, nsset = floors.get("cpythonForkCpuMs"), floors.get("namespaceSetCpuMs")
    # The kernel's whole floor for what a sandbox adds: namespaces, mounts
    # and the program's own confinement (reports before it had none).
    sandbox_floor = floors.get("sandboxFloorCpuMs")
    cpu_p, cpu_s = loop("process", "cpuPerRunMs"), loop("sandbox", "cpuPerRunMs")
    gap = None if cpu_p is None or cpu_s is None else cpu_s - cpu_p

    def split(iso: str) -> str:
        c = loops.get(f"zygote / {iso}", {}).get("cpuPerRun") or {}
        return " / ".join(num(c.get(k)) for k in ("hostMs", "shellsMs", "zygoteMs", "childMs"))

    call = report.get("call", {})
    rows = [
        [
            "trivial run, zygote, spaced p50 / p99",
            *both(lambda i: f"{num(t('zygote', i, 'p50Ms'))} / {num(t('zygote', i, 'p99Ms'))} ms"),
            f"`python3 -I -c pass` {num(passed)} ms",
            " / ".join(ratio(t("zygote", i, "p50Ms"), passed, 3) for i in isolations),
        ],
        [
            "trivial run, exec (one interpreter per run), p50",
            *both(lambda i: f"{num(t('exec', i, 'p50Ms'))} ms"),
            f'`python3 -I -c "import asyncio, json"` {num(imported)} ms',
            " / ".join(ratio(t("exec", i, "p50Ms"), imported) for i in isolations),
        ],
        [
            "trivial runs back to back, one at a time: p50 / p99",
            *both(lambda i: f"{num(loop(i, 'p50Ms'))} / {num(loop(i, 'p99Ms'))} ms"),
            "",
            "",
        ],
        [
            "CPU per back-to-back run: the whole machine (host / shells / zygote / run)",
            *both(lambda i: f"{num(loop(i, 'cpuPerRunMs'))} ({split(i)}) ms"),
            f"CPython fork + exit with the zygote's imports {num(fork)} ms; the namespace set {num(nsset)} ms",
            f"{ratio(loop('process', 'cpuPerRunMs'), fork)} / "
            f"{ratio(loop('sandbox', 'cpuPerRunMs'), None if fork is None or nsset is None else fork + nsset)}",
        ],
        [
            "CPU a sandbox adds to a back-to-back run (sandbox - process)",
            "",
            f"{num(gap)} ms",
            f"the namespace set with the program's confinement {num(sandbox_floor)} ms",
            ratio(gap, sandbox_floor),
        ],
        [
            "runs per second at concurrency 1 / 2 / 4 / 16",
            *both(lambda i: " / ".join(num(rate(i, c), 0) for c in (1, 2, 4, 16))),
            "",
            f"sandbox / process at 4: {ratio(rate('sandbox', 4), rate('process', 4))}",
        ],
        [
            "a trivial cell in a warm session, p50",
            *both(lambda i: f"{num(cell(i), 3)} ms"),
            f"a JSON line echoed by Python over a pipe {num(pipe, 1)} µs",
            " / ".join(ratio(cell(i) * 1000 if cell(i) is not None else None, pipe, 1) for i in isolations),
        ],
        [
            "one binding call round trip (1,000 sequential awaits)",
            f"{num(call.get('roundTripUs'), 1)} µs",
            "",
            f"the same pipe {num(call.get('pipeFloorUs'), 1)} µs",
            ratio(call.get("roundTripUs"), call.get("pipeFloorUs")),
        ],
    ]
    out = table(["row", "process", "sandbox", "floor (same run)", "ratio to the floor"], rows)
    mem = report.get("memoryKiB", {})

    def mib(key: str) -> str:
        kib = mem.get(key)
        return DASH if kib is None else f"{kib / 1024:.1f}"

    out += (
        f"\n\n`asyncio.gather` of 1,000 calls: {num(call.get('gatherCallsPerSecond'), 0)} calls/s. "
        f"Host RSS {mib('hostRss')} MiB; the zygote's private memory {mib('zygotePrivate')} MiB; "
        f"an idle pooled child's {mib('idleChildPrivate')} MiB."
    )
    for u in report.get("unavailable", []):
        out += f"\n\n{u['variant']}: unavailable here ({u['reason']})."
    for f in report.get("failures", []):
        out += f"\n\n{f['case']}: {f['failed']} of {f['tried']} runs failed (first: {f['first']})."
    return out


def speed_block(report: dict, measured: str) -> str:
    """The block BENCHMARKS.md and the README share."""
    floors = report.get("floors", {})
    passed, pipe = floors.get("pythonPassMs"), floors.get("pipeRoundTripUs")
    trivial = {(t["spawn"], t["isolation"]): t.get("p50Ms") for t in report.get("trivialRun", [])}
    cells = {c["variant"]: c.get("p50Ms") for c in report.get("sessionCell", [])}
    rates = {(r["variant"], r["concurrency"]): r["runsPerSecond"] for r in report.get("runsPerSecond", [])}
    call = report.get("call", {})
    sz, pz = trivial.get(("zygote", "sandbox")), trivial.get(("zygote", "process"))
    sc, pc = cells.get("zygote / sandbox"), cells.get("zygote / process")
    sr, pr = rates.get(("zygote / sandbox", 4)), rates.get(("zygote / process", 4))
    us = lambda ms: None if ms is None else ms * 1000  # noqa: E731
    rows = [
        [
            "a trivial run (`return 1`), p50",
            f"{num(sz)} / {num(pz)} ms",
            f"a bare `python3 -I -c pass`: {num(passed, 1)} ms",
            f"{ratio(sz, passed, 3)} / {ratio(pz, passed, 3)}",
        ],
        [
            "a trivial cell in a warm session, p50",
            f"{num(sc, 3)} / {num(pc, 3)} ms",
            f"a JSON line echoed by Python over a pipe: {num(pipe, 0)} µs",
            f"{ratio(us(sc), pipe, 1)} / {ratio(us(pc), pipe, 1)}",
        ],
        [
            "one binding call round trip",
            f"{num(call.get('roundTripUs'), 1)} µs",
            "the same pipe",
            ratio(call.get("roundTripUs"), call.get("pipeFloorUs")),
        ],
        [
            "runs per second, 4 at a time",
            f"{num(sr, 0)} / {num(pr, 0)}",
            "process isolation's",
            ratio(sr, pr),
        ],
    ]
    body = table(["`pycage bench`", "sandbox / process", "floor, same run", "ratio"], rows)
    return f"<!-- speed:begin -->\n{body}\n\nMeasured {measured}.\n<!-- speed:end -->"


# --- cpu: cpu_per_run.py --json ------------------------------------------------


def cpu_table(lines: list[dict]) -> str:
    rows, floors = [], {}
    for line in lines:
        if "isolation" in line:
            rows.append(line)
        else:
            floors = line
    fork = floors.get("floorZygoteForkCpuMs")
    fork_total = sum(fork) if fork else None
    out_rows = []
    for r in rows:
        parts = [r.get("hostCpuMs"), r.get("shellCpuMs"), r.get("zygoteCpuMs"), r.get("childCpuMs")]
        total = None if None in parts else sum(parts)
        busy = r.get("machineBusyMs")
        out_rows.append(
            [
                f"{r['isolation']} ({r.get('hostRssMib', DASH)} MiB host)",
                num(r.get("runsPerSecond"), 0),
                f"{num(r.get('spacedP50Ms'))} / {num(r.get('spacedP99Ms'))} ms",
                " / ".join(num(p) for p in parts) + " ms",
                f"{num(total)} ms ({num(r.get('childFaults'), 0)} faults)",
                f"{num(busy)} ms ({num(None if total is None or busy is None else busy - total)})",
                num(r.get("machineIdleMs")),
                ratio(busy, fork_total, 1),
            ]
        )
    head = [
        "isolation",
        "runs/s at concurrency 4",
        "spaced p50 / p99",
        "CPU per run: host / shells / zygote / run",
        "processes' total (run's faults)",
        "machine busy per run (in no process)",
        "machine idle per run, ms",
        "busy / fork floor",
    ]
    out = table(head, out_rows)
    if fork:
        out += (
            f"\n\nFloors, same invocation: a fork and `_exit` of `python3 -I` with the zygote's imports "
            f"{num(fork_total)} ms of CPU (parent {num(fork[0])}, child {num(fork[1])}); bare "
            f"{num(sum(floors.get('floorForkCpuMs', [0, 0])))} ms; `python -I -c pass` "
            f"{num(floors.get('floorPythonStartCpuMs'))} ms of CPU."
        )
    return out


# --- package: head_to_head.py --json -------------------------------------------

CASES = [
    ("trivial", "trivial run (`1 + 1`), rows interleaved"),
    ("session_cell", "session cell (`x = x + 1`, then `x`)"),
    ("calls100", "100 sequential binding calls"),
    ("gather1000", "`gather` of 1,000 binding calls"),
    ("loop_top", "a million additions, top level"),
    ("loop_fn", "a million additions in a function"),
]


def ms(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.1f}"


def package_table(results: dict) -> str:
    rows = []
    monty = "pydantic-monty"
    for case, label in CASES:
        r = results.get("cases", {}).get(case)
        if not r:
            continue
        p = r.get("pycage (process, zygote)", {}).get("p50")
        s = r.get("pycage (sandbox, zygote)", {}).get("p50")
        m = r.get(monty, {}).get("p50")
        floors = [f"{k.removeprefix('floor: ')} {ms(v['p50'])}" for k, v in r.items() if k.startswith("floor")]
        rows.append([label, ms(p), ms(s), ms(m), "; ".join(floors), f"{ratio(p, m)} / {ratio(s, m)}"])
    lat = results.get("latency", {})
    names = ("pycage (process, zygote)", "pycage (sandbox, zygote)")

    def rust(rs: dict, name: str) -> dict:
        return rs.get(f"floor: {name}, driven from Rust", {})

    if "spaced" in lat:
        rs = lat["spaced"]
        p, s, m = (rs.get(n, {}).get("p50") for n in (*names, monty))
        fp, fs = (rust(rs, n).get("p50") for n in names)
        rows.append(
            [
                "trivial run, 20 ms apart, p50",
                ms(p),
                ms(s),
                ms(m),
                f"driven from Rust {ms(fp)} / {ms(fs)}",
                f"{ratio(p, m)} / {ratio(s, m)}",
            ]
        )
    if "closed loop" in lat:
        rs = lat["closed loop"]

        def three(x: dict) -> str:
            return f"{ms(x.get('p50'))} / {ms(x.get('p99'))} / {ms(x.get('mean'))}"

        p, s, m = (rs.get(n, {}) for n in (*names, monty))
        fp, fs = (rust(rs, n) for n in names)
        rows.append(
            [
                "trivial runs back to back (one thread): p50 / p99 / mean",
                three(p),
                three(s),
                three(m),
                f"driven from Rust {three(fp)}; {three(fs)}",
                f"{ratio(p.get('p50'), m.get('p50'))} / {ratio(s.get('p50'), m.get('p50'))}",
            ]
        )
        rows.append(
            [
                "host CPU per back-to-back run",
                ms(p.get("host_cpu")),
                ms(s.get("host_cpu")),
                ms(m.get("host_cpu")),
                "",
                f"{ratio(p.get('host_cpu'), m.get('host_cpu'))} / {ratio(s.get('host_cpu'), m.get('host_cpu'))}",
            ]
        )
    head = ["case, ms", "pycage, process", "pycage, sandbox", "pydantic-monty", "floor (same run)", "× Monty p50"]
    return table(head, rows)


# --- calls: rows of `pycage bench --json` and `head_to_head.py --json` -----------


def calls_table(runs: dict, package: dict) -> str:
    call = runs.get("call", {})
    cases = package.get("cases", {})
    names = ("pycage (process, zygote)", "pycage (sandbox, zygote)")
    monty = "pydantic-monty"

    def us(seconds: float | None) -> str:
        return DASH if seconds is None else f"{seconds * 1e6:.1f}"

    rows = [
        [
            "one round trip to a Rust binding (`pycage bench`), process",
            f"{num(call.get('roundTripUs'), 1)} µs",
            f"a JSON line echoed by Python over a pipe: {num(call.get('pipeFloorUs'), 1)} µs",
            ratio(call.get("roundTripUs"), call.get("pipeFloorUs")),
            DASH,
        ]
    ]
    c100 = cases.get("calls100", {})
    if c100:
        p, s = (c100.get(n, {}).get("call_p50") for n in names)
        m = c100.get(monty, {}).get("call_p50")
        f = c100.get("floor: 100 pipe round trips", {})
        fl = f.get("call_p50") or (f.get("p50") / 100 if f.get("p50") else None)
        rows.append(
            [
                "one round trip to a Python binding through the package (between two calls of 100)",
                f"{us(p)} / {us(s)} µs",
                f"the same pipe: {us(fl)} µs",
                f"{ratio(p, fl)} / {ratio(s, fl)}",
                f"{us(m)} µs: {ratio(p, m)} / {ratio(s, m)}",
            ]
        )
    for case, label, floor in (
        ("calls100", "100 sequential calls to a Python binding", "floor: 100 pipe round trips"),
        ("gather1000", "`asyncio.gather` of 1,000 calls", None),
    ):
        r = cases.get(case)
        if not r:
            continue
        p, s = (r.get(n, {}).get("p50") for n in names)
        m = r.get(monty, {}).get("p50")
        f = r.get(floor, {}).get("p50") if floor else None
        rows.append(
            [
                label,
                f"{ms(p)} / {ms(s)} ms",
                f"100 pipe round trips: {ms(f)} ms" if floor else DASH,
                f"{ratio(p, f)} / {ratio(s, f)}" if floor else DASH,
                f"{ms(m)} ms: {ratio(p, m)} / {ratio(s, m)}",
            ]
        )
    head = [
        "call",
        "pycage, process / sandbox",
        "floor (same run)",
        "ratio to the floor",
        "pydantic-monty (same run), ×",
    ]
    return table(head, rows)


# --- sessions: session_spaced.py --json ----------------------------------------


def sessions_table(files: list[dict]) -> str:
    """One file per isolation; each engine against the Monty REPL of its own run."""
    rows = []
    for data in files:
        for gap, engines in data.get("gaps", {}).items():
            m = engines.get("pydantic-monty", {}).get("p50")
            for name, v in engines.items():
                if name.startswith("pycage"):
                    rows.append([f"{gap} ms apart", name, ms(v["p50"]), ms(v["p90"]), ms(m), ratio(v["p50"], m)])
    rows.sort(key=lambda r: float(r[0].split()[0]))
    return table(["cells", "engine", "p50, ms", "p90, ms", "Monty's REPL p50, ms (same run)", "× Monty"], rows)


# --- datasci and plot: `pycage bench --venv/--plot --json` ----------------------


def datasci_table(report: dict) -> str:
    imp = report.get("floors", {}).get("pythonImportNumpyPandasMs")
    rows = [
        [
            r["case"],
            f"{num(r.get('p50Ms'))} / {num(r.get('p95Ms'))} ms",
            f'the venv\'s `python -I -c "import numpy, pandas"` {num(imp)} ms',
            ratio(r.get("p50Ms"), imp, 3),
        ]
        for r in report.get("freshRun", [])
    ]
    declared = report.get("declaredPackages", [])
    floor = next((r.get("p50Ms") for r in declared if r["case"].startswith("floor")), None)
    rows += [
        [
            f"PEP 723 `tabulate`: {r['case']}",
            f"{num(r.get('p50Ms'))} / {num(r.get('p95Ms'))} ms",
            f"`return 1`, same runtime {num(floor)} ms",
            ratio(r.get("p50Ms"), floor, 1),
        ]
        for r in declared
        if not r["case"].startswith("floor")
    ]
    return table(["run", "p50 / p95", "floor (same run)", "ratio"], rows)


def plot_table(report: dict) -> str:
    floors = report.get("floors", {})
    rows = [
        [
            r["row"],
            f"{num(r.get('p50Ms'))} / {num(r.get('p95Ms'))} ms",
            num(r.get("ratioToRenderFloor")),
            num(r.get("ratioToImportAndRenderFloor")),
        ]
        for r in report.get("rows", [])
    ]
    head = [
        "run that shows a 640x480 plot",
        "p50 / p95",
        f"÷ render floor ({num(floors.get('renderWarmMs'))} ms)",
        f"÷ `python -c` floor ({num(floors.get('importAndRenderMs'))} ms)",
    ]
    return table(head, rows)


# --- codec: criterion's estimates -----------------------------------------------

CODEC_ROWS = [
    ("done_1MiB", "pycage_validate_meter", "serde_value"),
    ("deep_1M", "pycage_parse", "serde_ignored"),
    ("flat_1M_numbers", "pycage_parse", "serde_value"),
]


def codec_table(root: pathlib.Path) -> str:
    medians: dict[tuple[str, str], float] = {}
    for est in root.glob("**/new/estimates.json"):
        bench, group = est.parent.parent.name, est.parent.parent.parent.name
        medians[(group, bench)] = json.loads(est.read_text())["median"]["point_estimate"] / 1e6
    rows = []
    for group, ours, theirs in CODEC_ROWS:
        o, t = medians.get((group, ours)), medians.get((group, theirs))
        rows.append([f"`{group}`", f"`{ours}` {num(o)} ms", f"`{theirs}` {num(t)} ms", ratio(o, t)])
    return table(["input", "pycage", "floor: serde_json (same run)", "ratio"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    lanes = ["runs", "speed", "calls", "cpu", "package", "sessions", "datasci", "plot", "codec"]
    ap.add_argument("lane", choices=lanes)
    ap.add_argument(
        "paths", nargs="+", help="the lane's raw output (a directory for codec; sessions: one file per isolation)"
    )
    ap.add_argument("--measured", default="", help="speed: when and where, e.g. '2026-12-05, abc1234, root'")
    args = ap.parse_args()
    path = pathlib.Path(args.paths[0])
    if args.lane == "sessions":
        print(sessions_table([json.loads(pathlib.Path(p).read_text()) for p in args.paths]))
        return
    if args.lane == "calls":
        runs, package = (json.loads(pathlib.Path(p).read_text()) for p in args.paths[:2])
        print(calls_table(runs, package))
        return
    if args.lane == "codec":
        print(codec_table(path))
        return
    text = path.read_text()
    if args.lane == "cpu":
        print(cpu_table([json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]))
        return
    data = json.loads(text)
    printers = {
        "runs": runs_table,
        "speed": lambda d: speed_block(d, args.measured),
        "package": package_table,
        "datasci": datasci_table,
        "plot": plot_table,
    }
    print(printers[args.lane](data))


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"report.py: {e}")
