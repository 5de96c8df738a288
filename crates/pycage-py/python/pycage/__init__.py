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
namespace plus the stub text a model needs, and ``pycage.fastmcp`` for a
fastmcp code-mode sandbox provider.
"""

from ._display import Display, OutputFile, SkippedFile
from ._durable import PendingCall, Suspend, Suspension, approval
from ._native import __version__, from_json, to_json
from ._runtime import (
    Bindings,
    CallFinished,
    CallStarted,
    ErrorClass,
    Failure,
    FailureKind,
    Namespace,
    Result,
    Runtime,
    Session,
)
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
