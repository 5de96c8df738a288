"""python_tools (a list of tools as a namespace plus stubs) and the fastmcp
code-mode sandbox provider."""

from __future__ import annotations

import asyncio
import importlib
from typing import Optional

import pytest

import pycage
from conftest import unavailable
from pycage.fastmcp import PycageSandboxProvider, prelude


async def search(query: str, limit: int = 10, *, lang: Optional[str] = None) -> list[dict[str, str]]:
    """Search the web.

    Returns one dict per hit."""
    return [{"query": query, "limit": str(limit), "lang": str(lang)}]


def fetch(url: str) -> str:
    "Fetch a page."
    if not url.startswith("https://"):
        raise ValueError(f"refusing {url!r}: https only")
    return f"<html>{url}</html>"


class DashedTool:
    """Shaped like pydantic-ai's Tool: .name, .function, .description."""

    name = "word-count"
    description = "Count the words of a text."

    def function(self, text: str) -> int:
        return len(text.split())


STUBS = '''class ToolError(Exception):
    """Raised when a tools call fails; .tool names the function."""
    tool: str


class tools:
    """Host functions. Await every call: `await tools.name(arg=value)`. Keyword arguments
    travel as one JSON object (dict, list, str, int, float, bool, None); so does the result.
    Calls run concurrently under asyncio.gather."""

    @staticmethod
    async def search(*, query: str, limit: int = 10, lang: Optional[str] = None) -> list[dict[str, str]]:
        """Search the web.

        Returns one dict per hit.
        """

    @staticmethod
    async def fetch(*, url: str) -> str:
        """Fetch a page."""

    # call as: await getattr(tools, 'word-count')(...)  signature: (*, text: str) -> int
    # Count the words of a text.
'''


def test_python_tools_stubs_and_bindings(rt):
    toolset = pycage.python_tools([search, fetch, DashedTool()])
    assert toolset.stubs == STUBS
    assert list(toolset.functions) == ["search", "fetch", "word-count"]
    r = rt.run(
        "hits = await tools.search({'query': 'pycage', 'limit': 3})\n"
        "n = await getattr(tools, 'word-count')({'text': 'a b c'})\n"
        "try:\n    await tools.fetch({'url': 'http://x'})\nexcept ToolError as e:\n    err = [e.tool, str(e)]\n"
        "return [hits, n, err]",
        toolset.bindings,
    )
    assert r.error is None, r.error
    assert r.value == [
        [{"query": "pycage", "limit": "3", "lang": "None"}],
        3,
        ["fetch", "refusing 'http://x': https only"],
    ]


def test_python_tools_stubs_compile():
    compile(pycage.python_tools([search, fetch]).stubs, "<stubs>", "exec")


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([lambda x: x], "no usable __name__"),
        ([fetch, ("fetch", search)], "two tools are named 'fetch'"),
        ([42], "a tool must be a function"),
        ("fetch", "tools must be a list"),
    ],
)
def test_python_tools_errors(tools, message):
    with pytest.raises(pycage.InvalidBindingsError, match=message):
        pycage.python_tools(tools)


def test_python_tools_custom_names():
    ts = pycage.python_tools({"get": fetch}, global_name="web", error_class="WebError")
    assert "class web:" in ts.stubs and "class WebError(Exception):" in ts.stubs
    assert ts.bindings["web"].error_class == pycage.ErrorClass("WebError", "tool")


def test_prelude_is_one_line():
    head, bindings = prelude({"n": 2**70, "cfg": {"a": [1, -0.0]}}, {"call_tool": lambda name, params: None})
    assert head.count("\n") == 1 and head.endswith("\n")
    assert list(bindings) == ["_pycage_host"] and list(bindings["_pycage_host"]) == ["call_tool"]
    with pytest.raises(ValueError, match="not a Python identifier"):
        prelude({"not valid": 1}, None)
    assert prelude(None, None) == ("", {})


def test_provider_runs_code_with_external_functions_and_inputs(process_rt):
    calls = []

    async def call_tool(tool_name, params):
        calls.append((tool_name, params))
        await asyncio.sleep(0)
        return {"tool": tool_name, "sum": sum(params.values())}

    def shout(text, suffix="!"):
        return text.upper() + suffix

    provider = PycageSandboxProvider(process_rt)
    code = (
        "import asyncio\n"
        "rs = await asyncio.gather(*[call_tool('add', {'a': i, 'b': big}) for i in range(3)])\n"
        "return [r['sum'] for r in rs] + [await shout('hi', suffix='?'), await shout('x')]"
    )
    value = asyncio.run(
        provider.run(code, inputs={"big": 2**64}, external_functions={"call_tool": call_tool, "shout": shout})
    )
    assert value == [2**64, 2**64 + 1, 2**64 + 2, "HI?", "X!"]
    assert sorted(c[1]["a"] for c in calls) == [0, 1, 2]


def test_provider_returns_output_when_there_is_no_value(process_rt):
    provider = PycageSandboxProvider(process_rt)
    assert asyncio.run(provider.run("print('a')\nprint('b')")) == "a\nb"


def fastmcp_or_skip():
    try:
        return importlib.import_module("fastmcp")
    except ImportError:
        unavailable("fastmcp is not installed (the CI venv installs the pinned version)")


def test_provider_errors_name_the_models_lines(process_rt):
    fastmcp_or_skip()
    from fastmcp.exceptions import ToolError

    provider = PycageSandboxProvider(process_rt)

    async def call_tool(tool_name, params):
        raise ToolError(f"Unknown tool: {tool_name}")

    with pytest.raises(ToolError) as e:
        asyncio.run(
            provider.run(
                "print('working')\nx = 1\nawait call_tool('nope', {})", external_functions={"call_tool": call_tool}
            )
        )
    text = str(e.value)
    assert text.startswith("exception: Traceback")
    assert 'File "<program>", line 3' in text  # the model's line 3, not the prelude's shift
    assert "RuntimeError: Unknown tool: nope" in text
    assert text.endswith("Output:\nworking")


def test_fastmcp_code_mode_end_to_end():
    fastmcp = fastmcp_or_skip()
    from fastmcp.experimental.transforms.code_mode import CodeMode

    mcp = fastmcp.FastMCP("pycage-test")

    @mcp.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @mcp.tool
    async def greet(name: str) -> str:
        """Greet someone."""
        await asyncio.sleep(0)
        return f"hello {name}"

    provider = PycageSandboxProvider(isolation="process")
    mcp.add_transform(CodeMode(sandbox_provider=provider))

    async def main():
        async with fastmcp.Client(mcp) as client:
            names = sorted(t.name for t in await client.list_tools())
            result = await client.call_tool(
                "execute",
                {
                    "code": "import asyncio\n"
                    "sums = await asyncio.gather(*[call_tool('add', {'a': i, 'b': 2**70}) for i in range(5)])\n"
                    "g = await call_tool('greet', {'name': 'pycage'})\n"
                    "return {'sums': sums, 'greeting': g}"
                },
            )
            failed = await client.call_tool("execute", {"code": "return 1/0"}, raise_on_error=False)
            return names, result, failed

    try:
        names, result, failed = asyncio.run(main())
    finally:
        provider.close()
    assert names == ["execute", "get_schema", "search"]
    # fastmcp hands each inner tool's structured result ({"result": ...}) to the program.
    assert result.structured_content == {
        "sums": [{"result": 2**70 + i} for i in range(5)],
        "greeting": {"result": "hello pycage"},
    }
    assert failed.is_error
    assert "ZeroDivisionError" in failed.content[0].text
