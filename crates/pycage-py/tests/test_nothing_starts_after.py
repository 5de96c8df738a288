"""Nothing starts after a run ends: sync bindings still queued when the run
settles never run (a 0.5 s binding gathered 3,000 times by a run with a
1.5 s wall clock: before the fix, about 1,300 calls started after the
settle)."""

import threading
import time

import pycage


def test_no_sync_binding_starts_after_the_run_settles():
    starts = []
    lock = threading.Lock()

    def slow(i):
        with lock:
            starts.append(time.monotonic())
        time.sleep(0.5)
        return i

    program = "import asyncio\nreturn len(await asyncio.gather(*(tools.slow(i=i) for i in range(3000))))"
    with pycage.Runtime(isolation="process", wall_seconds=1.5) as rt:
        result = rt.run(program, bindings={"tools": {"slow": slow}})
        settled = time.monotonic()
        assert result.error is not None and result.error.kind == "timeout", result
        time.sleep(2.0)
    with lock:
        after = [t for t in starts if t > settled]
        before = len(starts) - len(after)
    assert before > 0, "no call started at all: the test proves nothing"
    assert after == [], f"{len(after)} calls started after the run settled ({before} before)"
