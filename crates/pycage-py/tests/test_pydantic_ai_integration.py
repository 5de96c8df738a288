"""pycage.pydantic_ai: the CodeMode capability, driven by PydanticAI's own
FunctionModel (no network model), against real children."""

from __future__ import annotations

import pytest
from integration_programs import png_program

from conftest import unavailable

try:
    import pydantic_ai
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import BinaryImage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pycage.pydantic_ai import CodeMode
except ImportError:  # pragma: no cover - the CI venv installs the pinned version
    pydantic_ai = None


@pytest.fixture(autouse=True)
def _needs_pydantic_ai():
    if pydantic_ai is None:
        unavailable("pydantic-ai is not installed (the CI venv installs the pinned version)")


def scripted(*programs):
    """A FunctionModel that calls run_python with each program in turn,
    then answers "done"; it records what it was given."""
    seen = []

    def respond(messages, info: AgentInfo):
        seen.append((messages, info))
        step = len(seen) - 1
        if step < len(programs):
            return ModelResponse(parts=[ToolCallPart("run_python", {"code": programs[step]}, tool_call_id=f"rp{step}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond), seen


def returns(result):
    """(outcome, content) of every run_python return, in order."""
    return [
        (part.outcome, part.content)
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "run_python"
    ]


def test_tools_are_dispatched_by_pydantic_ai_and_state_lives_for_the_run(rt):
    added = []
    model, seen = scripted(
        # The model passes a str where the tool declares an int: PydanticAI's
        # validation refuses it, and the program sees that as ToolError.
        "try:\n    await add(a='many', b=2)\nexcept ToolError as e:\n    refused = [e.tool, str(e)]\n"
        "total = await add(a=40, b=2)\nprint('total', total)\nrefused",
        "try:\n    scale(x=total)\nexcept ToolError as e:\n    again = str(e)\n[total * 10, again, scale(x=total)]",
        "1/0",
    )
    agent = Agent(model, capabilities=[CodeMode(runtime=rt)])
    retried: list[int] = []

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append((a, b))
        return a + b

    @agent.tool_plain(sequential=True, retries=2)
    def scale(x: int) -> int:
        """Scale by ten (a plain `def` in the program)."""
        if not retried:
            retried.append(x)
            raise ModelRetry("try again")
        return x * 10

    result = agent.run_sync("go")
    assert result.output == "done"
    assert added == [(40, 2)]  # the refused call never reached the function
    out = returns(result)
    assert out[0][0] == "success"
    assert out[0][1]["output"] == "total 42"
    tool, message = out[0][1]["result"]
    assert tool == "add" and "validation error" in message and "a" in message
    # State from the first call; scale's ModelRetry reached the program as ToolError...
    assert out[1] == ("success", [420, "try again", 420])
    # ... and a program that raises is a retry carrying its traceback.
    assert out[-1][0] == "retried" and "ZeroDivisionError: division by zero" in out[-1][1]
    # The description carries the stubs, rendered by PydanticAI.
    (run_python,) = seen[0][1].function_tools
    assert "async def add(*, a: int, b: int) -> int:" in run_python.description
    assert "def scale(*, x: int) -> int:" in run_python.description
    assert "async def scale" not in run_python.description


def test_a_tool_retry_reaches_the_program_and_each_run_has_its_own_session(process_rt):
    model, _ = scripted(
        "try:\n    flaky(x=1)\nexcept ToolError as e:\n    first = [e.tool, str(e)]\n[first, flaky(x=2)]",
    )
    agent = Agent(model, capabilities=[CodeMode(runtime=process_rt)])

    @agent.tool_plain(sequential=True)
    def flaky(x: int) -> int:
        """Fails on 1."""
        if x == 1:
            raise ModelRetry("x must not be 1")
        return x

    assert returns(agent.run_sync("go")) == [("success", [["flaky", "x must not be 1"], 2])]
    # A second run starts a new session: the first run's names are gone.
    model2, _ = scripted("'first' in globals()")
    assert returns(agent.run_sync("again", model=model2)) == [("success", False)]


def test_selected_tools_stay_native_and_images_reach_the_model(process_rt):
    model, seen = scripted(png_program(2, 2))
    agent = Agent(model, capabilities=[CodeMode(tools=["inside"], runtime=process_rt)])

    @agent.tool_plain
    def inside() -> int:
        return 1

    @agent.tool_plain
    def outside() -> int:
        return 2

    agent.run_sync("draw")
    assert sorted(t.name for t in seen[0][1].function_tools) == ["outside", "run_python"]
    # The shown image is content the model gets with the next request.
    images = [
        item
        for message in seen[1][0]
        for part in message.parts
        for item in (part.content if isinstance(getattr(part, "content", None), list) else [])
        if isinstance(item, BinaryImage)
    ]
    assert [im.media_type for im in images] == ["image/png"]
