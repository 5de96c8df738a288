"""A warm session's trivial cell, through the Python package.

One ``Runtime(isolation=...).session()``, ``x = 0``, then ``--cells`` cells
``x = x + 1; x`` spaced ``--gap-ms`` apart (an agent's cells come apart, so
the session's background work between them is not in the figure). Prints
p50 and p90 per isolation, and the host's CPU per cell (``RUSAGE_SELF``:
the package, the runtime's threads, the session's samples of its
processes; ``--gap-ms 0`` for cells back to back; ``--native`` for the
package's native call without ``Session.run``'s wrapper, the loop profiled
in docs/perf-log.md). Run it with another build first on
``PYTHONPATH`` (``pip install --no-deps --target DIR .`` at another commit)
for a before/after:

    for i in 1 2 3; do
      PYTHONPATH=/tmp/base-pkg python benchmarks/session_cells.py
      python benchmarks/session_cells.py
    done
"""

import argparse
import resource
import time

import pycage


def cells(isolation, n, gap, python=None, native=False):
    rt = pycage.Runtime(isolation=isolation, python=python)
    session = rt.session()
    session.run("x = 0").unwrap()

    def run():
        if native:
            # The package's native call alone (no `Session.run` wrapper, no
            # `Result`): its parts, whose fourth is the error's kind.
            parts = session._native.run("x = x + 1\nx", None, True)
            assert parts[3] is None, parts
        else:
            session.run("x = x + 1\nx").unwrap()

    lat = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(n):
        t = time.perf_counter()
        run()
        lat.append(time.perf_counter() - t)
        if gap:
            time.sleep(gap)
    after = resource.getrusage(resource.RUSAGE_SELF)
    rt.close()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    lat.sort()
    return lat[n // 2], lat[int(n * 0.9)], cpu / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="process,sandbox", help="comma-separated: process, sandbox")
    ap.add_argument("--cells", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--python", help="the session's interpreter (default: python3 on PATH)")
    ap.add_argument("--native", action="store_true", help="call the native session directly (the profile's loop)")
    args = ap.parse_args()
    print(f"pycage from {pycage.__file__}")
    for isolation in args.isolation.split(","):
        p50, p90, cpu = cells(isolation, args.cells, args.gap_ms / 1000, args.python, args.native)
        print(f"{isolation:<8} cell p50 {p50 * 1e3:.3f} ms  p90 {p90 * 1e3:.3f} ms  host CPU {cpu * 1e6:.0f} us")


if __name__ == "__main__":
    main()
