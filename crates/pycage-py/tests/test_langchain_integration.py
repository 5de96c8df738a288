"""pycage.langchain: run_python_tool in LangChain's agent graph (LangGraph,
with a checkpointer), driven by LangChain's GenericFakeChatModel (no
network model), against real children."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import unavailable

try:
    import langchain_core
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from pycage.langchain import run_python_tool
except ImportError:  # pragma: no cover - the CI venv installs the pinned versions
    langchain_core = None


@pytest.fixture(autouse=True)
def _needs_langchain():
    if langchain_core is None:
        unavailable("langchain and langgraph are not installed (the CI venv installs the pinned versions)")


def fake_model(replies):
    """GenericFakeChatModel replying ``replies`` in order; binding tools
    leaves it as it is (its replies already name them)."""

    class Fake(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    return Fake(messages=iter(replies))


def run_python(code, call_id):
    return AIMessage(
        content="", tool_calls=[{"name": "run_python", "args": {"code": code}, "id": call_id, "type": "tool_call"}]
    )


def last_tool_result(state):
    message = [m for m in state["messages"] if isinstance(m, ToolMessage)][-1]
    return json.loads(message.content)


def test_a_thread_keeps_its_variables_and_another_does_not(rt):
    searched = []

    @tool
    def search(query: str, limit: int = 3) -> list[str]:
        """Search the web."""
        searched.append(query)
        return [f"{query} #{i}" for i in range(limit)]

    python = run_python_tool(tools=[search], runtime=rt)
    model = fake_model(
        [
            run_python("hits = await tools.search(query='pycage', limit=2)\nprint(len(hits), 'hits')\nhits", "c1"),
            "found them",
            run_python("[hits[-1], len(hits)]", "c2"),
            "still here",
            run_python("'hits' in globals()", "c3"),
            "a stranger",
        ]
    )
    agent = create_agent(model, tools=[python], checkpointer=InMemorySaver())
    try:
        turns = []
        for thread, text in [("alice", "search"), ("alice", "again"), ("bob", "hello")]:
            state = agent.invoke(
                {"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": thread}}
            )
            turns.append((state["messages"][-1].content, last_tool_result(state)))
        assert turns == [
            ("found them", {"value": ["pycage #0", "pycage #1"], "logs": ["2 hits"]}),
            ("still here", {"value": ["pycage #1", 2], "logs": []}),
            ("a stranger", {"value": False, "logs": []}),
        ]
        assert searched == ["pycage"]
        assert sorted(python.live_threads()) == ["alice", "bob"]
        assert python.close_thread("alice") and not python.close_thread("alice")
        assert python.live_threads() == ["bob"]
    finally:
        python.close()


def test_nested_tool_validation_and_failures_reach_the_program(process_rt):
    @tool
    def halve(n: int) -> float:
        """Halve an integer."""
        if n < 0:
            raise ValueError("negative")
        return n / 2

    def shout(text: str) -> str:
        """A plain callable beside the LangChain tool."""
        return text.upper()

    python = run_python_tool(tools=[halve, shout], runtime=process_rt)
    try:
        assert "async def halve(*, n: int) -> Any:" in python.description
        assert "async def shout(*, text: str) -> str:" in python.description
        code = (
            "out = [await tools.halve(n=5), await tools.shout(text='hi')]\n"
            "for bad in ({'n': 'many'}, {'n': -1}):\n"
            "    try:\n        await tools.halve(**bad)\n"
            "    except ToolError as e:\n        out.append([e.tool, str(e).splitlines()[0]])\n"
            "out"
        )
        result = json.loads(python.invoke({"code": code}))
        assert result["value"][:2] == [2.5, "HI"]
        assert result["value"][2][0] == "halve" and "validation error" in result["value"][2][1]
        assert result["value"][3] == ["halve", "negative"]
        # A failing program is a result the model reads, not an exception.
        failed = json.loads(python.invoke({"code": "1/0"}))
        assert failed["error"]["kind"] == "exception" and "ZeroDivisionError" in failed["error"]["message"]
        # Without a thread id each call is a fresh process.
        assert json.loads(python.invoke({"code": "x = 1"})) == {"logs": []}
        assert json.loads(python.invoke({"code": "'x' in globals()"}))["value"] is False
        assert python.live_threads() == []
    finally:
        python.close()


def test_sessions_are_bounded_least_recently_used_first_and_async_works(process_rt):
    python = run_python_tool(runtime=process_rt, max_sessions=2)

    async def call(thread, code):
        out = await python.ainvoke({"code": code}, {"configurable": {"thread_id": thread}})
        return json.loads(out).get("value")

    async def main():
        await call("a", "v = 'a'")
        await call("b", "v = 'b'")
        assert await call("a", "v") == "a"  # a is now the most recently used
        await call("c", "v = 'c'")  # closes b, the least recently used
        return [await call("a", "v"), await call("b", "'v' in globals()"), python.live_threads()]

    try:
        assert asyncio.run(main()) == ["a", False, ["a", "b"]]
    finally:
        python.close()
