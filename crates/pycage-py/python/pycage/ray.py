"""pycage on Ray: one warm :class:`pycage.Runtime` per node, and
:class:`RayRuntime`, with the ``run`` / ``arun`` / ``session`` API and the
:class:`pycage.Result` of a local runtime, across a cluster.

>>> import ray
>>> from pycage.ray import RayRuntime
>>> context = ray.init()
>>> with RayRuntime(isolation="process") as rt:
...     rt.run("return 6 * 7").value
42

This module owns three things:

- :class:`CageNode`, a Ray actor pinned to one node (node affinity, not
  soft). It owns one :class:`pycage.Runtime` (its zygote and pool stay warm)
  and runs programs and sessions there.
- :class:`RayRuntime`, on the driver: it picks a node for each run (the less
  loaded of two random live nodes, "power of two choices"), pins each
  session to one node by rendezvous hashing of the session's key over the
  live nodes, notices nodes that die (their sessions end with the usual
  :class:`pycage.SessionEndedError`) and nodes that join.
- The way bindings stay with the caller. A Python-callable binding is never
  pickled to a node: the node's program calls a stand-in that puts the call
  on the run's own result stream (a Ray streaming generator consumed by the
  driver process, the broker between the node and the caller); the driver
  runs the caller's own function (sync ones on a thread pool, async ones on
  the run's event loop, in a copy of the caller's ``contextvars``, as
  locally) and answers with one actor call carrying the value as canonical
  JSON. A binding may so close over anything the driver holds: locks,
  sockets, a database handle. (A Ray actor cannot live in the driver
  process; the stream's consumer is the part that does.)

Durable runs (``docs/durable.md``) work across nodes: every node's runtime
gets the driver's ``journal_key`` (or ``PYCAGE_JOURNAL_KEY`` from the
driver's environment), a stand-in of a :func:`pycage.approval` binding is
marked on the node, a :class:`pycage.Suspend` raised by a driver's binding
suspends the node's run, and :meth:`RayRuntime.resume` resumes a journal on
whichever node it picks.

Ray is an optional dependency: ``pip install "pycage[ray]"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import inspect
import itertools
import os
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Union

try:
    import ray
    import ray.exceptions
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError('pycage.ray needs Ray: pip install "pycage[ray]"') from e

from . import _durable, errors
from ._native import from_json, to_json
from ._runtime import (
    Bindings,
    CallFinished,
    CallStarted,
    ErrorClass,
    Failure,
    Namespace,
    Result,
    Runtime,
    Session,
    _check_code,
    _Closeable,
    _get_ident,
    _LoopThread,
    _message,
    _namespaces,
    _Turns,
)
from .errors import PycageError, RuntimeClosedError, SessionEndedError

__all__ = ["RayRuntime", "RaySession", "CageNode", "NodeInfo", "NoLiveNodeError"]

# A node's wire form of bindings: [(global, [member, ...], (error class, member property) | None)].
# Per namespace: its global, (member name, what help() shows for it,
# whether it needs approval) triples, and its error class; the callables
# stay in the driver.
WireSpec = list[tuple[str, list[tuple[str, str, bool]], Optional[tuple[str, str]]]]

_CLOSED = "it was closed, or the runtime was shut down"
"""Why a closed session ended (the local runtime's words)."""

_REJOIN_AFTER_SECONDS = 60.0
"""How long a node whose actor died stays out before a refresh may start a
new CageNode there (if Ray still reports it alive)."""


class NoLiveNodeError(PycageError):
    """No node of the Ray cluster can take the run: every :class:`CageNode`
    died (or none matched the ``resource`` filter)."""


# --------------------------------------------------------------------------
# The node side.


class _Rejected(Exception):
    """A binding call the driver rejected: the program sees its message,
    exactly as it would have seen the local exception's."""


class _Channel:
    """A streamed run's way to the driver: its events and its binding calls,
    in the order they happened."""

    __slots__ = ("items", "wake")

    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []
        self.wake = asyncio.Event()

    def push(self, item: tuple[Any, ...]) -> None:
        self.items.append(item)
        self.wake.set()


def _descendants(root: int) -> int:
    """Live processes under ``root`` (the node's zygote, pool and runs)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields and fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return len(found)


@ray.remote(num_cpus=0, max_restarts=0)
class CageNode:
    """The Ray actor: one per node, owning one warm :class:`pycage.Runtime`.

    Created by :class:`RayRuntime` (one per eligible node, with node
    affinity). Direct use works too: ``ray.get(node.run.remote("return 1"))``
    is a :class:`pycage.Result`, and ``ray.cancel`` of that reference aborts
    the run and kills its child.

    Runs with bindings or events are streamed (``run_stream``, a Ray
    streaming generator): ``("events", batch)`` items while the run is in
    flight, then ``("done", result)``. A batch holds ``("log", line)``,
    ``("call", CallStarted | CallFinished)`` and, for each binding call of
    the program, ``("bind", call_id, global, member, args, kwargs)``, which
    the consumer answers with :meth:`settle` (``ok`` and the value as
    canonical JSON, or the rejection message): the binding runs wherever the
    stream is consumed, in the driver.
    """

    def __init__(self, runtime_kwargs: dict[str, Any]) -> None:
        self._error: Optional[BaseException] = None
        self._runtime: Optional[Runtime] = None
        try:
            self._runtime = Runtime(**runtime_kwargs)
        except BaseException as e:  # noqa: BLE001 - raised to the driver by ready()
            self._error = e
        self._sessions: dict[str, Session] = {}
        self._session_channels: dict[str, _Channel] = {}
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._call_ids = itertools.count(1)
        self._in_flight = 0
        self._session_in_flight = 0
        self._runs_total = 0
        self._session_runs_total = 0
        self._started = time.monotonic()
        self._node_id = ray.get_runtime_context().get_node_id()

    def _rt(self) -> Runtime:
        if self._error is not None:
            raise self._error
        assert self._runtime is not None
        return self._runtime

    def _bindings(self, spec: WireSpec, channel: Callable[[], Optional[_Channel]]) -> Optional[dict[str, Any]]:
        if not spec:
            return None
        out: dict[str, Any] = {}
        for glob, members, error_class in spec:
            functions = {}
            for name, _, approval in members:
                member = self._member(channel, glob, name)
                functions[name] = _durable.approval(member) if approval else member
            ec = None if error_class is None else ErrorClass(error_class[0], error_class[1])
            ns = Namespace(functions, error_class=ec)
            # help() in the run shows the driver's callables, not the proxies.
            ns._help = {name: help for name, help, _ in members}
            out[glob] = ns
        return out

    def _member(self, channel: Callable[[], Optional[_Channel]], glob: str, name: str) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(channel(), glob, name, args, kwargs)

        call.__name__ = call.__qualname__ = f"{glob}.{name}"
        return call

    async def _call(self, channel: Optional[_Channel], glob: str, name: str, args: tuple, kwargs: dict) -> Any:
        if channel is None:
            raise _Rejected("the call was cancelled")  # no streamed run to carry it
        cid = next(self._call_ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[cid] = fut
        channel.push(("bind", cid, glob, name, args, kwargs))
        try:
            ok, payload = await fut
        finally:
            self._calls.pop(cid, None)
        if ok is None:
            raise _durable.Suspend(payload)
        if not ok:
            raise _Rejected(payload)
        return from_json(payload)

    async def settle(self, cid: int, ok: Optional[bool], payload: str) -> None:
        """The answer to a streamed ``bind`` item: ``ok`` None when the
        binding raised :class:`pycage.Suspend` (``payload`` its reason)."""
        fut = self._calls.get(cid)
        if fut is not None and not fut.done():
            fut.set_result((ok, payload))

    async def ready(self) -> dict[str, Any]:
        """The node's identity once its runtime is up (raises the runtime's
        construction error)."""
        rt = self._rt()
        return {"node_id": self._node_id, "pid": os.getpid(), "config": rt.config}

    async def check(self, spec: WireSpec) -> None:
        self._rt().check_bindings(self._bindings(spec, lambda: None))

    async def _run(self, code: str, bindings: Optional[dict[str, Any]], on_log: Any, on_call: Any) -> Result:
        rt = self._rt()
        self._in_flight += 1
        try:
            return await rt.arun(code, bindings, on_log=on_log, on_call=on_call)
        finally:
            self._in_flight -= 1
            self._runs_total += 1

    async def run(self, code: str) -> Result:
        """Runs ``code`` (no bindings, no events) on this node's runtime;
        cancelling the Ray task (``ray.cancel``) aborts the run and kills its
        child."""
        return await self._run(code, None, None, None)

    async def run_stream(self, code: str, spec: WireSpec, want_log: bool, want_call: bool):
        """:meth:`run` with bindings and events, streamed (see the class)."""
        channel = _Channel()
        bindings = self._bindings(spec, lambda: channel)
        async for item in _streamed(
            channel, lambda on_log, on_call: self._run(code, bindings, on_log, on_call), want_log, want_call
        ):
            yield item

    async def resume_stream(
        self,
        journal: bytes,
        answer: tuple[bool, Any],
        program: Optional[str],
        spec: WireSpec,
        want_log: bool,
        want_call: bool,
    ):
        """Resumes a suspended run from its ``journal`` on this node
        (:meth:`pycage.Runtime.aresume`), streamed as :meth:`run_stream`.
        ``answer`` is ``(True, reply)`` or ``(False, denial message)``."""
        channel = _Channel()
        bindings = self._bindings(spec, lambda: channel)
        approved, value = answer
        reply = {"reply": value} if approved else {"error": value}

        async def start(on_log: Any, on_call: Any) -> Result:
            rt = self._rt()
            self._in_flight += 1
            try:
                return await rt.aresume(
                    journal, bindings=bindings, program=program, on_log=on_log, on_call=on_call, **reply
                )
            finally:
                self._in_flight -= 1
                self._runs_total += 1

        async for item in _streamed(channel, start, want_log, want_call):
            yield item

    async def session_open(self, sid: str, spec: WireSpec, options: dict[str, Any]) -> dict[str, Any]:
        rt = self._rt()
        # A session's binding calls go to the stream of its run in flight.
        bindings = self._bindings(spec, lambda: self._session_channels.get(sid))
        loop = asyncio.get_running_loop()
        # Opening spawns the session's process: off the actor's event loop.
        session = await loop.run_in_executor(None, lambda: rt.session(bindings, **options))
        self._sessions[sid] = session
        return {"node_id": self._node_id}

    def _session(self, sid: str) -> Session:
        session = self._sessions.get(sid)
        if session is None:
            raise SessionEndedError(f"the session has ended: {_CLOSED}; open a new one")
        return session

    async def _session_run(self, session: Session, code: str, on_log: Any, on_call: Any) -> Result:
        self._session_in_flight += 1
        try:
            return await session.arun(code, on_log=on_log, on_call=on_call)
        finally:
            self._session_in_flight -= 1
            self._session_runs_total += 1

    async def session_run(self, sid: str, code: str) -> Result:
        return await self._session_run(self._session(sid), code, None, None)

    async def session_run_stream(self, sid: str, code: str, want_log: bool, want_call: bool):
        # The driver runs one run of a session at a time (its own lock).
        session = self._session(sid)
        channel = _Channel()
        self._session_channels[sid] = channel
        try:
            async for item in _streamed(
                channel, lambda on_log, on_call: self._session_run(session, code, on_log, on_call), want_log, want_call
            ):
                yield item
        finally:
            if self._session_channels.get(sid) is channel:
                del self._session_channels[sid]

    async def session_ended(self, sid: str) -> Optional[str]:
        session = self._sessions.get(sid)
        return _CLOSED if session is None else session.ended

    async def session_close(self, sid: str) -> Optional[str]:
        """Closes the session; returns why it had ended before, if it had."""
        session = self._sessions.pop(sid, None)
        if session is None:
            return None
        why = session.ended
        await session.aclose()
        return why

    async def stats(self) -> dict[str, Any]:
        """This node's load and pool, as :meth:`RayRuntime.stats` reports it."""
        config = self._runtime.config if self._runtime is not None else {}
        limit = config.get("max_concurrent_runs", 0)
        # Ended sessions are dropped here too (a driver that never closed them).
        for sid in [sid for sid, s in self._sessions.items() if s.ended is not None]:
            await self._sessions.pop(sid).aclose()
        return {
            "node_id": self._node_id,
            "pid": os.getpid(),
            "uptime_seconds": time.monotonic() - self._started,
            "runs_in_flight": self._in_flight,
            "runs_running": min(self._in_flight, limit),
            "runs_queued": max(0, self._in_flight - limit),
            "max_concurrent_runs": limit,
            "runs_total": self._runs_total,
            "sessions_open": len(self._sessions),
            "session_runs_in_flight": self._session_in_flight,
            "session_runs_total": self._session_runs_total,
            "binding_calls_in_flight": len(self._calls),
            "pool": {
                "isolation": config.get("isolation"),
                "spawn": config.get("spawn"),
                "pool_size": config.get("pool_size"),
                "processes": _descendants(os.getpid()),
            },
        }

    async def shutdown(self) -> None:
        """Closes the runtime: runs in flight return ``abort``, sessions
        end, every child is reaped."""
        self._sessions.clear()
        if self._runtime is not None:
            await self._runtime.aclose()
        # Let the aborted runs hand their results to Ray before returning.
        for _ in range(500):
            if self._in_flight == 0 and self._session_in_flight == 0:
                break
            await asyncio.sleep(0.01)


async def _streamed(channel: _Channel, start: Callable[[Any, Any], Any], want_log: bool, want_call: bool):
    """Runs ``start(on_log, on_call)`` and yields what its channel gathers in
    batches as it comes, then ``("done", result)``; closing the generator (a
    cancelled Ray task) cancels the run."""

    def on_log(line: str) -> None:
        channel.push(("log", line))

    def on_call(event: Any) -> None:
        channel.push(("call", event))

    task = asyncio.ensure_future(start(on_log if want_log else None, on_call if want_call else None))
    try:
        while True:
            if not channel.items and not task.done():
                waiter = asyncio.ensure_future(channel.wake.wait())
                try:
                    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
            channel.wake.clear()
            if channel.items:
                batch = channel.items[:]
                del channel.items[:]
                yield ("events", batch)
            elif task.done():
                yield ("done", task.result())
                return
    finally:
        if not task.done():
            task.cancel()
            # The run's own cancellation kills and reaps its child.
            await asyncio.gather(task, return_exceptions=True)


# --------------------------------------------------------------------------
# The driver side: bindings.


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
        """A binding raised: its message, or a suspension (``pycage.Suspend``)."""
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


async def _awaiting(awaitable: Any) -> Any:
    return await awaitable


def _wire(specs: list[Any]) -> WireSpec:
    def approval(func: Any) -> bool:
        return getattr(func, "__pycage_approval__", False) is True

    return [
        (glob, [(name, help, approval(func)) for name, func, _, help in funcs], error_class)
        for glob, funcs, error_class, _ in specs
    ]


# --------------------------------------------------------------------------
# The driver side: nodes, placement, runs.


@dataclass(frozen=True)
class NodeInfo:
    """A live node of a :class:`RayRuntime`: its Ray node id and its
    :class:`CageNode` actor handle."""

    node_id: str
    actor: Any


class _NodeDied(Exception):
    def __init__(self, node: _Member, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


class _Member:
    """A node as the driver tracks it."""

    __slots__ = ("node_id", "actor", "in_flight", "dead")

    def __init__(self, node_id: str, actor: Any) -> None:
        self.node_id = node_id
        self.actor = actor
        self.in_flight = 0
        self.dead: Optional[str] = None


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _death(node: _Member, cause: BaseException) -> str:
    # An unavailable actor may be a cut connection: the run's outcome is lost
    # all the same, and its session with it.
    what = "became unreachable" if isinstance(cause, ray.exceptions.ActorUnavailableError) else "died"
    return f"its node {node.node_id[:12]} {what} ({type(cause).__name__}: {_first_line(str(cause))})"


def _score(key: str, node_id: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _raise_cause(e: BaseException) -> None:
    """A node's own exception (a pycage misuse error, a TypeError), unwrapped
    from Ray's task error."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError):
        raise cause from None
    raise PycageError(f"the pycage node failed: {_first_line(str(e), 2000)}") from None


class _Events:
    """``on_log`` / ``on_call`` on the caller's side: a callback's exception
    aborts the run, and is raised once the run has settled."""

    __slots__ = ("on_log", "on_call", "error", "delivered")

    def __init__(self, on_log: Optional[Callable[[str], Any]], on_call: Optional[Callable[[Any], Any]]) -> None:
        self.on_log = on_log
        self.on_call = on_call
        self.error: Optional[BaseException] = None
        self.delivered = False

    @staticmethod
    def of(on_log: Any, on_call: Any) -> Optional[_Events]:
        return None if on_log is None and on_call is None else _Events(on_log, on_call)


class _Stream:
    """The driver's end of a streamed run: delivers its events, runs its
    binding calls, and says when the run must be cancelled (a callback
    raised)."""

    __slots__ = ("events", "cs", "dispatcher", "actor", "cancelled")

    def __init__(self, events: Optional[_Events], cs: Optional[_CallSet], dispatcher: _Dispatcher, actor: Any):
        self.events = events
        self.cs = cs
        self.dispatcher = dispatcher
        self.actor = actor
        self.cancelled = False

    @property
    def error(self) -> Optional[BaseException]:
        return None if self.events is None else self.events.error

    def handle(self, batch: list[tuple[Any, ...]]) -> bool:
        """Handles one batch; True once the run must be cancelled (the
        first time only)."""
        events = self.events
        for item in batch:
            kind = item[0]
            if kind == "bind":
                if self.error is not None:
                    _settle(self.actor, item[1], False, "the call was cancelled")
                else:
                    self.dispatcher.dispatch(self.cs, self.actor, item)
                continue
            if events is None or events.error is not None:
                continue
            try:
                events.delivered = True
                if kind == "log":
                    if events.on_log is not None:
                        events.on_log(item[1])
                elif events.on_call is not None and isinstance(item[1], (CallStarted, CallFinished)):
                    events.on_call(item[1])
            except BaseException as e:  # noqa: BLE001 - raised once the run settled
                events.error = e
        if self.error is not None and not self.cancelled:
            self.cancelled = True
            return True
        return False


def _get(ref: Any) -> Any:
    """``ray.get`` for a synchronous run: Ctrl-C cancels the node's run
    (killing its child) before it is raised."""
    try:
        return ray.get(ref)
    except KeyboardInterrupt:
        ray.cancel(ref)
        raise


class RayRuntime(_Closeable):
    """:class:`pycage.Runtime`'s API over a Ray cluster: one warm runtime
    (a :class:`CageNode`) per node.

    ``runtime_kwargs`` are :class:`pycage.Runtime`'s keyword arguments
    (``isolation``, budgets, ``python``, ``pool_size``...), applied on every
    node; a bad one raises here, from the first node that refused it, as it
    would locally. ``resource`` limits the nodes to those that declare that
    custom Ray resource (``ray start --resources '{"pycage": 1}'``);
    ``None`` takes every node. ``refresh_seconds`` is how often the live
    nodes are re-read from Ray (nodes that joined get a :class:`CageNode`;
    nodes Ray reports dead are dropped). Connects with ``ray.init()`` if Ray
    is not initialized yet.

    Placement: a one-shot run goes to the less loaded of two random live
    nodes (its load: this driver's runs in flight there); a session is
    pinned by rendezvous hashing of its ``key`` over the live nodes: a key
    maps to the same node while the set of live nodes is unchanged, and a
    session never moves.

    Node death: a session whose node dies ends (its run in flight returns
    ``worker-exit``; later runs raise :class:`pycage.SessionEndedError`
    saying its node died). A one-shot run whose node dies is run again on a
    survivor if nothing of it had reached the caller (no binding call, no
    event); otherwise it returns ``worker-exit``. New runs go to the
    survivors; :class:`NoLiveNodeError` when none is left.
    """

    def __init__(
        self,
        *,
        resource: Optional[str] = None,
        refresh_seconds: float = 10.0,
        startup_timeout_seconds: float = 120.0,
        **runtime_kwargs: Any,
    ) -> None:
        if resource is not None and not isinstance(resource, str):
            raise TypeError(f"pycage.ray.RayRuntime: resource must be a str or None, got {type(resource).__name__}")
        for name, value in (("refresh_seconds", refresh_seconds), ("startup_timeout_seconds", startup_timeout_seconds)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise errors.ConfigError(
                    f"invalid pycage.ray.RayRuntime argument: {name} must be a number > 0, got {value!r}"
                )
        if not ray.is_initialized():
            ray.init()
        self._resource = resource
        self._runtime_kwargs = dict(runtime_kwargs)
        # Every node signs and verifies journals with the driver's key, so a
        # journal made on one node resumes on any other.
        key = _durable.journal_key(self._runtime_kwargs.pop("journal_key", None))
        if key is not None:
            self._runtime_kwargs["journal_key"] = key
        self._startup_timeout = float(startup_timeout_seconds)
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._members: dict[str, _Member] = {}
        self._dead: dict[str, tuple[str, float]] = {}
        self._refused: dict[str, str] = {}
        self._closed = False
        self._loop_thread: Optional[_LoopThread] = None
        self._dispatcher = _Dispatcher()
        try:
            self._join(self._eligible(), raise_errors=True)
            if not self._members:
                where = f"with the resource {resource!r}" if resource else "alive"
                raise NoLiveNodeError(f"no Ray node {where} to place a pycage node on")
        except BaseException:
            self.close()
            raise
        self._refresh_stop = threading.Event()
        self._refresher = threading.Thread(
            target=_refresh_loop,
            args=(weakref.ref(self), self._refresh_stop, float(refresh_seconds)),
            name="pycage-ray-refresh",
            daemon=True,
        )
        self._refresher.start()

    # -- nodes

    def _eligible(self) -> list[str]:
        out = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            if self._resource is not None and self._resource not in n.get("Resources", {}):
                continue
            out.append(n["NodeID"])
        return out

    def _join(self, node_ids: Iterable[str], raise_errors: bool) -> None:
        """Starts a :class:`CageNode` on each node and waits until its
        runtime is up (at most ``startup_timeout_seconds``, and no longer
        than the runtime stays open)."""
        pending: dict[Any, tuple[str, Any]] = {}
        for node_id in node_ids:
            actor = CageNode.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                max_concurrency=10_000,
            ).remote(self._runtime_kwargs)
            pending[actor.ready.remote()] = (node_id, actor)
        first_error: Optional[BaseException] = None
        deadline = time.monotonic() + self._startup_timeout
        while pending and time.monotonic() < deadline and not self._closed:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=1.0)
            for ready in done:
                node_id, actor = pending.pop(ready)
                try:
                    ray.get(ready)
                except ray.exceptions.RayTaskError as e:
                    _kill(actor)
                    self._refused[node_id] = _first_line(str(getattr(e, "cause", e)))
                    if first_error is None:
                        try:
                            _raise_cause(e)
                        except BaseException as cause:  # noqa: BLE001 - raised below
                            first_error = cause
                    continue
                except Exception as e:  # noqa: BLE001 - the node died while its actor started
                    _kill(actor)
                    self._refused[node_id] = _first_line(f"{type(e).__name__}: {e}")
                    continue
                with self._lock:
                    if self._closed or node_id in self._members:
                        _kill(actor)  # closed meanwhile, or the node has one already
                        continue
                    self._members[node_id] = _Member(node_id, actor)
                    self._dead.pop(node_id, None)
        for node_id, actor in pending.values():
            _kill(actor)
            if not self._closed:
                self._refused[node_id] = f"its CageNode did not start within {self._startup_timeout:g} s"
        if first_error is not None and raise_errors:
            raise first_error

    def refresh(self) -> None:
        """Re-reads the cluster's nodes now: new eligible nodes get a
        :class:`CageNode`, nodes Ray reports dead are dropped."""
        with self._refresh_lock:  # the background refresh and a caller's, one at a time
            if not self._closed:
                self._refresh()

    def _refresh(self) -> None:
        eligible = set(self._eligible())
        now = time.monotonic()
        with self._lock:
            # A node whose actor died but that Ray still reports alive (the
            # actor was killed, the connection was cut) may take a new
            # CageNode once Ray has had time to notice a real death.
            cooled = {nid for nid, (_, when) in self._dead.items() if now - when >= _REJOIN_AFTER_SECONDS}
            known = set(self._members) | (set(self._dead) - cooled) | set(self._refused)
            gone = [m for m in self._members.values() if m.node_id not in eligible]
        for m in gone:
            self._mark_dead(m, "Ray reports the node dead")
        self._join(sorted(eligible - known), raise_errors=False)

    def _mark_dead(self, node: _Member, reason: str) -> None:
        with self._lock:
            if node.dead is None:
                node.dead = reason
            self._members.pop(node.node_id, None)
            self._dead[node.node_id] = (node.dead, time.monotonic())
        _kill(node.actor)

    def _live(self) -> list[_Member]:
        if not ray.is_initialized():
            # A call now would start a new local Ray, without these nodes.
            raise RuntimeClosedError("Ray was shut down (ray.shutdown()); this pycage.ray.RayRuntime cannot run more")
        with self._lock:
            if self._closed:
                raise RuntimeClosedError(
                    "the runtime is closed; create a new pycage.ray.RayRuntime to run more programs"
                )
            return list(self._members.values())

    def _pick(self, exclude: set[str]) -> _Member:
        live = [m for m in self._live() if m.node_id not in exclude]
        if not live:
            raise NoLiveNodeError(self._no_node_message())
        if len(live) == 1:
            return live[0]
        a, b = random.sample(live, 2)
        if a.in_flight != b.in_flight:
            return a if a.in_flight < b.in_flight else b
        return a

    def _rendezvous(self, key: str, exclude: set[str]) -> _Member:
        live = [m for m in self._live() if m.node_id not in exclude]
        if not live:
            raise NoLiveNodeError(self._no_node_message())
        return max(live, key=lambda m: _score(key, m.node_id))

    def _no_node_message(self) -> str:
        dead = "; ".join(f"{nid[:12]}: {why}" for nid, (why, _) in list(self._dead.items())[:8])
        return "no live pycage node in the Ray cluster" + (f" (dead: {dead})" if dead else "")

    def nodes(self) -> list[NodeInfo]:
        """The live nodes and their :class:`CageNode` actors."""
        return [NodeInfo(m.node_id, m.actor) for m in self._live()]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<pycage.ray.RayRuntime nodes={len(self._members)}{state}>"

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeClosedError("the runtime is closed")
            if self._loop_thread is None:
                self._loop_thread = _LoopThread()
            return self._loop_thread.loop

    # -- runs

    def check_bindings(self, bindings: Optional[Bindings]) -> None:
        """Raises :class:`pycage.InvalidBindingsError` if ``bindings`` would
        be refused by :meth:`run` (asks one node; runs nothing)."""
        specs = _namespaces(bindings)
        node = self._pick(set())
        try:
            ray.get(node.actor.check.remote(_wire(specs)))
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)

    def _attempts(self) -> Iterable[_Member]:
        tried: set[str] = set()
        while True:
            node = self._pick(tried)
            tried.add(node.node_id)
            yield node

    def _begin(self, node: _Member) -> None:
        with self._lock:
            node.in_flight += 1

    def _end(self, node: _Member) -> None:
        with self._lock:
            node.in_flight -= 1

    def _after_death(self, died: _NodeDied, cs: Optional[_CallSet], events: Optional[_Events]) -> Optional[Result]:
        """A node died under a one-shot run: None to run it again elsewhere,
        or the run's ``worker-exit`` result once something of it reached the
        caller."""
        why = _death(died.node, died.cause)
        self._mark_dead(died.node, why)
        if cs is not None:
            cs.close()  # no call of this attempt starts from now on
        reached = (cs is not None and cs.calls > 0) or (events is not None and events.delivered)
        if not reached and self._members:
            return None
        return Result(error=Failure("worker-exit", f"the program's node died: {why}"))

    def run(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """Runs ``code`` on a node and returns its :class:`pycage.Result`,
        as :meth:`pycage.Runtime.run` does: bindings are called in this
        process (sync ones on a thread pool, async ones on a private loop),
        ``on_log`` / ``on_call`` on this thread, Ctrl-C aborts the run."""
        code = _check_code(code)
        specs = _namespaces(bindings)
        events = _Events.of(on_log, on_call)
        for node in self._attempts():
            cs = _CallSet.of(specs)
            if cs is not None:
                cs.point(self._private_loop, contextvars.copy_context())
            self._begin(node)
            try:
                return self._run_sync(node, code, specs, cs, events)
            except _NodeDied as died:
                result = self._after_death(died, cs, events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def _run_sync(
        self, node: _Member, code: str, specs: list[Any], cs: Optional[_CallSet], events: Optional[_Events]
    ) -> Result:
        try:
            if cs is None and events is None:
                return _get(node.actor.run.remote(code))
            gen = node.actor.run_stream.remote(code, _wire(specs), *_wants(events))
            return _consume(gen, _Stream(events, cs, self._dispatcher, node.actor))
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
            raise _NodeDied(node, e) from None

    async def arun(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """Runs ``code`` on a node without blocking the event loop, as
        :meth:`pycage.Runtime.arun` does: async bindings run as tasks on this
        loop; cancelling the awaiting task cancels the node's Ray task, which
        aborts the run and kills its child."""
        code = _check_code(code)
        specs = _namespaces(bindings)
        events = _Events.of(on_log, on_call)
        loop = asyncio.get_running_loop()
        for node in self._attempts():
            cs = _CallSet.of(specs)
            if cs is not None:
                cs.point(lambda: loop, contextvars.copy_context())
            self._begin(node)
            try:
                return await self._run_async(node, code, specs, cs, events)
            except _NodeDied as died:
                result = self._after_death(died, cs, events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_async(
        self, node: _Member, code: str, specs: list[Any], cs: Optional[_CallSet], events: Optional[_Events]
    ) -> Result:
        try:
            if cs is None and events is None:
                return await _awaited(node.actor.run.remote(code))
            gen = node.actor.run_stream.remote(code, _wire(specs), *_wants(events))
            return await _aconsume(gen, _Stream(events, cs, self._dispatcher, node.actor))
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
            raise _NodeDied(node, e) from None

    def resume(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        program: Optional[str] = None,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """Resumes a suspended run from its journal on a node (any node: the
        journal carries what the run needs), as
        :meth:`pycage.Runtime.resume` does locally. A node that dies before
        anything of the resumed run reached the caller is replaced by
        another, as for :meth:`run`."""
        data = _durable._journal(journal)
        answer = _durable._answer(reply, error)
        code = None if program is None else _check_code(program)
        specs = _namespaces(bindings)
        events = _Events.of(on_log, on_call)
        for node in self._attempts():
            cs = _CallSet.of(specs)
            if cs is not None:
                cs.point(self._private_loop, contextvars.copy_context())
            self._begin(node)
            try:
                try:
                    gen = node.actor.resume_stream.remote(data, answer, code, _wire(specs), *_wants(events))
                    return _consume(gen, _Stream(events, cs, self._dispatcher, node.actor))
                except ray.exceptions.RayTaskError as e:
                    _raise_cause(e)
                    raise
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                    raise _NodeDied(node, e) from None
            except _NodeDied as died:
                result = self._after_death(died, cs, events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    async def aresume(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        program: Optional[str] = None,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """:meth:`resume` without blocking the event loop (as :meth:`arun`)."""
        data = _durable._journal(journal)
        answer = _durable._answer(reply, error)
        code = None if program is None else _check_code(program)
        specs = _namespaces(bindings)
        events = _Events.of(on_log, on_call)
        loop = asyncio.get_running_loop()
        for node in self._attempts():
            cs = _CallSet.of(specs)
            if cs is not None:
                cs.point(lambda: loop, contextvars.copy_context())
            self._begin(node)
            try:
                try:
                    gen = node.actor.resume_stream.remote(data, answer, code, _wire(specs), *_wants(events))
                    return await _aconsume(gen, _Stream(events, cs, self._dispatcher, node.actor))
                except ray.exceptions.RayTaskError as e:
                    _raise_cause(e)
                    raise
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                    raise _NodeDied(node, e) from None
            except _NodeDied as died:
                result = self._after_death(died, cs, events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def session(
        self,
        bindings: Optional[Bindings] = None,
        *,
        key: Optional[str] = None,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        address_space_bytes: Optional[int] = None,
    ) -> RaySession:
        """Opens a :class:`RaySession` on the node that ``key`` hashes to
        (a random key by default), with :meth:`pycage.Runtime.session`'s
        arguments and behaviour. Sessions with the same key share a node
        while it lives (e.g. one user's sessions)."""
        if key is None:
            key = uuid.uuid4().hex
        elif not isinstance(key, str):
            raise TypeError(f"pycage.ray.RayRuntime.session: key must be a str or None, got {type(key).__name__}")
        specs = _namespaces(bindings)
        options = {
            "idle_timeout_seconds": idle_timeout_seconds,
            "max_lifetime_seconds": max_lifetime_seconds,
            "address_space_bytes": address_space_bytes,
        }
        tried: set[str] = set()
        while True:
            node = self._rendezvous(key, tried)
            tried.add(node.node_id)
            sid = uuid.uuid4().hex
            try:
                ray.get(node.actor.session_open.remote(sid, _wire(specs), options))
            except ray.exceptions.RayTaskError as e:
                _raise_cause(e)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                # Nothing ran yet: the next node in the key's order takes it.
                self._mark_dead(node, _death(node, e))
                continue
            return RaySession(self, node, sid, key, _CallSet.of(specs))

    def stats(self) -> dict[str, Any]:
        """Per-node load and pool state: each live node's runs in flight,
        running and queued (over its ``max_concurrent_runs``), open sessions,
        totals, its pool (isolation, spawn, pool size, live processes), and
        this driver's runs in flight there; the dead nodes and why; the
        binding calls this driver ran and has in flight."""
        members = self._live()
        refs = [(m, m.actor.stats.remote()) for m in members]
        nodes = []
        for m, ref in refs:
            try:
                s = ray.get(ref, timeout=30)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                self._mark_dead(m, _death(m, e))
                continue
            except ray.exceptions.GetTimeoutError:
                s = {"node_id": m.node_id, "unresponsive": True}
            s["driver_in_flight"] = m.in_flight
            nodes.append(s)
        bindings = {"calls_total": self._dispatcher.calls_total, "calls_in_flight": self._dispatcher.calls_in_flight}
        with self._lock:
            dead = [{"node_id": nid, "reason": why} for nid, (why, _) in self._dead.items()]
            refused = [{"node_id": nid, "reason": why} for nid, why in self._refused.items()]
        return {"nodes": nodes, "dead_nodes": dead, "refused_nodes": refused, "bindings": bindings}

    def close(self) -> None:
        """Closes every node's runtime (runs in flight return ``abort``,
        children are reaped), then kills the node actors.
        Idempotent. Ray itself stays up (``ray.shutdown()`` is yours)."""
        with self._lock:
            if self._closed and not self._members:
                return
            self._closed = True
            members = list(self._members.values())
            self._members.clear()
            loop_thread, self._loop_thread = self._loop_thread, None
        stop = getattr(self, "_refresh_stop", None)
        if stop is not None:
            stop.set()
        # After ray.shutdown() the actors are gone with Ray, and any call
        # would start a new local Ray: nothing is sent then.
        shutdowns = []
        for m in members if ray.is_initialized() else ():
            try:
                shutdowns.append(m.actor.shutdown.remote())
            except Exception:  # noqa: BLE001 - already gone
                pass
        if shutdowns:
            ray.wait(shutdowns, num_returns=len(shutdowns), timeout=60)
        for m in members:
            _kill(m.actor)
        self._dispatcher.close()
        if loop_thread is not None:
            loop_thread.stop()
        refresher = getattr(self, "_refresher", None)
        if refresher is not None and refresher is not threading.current_thread():
            refresher.join(timeout=60)


def _kill(actor: Any) -> None:
    if not ray.is_initialized():
        return  # the actor went with Ray
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone, or Ray is shutting down
        pass


def _refresh_loop(runtime: weakref.ref[RayRuntime], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        rt = runtime()
        if rt is None or not ray.is_initialized():
            return
        try:
            rt.refresh()
        except Exception:  # noqa: BLE001 - the next round tries again
            pass
        del rt


async def _awaited(ref: Any) -> Any:
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise


def _wants(events: Optional[_Events]) -> tuple[bool, bool]:
    """Which callbacks the node should stream events for."""
    return (False, False) if events is None else (events.on_log is not None, events.on_call is not None)


def _consume(gen: Any, stream: _Stream) -> Result:
    """A streamed run, synchronously: events delivered on this thread."""
    try:
        for ref in gen:
            try:
                kind, payload = ray.get(ref)
            except ray.exceptions.TaskCancelledError:
                if stream.error is not None:
                    raise stream.error from None
                raise
            if kind == "events":
                if stream.handle(payload):
                    ray.cancel(gen)
            else:
                if stream.error is not None:
                    raise stream.error
                return payload
    except KeyboardInterrupt:
        ray.cancel(gen)
        raise
    if stream.error is not None:
        raise stream.error
    raise PycageError("the node's run ended without a result")


async def _aconsume(gen: Any, stream: _Stream) -> Result:
    """A streamed run, on the loop: events delivered on the loop."""
    try:
        async for ref in gen:
            try:
                kind, payload = await ref
            except ray.exceptions.TaskCancelledError:
                if stream.error is not None:
                    raise stream.error from None
                raise
            if kind == "events":
                if stream.handle(payload):
                    ray.cancel(gen)
            else:
                if stream.error is not None:
                    raise stream.error
                return payload
    except asyncio.CancelledError:
        ray.cancel(gen)
        raise
    if stream.error is not None:
        raise stream.error
    raise PycageError("the node's run ended without a result")


class RaySession(_Closeable):
    """A :class:`pycage.Session` on one node of a :class:`RayRuntime`: one
    process whose globals live across runs, with bindings that run in this
    process. If its node dies, its run in flight returns ``worker-exit`` and
    later runs raise :class:`pycage.SessionEndedError` saying so."""

    def __init__(self, runtime: RayRuntime, node: _Member, sid: str, key: str, cs: Optional[_CallSet]) -> None:
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
    def key(self) -> str:
        """The key that placed it (rendezvous hashing over the live nodes)."""
        return self._key

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or ``None`` while it lives (asks its node)."""
        if self._ended is None and (self._runtime.closed or not ray.is_initialized()):
            self._ended = _CLOSED
        if self._ended is not None:
            return self._ended
        if self._node.dead is not None:
            self._ended = self._node.dead
            return self._ended
        try:
            why = ray.get(self._node.actor.session_ended.remote(self._sid), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
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
                self._ended = _CLOSED
            self._runtime._live()  # raises RuntimeClosedError, as a local session's run does
        if self._ended is None and self._node.dead is not None:
            self._ended = self._node.dead
        if self._ended is not None and (self._closed or self._node.dead is not None):
            raise SessionEndedError(f"the session has ended: {self._ended}; open a new one")

    def run(
        self,
        code: str,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like :meth:`pycage.Session.run`."""
        code = _check_code(code)
        events = _Events.of(on_log, on_call)
        turn = self._turns.take(_get_ident())
        try:
            self._check_open()
            if self._cs is not None:
                self._cs.point(self._runtime._private_loop, contextvars.copy_context())
            self._runtime._begin(self._node)
            try:
                if self._cs is None and events is None:
                    return _get(self._node.actor.session_run.remote(self._sid, code))
                gen = self._node.actor.session_run_stream.remote(self._sid, code, *_wants(events))
                return _consume(gen, _Stream(events, self._cs, self._runtime._dispatcher, self._node.actor))
            except ray.exceptions.RayTaskError as e:
                _raise_cause(e)
                raise
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                return Result(error=Failure("worker-exit", f"the session's process died: {self._died(e)}"))
            finally:
                self._runtime._end(self._node)
        finally:
            self._turns.give_back(turn)

    async def arun(
        self,
        code: str,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like
        :meth:`pycage.Session.arun` (cancelling the task aborts the run, and
        so ends the session)."""
        code = _check_code(code)
        loop = asyncio.get_running_loop()
        turn = await self._turns.atake(loop)
        try:
            self._check_open()
            if self._cs is not None:
                self._cs.point(lambda: loop, contextvars.copy_context())
            events = _Events.of(on_log, on_call)
            self._runtime._begin(self._node)
            try:
                if self._cs is None and events is None:
                    return await _awaited(self._node.actor.session_run.remote(self._sid, code))
                gen = self._node.actor.session_run_stream.remote(self._sid, code, *_wants(events))
                return await _aconsume(gen, _Stream(events, self._cs, self._runtime._dispatcher, self._node.actor))
            except ray.exceptions.RayTaskError as e:
                _raise_cause(e)
                raise
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                return Result(error=Failure("worker-exit", f"the session's process died: {self._died(e)}"))
            finally:
                self._runtime._end(self._node)
        finally:
            self._turns.give_back(turn)

    def close(self) -> None:
        """Ends the session and returns once its process is reaped (on its
        node). Idempotent. Waits for a run in flight; raises
        :class:`pycage.SessionBusyError` inside one, which it would wait for."""
        self._turns.refuse(_get_ident())
        with self._turns.lock:
            if self._closed:
                return
            self._closed = True
            self._finalizer.detach()
            if self._node.dead is None and not self._runtime.closed and ray.is_initialized():
                try:
                    why = ray.get(self._node.actor.session_close.remote(self._sid), timeout=60)
                    if self._ended is None:
                        self._ended = why
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
                    self._died(e)
                except Exception:  # noqa: BLE001 - the node closes it with its runtime anyway
                    pass
            if self._ended is None:
                self._ended = _CLOSED
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
