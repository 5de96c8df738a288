"""The driver's end of one run on a node: the node as the driver tracks it
(:class:`_Member`, and why it died), the consumption of a run's stream
(events delivered to the caller's callbacks, binding calls dispatched),
Ray's errors turned into the caller's, and the run's ``out/`` delivered
into the caller's ``output_dir``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

import ray
import ray.exceptions

from .. import _native
from .._events import _Events
from .._files import _output_files
from .._results import Result
from ..errors import PycageError
from ._calls import _CallSet, _Dispatcher, _settle
from ._wire import Tree, first_line, unpack


@dataclass(frozen=True)
class NodeInfo:
    """A live node of a :class:`RayRuntime`: its Ray node id and its
    :class:`CageNode` actor handle."""

    node_id: str
    actor: Any


class _Member:
    """A node as the driver tracks it."""

    __slots__ = ("node_id", "actor", "in_flight", "dead", "tasks")

    def __init__(self, node_id: str, actor: Any) -> None:
        self.node_id = node_id
        self.actor = actor
        self.in_flight = 0
        self.dead: Optional[str] = None
        #: This driver's runs in flight on the node (a stream, or a plain
        #: task's reference): closing waits for them to end before it kills
        #: the actor (see :func:`_finished`).
        self.tasks: set[Any] = set()


def _finished(task: Any) -> Any:
    """A reference that is ready once ``task`` (a stream or a plain task's
    reference) has ended and its results have reached this driver."""
    completed = getattr(task, "completed", None)
    return task if completed is None else completed()


class _NodeDied(Exception):
    def __init__(self, node: _Member, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


#: What Ray raises when an actor's process or node is gone.
NODE_GONE = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError)


def _death(node: _Member, cause: BaseException) -> str:
    # An unavailable actor may be a cut connection: the run's outcome is lost
    # all the same, and its session with it.
    what = "became unreachable" if isinstance(cause, ray.exceptions.ActorUnavailableError) else "died"
    return f"its node {node.node_id[:12]} {what} ({type(cause).__name__}: {first_line(str(cause))})"


def _raise_cause(e: BaseException) -> None:
    """A node's own exception (a pycage misuse error, a TypeError), unwrapped
    from Ray's task error."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError):
        raise cause from None
    raise PycageError(f"the pycage node failed: {first_line(str(e), 2000)}") from None


def _kill(actor: Any) -> None:
    if not ray.is_initialized():
        return  # the actor went with Ray
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone, or Ray is shutting down
        pass


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
        for item in batch:
            if item[0] == "bind":
                if self.error is not None:
                    _settle(self.actor, item[1], False, "the call was cancelled")
                else:
                    self.dispatcher.dispatch(self.cs, self.actor, item)
            elif self.events is not None:
                self.events.deliver(item[0], item[1])
        if self.error is not None and not self.cancelled:
            self.cancelled = True
            return True
        return False

    def done(self, item: tuple[Any, ...]) -> tuple[Result, Optional[Tree]]:
        if self.error is not None:
            raise self.error
        return item[1], item[2]


def _get(ref: Any) -> Any:
    """``ray.get`` for a synchronous run: Ctrl-C cancels the node's run
    (killing its child) before it is raised."""
    try:
        return ray.get(ref)
    except KeyboardInterrupt:
        ray.cancel(ref)
        raise


async def _awaited(ref: Any) -> Any:
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise


def _consume(gen: Any, stream: _Stream) -> tuple[Result, Optional[Tree]]:
    """A streamed run, synchronously: events delivered on this thread."""
    try:
        for ref in gen:
            try:
                item = ray.get(ref)
            except ray.exceptions.TaskCancelledError:
                if stream.error is not None:
                    raise stream.error from None
                raise
            if item[0] != "events":
                return stream.done(item)
            if stream.handle(item[1]):
                ray.cancel(gen)
    except KeyboardInterrupt:
        ray.cancel(gen)
        raise
    if stream.error is not None:
        raise stream.error
    raise PycageError("the node's run ended without a result")


async def _aconsume(gen: Any, stream: _Stream) -> tuple[Result, Optional[Tree]]:
    """A streamed run, on the loop: events delivered on the loop."""
    try:
        async for ref in gen:
            try:
                item = await ref
            except ray.exceptions.TaskCancelledError:
                if stream.error is not None:
                    raise stream.error from None
                raise
            if item[0] != "events":
                return stream.done(item)
            if stream.handle(item[1]):
                ray.cancel(gen)
    except asyncio.CancelledError:
        ray.cancel(gen)
        raise
    if stream.error is not None:
        raise stream.error
    raise PycageError("the node's run ended without a result")


def deliver_output(result: Result, tree: Optional[Tree], output_dir: Optional[str], max_bytes: int) -> Result:
    """``result`` with what its node's copy of ``out/`` held copied into
    ``output_dir`` here, by the copy a local run makes (nothing that exists
    there is written; what was not copied is listed, the node's skips
    first)."""
    if output_dir is None or tree is None:
        return result
    with tempfile.TemporaryDirectory(prefix="pycage-ray-out-") as work:
        unpack(tree, os.path.join(work, "out"))
        files, skipped = _output_files(_native._copy_output(work, output_dir, max_bytes))
    return dataclasses.replace(result, files=files, skipped_files=list(result.skipped_files) + skipped)
