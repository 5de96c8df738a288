"""The program's output as ``log`` frames, within the run's log ledger.

``sys.stdout`` and ``sys.stderr`` (and ``sys.__stdout__`` /
``sys.__stderr__``, the same objects, as under CPython) become
``LogWriter``s (text and ``.buffer`` bytes, decoded as UTF-8): each write is
sent at once, so output survives a kill mid-run. The ledger holds the
run's ``maxLogBytes``; when a write does not fit, what fits is sent, then
exactly one marker frame (``truncated: true``), and capture stops until the
next run (docs/protocol.md, "Logs").

Their ``fileno()`` is the child's real fd 1 or fd 2: one pipe the host reads
beside fd 3, as it reads what C code, ``os.write(1, ...)`` and the
program's subprocesses write there (``subprocess.run(cmd,
stdout=sys.stdout)``, ``faulthandler.enable()``). Two channels have no
order between them, so the writers keep one: a write goes out as ``log``
frames when the pipe is empty (``FIONREAD`` on its write end: the host has
read everything written there before), and into the pipe itself, after what
waits there, when it is not. Either way the host reads it after every byte
written to the pipe before it, and before every byte written after it (the
host's half: before it reads the pipe, it takes what fd 3 holds). A
line is never split between the two ways: once part of a line went one
way, the rest of it follows the same way.
"""

import codecs
import io
import os

from pycage import _wire
from pycage._private import BUILTINS
from pycage.channel import lock, send

try:
    from fcntl import ioctl as _ioctl
except ImportError:  # no way to see the pipe's content: frames only
    _ioctl = None

#: Machines whose ``FIONREAD`` is the generic ioctl number, so that no
#: child imports ``termios`` (a third of a millisecond) just to read it.
_GENERIC_IOCTLS = ("x86_64", "i686", "i386", "aarch64", "arm64", "armv7l", "riscv64", "s390x", "loongarch64")
if os.uname().machine in _GENERIC_IOCTLS:
    _FIONREAD = 0x541B
else:
    try:
        from termios import FIONREAD as _FIONREAD
    except ImportError:
        _ioctl = None

__builtins__ = BUILTINS

_encode_log = _wire.encode_log
_type_name = type.__dict__["__name__"].__get__

#: Characters of one ``log`` frame at most: under 100 KiB encoded.
_CHUNK_CHARS = 16384

_os_write = os.write
_from_bytes = int.from_bytes
#: ``FIONREAD``'s answer lands here (a C int: only whether it is zero is read,
#: which does not depend on the byte order).
_queued = bytearray(4)

_log_left = 0  # bytes the ledger still accepts; -1 once the marker is sent
#: The last text sent as frames, or written to the pipe, ended mid-line.
_frames_partial = False
_raw_partial = False
_marker_frame = b""
_marker_for = None  # the budget _marker_frame names


def start_ledger(max_log_bytes):
    """A new run's ledger: ``max_log_bytes`` to spend, then the marker.

    The marker is built here, before the program runs, so that sending it
    never needs memory the program may have taken; a session's runs share
    their budget, so it is built again only when the budget changes."""
    global _log_left, _marker_frame, _marker_for, _frames_partial, _raw_partial
    _log_left = max_log_bytes
    # The host ends each run's partial lines.
    _frames_partial = _raw_partial = False
    if max_log_bytes != _marker_for:
        _marker_frame = _encode_log(_wire.log_truncation_marker(max_log_bytes), True)
        _marker_for = max_log_bytes


def log(text, fd=1):
    """Send ``text`` as log frames, or into ``fd``'s pipe after what waits
    there (see the module docs), within the ledger."""
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
            _send(text, fd)
            return
        if data is None:
            fits = text[:_log_left]
        else:
            fits = data[:_log_left].decode("utf-8", "ignore")  # drops a cut character
        _log_left = -1
        if fits:
            _send(fits, fd)
        send(_marker_frame)


def _pipe_holds_output(fd):
    """Whether ``fd``'s pipe holds bytes the host has not read yet."""
    if _ioctl is None:
        return False
    try:
        _ioctl(fd, _FIONREAD, _queued, True)
    except (OSError, ValueError):
        return False
    return _from_bytes(_queued, "little") != 0


def _send(text, fd):
    """``text`` after everything written to the pipe before it: as frames
    when the pipe is empty, else into the pipe (the module docs)."""
    global _frames_partial, _raw_partial
    if _raw_partial or (not _frames_partial and _pipe_holds_output(fd)):
        if _write_pipe(text, fd):
            _raw_partial = text[-1] != "\n"
            return
        _raw_partial = False
    _send_chunks(text)
    _frames_partial = text[-1] != "\n"


def _write_pipe(text, fd):
    """Write all of ``text`` to ``fd``; False when nothing of it could be."""
    data = text.encode("utf-8")
    done = 0
    while done < len(data):
        try:
            done += _os_write(fd, data[done:] if done else data)
        except InterruptedError:
            continue
        except OSError:
            if not done:
                return False
            # The rest as frames: the host reads it after what got through.
            _send_chunks(data[done:].decode("utf-8", "ignore"))
            return True
    return True


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

    def __init__(self, fd):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._fd = fd

    def writable(self):
        return True

    def write(self, data):
        data = bytes(memoryview(data))
        log(self._decoder.decode(data), self._fd)
        return len(data)

    def flush(self):
        pass

    def fileno(self):
        return self._fd


class LogWriter(io.TextIOBase):
    """Replaces ``sys.stdout`` / ``sys.stderr``: each write is a log frame."""

    encoding = "utf-8"
    errors = "backslashreplace"
    newlines = None
    line_buffering = False
    write_through = True

    def __init__(self, name, fd):
        self.name = name
        self._fd = fd
        self.buffer = _LogBuffer(fd)

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, s):
        if type(s) is not str:
            if not isinstance(s, str):
                raise TypeError(f"write() argument must be str, not {_type_name(type(s))}")
            s = str.__str__(s)
        log(s, self._fd)
        return len(s)

    def flush(self):
        pass

    def fileno(self):
        """The real descriptor (1 or 2): what is written to it reaches the
        run's logs too, in order (see the module docs)."""
        return self._fd


stdout = LogWriter("<stdout>", 1)
stderr = LogWriter("<stderr>", 2)
