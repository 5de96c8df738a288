"""Exceptions pycage raises for misuse.

A program's own failure is never raised: it is a :class:`pycage.Result`
whose ``error`` is set. These are raised when the caller got something
wrong (a budget, a binding, a closed runtime), or by
:meth:`pycage.Result.unwrap`.
"""

from __future__ import annotations

__all__ = [
    "PycageError",
    "ConfigError",
    "InterpreterError",
    "SandboxUnavailableError",
    "InvalidBindingsError",
    "RuntimeClosedError",
    "SessionEndedError",
    "SessionBusyError",
    "RunError",
    "JournalError",
]


class PycageError(Exception):
    """Base class of every exception pycage raises."""


class ConfigError(PycageError, ValueError):
    """A :class:`pycage.Runtime` argument cannot work (the message names it)."""


class InterpreterError(PycageError):
    """The interpreter for runs is missing, too old (CPython >= 3.10 is
    needed) or cannot import pycage's bootstrap."""


class SandboxUnavailableError(PycageError):
    """``isolation="sandbox"`` needs a kernel feature this machine lacks (the
    message names it). ``isolation="process"`` runs without the sandbox."""


class InvalidBindingsError(PycageError, ValueError):
    """The ``bindings`` argument breaks a rule (the message names the
    namespace, member or error class, and what was passed)."""


class RuntimeClosedError(PycageError):
    """The runtime was closed; create a new one to run more programs."""


class SessionEndedError(PycageError):
    """The session is over (the message says why: a run ended without
    finishing, it was idle or old enough, it was closed); open a new one."""


class SessionBusyError(PycageError, RuntimeError):
    """A session's run was started from inside a run of the same session (a
    callback or a binding of it): it would wait for the run it is part of.
    Use another session, or :meth:`pycage.Runtime.run`, or run it after the
    cell has returned."""


class JournalError(PycageError, ValueError):
    """A journal ``resume`` refuses, before any program runs: altered,
    signed with another key, of another format version, too large, or made
    with other bindings or another program (the message says which)."""


class RunError(PycageError):
    """Raised by :meth:`pycage.Result.unwrap` for a failed run.

    ``kind`` is the failure kind (``"exception"``, ``"timeout"``, ``"abort"``,
    ``"worker-exit"``, ``"invalid-output"``, ``"output-limit"``,
    ``"dependencies"``, ``"type-error"``, ``"suspended"`` or ``"diverged"``),
    ``message`` its message and ``logs`` the run's output lines.
    """

    def __init__(self, kind: str, message: str, logs: list[str]) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.logs = logs
