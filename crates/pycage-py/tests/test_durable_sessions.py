"""Durable sessions from Python: a session's cell suspends at a call that
needs approval, and ``Runtime.resume_session`` replays the earlier cells in
a new session of another runtime before it resumes the cell
(docs/durable.md, "Sessions")."""

from __future__ import annotations

import asyncio
import sys

import pytest

import pycage

KEY = b"python session test key, not a secret"


def runtime(**kw):
    return pycage.Runtime(isolation="process", python=sys.executable, journal_key=KEY, **kw)


def shop(calls):
    def lookup(n):
        calls.append(("lookup", n))
        return 40 + n

    @pycage.approval
    async def pay(amount):
        calls.append(("pay", amount))
        return "paid!"

    return {"tools": pycage.Namespace({"lookup": lookup, "pay": pay}, error_class="ToolError")}


CELL1 = """
import random
base = await tools.lookup(2)
draw = random.randrange(1_000_000)
print("cell 1 ran")
"""

CELL2 = """
print("paying", base)
receipt = await tools.pay(amount=base + 1)
return {"base": base, "receipt": receipt, "draw": draw}
"""


def suspend(calls):
    with runtime() as rt:
        session = rt.session(shop(calls))
        assert session.run(CELL1).ok
        draw = session.run("return draw").unwrap()
        r = session.run(CELL2)
        assert r.error.kind == "suspended" and not r.ok
        assert r.suspended.call == pycage.PendingCall("tools", "pay", {"amount": 43})
        assert r.logs == ["paying 42"]
        with pytest.raises(pycage.SessionEndedError, match="suspended"):
            session.run("return 1")
        return r.suspended, draw


def test_a_session_cell_suspends_and_resumes_with_its_globals_in_another_runtime():
    calls = []
    suspension, draw = suspend(calls)
    with runtime() as rt:
        session, r = rt.resume_session(suspension, reply="R-7", bindings=shop(calls))
        assert r.unwrap() == {"base": 42, "receipt": "R-7", "draw": draw}
        assert r.logs == [], "the earlier output was delivered before"
        assert calls == [("lookup", 2)], "lookup ran once in all, pay never"
        # The session goes on, with the globals and live calls.
        assert session.run("return [base, draw, await tools.lookup(0)]").unwrap() == [42, draw, 40]
        assert calls == [("lookup", 2), ("lookup", 0)]
        session.close()


def test_a_denial_raises_in_the_cell_and_refused_journals_raise_journal_error():
    calls = []
    suspension, _ = suspend(calls)
    with runtime() as rt:
        # A session's journal is not a run's, nor a run's a session's.
        with pytest.raises(pycage.JournalError, match="resume it as a session"):
            rt.resume(suspension, reply=1, bindings=shop(calls))
        one_shot = rt.run("await tools.pay(amount=1)", shop(calls)).suspended
        with pytest.raises(pycage.JournalError, match="resume it as a run"):
            rt.resume_session(one_shot, reply=1, bindings=shop(calls))
        flipped = bytearray(suspension.journal)
        flipped[len(flipped) // 2] ^= 1
        with pytest.raises(pycage.JournalError, match="signature does not match"):
            rt.resume_session(bytes(flipped), reply=1, bindings=shop(calls))
        with pytest.raises(TypeError, match="give reply=VALUE"):
            rt.resume_session(suspension, bindings=shop(calls))
        assert calls == [("lookup", 2)], "nothing ran"

        cell = "try:\n    await tools.pay(amount=base)\nexcept ToolError as e:\n    return f'{e} ({e.tool})'"
        session = rt.session(shop(calls))
        session.run("base = 1")
        denied = session.run(cell).suspended

        async def resume():
            return await rt.aresume_session(denied, error="over the limit", bindings=shop(calls))

        session, r = asyncio.run(resume())
        assert r.unwrap() == "over the limit (pay)"
        assert session.run("return base").unwrap() == 1
        session.close()
