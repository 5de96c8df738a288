"""Trivial runs back to back from one thread, in blocks after a pause: where
a closed loop's tail comes from.

Each block starts with a full pool (after ``--pause-ms``) and makes
``--block`` runs of ``Runtime.run("return 1 + 1")`` back to back, as the closed
loop of ``head_to_head.py`` does. Prints the first blocks run by run (a
sandboxed pool of four shows every fifth run waiting for the refills
queued ahead of its own child), then p50, p90, p99 and the mean over all
blocks. The mean is the figure a loop's throughput sets; the others say how
the wait is shared among the runs.

    python benchmarks/closed_loop_blocks.py --isolation sandbox --python /usr/bin/python3
"""

import argparse
import statistics
import time

import pycage


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="sandbox", help="process or sandbox")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block", type=int, default=50, help="runs per block")
    ap.add_argument("--pause-ms", type=float, default=200.0, help="pause before each block")
    ap.add_argument("--show", type=int, default=3, help="blocks printed run by run")
    ap.add_argument("--python", default=None, help="the runs' interpreter")
    args = ap.parse_args()
    options = {"python": args.python} if args.python else {}
    blocks = []
    with pycage.Runtime(isolation=args.isolation, **options) as rt:
        rt.run("return 1 + 1")
        for _ in range(args.blocks):
            time.sleep(args.pause_ms / 1000)
            took = []
            for _ in range(args.block):
                start = time.perf_counter()
                result = rt.run("return 1 + 1")
                took.append((time.perf_counter() - start) * 1e3)
                assert result.value == 2, result
            blocks.append(took)
    for took in blocks[: args.show]:
        print(" ".join(f"{ms:4.1f}" for ms in took))
    every = sorted(ms for took in blocks for ms in took)

    def at(q):
        return every[min(len(every) - 1, int(q * len(every)))]

    print(
        f"{args.isolation}: {len(every)} runs in {args.blocks} blocks of {args.block}; "
        f"p50 {statistics.median(every):.2f} ms, p90 {at(0.9):.2f} ms, p99 {at(0.99):.2f} ms, "
        f"mean {statistics.fmean(every):.2f} ms"
    )


if __name__ == "__main__":
    main()
