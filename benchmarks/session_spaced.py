"""A warm session's trivial cell against Monty's REPL, at several spacings.

One pycage ``Runtime(isolation=...).session()`` and one pydantic-monty REPL
(``Monty().checkout()``, ``feed_run``), each with ``x = 0``; then
``x = x + 1; x`` cells, alternating the two, each cell ``--gaps-ms`` after
the one before it (0: back to back, alternating). Prints p50/p90 per gap
and engine, and pycage's ratio (``--json FILE`` also writes them, in
seconds, for ``benchmarks/report.py sessions``). Needs pydantic-monty (``benchmarks/run.sh``
makes a venv with it):

    target/bench-venv/bin/python benchmarks/session_spaced.py --gaps-ms 0,5,20

``head_to_head.py``'s ``session_cell`` row is the 0 ms pattern: alternating
with other engines, back to back. An agent's cells come seconds apart, so
both engines answer from cold caches; see docs/perf-log.md for what that costs.
"""

import argparse
import json
import time

import pydantic_monty

import pycage

CELL = "x = x + 1\nx"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isolation", default="process", choices=("process", "sandbox"))
    ap.add_argument("--gaps-ms", default="0,5,20", help="comma-separated gaps between cells")
    ap.add_argument("--cells", type=int, default=200, help="cells per engine and gap")
    ap.add_argument("--json", help="also write p50/p90 per gap and engine here (seconds)")
    args = ap.parse_args()
    rt = pycage.Runtime(isolation=args.isolation)
    session = rt.session()
    session.run("x = 0").unwrap()
    pool = pydantic_monty.Monty()
    pool.__enter__()
    checkout = pool.checkout(limits={"max_suspensions": 100_000})
    repl = checkout.__enter__()
    repl.feed_run("x = 0")
    engines = {
        f"pycage ({args.isolation})": lambda: session.run(CELL).unwrap(),
        "pydantic-monty": lambda: repl.feed_run(CELL),
    }
    report = {"isolation": args.isolation, "gaps": {}}
    try:
        for gap_ms in (float(g) for g in args.gaps_ms.split(",")):
            samples = {name: [] for name in engines}
            for _ in range(args.cells):
                for name, cell in engines.items():
                    if gap_ms:
                        time.sleep(gap_ms / 1000)
                    t = time.perf_counter()
                    cell()
                    samples[name].append(time.perf_counter() - t)
            p50 = {}
            gap = report["gaps"][f"{gap_ms:g}"] = {}
            for name, xs in samples.items():
                xs.sort()
                p50[name] = xs[len(xs) // 2]
                p90 = xs[len(xs) * 9 // 10]
                gap[name] = {"p50": p50[name], "p90": p90}
                print(f"gap {gap_ms:>4g} ms  {name:<20} p50 {p50[name] * 1e3:.3f} ms  p90 {p90 * 1e3:.3f} ms")
            ours, theirs = p50.values()
            print(f"gap {gap_ms:>4g} ms  pycage / monty p50 {ours / theirs:.2f}")
    finally:
        checkout.__exit__(None, None, None)
        pool.__exit__(None, None, None)
        rt.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
