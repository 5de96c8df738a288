"""The node side: :class:`CageNode`, the Ray actor that owns one warm
:class:`pycage.Runtime` on its node and runs programs and sessions there
through that runtime's own API (``arun``, ``session``), with stand-ins
for the driver's bindings and callbacks that put each call and event on
the run's result stream."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any, Optional

import ray

from .. import _durable
from .._bindings import ErrorClass, Namespace
from .._native import from_json
from .._results import Result
from .._runtime import Runtime
from .._session import Session
from ..errors import SessionEndedError
from ._wire import CLOSED, Tree, WireSpec, pack_dir, unpack


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

    def callbacks(self, wants: tuple[bool, bool, bool]) -> dict[str, Any]:
        """``on_log``, ``on_call``, ``on_display`` for the callbacks the
        driver has (``wants``), each putting its event on the channel."""
        names = ("log", "call", "display")
        return {
            f"on_{kind}": (lambda event, kind=kind: self.push((kind, event))) if want else None
            for kind, want in zip(names, wants, strict=True)
        }


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


def _stage(
    inputs: Optional[list[tuple[str, Tree]]], want_output: bool
) -> tuple[str, Optional[list[str]], Optional[str]]:
    """A run's files on this node: a private directory holding the driver's
    inputs (each under its base name) and, when the driver has an
    ``output_dir``, where ``out/`` is copied; its paths."""
    stage = tempfile.mkdtemp(prefix="pycage-ray-run-")
    paths = None
    if inputs is not None:
        paths = []
        for i, (name, tree) in enumerate(inputs):
            unpack(tree, os.path.join(stage, "in", str(i)))
            paths.append(os.path.join(stage, "in", str(i), name))
    return stage, paths, os.path.join(stage, "out") if want_output else None


def _collect(out: Optional[str], max_bytes: int) -> Optional[Tree]:
    """What the run's copy of ``out/`` holds (``None``: not copied)."""
    if out is None or not os.path.isdir(out):
        return None
    return pack_dir(out, max_bytes)


@ray.remote(num_cpus=0, max_restarts=0)
class CageNode:
    """The Ray actor: one per node, owning one warm :class:`pycage.Runtime`.

    Created by :class:`RayRuntime` (one per eligible node, with node
    affinity). Direct use works too: ``ray.get(node.run.remote("return 1"))``
    is a :class:`pycage.Result`, and ``ray.cancel`` of that reference aborts
    the run and kills its child.

    Runs with bindings, events or files are streamed (``run_stream``, a Ray
    streaming generator): ``("events", batch)`` items while the run is in
    flight, then ``("done", result, out_tree)``. A batch holds ``("log",
    line)``, ``("call", CallStarted | CallFinished)``, ``("display",
    Display)`` and, for each binding call of the program, ``("bind",
    call_id, global, member, args, kwargs)``, which the consumer answers
    with :meth:`settle` (``ok`` and the value as canonical JSON, or the
    rejection message): the binding runs wherever the stream is consumed,
    in the driver.
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
        driver's binding raised :class:`pycage.Suspend` (``payload`` its
        reason)."""
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

    async def _run(
        self,
        code: str,
        bindings: Optional[dict[str, Any]],
        callbacks: dict[str, Any],
        limits: Optional[dict[str, Any]],
        inputs: Optional[list[tuple[str, Tree]]] = None,
        want_output: bool = False,
        resume: Optional[tuple[bytes, tuple[bool, Any]]] = None,
    ) -> tuple[Result, Optional[Tree]]:
        rt = self._rt()
        self._in_flight += 1
        stage = None
        try:
            loop = asyncio.get_running_loop()
            paths = out = None
            if inputs is not None or want_output:
                # Files are blocking work: off the actor's event loop.
                stage, paths, out = await loop.run_in_executor(None, _stage, inputs, want_output)
            if resume is None:
                result = await rt.arun(code, bindings, inputs=paths, output_dir=out, **callbacks, **(limits or {}))
            else:
                journal, (approved, value) = resume
                answer = {"reply": value} if approved else {"error": value}
                result = await rt.aresume(
                    journal,
                    bindings=bindings,
                    program=code or None,
                    inputs=paths,
                    output_dir=out,
                    **callbacks,
                    **answer,
                )
            max_bytes = rt.config["max_output_bytes"]
            return result, await loop.run_in_executor(None, _collect, out, max_bytes)
        finally:
            self._in_flight -= 1
            self._runs_total += 1
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)

    async def run(self, code: str, limits: Optional[dict[str, Any]] = None) -> Result:
        """Runs ``code`` (no bindings, no events, no files; ``limits`` the
        run's own budgets by keyword) on this node's runtime; cancelling the
        Ray task (``ray.cancel``) aborts the run and kills its child."""
        result, _ = await self._run(code, None, {}, limits)
        return result

    async def run_stream(
        self,
        code: str,
        spec: WireSpec,
        wants: tuple[bool, bool, bool],
        limits: Optional[dict[str, Any]] = None,
        inputs: Optional[list[tuple[str, Tree]]] = None,
        want_output: bool = False,
    ):
        """:meth:`run` with bindings, events (``wants``: whether the driver
        has ``on_log``, ``on_call``, ``on_display``), inputs and an output
        directory, streamed (see the class)."""
        channel = _Channel()
        bindings = self._bindings(spec, lambda: channel)
        callbacks = channel.callbacks(wants)
        async for item in _streamed(channel, lambda: self._run(code, bindings, callbacks, limits, inputs, want_output)):
            yield item

    async def resume_stream(
        self,
        journal: bytes,
        answer: tuple[bool, Any],
        program: Optional[str],
        spec: WireSpec,
        wants: tuple[bool, bool, bool],
        inputs: Optional[list[tuple[str, Tree]]] = None,
        want_output: bool = False,
    ):
        """Resumes a suspended run from its ``journal`` on this node
        (:meth:`pycage.Runtime.aresume`), streamed as :meth:`run_stream`.
        ``answer`` is ``(True, reply)`` or ``(False, denial message)``; the
        node verifies the journal with its runtime's key (the driver's)."""
        channel = _Channel()
        bindings = self._bindings(spec, lambda: channel)
        callbacks = channel.callbacks(wants)
        resume = (journal, answer)
        run = lambda: self._run(program or "", bindings, callbacks, None, inputs, want_output, resume)  # noqa: E731
        async for item in _streamed(channel, run):
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
            raise SessionEndedError(f"the session has ended: {CLOSED}; open a new one")
        return session

    async def _session_run(self, session: Session, code: str, callbacks: dict[str, Any]) -> tuple[Result, None]:
        self._session_in_flight += 1
        try:
            return await session.arun(code, **callbacks), None
        finally:
            self._session_in_flight -= 1
            self._session_runs_total += 1

    async def session_run(self, sid: str, code: str) -> Result:
        result, _ = await self._session_run(self._session(sid), code, {})
        return result

    async def session_run_stream(self, sid: str, code: str, wants: tuple[bool, bool, bool]):
        # The driver runs one run of a session at a time (its own turns).
        session = self._session(sid)
        channel = _Channel()
        self._session_channels[sid] = channel
        try:
            callbacks = channel.callbacks(wants)
            async for item in _streamed(channel, lambda: self._session_run(session, code, callbacks)):
                yield item
        finally:
            if self._session_channels.get(sid) is channel:
                del self._session_channels[sid]

    async def session_ended(self, sid: str) -> Optional[str]:
        session = self._sessions.get(sid)
        return CLOSED if session is None else session.ended

    async def session_close(self, sid: str) -> Optional[str]:
        """Closes the session (a run in flight returns ``abort``); returns
        why it had ended before, if it had."""
        session = self._sessions.pop(sid, None)
        if session is None:
            return None
        why = session.ended
        await session.aclose()
        return why

    async def wait_idle(self, timeout: float) -> bool:
        """This node's runtime's :meth:`pycage.Runtime.wait_idle`, and no run
        of this actor left to hand back."""
        deadline = time.monotonic() + timeout
        rt = self._rt()
        if not await rt.await_idle(timeout):
            return False
        # The runtime settled its runs: their results reach this actor's
        # counters on its own loop, within a few iterations of it.
        while self._in_flight or self._session_in_flight:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.001)
        return True

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


async def _streamed(channel: _Channel, start: Callable[[], Any]):
    """Runs ``start()`` (a run: its result and its ``out/`` tree) and yields
    what its channel gathers, in batches as it comes, then ``("done",
    result, tree)``; closing the generator (a cancelled Ray task) cancels
    the run."""
    task = asyncio.ensure_future(start())
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
                result, tree = task.result()
                yield ("done", result, tree)
                return
    finally:
        if not task.done():
            task.cancel()
            # The run's own cancellation kills and reaps its child.
            await asyncio.gather(task, return_exceptions=True)
