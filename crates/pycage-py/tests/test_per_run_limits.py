"""A run may override the runtime's wall clock, CPU and memory budgets for
itself, through the zygote's pre-forked children too."""

import asyncio

import pytest

import pycage

TOUCH_300_MIB = """
b = bytearray(300 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
import time
time.sleep(2)
1
"""


def test_a_run_gets_its_own_budgets_from_a_pooled_child():
    with pycage.Runtime(isolation="process", spawn="zygote", pool_size=2) as rt:
        assert rt.run("1").value == 1  # the pool is warm: later runs take pre-forked children
        r = rt.run("import time\ntime.sleep(5)", wall_seconds=0.5)
        assert r.error.kind == "timeout" and "500 ms" in r.error.message, r
        r = rt.run("while True:\n    pass", cpu_seconds=1)
        assert r.error.kind == "timeout" and "CPU budget of 1 s" in r.error.message, r
        r = rt.run(TOUCH_300_MIB, address_space_bytes=128 << 20)
        assert r.error.kind == "worker-exit" and "memory budget of 128 MiB" in r.error.message, r
        # The runtime's own budgets are untouched.
        assert rt.run(TOUCH_300_MIB).value == 1
        assert rt.config["wall_seconds"] == 60


def test_per_run_limits_are_checked_and_only_per_run_budgets_are_taken():
    with pycage.Runtime(isolation="process", spawn="exec") as rt:
        with pytest.raises(pycage.ConfigError, match="wall_seconds must be at least 0.001 s"):
            rt.run("1", wall_seconds=0)
        with pytest.raises(TypeError, match="budgets: address_space_bytes, cpu_seconds, wall_seconds"):
            rt.run("1", max_log_bytes=10)
        assert asyncio.run(rt.arun("2", wall_seconds=5)).value == 2
