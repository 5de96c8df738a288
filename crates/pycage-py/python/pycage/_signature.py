"""What a program and a model read about a Python-callable binding: its
signature as a program calls it (keyword-only), type hints and docstring,
as Python text.

The same text serves the stubs of :func:`pycage.python_tools` and what
``help(tools.fn)`` shows inside a run (the member's ``__doc__``, as for
MCP tools): ``async def fn(*, a: int, b: int = 2) -> int:`` and the docstring.
"""

from __future__ import annotations

import inspect
import keyword
import re
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any, Optional

_PREFIXES = re.compile(r"\b(?:typing|typing_extensions|collections\.abc|builtins|__main__)\.")


def annotation(ann: Any) -> str:
    """An annotation as stub text, without module prefixes."""
    if ann is inspect.Parameter.empty:
        return ""
    if isinstance(ann, str):
        return ann
    return _PREFIXES.sub("", inspect.formatannotation(ann))


def signature(func: Callable[..., Any]) -> str:
    """``(*, a: int, b: int = 2) -> int`` from ``inspect.signature`` and the
    resolved type hints; ``(**kwargs: Any) -> Any`` when the callable has no
    signature to read.

    As a program calls it, not as Python defines it: a call's arguments
    cross as one JSON object, so parameters that take a keyword are shown
    keyword-only (a model shown ``(query, limit=10)`` writes
    ``search("x", 2)``, which the call refuses). ``*args`` is left out (a
    call carries at most one positional argument, and only without
    keywords); positional-only parameters keep their ``/``."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return "(**kwargs: Any) -> Any"
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to the raw text
        hints = {}
    parts = []
    positional_only = star_seen = False
    for p in sig.parameters.values():
        if p.kind is p.POSITIONAL_ONLY:
            positional_only = True
        elif positional_only:
            parts.append("/")
            positional_only = False
        if p.kind is p.VAR_POSITIONAL:
            continue
        ann = annotation(hints.get(p.name, p.annotation))
        text = p.name if not ann else f"{p.name}: {ann}"
        if p.kind is p.VAR_KEYWORD:
            text = "**" + text
        elif p.kind is not p.POSITIONAL_ONLY and not star_seen:
            parts.append("*")
            star_seen = True
        if p.default is not p.empty:
            text += f" = {p.default!r}" if ann else f"={p.default!r}"
        parts.append(text)
    if positional_only:
        parts.append("/")
    ret = annotation(hints.get("return", sig.return_annotation)) or "Any"
    return f"({', '.join(parts)}) -> {ret}"


def docstring(text: Optional[str], indent: str) -> list[str]:
    """``text`` as the lines of a docstring at ``indent``; none for no text."""
    if not text:
        return []
    text = inspect.cleandoc(text).replace('"""', '\\"\\"\\"')
    lines = text.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}', *[f"{indent}{ln}" if ln else "" for ln in lines[1:]], f'{indent}"""']


def is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def member_def(global_name: str, name: str, func: Callable[..., Any], description: Optional[str]) -> list[str]:
    """The member as stub lines, unindented: ``async def name(...) -> ...:``
    and its docstring (``description`` if given, else the callable's), or,
    for a name that is not an identifier, how to call it and the signature
    as comments."""
    sig = signature(func)
    text = description or inspect.getdoc(func)
    if is_identifier(name):
        return [f"async def {name}{sig}:", *(docstring(text, "    ") or ["    ..."])]
    lines = [f"# call as: await getattr({global_name}, {name!r})(...)  signature: {sig}"]
    first = (text or "").strip().splitlines()
    if first:
        lines.append(f"# {first[0]}")
    return lines


# Help texts per function object, computed once (the same bindings are
# typically passed to many runs): a plain function is its own key; a bound
# method is keyed by its function (a new method object is made at each
# attribute access), apart from the plain function's entry.
_help_cache: weakref.WeakKeyDictionary[Any, dict[tuple[str, bool], str]] = weakref.WeakKeyDictionary()


def member_help(global_name: str, name: str, func: Callable[..., Any]) -> str:
    """What ``help(<global>.<name>)`` shows in a run."""
    key: Any = None
    bound = isinstance(func, types.MethodType)
    if bound and isinstance(func.__func__, types.FunctionType):
        key = func.__func__
    elif isinstance(func, types.FunctionType):
        key = func
    entry = (f"{global_name}.{name}", bound)
    if key is not None:
        cached = _help_cache.get(key, {}).get(entry)
        if cached is not None:
            return cached
    text = "\n".join(member_def(global_name, name, func, None)) + "\n"
    if key is not None:
        _help_cache.setdefault(key, {})[entry] = text
    return text


def namespace_help(global_name: str, count: int, error: Optional[tuple[str, str]]) -> str:
    """What ``help(<global>)`` shows in a run."""
    if error is None:
        raises = "Raises RuntimeError when a call fails."
    else:
        raises = f"Raises {error[0]} (`.{error[1]}` names the function) when a call fails."
    return (
        f"{count} function{'' if count == 1 else 's'} of the host (Python callables). Call with keyword "
        f"arguments and await: `await {global_name}.<function>(name=value)`.\n{raises} "
        f"`help({global_name}.<function>)` shows one function's full signature."
    )
