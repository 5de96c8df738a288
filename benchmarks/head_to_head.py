"""Head-to-head: the same programs through pycage's Python package,
pydantic-monty and smolagents' LocalPythonExecutor, interleaved in one
process, with the floors they are judged against measured in the same run.

Run it with ``bash benchmarks/run.sh`` (a venv with the pinned
requirements and ``pip install .``); it prints a Markdown report and writes
the raw samples as JSON (``--json``).

Cases (each engine runs the program in its own dialect):

- ``trivial``: ``1 + 1`` as the value.
- ``session_cell``: a trivial cell (``x = x + 1``, then ``x`` as the value)
  in a warm session that keeps its globals (pycage's ``Runtime.session()``,
  Monty's REPL ``checkout()`` + ``feed_run``), opened once.
- ``calls100``: 100 sequential calls of a host function ``add(a, b)``;
  the per-call figure is (calls100 - trivial) / 100, against a floor of one
  JSON line echoed by a Python child over a pipe.
- ``gather1000``: 1,000 calls of an async host function under
  ``asyncio.gather`` (smolagents has no ``await``).
- ``loop_top`` / ``loop_fn``: a million additions at top level and inside
  a function, against the same code ``exec``-ed by the host's CPython.
- ``memory``: peak RSS of a fresh process (and of its largest child) that
  runs ``list(range(1_000_000))`` once through the engine.
- ``latency``: the trivial run as a user's code makes it, in two patterns:
  *spaced* (one run of each row in turn, in a new order every round, 20
  ms apart) and *closed loop* (blocks of 50 back-to-back
  runs of one row, rows alternating); p50 and p99, and the CPU this (host)
  process spent per run. Its floor is the same pycage run driven from Rust
  in this process (``NativeRuntime._bench_run``, what ``pycage bench``
  times): the package's own path is the difference. ``--latency-only``
  runs this section alone; ``--baseline DIR`` adds the rows of another
  build of the package (``pip install --no-deps --target DIR .`` at another
  commit), imported beside this one, for an interleaved before/after.
  ``--cases session_cell,trivial`` measures only those cases (and the
  latency section), without the memory section.

Samples of one case alternate between engines (ABCABC...), so a noisy
neighbour hits every engine alike; each row gives p50 and p90 of its samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pycage

LOOP_N = 1_000_000
TOP_LOOP = f"t = 0\nfor i in range({LOOP_N}):\n    t += i\n"
FN_LOOP = f"def f():\n    t = 0\n    for i in range({LOOP_N}):\n        t += i\n    return t\n"
CALLS = "t = 0\nfor i in range(100):\n    t = {call}\n"
SESSION_CELL = "x = x + 1\nx"
GATHER = "import asyncio\nr = await asyncio.gather(*[{call} for i in range(1000)])\n"
EXPECTED = {
    "trivial": 2,
    "session_cell": 1,  # checked once, on the first cell after x = 0
    "calls100": sum(range(100)),
    "gather1000": 1000,
    "loop_top": sum(range(LOOP_N)),
    "loop_fn": sum(range(LOOP_N)),
}


#: perf_counter() at each call of `add`: the interval between two calls of
#: a sequential loop is one full round trip (host -> program -> host), free of
#: the run's start-up noise.
CALL_STAMPS: list[float] = []


def add(a: int, b: int) -> int:
    CALL_STAMPS.append(time.perf_counter())
    return a + b


async def aadd(a: int, b: int) -> int:
    return a + b


# --- engines: each maps a case to a zero-argument callable returning the value


class Pycage:
    def __init__(self, isolation: str, spawn: str = "zygote") -> None:
        self.name = f"pycage ({isolation}, {spawn})"
        self.spawn = spawn
        self.rt = pycage.Runtime(isolation=isolation, spawn=spawn)
        self.sync_bindings = {"tools": {"add": add}}
        self.async_bindings = {"tools": {"add": aadd}}
        self.loop = asyncio.new_event_loop()

    def case(self, case: str) -> Callable[[], Any] | None:
        rt = self.rt
        if self.spawn == "exec" and case != "trivial":
            return None  # the exec rows show the interpreter-start cost only
        if case == "trivial":
            return lambda: rt.run("return 1 + 1").unwrap()
        if case == "session_cell":
            session = rt.session()
            session.run("x = 0").unwrap()
            return lambda: session.run(SESSION_CELL).unwrap()
        if case == "calls100":
            code = CALLS.format(call="await tools.add({'a': t, 'b': i})") + "return t"
            return lambda: rt.run(code, self.sync_bindings).unwrap()
        if case == "gather1000":
            code = GATHER.format(call="tools.add({'a': i, 'b': 1})") + "return len(r)"
            return lambda: self.loop.run_until_complete(rt.arun(code, self.async_bindings)).unwrap()
        if case == "loop_top":
            return lambda: rt.run(TOP_LOOP + "return t").unwrap()
        if case == "loop_fn":
            return lambda: rt.run(FN_LOOP + "return f()").unwrap()
        return None

    def inner_loop(self, case: str) -> InnerTimed:
        """The loop alone, timed by the program itself: CPython's speed in the child."""
        body = TOP_LOOP if case == "loop_top" else FN_LOOP + "t = f()\n"
        code = "import time\nt0 = time.perf_counter()\n" + body + "return [t, time.perf_counter() - t0]"

        def run() -> float:
            t, elapsed = self.rt.run(code).unwrap()
            assert t == EXPECTED[case]
            return elapsed

        return InnerTimed(run)

    def close(self) -> None:
        self.rt.close()
        self.loop.close()


class Monty:
    name = "pydantic-monty"

    def __init__(self) -> None:
        import pydantic_monty

        self.pool = pydantic_monty.Monty()
        self.pool.__enter__()
        self.limits = {"max_suspensions": 100_000}
        self.repls: list[Any] = []

    def feed(self, code: str, **kw: Any) -> Any:
        with self.pool.checkout(limits=self.limits) as session:
            return session.feed_run(code, **kw)

    def case(self, case: str) -> Callable[[], Any] | None:
        if case == "trivial":
            return lambda: self.feed("1 + 1")
        if case == "session_cell":
            repl = self.pool.checkout(limits=self.limits)
            session = repl.__enter__()
            self.repls.append(repl)
            session.feed_run("x = 0")
            return lambda: session.feed_run(SESSION_CELL)
        if case == "calls100":
            code = CALLS.format(call="add(t, i)") + "t"
            return lambda: self.feed(code, external_lookup={"add": add})
        if case == "loop_top":
            return lambda: self.feed(TOP_LOOP + "t")
        if case == "loop_fn":
            return lambda: self.feed(FN_LOOP + "f()")
        return None

    def close(self) -> None:
        for repl in self.repls:
            repl.__exit__(None, None, None)
        self.pool.__exit__(None, None, None)


class AsyncMontyWarm:
    """The gathered case on a warm AsyncMonty pool (the pool made once)."""

    name = "pydantic-monty"

    def __init__(self) -> None:
        import pydantic_monty

        self.loop = asyncio.new_event_loop()

        async def start() -> Any:
            pool = pydantic_monty.AsyncMonty()
            await pool.__aenter__()
            return pool

        self.pool = self.loop.run_until_complete(start())

    def gather_case(self) -> Callable[[], Any]:
        code = GATHER.format(call="add(i, 1)") + "len(r)"
        return lambda: self.gather(code)

    def gather(self, code: str) -> Any:
        async def go() -> Any:
            async with self.pool.checkout(limits={"max_suspensions": 100_000}) as session:
                return await session.feed_run(code, external_lookup={"add": aadd})

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        async def stop() -> None:
            await self.pool.__aexit__(None, None, None)

        self.loop.run_until_complete(stop())
        self.loop.close()


class Smolagents:
    name = "smolagents local"

    def __init__(self) -> None:
        from smolagents.local_python_executor import LocalPythonExecutor

        self.cls = LocalPythonExecutor

    def fresh(self) -> Any:
        ex = self.cls([], additional_functions={"add": add})
        ex.send_tools({})
        return ex

    def case(self, case: str) -> Callable[[], Any] | None:
        if case == "trivial":
            return lambda: self.fresh()("1 + 1").output
        if case == "calls100":
            code = CALLS.format(call="add(t, i)") + "t"
            return lambda: self.fresh()(code).output
        if case == "loop_top":
            return lambda: self.fresh()(TOP_LOOP + "t").output
        if case == "loop_fn":
            return lambda: self.fresh()(FN_LOOP + "f()").output
        return None  # gather1000: no await in smolagents' interpreter

    def close(self) -> None:
        pass


class InnerTimed:
    """A runner that reports its own duration (seconds) instead of being timed."""

    def __init__(self, fn: Callable[[], float]) -> None:
        self.fn = fn

    def __call__(self) -> float:
        return self.fn()


# --- floors


def floor_python_start() -> Callable[[], Any]:
    """A bare interpreter start: what a pycage run pays until the zygote."""
    exe = pycage.Runtime(isolation="process").config["python"]
    return lambda: subprocess.run([exe, "-I", "-c", "pass"], check=True) and None


class PipeEcho:
    """A Python child echoing JSON lines over a pipe: a binding call's floor."""

    def __init__(self) -> None:
        code = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.line = b'{"type":"call","id":1,"global":"tools","name":"add","args":{"a":1,"b":2}}\n'

    def round_trips(self, n: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        for _ in range(n):
            CALL_STAMPS.append(time.perf_counter())
            self.proc.stdin.write(self.line)
            self.proc.stdout.readline()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def floor_exec(code: str) -> Callable[[], Any]:
    compiled = compile(code, "<floor>", "exec")
    return lambda: exec(compiled, {})


# --- measurement


def sample(fn: Callable[[], Any]) -> float:
    if isinstance(fn, InnerTimed):
        return fn()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": statistics.median(xs), "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))], "n": len(xs)}


def measure_case(case: str, runners: dict[str, Callable[[], Any]], rounds: int) -> dict[str, dict[str, float]]:
    for name, fn in runners.items():  # warm-up, and check every engine computes the same value
        value = fn()
        if not name.startswith("floor") and not isinstance(fn, InnerTimed) and value != EXPECTED[case]:
            raise SystemExit(f"{name} computed {value!r} for {case}, expected {EXPECTED[case]!r}")
    samples: dict[str, list[float]] = {name: [] for name in runners}
    intervals: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            CALL_STAMPS.clear()
            samples[name].append(sample(fn))
            intervals[name].extend(b - a for a, b in zip(CALL_STAMPS, CALL_STAMPS[1:], strict=False))
    out = {name: stats(xs) for name, xs in samples.items()}
    for name, xs in intervals.items():
        if xs:
            out[name]["call_p50"] = statistics.median(xs)
            out[name]["call_p90"] = sorted(xs)[int(0.9 * len(xs))]
    return out


MEMORY_PROGRAM = "xs = list(range(1_000_000))\n"
HWM = "int(__import__('re').search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"


def vm_hwm_kib(pid: str = "self") -> int:
    """Peak RSS of a process since its exec (ru_maxrss would include the
    RSS of the parent it was forked from)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def helpers_pss_kib() -> int:
    """Proportional set size of this process's live descendants (a zygote and
    its pool, a worker pool): what the engine keeps running between runs."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    total = 0
    for pid in found:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def memory_child(engine: str) -> None:
    """Runs in a fresh process: one run of MEMORY_PROGRAM; prints the peak
    RSS of this (host) process and of the process that ran the program, and
    the PSS of the helper processes alive after the run."""
    run_kib = 0
    helpers = 0
    if engine.startswith("pycage"):
        with pycage.Runtime(isolation=engine.split(":")[1]) as rt:
            r = rt.run(MEMORY_PROGRAM + "try:\n    return " + HWM + "\nexcept OSError:\n    return 0")
            run_kib = r.unwrap()
            time.sleep(0.5)  # the run's process is reaped and the pool refilled
            helpers = helpers_pss_kib()
    elif engine == "monty":
        import pydantic_monty

        with pydantic_monty.Monty() as pool:
            with pool.checkout() as s:
                s.feed_run(MEMORY_PROGRAM + "len(xs)")
                run_kib = vm_hwm_kib(str(s.worker_pid))
            time.sleep(0.5)
            helpers = helpers_pss_kib()
    elif engine == "smolagents":
        from smolagents.local_python_executor import LocalPythonExecutor

        ex = LocalPythonExecutor([])
        ex.send_tools({})
        ex(MEMORY_PROGRAM + "len(xs)")
    elif engine == "cpython":
        exec(MEMORY_PROGRAM, {})
    print(json.dumps({"host_kib": vm_hwm_kib(), "run_kib": run_kib, "helpers_pss_kib": helpers}))


def measure_memory(engines: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for engine in engines:
        r = subprocess.run(
            [sys.executable, __file__, "--memory-child", engine], capture_output=True, text=True, check=True
        )
        out[engine] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


LATENCY_GAP = 0.02
LATENCY_BLOCK = 50


def host_cpu() -> float:
    """CPU seconds this process has used (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def import_baseline(path: str) -> Any:
    """The ``pycage`` package under ``path``, imported as ``pycage_baseline``
    (its native module keeps its own tokio runtime and statics)."""
    import importlib.util

    init = os.path.join(path, "pycage", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "pycage_baseline", init, submodule_search_locations=[os.path.dirname(init)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline: no pycage package under {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pycage_baseline"] = module
    spec.loader.exec_module(module)
    return module


def latency_rows(pycages: list[Pycage], monty: Monty, baseline: Any = None) -> dict[str, Callable[[], Any]]:
    rows: dict[str, Callable[[], Any]] = {}
    for p in pycages:
        if p.spawn != "zygote":
            continue
        if baseline is not None:
            old = baseline.Runtime(isolation=p.rt.config["isolation"])
            rows[f"baseline {p.name}"] = lambda old=old: old.run("return 1 + 1").unwrap()
        rt = p.rt
        rows[p.name] = lambda rt=rt: rt.run("return 1 + 1").unwrap()
        # The floor: the same run driven from Rust, timed by Rust.
        rows[f"floor: {p.name}, driven from Rust"] = InnerTimed(lambda rt=rt: rt._native._bench_run("return 1 + 1"))
    rows[monty.name] = lambda: monty.feed("1 + 1")
    return rows


def measure_latency(rows: dict[str, Callable[[], Any]], rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    for fn in rows.values():  # warm-up
        for _ in range(3):
            fn()
    spaced: dict[str, list[float]] = {name: [] for name in rows}
    # A fresh order each round (seeded, so reruns repeat it): in a fixed
    # order a row always follows the same one, and follows it by only 20 ms,
    # while that row's pool still refills (a sandboxed refill is ~15 ms of
    # CPU). The row after a sandboxed one then paid for it every time.
    order = random.Random(19)
    for _ in range(rounds):
        names = list(rows)
        order.shuffle(names)
        for name in names:
            time.sleep(LATENCY_GAP)
            spaced[name].append(sample(rows[name]))
    closed: dict[str, list[float]] = {name: [] for name in rows}
    cpu: dict[str, float] = dict.fromkeys(rows, 0.0)
    for _ in range(max(1, rounds // LATENCY_BLOCK)):
        for name, fn in rows.items():
            time.sleep(0.2)  # the previous block's refills and reaps
            before = host_cpu()
            closed[name].extend(sample(fn) for _ in range(LATENCY_BLOCK))
            cpu[name] += host_cpu() - before
    out: dict[str, dict[str, dict[str, float]]] = {"spaced": {}, "closed loop": {}}
    for pattern, samples in (("spaced", spaced), ("closed loop", closed)):
        for name, xs in samples.items():
            xs = sorted(xs)
            out[pattern][name] = {
                "p50": statistics.median(xs),
                "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))],
                "n": len(xs),
            }
            if pattern == "closed loop":
                out[pattern][name]["mean"] = statistics.fmean(xs)
                out[pattern][name]["host_cpu"] = cpu[name] / len(xs)
    return out


def report_latency(latency: dict[str, dict[str, dict[str, float]]]) -> None:
    print("### latency: the trivial run, spaced (20 ms apart) and in a closed loop\n")
    print("Host CPU: this process's CPU per run over the closed-loop blocks (the")
    print("package's own path and the host side of the run; not the zygote, the")
    print("run's process or Monty's worker). A floor row is the same pycage run")
    print("driven from Rust in this process, timed by Rust. In a closed loop the")
    print("mean is the time a run takes at the rate runs are made (where the")
    print("children come slower than runs, a p50 says only how they queue).\n")
    print("| pattern | row | p50 | p99 | mean | / monty p50 | host CPU per run |")
    print("|---|---|---|---|---|---|---|")
    for pattern, rows in latency.items():
        monty = rows.get(Monty.name, {}).get("p50")
        for name, s in rows.items():
            ratio = f"{s['p50'] / monty:.2f}" if monty else "—"
            cpu = f"{ms(s['host_cpu'])}" if "host_cpu" in s else ""
            mean = ms(s["mean"]) if "mean" in s else ""
            print(f"| {pattern} | {name} | {ms(s['p50'])} | {ms(s['p99'])} | {mean} | {ratio} | {cpu} |")
    print()


def ms(x: float) -> str:
    return f"{x * 1e3:.3f}" if x < 0.01 else f"{x * 1e3:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=float, default=1.0, help="scale the number of samples")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--no-sandbox", action="store_true", help="skip pycage's sandbox isolation (needs root)")
    ap.add_argument("--latency-only", action="store_true", help="only the latency section (spaced, closed loop)")
    ap.add_argument("--baseline", help="latency rows of another build of the package too (pip install --target DIR)")
    ap.add_argument("--cases", help="comma-separated cases to measure (default: all), e.g. session_cell")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return

    def rounds(n: int) -> int:
        return max(3, int(n * args.rounds))

    pycages = [Pycage("process")] + ([] if args.no_sandbox else [Pycage("sandbox")]) + [Pycage("process", "exec")]
    monty = Monty()
    print(f"measuring latency ({rounds(200)} rounds)...", file=sys.stderr, flush=True)
    baseline = import_baseline(args.baseline) if args.baseline else None
    latency = measure_latency(latency_rows(pycages, monty, baseline), rounds(200))
    if args.latency_only:
        for e in [*pycages, monty]:
            e.close()
        print(f"Python {platform.python_version()}; times in ms.\n")
        report_latency(latency)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"python": platform.python_version(), "latency": latency}, f, indent=1)
        return
    monty_async = AsyncMontyWarm()
    smol = Smolagents()
    engines = [*pycages, monty, smol]
    pipe = PipeEcho()
    results: dict[str, Any] = {"python": platform.python_version(), "cases": {}, "latency": latency}

    plan = [
        ("trivial", 40),
        ("session_cell", 200),
        ("calls100", 20),
        ("gather1000", 10),
        ("loop_top", 6),
        ("loop_fn", 6),
    ]
    if args.cases:
        plan = [(case, n) for case, n in plan if case in args.cases.split(",")]
    for case, n in plan:
        runners: dict[str, Callable[[], Any]] = {}
        for e in engines:
            fn = e.case(case)
            if case == "gather1000" and e is monty:
                fn = monty_async.gather_case()
            if fn is not None:
                runners[e.name] = fn
        if case == "trivial":
            runners["floor: python -I -c pass"] = floor_python_start()
        if case == "calls100":
            runners["floor: 100 pipe round trips"] = lambda: pipe.round_trips(100)
        if case == "session_cell":
            runners["floor: 1 pipe round trip"] = lambda: pipe.round_trips(1)
        if case in ("loop_top", "loop_fn"):
            code = TOP_LOOP if case == "loop_top" else FN_LOOP + "f()\n"
            runners["floor: host CPython exec"] = floor_exec(code)
            runners["pycage (process, zygote): the loop alone, timed in the child"] = pycages[0].inner_loop(case)
        if case in ("loop_top", "loop_fn") and smol.name in runners:
            # One sample first: the AST interpreter may take many seconds.
            if sample(runners[smol.name]) > 20:
                del runners[smol.name]
        print(f"measuring {case} ({rounds(n)} rounds, {len(runners)} rows)...", file=sys.stderr, flush=True)
        results["cases"][case] = measure_case(case, runners, rounds(n))

    for e in engines:
        e.close()
    monty_async.close()
    pipe.close()

    mem_engines = ["none", "cpython", "pycage:process"] + ([] if args.no_sandbox else ["pycage:sandbox"])
    mem_engines += ["monty", "smolagents"]
    results["memory"] = {} if args.cases else measure_memory(mem_engines)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def report(results: dict[str, Any]) -> None:
    cases = results["cases"]
    print(f"Python {results['python']}; times in ms (p50 / p90 of interleaved samples).\n")
    for case, rows in cases.items():
        monty = rows.get("pydantic-monty", {}).get("p50")
        print(f"### {case}\n")
        print("| row | p50 | p90 | / monty p50 |")
        print("|---|---|---|---|")
        for name, s in rows.items():
            ratio = f"{s['p50'] / monty:.2f}" if monty else "—"
            print(f"| {name} | {ms(s['p50'])} | {ms(s['p90'])} | {ratio} |")
        print()
    report_latency(results["latency"])
    if "calls100" in cases:
        report_round_trip(cases["calls100"])
    if results["memory"]:
        report_memory(results["memory"])


def report_round_trip(rows: dict[str, Any]) -> None:
    print("### one call round trip (host -> program -> host), in µs\n")
    print("The interval between two consecutive calls of the host function in calls100's")
    print("sequential loop (all intervals of all samples); the floor is one JSON line")
    print("echoed by a Python child over a pipe.\n")
    print("| row | p50 | p90 | / monty p50 | / pipe floor p50 |")
    print("|---|---|---|---|---|")
    m = rows.get("pydantic-monty", {}).get("call_p50")
    f = rows.get("floor: 100 pipe round trips", {}).get("call_p50")
    for name, r in rows.items():
        if "call_p50" in r:
            vs_m = f"{r['call_p50'] / m:.2f}" if m else "—"
            vs_f = f"{r['call_p50'] / f:.2f}" if f else "—"
            print(f"| {name} | {r['call_p50'] * 1e6:.1f} | {r['call_p90'] * 1e6:.1f} | {vs_m} | {vs_f} |")
    print()


def report_memory(memory: dict[str, Any]) -> None:
    print("### peak RSS (VmHWM) running list(range(1_000_000)) once from a fresh process, in MiB\n")
    print("| engine | host process | process that ran the program | helpers alive after the run (PSS) |")
    print("|---|---|---|---|")
    for name, r in memory.items():
        h, c, k = r["host_kib"] / 1024, r["run_kib"] / 1024, r["helpers_pss_kib"] / 1024
        if name == "pycage:sandbox" and c == 0:  # a sandboxed run has no /proc to read its peak from
            print(f"| {name} | {h:.1f} | n/a (no /proc in the sandbox) | {k:.1f} |")
        else:
            print(f"| {name} | {h:.1f} | {c:.1f} | {k:.1f} |")


if __name__ == "__main__":
    main()
