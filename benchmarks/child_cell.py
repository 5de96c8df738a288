"""A session child's trivial cell without the host: where its time goes.

Starts the child (``pycage.bootstrap`` from this clone's ``python/``, or
``--child-root``) on one end of a socketpair as its fd 3, boots it as a
session, and sends ``x = x + 1; x`` cells from this script, one at a time,
back to back or ``--gap-ms`` apart. Prints the p50/p90 of a cell as this
script sees it and the child's CPU per cell (``/proc/<pid>/schedstat``,
exact). With ``--steps`` the child times its own steps (compile, run,
encode, send, ...; medians) and prints them on stderr.

Cells that come apart run from cold caches: on a 2-vCPU VM a cell 20 ms
after the last one took about four times the child CPU of one back to
back (docs/perf-log.md). Compare two trees of the child, alternating:

    for i in 1 2 3; do
      python3 benchmarks/child_cell.py --child-root /tmp/base/python --gap-ms 20
      python3 benchmarks/child_cell.py --gap-ms 20
    done
"""

import argparse
import json
import os
import socket
import subprocess
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")

# Run in the child: wraps the steps _serve calls by name in bootstrap's
# globals, and prints their medians once `cells` cells are done.
STEPS = """
import os, sys, time
sys.path.insert(0, {root!r})
import pycage.bootstrap as b
pc = time.perf_counter_ns
acc = {{}}
def wrap(name):
    f = getattr(b, name)
    def w(*a, **k):
        t = pc()
        try:
            return f(*a, **k)
        finally:
            acc.setdefault(name, []).append(pc() - t)
    setattr(b, name, w)
for n in ("compile_for", "run_program", "outcome_frame", "start_run", "flush_figures",
          "close_outcome", "restore_signals", "send", "Budgets"):
    wrap(n)
read = b.read_frame
state = {{"n": 0, "back": None}}
def read_frame(check):
    t = pc()
    if state["back"] is not None:
        acc.setdefault("cell (not waiting)", []).append(t - state["back"])
    frame = read(check)
    state["back"] = pc()
    state["n"] += 1
    if state["n"] == {cells} + 4:  # the read after the last timed cell
        for k, v in sorted(acc.items(), key=lambda kv: -sorted(kv[1])[len(kv[1]) // 2]):
            v = sorted(v[-{cells}:])
            os.write(2, ("  %-20s %7.1f us\\n" % (k, v[len(v) // 2] / 1000)).encode())
    return frame
b.read_frame = read_frame
b.main()
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--child-root", default=ROOT, help="the directory holding the child's pycage package")
    ap.add_argument("--cells", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=0.0)
    ap.add_argument("--steps", action="store_true", help="the child times its steps (adds a little to each)")
    args = ap.parse_args()
    root = os.path.abspath(args.child_root)
    code = (
        STEPS.format(root=root, cells=args.cells)
        if args.steps
        else f"import sys; sys.path.insert(0, {root!r}); import pycage.bootstrap as b; b.main()"
    )
    ours, theirs = socket.socketpair()
    # The socket becomes the child's fd 3 in preexec_fn; fd 3 is in
    # pass_fds because the descriptors not passed are closed after it.
    child = subprocess.Popen(
        [args.python, "-I", "-c", code],
        pass_fds=(theirs.fileno(), 3),
        preexec_fn=lambda: os.dup2(theirs.fileno(), 3),
    )
    theirs.close()
    lines = ours.makefile("rb")
    boot = {
        "type": "boot",
        "cpuSeconds": 0,
        "addressSpaceBytes": 0,
        "maxLogBytes": 1 << 20,
        "maxValueBytes": 1 << 20,
        "maxDisplayBytes": 1 << 20,
        "namespaces": [],
        "session": True,
    }
    ours.sendall(json.dumps(boot).encode() + b"\n")

    def cell(source):
        ours.sendall(json.dumps({"type": "run", "program": source, "cpuSeconds": 60}).encode() + b"\n")
        while True:
            line = lines.readline()
            if not line:
                raise SystemExit(f"the child exited ({child.wait()})")
            if line.startswith(b'{"type":"done"'):
                return line

    def cpu_ns():
        with open(f"/proc/{child.pid}/schedstat") as f:
            return int(f.read().split()[0])

    cell("x = 0")
    cell("x = x + 1\nx")
    lat = []
    before = cpu_ns()
    for _ in range(args.cells):
        if args.gap_ms:
            time.sleep(args.gap_ms / 1000)
        t = time.perf_counter()
        done = cell("x = x + 1\nx")
        lat.append(time.perf_counter() - t)
    cpu = (cpu_ns() - before) / args.cells
    if not done.startswith(b'{"type":"done","value":'):
        raise SystemExit(f"unexpected outcome: {done!r}")
    # One more cell: reading its frame, a --steps child reports on stderr.
    cell("x")
    lines.close()
    ours.close()
    child.wait()
    lat.sort()
    n = len(lat)
    print(
        f"{root}: gap {args.gap_ms:g} ms  cell p50 {lat[n // 2] * 1e6:.1f} us  "
        f"p90 {lat[n * 9 // 10] * 1e6:.1f} us  child CPU per cell {cpu / 1000:.1f} us",
        flush=True,
    )


if __name__ == "__main__":
    main()
