"""The driver's end of bindings: a run's (or a session's) own functions
(:class:`_CallSet`), and :class:`_Dispatcher`, which runs the calls that
nodes stream to this driver exactly as a local run would (sync ones on a
thread pool, async ones on the run's event loop, in a copy of the
caller's ``contextvars``) and answers each with one ``settle`` call
carrying the value as canonical JSON."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import ray

from .._bindings import _awaiting, _message
from .._native import to_json
from ..errors import RuntimeClosedError


class _CallSet:
    """A run's (or a session's) bindings on the driver: each member's own
    function, and where its calls run (the run's loop and context)."""

    __slots__ = ("members", "loop", "context", "calls", "closed", "tasks", "lock")

    def __init__(self, members: dict[tuple[str, str], tuple[Callable[..., Any], bool]]) -> None:
        self.members = members
        self.loop: Callable[[], asyncio.AbstractEventLoop] = _no_loop
        self.context = contextvars.copy_context()
        self.calls = 0
        self.closed = False
        self.tasks: set[asyncio.Future[Any]] = set()
        self.lock = threading.Lock()

    @staticmethod
    def of(specs: list[Any]) -> Optional[_CallSet]:
        if not specs:
            return None
        return _CallSet({(spec[0], name): (func, is_async) for spec in specs for name, func, is_async, _ in spec[1]})

    def point(self, loop: Callable[[], asyncio.AbstractEventLoop], context: contextvars.Context) -> None:
        self.loop = loop
        self.context = context

    def close(self) -> None:
        """The run is over: its async calls still in flight are cancelled
        (as a local run's are); a sync call finishes on its thread."""
        with self.lock:
            self.closed = True
            tasks = list(self.tasks)
        for task in tasks:
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop is closed


def _no_loop() -> asyncio.AbstractEventLoop:
    raise RuntimeClosedError("the run is over")


def _settle(actor: Any, cid: int, ok: Optional[bool], payload: str) -> None:
    if not ray.is_initialized():
        return  # never start a new local Ray to answer a node that is gone with it
    try:
        actor.settle.remote(cid, ok, payload)
    except Exception:  # noqa: BLE001 - the node is gone: nobody waits for the answer
        pass


class _Dispatcher:
    """Runs the binding calls that nodes stream to this driver with the
    caller's own functions, and answers each with one ``settle`` call."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="pycage-ray-binding")
        self._lock = threading.Lock()
        self.calls_total = 0
        self.calls_in_flight = 0

    def _done(self, actor: Any, cid: int, ok: Optional[bool], payload: str) -> None:
        with self._lock:
            self.calls_in_flight -= 1
        _settle(actor, cid, ok, payload)

    def _failed(self, actor: Any, cid: int, e: BaseException) -> None:
        """A binding raised: its message, or a suspension (``ok`` None: it
        raised :class:`pycage.Suspend`, whose reason is the payload)."""
        suspends = getattr(e, "__pycage_suspend__", False) is True
        self._done(actor, cid, None if suspends else False, _message(e))

    def _done_value(self, actor: Any, cid: int, label: str, value: Any) -> None:
        try:
            text = to_json(value)
        except ValueError as e:
            detail = str(e)
            if detail.startswith("not JSON: "):
                detail = detail[len("not JSON: ") :]
            self._done(actor, cid, False, f"{label} returned a value that cannot cross as JSON: {detail}")
            return
        self._done(actor, cid, True, text)

    def dispatch(self, cs: Optional[_CallSet], actor: Any, item: tuple[Any, ...]) -> None:
        _, cid, glob, name, args, kwargs = item
        with self._lock:
            self.calls_total += 1
            self.calls_in_flight += 1
        member = None if cs is None else cs.members.get((glob, name))
        if cs is None or member is None:
            self._done(actor, cid, False, "the call was cancelled")
            return
        with cs.lock:
            # Counted under the lock that closing takes: a run whose node died
            # is repeated only if no call of it ever started here.
            if cs.closed:
                self._done(actor, cid, False, "the call was cancelled")
                return
            cs.calls += 1
        func, is_async = member
        label = f"{glob}.{name}"
        if is_async:
            try:
                cs.loop().call_soon_threadsafe(
                    self._start_async, cs, actor, cid, label, func, args, kwargs, context=cs.context
                )
            except (RuntimeError, RuntimeClosedError) as e:
                self._done(actor, cid, False, _message(e))
            return
        try:
            self._pool.submit(self._call_sync, cs, actor, cid, label, func, args, kwargs)
        except RuntimeError as e:  # the pool is shut down: the runtime closed
            self._done(actor, cid, False, _message(e))

    def _call_sync(self, cs: _CallSet, actor: Any, cid: int, label: str, func: Any, args: tuple, kwargs: dict):
        try:
            ctx = cs.context.copy()
            result = ctx.run(func, *args, **kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run_coroutine_threadsafe(_awaiting(result), cs.loop()).result()
        except BaseException as e:  # noqa: BLE001 - a binding's failure is the program's to see
            self._failed(actor, cid, e)
            return
        self._done_value(actor, cid, label, result)

    def _start_async(self, cs: _CallSet, actor: Any, cid: int, label: str, func: Any, args: tuple, kwargs: dict):
        """On the run's loop, in the run's context."""
        try:
            result = func(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            self._failed(actor, cid, e)
            return
        if not inspect.isawaitable(result):
            self._done_value(actor, cid, label, result)
            return
        task = asyncio.ensure_future(result)
        with cs.lock:
            if cs.closed:
                task.cancel()
            cs.tasks.add(task)

        def done(t: asyncio.Future[Any]) -> None:
            with cs.lock:
                cs.tasks.discard(t)
            if t.cancelled():
                self._done(actor, cid, False, "the call was cancelled")
            elif t.exception() is not None:
                self._failed(actor, cid, t.exception())
            else:
                self._done_value(actor, cid, label, t.result())

        task.add_done_callback(done)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
