"""A fastmcp code-mode sandbox provider backed by pycage.

fastmcp's ``CodeMode`` transform (``fastmcp.experimental.transforms.code_mode``,
fastmcp 4.2) collapses a server's tools into discovery tools plus one
``execute`` tool that runs model-written Python with ``call_tool(name,
params)`` in scope. It runs that code through a ``SandboxProvider``::

    async def run(self, code, *, inputs=None, external_functions=None) -> Any

:class:`PycageSandboxProvider` implements it with real CPython in a fresh
(by default sandboxed) process per execution::

    from fastmcp import FastMCP
    from fastmcp.experimental.transforms.code_mode import CodeMode
    from pycage.fastmcp import PycageSandboxProvider

    mcp = FastMCP("demo")
    mcp.add_transform(CodeMode(sandbox_provider=PycageSandboxProvider()))

External functions are plain globals of the program (``await
call_tool("add", {"a": 1})``), any positional and keyword arguments
allowed; ``inputs`` become globals holding their (JSON) values. Both are
bound by one prelude line, and line numbers in error messages are given
relative to the model's code. The program's value is the result; a
program without a value but with output returns its output lines joined.
A failed run raises fastmcp's ``ToolError`` (``kind: message`` and the
output), which fastmcp shows to the model.

This module does not import fastmcp until a run fails, so it imports
without fastmcp installed.
"""

from __future__ import annotations

import asyncio
import keyword
import re
import threading
from collections.abc import Callable
from typing import Any, Optional

from ._bindings import _is_async
from ._native import to_json
from ._runtime import Runtime

__all__ = ["PycageSandboxProvider"]

#: The namespace holding the external functions in the program.
HOST_GLOBAL = "_pycage_host"

_PROGRAM_LINE = re.compile(r'(File "<program>", line )(\d+)')


def _adapter(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The binding behind one external function: the program sends
    ``{"args": [...], "kwargs": {...}}``."""
    if _is_async(fn):

        async def call_async(args: list[Any], kwargs: dict[str, Any]) -> Any:
            return await fn(*args, **kwargs)

        return call_async

    def call(args: list[Any], kwargs: dict[str, Any]) -> Any:
        return fn(*args, **kwargs)

    return call


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{what} {name!r} is not a Python identifier, so the program cannot name it")
    if name == HOST_GLOBAL:
        raise ValueError(f"{what} {name!r} is reserved by pycage")
    return name


def prelude(
    inputs: Optional[dict[str, Any]], external_functions: Optional[dict[str, Callable[..., Any]]]
) -> tuple[str, dict[str, dict[str, Callable[..., Any]]]]:
    """The one-line prelude binding ``inputs`` and ``external_functions`` as
    globals, and the bindings it calls. Empty when there is nothing to bind."""
    statements = []
    members: dict[str, Callable[..., Any]] = {}
    for name, fn in (external_functions or {}).items():
        _check_name("external function", name)
        if not callable(fn):
            raise TypeError(f"external function {name!r} is not callable: got {type(fn).__name__}")
        members[name] = _adapter(fn)
        statements.append(
            f"{name} = (lambda f: lambda *a, **k: f({{'args': list(a), 'kwargs': k}}))"
            f"(getattr({HOST_GLOBAL}, {name!r}))"
        )
    for name, value in (inputs or {}).items():
        _check_name("input", name)
        statements.append(f"{name} = __import__('json').loads({to_json(value)!r})")
    if not statements:
        return "", {}
    return "; ".join(statements) + "\n", {HOST_GLOBAL: members} if members else {}


class PycageSandboxProvider:
    """fastmcp's ``SandboxProvider`` protocol, running code with pycage.

    Pass a :class:`pycage.Runtime` to share it (you close it), or the
    runtime's keyword arguments (budgets, ``isolation``, ``python``) to
    have the provider create one on first use (closed by :meth:`close`).
    """

    def __init__(self, runtime: Optional[Runtime] = None, **runtime_options: Any) -> None:
        if runtime is not None and runtime_options:
            raise TypeError("pass either a pycage.Runtime or its keyword arguments, not both")
        self._runtime = runtime
        self._options = runtime_options
        self._owned = runtime is None
        self._lock = threading.Lock()

    @property
    def runtime(self) -> Runtime:
        """The runtime runs go to (created on first use)."""
        with self._lock:
            if self._runtime is None:
                self._runtime = Runtime(**self._options)
            return self._runtime

    async def run(
        self,
        code: str,
        *,
        inputs: Optional[dict[str, Any]] = None,
        external_functions: Optional[dict[str, Callable[..., Any]]] = None,
    ) -> Any:
        head, bindings = prelude(inputs, external_functions)
        if self._runtime is None:  # the first run: probe the interpreter off the event loop
            await asyncio.get_running_loop().run_in_executor(None, lambda: self.runtime)
        result = await self.runtime.arun(head + code, bindings=bindings)
        if result.error is None:
            if not result.has_value and result.logs:
                return "\n".join(result.logs)
            return result.value
        message = result.error.message
        if head:
            message = _PROGRAM_LINE.sub(lambda m: m.group(1) + str(int(m.group(2)) - 1), message)
        text = f"{result.error.kind}: {message}"
        if result.logs:
            text += "\n\nOutput:\n" + "\n".join(result.logs)
        from fastmcp.exceptions import ToolError

        raise ToolError(text)

    def close(self) -> None:
        """Closes the runtime if this provider created it."""
        with self._lock:
            runtime, self._runtime = (self._runtime, None) if self._owned else (None, self._runtime)
        if runtime is not None:
            runtime.close()
