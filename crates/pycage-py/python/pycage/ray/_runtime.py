"""The driver: :class:`RayRuntime`, the run API of ``pycage._api`` over the
nodes of a Ray cluster. It keeps the set of live nodes (each a
:class:`CageNode`), places each run and session, carries a checked run to
its node and its outcome back, and runs again elsewhere a run whose node
died before anything of it reached the caller."""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
import uuid
import weakref
from collections.abc import Iterable
from typing import Any, Optional

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import _durable
from .._api import _RunRequest, _RuntimeApi
from .._bindings import NamespaceSpec
from .._events import _Events
from .._results import Failure, Result
from ..errors import ConfigError, RuntimeClosedError
from ._calls import _CallSet, _Dispatcher
from ._node import CageNode
from ._session import _NO_RUN_TYPE_CHECK, RaySession
from ._stream import (
    NODE_GONE,
    NodeInfo,
    _aconsume,
    _awaited,
    _consume,
    _death,
    _finished,
    _get,
    _kill,
    _Member,
    _NodeDied,
    _raise_cause,
    _Stream,
    deliver_output,
)
from ._wire import NoLiveNodeError, Tree, first_line, pack_inputs, wire

_REJOIN_AFTER_SECONDS = 60.0
"""How long a node whose actor died stays out before a refresh may start a
new CageNode there (if Ray still reports it alive)."""

#: The default of ``max_input_bytes``: what one run's inputs may hold.
DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024


class RayRuntime(_RuntimeApi[RaySession]):
    """:class:`pycage.Runtime`'s API over a Ray cluster: one warm runtime
    (a :class:`CageNode`) per node. ``run``, ``arun``, ``session``,
    ``check_bindings`` and ``wait_idle`` are :class:`pycage.Runtime`'s own
    (one definition): the same arguments, checked the same way, and the
    same :class:`pycage.Result`.

    ``runtime_kwargs`` are :class:`pycage.Runtime`'s keyword arguments
    (``isolation``, budgets, ``python``, ``pool_size``...), applied on every
    node; a bad one raises here, from the first node that refused it, as it
    would locally. ``resource`` limits the nodes to those that declare that
    custom Ray resource (``ray start --resources '{"pycage": 1}'``);
    ``None`` takes every node. ``refresh_seconds`` is how often the live
    nodes are re-read from Ray (nodes that joined get a :class:`CageNode`;
    nodes Ray reports dead are dropped). ``max_input_bytes`` bounds the
    files of one run's ``inputs``, which are read here and carried to the
    node (default 64 MiB); what a run leaves in ``out/`` comes back into
    ``output_dir`` here, within the runtime's ``max_output_bytes``. Connects
    with ``ray.init()`` if Ray is not initialized yet.

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

    _label = "pycage.ray.RayRuntime"

    def __init__(
        self,
        *,
        resource: Optional[str] = None,
        refresh_seconds: float = 10.0,
        startup_timeout_seconds: float = 120.0,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        **runtime_kwargs: Any,
    ) -> None:
        if resource is not None and not isinstance(resource, str):
            raise TypeError(f"pycage.ray.RayRuntime: resource must be a str or None, got {type(resource).__name__}")
        for name, value in (("refresh_seconds", refresh_seconds), ("startup_timeout_seconds", startup_timeout_seconds)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"invalid pycage.ray.RayRuntime argument: {name} must be a number > 0, got {value!r}")
        if isinstance(max_input_bytes, bool) or not isinstance(max_input_bytes, int) or max_input_bytes < 0:
            raise ConfigError(
                f"invalid pycage.ray.RayRuntime argument: max_input_bytes must be an int >= 0, got {max_input_bytes!r}"
            )
        if not ray.is_initialized():
            ray.init()
        self._init_api()
        self._resource = resource
        self._runtime_kwargs = dict(runtime_kwargs)
        # Every node signs and verifies journals with the driver's key
        # (given, or PYCAGE_JOURNAL_KEY here), so a journal made on one node
        # resumes on any other.
        key = _durable.journal_key(self._runtime_kwargs.pop("journal_key", None))
        if key is not None:
            self._runtime_kwargs["journal_key"] = key
        self._startup_timeout = float(startup_timeout_seconds)
        self._max_input_bytes = max_input_bytes
        # The nodes' max_output_bytes (one configuration on every node).
        self._max_output_bytes = 0
        self._refresh_lock = threading.Lock()
        self._members: dict[str, _Member] = {}
        self._dead: dict[str, tuple[str, float]] = {}
        self._refused: dict[str, str] = {}
        self._dispatcher = _Dispatcher()
        self._refresher: Optional[threading.Thread] = None
        self._refresh_stop = threading.Event()
        try:
            self._join(self._eligible(), raise_errors=True)
            if not self._members:
                where = f"with the resource {resource!r}" if resource else "alive"
                raise NoLiveNodeError(f"no Ray node {where} to place a pycage node on")
        except BaseException:
            self.close()
            raise
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
                    info = ray.get(ready)
                except ray.exceptions.RayTaskError as e:
                    _kill(actor)
                    self._refused[node_id] = first_line(str(getattr(e, "cause", e)))
                    if first_error is None:
                        try:
                            _raise_cause(e)
                        except BaseException as cause:  # noqa: BLE001 - raised below
                            first_error = cause
                    continue
                except Exception as e:  # noqa: BLE001 - the node died while its actor started
                    _kill(actor)
                    self._refused[node_id] = first_line(f"{type(e).__name__}: {e}")
                    continue
                with self._lock:
                    if self._closed or node_id in self._members:
                        _kill(actor)  # closed meanwhile, or the node has one already
                        continue
                    self._members[node_id] = _Member(node_id, actor)
                    self._dead.pop(node_id, None)
                    self._max_output_bytes = info["config"]["max_output_bytes"]
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
            if self._closed:
                return
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
                raise self._closed_error()
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

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<pycage.ray.RayRuntime nodes={len(self._members)}{state}>"

    # -- runs

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

    # -- the transport: runs on the nodes

    def _carried(self, request: _RunRequest) -> Optional[list[tuple[str, Tree]]]:
        """The run's inputs, read here for its node (once, for every attempt)."""
        return None if request.inputs is None else pack_inputs(request.inputs, self._max_input_bytes)

    def _call_set(self, request: _RunRequest, loop: Any) -> Optional[_CallSet]:
        cs = _CallSet.of(request.specs)
        if cs is not None:
            cs.point(loop, request.context)
        return cs

    def _send(self, node: _Member, request: _RunRequest, inputs: Any, cs: Optional[_CallSet]) -> tuple[bool, Any]:
        """Starts the run on ``node``: whether it is streamed, and its
        stream (or its result's reference)."""
        wants = (False, False, False) if request.events is None else request.events.wants()
        want_output = request.output_dir is not None
        spec = wire(request.specs)
        if request.resume is not None:
            journal, approved, value = request.resume
            stream = node.actor.resume_stream.remote(
                journal, (approved, value), request.code or None, spec, wants, inputs, want_output
            )
            return True, stream
        if cs is None and request.events is None and inputs is None and request.output_dir is None:
            return False, node.actor.run.remote(request.code, request.limits or None)
        return True, node.actor.run_stream.remote(
            request.code, spec, wants, request.limits or None, inputs, want_output
        )

    def _run(self, request: _RunRequest) -> Result:
        if request.type_check is not None:
            raise ConfigError(_NO_RUN_TYPE_CHECK)
        inputs = self._carried(request)
        for node in self._attempts():
            cs = self._call_set(request, self._private_loop)
            self._begin(node)
            sent = None
            try:
                try:
                    streamed, sent = self._send(node, request, inputs, cs)
                    node.tasks.add(sent)
                    if streamed:
                        result, tree = _consume(sent, _Stream(request.events, cs, self._dispatcher, node.actor))
                    else:
                        result, tree = _get(sent), None
                except ray.exceptions.RayTaskError as e:
                    _raise_cause(e)
                    raise
                except NODE_GONE as e:
                    raise _NodeDied(node, e) from None
                return deliver_output(result, tree, request.output_dir, self._max_output_bytes)
            except _NodeDied as died:
                result = self._after_death(died, cs, request.events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                node.tasks.discard(sent)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arun(self, request: _RunRequest, loop: asyncio.AbstractEventLoop) -> Result:
        if request.type_check is not None:
            raise ConfigError(_NO_RUN_TYPE_CHECK)
        inputs = self._carried(request)
        for node in self._attempts():
            cs = self._call_set(request, lambda: loop)
            self._begin(node)
            sent = None
            try:
                try:
                    streamed, sent = self._send(node, request, inputs, cs)
                    node.tasks.add(sent)
                    if streamed:
                        stream = _Stream(request.events, cs, self._dispatcher, node.actor)
                        result, tree = await _aconsume(sent, stream)
                    else:
                        result, tree = await _awaited(sent), None
                except ray.exceptions.RayTaskError as e:
                    _raise_cause(e)
                    raise
                except NODE_GONE as e:
                    raise _NodeDied(node, e) from None
                return await loop.run_in_executor(
                    None, deliver_output, result, tree, request.output_dir, self._max_output_bytes
                )
            except _NodeDied as died:
                result = self._after_death(died, cs, request.events)
                if result is not None:
                    return result
            finally:
                self._end(node)
                node.tasks.discard(sent)
                if cs is not None:
                    cs.close()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- durable runs (docs/durable.md)

    def _open_session(self, specs: list[NamespaceSpec], options: dict[str, Any]) -> RaySession:
        """Opens the session on the node its key hashes to (rendezvous
        hashing over the live nodes)."""
        key = options["key"]
        tried: set[str] = set()
        while True:
            node = self._rendezvous(key, tried)
            tried.add(node.node_id)
            sid = uuid.uuid4().hex
            try:
                ray.get(node.actor.session_open.remote(sid, wire(specs), options))
            except ray.exceptions.RayTaskError as e:
                _raise_cause(e)
            except NODE_GONE as e:
                # Nothing ran yet: the next node in the key's order takes it.
                self._mark_dead(node, _death(node, e))
                continue
            return RaySession(self, node, sid, key, _CallSet.of(specs))

    def _check_specs(self, specs: list[NamespaceSpec]) -> None:
        node = self._pick(set())
        try:
            ray.get(node.actor.check.remote(wire(specs)))
        except ray.exceptions.RayTaskError as e:
            _raise_cause(e)

    def _wait_idle(self, seconds: float) -> bool:
        refs = [(m, m.actor.wait_idle.remote(seconds)) for m in self._live()]
        idle = True
        for m, ref in refs:
            try:
                idle = ray.get(ref, timeout=seconds + 30) and idle
            except ray.exceptions.GetTimeoutError:
                idle = False
            except NODE_GONE as e:
                self._mark_dead(m, _death(m, e))  # a dead node has nothing in flight
        return idle

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
            members = list(self._members.values())
            self._members.clear()
            self._closed = True  # before _mark_closed: no run starts on a node that is going
        loop_thread = self._mark_closed()
        self._refresh_stop.set()
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
            # A run in flight has returned `abort` on its node by now, but
            # its last item may still be on its way here, and its consumer
            # may be the very thread in close() (from a run's callback): the
            # actor is killed only once this driver holds every such result,
            # or the run would read the actor's death as `worker-exit`.
            ends = [_finished(t) for m in members for t in list(m.tasks)]
            if ends:
                ray.wait(ends, num_returns=len(ends), timeout=60)
        for m in members:
            _kill(m.actor)
        self._dispatcher.close()
        if loop_thread is not None:
            loop_thread.stop()
        # The refresher is not waited for: a refresh may be blocked in a call
        # to a cluster that is gone (Ray retries its GCS for a minute), and
        # nothing it does after close is kept (see _refresh and _join).


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


def _score(key: str, node_id: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
