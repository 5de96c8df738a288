"""Trivial runs through the package, one at a time and ``--gap-ms`` apart,
as an agent makes them: p50 and p90 of ``Runtime.run("1 + 1")``.

For a before/after, alternate it with another build of the package on
``PYTHONPATH`` (``pip install --no-deps --target DIR .`` at another commit):

    for i in 1 2 3; do
      PYTHONPATH=/tmp/base-pkg python benchmarks/spaced.py --isolation process
      python benchmarks/spaced.py --isolation process
    done
"""

import argparse
import statistics
import time

import pycage


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="process", help="process or sandbox")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--python", default=None, help="the runs' interpreter")
    args = ap.parse_args()
    gap = args.gap_ms / 1000
    options = {"python": args.python} if args.python else {}
    with pycage.Runtime(isolation=args.isolation, **options) as rt:
        # The pool and the zygote's first children settle first.
        for _ in range(20):
            rt.run("1 + 1")
            time.sleep(gap)
        took = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = rt.run("1 + 1")
            took.append(time.perf_counter() - start)
            assert result.value == 2, result
            time.sleep(gap)
    took.sort()
    p50 = statistics.median(took) * 1e3
    p90 = took[int(len(took) * 0.9)] * 1e3
    print(f"pycage from {pycage.__file__}")
    print(f"{args.isolation}  spaced {args.gap_ms:g} ms  p50 {p50:.3f} ms  p90 {p90:.3f} ms")


if __name__ == "__main__":
    main()
