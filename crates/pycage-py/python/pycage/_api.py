"""The one definition of pycage's run API, whatever carries the runs.

:class:`_RuntimeApi` is ``run``, ``arun``, ``session``,
``check_bindings``, ``wait_idle`` and the context managers; it checks
every argument (each error names it) and hands a transport a checked
:class:`_RunRequest`. :class:`_SessionApi` is a session's ``run`` and
``arun``, in turns. A transport implements the ``_``-prefixed hooks:
:class:`pycage.Runtime` runs here, through the native module;
:class:`pycage.ray.RayRuntime` on the nodes of a Ray cluster. Both so
accept exactly the same arguments, and a change to them is made here.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Optional, TypeVar, Union

from . import _durable
from ._bindings import Bindings, NamespaceSpec, _LoopThread, _namespaces
from ._checks import (
    _ADDRESS_SPACE_WHY,
    _MIN_ADDRESS_SPACE,
    _budget_fields,
    _check_code,
    _check_flag,
    _check_int,
    _check_seconds,
    _describe,
)
from ._display import Display
from ._events import CallFinished, CallStarted, _Events
from ._files import _run_files
from ._results import Result
from .errors import RuntimeClosedError, SessionBusyError

_C = TypeVar("_C", bound="_Closeable")


class _Closeable:
    """``aclose`` and the context managers, over a blocking ``close``."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self: _C) -> _C:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# Whether a blocking run polls for signals (only the main thread gets
# them): by thread id, which touches fewer objects than
# ``threading.current_thread()`` (see ``_results._result``). The thread
# that forks is the child's main thread.
_get_ident = _thread.get_ident
_main_ident = [threading.main_thread().ident]
os.register_at_fork(after_in_child=lambda: _main_ident.__setitem__(0, _get_ident()))

#: A binding runs in a copy of its caller's context (see ``_Site``), so a
#: run of one of these started from a binding is refused.
_session_runs: contextvars.ContextVar[tuple[_Turns, ...]] = contextvars.ContextVar("pycage_session_runs", default=())


class _Turns:
    """A session's runs take turns (a lock). A run of the session started
    from inside one of its runs would wait for the run it is part of: it is
    refused with :class:`SessionBusyError`, whether it comes from a binding
    of that run (which sees its caller's context) or from a callback on the
    thread that run needs (a blocking run's caller, an ``arun``'s loop)."""

    __slots__ = ("lock", "_owner")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # The thread that holds the lock: a blocking run's caller, or the
        # loop of an `arun` (whose task cannot go on while that thread
        # blocks). Only that thread sets it to its own id.
        self._owner: Optional[int] = None

    def refuse(self, thread: Optional[int]) -> None:
        """Raises :class:`SessionBusyError` inside one of the session's runs.
        ``thread``: the caller's, for a blocking call."""
        if self in _session_runs.get() or (thread is not None and self._owner == thread):
            raise SessionBusyError(
                "a run of this session was started from inside one of its runs "
                "(its on_log, on_call or on_display callback, or one of its bindings), "
                "and would wait for the run it is part of: "
                "use another session or Runtime.run, or run it after that run has returned"
            )

    def _taken(self, thread: int) -> contextvars.Token[tuple[_Turns, ...]]:
        self._owner = thread
        return _session_runs.set(_session_runs.get() + (self,))

    def take(self, thread: int) -> contextvars.Token[tuple[_Turns, ...]]:
        """Waits for the session's turn on ``thread`` (the caller's)."""
        self.refuse(thread)
        self.lock.acquire()
        return self._taken(thread)

    async def atake(self, loop: asyncio.AbstractEventLoop) -> contextvars.Token[tuple[_Turns, ...]]:
        """Waits for the session's turn without blocking ``loop`` (in the
        awaiting task's context); cancelling the wait gives the turn back
        when it comes."""
        self.refuse(None)
        if not self.lock.acquire(blocking=False):
            waiting = loop.run_in_executor(None, self.lock.acquire)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                waiting.add_done_callback(lambda _: self.lock.release())
                raise
        return self._taken(_get_ident())

    def give_back(self, turn: contextvars.Token[tuple[_Turns, ...]]) -> None:
        _session_runs.reset(turn)
        self._owner = None
        self.lock.release()


OnLog = Optional[Callable[[str], Any]]
OnCall = Optional[Callable[[Union[CallStarted, CallFinished]], Any]]
OnDisplay = Optional[Callable[[Display], Any]]
Paths = Optional[Iterable[Union[str, os.PathLike[str]]]]
Path = Union[str, os.PathLike[str], None]


@dataclass
class _RunRequest:
    """One run's arguments, checked: what a transport carries."""

    code: str
    specs: list[NamespaceSpec]
    events: Optional[_Events]
    #: The per-run budgets given, by keyword (``None`` values dropped).
    limits: dict[str, Union[int, float]]
    #: The same, by config field in the field's unit (the native module's).
    fields: dict[str, int]
    inputs: Optional[list[str]]
    output_dir: Optional[str]
    #: A copy of the caller's ``contextvars``: where bindings run.
    context: contextvars.Context
    #: Type-check first (``True``), or not (``False``); ``None`` follows
    #: the runtime's ``type_check``.
    type_check: Optional[bool] = None
    #: A resume instead of a run: ``(journal, approved, reply or message)``
    #: (``_durable.resume_spec``); ``code`` is then the program the caller
    #: gave to check against the journal's, or empty.
    resume: Optional[tuple[bytes, bool, Any]] = None

    @staticmethod
    def of(
        owner: str,
        code: Any,
        bindings: Optional[Bindings],
        on_log: OnLog,
        on_call: OnCall,
        on_display: OnDisplay,
        inputs: Paths,
        output_dir: Path,
        limits: dict[str, Any],
        type_check: Optional[bool] = None,
    ) -> _RunRequest:
        code = _check_code(code)
        fields = _budget_fields(limits, owner, per_run=True)
        paths, out = _run_files(inputs, output_dir, owner)
        return _RunRequest(
            code=code,
            specs=_namespaces(bindings),
            events=_Events.of(on_log, on_call, on_display),
            limits={k: v for k, v in limits.items() if v is not None},
            fields=fields,
            inputs=paths,
            output_dir=out,
            context=contextvars.copy_context(),
            type_check=_check_flag("type_check", type_check, optional=True),
        )


def _session_options(
    owner: str,
    key: Optional[str],
    idle_timeout_seconds: float,
    max_lifetime_seconds: float,
    address_space_bytes: Optional[int],
) -> dict[str, Any]:
    """A session's options, checked: its key (a random one when ``None``)
    and the keyword arguments of the native session."""
    if key is None:
        key = uuid.uuid4().hex
    elif not isinstance(key, str):
        raise TypeError(f"{owner}: key must be a str or None, got {_describe(key)}")
    _check_seconds("idle_timeout_seconds", idle_timeout_seconds, owner, positive=True)
    _check_seconds("max_lifetime_seconds", max_lifetime_seconds, owner, positive=True)
    return {
        "key": key,
        "idle_timeout_seconds": float(idle_timeout_seconds),
        "max_lifetime_seconds": float(max_lifetime_seconds),
        "address_space_bytes": _check_int(
            "address_space_bytes", address_space_bytes, _MIN_ADDRESS_SPACE, owner, why=_ADDRESS_SPACE_WHY
        ),
    }


class _SessionApi(_Closeable):
    """A session's API: runs in its globals, one at a time (see
    :class:`_Turns`). A transport implements :meth:`_run`, :meth:`_arun`,
    :attr:`ended` and :meth:`close`."""

    _turns: _Turns
    _key: str

    @property
    def key(self) -> str:
        """The session's key: the one given to ``session()``, or a random
        one (a :class:`pycage.ray.RayRuntime` places sessions by it)."""
        return self._key

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or ``None`` while it lives."""
        raise NotImplementedError

    def run(
        self,
        code: str,
        *,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        type_check: Optional[bool] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like :meth:`pycage.Runtime.run`
        (figures left open are shown at the end of each run, as after a
        notebook cell). A type check (``type_check``) sees the cells that
        ran before as one program with this one; a cell that fails it is not
        remembered."""
        code = _check_code(code)
        check = _check_flag("type_check", type_check, optional=True)
        events = _Events.of(on_log, on_call, on_display)
        thread = _get_ident()
        turn = self._turns.take(thread)
        try:
            return self._run(code, events, thread, check)
        finally:
            self._turns.give_back(turn)

    async def arun(
        self,
        code: str,
        *,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        type_check: Optional[bool] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like :meth:`pycage.Runtime.arun`
        (cancelling the task aborts the run, and so ends the session)."""
        code = _check_code(code)
        check = _check_flag("type_check", type_check, optional=True)
        loop = asyncio.get_running_loop()
        turn = await self._turns.atake(loop)
        try:
            return await self._arun(code, _Events.of(on_log, on_call, on_display), loop, check)
        finally:
            self._turns.give_back(turn)

    def _run(self, code: str, events: Optional[_Events], thread: int, type_check: Optional[bool]) -> Result:
        """A run of the session on ``thread`` (the caller's), in its turn."""
        raise NotImplementedError

    async def _arun(
        self, code: str, events: Optional[_Events], loop: asyncio.AbstractEventLoop, type_check: Optional[bool]
    ) -> Result:
        """A run of the session on ``loop``, in its turn."""
        raise NotImplementedError


_S = TypeVar("_S", bound=_SessionApi)


class _RuntimeApi(_Closeable, Generic[_S]):
    """The run API (see the module), whose sessions are ``_S``. A transport
    sets :attr:`_label` (its name in messages), calls :meth:`_init_api` and
    implements the hooks below :meth:`close`."""

    _label: ClassVar[str] = "pycage.Runtime"

    def _init_api(self) -> None:
        self._lock = threading.Lock()
        self._loop_thread: Optional[_LoopThread] = None
        self._closed = False
        self._finalizer: Optional[weakref.finalize] = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _closed_error(self) -> RuntimeClosedError:
        return RuntimeClosedError(f"the runtime is closed; create a new {self._label} to run more programs")

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        """The loop of async bindings of blocking runs: started on first use,
        stopped by :meth:`close` or when the runtime is collected."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._loop_thread is None:
                self._loop_thread = _LoopThread()
                self._finalizer = weakref.finalize(self, self._loop_thread.stop)
            return self._loop_thread.loop

    def _mark_closed(self) -> Optional[_LoopThread]:
        """Marks the runtime closed; the private loop, for the caller to stop
        once the runs that may use it are over."""
        with self._lock:
            self._closed = True
            loop_thread, self._loop_thread = self._loop_thread, None
        if self._finalizer is not None:
            self._finalizer.detach()
        return loop_thread

    def check_bindings(self, bindings: Optional[Bindings]) -> None:
        """Raises :class:`pycage.InvalidBindingsError` if ``bindings`` would
        be refused by :meth:`run`, without running anything."""
        self._check_specs(_namespaces(bindings))

    def run(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        inputs: Paths = None,
        output_dir: Path = None,
        type_check: Optional[bool] = None,
        **limits: Union[int, float, None],
    ) -> Result:
        """Runs ``code`` to settlement and returns its :class:`Result`.

        ``type_check``: check the program with ty first (``True``), or not
        (``False``); ``None`` follows the runtime's ``type_check``. A program
        with type errors returns a ``type-error`` result listing them, and
        nothing of it ran.

        ``limits`` override this runtime's budgets for this run only:
        ``wall_seconds``, ``cpu_seconds``, ``address_space_bytes`` (checked
        like the runtime's; a pre-forked process gets the run's own).

        ``inputs``: host files or directories the program reads; each
        appears read-only in its working directory under its base name.
        ``output_dir``: where what the program leaves in ``out/`` is copied
        when the run settles (created if missing; at most
        ``max_output_bytes``; symlinks and special files never copied); the
        result's ``files`` and ``skipped_files`` say what was.

        The calling thread waits with the GIL released. Sync bindings run on
        a thread pool, async ones on a private event loop; both see a copy of
        the caller's ``contextvars``. ``on_log(line)``, ``on_call(event)``
        and ``on_display(display)`` (a :class:`pycage.Display`, as the
        program shows it) are called on this thread while the run is in
        flight; an exception from one of them (or Ctrl-C on the main
        thread) aborts the run and is raised once its process is gone.

        Raises only for misuse: :class:`pycage.InvalidBindingsError`,
        :class:`pycage.RuntimeClosedError`, ``TypeError``. Every outcome of
        the program itself, its crash included, is a :class:`Result`.
        """
        if (
            bindings is None
            and not limits
            and inputs is None
            and output_dir is None
            and on_log is None
            and on_call is None
            and on_display is None
            and type_check is None
            and type(code) is str
        ):
            return self._run_plain(code)
        request = _RunRequest.of(
            f"{self._label}.run", code, bindings, on_log, on_call, on_display, inputs, output_dir, limits, type_check
        )
        return self._run(request)

    async def arun(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        inputs: Paths = None,
        output_dir: Path = None,
        type_check: Optional[bool] = None,
        **limits: Union[int, float, None],
    ) -> Result:
        """Runs ``code`` without blocking the event loop (``inputs``,
        ``output_dir``, ``type_check`` and ``limits`` as for :meth:`run`).

        Async bindings run as tasks on the running loop, in a copy of the
        caller's ``contextvars`` context; sync bindings run on a thread pool.
        ``on_log``, ``on_call`` and ``on_display`` are called on the loop.
        Cancelling the awaiting task aborts the run (its process is killed
        and reaped, its binding tasks cancelled) and raises
        ``CancelledError`` as usual.
        """
        request = _RunRequest.of(
            f"{self._label}.arun", code, bindings, on_log, on_call, on_display, inputs, output_dir, limits, type_check
        )
        return await self._arun(request, asyncio.get_running_loop())

    def session(
        self,
        bindings: Optional[Bindings] = None,
        *,
        key: Optional[str] = None,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        address_space_bytes: Optional[int] = None,
    ) -> _S:
        """Opens a session: one process whose ``__main__`` globals live
        across its runs (a notebook kernel), with ``bindings`` for its whole
        life. It ends after ``idle_timeout_seconds`` without a run, at
        ``max_lifetime_seconds``, when a run ends without finishing
        (timeout, abort, a crash), or when closed; ``address_space_bytes``
        is its process's ``RLIMIT_AS`` (default: the runtime's). ``key``
        names it (the session's :attr:`key`; a random one by default): a
        :class:`pycage.ray.RayRuntime` puts the sessions of one key on one
        node."""
        options = _session_options(
            f"{self._label}.session", key, idle_timeout_seconds, max_lifetime_seconds, address_space_bytes
        )
        return self._open_session(_namespaces(bindings), options)

    # -- durable runs (docs/durable.md)

    def _resume_request(
        self,
        owner: str,
        journal: Any,
        reply: Any,
        error: Optional[str],
        bindings: Optional[Bindings],
        program: Optional[str],
        on_log: OnLog,
        on_call: OnCall,
        on_display: OnDisplay,
        inputs: Paths,
        output_dir: Path,
    ) -> _RunRequest:
        spec = _durable.resume_spec(journal, reply, error, owner)
        request = _RunRequest.of(
            owner, "" if program is None else program, bindings, on_log, on_call, on_display, inputs, output_dir, {}
        )
        request.resume = spec
        return request

    def resume(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        program: Optional[str] = None,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        inputs: Paths = None,
        output_dir: Path = None,
    ) -> Result:
        """Resumes a suspended run from its ``journal`` (``Result.suspended``,
        or its ``.journal`` bytes), in a fresh process: every call the
        journal records is answered from it, the pending call returns
        ``reply`` or raises the namespace's error class with ``error``, and
        the run goes on live; it may suspend again. ``bindings`` must be the
        ones the run had (names, error classes, docs); ``program``, when
        given, must be the journal's. The budgets are the journal's, minus
        what the run spent before. A journal that is refused (altered,
        another key, a session's) raises :class:`pycage.JournalError` before
        anything runs; a program that takes another path settles as
        ``"diverged"``. On a :class:`pycage.ray.RayRuntime` it resumes on any
        node (every node has the driver's key); the bindings stay here."""
        request = self._resume_request(
            f"{self._label}.resume",
            journal,
            reply,
            error,
            bindings,
            program,
            on_log,
            on_call,
            on_display,
            inputs,
            output_dir,
        )
        return self._run(request)

    async def aresume(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        program: Optional[str] = None,
        on_log: OnLog = None,
        on_call: OnCall = None,
        on_display: OnDisplay = None,
        inputs: Paths = None,
        output_dir: Path = None,
    ) -> Result:
        """:meth:`resume` without blocking the event loop (as :meth:`arun`)."""
        request = self._resume_request(
            f"{self._label}.aresume",
            journal,
            reply,
            error,
            bindings,
            program,
            on_log,
            on_call,
            on_display,
            inputs,
            output_dir,
        )
        return await self._arun(request, asyncio.get_running_loop())

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Waits until nothing runs or is pending: no run in flight
        (sessions' included), every finished run's process reaped and its
        directory removed, and the pool of ready processes full. For tests
        and benchmarks that must start from a known state instead of
        sleeping. ``False`` if that did not happen within ``timeout``
        seconds; ``True`` at once once the runtime is closed."""
        seconds = _check_seconds("timeout", timeout, f"{self._label}.wait_idle")
        if self._closed:
            return True
        return bool(self._wait_idle(float(seconds or 0.0)))

    async def await_idle(self, timeout: float = 30.0) -> bool:
        """:meth:`wait_idle` without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, self.wait_idle, timeout)

    def close(self) -> None:
        """Aborts every run in flight (they return ``abort``) and returns once
        each child process has exited and been reaped. Idempotent."""
        raise NotImplementedError

    # -- the transport's hooks

    def _run_plain(self, code: str) -> Result:
        """A run without bindings, callbacks, files or limits."""
        return self._run(
            _RunRequest.of(f"{self._label}.run", code, None, None, None, None, None, None, {}),
        )

    def _run(self, request: _RunRequest) -> Result:
        raise NotImplementedError

    async def _arun(self, request: _RunRequest, loop: asyncio.AbstractEventLoop) -> Result:
        raise NotImplementedError

    def _open_session(self, specs: list[NamespaceSpec], options: dict[str, Any]) -> _S:
        raise NotImplementedError

    def _check_specs(self, specs: list[NamespaceSpec]) -> None:
        raise NotImplementedError

    def _wait_idle(self, seconds: float) -> bool:
        raise NotImplementedError
