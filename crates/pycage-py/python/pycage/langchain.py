"""A ``run_python`` tool for LangChain and LangGraph (tested with
langchain-core 1.8, langchain 1.5 and langgraph 1.2).

:func:`run_python_tool` returns a LangChain ``BaseTool`` whose programs run
in a sandboxed pycage session::

    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from pycage.langchain import run_python_tool

    python = run_python_tool(tools=[search, fetch])
    agent = create_agent(model, tools=[python], checkpointer=InMemorySaver())
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})

- **Sessions by thread.** The session is keyed by the graph's thread id
  (``config["configurable"]["thread_id"]``): a LangGraph agent keeps its
  program's variables across the turns of one thread, and another thread
  does not see them. A call without a thread id runs in a fresh process.
  At most ``max_sessions`` are live (opening one more closes the least
  recently used); a thread's session also ends after
  ``idle_timeout_seconds`` without a call, and :meth:`PycageRunPythonTool.close_thread`
  ends it when the thread ends.
- **Tools.** ``tools`` are LangChain tools (called with ``ainvoke``, so
  their argument validation, callbacks and tracing apply, nested under the
  ``run_python`` call) and plain Python callables; both become the
  program's ``tools`` namespace (``await tools.search(query="x")``).
  ``bindings`` adds any pycage bindings as they are.
- **Result.** The tool's content is the JSON text ``{"value": ...,
  "logs": [...], "error": {...}}``; when the program showed images, the
  content is that text block followed by one image block per image.

Only this module imports langchain_core; ``import pycage`` does not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic_core import to_jsonable_python

from ._integrations import RunPython, images, report_text
from ._runtime import Bindings, Result, Runtime
from ._stubs import bindings_and_stubs, schema_def

__all__ = ["PycageRunPythonTool", "run_python_tool"]


class RunPythonInput(BaseModel):
    code: str = Field(
        description="The Python program. Top-level await works; the value is its return or last expression."
    )


def _thread_id(config: Optional[RunnableConfig]) -> Optional[str]:
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)


def _content(result: Result, note: Optional[str]) -> Any:
    text = report_text(result, note)
    shown = images(result)
    if not shown:
        return text
    return [{"type": "text", "text": text}] + [
        {"type": "image", "base64": data, "mime_type": mime} for mime, data in shown
    ]


class PycageRunPythonTool(BaseTool):
    """The ``run_python`` tool :func:`run_python_tool` makes."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "run_python"
    description: str = ""
    args_schema: type[BaseModel] = RunPythonInput
    _engine: RunPython = PrivateAttr()

    def _run(self, code: str, config: RunnableConfig) -> Any:
        result, note = self._engine.run(_thread_id(config), code)
        return _content(result, note)

    async def _arun(self, code: str, config: RunnableConfig) -> Any:
        result, note = await self._engine.arun(_thread_id(config), code)
        return _content(result, note)

    def close_thread(self, thread_id: str) -> bool:
        """Ends the session of ``thread_id`` (its variables are gone); False
        if it had none."""
        return self._engine.pool.close(str(thread_id))

    def live_threads(self) -> list[str]:
        """The thread ids with a session, least recently used first."""
        return [str(k) for k in self._engine.pool.keys()]

    def close(self) -> None:
        """Ends every session, and closes the runtime if this tool made it."""
        self._engine.close()


def _adapt(item: Any) -> Optional[tuple[str, Any, list[str]]]:
    if not isinstance(item, BaseTool):
        return None
    tool = item

    async def call(**kwargs: Any) -> Any:
        # `ainvoke` inherits the run_python call's config (callbacks, tags,
        # tracing) through LangChain's context variable, which pycage
        # copies into the binding's task.
        return to_jsonable_python(await tool.ainvoke(kwargs), fallback=str)

    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        schema = schema.model_json_schema()
    return tool.name, call, schema_def("tools", tool.name, schema, tool.description)


def run_python_tool(
    bindings: Optional[Bindings] = None,
    *,
    tools: Iterable[Any] = (),
    runtime: Optional[Runtime] = None,
    name: str = "run_python",
    max_sessions: int = 16,
    idle_timeout_seconds: float = 600.0,
    max_lifetime_seconds: float = 3600.0,
    **runtime_options: Any,
) -> PycageRunPythonTool:
    """A LangChain tool that runs the model's Python program with pycage.

    ``tools`` (LangChain tools and Python callables) become the program's
    ``tools`` namespace; ``bindings`` adds pycage bindings as they are.
    ``runtime`` is a :class:`pycage.Runtime` to share (you close it);
    without one, ``runtime_options`` (``isolation``, ``venv``, budgets such
    as ``wall_seconds``) make one, which :meth:`PycageRunPythonTool.close`
    closes. The tool's description states the rules, the budgets and the
    functions' stubs."""
    all_bindings, stubs = bindings_and_stubs(bindings, tools, "tools", _adapt)
    engine = RunPython(
        all_bindings,
        stubs,
        runtime=runtime,
        runtime_options=runtime_options,
        owner="pycage.langchain.run_python_tool",
        conversation="conversation thread (calls without a thread id each run in a fresh process)",
        max_sessions=max_sessions,
        idle_timeout_seconds=idle_timeout_seconds,
        max_lifetime_seconds=max_lifetime_seconds,
    )
    tool = PycageRunPythonTool(name=name, description=engine.description)
    tool._engine = engine
    return tool
