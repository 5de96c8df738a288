"""Issue 41: cells run back to back, each shorter than the watch's period,
that each keep 24 MiB more in a global cannot outgrow the session's memory
budget: the cell that crosses it ends the session."""

from __future__ import annotations

import pytest

import pycage
from conftest import unavailable

GROW = "held.append(b'x' * (24 << 20))\nlen(held)"


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_back_to_back_cells_cannot_outgrow_the_memory_budget(isolation):
    try:
        rt = pycage.Runtime(isolation=isolation, address_space_bytes=64 << 20)
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    with rt:
        with rt.session() as s:
            assert s.run("held = []").error is None
            ended_at = None
            for cell in range(1, 21):
                r = s.run(GROW)
                if r.error is not None:
                    assert r.error.kind == "worker-exit", r
                    assert "memory budget" in r.error.message, r
                    ended_at = cell
                    break
            assert ended_at is not None, "20 cells of 24 MiB fit a 64 MiB budget"
            assert ended_at <= 3, f"the session held {ended_at * 24} MiB before it ended"
            with pytest.raises(pycage.SessionEndedError):
                s.run("1")
