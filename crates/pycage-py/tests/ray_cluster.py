"""A real Ray cluster on this machine for the tests of ``pycage.ray``
(``ray.cluster_utils.Cluster``: a head node and one more, each with one CPU
and the custom resource ``pycage``; no dashboard, no usage stats), and its
shutdown, which leaves no process behind: the test process is a child
subreaper while a cluster is up, so orphans are counted and reaped too.
One cluster at a time per process (``ray.init`` is process-wide): each test
module that needs one starts its own with :func:`harness_fixture`.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Optional

from conftest import settled_child_pids, unavailable

try:
    import ray
    import ray.exceptions
    from ray.cluster_utils import Cluster

    from pycage.ray import RayRuntime
except ImportError as e:  # the modules' own tests fail or skip, the others run
    ray = None
    IMPORT_ERROR = e

PR_SET_CHILD_SUBREAPER = 36
WAIT = 60.0  # the bound of every wait (Ray notices a dead node in seconds)


def wait_for(predicate, what: str, limit: float = WAIT):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {limit} s waiting for {what}")


def set_subreaper(on: bool) -> None:
    """Orphans (a process whose parent died) are re-parented to this process
    instead of init while on, so "nothing left" sees them too."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_adopted(spared: Optional[set[int]] = None) -> None:
    """Reaps zombies this process adopted as a subreaper: from a sandbox's
    PID namespace at any time (a dying namespace init waits until they are
    reaped, as init would reap them without a subreaper; this process never
    starts a child in a nested PID namespace, so no waiter loses a status),
    and, once the cluster is down, every other zombie child not in
    ``spared`` (Ray's workers and agents, whose parents died; nothing else
    in this process starts children while this module runs)."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except OSError:
            continue
        if status.get("PPid") != me or not status.get("State", "").startswith("Z"):
            continue
        nested = len(status.get("NSpid", "").split()) > 1
        if nested or (spared is not None and int(entry) not in spared):
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass


class Harness:
    """The module's cluster, the runtimes made on it, and its shutdown."""

    def __init__(self) -> None:
        self.before = settled_child_pids()
        set_subreaper(True)
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "resources": {"pycage": 1}, "include_dashboard": False},
        )
        self.worker = self.cluster.add_node(num_cpus=1, resources={"pycage": 1})
        ray.init(address=self.cluster.address, log_to_driver=False)
        self.head_id = self.cluster.head_node.node_id
        self.runtimes: list = []
        self.actors: list = []
        self.down = False

    def runtime(self, **kwargs) -> RayRuntime:
        rt = RayRuntime(resource="pycage", python=sys.executable, **kwargs)
        self.runtimes.append(rt)
        self.actors.extend(n.actor for n in rt.nodes())
        return rt

    def shutdown(self) -> None:
        if self.down:
            return
        self.down = True
        try:
            for rt in self.runtimes:
                rt.close()
            ray.shutdown()
            self.cluster.shutdown()
        finally:
            set_subreaper(False)
            reap_adopted(self.before)


def harness_fixture():
    """The body of a module-scoped ``harness`` fixture: a cluster for the
    module, shut down after its last test."""
    if ray is None:
        unavailable(f"Ray is not installed ({IMPORT_ERROR}); pip install -r crates/pycage-py/tests/requirements.txt")
    saved = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    h = Harness()
    try:
        yield h
    finally:
        h.shutdown()
        if saved is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = saved


def describe(pids: set[int]) -> list[str]:
    """For the failure message: each process's name and parent."""
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        out.append(
            f"{pid} {stat[stat.index('(') : stat.rindex(')') + 1]} ppid {stat[stat.rindex(')') + 2 :].split()[1]}"
        )
    return out
