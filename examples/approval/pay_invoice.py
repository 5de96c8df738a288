# Look an invoice up, then ask to pay it: the payment waits for a person.
invoice = await billing.lookup(invoice="INV-7")
print(f"paying {invoice['vendor']} {invoice['amount']} {invoice['currency']}")
try:
    receipt = await billing.pay(vendor=invoice["vendor"], amount=invoice["amount"])
except BillingError as e:
    return {"paid": False, "why": str(e)}
return {"paid": True, "receipt": receipt}
