"""Durable runs from Python: ``pycage.approval``, ``pycage.Suspend``,
``Result.suspended`` and ``Runtime.resume`` (docs/durable.md). The
approval gate crosses two processes of this interpreter."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import shutil
import subprocess
import sys
import textwrap

import pytest

import pycage

KEY = b"python test key, not a secret!!"


@pytest.fixture(scope="module")
def durable_rt():
    rt = pycage.Runtime(isolation="process", python=sys.executable, journal_key=KEY)
    yield rt
    rt.close()


# The approval gate of the issue, as one script: `suspend` writes the
# journal to a file, `resume` (another process, another Runtime) reads it.
# Every lookup appends to lookups.log, so the test counts them across both.
GATE = textwrap.dedent(
    """
    import json, sys
    import pycage

    def lookup(invoice):
        with open("lookups.log", "a") as f:
            f.write("lookup\\n")
        return {"invoice": invoice, "amount": 40}

    @pycage.approval
    def pay(to, amount):
        raise AssertionError("a call that needs approval is never run")

    bindings = {"tools": pycage.Namespace({"lookup": lookup, "pay": pay}, error_class="ToolError")}
    PROGRAM = '''
    inv = await tools.lookup(invoice=7)
    print("amount", inv["amount"])
    receipt = await tools.pay(to="ACME", amount=inv["amount"] + 2)
    return {"amount": inv["amount"], "receipt": receipt}
    '''
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:  # the key: PYCAGE_JOURNAL_KEY
        if sys.argv[1] == "suspend":
            r = rt.run(PROGRAM, bindings)
            s = r.suspended
            open("run.journal", "wb").write(s.journal)
            print(json.dumps([r.error.kind, s.call.namespace, s.call.function, s.call.args, s.reason, r.logs]))
        else:
            r = rt.resume(open("run.journal", "rb").read(), reply=sys.argv[2], bindings=bindings)
            print(json.dumps([r.value, r.logs, r.error and r.error.kind]))
    """
)


def test_an_approval_gate_suspends_in_one_process_and_resumes_in_another(tmp_path):
    (tmp_path / "gate.py").write_text(GATE)
    env = {"PYCAGE_JOURNAL_KEY": KEY.decode(), "PATH": "/usr/bin:/bin"}

    def step(*args: str) -> str:
        p = subprocess.run([sys.executable, "gate.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    first = step("suspend")
    assert first == ('["suspended", "tools", "pay", {"to": "ACME", "amount": 42}, "approval required", ["amount 40"]]')
    second = step("resume", "receipt-9")
    assert second == '[{"amount": 40, "receipt": "receipt-9"}, [], null]'
    assert (tmp_path / "lookups.log").read_text() == "lookup\n", "lookup ran exactly once in total"


def test_a_denial_raises_the_error_class_and_the_program_catches_it(durable_rt):
    calls = []

    def lookup():
        calls.append("lookup")
        return 5

    @pycage.approval
    async def refund(amount):
        calls.append("refund")

    bindings = {"shop": pycage.Namespace({"lookup": lookup, "refund": refund}, error_class="ShopError")}
    program = """
n = await shop.lookup()
try:
    return await shop.refund(amount=n)
except ShopError as e:
    return {"fallback": str(e), "tool": e.tool}
"""
    r = durable_rt.run(program, bindings)
    assert r.error.kind == "suspended" and not r.ok
    assert r.suspended.call == pycage.PendingCall("shop", "refund", {"amount": 5})
    again = durable_rt.resume(r.suspended, error="refunds need a manager", bindings=bindings)
    assert again.unwrap() == {"fallback": "refunds need a manager", "tool": "refund"}
    assert calls == ["lookup"]


def test_any_binding_may_raise_suspend_sync_or_async(durable_rt):
    def check(n):
        if n > 10:
            raise pycage.Suspend(f"{n} is more than a robot may approve")
        return "small"

    async def acheck(n):
        await asyncio.sleep(0)
        if n > 10:
            raise pycage.Suspend("async, too")
        return "small"

    bindings = {"t": {"check": check, "acheck": acheck}}
    r = durable_rt.run("return [await t.check(1), await t.acheck(2), await t.check(50), await t.acheck(60)]", bindings)
    assert r.suspended.reason == "50 is more than a robot may approve"
    r = durable_rt.resume(r.suspended, reply="ok", bindings=bindings)
    assert r.suspended.reason == "async, too", "the resumed run went on live and suspended again"
    assert r.suspended.call.args == 60
    r = durable_rt.resume(r.suspended, reply="fine", bindings=bindings)
    assert r.unwrap() == ["small", "small", "ok", "fine"]


def test_a_gather_with_an_approval_in_the_middle_replays_in_the_recorded_order(durable_rt):
    async def work(i):
        await asyncio.sleep(random.random() / 100)
        return i * 2

    @pycage.approval
    async def pay(i):
        pass

    bindings = {"tools": {"work": work, "pay": pay}}
    program = """
import asyncio
order = []
async def one(i):
    r = await (tools.pay(i) if i == 25 else tools.work(i))
    order.append(i)
    return r
return [await asyncio.gather(*(one(i) for i in range(50))), order]
"""

    async def main():
        r = await durable_rt.arun(program, bindings)
        assert r.suspended.call.args == 25
        return await durable_rt.aresume(r.suspended, reply="approved", bindings=bindings)

    r = asyncio.run(main())
    results, order = r.unwrap()
    assert results == [("approved" if i == 25 else i * 2) for i in range(50)]
    assert sorted(order) == list(range(50))


def test_refused_journals_and_missing_keys_are_misuse(durable_rt):
    bindings = {"t": {"pay": pycage.approval(lambda: 1)}}
    r = durable_rt.run("return await t.pay()", bindings)
    journal = r.suspended.journal
    flipped = bytearray(journal)
    flipped[len(flipped) // 2] ^= 1
    with pytest.raises(pycage.JournalError, match="altered, or signed with another journal key"):
        durable_rt.resume(bytes(flipped), reply=1, bindings=bindings)
    with pycage.Runtime(isolation="process", python=sys.executable, journal_key="another key, 16+ bytes") as other:
        with pytest.raises(pycage.JournalError, match="signature does not match"):
            other.resume(journal, reply=1, bindings=bindings)
    with pytest.raises(pycage.JournalError, match="another program"):
        durable_rt.resume(journal, reply=1, bindings=bindings, program="return 2")
    with pytest.raises(pycage.JournalError, match="t.pay missing"):
        durable_rt.resume(journal, reply=1, bindings={"t": {"other": lambda: 1}})
    with pytest.raises(TypeError, match="reply=VALUE"):
        durable_rt.resume(journal, bindings=bindings)
    with pytest.raises(pycage.ConfigError, match="journal_key: a journal key must be at least 16 bytes"):
        pycage.Runtime(isolation="process", python=sys.executable, journal_key=b"short")
    assert durable_rt.resume(journal, reply=7, bindings=bindings, program="return await t.pay()").value == 7


def test_without_a_key_approval_is_refused_and_suspend_fails_the_call(monkeypatch):
    monkeypatch.delenv("PYCAGE_JOURNAL_KEY", raising=False)
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:
        with pytest.raises(pycage.ConfigError, match="needs a journal key.*journal_key="):
            rt.run("await t.pay()", {"t": {"pay": pycage.approval(lambda: 1)}})

        def asks():
            raise pycage.Suspend("sign here")

        r = rt.run("await t.asks()", {"t": {"asks": asks}})
        assert r.error.kind == "exception" and "this run cannot suspend" in r.error.message
        assert r.suspended is None
        assert rt.run("return 1").suspended is None


def test_approval_keeps_the_function_usable_and_its_signature():
    async def pay(to: str, amount: int) -> str:
        """Pays someone."""
        return f"{amount} to {to}"

    gated = pycage.approval(pay)
    assert asyncio.run(gated("ACME", 3)) == "3 to ACME"
    assert gated.__doc__ == "Pays someone." and gated.__name__ == "pay"
    assert pycage.approval(len)("abc") == 3
    with pytest.raises(TypeError, match="needs a callable"):
        pycage.approval(3)


def test_the_approval_example_pauses_saves_and_resumes_from_another_process(tmp_path):
    examples = pathlib.Path(__file__).resolve().parents[3] / "examples" / "approval"
    for name in ("approval_gate.py", "pay_invoice.py"):
        shutil.copy(examples / name, tmp_path / name)
    env = {**os.environ, "PYCAGE_JOURNAL_KEY": KEY.decode()}

    def step(*args: str) -> list[str]:
        p = subprocess.run(
            [sys.executable, "approval_gate.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    assert step("start") == [
        "paying ACME 1200 EUR",
        'waiting for approval: billing.pay({"vendor": "ACME", "amount": 1200})',
    ]
    assert (tmp_path / "payment.journal").stat().st_size > 0
    assert step("approve") == ['{"paid": true, "receipt": {"paid": 1200, "reference": "PAY-42"}}']
    assert step("deny", "over the monthly limit") == ['{"paid": false, "why": "over the monthly limit"}']
    assert (tmp_path / "calls.log").read_text() == "lookup INV-7\n"
