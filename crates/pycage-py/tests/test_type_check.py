"""``type_check``: ty checks a program before it runs (docs/semantics.md,
"Type checking"). ty comes from the test venv's requirements, beside its
python (the interpreter these runs use)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

import pycage
from conftest import unavailable


def _ty() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "ty")
    found = beside if os.path.exists(beside) else shutil.which("ty")
    if found is None:
        unavailable("no ty beside the interpreter or on PATH (pip install -r crates/pycage-py/tests/requirements.txt)")
    return found


@pytest.fixture(scope="module")
def checking():
    with pycage.Runtime(isolation="process", type_check=True, ty=_ty()) as rt:
        yield rt


def test_type_errors_stop_the_run_before_any_binding_is_called(checking):
    calls = []

    def search(query, limit=10):
        calls.append(query)
        return [query]

    code = "hits = await tools.search(query='x')\ntotal = 'found: ' + len(hits)\nnope.attr\n"
    r = checking.run(code, {"tools": {"search": search}})
    assert r.error is not None and r.error.kind == "type-error", r
    assert "<program>:2:9: error[unsupported-operator]" in r.error.message, r.error.message
    assert "<program>:3:1: error[unresolved-reference] Name `nope` used when not defined" in r.error.message
    assert calls == []
    ok = checking.run("hits = await tools.search(query='x')\nhits", {"tools": {"search": search}}, type_check=True)
    assert ok.value == ["x"] and ok.diagnostics == []
    unchecked = checking.run("nope", type_check=False)
    assert unchecked.error is not None and unchecked.error.kind == "exception"


def test_a_session_remembers_the_cells_that_ran(checking):
    with checking.session() as s:
        assert s.run("n = 41").ok
        bad = s.run("m = 1\nn + 'x'")
        assert bad.error is not None and bad.error.kind == "type-error", bad
        forgotten = s.run("m")
        assert forgotten.error is not None and "Name `m` used when not defined" in forgotten.error.message
        assert s.run("n + 1").value == 42


def test_a_missing_ty_is_a_config_error():
    with pytest.raises(pycage.ConfigError, match=r"pip install ty==0.0.104"):
        pycage.Runtime(isolation="process", type_check=True, ty="/nonexistent/ty")
    with pycage.Runtime(isolation="process", ty="/nonexistent/ty") as rt:
        with pytest.raises(pycage.ConfigError, match=r"/nonexistent/ty"):
            rt.run("1", type_check=True)
