"""A run's events while it is in flight: :class:`CallStarted` and
:class:`CallFinished` for ``on_call``, log lines for ``on_log``,
:class:`pycage.Display` for ``on_display``; and the await of an asyncio
run (:func:`_settled`), where a callback's exception aborts the run and is
raised once it has settled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from ._display import Display
from ._results import Result, _display, _result


@dataclass(frozen=True)
class CallStarted:
    """``on_call`` event: the program called ``namespace.name(args)``."""

    id: int
    namespace: str
    name: str
    args: Any


@dataclass(frozen=True)
class CallFinished:
    """``on_call`` event: the call settled; ``error`` is the rejection
    message, ``None`` on success."""

    id: int
    namespace: str
    name: str
    error: Optional[str]


class _Events:
    """A run's ``on_log`` / ``on_call`` / ``on_display`` callbacks, fed from
    the native module's event batches (:meth:`__call__`) or, one event at a
    time, from a transport that carried them (:meth:`deliver`)."""

    __slots__ = ("on_log", "on_call", "on_display", "names", "error", "handle", "delivered")

    @staticmethod
    def of(
        on_log: Optional[Callable[[str], Any]],
        on_call: Optional[Callable[[Any], Any]],
        on_display: Optional[Callable[[Display], Any]] = None,
    ) -> Optional[_Events]:
        """The events of a run, or None when it has no callback."""
        if on_log is None and on_call is None and on_display is None:
            return None
        return _Events(on_log, on_call, on_display)

    def __init__(
        self,
        on_log: Optional[Callable[[str], Any]],
        on_call: Optional[Callable[[Any], Any]],
        on_display: Optional[Callable[[Display], Any]] = None,
    ) -> None:
        self.on_log = on_log
        self.on_call = on_call
        self.on_display = on_display
        self.names: dict[int, tuple[str, str]] = {}
        #: A callback's exception: the run is aborted, and this is raised
        #: once it has settled.
        self.error: Optional[BaseException] = None
        #: What aborts the run (a native run's handle), when there is one.
        self.handle: Any = None
        #: Whether any event reached a callback (a run that was not seen
        #: may be repeated elsewhere; see ``pycage.ray``).
        self.delivered = False

    def wants(self) -> tuple[bool, bool, bool]:
        """Which callbacks there are: ``(on_log, on_call, on_display)``."""
        return (self.on_log is not None, self.on_call is not None, self.on_display is not None)

    def __call__(self, batch: list[tuple]) -> None:
        for ev in batch:
            if ev[0] == "log":
                if self.on_log is not None:
                    self.on_log(ev[1])
            elif ev[0] == "display":
                if self.on_display is not None:
                    self.on_display(_display(ev[1], ev[2]))
            elif ev[0] == "call":
                _, call_id, glob, name, args = ev
                self.names[call_id] = (glob, name)
                if self.on_call is not None:
                    self.on_call(CallStarted(call_id, glob, name, args))
            else:
                _, call_id, error = ev
                glob, name = self.names.pop(call_id, ("", ""))
                if self.on_call is not None:
                    self.on_call(CallFinished(call_id, glob, name, error))

    def deliver(self, kind: str, event: Any) -> None:
        """One event that a transport carried: a log line, a
        :class:`CallStarted` or :class:`CallFinished`, or a
        :class:`pycage.Display`. A callback's exception is kept in
        :attr:`error` (the caller aborts the run) and later events are
        dropped."""
        if self.error is not None:
            return
        try:
            self.delivered = True
            if kind == "log":
                if self.on_log is not None:
                    self.on_log(event)
            elif kind == "display":
                if self.on_display is not None and isinstance(event, Display):
                    self.on_display(event)
            elif self.on_call is not None and isinstance(event, (CallStarted, CallFinished)):
                self.on_call(event)
        except BaseException as e:  # noqa: BLE001 - raised once the run settled
            self.error = e

    def on_loop(self, batch: list[tuple]) -> None:
        """The asyncio flavour: a callback's exception aborts the run and is
        raised by ``arun`` once the run has settled."""
        if self.error is not None:
            return
        try:
            self(batch)
        except BaseException as e:  # noqa: BLE001 - re-raised by arun
            self.error = e
            if self.handle is not None:
                self.handle.cancel()


async def _settled(loop: asyncio.AbstractEventLoop, events: Optional[_Events], start: Callable[..., Any]) -> Result:
    """Starts a native run with ``start(settle, on_events)`` and awaits its
    result on ``loop``; cancelling the awaiting task aborts the run. A
    callback's exception is raised once the run has settled."""
    done: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Any) -> None:
        if not done.done():
            done.set_result(outcome)

    handle = start(settle, None if events is None else events.on_loop)
    if events is not None:
        events.handle = handle
    try:
        outcome = await done
    except asyncio.CancelledError:
        handle.cancel()
        raise
    if events is not None and events.error is not None:
        raise events.error
    return _result(outcome.parts())
