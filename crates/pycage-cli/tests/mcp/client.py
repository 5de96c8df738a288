"""Drives an MCP server with the official Python SDK client, for pycage's tests.

Usage: client.py PLAN_JSON. The plan is
  {"server": {"command": [argv...]} or {"url": "http://...", "mode"?: "auto" | "legacy", "headers"?: {...}},
   "steps": [step...], "connect_may_fail"?: bool}
("legacy" is the initialize handshake with an Mcp-Session-Id; "auto", the
default, is the stateless 2026-07-28 protocol when the server speaks it).
When connecting fails and the plan allows it, the one line printed is
{"connect_error": "..."}. With "elicit": [{"action": A, "content"?: {...}}...] the
client declares form elicitation and answers each elicitation/create with the
next answer (the last one again when they run out); every call's output then
also has "elicited": [the messages asked since the previous call]. In a step's
"args", {"$ref": [N, key, ...]} stands for that part of step N's output (a
token an earlier call returned, say). Otherwise each step prints one JSON line on stdout:
  {"op": "list"}                                   -> {"tools": [{name, description, inputSchema, outputSchema}]}
  {"op": "call", "tool": T, "args": {...}}         -> {"isError", "structured", "text", "progress": [messages],
                                                       "blocks": [every other content block, as MCP JSON]}
      with "signal": {"path": P, "prefix": X, "line": L}, appends L to P when a progress message starts with X
  {"op": "gather", "tool": T, "args": [{...}...]}  -> {"results": [call results, concurrently]}
      with "signals": [signal or null, ...], one per call
  {"op": "cancel", "tool": T, "args": {...}, "after_progress": N}
      starts the call, cancels it after N progress messages (and, with "when": {"path", "line"},
      once that line is in that file)              -> {"cancelled": true, "progress": [...]}
  {"op": "wait_event", "path": P, "line": L, "timeout": S}
      waits until file P has line L                 -> {"found": bool, "lines": [...]}
  {"op": "signal", "path": P, "line": L}           appends line L to file P -> {"signalled": L}
Every call asks for progress (so the server gets a progress token).
"""

import asyncio
import contextlib
import json
import logging
import os
import sys
import time

import anyio

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


ELICITED = []


def answering(answers):
    """An elicitation callback that gives `answers` in turn (see the module docs)."""
    from mcp import types

    asked = [0]

    async def on_elicit(context, params):
        ELICITED.append(params.message)
        answer = answers[min(asked[0], len(answers) - 1)]
        asked[0] += 1
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    return on_elicit


async def call(client, tool, args, signal=None):
    progress = []

    async def on_progress(p, total, message):
        progress.append(message)
        if signal and (message or "").startswith(signal["prefix"]):
            with open(signal["path"], "a") as f:
                f.write(signal["line"] + "\n")

    r = await client.call_tool(tool, args, progress_callback=on_progress)
    text = "".join(c.text for c in r.content if getattr(c, "type", None) == "text")
    blocks = [
        c.model_dump(mode="json", by_alias=True, exclude_none=True)
        for c in r.content
        if getattr(c, "type", None) != "text"
    ]
    out = {
        "isError": bool(r.is_error),
        "structured": r.structured_content,
        "text": text,
        "progress": progress,
        "blocks": blocks,
    }
    if ELICITED:
        out["elicited"] = ELICITED[:]
        ELICITED.clear()
    return out


async def cancel(client, tool, args, after, when):
    progress = []
    enough = anyio.Event()

    async def on_progress(p, total, message):
        progress.append(message)
        if len(progress) >= after:
            enough.set()

    async with anyio.create_task_group() as tg:

        async def run():
            await client.call_tool(tool, args, progress_callback=on_progress)

        tg.start_soon(run)
        with anyio.fail_after(60):
            await enough.wait()
            if when is not None:
                await wait_event(when["path"], when["line"], 60)
        tg.cancel_scope.cancel()
    return {"cancelled": True, "progress": progress}


async def wait_event(path, line, timeout):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        if line in lines:
            return {"found": True, "lines": lines}
        await asyncio.sleep(0.05)
    return {"found": False, "lines": lines}


def resolve(value, outputs):
    """`value` with every {"$ref": [N, key, ...]} replaced (see the module docs)."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            step, *path = value["$ref"]
            found = outputs[step]
            for key in path:
                found = found[key]
            return found
        return {k: resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, outputs) for v in value]
    return value


def describe(e):
    """An exception and, for a group, everything in it (the HTTP status is deep inside)."""
    inner = getattr(e, "exceptions", None)
    if inner:
        return "; ".join(describe(x) for x in inner)
    return f"{type(e).__name__}: {e}"


async def main():
    plan = json.loads(sys.argv[1])
    server = plan["server"]
    if "url" in server:
        target = server["url"]
        if server.get("headers"):
            http = create_mcp_http_client(headers=server["headers"])
            target = streamable_http_client(server["url"], http_client=http)
    else:
        argv = server["command"]
        target = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with contextlib.AsyncExitStack() as stack:
        try:
            options = {"mode": server.get("mode", "auto")}
            if plan.get("elicit"):
                options["elicitation_callback"] = answering(plan["elicit"])
            client = await stack.enter_async_context(Client(target, **options))
        except BaseException as e:
            if not plan.get("connect_may_fail"):
                raise
            print(json.dumps({"connect_error": describe(e)}), flush=True)
            return
        outputs = []
        for step in plan["steps"]:
            step = resolve(step, outputs)
            op = step["op"]
            if op == "list":
                tools = (await client.list_tools()).tools
                out = {
                    "tools": [
                        {
                            "name": t.name,
                            "description": t.description,
                            "inputSchema": t.input_schema,
                            "outputSchema": t.output_schema,
                        }
                        for t in tools
                    ]
                }
            elif op == "call":
                out = await call(client, step["tool"], step["args"], step.get("signal"))
            elif op == "gather":
                signals = step.get("signals") or [None] * len(step["args"])
                calls = (call(client, step["tool"], a, s) for a, s in zip(step["args"], signals, strict=True))
                out = {"results": await asyncio.gather(*calls)}
            elif op == "cancel":
                out = await cancel(client, step["tool"], step["args"], step.get("after_progress", 1), step.get("when"))
            elif op == "wait_event":
                out = await wait_event(step["path"], step["line"], step.get("timeout", 30))
            elif op == "signal":
                with open(step["path"], "a") as f:
                    f.write(step["line"] + "\n")
                out = {"signalled": step["line"]}
            else:
                raise SystemExit(f"unknown op {op!r}")
            outputs.append(out)
            print(json.dumps(out), flush=True)


# The SDK's warnings (a failed session termination, say) go to stderr, where
# the tests look for them.
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
asyncio.run(main())
