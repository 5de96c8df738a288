"""The fd-3 wire vocabulary, mirrored from the Rust host (docs/protocol.md).

Frames are JSON lines on file descriptor ``PROTOCOL_FD``. This module only
declares their shapes and the two surfaces both sides execute against
(``PROTOCOL_FD`` and ``log_truncation_marker``); it holds no codec. A Rust test
spawns python3 and compares each TypedDict's ``__required_keys__`` and
``__optional_keys__`` (through ``FRAMES``), ``PROTOCOL_FD`` and the marker text
with the host's, so a renamed, dropped or added field, or a required/optional
flip, fails there.

Optional fields live in a ``total=False`` subclass of the required part, which
works on every Python >= 3.10 (``NotRequired`` is 3.11+). Shapes with a key
named like the keyword ``global`` use the functional ``TypedDict`` form.
Keep this module import-light: the child imports it at start-up.
"""

from typing import Any, Dict, List, Literal, TypedDict

#: The child's end of the duplex channel (a Unix socketpair).
PROTOCOL_FD = 3

#: Any JSON value: None, bool, int, float, str, list, or dict with str keys.
JsonValue = Any


def log_truncation_marker(max_bytes: int) -> str:
    """The log line that marks where a ``max_bytes`` log ledger ran out.

    Byte-identical to the Rust host's ``log_truncation_marker``.
    """
    return f"[pycage] log capture truncated at {max_bytes} bytes"


# --- host to child -------------------------------------------------------


class ErrorClassEntry(TypedDict):
    """``namespaces[].errorClass``: the exception class rejected calls raise."""

    name: str
    memberNameProperty: str


_NamespaceEntryRequired = TypedDict(
    "_NamespaceEntryRequired", {"global": str, "names": List[str]}
)


class NamespaceEntry(_NamespaceEntryRequired, total=False):
    """One entry of ``boot.namespaces``: a global object and its members.

    ``doc`` is what ``help(<global>)`` shows; ``docs`` maps a member name to
    what ``help(<global>.<member>)`` shows (names not in ``names`` are ignored).
    """

    errorClass: ErrorClassEntry
    doc: str
    docs: Dict[str, str]


class _BootFrameRequired(TypedDict):
    type: Literal["boot"]
    cpuSeconds: int
    addressSpaceBytes: int
    maxLogBytes: int
    maxValueBytes: int
    namespaces: List[NamespaceEntry]


class BootFrame(_BootFrameRequired, total=False):
    """First host frame: limits and namespaces. Answered by ``boot-ack``.
    ``session``: after each ``done``, wait for another ``run`` in the same
    module globals."""

    session: bool


class _RunFrameRequired(TypedDict):
    type: Literal["run"]
    program: str


class RunFrame(_RunFrameRequired, total=False):
    """The program to run. May follow ``boot`` at once (read after ``boot``
    is applied) and, in a session, each ``done``; a session run carries its
    own budgets (``cpuSeconds`` counted from the run's start)."""

    cpuSeconds: int
    maxLogBytes: int
    maxValueBytes: int


class ReplyOkFrame(TypedDict):
    """A binding call that succeeded."""

    type: Literal["reply"]
    id: int
    ok: Literal[True]
    value: JsonValue


class ReplyErrorFrame(TypedDict):
    """A binding call that failed; the program sees an exception."""

    type: Literal["reply"]
    id: int
    ok: Literal[False]
    message: str


# --- child to host -------------------------------------------------------


class BootAckFrame(TypedDict):
    """Limits are applied; the child is ready for ``run``."""

    type: Literal["boot-ack"]


CallFrame = TypedDict(
    "CallFrame",
    {
        "type": Literal["call"],
        "id": int,
        "global": str,
        "name": str,
        "args": JsonValue,
    },
)
CallFrame.__doc__ = "A binding call; ``args`` is present even when null."


class _LogFrameRequired(TypedDict):
    type: Literal["log"]
    text: str


class LogFrame(_LogFrameRequired, total=False):
    """Captured program output. ``truncated`` is true only on the marker."""

    truncated: bool


class DoneError(TypedDict):
    """``done.error``: kind is exception, invalid-output or output-limit."""

    kind: Literal["exception", "invalid-output", "output-limit"]
    message: str


class _DoneFrameRequired(TypedDict):
    type: Literal["done"]


class DoneFrame(_DoneFrameRequired, total=False):
    """The run settled: a value, no value, or an error (never both)."""

    value: JsonValue
    error: DoneError


#: Every frame shape by its mirror-test key.
FRAMES: dict[str, type] = {
    "boot": BootFrame,
    "namespace": NamespaceEntry,
    "errorClass": ErrorClassEntry,
    "run": RunFrame,
    "reply-ok": ReplyOkFrame,
    "reply-error": ReplyErrorFrame,
    "boot-ack": BootAckFrame,
    "call": CallFrame,
    "log": LogFrame,
    "done": DoneFrame,
    "done-error": DoneError,
}
