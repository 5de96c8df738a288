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

import inspect
import keyword
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._runtime import ErrorClass, Namespace
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


_PREFIXES = re.compile(r"\b(?:typing|typing_extensions|collections\.abc|builtins|__main__)\.")


def _annotation(ann: Any) -> str:
    if ann is inspect.Parameter.empty:
        return ""
    if isinstance(ann, str):
        return ann
    return _PREFIXES.sub("", inspect.formatannotation(ann))


def _signature(func: Callable[..., Any]) -> str:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return "(*args: Any, **kwargs: Any) -> Any"
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to the raw text
        hints = {}
    parts = []
    star_seen = False
    for p in sig.parameters.values():
        ann = _annotation(hints.get(p.name, p.annotation))
        text = p.name if not ann else f"{p.name}: {ann}"
        if p.kind is p.VAR_POSITIONAL:
            text, star_seen = "*" + text, True
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + text
        elif p.kind is p.KEYWORD_ONLY and not star_seen:
            parts.append("*")
            star_seen = True
        if p.default is not p.empty:
            text += f" = {p.default!r}" if ann else f"={p.default!r}"
        parts.append(text)
    ret = _annotation(hints.get("return", sig.return_annotation)) or "Any"
    return f"({', '.join(parts)}) -> {ret}"


def _docstring(text: Optional[str], indent: str) -> list[str]:
    if not text:
        return []
    text = inspect.cleandoc(text).replace('"""', '\\"\\"\\"')
    lines = text.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *[f"{indent}{ln}" if ln else "" for ln in lines[1:]], f'{indent}"""']


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
        sig = _signature(func)
        if name.isidentifier() and not keyword.iskeyword(name):
            out += ["    @staticmethod", f"    async def {name}{sig}:"]
            body = _docstring(description or inspect.getdoc(func), "        ")
            out += body or ["        ..."]
        else:
            out.append(f"    # call as: await getattr({global_name}, {name!r})(...)  signature: {sig}")
            doc = (description or inspect.getdoc(func) or "").strip().splitlines()
            if doc:
                out.append(f"    # {doc[0]}")
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
    return Toolset(global_name, functions, namespace, _stubs(global_name, items, error_class))
