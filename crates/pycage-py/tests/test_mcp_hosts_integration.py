"""docs/integrations/mcp-hosts.md: the `mcp_servers` snippet for the Claude
Agent SDK and the `mcpServers` JSON for other hosts start `pycage mcp` as an
MCP host does (its stdio command and arguments, through the MCP Python
SDK's client), which lists `run_python` and runs a program that calls a
binding. The Claude snippet also goes through the SDK's own options type
and the command line the SDK builds for its CLI (no CLI is started and
nothing talks to the Claude API)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from conftest import unavailable

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "integrations" / "mcp-hosts.md"


def block(lang: str, index: int = 0) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.S)
    return blocks[index]


def pycage_cli() -> str:
    """The `pycage` command: on PATH (an installed wheel), else the workspace's build."""
    found = shutil.which("pycage")
    if found:
        return found
    for profile in ("release", "debug"):
        built = ROOT / "target" / profile / "pycage"
        if built.is_file() and os.access(built, os.X_OK):
            return str(built)
    unavailable("no `pycage` command: not on PATH and not built in target/ (cargo build -p pycage-cli)")
    raise AssertionError("unreachable")


def serve_and_call(config: dict, cwd: Path) -> tuple[list[str], dict]:
    """Start the stdio server ``config`` describes, as a host does, and call run_python."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = config["command"]
    if command == "pycage":
        command = pycage_cli()
    params = StdioServerParameters(command=command, args=config.get("args", []), env=config.get("env"), cwd=cwd)

    async def main():
        with anyio.fail_after(120):
            async with stdio_client(params) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    names = [t.name for t in (await session.list_tools()).tools]
                    result = await session.call_tool(
                        "run_python",
                        {"code": "import asyncio\nr = await asyncio.gather(*[tools.echo(n=i) for i in range(3)])\nr"},
                    )
                    return names, result.structured_content

    return anyio.run(main)


def mcp_or_skip():
    try:
        import mcp  # noqa: F401
    except ImportError:
        unavailable("the MCP Python SDK is not installed (the CI venv installs the pinned version)")


def test_the_claude_agent_sdk_snippet(tmp_path):
    mcp_or_skip()
    try:
        from claude_agent_sdk import ClaudeAgentOptions  # noqa: F401
        from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
    except ImportError:
        unavailable("claude-agent-sdk is not installed (the CI venv installs the pinned version)")
    (tmp_path / "bindings.toml").write_text(block("toml"))
    scope: dict = {}
    exec(block("python", 0), scope)  # the page's snippet, as written
    options = scope["options"]
    config = options.mcp_servers["pycage"]
    # What the SDK hands its CLI: the server as configured.
    command = SubprocessCLITransport(prompt="hi", options=options)
    command._cli_path = sys.executable  # never started: only its command line is built
    argv = command._build_command()
    assert json.loads(argv[argv.index("--mcp-config") + 1]) == {"mcpServers": {"pycage": config}}
    assert "mcp__pycage__run_python" in options.allowed_tools
    names, result = serve_and_call(config, tmp_path)
    assert names == ["run_python"]
    assert result == {"value": [{"n": 0}, {"n": 1}, {"n": 2}], "logs": []}


def test_the_mcp_servers_json_for_other_hosts(tmp_path):
    mcp_or_skip()
    bindings = tmp_path / "bindings.toml"
    bindings.write_text(block("toml"))
    text = block("json").replace("/absolute/path/to/bindings.toml", str(bindings))
    config = json.loads(text)["mcpServers"]["pycage"]
    names, result = serve_and_call(config, ROOT)  # any directory: the path is absolute
    assert names == ["run_python"]
    assert result == {"value": [{"n": 0}, {"n": 1}, {"n": 2}], "logs": []}
