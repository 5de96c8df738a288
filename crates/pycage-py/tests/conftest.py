"""Fixtures shared by the pycage package tests.

Every test runs real programs in real CPython children. Sandbox isolation
(the default) needs root and kernel support; where it is missing its tests
skip, and fail instead when PYCAGE_REQUIRE_ALL_TESTS=1 (CI sets it).
"""

from __future__ import annotations

import os
import sys

import pytest

import pycage

REQUIRE_ALL = os.environ.get("PYCAGE_REQUIRE_ALL_TESTS") == "1"


def unavailable(reason: str) -> None:
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (PYCAGE_REQUIRE_ALL_TESTS=1 forbids skipping)")
    pytest.skip(reason)


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
