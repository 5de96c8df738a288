"""One API, two transports: every test here runs against
:class:`pycage.Runtime` and against :class:`pycage.ray.RayRuntime` (on a
two-node ``ray.cluster_utils`` cluster of this machine, ``ray_cluster.py``),
with the same assertions. A keyword, a callback, an error or an outcome
that one of them handles differently fails here.

Both use process isolation (the sandbox's own tests are elsewhere); the
runtimes of a transport are shared by its tests, which pytest runs
together (``api`` is a module-scoped, parametrized fixture).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import sys
import threading

import pytest
from ray_cluster import harness_fixture

import pycage
from conftest import child_pids, unavailable, within

BUDGETS = dict(wall_seconds=5, max_log_bytes=4096, max_value_bytes=4096)
TRANSPORTS = ["Runtime", "RayRuntime"]


@pytest.fixture(scope="module")
def harness():
    yield from harness_fixture()


class Transport:
    """Makes runtimes of one transport: ``new(**kwargs)`` takes
    :class:`pycage.Runtime`'s keyword arguments."""

    def __init__(self, name: str, request: pytest.FixtureRequest) -> None:
        self.name = name
        self.request = request
        self.made: list = []

    def new(self, **kwargs):
        kwargs = {"isolation": "process", "python": sys.executable, **kwargs}
        if self.name == "Runtime":
            rt = pycage.Runtime(**kwargs)
        else:
            harness = self.request.getfixturevalue("harness")
            kwargs.pop("python")
            rt = harness.runtime(**kwargs)
        self.made.append(rt)
        return rt

    def close(self) -> None:
        for rt in self.made:
            rt.close()


@pytest.fixture(scope="module", params=TRANSPORTS)
def transport(request):
    t = Transport(request.param, request)
    yield t
    t.close()


@pytest.fixture(scope="module")
def api(transport):
    """The transport's shared runtime (process isolation, ``BUDGETS``)."""
    return transport.new(**BUDGETS)


def owner(rt) -> str:
    return "pycage.Runtime" if isinstance(rt, pycage.Runtime) else "pycage.ray.RayRuntime"


# -- one definition


def test_runtimes_and_sessions_take_the_same_arguments():
    try:
        from pycage.ray import RayRuntime, RaySession
    except ImportError as e:
        unavailable(f"Ray is not installed ({e})")

    names = ("run", "arun", "session", "check_bindings", "wait_idle", "await_idle", "close", "aclose")
    names += ("resume", "aresume")
    for name in names:
        local, remote = getattr(pycage.Runtime, name), getattr(RayRuntime, name)
        assert inspect.signature(local) == inspect.signature(remote), name
    for name in ("run", "arun", "close", "aclose"):
        local, remote = getattr(pycage.Session, name), getattr(RaySession, name)
        assert inspect.signature(local) == inspect.signature(remote), name
    # One definition: the transports implement hooks, not the API.
    for name in ("run", "arun", "session", "check_bindings", "wait_idle"):
        assert getattr(pycage.Runtime, name) is getattr(RayRuntime, name), name
    for name in ("run", "arun"):
        assert getattr(pycage.Session, name) is getattr(RaySession, name), name


# -- outcomes


PROGRAMS = {
    "big int": ("return 2**100", 2**100, None),
    "final expression": ("20 + 22", 42, None),
    "no value": ("x = 1", None, None),
    "exception": ("raise ValueError('boom')", None, "exception"),
    "syntax error": ("def f(:\n    pass", None, "exception"),
    "worker-exit": ("import os\nos._exit(3)", None, "worker-exit"),
    "invalid-output": ("return float('nan')", None, "invalid-output"),
    "value budget": ("return 'x' * 10_000", None, "output-limit"),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_outcomes(api, name):
    code, value, kind = PROGRAMS[name]
    r = api.run(code)
    assert (r.value, None if r.error is None else r.error.kind) == (value, kind), r
    assert r == asyncio.run(api.arun(code))


def test_logs_and_no_value_versus_none(api):
    r = api.run("print('a')\nimport sys\nprint('b', file=sys.stderr)\nreturn None")
    assert (r.logs, r.value, r.has_value) == (["a", "b"], None, True)
    assert api.run("pass").has_value is False


# -- per-run limits


def test_per_run_limits(api):
    r = api.run("while True: pass", wall_seconds=1)
    assert (r.error.kind, r.error.message) == ("timeout", "the wall-clock budget of 1000 ms was exceeded")
    assert api.run("return 1", wall_seconds=2, cpu_seconds=2, address_space_bytes=256 << 20).value == 1
    r = asyncio.run(api.arun("import time\ntime.sleep(5)", wall_seconds=1))
    assert r.error.kind == "timeout"


def test_limits_are_checked_with_the_same_messages(api):
    with pytest.raises(TypeError, match=rf"{owner(api)}.run\(\) got an unexpected keyword argument 'max_log_bytes'"):
        api.run("1", max_log_bytes=10)
    with pytest.raises(TypeError, match="budgets: address_space_bytes, cpu_seconds, wall_seconds"):
        api.run("1", wal_seconds=1)
    with pytest.raises(pycage.ConfigError, match=rf"invalid {owner(api)}.arun argument: wall_seconds must be"):
        asyncio.run(api.arun("1", wall_seconds=0))
    with pytest.raises(TypeError, match="code must be a str"):
        api.run(b"return 1")


# -- events


def test_events_in_order(api):
    events = []

    def double(x):
        return x * 2

    r = api.run(
        "print('one')\nv = await ns.double(21)\ndisplay('shown')\nprint('two', v)\n"
        "try:\n    await ns.fail(0)\nexcept RuntimeError:\n    pass\nreturn v",
        {"ns": {"double": double, "fail": lambda _: 1 / 0}},
        on_log=lambda line: events.append(("log", line)),
        on_call=events.append,
        on_display=lambda d: events.append(("display", d.text)),
    )
    assert r.value == 42
    assert events == [
        ("log", "one"),
        pycage.CallStarted(0, "ns", "double", 21),
        pycage.CallFinished(0, "ns", "double", None),
        ("display", "'shown'"),
        ("log", "two 42"),
        pycage.CallStarted(1, "ns", "fail", 0),
        pycage.CallFinished(1, "ns", "fail", "division by zero"),
    ]
    assert [d.text for d in r.displays] == ["'shown'"]


def test_events_of_arun_come_on_the_loop(api):
    async def main():
        loop = asyncio.get_running_loop()
        seen = []

        def on(kind):
            def record(item):
                assert asyncio.get_running_loop() is loop
                seen.append((kind, getattr(item, "text", item)))

            return record

        r = await api.arun("print(0)\ndisplay(1)\nreturn 'ok'", on_log=on("log"), on_display=on("display"))
        return r.value, seen

    assert asyncio.run(main()) == ("ok", [("log", "0"), ("display", "1")])


class Stop(Exception):
    pass


@pytest.mark.parametrize("callback", ["on_log", "on_display"])
def test_a_raising_callback_aborts_the_run_and_is_raised(api, callback):
    def stop(item):
        raise Stop(str(item))

    program = "print('up', flush=True)\ndisplay('up')\nimport time\ntime.sleep(60)"
    with pytest.raises(Stop):
        within(60, lambda: api.run(program, **{callback: stop}))

    async def main():
        with pytest.raises(Stop):
            await api.arun(program, **{callback: stop})

    within(60, lambda: asyncio.run(main()))


# -- bindings


def test_bindings_sync_async_context_and_refusals(api):
    request = contextvars.ContextVar("request", default="none")
    lock = threading.Lock()  # caller-side state a binding closes over

    def whoami():
        with lock:
            return {"pid": os.getpid(), "request": request.get()}

    async def double(x):
        await asyncio.sleep(0)
        return 2 * x

    def refuse(reason):
        raise ValueError(reason)

    class Db:
        def get(self, key):
            return {"a": 1}[key]

    bindings = {
        "t": {"whoami": whoami, "double": double, "refuse": refuse, "when": lambda: object()},
        "db": pycage.Namespace(Db(), error_class="DbError"),
    }
    program = """
import asyncio
me = await t.whoami()
doubled = await asyncio.gather(*[t.double(i) for i in range(20)])
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
return {"me": me, "sum": sum(doubled), "refused": refused, "missing": missing, "not_json": not_json,
        "a": await db.get(key="a"), "help": t.double.__doc__}
"""
    request.set("req-1")
    r = api.run(program, bindings)
    assert r.ok, r.error
    assert r.value["me"] == {"pid": os.getpid(), "request": "req-1"}  # run in this process, in this context
    assert r.value["sum"] == 2 * sum(range(20))
    assert r.value["refused"] == "no reason"
    assert r.value["missing"] == ["get", "'zz'"]
    assert r.value["not_json"].startswith("t.when returned a value that cannot cross as JSON: $: object is not")
    assert r.value["a"] == 1
    assert "double(*, x)" in r.value["help"]

    async def on_a_loop():
        loop = asyncio.get_running_loop()
        on = []

        async def where():
            on.append(asyncio.get_running_loop() is loop)
            return request.get()

        request.set("req-2")
        r = await api.arun("return await t.where()", {"t": {"where": where}})
        return r.value, on

    assert asyncio.run(on_a_loop()) == ("req-2", [True])  # async bindings of arun: on the caller's loop


def test_bindings_are_checked_with_the_same_messages(api):
    with pytest.raises(pycage.InvalidBindingsError, match=r"bindings\['tools'\]\['f'\] is not callable"):
        api.run("return 1", bindings={"tools": {"f": 3}})
    with pytest.raises(pycage.InvalidBindingsError, match="invalid bindings: "):
        api.run("return 1", bindings={"print": {"f": len}})
    with pytest.raises(pycage.InvalidBindingsError, match="invalid bindings: "):
        api.check_bindings({"print": {"f": len}})
    api.check_bindings({"tools": {"f": len}})
    with pytest.raises(pycage.InvalidBindingsError):
        api.session({"class": {}})


# -- files


def test_inputs_and_output_dir(api, tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("1,2,3")
    folder = tmp_path / "folder"
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "a.txt").write_text("A")
    out = tmp_path / "results"
    program = """\
import os
total = sum(int(x) for x in open('data.csv').read().split(','))
os.mkdir('out/sub')
open('out/sum.txt', 'w').write(str(total))
open('out/sub/a.txt', 'w').write(open('folder/deep/a.txt').read() * 3)
os.symlink('/etc/passwd', 'out/link')
return [total, sorted(os.listdir('.'))]
"""
    r = api.run(program, inputs=[data, str(folder)], output_dir=out)
    assert r.value == [6, ["data.csv", "folder", "out"]], r
    assert sorted(r.files, key=lambda f: f.path) == [pycage.OutputFile("sub/a.txt", 3), pycage.OutputFile("sum.txt", 1)]
    assert [(s.path, s.kind) for s in r.skipped_files] == [("link", "excluded")]
    assert (out / "sum.txt").read_text() == "6" and (out / "sub" / "a.txt").read_text() == "AAA"

    # Nothing that exists in output_dir is written: a rerun's copies are skipped.
    again = asyncio.run(api.arun("open('out/sum.txt', 'w').write('7')\nopen('out/new.txt', 'w')", output_dir=out))
    assert again.files == [pycage.OutputFile("new.txt", 0)]
    assert [(s.path, s.kind, "not overwritten" in s.reason) for s in again.skipped_files] == [
        ("sum.txt", "failed", True)
    ]
    assert (out / "sum.txt").read_text() == "6"

    # Without output_dir, nothing is copied or listed (out/ may not exist).
    quiet = api.run("import os\nos.makedirs('out', exist_ok=True)\nopen('out/x', 'w').write('y')")
    assert quiet.ok and quiet.files == [] and quiet.skipped_files == []


def test_output_dir_is_bounded(transport, tmp_path):
    small = transport.new(max_output_bytes=1000)
    r = small.run(
        "open('out/a.txt', 'w').write('a' * 600)\nopen('out/b.txt', 'w').write('b' * 600)\nreturn 1",
        output_dir=tmp_path / "o",
    )
    assert r.value == 1 and len(r.files) == 1 and r.files[0].bytes == 600, r
    (skipped,) = r.skipped_files
    assert skipped.kind == "limit" and skipped.path != r.files[0].path
    assert sorted(os.listdir(tmp_path / "o")) == [r.files[0].path]


def test_file_arguments_are_checked_with_the_same_messages(api, tmp_path):
    with pytest.raises(TypeError, match=rf"{owner(api)}.run: inputs must be a list of paths"):
        api.run("1", inputs="data.csv")
    with pytest.raises(TypeError, match=r"inputs items must be paths .*got int 1"):
        api.run("1", inputs=[1])
    with pytest.raises(TypeError, match="output_dir must be a path"):
        api.run("1", output_dir=3)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("1")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("2")
    (tmp_path / "out").write_text("")
    missing = str(tmp_path / "missing")
    cases = {
        missing: [missing],
        f"input {tmp_path}/out: the name `out` is the output directory": [tmp_path / "out"],
        'two inputs are named "x"; each appears under its base name': [tmp_path / "a" / "x", tmp_path / "b" / "x"],
    }
    for message, inputs in cases.items():
        with pytest.raises(pycage.PycageError) as e:
            api.run("1", inputs=inputs)
        assert str(e.value).startswith("invalid input: ") and message in str(e.value), str(e.value)
    with pytest.raises(pycage.PycageError, match=r"No such file or directory \(os error 2\)"):
        api.run("1", inputs=[missing])


# -- sessions


def test_sessions(api):
    with api.session(key="user-1") as s:
        assert s.key == "user-1"
        assert s.run("x = 20\ndef f(y):\n    return x + y").ok
        shown = []
        r = s.run("x += 1\ndisplay(x)\nprint('in')\nf(21)", on_log=shown.append, on_display=shown.append)
        assert (r.value, shown[0].text, shown[1]) == (42, "21", "in")
        assert asyncio.run(s.arun("return x")).value == 21
        assert s.ended is None
    assert s.ended is not None
    with pytest.raises(pycage.SessionEndedError, match="the session has ended"):
        s.run("return x")
    with api.session() as s:
        assert len(s.key) == 32  # a random one


def test_a_session_with_bindings(api):
    seen = []

    def record(item):
        seen.append(item)
        return len(seen)

    async def double(x):
        return 2 * x

    with api.session({"ns": {"record": record, "double": double}}) as s:
        assert s.run("n = await ns.record('a')\nreturn n").value == 1
        r = asyncio.run(
            s.arun("import asyncio\nreturn n + sum(await asyncio.gather(*[ns.double(i) for i in range(5)]))")
        )
        assert r.value == 21
    assert seen == ["a"]


def test_a_timeout_ends_a_session(api):
    s = api.session()
    assert s.run("x = 1").ok
    assert s.run("raise KeyError('k')").error.kind == "exception"
    assert s.run("return x").value == 1
    r = s.run("while True: pass")
    assert r.error.kind == "timeout" and "timeout" in s.ended
    with pytest.raises(pycage.SessionEndedError, match="the session has ended: .*timeout"):
        s.run("return x")
    s.close()


def test_session_arguments_are_checked_with_the_same_messages(api):
    where = f"invalid {owner(api)}.session argument"
    with pytest.raises(
        pycage.ConfigError, match=f"{where}: idle_timeout_seconds must be a finite number greater than 0"
    ):
        api.session(idle_timeout_seconds=0)
    with pytest.raises(TypeError, match="max_lifetime_seconds must be a number of seconds, got str"):
        api.session(max_lifetime_seconds="1h")
    with pytest.raises(pycage.ConfigError, match=f"{where}: address_space_bytes must be at least"):
        api.session(address_space_bytes=1)
    with pytest.raises(TypeError, match="key must be a str or None, got int 3"):
        api.session(key=3)


def test_a_session_run_inside_one_of_its_runs_is_refused(api):
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

    with api.session({"ns": {"again": again}}) as s:
        assert within(120, inside) == ("outer", [True], True, 2)


def test_closing_a_session_from_its_own_run_stops_that_run(api):
    s = api.session()
    r = within(60, lambda: s.run("print('up', flush=True)\nimport time\ntime.sleep(60)", on_log=lambda _: s.close()))
    assert (r.error.kind, r.error.message) == ("abort", "the session was closed")
    with pytest.raises(pycage.SessionEndedError):
        s.run("1")


# -- waiting, closing


def test_wait_idle(api):
    assert api.wait_idle(30) is True
    assert api.run("return 1").ok
    assert asyncio.run(api.await_idle(30)) is True
    entered, gate = threading.Event(), threading.Event()

    def held():
        entered.set()
        return gate.wait(60)

    run = threading.Thread(target=lambda: api.run("return await ns.held()", {"ns": {"held": held}}))
    run.start()
    try:
        assert entered.wait(60)
        assert api.wait_idle(0.2) is False  # a run is in flight until the gate opens
    finally:
        gate.set()
        run.join(60)
    assert api.wait_idle(30) is True
    with pytest.raises(pycage.ConfigError, match=rf"invalid {owner(api)}.wait_idle argument: timeout must be"):
        api.wait_idle(-1)


def test_cancelling_arun_kills_the_child(api):
    async def main():
        got = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(
            api.arun(
                "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(3600)",
                on_log=lambda line: got.done() or got.set_result(int(line)),
            )
        )
        pid = await asyncio.wait_for(got, 60)
        assert pid in child_pids()  # process isolation: a descendant of this process
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    pid = asyncio.run(main())
    assert api.wait_idle(60)
    assert pid not in child_pids()


def test_closing_aborts_runs_in_flight_and_later_runs_raise(transport):
    rt = transport.new()
    session = rt.session()
    assert session.run("x = 1").ok
    r = within(60, lambda: rt.run("print('up', flush=True)\nimport time\ntime.sleep(60)", on_log=lambda _: rt.close()))
    assert (r.error.kind, r.error.message) == ("abort", "the runtime was shut down")
    assert rt.closed
    with pytest.raises(pycage.RuntimeClosedError, match=f"the runtime is closed; create a new {owner(rt)}"):
        rt.run("return 1")
    with pytest.raises(pycage.RuntimeClosedError, match="the runtime is closed"):
        session.run("return x")
    assert session.ended == "it was closed, or the runtime was shut down"
    session.close()
    rt.close()  # idempotent
    assert rt.wait_idle(0) is True  # nothing is in flight on a closed runtime


def test_context_managers(transport):
    with transport.new() as rt:
        assert rt.run("return 1").value == 1
    assert rt.closed

    async def main():
        async with transport.new() as rt:
            assert (await rt.arun("return 2")).value == 2
            async with rt.session() as s:
                assert (await s.arun("return 3")).value == 3
        return rt.closed

    assert asyncio.run(main())
