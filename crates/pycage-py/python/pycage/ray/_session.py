"""A session on one node of a :class:`RayRuntime`: :class:`RaySession`,
the session API of ``pycage._api`` over a :class:`CageNode`'s session."""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from typing import Any, Optional

import ray
import ray.exceptions

from .._api import _SessionApi, _Turns
from .._events import _Events
from .._results import Failure, Result
from ..errors import ConfigError, SessionEndedError
from ._calls import _CallSet
from ._stream import NODE_GONE, _aconsume, _awaited, _consume, _death, _get, _Member, _raise_cause, _Stream
from ._wire import CLOSED

_NO_RUN_TYPE_CHECK = (
    "type_check for one run is not carried to Ray nodes: give pycage.ray.Runtime(type_check=True), "
    "which every node's runtime gets, to check every run"
)


class RaySession(_SessionApi):
    """A :class:`pycage.Session` on one node of a :class:`RayRuntime`: one
    process whose globals live across runs, with bindings that run in this
    process. If its node dies, its run in flight returns ``worker-exit`` and
    later runs raise :class:`pycage.SessionEndedError` saying so."""

    def __init__(self, runtime: Any, node: _Member, sid: str, key: str, cs: Optional[_CallSet]) -> None:
        # The RayRuntime that opened it (whose module imports this one).
        self._runtime = runtime
        self._node = node
        self._sid = sid
        self._key = key
        self._cs = cs
        self._turns = _Turns()
        self._ended: Optional[str] = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _forget_session, node.actor, sid, cs)

    @property
    def node_id(self) -> str:
        """The Ray node this session lives on."""
        return self._node.node_id

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or ``None`` while it lives (asks its node)."""
        if self._ended is None and (self._runtime.closed or not ray.is_initialized()):
            self._ended = CLOSED
        if self._ended is not None:
            return self._ended
        if self._node.dead is not None:
            self._ended = self._node.dead
            return self._ended
        try:
            why = ray.get(self._node.actor.session_ended.remote(self._sid), timeout=30)
        except NODE_GONE as e:
            self._died(e)
            return self._ended
        if why is not None:
            self._ended = why
        return why

    def __repr__(self) -> str:
        state = f" ended: {self._ended}" if self._ended else ""
        return f"<pycage.ray.RaySession node={self.node_id[:12]}{state}>"

    def _died(self, cause: BaseException) -> str:
        why = _death(self._node, cause)
        self._runtime._mark_dead(self._node, why)
        self._ended = self._node.dead or why
        return self._ended

    def _check_open(self) -> None:
        """A session whose node died, or that was closed here (or with its
        runtime), is known to have ended without asking its node."""
        if self._runtime.closed or not ray.is_initialized():
            if self._ended is None:
                self._ended = CLOSED
            self._runtime._live()  # raises RuntimeClosedError, as a local session's run does
        if self._ended is None and self._node.dead is not None:
            self._ended = self._node.dead
        if self._ended is not None and (self._closed or self._node.dead is not None):
            raise SessionEndedError(f"the session has ended: {self._ended}; open a new one")

    def _stream(self, events: Optional[_Events]) -> tuple[bool, Any]:
        """Whether the run is streamed, and its stream's driver end."""
        streamed = self._cs is not None or events is not None
        return streamed, _Stream(events, self._cs, self._runtime._dispatcher, self._node.actor)

    def _run(self, code: str, events: Optional[_Events], thread: int, type_check: Optional[bool]) -> Result:
        if type_check is not None:
            raise ConfigError(_NO_RUN_TYPE_CHECK)
        self._check_open()
        if self._cs is not None:
            self._cs.point(self._runtime._private_loop, contextvars.copy_context())
        self._runtime._begin(self._node)
        task = None
        try:
            streamed, stream = self._stream(events)
            if not streamed:
                task = self._node.actor.session_run.remote(self._sid, code)
                self._node.tasks.add(task)
                return _get(task)
            wants = (False, False, False) if events is None else events.wants()
            task = self._node.actor.session_run_stream.remote(self._sid, code, wants)
            self._node.tasks.add(task)
            return _consume(task, stream)[0]
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)
            raise
        except NODE_GONE as e:
            return Result(error=Failure("worker-exit", f"the session's process died: {self._died(e)}"))
        finally:
            self._runtime._end(self._node)
            self._node.tasks.discard(task)

    async def _arun(
        self, code: str, events: Optional[_Events], loop: asyncio.AbstractEventLoop, type_check: Optional[bool]
    ) -> Result:
        if type_check is not None:
            raise ConfigError(_NO_RUN_TYPE_CHECK)
        self._check_open()
        if self._cs is not None:
            self._cs.point(lambda: loop, contextvars.copy_context())
        self._runtime._begin(self._node)
        task = None
        try:
            streamed, stream = self._stream(events)
            if not streamed:
                task = self._node.actor.session_run.remote(self._sid, code)
                self._node.tasks.add(task)
                return await _awaited(task)
            wants = (False, False, False) if events is None else events.wants()
            task = self._node.actor.session_run_stream.remote(self._sid, code, wants)
            self._node.tasks.add(task)
            return (await _aconsume(task, stream))[0]
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)
            raise
        except NODE_GONE as e:
            return Result(error=Failure("worker-exit", f"the session's process died: {self._died(e)}"))
        finally:
            self._runtime._end(self._node)
            self._node.tasks.discard(task)

    def close(self) -> None:
        """Ends the session (a run in flight returns ``abort``) and returns
        once its process is reaped (on its node). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        if self._node.dead is None and not self._runtime.closed and ray.is_initialized():
            try:
                why = ray.get(self._node.actor.session_close.remote(self._sid), timeout=60)
                if self._ended is None:
                    self._ended = why
            except NODE_GONE as e:
                self._died(e)
            except Exception:  # noqa: BLE001 - the node closes it with its runtime anyway
                pass
        if self._ended is None:
            self._ended = CLOSED
        if self._cs is not None:
            self._cs.close()


def _forget_session(actor: Any, sid: str, cs: Optional[_CallSet]) -> None:
    """A session dropped without close(): its node closes it, in the background."""
    if cs is not None:
        cs.close()
    if not ray.is_initialized():
        return
    try:
        actor.session_close.remote(sid)
    except Exception:  # noqa: BLE001 - the node or Ray is gone
        pass
