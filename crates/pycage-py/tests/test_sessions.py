"""Sessions: one process whose globals live across runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

import pycage
from conftest import child_pids, settled_child_pids, within


def test_globals_live_across_runs(rt):
    with rt.session() as s:
        assert s.run("x = 20\ndef f(y):\n    return x + y").ok
        assert s.run("x += 1\nf(21)").value == 42
        assert s.run("return x").value == 21
        assert s.ended is None
    assert s.ended is not None


def test_bindings_in_a_session_sync_and_async(process_rt):
    seen = []

    def record(item):
        seen.append(item)
        return len(seen)

    async def double(x):
        await asyncio.sleep(0)
        return 2 * x

    with process_rt.session({"ns": {"record": record, "double": double}}) as s:
        assert s.run("n = await ns.record('a')\nreturn n").value == 1
        r = asyncio.run(
            s.arun("import asyncio\nreturn n + sum(await asyncio.gather(*[ns.double(i) for i in range(5)]))")
        )
        assert r.value == 1 + 20
        assert s.run("return await ns.record(item='b')").value == 2
    assert seen == ["a", "b"]


def test_a_failed_run_keeps_the_session_but_a_timeout_ends_it():
    with pycage.Runtime(isolation="process", wall_seconds=1) as rt:
        s = rt.session()
        assert s.run("x = 1").ok
        r = s.run("raise ValueError('in a session')")
        assert r.error.kind == "exception"
        assert s.run("return x").value == 1  # an exception does not end it
        r = s.run("while True: pass")
        assert r.error.kind == "timeout"
        assert s.ended is not None and "timeout" in s.ended
        with pytest.raises(pycage.SessionEndedError, match="the session has ended"):
            s.run("return x")
        s.close()


def test_session_events_and_cancellation(process_rt):
    lines = []
    s = process_rt.session()
    r = s.run("for i in range(3): print('line', i)", on_log=lines.append)
    assert r.ok and lines == ["line 0", "line 1", "line 2"]

    async def main():
        task = asyncio.ensure_future(s.arun("import time\ntime.sleep(3600)"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if s.ended:
                break
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert s.ended is not None
    s.close()


def test_closing_the_runtime_ends_its_sessions_and_reaps_them():
    before = settled_child_pids()
    rt = pycage.Runtime(isolation="process")
    sessions = [rt.session() for _ in range(3)]
    for i, s in enumerate(sessions):
        assert s.run(f"x = {i}").ok
    up = threading.Event()
    results = []
    t = threading.Thread(
        target=lambda: results.append(
            sessions[0].run("print('up', flush=True)\nimport time\ntime.sleep(3600)", on_log=lambda _: up.set())
        )
    )
    t.start()
    assert up.wait(30)
    rt.close()
    t.join(30)
    assert results[0].error.kind == "abort"
    for s in sessions:
        with pytest.raises((pycage.SessionEndedError, pycage.RuntimeClosedError)):
            s.run("return x")
    assert child_pids() - before == set()


def test_session_arguments_are_checked(process_rt):
    with pytest.raises(
        pycage.ConfigError, match="idle_timeout_seconds must be a finite number greater than 0, got 0.0"
    ):
        process_rt.session(idle_timeout_seconds=0)
    with pytest.raises(TypeError, match="max_lifetime_seconds must be a number of seconds, got str"):
        process_rt.session(max_lifetime_seconds="1h")  # type: ignore[arg-type]
    with pytest.raises(pycage.InvalidBindingsError):
        process_rt.session({"class": {}})


BUSY = "from inside one of its runs"


def test_a_run_of_a_session_inside_one_of_its_own_runs_is_refused(process_rt):
    # It would wait for the run it is part of; another session's or the
    # runtime's runs work from there.
    within(120, lambda: refused_inside_own_runs(process_rt))


def refused_inside_own_runs(process_rt):
    def again():
        return s.run("1").value

    async def again_async():
        return (await s.arun("1")).value

    bindings = {"ns": {"again": again, "again_async": again_async}}
    with process_rt.session(bindings) as s, process_rt.session() as other:
        seen = []

        def on_log(line):
            with pytest.raises(pycage.SessionBusyError, match=BUSY):
                s.run("1")
            seen.append((other.run(f"{line} * 2").value, process_rt.run(f"{line} + 1").value))

        r = s.run("print(20, flush=True)\nreturn 'outer'", on_log=on_log)
        assert (r.value, seen) == ("outer", [(40, 21)])

        # From a binding, sync or async, of a blocking or an async run.
        catch = "try:\n    await ns.{}()\nexcept Exception as e:\n    return str(e)"
        for binding in ("again", "again_async"):
            assert BUSY in s.run(catch.format(binding)).value
            assert BUSY in asyncio.run(s.arun(catch.format(binding))).value

        # A blocking run from an async run's callback, on the loop the run needs.
        async def main():
            refused = []

            def on_log(_line):
                with pytest.raises(pycage.SessionBusyError, match=BUSY):
                    s.run("1")
                refused.append(True)

            r = await s.arun("print('up')\nreturn 'async'", on_log=on_log)
            return r.value, refused

        assert asyncio.run(main()) == ("async", [True])
        # Runs in turn from other threads and loops are not refused.
        results = []
        threads = [threading.Thread(target=lambda: results.append(s.run("1").value)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [1] * 4
        assert s.run("2").value == 2


def test_a_session_closed_from_its_own_runs_callback_stops_that_run(process_rt):
    s = process_rt.session()
    r = within(60, lambda: s.run("print('up', flush=True)\nimport time\ntime.sleep(60)", on_log=lambda _: s.close()))
    assert (r.error.kind, r.error.message) == ("abort", "the session was closed")
    with pytest.raises(pycage.SessionEndedError):
        s.run("1")
