"""Durable runs: a run that pauses at a call that needs approval, and
resumes later from its journal, in this process or another
(``docs/durable.md``).

- :func:`approval` marks a binding: a call to it is not run; it suspends
  the run. :class:`Suspend` lets any binding suspend the run on its own
  terms.
- A suspended run's :class:`pycage.Result` has ``suspended``, a
  :class:`Suspension`: the pending call, the reason and the journal
  (bytes, signed with the runtime's ``journal_key``; store them anywhere).
- ``Runtime.resume`` / ``Runtime.aresume`` run the program again in a
  fresh process, answer every recorded call from the journal, give the
  pending call ``reply`` (or raise the namespace's error class with
  ``error``), and go on live. A session's cell suspends the same way;
  ``Runtime.resume_session`` opens a new session that replays the earlier
  cells first. This module holds the types and the argument checks; the
  runtime (``pycage._runtime``) does the resuming.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar, Union

from .errors import JournalError

__all__ = ["approval", "Suspend", "Suspension", "PendingCall", "JournalError", "KEY_ENV"]

#: The environment variable a :class:`pycage.Runtime` takes its journal key
#: from when ``journal_key`` is not given.
KEY_ENV = "PYCAGE_JOURNAL_KEY"

_F = TypeVar("_F", bound=Callable[..., Any])


def approval(func: _F) -> _F:
    """Marks ``func`` (sync or async) as needing approval: when the program
    calls it, it is not run; the run is suspended with the call pending,
    until :meth:`pycage.Runtime.resume` answers it. Used as a decorator or
    on a callable given in ``bindings``; the runtime needs a ``journal_key``.
    Called directly (outside a run), the wrapper is ``func``."""
    if not callable(func):
        raise TypeError(f"pycage.approval needs a callable, got {type(func).__name__}")
    if inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(type(func), "__call__", None)):  # noqa: B004

        @functools.wraps(func)
        async def gate(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs)

    else:

        @functools.wraps(func)
        def gate(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

    gate.__pycage_approval__ = True  # type: ignore[attr-defined]
    return gate  # type: ignore[return-value]


class Suspend(Exception):
    """Raised by a binding to suspend the run at this call, for ``reason``:
    the run settles with :attr:`pycage.Result.suspended`, and the call
    returns (or raises) what :meth:`pycage.Runtime.resume` gives it. Needs a
    runtime with a ``journal_key``; without one the call fails with a
    message that says so."""

    __pycage_suspend__ = True

    def __init__(self, reason: str = "the binding suspended the run") -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PendingCall:
    """The call a suspended run waits at: ``namespace.function(args)``."""

    namespace: str
    function: str
    args: Any


@dataclass(frozen=True)
class Suspension:
    """A suspended run: its pending :attr:`call`, the :attr:`reason`
    (``"approval required"``, or what :class:`Suspend` said) and the
    :attr:`journal`, opaque bytes signed with the runtime's key."""

    call: PendingCall
    reason: str
    journal: bytes

    def __repr__(self) -> str:
        c = self.call
        size = len(self.journal)
        return f"<Suspension {c.namespace}.{c.function}({c.args!r}): {self.reason}; journal of {size} bytes>"


def suspension(parts: Optional[tuple]) -> Optional[Suspension]:
    """The native result's suspension parts as a :class:`Suspension`."""
    if parts is None:
        return None
    glob, name, args, reason, journal = parts
    return Suspension(PendingCall(glob, name, args), reason, journal)


def journal_key(key: Union[str, bytes, None]) -> Optional[bytes]:
    """The key a runtime is given, or ``PYCAGE_JOURNAL_KEY``'s (as bytes)."""
    if key is None:
        env = os.environ.get(KEY_ENV)
        return None if env is None else os.fsencode(env)
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"pycage.Runtime: journal_key must be bytes or str, got {type(key).__name__}")


_NO_REPLY: Any = object()


def _answer(reply: Any, error: Optional[str], owner: str) -> tuple[bool, Any]:
    if reply is _NO_REPLY and error is None:
        raise TypeError(f"{owner}: give reply=VALUE (approve) or error=MESSAGE (deny)")
    if reply is not _NO_REPLY and error is not None:
        raise TypeError(f"{owner}: give reply= or error=, not both")
    if error is not None:
        if not isinstance(error, str):
            raise TypeError(f"{owner}: error must be a str, got {type(error).__name__}")
        return False, error
    return True, reply


def _journal(journal: Any, owner: str) -> bytes:
    if isinstance(journal, Suspension):
        return journal.journal
    if isinstance(journal, (bytes, bytearray, memoryview)):
        return bytes(journal)
    raise TypeError(
        f"{owner}: journal must be bytes (Suspension.journal) or a Suspension, got {type(journal).__name__}"
    )


def resume_spec(journal: Any, reply: Any, error: Optional[str], owner: str) -> tuple[bytes, bool, Any]:
    """The native module's resume: ``(journal, approved, reply or message)``,
    checked."""
    data = _journal(journal, owner)
    return (data, *_answer(reply, error, owner))
