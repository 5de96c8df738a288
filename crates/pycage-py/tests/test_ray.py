"""pycage on Ray (``pycage.ray``), on a real two-node Ray cluster on this
machine (``ray.cluster_utils.Cluster``: a head node and one more, each with
one CPU and the custom resource ``pycage``; no dashboard, no usage stats).

The cluster (``ray_cluster.py``) is started once for the module (about
10 s here). The tests run
in file order: the node-death test removes the second node (and adds a new
one), and the last test shuts everything down and checks that no process
and no actor is left.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ray_cluster import WAIT, describe, harness_fixture, reap_adopted, wait_for

import pycage
from conftest import child_pids, unavailable, within

try:
    import ray
    import ray.exceptions

    from pycage.ray import NoLiveNodeError, RayRuntime
except ImportError:  # the harness fails or skips the module's tests
    ray = None

# Budgets shared by the Ray runtimes and the local runtimes they are compared with.
BUDGETS = dict(
    wall_seconds=3,
    max_log_bytes=2048,
    max_value_bytes=4096,
    address_space_bytes=256 * 1024 * 1024,
)
README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.fixture(scope="module")
def harness():
    yield from harness_fixture()


@pytest.fixture(scope="module")
def prt(harness):
    """A RayRuntime with process isolation on both nodes, default budgets."""
    return harness.runtime(isolation="process")


@pytest.fixture(scope="module")
def brt(harness):
    """A RayRuntime with the budgets of ``local``, to compare with it."""
    return harness.runtime(isolation="process", **BUDGETS)


@pytest.fixture(scope="module")
def local():
    """The local runtime the Ray runs are compared with (same budgets)."""
    rt = pycage.Runtime(isolation="process", python=sys.executable, **BUDGETS)
    yield rt
    rt.close()


def node_stats(rt) -> dict[str, dict]:
    return {n["node_id"]: n for n in rt.stats()["nodes"]}


def deltas(before: dict, after: dict, field: str) -> dict[str, int]:
    return {nid: after[nid][field] - before.get(nid, {}).get(field, 0) for nid in after}


def is_dead(actor) -> bool:
    """Whether a call to the actor fails because it is dead (``ray.kill``
    takes effect asynchronously: a call made just after may still run)."""
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=WAIT)
    except ray.exceptions.RayActorError:
        return True
    return False


class Gate:
    """A sync binding that blocks in the driver until opened: it keeps a run
    in flight for as long as a test needs, without any timing."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.open = threading.Event()

    def __call__(self) -> str:
        self.entered.release()
        self.open.wait(WAIT)
        return "opened"

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=WAIT), "the program never called the gate"


def test_runtime_is_warm_on_both_nodes(harness, prt):
    nodes = {n.node_id for n in prt.nodes()}
    assert nodes == {harness.head_id, harness.worker.node_id}
    stats = prt.stats()
    assert stats["dead_nodes"] == [] and stats["refused_nodes"] == []
    for n in stats["nodes"]:
        assert n["pool"]["isolation"] == "process" and n["pool"]["spawn"] == "zygote"
        assert n["max_concurrent_runs"] == 64 and n["runs_in_flight"] == 0


def test_a_resource_no_node_declares_finds_no_node(harness):
    with pytest.raises(NoLiveNodeError, match="no Ray node with the resource 'gpu-cage'"):
        RayRuntime(resource="gpu-cage", isolation="process", python=sys.executable)


def test_misuse_raises_as_locally(prt):
    with pytest.raises(pycage.ConfigError, match="cpu_seconds must be at least 1"):
        RayRuntime(resource="pycage", isolation="process", python=sys.executable, cpu_seconds=0)
    with pytest.raises(TypeError, match="code must be a str"):
        prt.run(b"return 1")
    with pytest.raises(pycage.InvalidBindingsError, match="is not callable"):
        prt.run("return 1", bindings={"tools": {"f": 3}})
    with pytest.raises(pycage.InvalidBindingsError) as remote:
        prt.run("return 1", bindings={"print": {"f": len}})  # a name rule: checked on the node
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:
        with pytest.raises(pycage.InvalidBindingsError) as here:
            rt.run("return 1", bindings={"print": {"f": len}})
    assert str(remote.value) == str(here.value)
    with pytest.raises(pycage.InvalidBindingsError):
        prt.check_bindings({"print": {"f": len}})
    prt.check_bindings({"tools": {"f": len}})


def test_readme_across_machines_example(harness, tmp_path):
    """The README's example, as written, against this cluster (RAY_ADDRESS)."""
    text = README.read_text()
    start = text.index("\n## Across machines\n")
    section = text[start : text.index("\n## ", start + 1)]
    script = tmp_path / "example.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    env = dict(os.environ, RAY_ADDRESS=harness.cluster.address)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "42\n"
    assert "It prints `42`." in section


def test_one_shot_runs_land_on_both_nodes(prt):
    before = node_stats(prt)
    for i in range(30):
        assert prt.run(f"return {i} * 2").value == 2 * i

    async def many():
        return await asyncio.gather(*[prt.arun(f"return {i}") for i in range(10)])

    assert [r.value for r in asyncio.run(many())] == list(range(10))
    moved = deltas(before, node_stats(prt), "runs_total")
    assert sum(moved.values()) == 40
    assert all(n > 0 for n in moved.values()), moved


def test_power_of_two_choices_prefers_the_idle_node(prt):
    gate = Gate()
    busy = threading.Thread(target=lambda: prt.run("return await g.gate()", bindings={"g": {"gate": gate}}))
    busy.start()
    try:
        gate.wait_entered()
        loaded = [nid for nid, n in node_stats(prt).items() if n["runs_in_flight"] == 1]
        assert len(loaded) == 1
        before = node_stats(prt)
        for _ in range(10):
            assert prt.run("return 1").ok
        moved = deltas(before, node_stats(prt), "runs_total")
        assert moved[loaded[0]] == 0 and sum(moved.values()) == 10, moved
    finally:
        gate.open.set()
        busy.join(WAIT)


def test_session_runs_stay_on_one_node_with_their_globals(prt):
    before = node_stats(prt)
    with prt.session() as s:
        assert s.run("x = 0").ok
        for _ in range(100):
            assert s.run("x += 1").ok
        assert s.run("return x").value == 100
        pinned = s.node_id
    moved = deltas(before, node_stats(prt), "session_runs_total")
    assert moved[pinned] == 102
    assert all(n == 0 for nid, n in moved.items() if nid != pinned), moved


def test_a_session_run_inside_one_of_its_runs_is_refused_as_locally(prt):
    def again():
        return s.run("1").value

    def inside():
        refused = []

        def on_log(_line):
            with pytest.raises(pycage.SessionBusyError, match="from inside one of its runs"):
                s.run("1")
            refused.append(True)

        r = s.run("print('up')\nreturn 'outer'", on_log=on_log)
        caught = s.run("try:\n    await ns.again()\nexcept Exception as e:\n    return str(e)").value
        return r.value, refused, "from inside one of its runs" in caught, s.run("2").value

    s = prt.session({"ns": {"again": again}})
    assert within(120, inside) == ("outer", [True], True, 2)
    s.close()


def test_sessions_are_placed_by_rendezvous_hashing_of_their_key(prt):
    homes = {}
    for i in range(32):
        with prt.session(key=f"user-{i}") as s:
            homes[s.key] = s.node_id
    assert set(homes.values()) == {n.node_id for n in prt.nodes()}  # keys spread over the nodes
    for key in ("user-3", "user-17"):
        with prt.session(key=key) as s:
            assert s.node_id == homes[key]  # a key keeps its node


PROGRAMS = {
    "big int": "return 2**100",
    "negative zero": "print('x')\nreturn -0.0",
    "returned None": "return None",
    "no value": "x = 1",
    "final expression": "20 + 22",
    "exception": "raise ValueError('boom')",
    "syntax error": "def f(:\n    pass",
    "wall timeout": "while True: pass",
    "worker-exit": "import os\nprint('bye', flush=True)\nos._exit(3)",
    "invalid-output": "return float('nan')",
    "value budget": "return 'x' * 10_000",
    "log budget": "for i in range(1000):\n    print('y' * 10)\nreturn 1",
    "memory budget": "b = bytearray(512 * 1024 * 1024)",
    "deep value": "v = []\nfor _ in range(100):\n    v = [v]\nreturn v",
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_outcomes_and_budgets_are_unchanged_through_ray(brt, local, name):
    remote = brt.run(PROGRAMS[name])
    here = local.run(PROGRAMS[name])
    if name == "memory budget":
        # The memory held when the watchdog ends a run is measured, not fixed.
        held = re.compile(r"\(\d+ MiB held\)")
        assert remote.error.kind == here.error.kind == "worker-exit", (remote, here)
        assert held.sub("(held)", remote.error.message) == held.sub("(held)", here.error.message)
        assert (remote.value, remote.logs) == (here.value, here.logs)
        return
    assert remote == here
    if name == "negative zero":
        assert math.copysign(1, remote.value) == -1


def test_every_failure_kind_is_covered(brt):
    results = [brt.run(code) for code in PROGRAMS.values()]
    kinds = {r.error.kind for r in results if not r.ok}
    assert kinds == {"exception", "timeout", "worker-exit", "invalid-output", "output-limit"}
    # the sixth, abort, is test_close_aborts_runs_in_flight_and_kills_every_actor's


def test_a_session_ends_as_locally(brt, local):
    def story(rt, query_ended: bool) -> list:
        told = []
        with rt.session() as s:
            told.append(s.run("x = 1"))
            told.append(s.run("raise KeyError('k')"))
            told.append(s.run("return x"))
            told.append(s.run("while True: pass"))
            if query_ended:
                told.append(s.ended)
                with pytest.raises(pycage.SessionEndedError) as e:
                    s.run("return x")
                told.append(str(e.value))
        told.append(s.ended)
        with pytest.raises(pycage.SessionEndedError) as e:
            s.run("return x")
        told.append(str(e.value))
        return told

    for query_ended in (True, False):
        remote, here = story(brt, query_ended), story(local, query_ended)
        assert remote == here
        assert remote[3].error.kind == "timeout" and "timeout" in remote[-1]


def test_bindings_call_back_to_the_driver(brt, local):
    lock = threading.Lock()  # driver-local state that cannot be pickled
    seen: list = []
    request = contextvars.ContextVar("request", default="none")

    def record(item):
        with lock:
            seen.append(item)
            return {"pid": os.getpid(), "n": len(seen), "request": request.get()}

    with pytest.raises(TypeError):
        ray.cloudpickle.dumps(record)

    async def double(x):
        await asyncio.sleep(0)
        return 2 * x

    def refuse(reason):
        raise ValueError(reason)

    class Db:
        def get(self, key):
            return {"a": 1}[key]

    bindings = {
        "t": {"record": record, "double": double, "refuse": refuse, "when": lambda: object()},
        "db": pycage.Namespace(Db(), error_class="DbError"),
    }
    program = """
import asyncio
first = await t.record("a")
doubled = await asyncio.gather(*[t.double(i) for i in range(50)])
try:
    await t.refuse("no reason")
except RuntimeError as e:
    refused = str(e)
try:
    await db.get("zz")
except DbError as e:
    missing = [e.tool, str(e)]
try:
    await t.when()
except RuntimeError as e:
    not_json = str(e)
return {"first": first, "sum": sum(doubled), "refused": refused, "missing": missing, "not_json": not_json,
        "a": await db.get(key="a"), "help": t.double.__doc__}
"""
    request.set("req-1")
    remote = brt.run(program, bindings=bindings)
    assert remote.ok, remote.error
    assert remote.value["first"] == {"pid": os.getpid(), "n": 1, "request": "req-1"}
    assert remote.value["sum"] == 2 * sum(range(50))
    assert remote.value["refused"] == "no reason"
    assert remote.value["missing"] == ["get", "'zz'"]
    assert remote.value["not_json"].startswith("t.when returned a value that cannot cross as JSON: $: object is not")
    assert remote.value["a"] == 1
    assert "double(*, x)" in remote.value["help"], remote.value["help"]  # the driver's callable, not a proxy
    seen.clear()
    assert local.run(program, bindings=bindings) == remote  # the same Result as locally

    async def from_a_loop():
        loop = asyncio.get_running_loop()
        on = []

        async def where():
            on.append(asyncio.get_running_loop() is loop)
            return "ok"

        events = []
        r = await brt.arun(
            "return [await t.where(), await t.record('b')]",
            {"t": {"where": where, "record": record}},
            on_call=events.append,
        )
        return r, on, events

    r, on, events = asyncio.run(from_a_loop())
    assert r.ok and r.value[0] == "ok" and r.value[1]["pid"] == os.getpid()
    assert on == [True]  # an async binding of arun runs on the caller's loop
    assert [type(e).__name__ for e in events] == ["CallStarted", "CallFinished"] * 2
    assert (events[0].namespace, events[0].name, events[2].args) == ("t", "where", "b")

    with brt.session({"t": {"record": record}}) as s:
        s.run("n1 = (await t.record('c'))['n']")
        assert s.run("return [n1, (await t.record('d'))['n']]").value == [len(seen) - 1, len(seen)]
    assert seen[-2:] == ["c", "d"]
    stats = brt.stats()
    assert stats["bindings"]["calls_in_flight"] == 0 and stats["bindings"]["calls_total"] >= 56
    assert all(n["binding_calls_in_flight"] == 0 for n in stats["nodes"])


def test_ray_cancel_of_a_node_run_aborts_it(prt):
    node = prt.nodes()[0]
    ref = node.actor.run.remote("import time\ntime.sleep(3600)")
    wait_for(lambda: ray.get(node.actor.stats.remote())["runs_in_flight"] == 1, "the run to start")
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=WAIT)
    wait_for(lambda: ray.get(node.actor.stats.remote())["runs_in_flight"] == 0, "the run to be aborted")
    assert ray.get(node.actor.run.remote("return 'still warm'")).value == "still warm"


def test_a_journal_made_on_one_node_resumes_on_the_other(harness):
    """Durable runs across nodes: every node verifies the driver's key, a
    stand-in of an approval binding suspends the node's run, a driver's
    ``pycage.Suspend`` does too, and a journal resumes on any node."""
    from pycage._bindings import _namespaces
    from pycage.ray._wire import wire

    drt = harness.runtime(isolation="process", journal_key=b"ray test journal key, not secret")
    lookups = []

    def lookup(invoice):
        lookups.append(invoice)
        return 40

    @pycage.approval
    def pay(amount):
        raise AssertionError("never run: the approver answers")

    def check(amount):
        raise pycage.Suspend(f"{amount} needs a second signature")

    bindings = {"tools": pycage.Namespace({"lookup": lookup, "pay": pay, "check": check}, error_class="ToolError")}
    program = """
amount = await tools.lookup(invoice=7)
signed = await tools.check(amount)
try:
    return {"amount": amount, "signed": signed, "receipt": await tools.pay(amount=amount)}
except ToolError as e:
    return {"amount": amount, "signed": signed, "refused": str(e)}
"""
    before = node_stats(drt)
    first = drt.run(program, bindings)
    assert first.error.kind == "suspended" and first.suspended.reason == "40 needs a second signature"
    (made_on,) = [nid for nid, n in deltas(before, node_stats(drt), "runs_total").items() if n == 1]
    other = next(n for n in drt.nodes() if n.node_id != made_on)
    # Resumed on the other node's actor directly (no binding is called live
    # before the next suspension, so nothing is streamed back).
    spec = wire(_namespaces(bindings))
    stream = other.actor.resume_stream.remote(first.suspended.journal, (True, "yes"), None, spec, (False, False, False))
    items = [ray.get(ref) for ref in stream]
    kind, second, _tree = items[-1]
    assert kind == "done" and second.error.kind == "suspended", second
    assert second.suspended.call == pycage.PendingCall("tools", "pay", {"amount": 40})
    # The journal extended there resumes anywhere, through the runtime.
    done = drt.resume(second.suspended, reply="PAY-1", bindings=bindings)
    assert done.value == {"amount": 40, "signed": "yes", "receipt": "PAY-1"}, done
    refused = asyncio.run(drt.aresume(second.suspended, error="not today", bindings=bindings))
    assert refused.value == {"amount": 40, "signed": "yes", "refused": "not today"}, refused
    assert lookups == [7], "lookup ran once, on the first node"


def test_sandboxed_runs_through_ray_match_local_ones(harness):
    try:
        here = pycage.Runtime(python=sys.executable, **BUDGETS)
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    try:
        rt = harness.runtime(**BUDGETS)
        assert {n["pool"]["isolation"] for n in rt.stats()["nodes"]} == {"sandbox"}
        probes = [
            "import os\nreturn [os.getpid(), os.getuid(), sorted(os.listdir('/'))]",
            "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
            "open('/etc/shadow').read()",
            "import os\nreturn [os.getcwd(), sorted(os.environ)]",
            "while True: pass",
        ]
        for program in probes:
            assert rt.run(program) == here.run(program), program
        with rt.session() as s:
            assert s.run("import os\npid = os.getpid()").ok
            assert s.run("return pid == os.getpid()").value is True
        rt.close()
    finally:
        here.close()


def test_inputs_are_carried_to_the_node_within_max_input_bytes(harness, tmp_path):
    with pytest.raises(pycage.ConfigError, match="max_input_bytes must be an int >= 0, got -1"):
        RayRuntime(resource="pycage", isolation="process", python=sys.executable, max_input_bytes=-1)
    rt = harness.runtime(isolation="process", max_input_bytes=100)
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("x" * 60)
    (tmp_path / "d" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "d" / "run.sh").chmod(0o755)
    (tmp_path / "g.txt").write_text("y" * 30)
    program = (
        "import os\nreturn [open('d/e/f.txt').read().count('x'), os.access('d/run.sh', os.X_OK), open('g.txt').read()]"
    )
    assert rt.run(program, inputs=[tmp_path / "d", tmp_path / "g.txt"]).value == [60, True, "y" * 30]
    # A symlink arrives as a symlink: the node's runtime treats it as a local one does.
    (tmp_path / "d" / "link").symlink_to("e/f.txt")
    with pycage.Runtime(isolation="process", python=sys.executable) as here:
        local = here.run("1", inputs=[tmp_path / "d"])
    remote = rt.run("1", inputs=[tmp_path / "d"])
    assert remote.error.kind == local.error.kind == "worker-exit"
    assert remote.error.message.endswith("d: a symlink: never followed or copied (d/link)")
    assert local.error.message.endswith("d: a symlink: never followed or copied (d/link)")
    (tmp_path / "d" / "link").unlink()
    (tmp_path / "g.txt").write_text("y" * 41)  # 101 bytes with d's 60
    with pytest.raises(pycage.PycageError, match=r"invalid input: input .*max_input_bytes of this RayRuntime"):
        rt.run("1", inputs=[tmp_path / "d", tmp_path / "g.txt"])
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(pycage.PycageError, match="fifo is a special file"):
        rt.run("1", inputs=[tmp_path / "fifo"])
    rt.close()


def test_file_trees_never_leave_their_directory(harness, tmp_path):
    from pycage.ray._wire import unpack

    for tree in (
        [("f", "../escape", b"x", 0o644)],
        [("f", "/abs", b"x", 0o644)],
        [("d", "a/./b", None, 0o755)],
        [("l", "link", b"/etc", 0o777), ("f", "link/passwd", b"x", 0o644)],
        [("l", "l", str(tmp_path).encode(), 0o777), ("d", "l/sub", None, 0o755)],
    ):
        dest = tmp_path / f"dest-{len(list(tmp_path.iterdir()))}"
        with pytest.raises(pycage.PycageError, match="unsafe path"):
            unpack(tree, str(dest))
    assert not (tmp_path / "escape").exists() and not (tmp_path / "sub").exists()


def test_close_aborts_runs_in_flight_and_kills_every_actor(harness):
    rt = harness.runtime(isolation="process")
    actors = [n.actor for n in rt.nodes()]
    session = rt.session()
    assert session.run("x = 1").ok

    async def main():
        run = asyncio.ensure_future(rt.arun("import time\ntime.sleep(3600)"))
        await asyncio.get_running_loop().run_in_executor(
            None, wait_for, lambda: any(n["runs_in_flight"] for n in rt.stats()["nodes"]), "the run to start"
        )
        await rt.aclose()
        return await asyncio.wait_for(run, WAIT)

    with pycage.Runtime(isolation="process", python=sys.executable) as here:

        def aborted_locally():
            t = threading.Timer(0.5, here.close)
            t.start()
            try:
                return here.run("import time\ntime.sleep(3600)")
            finally:
                t.join()

        expected = aborted_locally()
    assert asyncio.run(main()) == expected and expected.error.kind == "abort"
    for actor in actors:
        wait_for(lambda a=actor: is_dead(a), f"{actor} to die")
    with pytest.raises(pycage.RuntimeClosedError):
        rt.run("return 1")
    with pycage.Runtime(isolation="process", python=sys.executable) as here:
        local_session = here.session()
        assert local_session.run("x = 1").ok
    for s in (session, local_session):
        with pytest.raises(pycage.RuntimeClosedError, match="the runtime is closed"):
            s.run("return x")
        s.close()
    assert session.ended == local_session.ended == "it was closed, or the runtime was shut down"
    rt.close()  # idempotent


def test_a_dead_node_ends_its_sessions_and_runs_go_to_the_survivor(harness):
    prt = harness.runtime(isolation="process")  # its own load counts, and the default 60 s wall clock
    worker, head = harness.worker.node_id, harness.head_id
    gate = Gate()
    g = {"g": {"gate": gate}}
    sessions = [prt.session(g, key=f"k{i}") for i in range(24)]
    doomed = [s for s in sessions if s.node_id == worker]
    kept = [s for s in sessions if s.node_id == head]
    assert len(doomed) >= 2 and len(kept) >= 2
    for s in sessions:
        assert s.run("x = 41").ok
    gated = "x += 1\nawait g.gate()\nreturn x"

    def worker_in_flight():
        return ray.get([n.actor.stats.remote() for n in prt.nodes() if n.node_id == worker][0])["runs_in_flight"]

    # Placement by load (this driver's runs in flight per node), step by step:
    with ThreadPoolExecutor(max_workers=5) as pool:
        try:
            on_head = [pool.submit(s.run, gated) for s in kept[:2]]  # head 2, worker 0
            for _ in on_head:
                gate.wait_entered()
            one_shot = pool.submit(prt.run, "await g.gate()\nreturn 'not reached'", g)  # to the worker: 2, 1
            gate.wait_entered()
            # Never ends on the worker's CageNode (process isolation: it sees
            # this machine's /proc, and the actor's pid among its ancestors),
            # so it is surely in flight there when the node dies; elsewhere
            # it returns at once.
            worker_pid = [ray.get(n.actor.stats.remote())["pid"] for n in prt.nodes() if n.node_id == worker][0]
            waiter = (
                "import os, time\n"
                "pid, ancestors = os.getpid(), set()\n"
                "while pid > 1 and len(ancestors) < 6:\n"
                "    with open(f'/proc/{pid}/stat') as f:\n"
                "        pid = int(f.read().rsplit(')', 1)[1].split()[1])\n"
                "    ancestors.add(pid)\n"
                f"while {worker_pid} in ancestors:\n"
                "    time.sleep(0.05)\n"
                "return 'ran again'"
            )
            sleeper = pool.submit(prt.run, waiter)  # to the worker: 2, 2
            wait_for(lambda: worker_in_flight() == 2, "the sleeper to start on the worker")
            in_session = pool.submit(doomed[0].run, gated)  # 2, 3
            gate.wait_entered()
            head_runs = node_stats(prt)[head]["runs_total"]
            assert worker_in_flight() == 2  # the sleeper is still in flight on the worker

            harness.cluster.remove_node(harness.worker, allow_graceful=False)

            # A run that had called a binding, and a session's run, end as a dead process does.
            for future in (one_shot, in_session):
                r = future.result(WAIT)
                assert r.error is not None and r.error.kind == "worker-exit", r
                assert re.search(f"node {worker[:12]} (died|became unreachable)", r.error.message), r
            # Nothing of the sleeper had reached the caller: it ran again on the survivor.
            assert sleeper.result(WAIT).value == "ran again"
            assert node_stats(prt)[head]["runs_total"] == head_runs + 1
        finally:
            gate.open.set()
        assert [f.result(WAIT).value for f in on_head] == [42, 42]

    with pytest.raises(
        pycage.SessionEndedError,
        match=r"the session has ended: its node \w+ (died|became unreachable) \(.*\); open a new one",
    ):
        doomed[0].run("return x")
    for s in doomed[1:]:
        assert "its node" in s.ended
        with pytest.raises(pycage.SessionEndedError, match="its node"):
            s.run("return x")
        s.close()
    for s in kept:
        assert s.run("return x").value in (41, 42)  # sessions on the survivor go on
        s.close()
    doomed[0].close()

    for i in range(20):
        assert prt.run(f"return {i}").value == i
    assert [n.node_id for n in prt.nodes()] == [head]
    assert [d["node_id"] for d in prt.stats()["dead_nodes"]] == [worker]
    with prt.session(key=doomed[0].key) as s:  # its key now hashes to the survivor
        assert s.node_id == head and s.run("return 1").value == 1

    # A node that joins gets a CageNode at the next refresh and takes runs.
    joined = harness.cluster.add_node(num_cpus=1, resources={"pycage": 1})
    prt.refresh()
    assert {n.node_id for n in prt.nodes()} == {head, joined.node_id}
    harness.actors.extend(n.actor for n in prt.nodes())
    before = node_stats(prt)
    for _ in range(20):
        assert prt.run("return 1").ok
    assert deltas(before, node_stats(prt), "runs_total")[joined.node_id] > 0


def test_shutdown_leaves_no_process_and_no_actor(harness, local):
    local.close()
    actors = list(harness.actors)
    for rt in harness.runtimes:
        rt.close()
    for actor in actors:
        wait_for(lambda a=actor: is_dead(a), f"{actor} to die")
    # A runtime left open when Ray shuts down: its actors go with the cluster.
    unclosed = RayRuntime(resource="pycage", isolation="process", python=sys.executable)
    session = unclosed.session()
    assert session.run("x = 1").ok
    harness.shutdown()
    assert not ray.is_initialized()
    # Using it raises, and never starts a new local Ray (which any Ray call would).
    with pytest.raises(pycage.RuntimeClosedError, match="Ray was shut down"):
        unclosed.run("return 1")
    with pytest.raises(pycage.RuntimeClosedError, match="Ray was shut down"):
        session.run("return x")
    assert session.ended == "it was closed, or the runtime was shut down"
    session.close()
    unclosed.close()
    assert not ray.is_initialized()
    # Every Ray process (GCS, raylets, workers) and every pycage child was a
    # descendant of this process, or was re-parented to it (a subreaper).
    try:
        wait_for(lambda: reap_adopted() or not (child_pids() - harness.before), "every Ray and pycage process to exit")
    except AssertionError as e:
        raise AssertionError(f"{e}: left {describe(child_pids() - harness.before)}") from None
