"""Bindings: what the caller passes (:class:`Namespace`,
:class:`ErrorClass`, plain mappings and objects), turned into the native
module's namespace specs with every shape error named; and the bridge
that calls them (:class:`_Site`: sync ones on a worker thread, async ones
on an event loop, both in a copy of the caller's ``contextvars``), with
the private loop of blocking runs (:class:`_LoopThread`)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _signature
from ._checks import _describe
from .errors import InvalidBindingsError


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
        reply.fail(e)  # its message, or a suspension (pycage.Suspend)
        return
    reply.resolve(value)


def _start(func: Callable[..., Any], args: tuple, kwargs: Optional[dict], reply: Any) -> None:
    """Runs on the event loop, in the run's context: starts one async call."""
    try:
        result = func(*args, **kwargs) if kwargs else func(*args)
    except BaseException as e:  # noqa: BLE001
        reply.fail(e)
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
