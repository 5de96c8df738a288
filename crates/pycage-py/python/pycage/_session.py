"""A session of a local runtime: :class:`Session`, the native module's
session behind the session API of ``pycage._api``."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Optional

from ._api import _main_ident, _SessionApi, _Turns
from ._bindings import _SessionSite
from ._events import _Events, _settled
from ._results import Result, _result


class Session(_SessionApi):
    """One process whose module globals live across runs, from
    :meth:`Runtime.session`.

    Each run has the runtime's wall-clock, CPU, log and value budgets of its
    own; runs of one session take turns. A run that ends without finishing
    (timeout, abort, its process dying) ends the session: that run returns
    its :class:`Result` as usual, and later runs raise
    :class:`pycage.SessionEndedError`. Closing it while a run is in flight
    aborts that run. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        runtime: Any,
        native: Any,
        site: _SessionSite,
        key: str,
    ) -> None:
        self._runtime = runtime
        self._native = native
        self._site = site
        self._key = key
        self._turns = _Turns()

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or ``None`` while it lives."""
        return self._native.ended

    def __repr__(self) -> str:
        state = f" ended: {self.ended}" if self.ended else ""
        return f"<pycage.Session{state}>"

    def _run(self, code: str, events: Optional[_Events], thread: int, type_check: Optional[bool]) -> Result:
        self._site.point(self._runtime._private_loop, contextvars.copy_context())
        return _result(self._native.run(code, events, thread == _main_ident[0], type_check))

    async def _arun(
        self, code: str, events: Optional[_Events], loop: asyncio.AbstractEventLoop, type_check: Optional[bool]
    ) -> Result:
        self._site.point(lambda: loop, contextvars.copy_context())
        return await _settled(
            loop, events, lambda settle, on_events: self._native.start(code, loop, settle, on_events, type_check)
        )

    def close(self) -> None:
        """Ends the session (a run in flight returns ``abort``) and returns
        once its process is reaped. Idempotent."""
        self._native.close()
