"""Where a trivial run's CPU goes, through the Python package.

Each configuration (isolation x host size) runs in a fresh process of its
own: a ``pycage.Runtime`` with default settings, optionally beside a host
heap of ``--host-mib`` MiB of live Python objects (an agent framework's
process is rarely small). It measures:

- spaced latency: trivial runs 20 ms apart (p50, p99);
- a closed loop: ``--concurrency`` threads running trivial runs back to
  back for ``--seconds``; runs per second and, per run, the CPU of:
  the host process (``RUSAGE_SELF``), the zygote itself, the zygote's
  reaped children (the run's processes: their CPU and minor page faults,
  from the zygote's ``/proc/<pid>/stat``), and the sandbox shells: the
  shell helper's own CPU and faults and its reaped children's (the shells), plus the
  host's reaped children (shells forked by the host, for a build without
  the helper);
- the whole machine's busy and idle CPU per run over the loop
  (``/proc/stat``): what the kernel's own threads do for a run (a
  namespace torn down in a kworker) is in no process's figure;
- floors in the same invocation: the CPU and wall time of a bare
  ``python3 -I -c pass``, the interpreter start a pooled child avoids; and
  the CPU of a fork and an immediate ``_exit`` of ``python3 -I``, bare and
  with the zygote's imports, which every fresh process per run pays.

The zygote is found as this process's child whose command line names
``pycage.zygote``, the shell helper as the one whose command line calls
``_serve_shell_helper`` (an interpreter) or names ``shell-helper`` (the
program the package embeds): children this benchmark's runtime started. Its run budget
is lifted so one zygote serves the loop; should it still be replaced (its
age budget), the row shows no zygote figures.

    python benchmarks/cpu_per_run.py --host-mib 0,300
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def _zygote_pid():
    return _child_pid(b"pycage.zygote")


def _helper_pid():
    return _child_pid(b"_serve_shell_helper") or _child_pid(b"shell-helper")


def _child_pid(needle):
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == me and needle in cmdline:
            return int(entry)
    return None


def _proc_stat(pid):
    """A process's (own CPU s, own minor faults, reaped children's CPU s, their minor faults)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command: state ppid pgrp session tty tpgid flags minflt
    # cminflt majflt cmajflt utime stime cutime cstime.
    minflt, cminflt = int(fields[7]), int(fields[8])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICK, minflt, (cutime + cstime) / TICK, cminflt


def _machine():
    """The whole machine's busy and idle CPU seconds so far (``/proc/stat``,
    all cores): the kernel's own threads (a namespace torn down in a
    kworker, RCU) count here and in no process above."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / TICK, (idle + iowait) / TICK


def _cpu(usage):
    return usage.ru_utime + usage.ru_stime


def one(isolation, host_mib, seconds, concurrency, spaced, python=None):
    """Measure one configuration in this process; returns a dict."""
    import pycage

    # Live objects the host keeps: bytearrays and small strings, as a
    # framework's heap holds both.
    ballast = [bytearray(1000) for _ in range(host_mib * 700)]
    ballast.append([str(i) * 3 for i in range(host_mib * 5000)])
    # One zygote serves the whole loop (by default one is replaced after
    # 1,000 runs, and a replaced zygote's figures leave with it).
    rt = pycage.Runtime(isolation=isolation, zygote_max_runs=1_000_000, python=python)
    rt.run("return 1")
    time.sleep(0.5)
    lat = []
    for _ in range(spaced):
        t = time.perf_counter()
        r = rt.run("return 1")
        lat.append(time.perf_counter() - t)
        assert r.value == 1, r
        time.sleep(0.02)
    zygote = _zygote_pid()
    z0 = _proc_stat(zygote) if zygote else None
    helper = _helper_pid()
    h0 = _proc_stat(helper) if helper else None
    s0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    m0 = _machine()
    done = [0]
    errors = []
    stop = time.monotonic() + seconds

    def loop():
        while time.monotonic() < stop:
            r = rt.run("return 1")
            if r.value != 1:
                errors.append(repr(r.error))
            done[0] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    m1 = _machine()
    s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    same_zygote = zygote is not None and _zygote_pid() == zygote
    z1 = _proc_stat(zygote) if same_zygote else None
    same_helper = helper is not None and _helper_pid() == helper
    h1 = _proc_stat(helper) if same_helper else None
    helper_cpu = (h1[0] + h1[2] - h0[0] - h0[2]) if h1 else 0.0
    helper_faults = (h1[1] + h1[3] - h0[1] - h0[3]) if h1 else None
    helper_rss = None
    if same_helper:
        with open(f"/proc/{helper}/statm") as f:
            helper_rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    n = max(done[0], 1)
    with open("/proc/self/statm") as f:
        rss_mib = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    out = {
        "isolation": isolation,
        "hostMib": host_mib,
        "hostRssMib": round(rss_mib),
        "spacedP50Ms": statistics.median(lat) * 1e3 if lat else None,
        "spacedP99Ms": sorted(lat)[int(len(lat) * 0.99)] * 1e3 if lat else None,
        "runsPerSecond": done[0] / elapsed,
        "hostCpuMs": (_cpu(s1) - _cpu(s0)) / n * 1e3,
        "shellCpuMs": (_cpu(c1) - _cpu(c0) + helper_cpu) / n * 1e3,
        "shellFaults": helper_faults / n if helper_faults is not None else None,
        "helperRssMib": helper_rss,
        "zygoteCpuMs": (z1[0] - z0[0]) / n * 1e3 if z1 else None,
        "zygoteFaults": (z1[1] - z0[1]) / n if z1 else None,
        "childCpuMs": (z1[2] - z0[2]) / n * 1e3 if z1 else None,
        "childFaults": (z1[3] - z0[3]) / n if z1 else None,
        "machineBusyMs": (m1[0] - m0[0]) / n * 1e3,
        "machineIdleMs": (m1[1] - m0[1]) / n * 1e3,
        "errors": errors[:3],
    }
    rt.close()
    return out


def floor(python, samples=20):
    """CPU and wall time of a bare interpreter start (medians)."""
    cpu, wall = [], []
    for _ in range(samples):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([python, "-I", "-c", "pass"], check=True, env={})
        wall.append(time.perf_counter() - t)
        cpu.append(_cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(before))
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


#: The fork floor's child: fork and ``_exit`` at once, ``argv[1]`` times,
#: after importing what the zygote imports when ``argv[2]`` names the
#: child's source directory; prints the parent's and the children's CPU
#: per fork in ms.
_FORK_FLOOR = """
import gc, os, resource, sys
if len(sys.argv) > 2:
    sys.path.insert(0, sys.argv[2])
    import pycage.zygote
gc.collect()
gc.freeze()
n = int(sys.argv[1])
cpu = lambda who: (lambda u: u.ru_utime + u.ru_stime)(resource.getrusage(who))
s0, c0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
s1, c1 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
print((s1 - s0) / n * 1e3, (c1 - c0) / n * 1e3)
"""


def fork_floor(python, child_dir=None, forks=1000):
    """(parent, child) CPU in ms of a fork and an immediate ``_exit`` of
    ``python -I``, bare or with the zygote's imports: what a process per
    run costs before it runs anything."""
    cmd = [python, "-I", "-c", _FORK_FLOOR, str(forks)] + ([child_dir] if child_dir else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={}).stdout.split()
    return float(out[0]), float(out[1])


def _fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="process,sandbox", help="comma-separated: process, sandbox")
    ap.add_argument("--host-mib", default="0", help="comma-separated host heap sizes to add, in MiB")
    ap.add_argument("--seconds", type=float, default=8.0, help="closed-loop length per configuration")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--spaced", type=int, default=100, help="spaced samples per configuration")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every configuration, interleaved")
    ap.add_argument("--python", help="the runs' interpreter (default: python3 on PATH, as pycage finds it)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per configuration")
    ap.add_argument("--one", nargs=2, metavar=("ISOLATION", "MIB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        row = one(args.one[0], int(args.one[1]), args.seconds, args.concurrency, args.spaced, args.python)
        print(json.dumps(row))
        return
    sizes = [int(m) for m in args.host_mib.split(",")]
    configs = [(i, m) for _ in range(args.rounds) for m in sizes for i in args.isolation.split(",")]
    rows = []
    for isolation, mib in configs:
        cmd = [sys.executable, __file__, "--one", isolation, str(mib)]
        cmd += ["--seconds", str(args.seconds), "--concurrency", str(args.concurrency), "--spaced", str(args.spaced)]
        cmd += ["--python", args.python] if args.python else []
        row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    floor_cpu, floor_wall = floor(sys.executable)
    python3 = args.python or shutil.which("python3") or sys.executable
    bare_fork = fork_floor(python3)
    zygote_fork = fork_floor(python3, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    if args.json:
        print(
            json.dumps(
                {
                    "floorPythonStartCpuMs": floor_cpu,
                    "floorPythonStartWallMs": floor_wall,
                    "floorForkCpuMs": bare_fork,
                    "floorZygoteForkCpuMs": zygote_fork,
                }
            )
        )
        return
    print(f"floor: `{sys.executable} -I -c pass` CPU {floor_cpu:.2f} ms, wall {floor_wall:.2f} ms (medians)")
    print(
        f"fork floor: fork + _exit of `{python3} -I`: {sum(bare_fork):.2f} ms CPU"
        f" (parent {bare_fork[0]:.2f}, child {bare_fork[1]:.2f});"
        f" with the zygote's imports: {sum(zygote_fork):.2f} ms"
        f" (parent {zygote_fork[0]:.2f}, child {zygote_fork[1]:.2f})"
    )
    print(f"closed loop at concurrency {args.concurrency} for {args.seconds:g} s; CPU and faults per run")
    head = (
        "isolation  host RSS  helper RSS  spaced p50/p99 ms  runs/s  host CPU  shells CPU (faults)"
        "  zygote CPU (faults)"
        "  child CPU (faults)  total CPU / floor"
    )
    print(head)
    for r in rows:
        parts = [r["hostCpuMs"], r["shellCpuMs"], r["zygoteCpuMs"], r["childCpuMs"]]
        total = None if None in parts else sum(parts)
        print(
            f"{r['isolation']:<10} {r['hostRssMib']:>4} MiB  {_fmt(r.get('helperRssMib'), 0):>6} MiB"
            f"  {_fmt(r['spacedP50Ms']):>6} / {_fmt(r['spacedP99Ms']):>6}"
            f"  {r['runsPerSecond']:>6.0f}  {_fmt(r['hostCpuMs']):>5} ms"
            f"  {_fmt(r['shellCpuMs']):>7} ms ({_fmt(r.get('shellFaults'), 0):>4})"
            f"  {_fmt(r['zygoteCpuMs']):>6} ms ({_fmt(r['zygoteFaults'], 0):>4})"
            f"  {_fmt(r['childCpuMs']):>6} ms ({_fmt(r['childFaults'], 0):>5})"
            f"  {_fmt(total):>6} ms / {total / floor_cpu if total else float('nan'):.2f}"
            + (f"  errors: {r['errors']}" if r["errors"] else "")
        )
    print("the whole machine per run (/proc/stat): busy (of it, in no process above) / idle")
    for r in rows:
        parts = [r["hostCpuMs"], r["shellCpuMs"], r["zygoteCpuMs"], r["childCpuMs"]]
        other = None if None in parts else r["machineBusyMs"] - sum(parts)
        print(
            f"{r['isolation']:<10} {r['machineBusyMs']:>6.2f} ms ({_fmt(other):>5} ms) / {r['machineIdleMs']:>6.2f} ms"
        )


if __name__ == "__main__":
    main()
