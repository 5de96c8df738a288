"""An upstream MCP server for pycage's tests, written with the official Python SDK.

Tools: `lookup` (an outputSchema: structured results), `fail` (always an
error result), `slow` (sleeps; records its start and its cancellation),
`env` (one variable of this server's environment), `pid`, `crash` (the
process exits mid-call), `add` and `tag-item` (a name that is not an
identifier).

Usage: upstream.py [--http] [--events FILE]. With --http it serves
streamable HTTP on 127.0.0.1 at a free port and prints `PORT <n>` on
stdout once listening; otherwise it speaks MCP on stdin/stdout. Events
(`start <marker>`, `cancelled <marker>`, `done <marker>`) are appended to
FILE, one per line, so a test can see what the server was told.
"""

import argparse
import asyncio
import os
import socket
import sys

from pydantic import BaseModel

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

parser = argparse.ArgumentParser()
parser.add_argument("--http", action="store_true")
parser.add_argument("--events")
opts = parser.parse_args()

server = MCPServer("pycage-test-upstream")


def event(line):
    if opts.events:
        with open(opts.events, "a") as f:
            f.write(line + "\n")


class Stock(BaseModel):
    """Units of one SKU per warehouse."""

    sku: str
    total: int
    warehouses: dict[str, int]


STOCK = {"A-1": {"berlin": 4, "porto": 10}, "B-7": {"berlin": 3, "porto": 0}}


@server.tool(description="Stock of one SKU across warehouses.")
def lookup(sku: str) -> Stock:
    if sku not in STOCK:
        raise ToolError(f"unknown sku {sku!r}")
    w = STOCK[sku]
    return Stock(sku=sku, total=sum(w.values()), warehouses=w)


@server.tool(description="Always fails with the given message.")
def fail(message: str) -> str:
    raise ToolError(message)


@server.tool(description="Sleeps for `seconds`, recording start/cancelled/done with `marker`.")
async def slow(seconds: float, marker: str) -> str:
    event(f"start {marker}")
    try:
        await asyncio.sleep(seconds)
    except BaseException:
        event(f"cancelled {marker}")
        raise
    event(f"done {marker}")
    return marker


@server.tool(description="One variable of this server's environment, or null.")
def env(name: str) -> str | None:
    return os.environ.get(name)


@server.tool(description="This server's process id.")
def pid() -> int:
    return os.getpid()


@server.tool(description="Exits the server process in the middle of the call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="a + b")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(name="tag-item", description="Tags an item.")
def tag_item(item: str, tag: str = "new") -> str:
    return f"{item}:{tag}"


if opts.http:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
else:
    server.run()
