"""The program's output as ``log`` frames, within the run's log ledger.

``sys.stdout`` and ``sys.stderr`` become ``LogWriter``s (text and
``.buffer`` bytes, decoded as UTF-8): each write is sent as ``log`` frames
at once (one, or one per 16,384 characters), so output survives a kill
mid-run. The ledger holds the run's
``maxLogBytes``; when a write does not fit, what fits is sent, then exactly
one marker frame (``truncated: true``), and capture stops until the next run
(docs/protocol.md, "Logs").
"""

import codecs
import io

from pycage import _wire
from pycage._private import BUILTINS
from pycage.channel import lock, send

__builtins__ = BUILTINS

_encode_log = _wire.encode_log
_type_name = type.__dict__["__name__"].__get__

#: Characters of one ``log`` frame at most: under 100 KiB encoded.
_CHUNK_CHARS = 16384

_log_left = 0  # bytes the ledger still accepts; -1 once the marker is sent
_marker_frame = b""
_marker_for = None  # the budget _marker_frame names


def start_ledger(max_log_bytes):
    """A new run's ledger: ``max_log_bytes`` to spend, then the marker.

    The marker is built here, before the program runs, so that sending it
    never needs memory the program may have taken; a session's runs share
    their budget, so it is built again only when the budget changes."""
    global _log_left, _marker_frame, _marker_for
    _log_left = max_log_bytes
    if max_log_bytes != _marker_for:
        _marker_frame = _encode_log(_wire.log_truncation_marker(max_log_bytes), True)
        _marker_for = max_log_bytes


def log(text):
    """Send ``text`` as log frames, within the ledger."""
    global _log_left
    if not text:
        return
    with lock:
        if _log_left < 0:
            return
        data = None
        if text.isascii():
            n = len(text)
        else:
            data = text.encode("utf-8", "backslashreplace")
            n = len(data)
            text = data.decode("utf-8")  # lone surrogates became escapes
        if n <= _log_left:
            _log_left -= n
            _send_chunks(text)
            return
        if data is None:
            fits = text[:_log_left]
        else:
            fits = data[:_log_left].decode("utf-8", "ignore")  # drops a cut character
        _log_left = -1
        if fits:
            _send_chunks(fits)
        send(_marker_frame)


def _send_chunks(text):
    """``text`` as ``log`` frames of at most ``_CHUNK_CHARS`` characters: a
    frame is one protocol line, and a line over the host's cap ends the
    run. A character is at most 6 bytes in a frame (``\\u001b``), so one
    write of a few MiB of control characters, within a large log budget,
    was a line over the default 8 MiB cap."""
    if len(text) <= _CHUNK_CHARS:
        send(_encode_log(text))
        return
    for start in range(0, len(text), _CHUNK_CHARS):
        send(_encode_log(text[start : start + _CHUNK_CHARS]))


class _LogBuffer(io.BufferedIOBase):
    """``sys.stdout.buffer``: bytes are decoded as UTF-8 and logged."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self):
        return True

    def write(self, data):
        data = bytes(memoryview(data))
        log(self._decoder.decode(data))
        return len(data)

    def flush(self):
        pass


class LogWriter(io.TextIOBase):
    """Replaces ``sys.stdout`` / ``sys.stderr``: each write is a log frame."""

    encoding = "utf-8"
    errors = "backslashreplace"
    newlines = None
    line_buffering = False
    write_through = True

    def __init__(self, name):
        self.name = name
        self.buffer = _LogBuffer()

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, s):
        if type(s) is not str:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {_type_name(type(s))}")
            s = str.__str__(s)
        log(s)
        return len(s)

    def flush(self):
        pass


stdout = LogWriter("<stdout>")
stderr = LogWriter("<stderr>")
