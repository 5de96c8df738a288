"""Python stubs for the framework integrations' tools: a tool that
describes itself with JSON Schema becomes an ``async def`` with keyword-only
typed parameters (:func:`schema_def`), bounded in depth and in the members
of a ``Literal``; a framework's tools and the caller's bindings become one
set of bindings and the stubs a model reads (:func:`bindings_and_stubs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from ._runtime import Bindings, ErrorClass, Namespace, _members
from ._signature import docstring, is_identifier, member_def
from .errors import InvalidBindingsError
from .tools import _tool_parts

#: How deep a tool's JSON Schema is rendered as a type; deeper is ``Any``.
_MAX_SCHEMA_DEPTH = 8
#: Members of an ``enum`` rendered as a ``Literal``; more is the base type.
_MAX_LITERALS = 24
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


def _literal(values: list[Any]) -> Optional[str]:
    if not values or len(values) > _MAX_LITERALS:
        return None
    if not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
        return None
    return f"Literal[{', '.join(repr(v) for v in values)}]"


def _union(types: Iterable[str]) -> str:
    seen: list[str] = []
    for t in types:
        if t not in seen:
            seen.append(t)
    if "Any" in seen:
        return "Any"
    return " | ".join(seen) if seen else "Any"


def schema_type(schema: Any, root: Any = None, depth: int = 0) -> str:
    """A JSON Schema as a Python type expression: scalars, ``list[T]``,
    ``dict[str, T]``, ``Literal[...]``, unions; local ``$ref``s are
    followed. What it cannot say (or past ``_MAX_SCHEMA_DEPTH``) is ``Any``;
    an object with properties is ``dict[str, Any]`` (its keys are in the
    docstring's argument lines)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > _MAX_SCHEMA_DEPTH:
        return "Any"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and isinstance(root, dict):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return schema_type(target, root, depth + 1)
    if "const" in schema:
        return _literal([schema["const"]]) or "Any"
    enum = schema.get("enum")
    if isinstance(enum, list):
        literal = _literal(enum)
        if literal is not None:
            return literal
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _union(schema_type(s, root, depth + 1) for s in options)
    allof = schema.get("allOf")
    if isinstance(allof, list) and len(allof) == 1:
        return schema_type(allof[0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union(schema_type(dict(schema, type=k), root, depth + 1) for k in kind if isinstance(k, str))
    if kind == "array":
        items = schema.get("items")
        return f"list[{schema_type(items, root, depth + 1)}]" if isinstance(items, dict) else "list[Any]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not schema.get("properties"):
            return f"dict[str, {schema_type(extra, root, depth + 1)}]"
        return "dict[str, Any]"
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    return "Any"


def _default(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else "..."


def schema_def(
    global_name: str, name: str, schema: Any, description: Optional[str], *, is_async: bool = True
) -> list[str]:
    """A tool whose arguments are the JSON Schema ``schema`` (an object with
    ``properties``) as stub lines, unindented: ``async def name(*, a: int,
    b: str = 'x') -> Any:`` (keyword-only: arguments cross as one object)
    and a docstring with the description and one line per argument that
    has one. Arguments that are not identifiers make it ``(**kwargs: Any)``
    and are listed in the docstring."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    required = schema.get("required") if isinstance(schema, dict) else None
    required = set(required) if isinstance(required, list) else set()
    params: list[str] = []
    arg_lines: list[str] = []
    plain = all(isinstance(p, str) and is_identifier(p) for p in props)
    for pname, pschema in props.items():
        ptype = schema_type(pschema, schema)
        if pname in required:
            params.append(f"{pname}: {ptype}")
        elif isinstance(pschema, dict) and "default" in pschema:
            params.append(f"{pname}: {ptype} = {_default(pschema['default'])}")
        else:
            params.append(f"{pname}: {ptype} = ...")
        pdesc = pschema.get("description") if isinstance(pschema, dict) else None
        if not plain or isinstance(pdesc, str):
            label = pname if plain else f"{pname!r} ({ptype}{'' if pname in required else ', optional'})"
            arg_lines.append(f"    {label}: {pdesc}" if isinstance(pdesc, str) else f"    {label}")
    signature = f"(*, {', '.join(params)})" if plain and params else "(**kwargs: Any)" if props else "()"
    text = (description or "").strip()
    if arg_lines:
        text = f"{text}\n\nArgs:\n" + "\n".join(arg_lines) if text else "Args:\n" + "\n".join(arg_lines)
    if not is_identifier(name):
        lines = [f"# call as: await getattr({global_name}, {name!r})(...)  signature: {signature} -> Any"]
        first = text.splitlines()
        return lines + ([f"# {first[0]}"] if first else [])
    head = f"{'async ' if is_async else ''}def {name}{signature} -> Any:"
    return [head, *(docstring(text, "    ") or ["    ..."])]


def namespace_stubs(global_name: str, members: list[list[str]], error_class: Optional[tuple[str, str]]) -> str:
    """Stub text of one namespace: its error class, then a class named
    after the global whose static methods are ``members`` (each the lines
    of one ``async def``, from :func:`schema_def` or ``member_def``)."""
    out: list[str] = []
    if error_class is not None:
        name, prop = error_class
        out += [
            f"class {name}(Exception):",
            f'    """Raised when a {global_name} call fails; .{prop} names the function."""',
            f"    {prop}: str",
            "",
            "",
        ]
    out += [
        f"class {global_name}:",
        f'    """Host functions. Await every call: `await {global_name}.name(arg=value)`. Keyword arguments',
        "    travel as one JSON object (dict, list, str, int, float, bool, None); so does the result.",
        '    Calls run concurrently under asyncio.gather."""',
    ]
    for lines in members:
        out.append("")
        if lines and lines[0].startswith(("async def ", "def ")):
            out.append("    @staticmethod")
        out += [f"    {line}" if line else "" for line in lines]
    return "\n".join(out) + "\n"


#: ``(name, callable, stub lines)`` of a framework's tool, or None for a
#: plain Python callable (described by its signature, as ``python_tools``).
Adapter = Callable[[Any], Optional[tuple[str, Callable[..., Any], list[str]]]]


def bindings_and_stubs(
    bindings: Optional[Bindings], tools: Iterable[Any], global_name: str, adapt: Adapter
) -> tuple[dict[str, Any], str]:
    """The bindings of a ``run_python`` tool and their stub text.

    ``tools`` (a framework's tools, which ``adapt`` turns into a callable
    and stub lines, and plain callables) become the namespace
    ``global_name`` with the error class ``ToolError``; ``bindings`` (any
    pycage bindings) are added as they are, their stubs read from their
    callables' signatures."""
    out: dict[str, Any] = {}
    parts: list[str] = []
    items = list(tools)
    if items:
        functions: dict[str, Callable[..., Any]] = {}
        helps: dict[str, str] = {}
        stubs: list[list[str]] = []
        for item in items:
            adapted = adapt(item)
            if adapted is None:
                name, func, text = _tool_parts(item)
                lines = member_def(global_name, name, func, text)
            else:
                name, func, lines = adapted
            if name in functions:
                raise InvalidBindingsError(f"two tools are named {name!r}; tool names must be unique")
            functions[name] = func
            helps[name] = "\n".join(lines) + "\n"
            stubs.append(lines)
        namespace = Namespace(functions, error_class=ErrorClass("ToolError", "tool"))
        namespace._help = helps
        out[global_name] = namespace
        parts.append(namespace_stubs(global_name, stubs, ("ToolError", "tool")))
    for glob, ns in (bindings or {}).items():
        if glob in out:
            raise InvalidBindingsError(f"the namespace {glob!r} is given both as tools and in bindings")
        out[glob] = ns
        error = None
        known: Mapping[str, str] = {}
        functions_of: object = ns
        if isinstance(ns, Namespace):
            functions_of = ns.functions
            known = ns._help or {}
            if ns.error_class is not None:
                error = (ns.error_class.name, ns.error_class.member_name_property)
        members = _members(f"bindings[{glob!r}]", functions_of)
        stubs = [
            known[name].rstrip("\n").split("\n") if name in known else member_def(glob, name, func, None)
            for name, func in members.items()
        ]
        parts.append(namespace_stubs(glob, stubs, error))
    return out, "\n\n".join(parts)
