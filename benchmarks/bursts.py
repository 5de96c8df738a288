"""Runs in bursts: N runs at once from N threads, then a pause, many times.

An agent that fans out a few tool-using programs at a time drains the pool
in one go, and the refill then decides what the next burst finds: warm
children, cold ones, or none. Each run awaits once (``asyncio.sleep(0)``),
so a cold child pays for the event loop a warm one set up ahead. Prints
p50, p90, p99 and the mean over every run.

    python benchmarks/bursts.py --isolation sandbox --bursts 60 --size 5 --gap-ms 100
"""

import argparse
import statistics
import threading
import time

import pycage

PROGRAM = "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n    return 1\nreturn await f()"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="sandbox", help="process or sandbox")
    ap.add_argument("--bursts", type=int, default=60)
    ap.add_argument("--size", type=int, default=5, help="runs at once in a burst")
    ap.add_argument("--gap-ms", type=float, default=100.0, help="pause after each burst")
    args = ap.parse_args()
    rt = pycage.Runtime(isolation=args.isolation)
    rt.run("return 1")
    time.sleep(0.5)
    times, failures = [], []
    lock = threading.Lock()

    def one():
        start = time.perf_counter()
        result = rt.run(PROGRAM)
        took = (time.perf_counter() - start) * 1000
        with lock:
            (times if result.error is None else failures).append(took if result.error is None else result.error)

    for _ in range(args.bursts):
        threads = [threading.Thread(target=one) for _ in range(args.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(args.gap_ms / 1000)
    rt.close()
    if failures:
        raise SystemExit(f"{len(failures)} runs failed, the first: {failures[0]}")
    q = statistics.quantiles(times, n=100)
    print(
        f"{args.isolation}: {len(times)} runs in bursts of {args.size}, {args.gap_ms:g} ms apart; "
        f"p50 {q[49]:.2f} ms, p90 {q[89]:.2f} ms, p99 {q[98]:.2f} ms, mean {statistics.mean(times):.2f} ms"
    )


if __name__ == "__main__":
    main()
