"""Fixtures shared by the pycage package tests.

Every test runs real programs in real CPython children. Sandbox isolation
(the default) needs kernel support (user namespaces, Landlock, seccomp);
where it is missing its tests skip, and fail instead when
PYCAGE_REQUIRE_ALL_TESTS=1 (CI sets it).
"""

from __future__ import annotations

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


#: The runtimes of the session fixtures, for ``settled_child_pids``.
_shared: list[pycage.Runtime] = []


@pytest.fixture(scope="session")
def process_rt():
    rt = pycage.Runtime(isolation="process", python=sys.executable)
    _shared.append(rt)
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def sandbox_rt():
    try:
        rt = pycage.Runtime(python=sys.executable)
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    _shared.append(rt)
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


def settled_child_pids(timeout: float = 60.0) -> set[int]:
    """``child_pids()`` once every shared runtime is idle.

    The shared runtimes of the session fixtures refill their pools in the
    background after each run (a sandboxed child's shell is built on a
    thread of its own); a snapshot taken while that happens would count
    their new children as the test's leftovers. ``Runtime.wait_idle``
    returns once their pools are full and every finished run's process is
    reaped, and nothing runs on them while a test holds the snapshot.
    """
    for rt in _shared:
        if not rt.wait_idle(timeout):
            pytest.fail(f"{rt!r} did not get idle within {timeout} s")
    return child_pids()
