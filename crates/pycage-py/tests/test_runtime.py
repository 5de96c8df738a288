"""The Runtime object: configuration, lifecycle, threads, asyncio, events."""

from __future__ import annotations

import asyncio
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pycage
from conftest import child_pids, settled_child_pids, within

HANG = "print('up', flush=True)\nimport time\ntime.sleep(3600)"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"isolation": "vm"}, pycage.ConfigError, 'isolation must be "sandbox" or "process", got \'vm\''),
        ({"wall_seconds": 0}, pycage.ConfigError, "wall_seconds must be at least 0.001 s, got 0"),
        ({"wall_seconds": -1}, pycage.ConfigError, "wall_seconds must be at least 0.001 s, got -1"),
        ({"wall_seconds": float("nan")}, pycage.ConfigError, "wall_seconds must be at least 0.001 s, got nan"),
        ({"cpu_seconds": "10"}, TypeError, "cpu_seconds must be an int, got str '10'"),
        ({"cpu_seconds": 1.5}, TypeError, "cpu_seconds must be an int, got float 1.5"),
        ({"cpu_seconds": 0}, pycage.ConfigError, "cpu_seconds must be at least 1 s, got 0"),
        ({"address_space_bytes": 1024}, pycage.ConfigError, "address_space_bytes must be at least 67108864 bytes"),
        ({"max_log_bytes": True}, TypeError, "max_log_bytes must be an int, got bool True"),
        ({"python": 3}, TypeError, "python must be a path"),
        ({"allow_read": "/usr"}, TypeError, "allow_read must be a list of paths"),
    ],
)
def test_bad_arguments_name_what_was_passed(kwargs, error, message):
    with pytest.raises(error) as e:
        pycage.Runtime(**{"isolation": "process", **kwargs})
    assert message in str(e.value)


MIB = 1 << 20


def _table_cases():
    """For every budget keyword of the budgets table: the bound accepted,
    one past it refused, and the bound the message must state."""
    from pycage import _budgets

    suffix = {"bytes": " bytes", "MiB": " MiB", "ms": " ms", "s": " s", "count": ""}
    cases = []
    for name, (_field, unit, _fu, kw_scale, field_scale, low, high, _d, _pr) in _budgets.BUDGETS.items():
        fraction = kw_scale > field_scale
        step = field_scale / kw_scale if fraction else 1

        def kw(x, f=field_scale, k=kw_scale, frac=fraction):
            v = x * f / k
            return v if frac else int(v)

        def shown(x, frac=fraction):
            return f"{x:g}" if frac else str(x)

        if high is None:
            bound = f"at least {shown(kw(low))}{suffix[unit]}" if low else ">= 0"
        elif not low:
            bound = f"at most {shown(kw(high))}{suffix[unit]}"
        else:
            bound = f"between {shown(kw(low))} and {shown(kw(high))}{suffix[unit]}"
        if low and name != "max_control_bytes":
            cases.append((name, kw(low), kw(low) - step, bound))
        if high is not None and high < 1 << 40:
            cases.append((name, kw(high), kw(high) + step, bound))
    return cases


@pytest.mark.parametrize(("name", "ok", "bad", "bound"), _table_cases())
def test_each_validation_message_states_the_real_bound(name, ok, bad, bound):
    """The value at the bound is accepted; one past it is refused with a
    message that states that bound (``wall_seconds=-1`` said ">= 0", and 0
    was refused too): every keyword of the budgets table."""
    extra = {"max_line_bytes": 1024} if name == "max_control_bytes" else {}
    pycage.Runtime(isolation="process", spawn="exec", **{name: ok, **extra}).close()
    with pytest.raises(pycage.ConfigError) as e:
        pycage.Runtime(isolation="process", spawn="exec", **{name: bad, **extra})
    assert f"{name} must be {bound}" in str(e.value)


def test_every_budget_keyword_is_checked():
    names = {case[0] for case in _table_cases()}
    assert {"wall_seconds", "cpu_seconds", "address_space_bytes", "max_calls_in_flight", "grace_seconds"} <= names


def test_max_control_bytes_is_at_least_max_line_bytes():
    with pytest.raises(pycage.ConfigError) as e:
        pycage.Runtime(isolation="process", spawn="exec", max_line_bytes=8 * MIB, max_control_bytes=8 * MIB - 1)
    assert "max_control_bytes must be at least max_line_bytes" in str(e.value)


def test_session_arguments_state_their_bounds(process_rt):
    for kwargs, message in [
        ({"idle_timeout_seconds": 0}, "idle_timeout_seconds must be a finite number greater than 0, got 0.0"),
        ({"max_lifetime_seconds": -1}, "max_lifetime_seconds must be a finite number greater than 0, got -1.0"),
        ({"address_space_bytes": MIB}, "address_space_bytes must be at least 67108864: 64 MiB"),
    ]:
        with pytest.raises(pycage.ConfigError) as e:
            process_rt.session(**kwargs)
        assert message in str(e.value)


def test_version_is_the_installed_distributions():
    import importlib.metadata

    assert isinstance(pycage.__version__, str) and pycage.__version__
    # The distribution is pycage-run (pycage on the index is another project).
    assert pycage.__version__ == importlib.metadata.version("pycage-run")


def test_missing_interpreter():
    with pytest.raises(pycage.InterpreterError, match="/no/such/python"):
        pycage.Runtime(isolation="process", python="/no/such/python")


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="wall_ms"):
        pycage.Runtime(wall_ms=10)  # type: ignore[call-arg]


def test_config_reports_effective_values(process_rt):
    c = process_rt.config
    assert c["isolation"] == "process"
    assert c["wall_seconds"] == 60.0 and c["cpu_seconds"] == 30
    assert c["address_space_bytes"] == 512 << 20 and c["max_value_bytes"] == 1 << 20
    assert os.path.isabs(c["python"])
    assert "isolation='process'" in repr(process_rt)


def test_code_must_be_str(process_rt):
    with pytest.raises(TypeError, match="code must be a str holding a Python program, got bytes"):
        process_rt.run(b"return 1")  # type: ignore[arg-type]


def test_close_is_idempotent_and_later_runs_raise():
    rt = pycage.Runtime(isolation="process")
    assert rt.run("return 1").value == 1
    rt.close()
    rt.close()
    assert rt.closed
    with pytest.raises(pycage.RuntimeClosedError, match="create a new pycage.Runtime"):
        rt.run("return 1")
    with pytest.raises(pycage.RuntimeClosedError):
        asyncio.run(rt.arun("return 1"))


def test_wait_idle_returns_once_runs_are_reaped_and_the_pool_is_full():
    before = settled_child_pids()
    rt = pycage.Runtime(isolation="process", python=sys.executable, pool_size=2)
    try:
        for i in range(3):
            assert rt.run(f"return {i}").value == i
        assert rt.wait_idle(30)
        # The zygote and its two ready children; no run's child is left.
        assert len(child_pids() - before) == 3
        up = threading.Event()
        results = []
        t = threading.Thread(target=lambda: results.append(rt.run(HANG, on_log=lambda _: up.set())))
        t.start()
        assert up.wait(30)
        # The run sleeps for an hour: never idle meanwhile.
        assert not rt.wait_idle(0.1)
    finally:
        rt.close()
    t.join(30)
    assert results[0].error.kind == "abort"
    assert rt.wait_idle(0)


def test_context_managers():
    with pycage.Runtime(isolation="process") as rt:
        assert rt.run("return 2").value == 2
    assert rt.closed

    async def main():
        async with pycage.Runtime(isolation="process") as art:
            assert (await art.arun("return 3")).value == 3
        return art

    assert asyncio.run(main()).closed


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_no_leftover_process_after_close(isolation, request):
    if isolation == "sandbox":
        request.getfixturevalue("sandbox_rt")  # skips (or fails under CI) without a sandbox
    before = settled_child_pids()
    rt = pycage.Runtime(isolation=isolation, python=sys.executable)
    up = threading.Barrier(5)
    results = []

    def run():
        results.append(rt.run(HANG + "\n", on_log=lambda _: up.wait(30)))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    up.wait(30)
    assert len(child_pids() - before) >= 4
    rt.close()
    for t in threads:
        t.join(30)
    assert [r.error.kind for r in results] == ["abort"] * 4
    assert child_pids() - before == set()


def test_runs_from_many_threads_at_once(rt):
    def work(i):
        return lambda x: x + i

    errors = []
    results = {}

    def run(i):
        try:
            r = rt.run(
                "import asyncio\nvals = await asyncio.gather(*[ns.f(k) for k in range(20)])\n"
                f"print('thread {i}')\nreturn sum(vals)",
                {"ns": {"f": work(i)}},
            )
            results[i] = r
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for i in range(8):
        assert results[i].value == sum(range(20)) + 20 * i
        assert results[i].logs == [f"thread {i}"]


def test_programs_are_ordinary_processes_for_the_scheduler(rt):
    # The runtime's threads are background threads (SCHED_BATCH: waking one
    # never preempts a run's caller or its program); a program never
    # inherits that: what runs programs resets to SCHED_OTHER.
    where = {}

    def policy():
        where["binding"] = os.sched_getscheduler(0)
        return 0

    r = rt.run("import os\nawait tools.policy()\nreturn os.sched_getscheduler(0)", {"tools": {"policy": policy}})
    assert r.error is None, r.error
    assert r.value == os.SCHED_OTHER
    # A sync binding runs on the runtime's blocking pool: a background thread.
    assert where["binding"] == os.SCHED_BATCH, where


def test_concurrent_aruns(process_rt):
    async def main():
        return await asyncio.gather(*[process_rt.arun(f"return {i} * 2") for i in range(6)])

    assert [r.value for r in asyncio.run(main())] == [0, 2, 4, 6, 8, 10]


def test_streaming_events_in_order(rt):
    events = []

    def double(x):
        return x * 2

    r = rt.run(
        "print('one')\nv = await ns.double(21)\nprint('two', v)\n"
        "try:\n    await ns.fail(0)\nexcept RuntimeError:\n    pass\nreturn v",
        {"ns": {"double": double, "fail": lambda _: 1 / 0}},
        on_log=lambda line: events.append(("log", line)),
        on_call=events.append,
    )
    assert r.value == 42
    assert events == [
        ("log", "one"),
        pycage.CallStarted(0, "ns", "double", 21),
        pycage.CallFinished(0, "ns", "double", None),
        ("log", "two 42"),
        pycage.CallStarted(1, "ns", "fail", 0),
        pycage.CallFinished(1, "ns", "fail", "division by zero"),
    ]


def test_streaming_events_on_the_loop(process_rt):
    async def main():
        loop = asyncio.get_running_loop()
        seen = []

        def on_log(line):
            assert asyncio.get_running_loop() is loop
            seen.append(line)

        r = await process_rt.arun("for i in range(3): print(i)\nreturn 'ok'", on_log=on_log)
        return r, seen

    r, seen = asyncio.run(main())
    assert (r.value, seen) == ("ok", ["0", "1", "2"])


class Stop(Exception):
    pass


def test_a_callback_exception_aborts_the_run_and_is_raised(process_rt):
    def on_log(line):
        raise Stop(line)

    t0 = time.monotonic()
    with pytest.raises(Stop, match="up"):
        process_rt.run(HANG, on_log=on_log)
    assert time.monotonic() - t0 < 30

    async def main():
        with pytest.raises(Stop, match="up"):
            await process_rt.arun(HANG, on_log=on_log)

    asyncio.run(main())


def test_a_callback_may_run_programs_and_close_a_runtime():
    # A blocking run's callbacks run on its caller's thread, inside the wait
    # that delivers them: a run from there is driven to its end first.
    within(120, callbacks_run_programs_and_close)


def callbacks_run_programs_and_close():
    seen = []
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:
        r = rt.run(
            "for i in range(3):\n    print(i, flush=True)\nreturn 'outer'",
            on_log=lambda line: seen.append(rt.run(f"{line} * 10").value),
        )
        assert (r.value, seen) == ("outer", [0, 10, 20])

        def close(_line):
            rt.close()

        r = rt.run("print('up', flush=True)\nimport time\ntime.sleep(60)", on_log=close)
    assert (r.error.kind, r.error.message) == ("abort", "the runtime was shut down")


def test_cancelling_arun_aborts_the_run_and_its_bindings():
    cancelled = threading.Event()
    before = settled_child_pids()

    async def main():
        rt = pycage.Runtime(isolation="process")
        running = asyncio.Event()

        async def block(_):
            running.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        task = asyncio.ensure_future(rt.arun("await ns.block(1)", {"ns": {"block": block}}))
        await asyncio.wait_for(running.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if cancelled.is_set() and child_pids() - before == set():
                break
            await asyncio.sleep(0.05)
        await rt.aclose()

    asyncio.run(main())
    assert cancelled.is_set(), "the binding's task was not cancelled"
    assert child_pids() - before == set()


def test_wait_for_timeout_aborts_the_run(process_rt):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(process_rt.arun(HANG), 0.5)

    asyncio.run(main())


def _interrupted_then_five(tmp_path, program):
    """Run `program` (which must end in a KeyboardInterrupt caught around a
    run, then a run returning 5) as a script; it must say so."""
    script = tmp_path / "interrupt.py"
    # A shell without job control starts background jobs with SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: a CI
    # run launched that way would test nothing (each run timed out at its
    # wall clock instead). The script restores what a terminal gives.
    restore = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    script.write_text(restore + textwrap.dedent(program))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interrupted", "after", "5"]


def test_ctrl_c_aborts_a_sync_run(tmp_path):
    _interrupted_then_five(
        tmp_path,
        """
        import os, signal, threading, pycage
        rt = pycage.Runtime(isolation="process")
        up = threading.Event()
        threading.Thread(target=lambda: (up.wait(30), os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
        try:
            r = rt.run("print('up', flush=True)\\nimport time\\ntime.sleep(3600)", on_log=lambda _: up.set())
            print("not-interrupted:", repr(r.error).replace(" ", "_"))  # shown by the assertion
        except KeyboardInterrupt:
            print("interrupted")
        print("after", rt.run("return 5").value)
        rt.close()
        """,
    )


def test_ctrl_c_aborts_a_sync_run_without_callbacks(tmp_path):
    # Without callbacks the run is driven on the calling thread until the
    # signal check hands it to a worker: the interrupt still aborts it.
    up = tmp_path / "up"
    _interrupted_then_five(
        tmp_path,
        f"""
        import os, signal, threading, time, pycage
        rt = pycage.Runtime(isolation="process")
        def interrupt():
            while not os.path.exists({str(up)!r}):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            r = rt.run("open({str(up)!r}, 'w').close()\\nimport time\\ntime.sleep(3600)")
            print("not-interrupted:", repr(r.error).replace(" ", "_"))  # shown by the assertion
        except KeyboardInterrupt:
            print("interrupted")
        print("after", rt.run("return 5").value)
        rt.close()
        """,
    )


def test_a_run_outliving_signal_checks_settles_on_the_main_thread(process_rt):
    # pytest runs this on the main thread: the run is handed to a worker at
    # the first signal check (every 0.1 s) and settles there.
    assert threading.current_thread() is threading.main_thread()
    r = process_rt.run("import time\ntime.sleep(0.35)\nprint('slept')\nreturn 3")
    assert (r.value, r.logs, r.error) == (3, ["slept"], None)


def test_use_after_fork_is_refused(process_rt):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            process_rt.run("return 1")
        except pycage.PycageError as e:
            code = 0 if "after fork" in str(e) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert process_rt.run("return 1").value == 1


def test_gil_is_released_while_a_run_waits(process_rt):
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        process_rt.run("import time\ntime.sleep(0.5)")
    finally:
        stop.set()
        t.join()
    assert ticks > 1000


def test_sandbox_shells_come_from_a_small_helper(sandbox_rt):
    """Sandbox shells are forked by the runtime's shell helper rather than
    by this process, whose page tables and heap a fork would copy. A wheel
    build (pip install .) embeds the helper as a program of its own,
    installed into pycage's cache; a build without it starts this
    interpreter, loading only the extension module."""
    from pycage import _native

    kind = _native._shell_helper_kind()
    # pip install . builds the module with the program (pyproject.toml).
    assert kind == "program"
    assert sandbox_rt.run("1 + 1").value == 2
    helpers = []
    for pid in child_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent != os.getpid():
            continue
        if os.path.basename(exe).startswith("shell-helper-") or any(
            a.endswith(b"m._serve_shell_helper()\n") for a in argv
        ):
            helpers.append((pid, exe))
    assert len(helpers) == 1, helpers
    pid, exe = helpers[0]
    # The program, from the cache, holding exactly what the module embeds
    # (the helper protocol refuses another build's helper).
    assert os.path.basename(exe).startswith("shell-helper-"), exe
    assert os.path.dirname(exe).endswith("pycage"), exe
    with open(f"/proc/{pid}/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    # A few MiB (an interpreter was about 11 MiB); far from a host's size.
    assert rss_kib < 64 * 1024, f"the helper holds {rss_kib} KiB"
    # Linked statically where the build found a static glibc (build.rs):
    # every fork and exit of a shell walks fewer mappings.
    cc = shutil.which("cc")
    libc_a = cc and subprocess.run([cc, "-print-file-name=libc.a"], capture_output=True, text=True).stdout.strip()
    if libc_a and os.path.isabs(libc_a) and platform.libc_ver()[0] == "glibc":
        with open(f"/proc/{pid}/maps") as f:
            libraries = {line.split()[-1] for line in f if re.search(r"\.so(\.|$)", line.rsplit("/", 1)[-1].strip())}
        assert not libraries, f"the helper maps shared libraries: {sorted(libraries)}"
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        assert f.read().split(), "the helper forked no shell (the pool's)"


def test_the_bundled_helper_is_installed_once_and_repaired(tmp_path):
    """The program is written into $XDG_CACHE_HOME/pycage under a name of
    its content; a file of another content under that name (a stale or
    damaged one) is replaced, and a cache that cannot take it leaves the
    interpreter as the helper. Each case in a fresh process: the choice is
    made once per process."""
    script = """
import os, sys, pycage
from pycage import _native
rt = pycage.Runtime(isolation="sandbox")
try:
    assert rt.run("1 + 1").value == 2
finally:
    rt.close()
print(_native._shell_helper_kind())
"""

    def start(cache):
        env = dict(os.environ, XDG_CACHE_HOME=str(cache))
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    cache = tmp_path / "cache"
    # The leftovers of installs killed before their rename: one two hours
    # old is removed, one just written (another process's install in
    # flight) is left alone.
    (cache / "pycage").mkdir(parents=True)
    stale, fresh = cache / "pycage" / "tmp-shell-helper-dead", cache / "pycage" / "tmp-shell-helper-live"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    assert start(cache) == "program"
    assert not stale.exists()
    assert fresh.exists()
    fresh.unlink()
    [installed] = (cache / "pycage").glob("shell-helper-*")
    content = installed.read_bytes()
    assert os.access(installed, os.X_OK)
    assert not list((cache / "pycage").glob("tmp-shell-helper-*"))
    # Damaged: cut short. The next process writes it whole again.
    installed.write_bytes(content[:1000])
    assert start(cache) == "program"
    assert installed.read_bytes() == content
    # A cache directory that is a file: nothing can be installed there.
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    assert start(blocked) == "interpreter"
    # The cache cleaned while a process runs: its next runtime starts the
    # interpreter (and its sandboxed runs still work).
    cleaned = """
import glob, os, pycage
from pycage import _native
kinds = []
for clean in (False, True):
    if clean:
        for path in glob.glob(os.path.join(os.environ["XDG_CACHE_HOME"], "pycage", "shell-helper-*")):
            os.unlink(path)
    rt = pycage.Runtime(isolation="sandbox")
    try:
        assert rt.run("1 + 1").value == 2
    finally:
        rt.close()
    kinds.append(_native._shell_helper_kind())
print(" ".join(kinds))
"""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cleaned"))
    out = subprocess.run([sys.executable, "-c", cleaned], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["program", "interpreter"]
