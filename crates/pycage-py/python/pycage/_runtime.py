"""The public API: :class:`Runtime`, :class:`Result`, bindings and events.

This module checks what the caller passes (every error names the argument
and what was given), turns bindings into the native module's namespace
specs, and glues runs to threads and asyncio. The native half
(``pycage._native``) runs the program, calls the bindings and converts
values exactly.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, TypeVar, Union

from . import _budgets, _native, _signature
from ._display import Display, OutputFile, SkippedFile
from .errors import ConfigError, InvalidBindingsError, RunError, RuntimeClosedError, SessionBusyError

__all__ = [
    "Runtime",
    "Result",
    "Display",
    "OutputFile",
    "SkippedFile",
    "Failure",
    "FailureKind",
    "Namespace",
    "ErrorClass",
    "CallStarted",
    "CallFinished",
    "Bindings",
    "Session",
]

FailureKind = Literal[
    "exception", "timeout", "abort", "worker-exit", "invalid-output", "output-limit", "dependencies", "type-error"
]


@dataclass(frozen=True)
class Failure:
    """Why a run failed: ``kind`` (see :data:`FailureKind`) and ``message``
    (for ``exception``, the program's traceback)."""

    kind: FailureKind
    message: str


@dataclass(frozen=True)
class Result:
    """Every outcome of a run.

    ``value`` is the program's value as plain Python objects (exact ``int``
    of any size, ``float`` with ``-0.0`` kept, ``str``, ``bool``, ``None``,
    ``list``, ``dict``), or ``None`` when it has none; ``has_value`` tells a
    returned ``None`` from no value. ``logs`` holds the output lines
    (``print``, ``sys.stdout``/``sys.stderr``, raw fd 1/2) without their
    newlines. ``error`` is set when the run failed, and then ``value`` is
    ``None``. ``dropped_frames`` counts protocol frames from the child that
    failed validation (diagnostics; 0 for an honest program).

    ``displays`` holds the run's rich output in order (``display(obj)``,
    matplotlib figures), each a :class:`pycage.Display` that Jupyter
    renders. With an ``output_dir``, ``files`` lists what was copied there
    from the program's ``out/`` and ``skipped_files`` what was not.

    ``diagnostics`` holds the type check's warnings when the run was
    checked (``type_check``), each ty's line with the source line under it;
    its errors fail the run as ``type-error`` instead.
    """

    value: Any = None
    logs: list[str] = field(default_factory=list)
    error: Optional[Failure] = None
    has_value: bool = False
    dropped_frames: int = 0
    displays: list[Display] = field(default_factory=list)
    files: list[OutputFile] = field(default_factory=list)
    skipped_files: list[SkippedFile] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or :class:`pycage.RunError` if the run failed."""
        if self.error is not None:
            raise RunError(self.error.kind, self.error.message, list(self.logs))
        return self.value


@dataclass(frozen=True)
class ErrorClass:
    """The exception class a namespace's rejected calls raise in the program.

    The program sees a global class ``name`` (an ``Exception`` subclass);
    the exception's ``member_name_property`` attribute (``tool``, as in
    bindings files and the CLI) holds the name of the member whose call
    failed.
    """

    name: str
    member_name_property: str = "tool"


class Namespace:
    """One global object of the program (e.g. ``tools``) and its members.

    ``functions`` is a mapping of member name to callable, or any object
    whose public (not ``_``-prefixed) callable attributes become the
    members. ``error_class`` is an :class:`ErrorClass`, a class name (its
    member attribute is ``tool``), or ``None`` (rejected calls raise
    ``RuntimeError``).
    """

    __slots__ = ("functions", "error_class", "_help")

    def __init__(
        self,
        functions: Union[Mapping[str, Callable[..., Any]], object],
        *,
        error_class: Union[ErrorClass, str, None] = None,
    ) -> None:
        if isinstance(error_class, str):
            error_class = ErrorClass(error_class)
        elif error_class is not None and not isinstance(error_class, ErrorClass):
            raise InvalidBindingsError(
                f"error_class must be a str, a pycage.ErrorClass or None, got {_describe(error_class)}"
            )
        self.functions: Union[Mapping[str, Callable[..., Any]], object] = functions
        self.error_class: Optional[ErrorClass] = error_class
        # Member name -> what `help()` shows in a run, when the creator knows
        # better than the callable (python_tools: a tool's description).
        self._help: Optional[dict[str, str]] = None

    def __repr__(self) -> str:
        return f"Namespace({self.functions!r}, error_class={self.error_class!r})"


Bindings = Mapping[str, Union[Mapping[str, Callable[..., Any]], Namespace, object]]
"""``{global_name: {member_name: callable}}``; a value may also be a
:class:`Namespace` or an object whose public callables are the members."""


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


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _is_async(func: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    if inspect.isroutine(func) or inspect.isclass(func):
        return False
    call = getattr(type(func), "__call__", None)  # noqa: B004 - the class's __call__, not callability
    return call is not None and inspect.iscoroutinefunction(call)


def _members(where: str, functions: object) -> dict[str, Callable[..., Any]]:
    if isinstance(functions, Mapping):
        members = {}
        for name, func in functions.items():
            if not isinstance(name, str):
                raise InvalidBindingsError(f"{where}: member names must be str, got {_describe(name)}")
            if not callable(func):
                raise InvalidBindingsError(f"{where}[{name!r}] is not callable: got {_describe(func)}")
            members[name] = func
        return members
    if callable(functions) and (inspect.isroutine(functions) or isinstance(functions, type)):
        raise InvalidBindingsError(
            f"{where} is a function ({_describe(functions)}); bindings map a namespace global to its "
            "functions, e.g. {'tools': {'search': search}}"
        )
    members = {}
    for name in dir(functions):
        if name.startswith("_"):
            continue
        try:
            func = getattr(functions, name)
        except AttributeError:
            continue
        if callable(func) and not isinstance(func, type):
            members[name] = func
    return members


NamespaceSpec = tuple[str, list[tuple[str, Callable[..., Any], bool, str]], Optional[tuple[str, str]], str]
"""``(global, [(name, callable, is_async, help text)], error_class, namespace help text)``."""


def _namespaces(bindings: Optional[Bindings]) -> list[NamespaceSpec]:
    """The native module's namespace specs, with every shape error named."""
    if bindings is None:
        return []
    if not isinstance(bindings, Mapping):
        raise InvalidBindingsError(
            "bindings must be a dict of namespace global -> functions, e.g. "
            f"{{'tools': {{'search': search}}}}; got {_describe(bindings)}"
        )
    specs: list[NamespaceSpec] = []
    for glob, ns in bindings.items():
        if not isinstance(glob, str):
            raise InvalidBindingsError(f"bindings: namespace globals must be str, got {_describe(glob)}")
        where = f"bindings[{glob!r}]"
        error_class = None
        known: Mapping[str, str] = {}
        if isinstance(ns, Namespace):
            functions = ns.functions
            if ns.error_class is not None:
                error_class = (ns.error_class.name, ns.error_class.member_name_property)
            known = ns._help or {}
        else:
            functions = ns
        members = _members(where, functions)
        entries = [
            (name, f, _is_async(f), known.get(name) or _signature.member_help(glob, name, f))
            for name, f in members.items()
        ]
        specs.append((glob, entries, error_class, _signature.namespace_help(glob, len(entries), error_class)))
    return specs


def _message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:
        text = ""
    return text or type(exc).__qualname__


async def _awaiting(awaitable: Any) -> Any:
    return await awaitable


async def _guarded(awaitable: Any, reply: Any) -> None:
    # Every outcome settles the reply here: a BaseException such as
    # SystemExit would otherwise escape the task into the caller's loop.
    try:
        value = await awaitable
    except asyncio.CancelledError:
        reply.reject("the call was cancelled")
        raise
    except BaseException as e:  # noqa: BLE001 - a binding's failure is the program's to see
        reply.reject(_message(e))
        return
    reply.resolve(value)


def _start(func: Callable[..., Any], args: tuple, kwargs: Optional[dict], reply: Any) -> None:
    """Runs on the event loop, in the run's context: starts one async call."""
    try:
        result = func(*args, **kwargs) if kwargs else func(*args)
    except BaseException as e:  # noqa: BLE001
        reply.reject(_message(e))
        return
    if not inspect.isawaitable(result):
        reply.resolve(result)
        return
    reply.task = asyncio.ensure_future(_guarded(result, reply))


def _cancel(reply: Any) -> None:
    task = reply.task
    if task is not None:
        task.cancel()


class _Site:
    """The run's side of the binding bridge (called by ``pycage._native``)."""

    __slots__ = ("_loop", "_context")

    def __init__(self, loop: Callable[[], asyncio.AbstractEventLoop], context: contextvars.Context) -> None:
        self._loop = loop
        self._context = context

    def call_sync(self, func: Callable[..., Any], args: tuple, kwargs: Optional[dict]) -> Any:
        """On a worker thread: the call, in a copy of the caller's context."""
        ctx = self._context.copy()
        result = ctx.run(func, *args, **kwargs) if kwargs else ctx.run(func, *args)
        if inspect.isawaitable(result):
            result = asyncio.run_coroutine_threadsafe(_awaiting(result), self._loop()).result()
        return result

    def call_async(self, func: Callable[..., Any], args: tuple, kwargs: Optional[dict], reply: Any) -> None:
        self._loop().call_soon_threadsafe(_start, func, args, kwargs, reply, context=self._context)

    def cancel(self, reply: Any) -> None:
        try:
            self._loop().call_soon_threadsafe(_cancel, reply)
        except RuntimeError:
            pass  # the loop is closed: nothing runs on it any more


class _SessionSite(_Site):
    """A session's bindings live as long as the session, and its runs may
    come from different threads and loops: the site is pointed at each run's
    loop and context while that run holds the session's lock."""

    __slots__ = ()

    def point(self, loop: Callable[[], asyncio.AbstractEventLoop], context: contextvars.Context) -> None:
        self._loop = loop
        self._context = context


class _Events:
    """Turns the native event batches into ``on_log`` / ``on_call`` /
    ``on_display`` calls."""

    __slots__ = ("on_log", "on_call", "on_display", "names", "error", "handle")

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
        self.error: Optional[BaseException] = None
        self.handle: Any = None

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


_object_new = object.__new__

# Whether a blocking run polls for signals (only the main thread gets
# them): by thread id, which touches fewer objects than
# ``threading.current_thread()`` (see _result). The thread that forks is
# the child's main thread.
_get_ident = _thread.get_ident
_main_ident = [threading.main_thread().ident]
os.register_at_fork(after_in_child=lambda: _main_ident.__setitem__(0, _get_ident()))


def _display(data: list[tuple[str, str]], metadata: dict[str, Any]) -> Display:
    return Display(dict(data), metadata)


def _check_flag(name: str, value: Any, optional: bool = False) -> Any:
    """``value`` if it is a bool (or ``None`` when ``optional``)."""
    if isinstance(value, bool) or (optional and value is None):
        return value
    raise TypeError(f"pycage: {name} must be {'True, False or None' if optional else 'a bool'}, got {_describe(value)}")


def _result(parts: tuple) -> Result:
    has_value, value, logs, kind, message, dropped, displays, output, diagnostics = parts
    if kind is None and not displays and output is None and not diagnostics:
        # The common outcome, made with the fewest Python objects touched:
        # while a sandbox shell (a fork of this process that never execs)
        # shares this process's pages, each page written costs a fault.
        result = _object_new(Result)
        result.__dict__.update(
            value=value,
            logs=logs,
            error=None,
            has_value=has_value,
            dropped_frames=dropped,
            displays=[],
            files=[],
            skipped_files=[],
            diagnostics=[],
        )
        return result
    error = Failure(kind, message) if kind is not None else None
    files: list[OutputFile] = []
    skipped: list[SkippedFile] = []
    if output is not None:
        copied, not_copied, _, _ = output
        files = [OutputFile(path, size) for path, size in copied]
        skipped = [SkippedFile(path, reason, kind) for path, reason, kind in not_copied]
    return Result(
        value=value,
        logs=logs,
        error=error,
        has_value=has_value,
        dropped_frames=dropped,
        displays=[_display(data, metadata) for data, metadata in displays],
        files=files,
        skipped_files=skipped,
        diagnostics=diagnostics,
    )


def _run_files(inputs: Any, output_dir: Any, owner: str) -> tuple[Optional[list[str]], Optional[str]]:
    """``inputs`` and ``output_dir`` of a run, checked: paths."""
    paths = None
    if inputs is not None:
        if isinstance(inputs, (str, bytes, os.PathLike)) or not isinstance(inputs, Iterable):
            raise TypeError(f"{owner}: inputs must be a list of paths, got {_describe(inputs)}")
        paths = []
        for p in inputs:
            try:
                paths.append(os.fspath(p))
            except TypeError:
                raise TypeError(
                    f"{owner}: inputs items must be paths (str or os.PathLike), got {_describe(p)}"
                ) from None
    out = None
    if output_dir is not None:
        try:
            out = os.fspath(output_dir)
        except TypeError:
            raise TypeError(
                f"{owner}: output_dir must be a path (str or os.PathLike), got {_describe(output_dir)}"
            ) from None
    return paths, out


class _LoopThread:
    """A private event loop for async bindings of synchronous runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="pycage-bindings-loop", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if threading.current_thread() is self.thread:
            self.loop.call_soon(self.loop.stop)
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - best effort: the loop is going away
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


def _check_int(
    name: str, value: Optional[int], minimum: int, owner: str = "pycage.Runtime", *, why: str = ""
) -> Optional[int]:
    """``value`` when it is an int from ``minimum`` to 2**64 - 1; the
    message states that bound (and ``why``, after a colon)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {_describe(value)}")
    if value < minimum:
        reason = f": {why}" if why else ""
        raise ConfigError(f"invalid {owner} argument: {name} must be at least {minimum}{reason}, got {value}")
    if value >= 1 << 64:
        raise ConfigError(f"invalid {owner} argument: {name} must be below 2**64, got {value}")
    return value


def _check_at_most(name: str, value: Optional[int], maximum: int, owner: str = "pycage.Runtime") -> Optional[int]:
    if value is not None and value > maximum:
        raise ConfigError(f"invalid {owner} argument: {name} must be at most {maximum}, got {value}")
    return value


def _check_seconds(
    name: str,
    value: Optional[float],
    owner: str = "pycage.Runtime",
    *,
    positive: bool = False,
    maximum: Optional[float] = None,
) -> Optional[float]:
    """``value`` as float seconds when it is finite, ``> 0`` if ``positive``
    (else ``>= 0``) and at most ``maximum``; the message states the bound."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number of seconds, got {_describe(value)}")
    value = float(value)
    low_ok = value > 0 if positive else value >= 0
    if not (low_ok and value < float("inf")) or (maximum is not None and value > maximum):
        bound = "greater than 0" if positive else ">= 0"
        if maximum is not None:
            bound = f"{bound} and at most {maximum:g}"
        raise ConfigError(f"invalid {owner} argument: {name} must be a finite number {bound}, got {value}")
    return value


#: The smallest ``RLIMIT_AS`` a run may have: CPython cannot start in less.
_MIN_ADDRESS_SPACE = _native.MIN_ADDRESS_SPACE_BYTES
_ADDRESS_SPACE_WHY = f"{_MIN_ADDRESS_SPACE >> 20} MiB; CPython cannot start in less"

_UNIT_SUFFIX = {"bytes": " bytes", "MiB": " MiB", "ms": " ms", "s": " s", "count": ""}


def _budget_bound(keyword: str) -> str:
    """The bound of a budget keyword, in the keyword's unit (from the
    budgets table): "must be at least 1 s", "must be between 1 and 65536"."""
    _field, unit, _field_unit, kw_scale, field_scale, low, high, _default, _per_run = _budgets.BUDGETS[keyword]

    def shown(x: float) -> str:
        return f"{x:g}" if kw_scale > field_scale else str(int(x))

    low_kw = low * field_scale / kw_scale
    suffix = _UNIT_SUFFIX[unit]
    if high is None:
        return f"must be at least {shown(low_kw)}{suffix}" if low else "must be >= 0"
    high_kw = high * field_scale / kw_scale
    if not low:
        return f"must be at most {shown(high_kw)}{suffix}"
    return f"must be between {shown(low_kw)} and {shown(high_kw)}{suffix}"


def _check_budget(keyword: str, value: Any, owner: str = "pycage.Runtime") -> int:
    """A budget keyword's value in its config field's unit, checked against
    the budgets table (the message states the bound in the keyword's unit)."""
    _field, unit, _field_unit, kw_scale, field_scale, low, high, _default, _per_run = _budgets.BUDGETS[keyword]
    if kw_scale > field_scale:  # seconds into milliseconds: fractions count
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{owner}: {keyword} must be a number of seconds, got {_describe(value)}")
        if not value == value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"invalid {owner} argument: {keyword} {_budget_bound(keyword)}, got {value}")
        converted = round(value * kw_scale / field_scale)
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{owner}: {keyword} must be an int, got {_describe(value)}")
        converted = value * kw_scale // field_scale
    if converted < low or (high is not None and converted > high) or converted >= 1 << 64:
        raise ConfigError(f"invalid {owner} argument: {keyword} {_budget_bound(keyword)}, got {value}")
    return converted


def _budget_fields(given: dict[str, Any], owner: str, *, per_run: bool = False) -> dict[str, int]:
    """``{config field: value}`` for budget keywords (``None`` keeps the
    default); a keyword that is not a budget (of one run, with ``per_run``)
    is a ``TypeError`` listing the ones there are."""
    fields = {}
    for keyword, value in given.items():
        entry = _budgets.BUDGETS.get(keyword)
        if entry is None or (per_run and not entry[8]):
            known = sorted(k for k, e in _budgets.BUDGETS.items() if e[8] or not per_run)
            raise TypeError(f"{owner}() got an unexpected keyword argument {keyword!r}; budgets: {', '.join(known)}")
        if value is not None:
            fields[entry[0]] = _check_budget(keyword, value, owner)
    return fields


def _strings(name: str, value: Any, what: str) -> list[str]:
    """A list of strings from an iterable of them (a lone string is refused:
    it would iterate as characters)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"pycage.Runtime: {name} must be a list of {what}, got {_describe(value)}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"pycage.Runtime: {name} items must be {what}, got {_describe(item)}")
    return items


def _check_path(name: str, value: Any) -> str:
    try:
        return os.fspath(value)
    except TypeError:
        raise TypeError(f"pycage.Runtime: {name} must be a path (str or os.PathLike), got {_describe(value)}") from None


def _check_code(code: Any) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str holding a Python program, got {_describe(code)}")
    return code


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


class Runtime(_Closeable):
    """Runs Python programs in fresh CPython processes, with host bindings.

    Each run is a new ``python3 -I`` process: sandboxed by default
    (``isolation="sandbox"``: Linux namespaces, a private root, Landlock,
    seccomp, run-wide budgets; for any user, through unprivileged user
    namespaces), or
    ``isolation="process"`` (rlimits, a process group, a scrubbed
    environment and a private directory; contains accidents, not attacks).

    Budgets are keyword arguments (``None`` keeps the default), one per row
    of pycage's budgets table (``pycage._budgets.BUDGETS``; the table with
    defaults and bounds is in the docs): ``wall_seconds`` (60),
    ``cpu_seconds`` (30), ``address_space_bytes`` (512 MiB: the memory the
    run's processes hold together), ``max_log_bytes`` (64 KiB),
    ``max_value_bytes`` (1 MiB), ``max_calls_in_flight`` (256),
    ``max_unread_reply_bytes`` (16 MiB), ``max_buffered_events`` (1,024),
    ``max_line_bytes``, ``max_control_bytes``, ``grace_seconds``; sandboxed
    runs also ``max_processes`` (256 processes and threads),
    ``max_file_bytes``, ``max_open_files``, ``disk_bytes``; and
    ``max_output_bytes``, ``max_net_bytes``, ``max_net_connections``,
    ``pool_size``, ``max_concurrent_runs``, ``zygote_max_runs``,
    ``zygote_max_age_seconds``. Each states its bound when refused.
    Sandboxed runs see ``allow_read`` paths read-only.
    ``allow_net`` (sandbox only; default none: no network) lists the
    ``"HOST[:PORT]"`` pairs (port 443 when omitted) a run may reach through
    pycage's HTTP proxy on the host (``HTTPS_PROXY`` in its environment),
    within ``max_net_bytes`` (64 MiB) and ``max_net_connections`` (64).
    ``python`` is the interpreter for runs (default: ``python3`` on
    ``PATH``; a virtual environment's ``bin/python`` means that
    environment); it is probed once, here, and the answer is kept in
    ``cache_dir`` (default: ``$XDG_CACHE_HOME/pycage`` or
    ``~/.cache/pycage``; ``False`` probes every time).

    Your environment: ``venv`` runs programs in a virtual environment (its
    interpreter and packages, read-only in the sandbox; not with
    ``python``). ``preload`` lists modules imported before each program, by
    the zygote before it forks, so runs start with them at fork cost (BLAS
    and OpenMP pools start with one thread; a module that fails to import
    raises :class:`ConfigError` here, naming it). ``with_packages`` lists
    requirements (``"tabulate"``, ``"rich>=13"``) installed for every run,
    with what a program declares in a PEP 723 ``# /// script`` block; the
    host installs them (uv, else pip; wheels only: no package's code runs on
    the host) into a cache under ``cache_dir`` before the program starts,
    and runs never get network. A program's own declarations are refused
    (``"dependencies"``) unless the caller allows them: ``allow_packages``
    lists the names programs may declare (what they bring must be allowed
    too), ``allow_any_package=True`` allows any.

    Processes: ``spawn="zygote"`` (the default) forks each run's process
    from a warm fork server, with ``pool_size`` (4) children forked ahead of
    demand, the zygote replaced after ``zygote_max_runs`` (1000) runs or
    ``zygote_max_age_seconds`` (300); ``spawn="exec"`` starts a new
    interpreter per run. At most ``max_concurrent_runs`` (64) run at once;
    more wait in FIFO order, their wall clock starting when they leave the
    queue.

    Thread-safe: any number of threads may call :meth:`run` at once, and
    runs from :meth:`arun` may overlap freely. Use it as a context manager,
    or call :meth:`close`, to abort what is in flight and reap every child.
    """

    def __init__(
        self,
        *,
        isolation: Literal["sandbox", "process"] = "sandbox",
        python: Union[str, os.PathLike[str], None] = None,
        allow_read: Iterable[Union[str, os.PathLike[str]]] = (),
        run_dir_parent: Union[str, os.PathLike[str], None] = None,
        spawn: Literal["zygote", "exec"] = "zygote",
        cache_dir: Union[str, os.PathLike[str], None, Literal[False]] = None,
        allow_net: Iterable[str] = (),
        venv: Union[str, os.PathLike[str], None] = None,
        preload: Iterable[str] = (),
        with_packages: Iterable[str] = (),
        allow_packages: Iterable[str] = (),
        allow_any_package: bool = False,
        type_check: bool = False,
        ty: Union[str, os.PathLike[str], None] = None,
        **budgets: Union[int, float, None],
    ) -> None:
        if spawn not in ("zygote", "exec"):
            raise ConfigError(f'invalid pycage.Runtime argument: spawn must be "zygote" or "exec", got {spawn!r}')
        if isolation not in ("sandbox", "process"):
            raise ConfigError(
                f'invalid pycage.Runtime argument: isolation must be "sandbox" or "process", got {isolation!r}'
            )
        if isinstance(allow_read, (str, bytes, os.PathLike)):
            raise TypeError(f"pycage.Runtime: allow_read must be a list of paths, got {_describe(allow_read)}")
        if isinstance(allow_net, (str, bytes)):
            raise TypeError(
                f"pycage.Runtime: allow_net must be a list of 'HOST[:PORT]' strings, got {_describe(allow_net)}"
            )
        net_rules = list(allow_net)
        for rule in net_rules:
            if not isinstance(rule, str):
                raise TypeError(f"pycage.Runtime: allow_net items must be 'HOST[:PORT]' strings, got {_describe(rule)}")
        if python is not None and venv is not None:
            raise ConfigError(
                "invalid pycage.Runtime argument: venv cannot be given together with python "
                "(a venv's interpreter is its bin/python)"
            )
        preload_list = _strings("preload", preload, "module names")
        with_list = _strings("with_packages", with_packages, "requirement strings")
        allow_list = _strings("allow_packages", allow_packages or (), "package names")
        if not isinstance(allow_any_package, bool):
            raise TypeError(f"pycage.Runtime: allow_any_package must be a bool, got {_describe(allow_any_package)}")
        if allow_any_package and allow_list:
            raise ConfigError(
                "invalid pycage.Runtime argument: allow_packages cannot be given together with allow_any_package, "
                "which allows every name"
            )
        # Budgets (the budgets table, generated into pycage._budgets): each
        # checked here in its keyword's unit, handed over in its field's.
        # (max_control_bytes must also be at least max_line_bytes: the
        # native side checks that pair.)
        fields = _budget_fields(budgets, "pycage.Runtime")
        self._native = _native.NativeRuntime(
            python=None if python is None else _check_path("python", python),
            isolation=isolation,
            allow_read=[_check_path("allow_read item", p) for p in allow_read],
            run_dir_parent=None if run_dir_parent is None else _check_path("run_dir_parent", run_dir_parent),
            spawn=spawn,
            cache_dir=None if cache_dir is None or cache_dir is False else _check_path("cache_dir", cache_dir),
            probe_cache=cache_dir is not False,
            allow_net=net_rules,
            budgets=fields,
            venv=None if venv is None else _check_path("venv", venv),
            preload=preload_list,
            with_packages=with_list,
            allow_packages=allow_list,
            allow_any_package=allow_any_package,
            type_check=_check_flag("type_check", type_check),
            ty=None if ty is None else _check_path("ty", ty),
        )
        self._lock = threading.Lock()
        self._loop_thread: Optional[_LoopThread] = None
        self._closed = False
        self._finalizer: Optional[weakref.finalize] = None

    @property
    def config(self) -> dict[str, Any]:
        """The effective configuration (the interpreter resolved to its real
        executable), as keyword arguments of this class."""
        return self._native.config()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        c = self.config
        state = " closed" if self._closed else ""
        return f"<pycage.Runtime isolation={c['isolation']!r} python={c['python']!r}{state}>"

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeClosedError("the runtime is closed; create a new pycage.Runtime to run more programs")
            if self._loop_thread is None:
                self._loop_thread = _LoopThread()
                self._finalizer = weakref.finalize(self, self._loop_thread.stop)
            return self._loop_thread.loop

    def check_bindings(self, bindings: Optional[Bindings]) -> None:
        """Raises :class:`pycage.InvalidBindingsError` if ``bindings`` would
        be refused by :meth:`run`, without running anything."""
        self._native.check(_namespaces(bindings), _Site(self._private_loop, contextvars.copy_context()))

    def run(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
        on_display: Optional[Callable[[Display], Any]] = None,
        inputs: Optional[Iterable[Union[str, os.PathLike[str]]]] = None,
        output_dir: Union[str, os.PathLike[str], None] = None,
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
        flight; an exception
        from one of them (or Ctrl-C on the main thread) aborts the run and
        is raised once its process is gone.

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
            # A plain run: nothing to check or convert, and no site (it
            # serves bindings only); see _result for why fewer objects.
            main = _get_ident() == _main_ident[0]
            return _result(self._native.run(code, [], None, None, main))
        code = _check_code(code)
        fields = _budget_fields(limits, "pycage.Runtime.run", per_run=True)
        paths, out = _run_files(inputs, output_dir, "pycage.Runtime.run")
        specs = _namespaces(bindings)
        site = _Site(self._private_loop, contextvars.copy_context())
        events = _Events.of(on_log, on_call, on_display)
        main = _get_ident() == _main_ident[0]
        check = _check_flag("type_check", type_check, optional=True)
        return _result(self._native.run(code, specs, site, events, main, fields, paths, out, check))

    async def arun(
        self,
        code: str,
        bindings: Optional[Bindings] = None,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
        on_display: Optional[Callable[[Display], Any]] = None,
        inputs: Optional[Iterable[Union[str, os.PathLike[str]]]] = None,
        output_dir: Union[str, os.PathLike[str], None] = None,
        type_check: Optional[bool] = None,
        **limits: Union[int, float, None],
    ) -> Result:
        """Runs ``code`` without blocking the event loop (``inputs``,
        ``output_dir``, ``type_check`` and ``limits`` as for :meth:`run`).

        Async bindings run as tasks on the running loop, in a copy of the
        caller's ``contextvars`` context; sync bindings run on a thread pool.
        ``on_log``, ``on_call`` and ``on_display`` are called on the loop. Cancelling the
        awaiting task aborts the run (its process is killed and reaped, its
        binding tasks cancelled) and raises ``CancelledError`` as usual.
        """
        code = _check_code(code)
        fields = _budget_fields(limits, "pycage.Runtime.arun", per_run=True)
        paths, out = _run_files(inputs, output_dir, "pycage.Runtime.arun")
        specs = _namespaces(bindings)
        loop = asyncio.get_running_loop()
        site = _Site(lambda: loop, contextvars.copy_context())
        events = _Events.of(on_log, on_call, on_display)
        check = _check_flag("type_check", type_check, optional=True)
        return await _settled(
            loop,
            events,
            lambda settle, on_events: self._native.start(
                code, specs, site, loop, settle, on_events, fields, paths, out, check
            ),
        )

    def session(
        self,
        bindings: Optional[Bindings] = None,
        *,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        address_space_bytes: Optional[int] = None,
    ) -> Session:
        """Opens a :class:`Session`: one process whose ``__main__`` globals
        live across its runs (a notebook kernel), with ``bindings`` for its
        whole life. It ends after ``idle_timeout_seconds`` without a run, at
        ``max_lifetime_seconds``, when a run ends without finishing (timeout,
        abort, a crash), or when closed; ``address_space_bytes`` is its
        process's ``RLIMIT_AS`` (default: the runtime's)."""
        owner = "pycage.Runtime.session"
        _check_seconds("idle_timeout_seconds", idle_timeout_seconds, owner, positive=True)
        _check_seconds("max_lifetime_seconds", max_lifetime_seconds, owner, positive=True)
        site = _SessionSite(self._private_loop, contextvars.copy_context())
        native = self._native.session(
            _namespaces(bindings),
            site,
            idle_timeout_seconds=float(idle_timeout_seconds),
            max_lifetime_seconds=float(max_lifetime_seconds),
            address_space_bytes=_check_int(
                "address_space_bytes", address_space_bytes, _MIN_ADDRESS_SPACE, owner, why=_ADDRESS_SPACE_WHY
            ),
        )
        return Session(self, native, site)

    def close(self) -> None:
        """Aborts every run in flight (they return ``abort``) and returns once
        each child process has exited and been reaped. Idempotent."""
        with self._lock:
            self._closed = True
            loop_thread, self._loop_thread = self._loop_thread, None
        self._native.close()
        if loop_thread is not None:
            loop_thread.stop()


#: The sessions (their ``_Turns``) with a run in progress in this context.
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


class Session(_Closeable):
    """One process whose module globals live across runs, from
    :meth:`Runtime.session`.

    Each run has the runtime's wall-clock, CPU, log and value budgets of its
    own; runs of one session take turns. A run that ends without finishing
    (timeout, abort, its process dying) ends the session: that run returns
    its :class:`Result` as usual, and later runs raise
    :class:`pycage.SessionEndedError`. Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, runtime: Runtime, native: Any, site: _SessionSite) -> None:
        self._runtime = runtime
        self._native = native
        self._site = site
        self._turns = _Turns()

    @property
    def ended(self) -> Optional[str]:
        """Why the session ended, or ``None`` while it lives."""
        return self._native.ended

    def __repr__(self) -> str:
        state = f" ended: {self.ended}" if self.ended else ""
        return f"<pycage.Session{state}>"

    def run(
        self,
        code: str,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
        on_display: Optional[Callable[[Display], Any]] = None,
        type_check: Optional[bool] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like :meth:`Runtime.run`
        (figures left open are shown at the end of each run, as after a
        notebook cell). A type check sees the cells that ran before as one
        program with this one; a cell that fails it is not remembered."""
        code = _check_code(code)
        check = _check_flag("type_check", type_check, optional=True)
        events = _Events.of(on_log, on_call, on_display)
        thread = _get_ident()
        main = thread == _main_ident[0]
        turn = self._turns.take(thread)
        try:
            self._site.point(self._runtime._private_loop, contextvars.copy_context())
            return _result(self._native.run(code, events, main, check))
        finally:
            self._turns.give_back(turn)

    async def arun(
        self,
        code: str,
        *,
        on_log: Optional[Callable[[str], Any]] = None,
        on_call: Optional[Callable[[Union[CallStarted, CallFinished]], Any]] = None,
        on_display: Optional[Callable[[Display], Any]] = None,
        type_check: Optional[bool] = None,
    ) -> Result:
        """Runs ``code`` in the session's globals, like :meth:`Runtime.arun`
        (cancelling the task aborts the run, and so ends the session)."""
        code = _check_code(code)
        check = _check_flag("type_check", type_check, optional=True)
        loop = asyncio.get_running_loop()
        turn = await self._turns.atake(loop)
        try:
            self._site.point(lambda: loop, contextvars.copy_context())
            events = _Events.of(on_log, on_call, on_display)
            return await _settled(
                loop, events, lambda settle, on_events: self._native.start(code, loop, settle, on_events, check)
            )
        finally:
            self._turns.give_back(turn)

    def close(self) -> None:
        """Ends the session and returns once its process is reaped. Idempotent."""
        self._native.close()
