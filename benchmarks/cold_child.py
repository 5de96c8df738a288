"""A pooled child's run path after it idled: microseconds and page faults per step.

A spaced run reaches a child that was forked from the zygote, warmed up
and then left idle in the pool. What its run costs on the critical path is
not what the same code costs in a loop: the pages the zygote shares with
it are copied on first write (a copy-on-write fault, several microseconds
on a small VM), and caches and TLB are cold after an idle gap. This
benchmark reproduces that without a host: a parent process plays the
zygote (the child modules from ``python/``, ``track_builtins``, ten
warm-ups, ``gc.freeze``), then forks ``--children`` children one at a
time; each runs ``bootstrap.warm_up()`` (as a pooled child does), sleeps
``--idle-ms``, and then times the steps of a trivial run (``1 + 1``):
decoding and checking ``boot`` and ``run``, the budgets, both ledgers, the
program's globals, compile, the run, quieting and restoring signals, the
``done`` frame. It prints the median microseconds and the mean minor page
faults (``ru_minflt``) of each step. The steps are the bootstrap's own
functions, not its loop: no socket, no wake-up.

    python benchmarks/cold_child.py --python /usr/bin/python3 --idle-ms 20
    python benchmarks/cold_child.py --idle-ms 0     # the same path, warm
"""

import argparse
import os
import subprocess
import sys

HARNESS = r"""
import gc, os, resource, statistics, sys, time
idle, children, python_dir = float(sys.argv[1]) / 1000, int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, python_dir)
from pycage import _private, bootstrap, channel, display, logs, runner, signals, _wire
pc = time.perf_counter_ns
BOOT = ('{"type":"boot","cpuSeconds":30,"addressSpaceBytes":0,"maxLogBytes":1048576,'
        '"maxValueBytes":1048576,"maxDisplayBytes":8388608,"namespaces":[]}')
RUN = '{"type":"run","program":"1 + 1"}'

def steps():
    boot = channel._host_frame(BOOT); yield "decode boot"
    _wire.check_boot(boot); yield "check boot"
    run = channel._host_frame(RUN); yield "decode run"
    _wire.check_run(run); yield "check run"
    budgets = bootstrap.Budgets(run, boot); yield "budgets"
    logs.start_ledger(budgets.max_log_bytes); yield "log ledger"
    display.start_display_ledger(budgets.max_display_bytes); yield "display ledger"
    program_globals = runner.new_program_globals({}); yield "globals"
    program = runner.compile_for(run["program"]); yield "compile"
    outcome = runner.run_program(program, program_globals); yield "run"
    state = signals.SignalState(); signals.quiet_signals(state); yield "quiet signals"
    signals.restore_signals(state); yield "restore signals"
    bootstrap.outcome_frame(outcome, budgets.max_value_bytes); yield "done frame"

_private.track_builtins()
for _ in range(10):
    bootstrap.warm_up()
gc.collect()
gc.freeze()
rows = {}
for _ in range(children):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        bootstrap.warm_up()
        if idle:
            time.sleep(idle)
        out = []
        minflt = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t, f = pc(), minflt()
        for name in steps():
            t2, f2 = pc(), minflt()
            out.append(f"{name}={(t2 - t) / 1000:.1f},{f2 - f}")
            t, f = pc(), minflt()
        os.write(w, "|".join(out).encode())
        os._exit(0)
    os.close(w)
    line = os.read(r, 65536).decode()
    os.close(r)
    os.waitpid(pid, 0)
    for item in line.split("|"):
        name, values = item.split("=")
        us, faults = values.split(",")
        rows.setdefault(name, []).append((float(us), int(faults)))
total_us = total_faults = 0.0
print(f"{'step':<16} {'us (median)':>12} {'faults (mean)':>14}")
for name, samples in rows.items():
    us = statistics.median(s[0] for s in samples)
    faults = statistics.mean(s[1] for s in samples)
    total_us += us
    total_faults += faults
    print(f"{name:<16} {us:>12.1f} {faults:>14.1f}")
print(f"{'total':<16} {total_us:>12.1f} {total_faults:>14.1f}")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter to measure (default: this one)")
    ap.add_argument("--idle-ms", type=float, default=20.0, help="how long each child idles after its warm-up")
    ap.add_argument("--children", type=int, default=30)
    args = ap.parse_args()
    python_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    # The child modules expect the protocol socket on fd 3; nothing is sent.
    null = os.open(os.devnull, os.O_RDWR)
    try:
        out = subprocess.run(
            [args.python, "-I", "-B", "-c", HARNESS, str(args.idle_ms), str(args.children), python_dir],
            pass_fds=(null,),
            preexec_fn=lambda: os.dup2(null, 3),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.close(null)
    if out.returncode != 0:
        sys.exit(f"the harness failed ({out.returncode}):\n{out.stderr}")
    print(f"{args.python}, {args.children} children, {args.idle_ms:g} ms idle after the warm-up")
    print(out.stdout, end="")


if __name__ == "__main__":
    main()
