"""How long the child takes to compile a program, by the path it takes.

``pycage.script.compile_program`` compiles most programs as a head and a
tail, from their text (the split); the rest, and the reference, go through
Python's ``ast`` (``_compile_rewritten``). This times both on a few
programs, against the floor of compiling the text as it is
(``compile(source, "<program>", "exec")``, which gives no value; a
top-level ``return X`` compiled as ``X``), in this
process: back to back (warm caches), and with 5 ms between compiles (cold
caches, as in a child that waited for its run). Medians in µs:

    python3 -I -B benchmarks/child_compile.py
"""

import argparse
import ast
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from pycage import script  # noqa: E402

PROGRAMS = {
    "1 + 1": "1 + 1",
    "a session cell": "x = x + 1\nx",
    "return at the end": "xs = [1, 2, 3]\nreturn sum(xs)",
    "a 30-line program": """\
import asyncio, json

async def fetch_all(ids):
    results = await asyncio.gather(*(tools.get_user(id=i) for i in ids))
    return [r for r in results if r.get("active")]

def summarize(users):
    by_team = {}
    for u in users:
        team = u.get("team", "none")
        by_team.setdefault(team, []).append(u["name"])
    out = []
    for team, names in sorted(by_team.items()):
        out.append({"team": team, "count": len(names), "names": names[:5]})
    return out

async def main():
    ids = list(range(40))
    users = await fetch_all(ids)
    summary = summarize(users)
    total = sum(s["count"] for s in summary)
    if total == 0:
        print("no active users")
    return {"total": total, "teams": summary}

result = asyncio.run(main())
result
""",
}


def floor(source):
    return compile(source, script.PROGRAM_FILENAME, "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


#: What the floor compiles: the program, a top-level ``return X`` as ``X``.
FLOOR_TEXT = {source: re.sub(r"(?m)^return ", "", source) for source in PROGRAMS.values()}


def median_us(fn, source, n, gap):
    samples = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn(source)
        samples.append(time.perf_counter_ns() - t)
        if gap:
            time.sleep(gap)
    return statistics.median(samples) / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="compiles per row back to back (a tenth of it spaced)")
    args = ap.parse_args()
    paths = {
        "floor: compile the text": lambda source: floor(FLOOR_TEXT[source]),
        "split": script.compile_program,
        "ast rewrite": script._compile_rewritten,
    }
    print(f"Python {sys.version.split()[0]}; medians in µs (ratio to the floor)\n")
    print("| program | pattern | " + " | ".join(paths) + " |")
    print("|---|---|" + "---|" * len(paths))
    for name, source in PROGRAMS.items():
        split = script._compile_split(source) is not None
        for pattern, n, gap in (("back to back", args.n, 0), ("5 ms apart", max(50, args.n // 10), 0.005)):
            # Rows alternate within a pattern, so a noisy neighbour hits each alike.
            got = {path: [] for path in paths}
            for _ in range(5):
                for path, fn in paths.items():
                    got[path].append(median_us(fn, source, n // 5, gap))
            med = {path: statistics.median(xs) for path, xs in got.items()}
            base = med["floor: compile the text"]
            cells = [f"{med[p]:.1f} ({med[p] / base:.2f})" for p in paths]
            label = name if split else name + " (not split)"
            print(f"| {label} | {pattern} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
