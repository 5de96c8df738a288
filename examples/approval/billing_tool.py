"""A toy billing service for examples/approval: `lookup` reads an invoice,
`pay` would pay it (it never runs in the example: a person answers it).
Each call is appended to calls.log, so you can see what ran."""

import json
import sys

INVOICES = {"INV-7": {"vendor": "ACME", "amount": 1200, "currency": "EUR"}}

args = json.load(sys.stdin)
with open("calls.log", "a") as log:
    log.write(f"{sys.argv[1]} {json.dumps(args)}\n")
if sys.argv[1] == "lookup":
    invoice = INVOICES.get(args["invoice"])
    if invoice is None:
        print(f"unknown invoice {args['invoice']!r}", file=sys.stderr)
        sys.exit(1)
    json.dump(invoice, sys.stdout)
else:
    json.dump({"paid": args["amount"], "reference": "PAY-1"}, sys.stdout)
