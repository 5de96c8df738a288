"""pycage code mode for PydanticAI (tested with pydantic-ai-slim 2.78).

:class:`CodeMode` is a PydanticAI capability in the style of
``pydantic_ai_harness.CodeMode``, with real CPython in a sandboxed pycage
session where the harness has Monty::

    from pydantic_ai import Agent
    from pycage.pydantic_ai import CodeMode

    agent = Agent("anthropic:claude-sonnet-4-6", capabilities=[CodeMode()])

    @agent.tool_plain
    def get_weather(city: str) -> dict:
        return {"city": city, "temp_f": 72}

- The model gets one ``run_python`` tool whose description carries the
  rules of a program and the Python stubs of the agent's tools (rendered by
  PydanticAI from their schemas). ``tools=`` selects which tools go inside
  (``'all'``, names, or a predicate, as the harness's ``tools``); the rest
  stay ordinary tool calls.
- In the program the tools are top-level functions (``await
  get_weather(city="Paris")``; a tool marked ``sequential`` is a plain
  ``def``). Each call is dispatched through PydanticAI's own tool manager
  (``ToolManager.handle_call``), so argument validation, the tool's retries
  and hooks, and tracing apply; a call that fails (a validation error, a
  ``ModelRetry``) raises ``ToolError`` at the call site, whose ``.tool``
  names the tool, and the program may catch it.
- State persists between ``run_python`` calls of one agent run (one pycage
  session per run, closed when the run ends). A program that raises, times
  out or crashes becomes a ``ModelRetry`` carrying its output and
  traceback, so the model tries again (``max_retries``).
- The value is the program's ``return`` or last expression (JSON); with
  printed output the result is ``{"output": ..., "result": ...}``, as the
  harness returns it. Images the program shows (``plt.show()``) reach the
  model as image content.

Only this module imports pydantic_ai; ``import pycage`` does not.
"""

from __future__ import annotations

import asyncio
import base64
import keyword
import re
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Annotated, Any, Optional

from pydantic import Field, TypeAdapter
from pydantic_ai import RunContext, ToolDefinition, WrapperToolset
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, UserError
from pydantic_ai.function_signature import FunctionSignature
from pydantic_ai.messages import BinaryImage, ToolCallPart, ToolReturn
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT, ToolDenied, ToolSelector, matches_tool_selector
from pydantic_ai.toolsets.abstract import AbstractToolset, ToolsetTool
from pydantic_core import to_jsonable_python
from typing_extensions import TypedDict

from ._integrations import RuntimeHolder, images
from ._runtime import ErrorClass, Namespace, Result, Runtime, Session

__all__ = ["CodeMode", "CodeModeToolset", "RUN_PYTHON_TOOL_NAME"]

#: The tool the model calls.
RUN_PYTHON_TOOL_NAME = "run_python"
#: The program's global holding the dispatcher binding.
TOOLS_GLOBAL = "_pycage_tools"
#: Tool kinds that drive the framework (tool search, capability loading): never sandboxed.
_CONTROL_TOOL_KINDS = frozenset({"tool-search", "capability-load"})


class RunPythonArgs(TypedDict):
    code: Annotated[
        str,
        Field(description="The Python program. Top-level await works; the value is its return or last expression."),
    ]


_ARGS = TypeAdapter(RunPythonArgs)
_ARGS_SCHEMA = _ARGS.json_schema()

# Defines the tools as functions; compiled under its own name so tracebacks
# through a tool show `<pycage tools>`, not lines of `<program>`.
_BIND_SOURCE = """
def _pycage_bind(tool, label, is_async, doc):
    call = _pycage_tools.call

    def fix(e):
        e.tool = label
        return e

    if is_async:
        async def fn(**kwargs):
            try:
                return await call({"tool": tool, "args": kwargs})
            except ToolError as e:
                raise fix(e) from None
    else:
        def fn(**kwargs):
            try:
                return call.sync({"tool": tool, "args": kwargs})
            except ToolError as e:
                raise fix(e) from None
    fn.__name__ = fn.__qualname__ = label
    fn.__doc__ = doc
    return fn
"""

_BASE_DESCRIPTION = """\
Run a Python program in a sandboxed CPython process, with the functions below in scope, and get back its result. \
Use it to call them: one program can make many calls, loop, branch, filter and combine their results, \
and run independent calls concurrently with `asyncio.gather(...)`.

Rules:
- Names, imports and objects persist between calls of this conversation's run (a program that times out or crashes \
resets them).
- Top-level `await` works. Call the functions with keyword arguments: `r = await get_weather(city="Paris")`; \
a function shown as `def` is called without `await`.
- The result is the program's top-level `return` value, else its last expression statement; it must be JSON \
(dict with str keys, list, str, int, float, bool, None). print() output comes back with it.
- A failed function call raises `ToolError` (`.tool` names the function); catch it to go on.
- The standard library is available; the network is not (use the functions).
- Each call has {wall:g} s of wall clock, {cpu:g} s of CPU and {mem} MiB of memory.
"""


def _python_name(name: str, taken: set[str]) -> str:
    """``name`` as an identifier the program can call, unique in ``taken``."""
    out = re.sub(r"\W", "_", name) or "_"
    if out[0].isdigit():
        out = "_" + out
    if keyword.iskeyword(out) or out.startswith("_pycage") or out == "ToolError":
        out += "_"
    base, n = out, 2
    while out in taken:
        out, n = f"{base}_{n}", n + 1
    taken.add(out)
    return out


def _can_be_sandboxed(tool_def: ToolDefinition) -> bool:
    """Framework control tools, local fallbacks of native tools, and other
    code-execution tools stay native (the harness's rule)."""
    return (
        tool_def.tool_kind not in _CONTROL_TOOL_KINDS
        and not tool_def.unless_native
        and not (tool_def.metadata and "code_arg_name" in tool_def.metadata)
    )


@dataclass(kw_only=True)
class _RunPythonTool(ToolsetTool[AgentDepsT]):
    """The ``run_python`` tool, with what ``get_tools`` found for this step."""

    functions: dict[str, str]  # program name -> tool name
    defs: dict[str, ToolDefinition]  # program name -> definition
    wrapped_tools: dict[str, ToolsetTool[AgentDepsT]]


@dataclass
class _Call:
    """The ``run_python`` call in progress: where its tool calls go."""

    ctx: RunContext[Any]
    manager: ToolManager[Any]
    allowed: frozenset[str]
    parent_id: str
    count: int = 0
    images: list[Any] = field(default_factory=list)


@dataclass
class _RunState:
    session: Optional[Session] = None
    defined: Optional[tuple[Any, ...]] = None  # what the program's functions were last defined from
    current: Optional[_Call] = None


@dataclass
class CodeModeToolset(WrapperToolset[AgentDepsT]):
    """The toolset :class:`CodeMode` wraps the agent's tools in: ``run_python``
    plus the tools that stay native."""

    tool_selector: ToolSelector[AgentDepsT] = "all"
    max_retries: int = 3
    _: KW_ONLY
    holder: RuntimeHolder = field(repr=False)
    tool_name: str = RUN_PYTHON_TOOL_NAME
    idle_timeout_seconds: float = 600.0
    _state: Optional[_RunState] = field(default=None, init=False, repr=False, compare=False)

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        """A fresh instance per run: each run has its own session."""
        return replace(self, wrapped=await self.wrapped.for_run(ctx))

    async def for_run_step(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        new_wrapped = await self.wrapped.for_run_step(ctx)
        if new_wrapped is self.wrapped:
            return self
        step = replace(self, wrapped=new_wrapped)
        step._state = self._state
        return step

    async def __aenter__(self) -> CodeModeToolset[AgentDepsT]:
        await self.wrapped.__aenter__()
        if self._state is None:
            self._state = _RunState()
        return self

    async def __aexit__(self, *args: Any) -> Optional[bool]:
        state, self._state = self._state, None
        try:
            return await self.wrapped.__aexit__(*args)
        finally:
            if state is not None and state.session is not None:
                await asyncio.to_thread(state.session.close)

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        wrapped_tools = await self.wrapped.get_tools(ctx)
        native: dict[str, ToolsetTool[AgentDepsT]] = {}
        functions: dict[str, str] = {}
        defs: dict[str, ToolDefinition] = {}
        taken: set[str] = set()
        for name, tool in wrapped_tools.items():
            td = tool.tool_def
            if (
                _can_be_sandboxed(td)
                and ctx.is_tool_available(td)
                and await matches_tool_selector(self.tool_selector, ctx, td)
            ):
                pyname = _python_name(name, taken)
                functions[pyname] = name
                defs[pyname] = td
            else:
                native[name] = tool
        if self.tool_name in native:
            raise UserError(f"The tool name {self.tool_name!r} is taken by pycage's CodeMode; rename your tool.")
        runtime = self.holder.runtime if self.holder.started else await asyncio.to_thread(lambda: self.holder.runtime)
        native[self.tool_name] = _RunPythonTool(
            toolset=self,
            tool_def=ToolDefinition(
                name=self.tool_name,
                description=self._description(runtime, defs),
                parameters_json_schema=_ARGS_SCHEMA,
                metadata={"code_arg_name": "code", "code_arg_language": "python"},
                sequential=True,
            ),
            max_retries=self.max_retries,
            args_validator=_ARGS.validator,  # type: ignore[arg-type]
            functions=functions,
            defs=defs,
            wrapped_tools=wrapped_tools,
        )
        return native

    def _description(self, runtime: Runtime, defs: dict[str, ToolDefinition]) -> str:
        config = runtime.config
        text = _BASE_DESCRIPTION.format(
            wall=config["wall_seconds"], cpu=config["cpu_seconds"], mem=config["address_space_bytes"] >> 20
        )
        if not defs:
            return text + "\nNo functions are available: the program can only compute.\n"
        sigs = [td.function_signature for td in defs.values()]
        conflicting = FunctionSignature.get_conflicting_type_names(sigs)
        blocks = FunctionSignature.render_type_definitions(sigs, conflicting)
        blocks += [
            td.function_signature.render(
                "...",
                name=pyname,
                description=td.description,
                is_async=not td.sequential,
                conflicting_type_names=conflicting,
            )
            for pyname, td in defs.items()
        ]
        return text + "\nFunctions:\n```python\n" + "\n\n".join(blocks) + "\n```\n"

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        if not isinstance(tool, _RunPythonTool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        state = self._state
        if state is None:
            raise UserError("pycage's CodeModeToolset must be entered (run by an agent) before run_python is called")
        session = await self._session(state, tool)
        parent = ctx.tool_manager
        if parent is None:
            raise UserError("run_python needs the run's tool manager (ctx.tool_manager)")
        manager = ToolManager(
            toolset=self.wrapped, root_capability=parent.root_capability, ctx=ctx, tools=tool.wrapped_tools
        )
        call = _Call(ctx, manager, frozenset(tool.functions.values()), ctx.tool_call_id or "pycage_run_python")
        state.current = call
        try:
            result = await session.arun(tool_args["code"])
        finally:
            state.current = None
        ended = session.ended
        if ended:
            state.session = state.defined = None
        if result.error is not None:
            raise ModelRetry(_failure(result, ended))
        return _tool_return(result)

    async def _session(self, state: _RunState, tool: _RunPythonTool[AgentDepsT]) -> Session:
        """The run's session, opened on first use; the program's functions
        (re)defined when the tools changed since."""
        if state.session is None:
            runtime = await asyncio.to_thread(lambda: self.holder.runtime)
            bindings = {TOOLS_GLOBAL: Namespace({"call": self._dispatch}, error_class=ErrorClass("ToolError", "tool"))}
            state.session = runtime.session(bindings, idle_timeout_seconds=self.idle_timeout_seconds)
            state.defined = None
        key = tuple(
            (py, orig, tool.defs[py].sequential, tool.defs[py].description) for py, orig in tool.functions.items()
        )
        if key != state.defined:
            lines = [f"exec(compile({_BIND_SOURCE!r}, '<pycage tools>', 'exec'), globals())"]
            for py, orig in tool.functions.items():
                td = tool.defs[py]
                lines.append(f"{py} = _pycage_bind({orig!r}, {py!r}, {not td.sequential}, {td.description!r})")
            lines.append("del _pycage_bind")
            result = await state.session.arun("\n".join(lines) + "\n")
            if result.error is not None:
                raise UserError(f"pycage could not define the tools in the sandbox: {result.error.message}")
            state.defined = key
        return state.session

    async def _dispatch(self, tool: str, args: dict[str, Any]) -> Any:
        """The program's tool call, through PydanticAI's tool manager."""
        state = self._state
        call = state.current if state is not None else None
        if call is None:
            raise RuntimeError("no run_python call is in progress")
        if tool not in call.allowed:
            raise RuntimeError(f"{tool!r} is not a function of this run")
        call.count += 1
        part = ToolCallPart(tool_name=tool, args=args, tool_call_id=f"{call.parent_id}__{call.count}")
        try:
            result = await call.manager.handle_call(part, wrap_validation_errors=False)
        except (CallDeferred, ApprovalRequired) as e:
            raise RuntimeError(
                f"{tool} needs {type(e).__name__} handling, which a program in run_python cannot wait for; "
                "add a capability that resolves it inline, or leave the tool out of CodeMode(tools=...)"
            ) from e
        if isinstance(result, ToolDenied):
            raise RuntimeError(f"the call of {tool} was denied: {result.message}")
        if isinstance(result, ToolReturn):
            result = result.return_value
        return to_jsonable_python(result, bytes_mode="base64")


def _failure(result: Result, ended: Optional[str]) -> str:
    error = result.error
    assert error is not None
    text = f"Runtime error ({error.kind}):\n{error.message}" if error.kind != "exception" else error.message
    if result.logs:
        text = "Output:\n" + "\n".join(result.logs) + "\n\n" + text
    if ended:
        text += (
            "\n\nThe sandbox session ended with this call and the next one starts afresh: re-run any imports "
            "and recreate the state you need."
        )
    return text


def _tool_return(result: Result) -> ToolReturn:
    value = result.value if result.has_value else None
    output = "\n".join(result.logs)
    if not output:
        return_value: Any = value if value is not None else {}
    elif value is None:
        return_value = {"output": output}
    else:
        return_value = {"output": output, "result": value}
    shown = [BinaryImage(data=base64.b64decode(data), media_type=mime) for mime, data in images(result)]
    return ToolReturn(return_value=return_value, content=shown or None, metadata={"pycage": True})


@dataclass
class CodeMode(AbstractCapability[AgentDepsT]):
    """Puts the agent's tools behind one ``run_python`` tool whose programs
    run in a pycage session (one per agent run).

    ``tools`` selects the tools that go inside (``'all'``, a list of names,
    or a ``(ctx, tool_def) -> bool`` predicate); ``max_retries`` is
    ``run_python``'s retry budget. ``runtime`` is a :class:`pycage.Runtime`
    to share; without one, ``runtime_options`` (``isolation``, ``venv``,
    budgets such as ``wall_seconds``) make one on first use, which
    :meth:`close` closes.
    """

    tools: ToolSelector[AgentDepsT] = "all"
    max_retries: int = 3
    _: KW_ONLY
    runtime: Optional[Runtime] = None
    runtime_options: dict[str, Any] = field(default_factory=dict)
    tool_name: str = RUN_PYTHON_TOOL_NAME
    idle_timeout_seconds: float = 600.0

    def __post_init__(self) -> None:
        self._holder = RuntimeHolder(self.runtime, self.runtime_options, "pycage.pydantic_ai.CodeMode")

    def get_wrapper_toolset(self, toolset: AbstractToolset[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        return CodeModeToolset(
            wrapped=toolset,
            tool_selector=self.tools,
            max_retries=self.max_retries,
            holder=self._holder,
            tool_name=self.tool_name,
            idle_timeout_seconds=self.idle_timeout_seconds,
        )

    def close(self) -> None:
        """Closes the runtime if this capability made it."""
        self._holder.close()
