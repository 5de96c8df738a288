"""What watching runs and sessions costs the host, through the Python package.

The runtime samples a run's processes every 0.1 s while it runs, and a
session's processes every 0.5 s between its runs (CPU, memory, kernel
objects: ``pycage_runtime::watchdog``). That is host CPU no run asked for,
and it grows with the sessions a host keeps open and the processes a run
starts. Two measurements per isolation, the host's CPU (``RUSAGE_SELF``:
the package and the runtime's threads) divided by the wall time:

- ``--sessions`` idle sessions (one cell each, then ``--seconds`` of
  nothing);
- one run that forks ``--children`` processes which sleep, for
  ``--seconds``.

Run it with another build first on ``PYTHONPATH`` for a before/after:

    PYTHONPATH=/tmp/base-pkg python benchmarks/watchdog_cost.py
    python benchmarks/watchdog_cost.py
"""

import argparse
import resource
import time

import pycage


def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def idle_sessions(isolation, count, seconds):
    rt = pycage.Runtime(isolation=isolation)
    sessions = [rt.session() for _ in range(count)]
    for s in sessions:
        s.run("x = 1").unwrap()
    time.sleep(1)
    c0, t0 = _cpu(), time.monotonic()
    time.sleep(seconds)
    cpu, wall = _cpu() - c0, time.monotonic() - t0
    rt.close()
    return cpu / wall


def many_processes(isolation, children, seconds):
    rt = pycage.Runtime(isolation=isolation)
    rt.run("1").unwrap()
    program = f"""
import os, time
kids = []
for _ in range({children}):
    pid = os.fork()
    if pid == 0:
        time.sleep({seconds} + 5)
        os._exit(0)
    kids.append(pid)
time.sleep({seconds})
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
return len(kids)
"""
    c0, t0 = _cpu(), time.monotonic()
    result = rt.run(program)
    cpu, wall = _cpu() - c0, time.monotonic() - t0
    rt.close()
    if result.value != children:
        raise SystemExit(f"the run failed: {result.error}")
    return cpu / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="sandbox,process", help="comma-separated: sandbox, process")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--children", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    print(f"pycage from {pycage.__file__}")
    for isolation in args.isolation.split(","):
        idle = idle_sessions(isolation, args.sessions, args.seconds)
        busy = many_processes(isolation, args.children, args.seconds)
        print(
            f"{isolation:<8} {args.sessions} idle sessions: host CPU {idle * 1e3:5.1f} ms/s"
            f"   a run of {args.children + 1} processes: host CPU {busy * 1e3:5.1f} ms/s"
        )


if __name__ == "__main__":
    main()
