"""What the Python package adds to a spaced trivial run.

Three timings of ``return 1 + 1``, interleaved, ``--gap-ms`` apart:

- inside Rust: ``NativeRuntime._bench_run`` times the run from its own
  ``block_on`` (what ``pycage bench`` times);
- around that call, from Python: plus the GIL's release and
  reacquisition and ``block_on``'s entry and exit;
- ``Runtime.run``: plus the request's conversion and the ``Result``.

Prints the three p50s per isolation:

    python benchmarks/package_path.py --isolation process,sandbox --runs 250
"""

import argparse
import statistics
import time

import pycage


def measure(isolation, runs, gap):
    rt = pycage.Runtime(isolation=isolation)
    try:
        rt.run("return 1").unwrap()
        inner, outer, full = [], [], []
        for _ in range(runs):
            t = time.perf_counter()
            inner.append(rt._native._bench_run("return 1 + 1"))
            outer.append(time.perf_counter() - t)
            time.sleep(gap)
            t = time.perf_counter()
            rt.run("return 1 + 1").unwrap()
            full.append(time.perf_counter() - t)
            time.sleep(gap)
    finally:
        rt.close()
    return [statistics.median(x) * 1e3 for x in (inner, outer, full)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="process,sandbox", help="comma-separated: process, sandbox")
    ap.add_argument("--runs", type=int, default=250)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    args = ap.parse_args()
    print(f"pycage from {pycage.__file__}")
    for isolation in args.isolation.split(","):
        inner, outer, full = measure(isolation, args.runs, args.gap_ms / 1e3)
        print(f"{isolation:8s} inside Rust {inner:.3f} ms  around the call {outer:.3f} ms  Runtime.run {full:.3f} ms")


if __name__ == "__main__":
    main()
