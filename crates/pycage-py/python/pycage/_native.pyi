"""Type stubs of the compiled module (crates/pycage-py/src). Internal: use
``pycage.Runtime``; ``to_json`` and ``from_json`` are re-exported by ``pycage``."""

import asyncio
from collections.abc import Callable
from typing import Any, Optional

NamespaceSpec = tuple[str, list[tuple[str, Callable[..., Any], bool, str]], Optional[tuple[str, str]], str]
DisplayParts = tuple[list[tuple[str, str]], dict[str, Any]]
OutputParts = tuple[list[tuple[str, int]], list[tuple[str, str, str]], int, bool]
# (global, name, args, reason, journal) of a suspended run's pending call.
SuspensionParts = tuple[str, str, Any, str, bytes]
# (has_value, value, logs, error_kind, error_message, dropped_frames,
#  displays, output (None without an output_dir), type-check diagnostics,
#  suspension).
ResultParts = tuple[
    bool,
    Any,
    list[str],
    Optional[str],
    Optional[str],
    int,
    list[DisplayParts],
    Optional[OutputParts],
    list[str],
    Optional[SuspensionParts],
]
# (journal, approved, reply value or denial message).
ResumeSpec = tuple[bytes, bool, Any]

__version__: str
MIN_ADDRESS_SPACE_BYTES: int

def to_json(value: object) -> str:
    """The canonical JSON text of a value, as it would cross into a program.

    Raises ``ValueError`` naming the path (``$.items[3]``) and type of the
    first value JSON cannot carry exactly."""

def from_json(text: str) -> Any:
    """Parses JSON exactly: ints of any size, ``-0.0``, any depth."""

def _copy_output(work_dir: str, output_dir: str, max_bytes: int) -> OutputParts:
    """Copies ``work_dir/out`` into ``output_dir`` as a run's ``out/`` is
    copied (for ``pycage.ray``, which brings it from a node)."""

class Reply:
    """One async binding call's way back (internal)."""

    task: Optional[asyncio.Task[Any]]
    def resolve(self, value: object) -> None: ...
    def reject(self, message: str) -> None: ...
    def fail(self, exc: BaseException) -> None: ...

class RunHandle:
    def cancel(self) -> None:
        """Aborts the run: it settles as ``abort``."""

class RunOutcome:
    def parts(self) -> ResultParts: ...

class NativeRuntime:
    def __init__(
        self,
        *,
        python: Optional[str] = None,
        isolation: Optional[str] = None,
        allow_read: Optional[list[str]] = None,
        run_dir_parent: Optional[str] = None,
        spawn: Optional[str] = None,
        cache_dir: Optional[str] = None,
        probe_cache: bool = True,
        allow_net: Optional[list[str]] = None,
        budgets: Optional[dict[str, int]] = None,
        venv: Optional[str] = None,
        preload: Optional[list[str]] = None,
        with_packages: Optional[list[str]] = None,
        allow_packages: Optional[list[str]] = None,
        allow_any_package: bool = False,
        allow_builds: bool = False,
        type_check: bool = False,
        ty: Optional[str] = None,
        journal_key: Optional[bytes] = None,
    ) -> None: ...
    @property
    def python_version(self) -> tuple[int, int, int]: ...
    def config(self) -> dict[str, Any]: ...
    def check(self, namespaces: list[NamespaceSpec], site: object) -> None: ...
    def run(
        self,
        program: str,
        namespaces: list[NamespaceSpec],
        site: object,
        on_event: Optional[Callable[[list[tuple[Any, ...]]], None]] = None,
        poll_signals: bool = False,
        limits: Optional[dict[str, int]] = None,
        inputs: Optional[list[str]] = None,
        output_dir: Optional[str] = None,
        type_check: Optional[bool] = None,
        resume: Optional[ResumeSpec] = None,
    ) -> ResultParts: ...
    def start(
        self,
        program: str,
        namespaces: list[NamespaceSpec],
        site: object,
        event_loop: asyncio.AbstractEventLoop,
        on_done: Callable[[RunOutcome], None],
        on_event: Optional[Callable[[list[tuple[Any, ...]]], None]] = None,
        limits: Optional[dict[str, int]] = None,
        inputs: Optional[list[str]] = None,
        output_dir: Optional[str] = None,
        type_check: Optional[bool] = None,
        resume: Optional[ResumeSpec] = None,
    ) -> RunHandle: ...
    def session(
        self,
        namespaces: list[NamespaceSpec],
        site: object,
        idle_timeout_seconds: Optional[float] = None,
        max_lifetime_seconds: Optional[float] = None,
        address_space_bytes: Optional[int] = None,
    ) -> NativeSession: ...
    def resume_session(
        self,
        namespaces: list[NamespaceSpec],
        site: object,
        resume: ResumeSpec,
        idle_timeout_seconds: Optional[float] = None,
        max_lifetime_seconds: Optional[float] = None,
        address_space_bytes: Optional[int] = None,
        poll_signals: bool = False,
    ) -> tuple[NativeSession, ResultParts]: ...
    def wait_idle(self, timeout: float) -> bool: ...
    def _bench_run(self, program: str) -> float: ...
    def close(self) -> None: ...

class NativeSession:
    @property
    def ended(self) -> Optional[str]: ...
    def run(
        self,
        program: str,
        on_event: Optional[Callable[[list[tuple[Any, ...]]], None]] = None,
        poll_signals: bool = False,
        type_check: Optional[bool] = None,
    ) -> ResultParts: ...
    def start(
        self,
        program: str,
        event_loop: asyncio.AbstractEventLoop,
        on_done: Callable[[RunOutcome], None],
        on_event: Optional[Callable[[list[tuple[Any, ...]]], None]] = None,
        type_check: Optional[bool] = None,
    ) -> RunHandle: ...
    def close(self) -> None: ...
