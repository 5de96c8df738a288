"""A list of Python tools as one pycage namespace, plus its stubs.

Agent frameworks describe tools as Python functions (pydantic-ai,
LangChain, smolagents, fastmcp). :func:`python_tools` turns such a list into
the ``bindings`` of a run and the Python stub text a model needs in its
system prompt to call them from code::

    toolset = pycage.python_tools([search, fetch])
    prompt = "Write Python. Available:\\n" + toolset.stubs
    result = runtime.run(model_code, bindings=toolset.bindings)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._bindings import ErrorClass, Namespace
from ._signature import is_identifier, member_def
from .errors import InvalidBindingsError

__all__ = ["Toolset", "python_tools"]

#: The error class of :func:`python_tools` unless told otherwise.
DEFAULT_ERROR_CLASS = ErrorClass("ToolError", "tool")

ToolLike = Union[Callable[..., Any], "tuple[str, Callable[..., Any]]", Any]


@dataclass(frozen=True)
class Toolset:
    """Tools as a pycage namespace.

    ``global_name`` is the program's global (``tools``), ``functions`` the
    member name -> callable map, ``namespace`` the :class:`pycage.Namespace`
    (with the error class), ``stubs`` the Python stub text for a prompt,
    and ``bindings`` the ``{global_name: namespace}`` a run takes.
    """

    global_name: str
    functions: dict[str, Callable[..., Any]]
    namespace: Namespace
    stubs: str

    @property
    def bindings(self) -> dict[str, Namespace]:
        return {self.global_name: self.namespace}


def _tool_parts(item: Any) -> tuple[str, Callable[..., Any], Optional[str]]:
    """``(name, callable, description)`` of one tool in any accepted shape."""
    if isinstance(item, tuple):
        if len(item) != 2 or not isinstance(item[0], str) or not callable(item[1]):
            raise InvalidBindingsError(f"a tool tuple must be (name: str, function), got {item!r}")
        return item[0], item[1], None
    # pydantic-ai's Tool (.function), fastmcp's FunctionTool (.fn), and alike.
    for attr in ("function", "fn"):
        func = getattr(item, attr, None)
        name = getattr(item, "name", None)
        if callable(func) and isinstance(name, str):
            description = getattr(item, "description", None)
            return name, func, description if isinstance(description, str) else None
    if callable(item):
        name = getattr(item, "__name__", None)
        if not isinstance(name, str) or name == "<lambda>":
            raise InvalidBindingsError(f"the tool {item!r} has no usable __name__; pass it as (name, function)")
        return name, item, None
    raise InvalidBindingsError(
        f"a tool must be a function, a (name, function) tuple or an object with .name and .function; got {item!r}"
    )


def _stubs(
    global_name: str, tools: list[tuple[str, Callable[..., Any], Optional[str]]], error: Optional[ErrorClass]
) -> str:
    out: list[str] = []
    if error is not None:
        out += [
            f"class {error.name}(Exception):",
            f'    """Raised when a {global_name} call fails; .{error.member_name_property} names the function."""',
            f"    {error.member_name_property}: str",
            "",
            "",
        ]
    out += [
        f"class {global_name}:",
        f'    """Host functions. Await every call: `await {global_name}.name(arg=value)`. Keyword arguments',
        "    travel as one JSON object (dict, list, str, int, float, bool, None); so does the result.",
        '    Calls run concurrently under asyncio.gather."""',
    ]
    for name, func, description in tools:
        out.append("")
        if is_identifier(name):
            out.append("    @staticmethod")
        out += [f"    {line}" if line else "" for line in member_def(global_name, name, func, description)]
    return "\n".join(out) + "\n"


def python_tools(
    tools: Union[Iterable[ToolLike], Mapping[str, Callable[..., Any]]],
    *,
    global_name: str = "tools",
    error_class: Union[ErrorClass, str, None] = DEFAULT_ERROR_CLASS,
) -> Toolset:
    """Turns Python tools into one namespace and its stub text.

    ``tools`` is a list of functions (sync or async; named by ``__name__``),
    ``(name, function)`` pairs, or tool objects with ``.name`` and
    ``.function`` / ``.fn`` (and optionally ``.description``), as
    pydantic-ai and fastmcp define them; or a ``{name: function}`` dict.
    Stubs are built from each signature, its type hints and its docstring
    (or the tool's description).

    Calls follow pycage's convention: ``await tools.search(query="x")``
    calls ``search(query="x")``.
    """
    if isinstance(tools, Mapping):
        items = [_tool_parts((name, func)) for name, func in tools.items()]
    else:
        if isinstance(tools, (str, bytes)) or not isinstance(tools, Iterable):
            raise InvalidBindingsError(f"tools must be a list of functions or tools, got {tools!r}")
        items = [_tool_parts(item) for item in tools]
    functions: dict[str, Callable[..., Any]] = {}
    for name, func, _ in items:
        if name in functions:
            raise InvalidBindingsError(f"two tools are named {name!r}; tool names must be unique")
        functions[name] = func
    if isinstance(error_class, str):
        error_class = ErrorClass(error_class, "tool")
    namespace = Namespace(functions, error_class=error_class)
    # What `help(<global>.<name>)` shows in a run: the stub of each tool,
    # with its description when the tool object has one.
    namespace._help = {name: "\n".join(member_def(global_name, name, func, d)) + "\n" for name, func, d in items}
    return Toolset(global_name, functions, namespace, _stubs(global_name, items, error_class))
