"""pycage: run model-written Python in a fresh, sandboxed CPython process,
with Python callables as the functions it may call.

>>> import pycage
>>> def add(a, b):
...     return a + b
>>> with pycage.Runtime(isolation="process") as rt:
...     rt.run("return await tools.add(a=2**64, b=1)", bindings={"tools": {"add": add}}).value
18446744073709551617

See :class:`Runtime` for budgets and isolation, :class:`Result` for
outcomes, :func:`python_tools` for turning a list of functions into a
namespace plus the stub text a model needs, ``pycage.fastmcp`` for a
fastmcp code-mode sandbox provider, and ``pycage.ray`` for the same API
across the nodes of a Ray cluster.

Layers
------

Each module imports only those listed before it (``tests/test_layers.py``
checks every import): ``errors``, ``_native`` (the compiled half),
``_budgets`` (the budgets table), ``_display``, ``_signature`` (what
``help()`` shows in a run), ``_checks`` (argument checks), ``_files``,
``_durable`` (approval marks, suspensions, journal arguments),
``_results``, ``_bindings``, ``_events``, ``_api`` (the run API, one
definition for every transport), ``_session``, ``_runtime`` (the local
runtime), ``tools``, ``fastmcp``, ``_stubs`` (framework tools described by
JSON Schema, as Python stubs), ``_integrations`` (what the framework
integrations share), ``smolagents``, ``pydantic_ai``, ``langchain``,
``openai_agents``, then ``ray`` (a package; its own list is in its
docstring).
"""

from ._bindings import Bindings, ErrorClass, Namespace
from ._display import Display, OutputFile, SkippedFile
from ._durable import PendingCall, Suspend, Suspension, approval
from ._events import CallFinished, CallStarted
from ._native import __version__, from_json, to_json
from ._results import Failure, FailureKind, Result
from ._runtime import Runtime
from ._session import Session
from .errors import (
    ConfigError,
    InterpreterError,
    InvalidBindingsError,
    JournalError,
    PycageError,
    RunError,
    RuntimeClosedError,
    SandboxUnavailableError,
    SessionBusyError,
    SessionEndedError,
)
from .tools import Toolset, python_tools

__all__ = [
    "__version__",
    "Runtime",
    "Session",
    "Result",
    "Display",
    "OutputFile",
    "SkippedFile",
    "Failure",
    "FailureKind",
    "Namespace",
    "ErrorClass",
    "Bindings",
    "CallStarted",
    "CallFinished",
    "Toolset",
    "python_tools",
    "approval",
    "Suspend",
    "Suspension",
    "PendingCall",
    "JournalError",
    "to_json",
    "from_json",
    "PycageError",
    "ConfigError",
    "InterpreterError",
    "SandboxUnavailableError",
    "InvalidBindingsError",
    "RuntimeClosedError",
    "SessionEndedError",
    "SessionBusyError",
    "RunError",
]
