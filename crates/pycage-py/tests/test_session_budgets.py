"""Sessions keep the run-wide budgets through the Python package: a cell is
bounded across all the session's processes, and CPU spent between cells
ends the session."""

import time

import pytest

import pycage

HOLD = """
import os, time
for _ in range(6):
    if os.fork() == 0:
        b = bytearray(100 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        time.sleep(60)
        os._exit(0)
time.sleep(10)
'held'
"""

SPIN = """
import threading
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
1
"""


def test_a_cell_is_bounded_across_its_children():
    with pycage.Runtime(isolation="process", address_space_bytes=256 << 20) as rt:
        with rt.session() as s:
            result = s.run(HOLD)
            assert result.error is not None and result.error.kind == "worker-exit", result
            assert "memory budget" in result.error.message
            with pytest.raises(pycage.SessionEndedError):
                s.run("1")


def test_cpu_between_cells_ends_the_session():
    # The session's 2 s of CPU between runs, with time enough to spend it on
    # a loaded machine (the spinning thread may get a small share of a core).
    with pycage.Runtime(isolation="process") as rt:
        with rt.session() as s:
            assert s.run(SPIN).value == 1
            deadline = time.monotonic() + 180
            with pytest.raises(pycage.SessionEndedError, match="of CPU between runs"):
                while time.monotonic() < deadline:
                    s.run("1")
                    time.sleep(0.2)
