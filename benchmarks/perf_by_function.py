"""Where a closed loop's CPU goes: ``perf script`` samples grouped by the
first of a list of kernel and CPython functions on each sample's stack
(page faults, ``exit_mmap``, ``dup_mmap``, the network namespace, mounts,
...), in ms per run, and per process of the run's path (the host, the
zygote, the shell helper, the shells, the run's processes).

    perf record -a -g -F 999 -o perf.data -- python benchmarks/closed_loop.py sandbox 15
    perf script -i perf.data -F comm,pid,ip,sym | python benchmarks/perf_by_function.py \\
        --runs N --seconds 15 --host PID

``--seconds`` with the machine's CPU count gives the CPU time sampled (all
of it, idle included). The zygote is the host's busiest ``python3``
process; the other ``python3`` processes are the runs'. The shell helper
is the busiest process named after the program the package embeds
(``shell-helper-<hash>``, as the kernel shortens it), or, with an
interpreter as the helper, the busiest ``python`` one besides the host
(the package's interpreter is ``python``, the zygote's ``python3``); the
other processes of that name are the shells.
"""

import argparse
import collections
import os
import sys

CATEGORIES = [
    ("page faults", ("asm_exc_page_fault", "exc_page_fault", "handle_mm_fault")),
    ("exit_mmap", ("exit_mmap",)),
    ("dup_mmap", ("dup_mmap",)),
    ("copy_net_ns", ("copy_net_ns",)),
    ("cleanup_net", ("cleanup_net",)),
    ("setns", ("__x64_sys_setns", "__do_sys_setns")),
    ("CPython eval", ("_PyEval_EvalFrameDefault",)),
    (
        "mounts",
        (
            "__x64_sys_mount",
            "__x64_sys_open_tree",
            "__x64_sys_umount",
            "__x64_sys_move_mount",
            "__x64_sys_mount_setattr",
            "__x64_sys_fsmount",
            "__x64_sys_fsopen",
            "__x64_sys_fsconfig",
        ),
    ),
    ("unshare (rest)", ("ksys_unshare", "__x64_sys_unshare")),
    ("seccomp install", ("do_seccomp", "seccomp_set_mode_filter")),
    ("landlock", ("landlock",)),
    ("sock_diag", ("unix_diag_dump", "sock_diag_rcv")),
    ("idle", ("do_idle", "default_idle", "cpuidle_enter", "pv_native_safe_halt")),
]


def category(stack):
    for frame in stack:
        for name, keys in CATEGORIES:
            if any(k in frame for k in keys):
                return name
    return "everything else"


def samples(lines):
    """(comm, pid, stack) per sample of ``perf script -F comm,pid,ip,sym``."""
    head, stack = None, []
    for line in lines:
        if not line.strip():
            if head:
                yield head[0], head[1], stack
            head, stack = None, []
        elif line.startswith((" ", "\t")):
            parts = line.split()
            if len(parts) >= 2:
                stack.append(parts[1])
        else:
            parts = line.split()
            head = (parts[0], parts[1] if len(parts) > 1 else "")
    if head:
        yield head[0], head[1], stack


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--host", required=True, help="the host's pid (closed_loop.py prints it)")
    args = ap.parse_args()
    data = list(samples(sys.stdin))
    per_pid = collections.Counter((comm, pid) for comm, pid, _ in data)

    def kind(comm):
        return "shell-helper" if comm.startswith("shell-helper") else comm

    busiest = {
        name: max((n, pid) for (c, pid), n in per_pid.items() if kind(c) == name and pid != args.host)[1]
        for name in ("python3", "python", "shell-helper")
        if any(kind(c) == name and pid != args.host for c, pid in per_pid)
    }
    helper = busiest.get("shell-helper", busiest.get("python"))
    shells = "shell-helper" if "shell-helper" in busiest else "python"

    def who(comm, pid):
        if pid == args.host or comm.startswith("pycage"):
            return "host"
        if pid == busiest.get("python3"):
            return "zygote"
        if pid == helper:
            return "shell helper"
        if comm == "python3":
            return "run's processes"
        if kind(comm) == shells:
            return "shells"
        if comm == "swapper":
            return "idle"
        return "kernel threads, other"

    ms_per_sample = args.seconds * 1000 * (os.cpu_count() or 1) / len(data) / args.runs
    total, by_who = collections.Counter(), collections.defaultdict(collections.Counter)
    for comm, pid, stack in data:
        c = category(stack)
        total[c] += 1
        by_who[who(comm, pid)][c] += 1
    print(f"{len(data)} samples, {ms_per_sample * len(data):.1f} ms of CPU time per run (idle included)")
    print("| what | ms per run | share |\n|---|---|---|")
    for name in [n for n, _ in CATEGORIES] + ["everything else"]:
        print(f"| {name} | {total[name] * ms_per_sample:.2f} | {100 * total[name] / len(data):.1f} % |")
    print("\n| process | ms per run | largest parts |\n|---|---|---|")
    for w, counts in sorted(by_who.items(), key=lambda kv: -sum(kv[1].values())):
        parts = ", ".join(f"{k} {v * ms_per_sample:.2f}" for k, v in counts.most_common(5))
        print(f"| {w} | {sum(counts.values()) * ms_per_sample:.2f} | {parts} |")


if __name__ == "__main__":
    main()
