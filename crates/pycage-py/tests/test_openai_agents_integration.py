"""pycage.openai_agents: run_python_tool called through the Agents SDK's
own tool-invocation path (Runner.run), driven by the SDK's ScriptedModel
(agents.testing; no network model, tracing off), against real children."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest
from integration_programs import png_program

from conftest import unavailable

try:
    import agents
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from pycage.openai_agents import run_python_tool
except ImportError:  # pragma: no cover - the CI venv installs the pinned version
    agents = None


@pytest.fixture(autouse=True)
def _needs_agents():
    if agents is None:
        unavailable("openai-agents is not installed (the CI venv installs the pinned version)")
    set_tracing_disabled(True)  # nothing is exported anywhere


def script(*programs):
    """Model steps: for each program, a run_python call then a reply."""
    steps = []
    for i, code in enumerate(programs):
        steps += [[function_call("run_python", {"code": code}, call_id=f"call{i}")], [assistant_message(f"ok {i}")]]
    return ScriptedModel(steps)


def tool_outputs(result):
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


def test_runs_of_one_conversation_share_a_session(rt):
    @function_tool(failure_error_function=None)
    def price(ticker: str) -> float:
        """The price of a ticker."""
        if ticker == "NOPE":
            raise ValueError(f"unknown ticker {ticker}")
        return {"ACME": 12.5}[ticker]

    python = run_python_tool(tools=[price], runtime=rt)
    model = script(
        "p = await tools.price(ticker='ACME')\n"
        "try:\n    await tools.price(ticker='NOPE')\nexcept ToolError as e:\n    err = [e.tool, str(e)]\n"
        "print('priced')\n[p, err]",
        "[p * 2, err[1]]",
        "'p' in globals()",
    )
    agent = Agent(name="analyst", model=model, tools=[python])

    async def main():
        first = await Runner.run(agent, "price it", run_config=RunConfig(group_id="thread-1"))
        second = await Runner.run(agent, "double it", run_config=RunConfig(group_id="thread-1"))
        other = await Runner.run(agent, "fresh", run_config=RunConfig(group_id="thread-2"))
        return [json.loads(out) for r in (first, second, other) for out in tool_outputs(r)]

    try:
        assert asyncio.run(main()) == [
            {"value": [12.5, ["price", "unknown ticker NOPE"]], "logs": ["priced"]},
            {"value": [25.0, "unknown ticker NOPE"], "logs": []},
            {"value": False, "logs": []},
        ]
        assert python.pycage.close_conversation("thread-1")
        assert not python.pycage.close_conversation("thread-1")
    finally:
        python.pycage.close()


def test_a_run_without_group_id_has_its_own_session_closed_with_the_run(process_rt):
    python = run_python_tool(runtime=process_rt)
    engine = python.pycage._engine

    async def main():
        # One run calls run_python twice: both calls see one session.
        steps = ScriptedModel(
            [
                [function_call("run_python", {"code": "x = 1"}, call_id="a")],
                [function_call("run_python", {"code": "x + 1"}, call_id="b")],
                [assistant_message("done")],
            ]
        )
        one = await Runner.run(Agent(name="one", model=steps, tools=[python]), "go")
        values = [json.loads(out).get("value") for out in tool_outputs(one)]
        live = len(engine.pool)
        del one
        gc.collect()
        # The run is gone: its session closes at the pool's next use.
        return values, live, len(engine.pool)

    try:
        assert asyncio.run(main()) == ([None, 2], 1, 0)
    finally:
        python.pycage.close()


def test_images_go_back_as_image_outputs(process_rt):
    python = run_python_tool(runtime=process_rt)
    agent = Agent(name="a", model=script(png_program(2, 2)), tools=[python])
    try:
        result = Runner.run_sync(agent, "draw", run_config=RunConfig(group_id="g"))
        (output,) = tool_outputs(result)
        assert isinstance(output, list) and [o.type for o in output] == ["text", "image"]
        assert output[1].image_url.startswith("data:image/png;base64,iVBOR")
        assert json.loads(output[0].text)["displays"] == [
            {"types": ["image/png", "text/plain"], "shown_as": "image/png"}
        ]
    finally:
        python.pycage.close()
