"""Every outcome kind of a run, in both isolations."""

from __future__ import annotations

import threading
import time

import pycage


def test_success_value_logs(rt):
    r = rt.run("print('a'); import sys; print('b', file=sys.stderr); return {'x': [1, 2.5, None, True]}")
    assert r == pycage.Result(value={"x": [1, 2.5, None, True]}, logs=["a", "b"], error=None, has_value=True)
    assert r.ok and r.unwrap() == {"x": [1, 2.5, None, True]}


def test_no_value_versus_none(rt):
    assert rt.run("x = 1").has_value is False
    r = rt.run("return None")
    assert (r.has_value, r.value, r.error) == (True, None, None)
    r = rt.run("x = 2\nx + 1")  # a final expression is the value
    assert (r.has_value, r.value) == (True, 3)


def test_exception(rt):
    r = rt.run("print('before')\nraise ValueError('bad input')")
    assert r.error.kind == "exception"
    assert 'File "<program>", line 2' in r.error.message
    assert r.error.message.endswith("ValueError: bad input")
    assert r.logs == ["before"]
    assert r.value is None and not r.has_value
    try:
        r.unwrap()
    except pycage.RunError as e:
        assert (e.kind, e.logs) == ("exception", ["before"])
        assert e.message == r.error.message
    else:
        raise AssertionError("unwrap did not raise")


def test_syntax_error(rt):
    r = rt.run("x = (")
    assert r.error.kind == "exception"
    assert "SyntaxError" in r.error.message


def test_wall_timeout():
    with pycage.Runtime(isolation="process", wall_seconds=0.5) as rt:
        r = rt.run("print('spinning', flush=True)\nwhile True: pass")
    assert r.error.kind == "timeout"
    assert "wall-clock budget of 500 ms" in r.error.message
    assert r.logs == ["spinning"]


def test_cpu_timeout():
    with pycage.Runtime(isolation="process", cpu_seconds=1) as rt:
        r = rt.run("while True: pass")
    assert r.error.kind == "timeout"
    assert "CPU budget of 1 s" in r.error.message


def test_worker_exit(rt):
    r = rt.run("import os\nprint('bye', flush=True)\nos._exit(3)")
    assert r.error.kind == "worker-exit"
    assert "exit" in r.error.message and "3" in r.error.message
    assert r.logs == ["bye"]


def test_invalid_output(rt):
    r = rt.run("return {'a': [1, {2, 3}]}")
    assert r.error.kind == "invalid-output"
    assert "$.a[1]" in r.error.message and "set" in r.error.message


def test_output_limit():
    with pycage.Runtime(isolation="process", max_value_bytes=100) as rt:
        r = rt.run("return 'x' * 200")
    assert r.error.kind == "output-limit"


def test_log_truncation():
    with pycage.Runtime(isolation="process", max_log_bytes=50) as rt:
        r = rt.run("for i in range(100): print('line', i)\nreturn 'done'")
    assert r.value == "done"
    assert r.logs[-1] == "[pycage] log capture truncated at 50 bytes"


def test_abort_when_closed_during_a_run():
    rt = pycage.Runtime(isolation="process")
    started = threading.Event()
    results = []

    def run():
        results.append(rt.run("print('up', flush=True)\nimport time\ntime.sleep(60)", on_log=lambda _: started.set()))

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(30)
    t0 = time.monotonic()
    rt.close()
    t.join(30)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 30
    (r,) = results
    assert r.error.kind == "abort"
    assert "shut down" in r.error.message
    assert r.logs == ["up"]
