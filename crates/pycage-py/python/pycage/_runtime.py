"""The local runtime: :class:`Runtime`, the run API of ``pycage._api`` over
the native module (``pycage._native``), which runs each program in a
CPython child of this process, calls the bindings and converts values
exactly. This module checks the runtime's own arguments and hands each
checked run to the native runtime.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Iterable
from importlib import import_module
from typing import Any, Literal, Optional, Union

from . import _durable, _native
from ._api import (
    _get_ident,
    _main_ident,
    _RunRequest,
    _RuntimeApi,
    _session_options,
)
from ._bindings import Bindings, NamespaceSpec, _namespaces, _SessionSite, _Site
from ._checks import _budget_fields, _check_flag, _check_path, _describe, _strings
from ._events import _settled
from ._results import Result, _result
from ._session import Session
from .errors import ConfigError

__all__ = ["Runtime"]

# What this module held before it was split by concern, for code that
# imports it from here: name -> the module that holds it now.
_MOVED = {
    **dict.fromkeys(["Failure", "FailureKind", "Result", "_display", "_object_new", "_result"], "_results"),
    **dict.fromkeys(
        ["Bindings", "ErrorClass", "Namespace", "NamespaceSpec", "_LoopThread", "_SessionSite", "_Site"], "_bindings"
    ),
    **dict.fromkeys(
        ["_awaiting", "_cancel", "_guarded", "_is_async", "_members", "_message", "_namespaces"], "_bindings"
    ),
    **dict.fromkeys(["_start"], "_bindings"),
    **dict.fromkeys(["CallFinished", "CallStarted", "_Events", "_settled"], "_events"),
    **dict.fromkeys(["_run_files"], "_files"),
    **dict.fromkeys(["Display", "OutputFile", "SkippedFile"], "_display"),
    **dict.fromkeys(
        ["_ADDRESS_SPACE_WHY", "_MIN_ADDRESS_SPACE", "_UNIT_SUFFIX", "_budget_bound", "_check_at_most"], "_checks"
    ),
    **dict.fromkeys(["_check_budget", "_check_code", "_check_int", "_check_seconds", "_strings"], "_checks"),
    **dict.fromkeys(["_C", "_Closeable", "_Turns", "_session_runs"], "_api"),
    **dict.fromkeys(["_budgets", "_signature"], "."),
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(f"{__package__}.{name}" if home == "." else f"{__package__}.{home}")
    return module if home == "." else getattr(module, name)


class Runtime(_RuntimeApi[Session]):
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
    too), ``allow_any_package=True`` allows any. A package with no wheel
    for the platform fails unless ``allow_builds=True``: then the install
    runs pip in a sandbox of its own (the package index its only network),
    never on the host.

    Processes: ``spawn="zygote"`` (the default) forks each run's process
    from a warm fork server, with ``pool_size`` (4) children forked ahead of
    demand, the zygote replaced after ``zygote_max_runs`` (1000) runs or
    ``zygote_max_age_seconds`` (300); ``spawn="exec"`` starts a new
    interpreter per run. At most ``max_concurrent_runs`` (64) run at once;
    more wait in FIFO order, their wall clock starting when they leave the
    queue.

    Durable runs: with a ``journal_key`` (bytes or str of at least 16
    bytes; default ``PYCAGE_JOURNAL_KEY`` from the environment), a call to
    a binding marked with :func:`pycage.approval`, or one that raises
    :class:`pycage.Suspend`, suspends the run (or a session's cell): its
    result has ``suspended``, with a signed journal that :meth:`resume`
    (:meth:`resume_session` for a session's) takes, in this process or
    another (``docs/durable.md``).

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
        allow_builds: bool = False,
        type_check: bool = False,
        ty: Union[str, os.PathLike[str], None] = None,
        journal_key: Union[str, bytes, None] = None,
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
            allow_builds=_check_flag("allow_builds", allow_builds),
            type_check=_check_flag("type_check", type_check),
            ty=None if ty is None else _check_path("ty", ty),
            journal_key=_durable.journal_key(journal_key),
        )
        self._init_api()

    @property
    def config(self) -> dict[str, Any]:
        """The effective configuration (the interpreter resolved to its real
        executable), as keyword arguments of this class."""
        return self._native.config()

    def __repr__(self) -> str:
        c = self.config
        state = " closed" if self._closed else ""
        return f"<pycage.Runtime isolation={c['isolation']!r} python={c['python']!r}{state}>"

    def close(self) -> None:
        """Aborts every run in flight (they return ``abort``) and returns once
        each child process has exited and been reaped. Idempotent."""
        loop_thread = self._mark_closed()
        self._native.close()
        if loop_thread is not None:
            loop_thread.stop()

    # -- durable runs and sessions (docs/durable.md)

    def resume_session(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        key: Optional[str] = None,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        address_space_bytes: Optional[int] = None,
    ) -> tuple[Session, Result]:
        """Resumes a session whose cell suspended: opens a new session (the
        options as for :meth:`session`; ``bindings`` must be the ones the
        session had), replays the journal's earlier cells in it in order
        (their calls answered from the journal, their output not given
        again), then resumes the suspended cell, whose pending call returns
        ``reply`` or raises ``error``. Returns the new session, which goes
        on as any (its module globals rebuilt by the replay; open files and
        sockets are not), and the cell's :class:`Result`. A journal that is
        refused (altered, another key, a one-shot run's) raises
        :class:`pycage.JournalError` before anything runs; a replay that
        takes another path settles as ``"diverged"`` and ends the session."""
        owner = "pycage.Runtime.resume_session"
        spec = _durable.resume_spec(journal, reply, error, owner)
        options = _session_options(owner, key, idle_timeout_seconds, max_lifetime_seconds, address_space_bytes)
        site = _SessionSite(self._private_loop, contextvars.copy_context())
        native, parts = self._native.resume_session(
            _namespaces(bindings),
            site,
            spec,
            idle_timeout_seconds=options["idle_timeout_seconds"],
            max_lifetime_seconds=options["max_lifetime_seconds"],
            address_space_bytes=options["address_space_bytes"],
            poll_signals=_get_ident() == _main_ident[0],
        )
        return Session(self, native, site, options["key"]), _result(parts)

    async def aresume_session(
        self,
        journal: Union[bytes, _durable.Suspension],
        *,
        reply: Any = _durable._NO_REPLY,
        error: Optional[str] = None,
        bindings: Optional[Bindings] = None,
        key: Optional[str] = None,
        idle_timeout_seconds: float = 600.0,
        max_lifetime_seconds: float = 3600.0,
        address_space_bytes: Optional[int] = None,
    ) -> tuple[Session, Result]:
        """:meth:`resume_session` without blocking the event loop: it runs on
        a worker thread, and the cell's async bindings on the runtime's own
        loop (as for :meth:`resume_session`), in a copy of the caller's
        ``contextvars``."""
        call = functools.partial(
            self.resume_session,
            journal,
            reply=reply,
            error=error,
            bindings=bindings,
            key=key,
            idle_timeout_seconds=idle_timeout_seconds,
            max_lifetime_seconds=max_lifetime_seconds,
            address_space_bytes=address_space_bytes,
        )
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run, call)

    # -- the transport: the native runtime

    def _run_plain(self, code: str) -> Result:
        # Nothing to check or convert, and no site (it serves bindings
        # only); see _result for why fewer objects.
        return _result(self._native.run(code, [], None, None, _get_ident() == _main_ident[0]))

    def _run(self, request: _RunRequest) -> Result:
        site = _Site(self._private_loop, request.context)
        main = _get_ident() == _main_ident[0]
        return _result(
            self._native.run(
                request.code,
                request.specs,
                site,
                request.events,
                main,
                request.fields,
                request.inputs,
                request.output_dir,
                request.type_check,
                resume=request.resume,
            )
        )

    async def _arun(self, request: _RunRequest, loop: asyncio.AbstractEventLoop) -> Result:
        site = _Site(lambda: loop, request.context)
        r = request
        return await _settled(
            loop,
            r.events,
            lambda settle, on_events: self._native.start(
                r.code,
                r.specs,
                site,
                loop,
                settle,
                on_events,
                r.fields,
                r.inputs,
                r.output_dir,
                r.type_check,
                resume=r.resume,
            ),
        )

    def _open_session(self, specs: list[NamespaceSpec], options: dict[str, Any]) -> Session:
        site = _SessionSite(self._private_loop, contextvars.copy_context())
        native = self._native.session(
            specs,
            site,
            idle_timeout_seconds=options["idle_timeout_seconds"],
            max_lifetime_seconds=options["max_lifetime_seconds"],
            address_space_bytes=options["address_space_bytes"],
        )
        return Session(self, native, site, options["key"])

    def _check_specs(self, specs: list[NamespaceSpec]) -> None:
        self._native.check(specs, _Site(self._private_loop, contextvars.copy_context()))

    def _wait_idle(self, seconds: float) -> bool:
        return self._native.wait_idle(seconds)
