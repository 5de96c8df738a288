"""An approval gate with the Python package, across two processes.

    export PYCAGE_JOURNAL_KEY=$(openssl rand -hex 32)
    python3 approval_gate.py start          # runs until the payment, saves payment.journal
    python3 approval_gate.py approve        # another process: pays, finishes the run
    python3 approval_gate.py deny "no"      # ... or refuses: the program sees a BillingError

The journal is plain bytes, signed with the key: keep it in a file, a
database row or a queue message until a person answers.
"""

import json
import pathlib
import sys

import pycage


def lookup(invoice: str) -> dict:
    """An invoice by its number."""
    with open("calls.log", "a") as log:
        log.write(f"lookup {invoice}\n")
    return {"vendor": "ACME", "amount": 1200, "currency": "EUR"}


@pycage.approval
def pay(vendor: str, amount: int) -> dict:
    """Pays a vendor (needs a person's approval: the call suspends the run)."""
    raise AssertionError("never called: the approver's answer is the result")


BINDINGS = {"billing": pycage.Namespace({"lookup": lookup, "pay": pay}, error_class="BillingError")}
PROGRAM = (pathlib.Path(__file__).parent / "pay_invoice.py").read_text()

with pycage.Runtime(isolation="process") as rt:  # the key comes from PYCAGE_JOURNAL_KEY
    if sys.argv[1] == "start":
        result = rt.run(PROGRAM, BINDINGS)
        for line in result.logs:
            print(line)
        call = result.suspended.call
        with open("payment.journal", "wb") as f:
            f.write(result.suspended.journal)
        print(f"waiting for approval: {call.namespace}.{call.function}({json.dumps(call.args)})")
    else:
        with open("payment.journal", "rb") as f:
            journal = f.read()
        if sys.argv[1] == "approve":
            result = rt.resume(journal, reply={"paid": 1200, "reference": "PAY-42"}, bindings=BINDINGS)
        else:
            result = rt.resume(journal, error=sys.argv[2], bindings=BINDINGS)
        for line in result.logs:
            print(line)
        print(json.dumps(result.unwrap()))
