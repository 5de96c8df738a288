"""What a durable run's resume costs (docs/durable.md): a program that makes
N binding calls and then one that needs approval, run fresh to its
suspension, and resumed from its journal (the N calls answered from the
journal, the approval answered, the run finished); beside the floors of a
trivial run, pooled (what a fresh run gets) and exec'd (what a resume
gets: it needs an interpreter with the journal's hash seed). Medians of
``--runs``, one at a time.

    python benchmarks/resume.py --isolation process --calls 0,10,100
"""

import argparse
import json
import statistics
import time

import pycage

KEY = b"benchmark journal key, not a secret"

PROGRAM = """
total = 0
for i in range({n}):
    total += await tools.work(i)
return [total, await tools.pay(total)]
"""


def work(i):
    return i


@pycage.approval
def pay(total):
    raise AssertionError("never run")


BINDINGS = {"tools": {"work": work, "pay": pay}}


def median_ms(f, runs):
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="process", help="process or sandbox")
    ap.add_argument("--calls", default="0,10,100", help="recorded calls before the approval, comma-separated")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args()
    rows = []
    with pycage.Runtime(isolation=args.isolation, journal_key=KEY) as rt:
        with pycage.Runtime(isolation=args.isolation, spawn="exec") as exec_rt:
            for _ in range(5):
                rt.run("return 1")
                exec_rt.run("return 1")
            floor = median_ms(lambda: rt.run("return 1"), args.runs)
            exec_floor = median_ms(lambda: exec_rt.run("return 1"), args.runs)
        for n in (int(x) for x in args.calls.split(",")):
            program = PROGRAM.format(n=n)
            journal = rt.run(program, BINDINGS).suspended.journal

            def fresh(program=program):
                assert rt.run(program, BINDINGS).suspended is not None

            def resume(journal=journal, n=n):
                r = rt.resume(journal, reply="ok", bindings=BINDINGS)
                assert r.value == [n * (n - 1) // 2, "ok"], r

            rows.append(
                {
                    "calls": n,
                    "journal_bytes": len(journal),
                    "fresh_ms": median_ms(fresh, args.runs),
                    "resume_ms": median_ms(resume, args.runs),
                }
            )
    if args.json:
        print(json.dumps({"isolation": args.isolation, "floor_ms": floor, "exec_floor_ms": exec_floor, "rows": rows}))
        return
    print(f"{args.isolation}: trivial run {floor:.1f} ms pooled, {exec_floor:.1f} ms exec'd (medians of {args.runs})")
    print("| recorded calls | journal | fresh run to the suspension | resume to the end | resume / exec'd floor |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['calls']} | {r['journal_bytes']} B | {r['fresh_ms']:.1f} ms | {r['resume_ms']:.1f} ms "
            f"| {r['resume_ms'] / exec_floor:.2f}x |"
        )


if __name__ == "__main__":
    main()
