"""A ``run_python`` tool for the OpenAI Agents SDK (tested with
openai-agents 0.24).

:func:`run_python_tool` returns a ``FunctionTool`` whose programs run in a
sandboxed pycage session::

    from agents import Agent, RunConfig, Runner, function_tool
    from pycage.openai_agents import run_python_tool

    agent = Agent(name="analyst", tools=[run_python_tool(tools=[get_prices])])
    Runner.run_sync(agent, "...", run_config=RunConfig(group_id="thread-1"))

- **Sessions by conversation.** The session is keyed by ``session_key(ctx)``;
  by default the run's ``RunConfig.group_id`` (the SDK's id "to link
  multiple traces from the same conversation", e.g. a chat thread id), so
  runs of one conversation share the program's variables and other
  conversations do not. A run without a ``group_id`` gets a session of its
  own, closed at the tool's next use once the run's objects are garbage
  collected. At most
  ``max_sessions`` are live (the least recently used is closed beyond
  it); a session also ends after ``idle_timeout_seconds`` without a call,
  and :meth:`PycageRunPython.close_conversation` ends one.
- **Tools.** ``tools`` are the SDK's ``FunctionTool``s (invoked through
  the SDK's ``invoke_function_tool``, with their schema validation and
  timeout, inside a function span when tracing) and plain Python
  callables; both become the program's ``tools`` namespace (``await
  tools.get_prices(ticker="X")``). A FunctionTool made with the SDK's
  default ``failure_error_function`` returns its error text instead of
  raising (as it does for the model); make it with
  ``failure_error_function=None`` for the program to see ``ToolError``.
- **Result.** The tool's output is the JSON text ``{"value": ..., "logs":
  [...], "error": {...}}``; when the program showed images, the output is
  that text followed by one image per image.

Only this module imports the Agents SDK; ``import pycage`` does not.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Optional

from agents import FunctionTool, RunContextWrapper
from agents.tool import ToolOutputImage, ToolOutputText, invoke_function_tool
from agents.tool_context import ToolContext
from agents.tracing import function_span, get_current_trace
from pydantic_core import to_jsonable_python

from ._integrations import RunPython, best_image, image_data_url, report_text
from ._runtime import Bindings, Result, Runtime
from ._stubs import bindings_and_stubs, schema_def

__all__ = ["PycageRunPython", "run_python_tool", "default_session_key"]

_PARAMS_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The Python program. Top-level await works; the value is its return or last expression.",
        }
    },
    "required": ["code"],
    "additionalProperties": False,
}

# The ToolContext of the run_python call in progress: pycage copies the
# caller's context variables into each binding's task, so a nested tool
# call finds the call it belongs to. Held weakly: a session keeps the
# context of its last run, and a strong reference would keep the run alive.
_current: contextvars.ContextVar[Optional[weakref.ref[ToolContext[Any]]]] = contextvars.ContextVar(
    "pycage_openai_agents_call", default=None
)


#: Numbers the nested calls' tool_call_ids (``<run_python's id>__<n>``).
_nested_ids = itertools.count(1)


class _RunKey:
    """A session key that lives as long as one run: it is the run's usage
    object (shared by every ToolContext of the run), held weakly."""

    __slots__ = ("_ref", "_id", "__weakref__")

    def __init__(self, usage: object) -> None:
        self._ref = weakref.ref(usage)
        self._id = id(usage)

    def __hash__(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _RunKey) and self._ref() is not None and self._ref() is other._ref()

    def dead_of(self, ident: int) -> bool:
        """Whether this is a key of the run whose usage had ``id`` ``ident``, now gone."""
        return self._id == ident and self._ref() is None


def default_session_key(ctx: RunContextWrapper[Any]) -> Hashable:
    """The run's ``RunConfig.group_id`` when set, else the run itself."""
    run_config = getattr(ctx, "run_config", None)
    group = getattr(run_config, "group_id", None)
    if group:
        return ("group", group)
    return _RunKey(ctx.usage)


class PycageRunPython:
    """What :func:`run_python_tool` returns besides the tool: ``.tool``, and
    the sessions' controls."""

    def __init__(self, engine: RunPython, session_key: Callable[[RunContextWrapper[Any]], Optional[Hashable]]) -> None:
        self._engine = engine
        self._session_key = session_key
        self._watched: set[int] = set()

    async def invoke(self, ctx: ToolContext[Any], arguments: str) -> Any:
        try:
            code = json.loads(arguments)["code"]
        except (ValueError, KeyError, TypeError):
            return report_text(_refused('run_python takes {"code": "..."}'))
        if not isinstance(code, str):
            return report_text(_refused("code must be a string"))
        key = self._session_key(ctx)
        if isinstance(key, _RunKey):
            self._close_with_run(ctx.usage)
        token = _current.set(weakref.ref(ctx))
        try:
            result, note = await self._engine.arun(key, code)
        finally:
            _current.reset(token)
        return _output(result, note)

    def _close_with_run(self, usage: object) -> None:
        """Closes the run's session once the run is gone (its usage object
        collected); the pool does it at its next use."""
        ident = id(usage)
        if ident in self._watched:
            return
        self._watched.add(ident)
        pool, watched = self._engine.pool, self._watched

        def gone() -> None:
            watched.discard(ident)
            pool.close_later(lambda key: isinstance(key, _RunKey) and key.dead_of(ident))

        weakref.finalize(usage, gone)

    def close_conversation(self, group_id: str) -> bool:
        """Ends the session of the conversation ``group_id``; False if it had none."""
        return self._engine.pool.close(("group", group_id))

    def close(self) -> None:
        """Ends every session, and closes the runtime if the tool made it."""
        self._engine.close()


def _refused(message: str) -> Result:
    from ._runtime import Failure

    return Result(
        value=None,
        logs=[],
        error=Failure("exception", message),
        has_value=False,
        dropped_frames=0,
        displays=[],
        files=[],
        skipped_files=[],
    )


def _output(result: Result, note: Optional[str]) -> Any:
    text = report_text(result, note)
    shown = [(d, best_image(d)) for d in result.displays]
    out: list[Any] = [ToolOutputImage(image_url=image_data_url(d, mime)) for d, mime in shown if mime is not None]
    return [ToolOutputText(text=text), *out] if out else text


def _adapt(item: Any) -> Optional[tuple[str, Any, list[str]]]:
    if not isinstance(item, FunctionTool):
        return None
    tool = item

    async def call(**kwargs: Any) -> Any:
        ref = _current.get()
        outer = ref() if ref is not None else None
        if outer is None:
            raise RuntimeError(f"{tool.name} was called outside a run_python call")
        arguments = json.dumps(kwargs, ensure_ascii=False)
        ctx = ToolContext.from_agent_context(
            outer,
            tool_call_id=f"{outer.tool_call_id}__{next(_nested_ids)}",
            tool_name=tool.name,
            tool_arguments=arguments,
            agent=outer.agent,
            run_config=outer.run_config,
        )
        if get_current_trace() is None:
            value = await invoke_function_tool(function_tool=tool, context=ctx, arguments=arguments)
        else:
            with function_span(tool.name, input=arguments) as span:
                value = await invoke_function_tool(function_tool=tool, context=ctx, arguments=arguments)
                span.span_data.output = str(value)
        return to_jsonable_python(value, fallback=str)

    return tool.name, call, schema_def("tools", tool.name, tool.params_json_schema, tool.description)


def run_python_tool(
    bindings: Optional[Bindings] = None,
    *,
    tools: Iterable[Any] = (),
    runtime: Optional[Runtime] = None,
    name: str = "run_python",
    session_key: Callable[[RunContextWrapper[Any]], Optional[Hashable]] = default_session_key,
    max_sessions: int = 16,
    idle_timeout_seconds: float = 600.0,
    max_lifetime_seconds: float = 3600.0,
    **runtime_options: Any,
) -> FunctionTool:
    """A ``FunctionTool`` that runs the model's Python program with pycage.

    ``tools`` (the SDK's FunctionTools and Python callables) become the
    program's ``tools`` namespace; ``bindings`` adds pycage bindings as they
    are. ``session_key(ctx)`` names the session of a call (None: a fresh
    process). ``runtime`` is a :class:`pycage.Runtime` to share; without
    one, ``runtime_options`` make one. The returned tool's ``pycage``
    attribute is the :class:`PycageRunPython` with ``close()`` and
    ``close_conversation(group_id)``."""
    all_bindings, stubs = bindings_and_stubs(bindings, tools, "tools", _adapt)
    engine = RunPython(
        all_bindings,
        stubs,
        runtime=runtime,
        runtime_options=runtime_options,
        owner="pycage.openai_agents.run_python_tool",
        conversation="conversation (the run's group_id; without one, of one run)",
        max_sessions=max_sessions,
        idle_timeout_seconds=idle_timeout_seconds,
        max_lifetime_seconds=max_lifetime_seconds,
    )
    controls = PycageRunPython(engine, session_key)
    tool = FunctionTool(
        name=name,
        description=engine.description,
        params_json_schema=_PARAMS_SCHEMA,
        on_invoke_tool=controls.invoke,
        strict_json_schema=True,
    )
    tool.pycage = controls  # type: ignore[attr-defined]
    return tool
