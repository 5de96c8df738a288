"""A host that is PID 1 (a container's entrypoint without an init) keeps no
zombie of pycage's: each sandbox ends with its shell killed whole, and the
shell's init, which outlives its supervisor an instant, is reaped by the
shell helper (its subreaper), not handed to the host. Before that, this
host was left with one zombie per sandboxed run.

The host runs in a PID namespace of its own (``unshare --pid --fork
--mount-proc``; without root, inside a user namespace that maps the
caller's own uid), where it is PID 1: every orphan of the machine's
processes under it comes to it, as in a container.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import unavailable

HOST = r"""
import json, os, time
import pycage

rt = pycage.Runtime(isolation="sandbox", pool_size=2)
values = [rt.run(f"return {i} * 2").value for i in range(10)]
# Runs that time out, each with a child of its own in its sandbox.
kinds = []
for _ in range(3):
    r = rt.run("import subprocess, time\nsubprocess.Popen(['sleep', '60'])\ntime.sleep(60)", wall_seconds=0.5)
    kinds.append(r.error.kind if r.error else None)
rt.close()
time.sleep(1.0)
zombies, alive = [], []
for entry in os.listdir("/proc"):
    if not entry.isdigit() or int(entry) == os.getpid():
        continue
    try:
        with open(f"/proc/{entry}/stat") as f:
            stat = f.read()
    except OSError:
        continue
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    state = stat[stat.rindex(")") + 2 :].split()[0]
    (zombies if state == "Z" else alive).append(f"{entry} {name} {state}")
print(json.dumps({"pid": os.getpid(), "values": values, "kinds": kinds, "zombies": zombies, "alive": alive}))
"""


def unshare_command() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("no unshare (util-linux) to make the host PID 1")
    pid1 = [unshare, "--pid", "--fork", "--mount-proc"]
    if os.geteuid() == 0:
        return pid1
    # A PID namespace needs CAP_SYS_ADMIN: take it in a user namespace that
    # maps this uid to itself (the host stays unprivileged inside).
    return [unshare, "--user", "--map-current-user", *pid1[1:]]


def test_a_host_that_is_pid_1_keeps_no_zombie(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(HOST)
    probe = subprocess.run([*unshare_command(), "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        unavailable(f"cannot make a PID namespace here: {probe.stderr.strip()}")
    out = subprocess.run([*unshare_command(), sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["pid"] == 1, report
    assert report["values"] == [i * 2 for i in range(10)], report
    assert report["kinds"] == ["timeout"] * 3, report
    # Nothing of pycage's is left: no zombie, and no process at all (the
    # runtime is closed, and its runs' children died with their sandboxes).
    assert report["zombies"] == [], report
    assert report["alive"] == [], report
