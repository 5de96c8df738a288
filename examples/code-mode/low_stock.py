# Which SKUs are at or below their reorder point, anywhere? Twenty get_stock
# calls, made as one program: only the answer goes back to the model.
#   cargo run -q -p pycage-cli -- run --bindings examples/code-mode/bindings.toml examples/code-mode/low_stock.py
import asyncio

warehouses = (await wh.list_warehouses())["warehouses"]
skus = (await wh.list_skus())["skus"]
levels = await asyncio.gather(*[wh.get_stock(warehouse=w, sku=s) for w in warehouses for s in skus])
low = [f"{x['sku']}@{x['warehouse']}: {x['units']}" for x in levels if x["units"] <= x["reorder_point"]]
return {"checked": len(levels), "low": low}
