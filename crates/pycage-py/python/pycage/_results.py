"""What a run returns: :class:`Result` and its :class:`Failure`, made from
the native module's result parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from . import _durable
from ._display import Display, OutputFile, SkippedFile
from ._files import _output_files
from .errors import RunError

FailureKind = Literal[
    "exception",
    "timeout",
    "abort",
    "worker-exit",
    "invalid-output",
    "output-limit",
    "dependencies",
    "type-error",
    "suspended",
    "diverged",
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

    ``suspended`` is set when a call suspended the run (``error.kind`` is
    then ``"suspended"``): a :class:`pycage.Suspension` with the pending
    call and the journal that ``resume`` takes (``docs/durable.md``).
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
    suspended: Optional[_durable.Suspension] = None

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or :class:`pycage.RunError` if the run failed."""
        if self.error is not None:
            raise RunError(self.error.kind, self.error.message, list(self.logs))
        return self.value


_object_new = object.__new__


def _display(data: list[tuple[str, str]], metadata: dict[str, Any]) -> Display:
    return Display(dict(data), metadata)


def _result(parts: tuple) -> Result:
    has_value, value, logs, kind, message, dropped, displays, output, diagnostics, suspension = parts
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
            suspended=None,
        )
        return result
    error = Failure(kind, message) if kind is not None else None
    files, skipped = _output_files(output)
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
        suspended=_durable.suspension(suspension),
    )
