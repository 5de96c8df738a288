"""pycage on Ray against its floors, in one process and one run.

Starts a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``:
a head node and one more, one CPU each, no dashboard), then measures,
interleaved round by round so a noisy neighbour hits every engine alike:

- ``local``: trivial runs (``return 1``) through a local ``pycage.Runtime``;
- ``ray actor``: a bare Ray round trip to an async actor on the other node
  (``await actor.ping.remote()``), the floor of anything done through Ray;
- ``RayRuntime``: the same trivial runs through ``pycage.ray.RayRuntime``
  over both nodes;

each at concurrency 1, 4 and 16 (that many asyncio tasks issuing one call
after another), giving throughput and p50/p99 latency; and the cost of one
binding call, local against remote (the binding runs in this driver process
and the program runs on a node): (a program making 100 sequential calls -
a trivial program) / 100, p50 of each. It also reports CPU time per call,
read from /proc (the cluster runs on this machine): of every process of the
bench (this process started them all), of the driver process alone (all its
threads, Ray's included: it bounds what one driver can push whatever the
node count), and of the CageNode actors with their runs' processes (what a
node spends per run).

Run it from a venv that has pycage (``pip install .``) and Ray
(``pip install "ray==2.60.0"``), e.g. the package test venv that
``.ci/python-package.sh`` builds::

    PATH=$PWD/target/python-package-venv/bin:$PATH \\
        target/python-package-venv/bin/python benchmarks/ray_bench.py

It prints a Markdown report; ``--json FILE`` also writes the raw samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402 - after the usage-stats switch
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

import pycage  # noqa: E402
from pycage.ray import RayRuntime  # noqa: E402

TRIVIAL = "return 1"
CALLS = "t = 0\nfor i in range(100):\n    t = await tools.add(a=t, b=i)\nreturn t"


@ray.remote(num_cpus=0)
class Echo:
    async def ping(self) -> None:
        return None


def add(a, b):
    return a + b


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds (user + system, and those of reaped children) of these
    processes and of every live descendant. This process started the whole
    cluster, so its tree holds every process of the bench: Ray's GCS,
    raylets and workers, the CageNode actors and their runs."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])
    found = set(roots)
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return sum(ticks.get(pid, 0) for pid in found) / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(call, concurrency: int, total: int) -> tuple[float, list[float], float]:
    """``total`` calls from ``concurrency`` tasks: (wall seconds, per-call
    latencies, driver CPU seconds)."""
    latencies: list[float] = []
    left = total

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return time.perf_counter() - t0, latencies, time.process_time() - cpu0


def check(result: pycage.Result, expected: Any) -> None:
    if result.value != expected:
        raise SystemExit(f"wrong result: {result}")


async def main_async(args: argparse.Namespace, local: pycage.Runtime, remote: RayRuntime, echo: Any) -> dict:
    async def local_run() -> None:
        check(await local.arun(TRIVIAL), 1)

    async def remote_run() -> None:
        check(await remote.arun(TRIVIAL), 1)

    async def bare() -> None:
        await echo.ping.remote()

    engines = {"local": local_run, "ray actor": bare, "RayRuntime": remote_run}
    for call in engines.values():  # warm every path (zygotes, pools, Ray workers)
        await drive(call, 4, 40)

    node_pids = [n["pid"] for n in remote.stats()["nodes"]]
    samples: dict[str, dict[int, dict[str, list[float]]]] = {
        name: {c: {"rate": [], "lat": [], "cpu": [], "total": [], "node_cpu": []} for c in args.concurrency}
        for name in engines
    }
    for _ in range(args.rounds):
        for c in args.concurrency:
            for name, call in engines.items():
                total0, node0 = tree_cpu([os.getpid()]), tree_cpu(node_pids)
                wall, lat, cpu = await drive(call, c, args.runs)
                s = samples[name][c]
                s["rate"].append(args.runs / wall)
                s["lat"].extend(lat)
                s["cpu"].append(cpu / args.runs)
                s["total"].append((tree_cpu([os.getpid()]) - total0) / args.runs)
                s["node_cpu"].append((tree_cpu(node_pids) - node0) / args.runs)

    bindings = {"tools": {"add": add}}
    calls: dict[str, dict[str, list[float]]] = {
        "local": {"trivial": [], "calls": []},
        "RayRuntime": {"trivial": [], "calls": []},
    }
    for _ in range(args.binding_rounds):
        for name, rt in (("local", local), ("RayRuntime", remote)):
            t0 = time.perf_counter()
            check(await rt.arun(TRIVIAL, bindings), 1)
            calls[name]["trivial"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            check(await rt.arun(CALLS, bindings), sum(range(100)))
            calls[name]["calls"].append(time.perf_counter() - t0)
    return {"throughput": samples, "binding_calls": calls}


def report(args: argparse.Namespace, data: dict) -> str:
    ms = 1000.0
    out = [
        f"Two-node Ray cluster on one machine ({os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}, Ray {ray.__version__}, isolation={args.isolation}); "
        f"{args.rounds} rounds x {args.runs} calls per cell, engines interleaved.",
        "",
        "| engine | concurrency | calls/s (median of rounds) | p50 ms | p99 ms "
        "| CPU ms per call: every process | driver process | CageNodes and their runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in args.concurrency:
        for name in ("local", "ray actor", "RayRuntime"):
            s = data["throughput"][name][c]
            out.append(
                f"| {name} | {c} | {statistics.median(s['rate']):,.0f} | {percentile(s['lat'], 0.5) * ms:.2f} | "
                f"{percentile(s['lat'], 0.99) * ms:.2f} | {statistics.median(s['total']) * ms:.2f} | "
                f"{statistics.median(s['cpu']) * ms:.2f} | "
                + (f"{statistics.median(s['node_cpu']) * ms:.2f} |" if name == "RayRuntime" else "- |")
            )
    out += ["", "| binding call | trivial run p50 ms | 100 calls run p50 ms | per call ms |", "|---|---:|---:|---:|"]
    for name, where in (("local", "local `Runtime`"), ("RayRuntime", "`RayRuntime` (remote)")):
        c = data["binding_calls"][name]
        trivial, hundred = statistics.median(c["trivial"]), statistics.median(c["calls"])
        out.append(f"| {where} | {trivial * ms:.2f} | {hundred * ms:.2f} | {(hundred - trivial) / 100 * ms:.3f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="calls per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--binding-rounds", type=int, default=15)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--isolation", choices=["process", "sandbox"], default="process")
    parser.add_argument("--json", help="write the raw samples here")
    args = parser.parse_args()

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"pycage": 1}, "include_dashboard": False},
    )
    worker = cluster.add_node(num_cpus=1, resources={"pycage": 1})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        kwargs = {"isolation": args.isolation, "python": sys.executable}
        with pycage.Runtime(**kwargs) as local, RayRuntime(resource="pycage", **kwargs) as remote:
            echo = Echo.options(scheduling_strategy=NodeAffinitySchedulingStrategy(worker.node_id, soft=False)).remote()
            data = asyncio.run(main_async(args, local, remote, echo))
            data["nodes"] = remote.stats()["nodes"]
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(report(args, data))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), **data}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
