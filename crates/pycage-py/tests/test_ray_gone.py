"""``RayRuntime.close()`` when the cluster is gone (``ray stop --force``):
it returns within seconds, and the driver lives on to ``ray.shutdown()``.

Before, close waited up to 60 s for its refresher thread, which was
blocked in ``ray.nodes()`` on the dead GCS; Ray itself ends a driver that
has not reached its GCS for 60 s, so close never returned. The driver here
is a subprocess of the test: it starts a one-node cluster of its own
(``ray.cluster_utils``: the cluster's processes are its descendants, and it
is their subreaper), makes a RayRuntime that refreshes often, kills every
process of the cluster with SIGKILL as ``ray stop --force`` does, waits
until the refresher is inside its call to the dead cluster, and times
``close()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import unavailable

DRIVER = r"""
import ctypes, json, os, signal, sys, time

ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
import ray
from ray.cluster_utils import Cluster

from pycage.ray import RayRuntime


def descendants():
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def in_call(thread, name):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
ray.init(address=cluster.address, log_to_driver=False)
rt = RayRuntime(isolation="process", python=sys.executable, refresh_seconds=0.2)
value = rt.run("return 6 * 7").value
for pid in descendants():  # the whole cluster, as `ray stop --force` kills it
    os.kill(pid, signal.SIGKILL)
deadline = time.monotonic() + 60
while not in_call(rt._refresher, "_eligible") and time.monotonic() < deadline:
    time.sleep(0.01)
blocked = in_call(rt._refresher, "_eligible")
start = time.monotonic()
rt.close()
took = time.monotonic() - start
print(json.dumps({"value": value, "refresher_blocked": blocked, "close_seconds": took}), flush=True)
ray.shutdown()
while True:  # reap what was killed (orphans included: this process is their subreaper)
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_close_returns_when_the_cluster_is_gone(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError as e:
        unavailable(f"Ray is not installed ({e}); pip install -r crates/pycage-py/tests/requirements.txt")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the driver did not end: {e}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and lines, f"the driver ended with {out.returncode}:\n{out.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert report["value"] == 42
    assert report["refresher_blocked"], "the refresher never called the dead cluster"
    # A hang, not a figure: before, it was Ray's 60 s GCS timeout, then the driver's end.
    assert report["close_seconds"] < 20, report
