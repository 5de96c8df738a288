"""Fixtures shared by the pycage package tests.

Every test runs real programs in real CPython children. Sandbox isolation
(the default) needs kernel support (user namespaces, Landlock, seccomp);
where it is missing its tests skip, and fail instead when
PYCAGE_REQUIRE_ALL_TESTS=1 (CI sets it).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

import pycage

REQUIRE_ALL = os.environ.get("PYCAGE_REQUIRE_ALL_TESTS") == "1"


def unavailable(reason: str) -> None:
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (PYCAGE_REQUIRE_ALL_TESTS=1 forbids skipping)")
    pytest.skip(reason)


def within(seconds: float, f: Callable[[], Any]) -> Any:
    """``f()`` on a thread of its own; fails the test if it has not returned
    within ``seconds`` (a deadlock: the thread is left blocked)."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append((True, f()))
        except BaseException as e:  # noqa: B036 (re-raised on the test's thread)
            out.append((False, e))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if not out:
        pytest.fail(f"did not return within {seconds} s: deadlocked")
    ok, got = out[0]
    if not ok:
        raise got
    return got


@pytest.fixture(scope="session")
def process_rt():
    rt = pycage.Runtime(isolation="process", python=sys.executable)
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def sandbox_rt():
    try:
        rt = pycage.Runtime(python=sys.executable)
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    yield rt
    rt.close()


@pytest.fixture(params=["process", "sandbox"])
def rt(request):
    """A shared runtime of each isolation."""
    return request.getfixturevalue(f"{request.param}_rt")


def child_pids() -> set[int]:
    """Live (non-zombie) descendants of this process: run processes are
    children of the zygote, itself a child of this process."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def open_runtimes() -> list[pycage.Runtime]:
    """Every ``pycage.Runtime`` of this process that is not closed (the
    session and module fixtures' among them; not one whose construction
    raised)."""
    return [o for o in gc.get_objects() if isinstance(o, pycage.Runtime) and "_closed" in vars(o) and not o.closed]


def settled_child_pids() -> set[int]:
    """``child_pids()`` once every open runtime of this process is idle.

    The shared runtimes of the fixtures refill their pools in the
    background after each run (a sandboxed child's shell is built on a
    thread of its own); a snapshot taken while that happens would count
    their new children as the test's leftovers. ``wait_idle`` returns once
    nothing of theirs is in flight and each pool is full.
    """
    for rt in open_runtimes():
        assert rt.wait_idle(60), f"{rt!r} did not settle within 60 s"
    return child_pids()
