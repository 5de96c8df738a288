"""A small MCP server (stdio, standard library only) for the code-mode example.

Four warehouses, five SKUs. `get_stock` answers one (warehouse, sku) pair,
so "which SKUs are low anywhere?" takes 20 calls: the shape of task that
code mode turns into one program. Speaks JSON-RPC 2.0 lines on stdin/stdout:
initialize, tools/list, tools/call, ping.
"""

import json
import sys

WAREHOUSES = ["berlin", "lyon", "porto", "turin"]
SKUS = ["A-1", "B-7", "C-3", "D-9", "E-2"]
# Deterministic stock levels.
STOCK = {(w, s): (i * 7 + j * 13) % 23 for i, w in enumerate(WAREHOUSES) for j, s in enumerate(SKUS)}

TOOLS = [
    {
        "name": "list_warehouses",
        "description": "Names of all warehouses.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {
            "type": "object",
            "properties": {"warehouses": {"type": "array", "items": {"type": "string"}}},
            "required": ["warehouses"],
        },
    },
    {
        "name": "list_skus",
        "description": "All SKUs the company stocks.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {
            "type": "object",
            "properties": {"skus": {"type": "array", "items": {"type": "string"}}},
            "required": ["skus"],
        },
    },
    {
        "name": "get_stock",
        "description": "Units of one SKU in one warehouse, with its reorder metadata.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "warehouse": {"type": "string", "enum": WAREHOUSES},
                "sku": {"type": "string", "description": "Stock-keeping unit, e.g. A-1"},
            },
            "required": ["warehouse", "sku"],
        },
        "outputSchema": {
            "type": "object",
            "title": "StockLevel",
            "properties": {
                "warehouse": {"type": "string"},
                "sku": {"type": "string"},
                "units": {"type": "integer"},
                "reorder_point": {"type": "integer"},
                "supplier": {"type": "string"},
                "last_counted": {"type": "string", "format": "date"},
            },
            "required": ["warehouse", "sku", "units", "reorder_point", "supplier", "last_counted"],
        },
    },
]


def call(name, args):
    if name == "list_warehouses":
        return {"warehouses": WAREHOUSES}
    if name == "list_skus":
        return {"skus": SKUS}
    if name == "get_stock":
        key = (args.get("warehouse"), args.get("sku"))
        if key not in STOCK:
            raise LookupError(f"no stock record for {key[1]!r} in {key[0]!r}")
        return {
            "warehouse": key[0],
            "sku": key[1],
            "units": STOCK[key],
            "reorder_point": 5,
            "supplier": "Acme Components GmbH",
            "last_counted": "2026-11-28",
        }
    raise LookupError(f"unknown tool {name!r}")


def answer(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "warehouse", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        try:
            value = call(params.get("name"), params.get("arguments") or {})
        except LookupError as e:
            return {"content": [{"type": "text", "text": str(e)}], "isError": True}
        return {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value}
    raise KeyError(method)


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue  # notifications: initialized, cancelled
    try:
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}
    except KeyError:
        reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "method not found"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
