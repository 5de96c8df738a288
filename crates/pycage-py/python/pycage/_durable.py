"""Durable runs: a run that pauses at a call that needs approval, and
resumes later from its journal, in this process or another
(``docs/durable.md``).

- :func:`approval` marks a binding: a call to it is not run; it suspends
  the run. :class:`Suspend` lets any binding suspend the run on its own
  terms.
- A suspended run's :class:`pycage.Result` has ``suspended``, a
  :class:`Suspension`: the pending call, the reason and the journal
  (bytes, signed with the runtime's ``journal_key``; store them anywhere).
- :func:`resume` (``Runtime.resume`` / ``Runtime.aresume``) runs the
  program again in a fresh process, answers every recorded call from the
  journal, gives the pending call ``reply`` (or raises the namespace's error
  class with ``error``), and goes on live.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from .errors import JournalError

if TYPE_CHECKING:
    from ._runtime import Bindings, CallFinished, CallStarted, Display, Result, Runtime

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


def _answer(reply: Any, error: Optional[str]) -> tuple[bool, Any]:
    if reply is _NO_REPLY and error is None:
        raise TypeError("pycage.Runtime.resume: give reply=VALUE (approve) or error=MESSAGE (deny)")
    if reply is not _NO_REPLY and error is not None:
        raise TypeError("pycage.Runtime.resume: give reply= or error=, not both")
    if error is not None:
        if not isinstance(error, str):
            raise TypeError(f"pycage.Runtime.resume: error must be a str, got {type(error).__name__}")
        return False, error
    return True, reply


def _journal(journal: Any) -> bytes:
    if isinstance(journal, Suspension):
        return journal.journal
    if isinstance(journal, (bytes, bytearray, memoryview)):
        return bytes(journal)
    raise TypeError(
        "pycage.Runtime.resume: journal must be bytes (Suspension.journal) or a Suspension, "
        f"got {type(journal).__name__}"
    )


def resume(
    runtime: Runtime,
    journal: Union[bytes, Suspension],
    *,
    reply: Any = _NO_REPLY,
    error: Optional[str] = None,
    bindings: Optional[Bindings] = None,
    program: Optional[str] = None,
    on_log: Optional[Callable[[str], Any]] = None,
    on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    on_display: Optional[Callable[[Display], Any]] = None,
    inputs: Optional[Iterable[Union[str, os.PathLike[str]]]] = None,
    output_dir: Union[str, os.PathLike[str], None] = None,
) -> Result:
    """:meth:`pycage.Runtime.resume` (see there)."""
    from . import _runtime as r

    data = _journal(journal)
    answer = _answer(reply, error)
    code = "" if program is None else r._check_code(program)
    paths, out = r._run_files(inputs, output_dir, "pycage.Runtime.resume")
    specs = r._namespaces(bindings)
    site = r._Site(runtime._private_loop, contextvars.copy_context())
    events = r._Events.of(on_log, on_call, on_display)
    main = r._get_ident() == r._main_ident[0]
    native = runtime._native.run(code, specs, site, events, main, None, paths, out, (data, *answer))
    return r._result(native)


async def aresume(
    runtime: Runtime,
    journal: Union[bytes, Suspension],
    *,
    reply: Any = _NO_REPLY,
    error: Optional[str] = None,
    bindings: Optional[Bindings] = None,
    program: Optional[str] = None,
    on_log: Optional[Callable[[str], Any]] = None,
    on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    on_display: Optional[Callable[[Display], Any]] = None,
    inputs: Optional[Iterable[Union[str, os.PathLike[str]]]] = None,
    output_dir: Union[str, os.PathLike[str], None] = None,
) -> Result:
    """:meth:`pycage.Runtime.aresume` (see there)."""
    from . import _runtime as r

    data = _journal(journal)
    answer = _answer(reply, error)
    code = "" if program is None else r._check_code(program)
    paths, out = r._run_files(inputs, output_dir, "pycage.Runtime.aresume")
    specs = r._namespaces(bindings)
    loop = asyncio.get_running_loop()
    site = r._Site(lambda: loop, contextvars.copy_context())
    events = r._Events.of(on_log, on_call, on_display)
    return await r._settled(
        loop,
        events,
        lambda settle, on_events: runtime._native.start(
            code, specs, site, loop, settle, on_events, None, paths, out, (data, *answer)
        ),
    )
