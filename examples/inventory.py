# A "code mode" program: one program calls a tool many times, filters, and
# returns only the result. Run it with:
#   cargo run -q -p pycage-cli -- run --bindings examples/bindings.toml examples/inventory.py
import asyncio

warehouses = await tools.list_warehouses({})
print(f"checking {len(warehouses)} warehouses")

# Many calls in flight at once: the host serves them concurrently.
stocks = await asyncio.gather(*[tools.stock({"warehouse": w}) for w in warehouses])

low = []
for w, items in zip(warehouses, stocks):
    for item in items:
        if item["count"] < 5:
            low.append({"warehouse": w, "sku": item["sku"], "count": item["count"]})

try:
    await tools.stock({"warehouse": "atlantis"})
except ToolError as e:
    print(f"expected failure from {e.tool}: {e}")

return {"low_stock": sorted(low, key=lambda x: x["count"]), "total_units": sum(i["count"] for s in stocks for i in s)}
