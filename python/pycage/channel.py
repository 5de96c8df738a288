"""The fd-3 channel: whole frames out, host lines in, replies to their calls.

fd 3 is non-blocking from the start of a run. Writes: a frame goes out whole
(one ``os.write`` when the socket has room; otherwise wait in ``select()``
for writability, reading meanwhile so a host that writes synchronously
cannot deadlock us). ``lock`` serializes frames across threads (a program
thread may print); a re-entrant send on the same thread (a signal handler
printing mid-write) is queued behind the frame in progress.

Reads. Boot and run frames are read by blocking in ``select()``. Replies are
read by whichever event loop awaits a binding call: the program may run no
loop, one, several in a row (``asyncio.run`` twice), nested ones in threads,
or the private loop of a program that awaits at top level. So a call creates
its future on the loop running it *at call time*, and that loop gets a
reader for fd 3 while it has calls pending (``watch``/``unwatch``; each loop
has its own selector, so several loops may watch fd 3 at once). A reader
parses every complete reply line and settles each reply's future: directly
when the future belongs to the reader's own loop, otherwise with the
future's loop's ``call_soon_threadsafe``. A call with no running loop (a
coroutine driven by hand), on a loop that cannot watch a file descriptor,
or made without ``await`` (a member's ``.sync``, which blocks even a
running loop's thread) blocks in ``select()`` until its reply is in
(``call_blocking``), settling every other reply it reads meanwhile:
slower, never wrong.

Every host line is checked by the generated ``pycage._wire`` before it is
used; a malformed one ends the child with status 2.
"""

import asyncio
import itertools
import os
import select
import threading
import time

from pycage import _wire
from pycage._private import BUILTINS, EXIT_BAD_HOST_FRAME, EXIT_HOST_GONE, die
from pycage.decoder import decode_json

__builtins__ = BUILTINS

_FD = _wire.PROTOCOL_FD
#: Bytes asked of fd 3 per read.
_READ_CHUNK = 1 << 18
#: Seconds a blocking binding call waits in one ``select`` before it checks
#: again whether another thread has read its reply.
_BLOCKING_POLL_SECONDS = 0.05
#: Longest a call waits for its reply outside the loop before it lets the
#: loop check its own business (a signal's wake-up, say) and waits its way.
INLINE_WAIT_SECONDS = 0.05

_os_write = os.write
_os_readv = os.readv
_select = select.select
_monotonic = time.monotonic
_check_reply = _wire.check_reply
Future = asyncio.Future
get_running_loop = asyncio.events._get_running_loop

lock = threading.RLock()
_inbuf = bytearray()
_scan_from = 0  # _inbuf[:_scan_from] holds no newline
_sending = False
_backlog = []
_held = None  # a frame that goes out with the next one (``hold``)
pending = {}  # call id -> asyncio Future, or a Slot for a blocking call
_watched = {}  # id(loop) -> [loop, calls pending on it]; it reads fd 3 meanwhile
ids = itertools.count()


class Slot(list):
    """Where a blocking call's reply lands: ``[(ok, value_or_message)]``."""

    __slots__ = ()


# Reads land in one preallocated buffer: os.read(fd, n) would allocate
# (and, at this size, mmap and page-fault) a fresh n-byte object per call,
# which cost more than the rest of a binding call's round trip together.
_readbuf = bytearray(_READ_CHUNK)
_readview = memoryview(_readbuf)


def touch_read_path():
    """Write, without reading or sending anything, to what a run's first
    read writes: the read buffer's first page (the kernel's copy into it),
    its view's export count, the input buffer, the lock, and the code
    objects of the functions that read and send (a call writes their
    reference counts). In a child forked from the zygote each of these
    writes copies a shared page, about 8 µs here after the child has
    idled in the pool; its warm-up (``bootstrap.warm_up``) takes them
    off the run's critical path. Leaves every buffer as it was."""
    global _scan_from
    with lock:
        if _readbuf:
            _readbuf[0] = _readbuf[0]
        _readview[:1].release()
        if not _inbuf:
            _inbuf.extend(b"\0")
            _inbuf.clear()
            _scan_from = 0
    for function in (_pump, _take_line, _host_frame, read_frame, _write_all, send, hold):
        function.__code__  # noqa: B018 -- the reference count is the point


def set_nonblocking():
    """Make fd 3 non-blocking (the start of a run); exit if it is unusable."""
    try:
        os.set_blocking(_FD, False)
    except OSError as e:
        die(EXIT_HOST_GONE, f"fd {_FD} is not usable: {e}")


def _pump():
    """Move what fd 3 has into _inbuf; exit if the host is gone."""
    try:
        n = _os_readv(_FD, (_readbuf,))
    except BlockingIOError:
        return False
    except OSError as e:
        die(EXIT_HOST_GONE, f"reading fd {_FD} failed: {e}")
    if not n:
        die(EXIT_HOST_GONE)
    _inbuf.extend(_readview[:n])
    return True


def _take_line():
    """The next complete line of _inbuf as str, or None."""
    global _scan_from
    end = _inbuf.find(b"\n", _scan_from)
    if end < 0:
        _scan_from = len(_inbuf)
        return None
    raw = _inbuf[:end]
    del _inbuf[: end + 1]
    _scan_from = 0
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        die(EXIT_BAD_HOST_FRAME, f"host frame is not UTF-8: {e}")


def _host_frame(line):
    """Parse one host line; exit if it is not JSON (its shape is checked by
    the caller, with a ``_wire`` checker)."""
    try:
        return decode_json(line)
    except (ValueError, MemoryError) as e:
        die(EXIT_BAD_HOST_FRAME, f"host frame is not JSON: {e}")


def read_frame(check):
    """Block until the next host frame (boot and run phases); exit unless
    ``check`` (a ``_wire`` checker) finds it well-formed."""
    while True:
        line = _take_line()
        if line is not None:
            frame = _host_frame(line)
            problem = check(frame)
            if problem is not None:
                die(EXIT_BAD_HOST_FRAME, "malformed host frame: " + problem)
            return frame
        try:
            _select((_FD,), (), ())
        except (OSError, ValueError) as e:
            die(EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
        _pump()


def _write_all(data):
    view = None
    done = 0
    while True:
        try:
            done += _os_write(_FD, view[done:] if view is not None else data)
        except BlockingIOError:
            pass
        except OSError as e:
            die(EXIT_HOST_GONE, f"writing fd {_FD} failed: {e}")
        if done >= len(data):
            return
        if view is None:
            view = memoryview(data)
        try:
            readable, _, _ = _select((_FD,), (_FD,), ())
        except (OSError, ValueError) as e:
            die(EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
        if readable and _pump():
            _dispatch_replies()


def hold(data):
    """Send the frame ``data`` with the next one, in the same write.

    For ``boot-ack``, which the host reads but never waits for: sent alone,
    it woke the host's reader (and on a small machine took this process's
    CPU for it) once more per run, just before ``done`` woke it again."""
    global _held
    with lock:
        _held = data if _held is None else _held + data


def send(data):
    """Write one whole frame (bytes ending in a newline) to fd 3, after
    the one held back (``hold``), if any."""
    global _sending, _held
    with lock:
        if _held is not None:
            data = _held + data
            _held = None
        if _sending:
            _backlog.append(data)
            return
        _sending = True
        try:
            _write_all(data)
            while _backlog:
                _write_all(_backlog.pop(0))
        finally:
            _sending = False


def _on_readable():
    """A watching loop's reader for fd 3."""
    with lock:
        _pump()
    _dispatch_replies()


def watch(loop):
    """Have ``loop`` read fd 3 while it has calls pending; False if it cannot."""
    entry = _watched.get(id(loop))
    if entry is None:
        try:
            loop.add_reader(_FD, _on_readable)
        except Exception:  # closed, or a loop without add_reader
            return False
        entry = _watched[id(loop)] = [loop, 0]
    entry[1] += 1
    return True


def unwatch(loop):
    """One call of ``loop`` finished. The reader stays until the loop's next
    iteration: sequential awaits then keep one registration instead of
    paying an add_reader/remove_reader (two epoll_ctl calls and the
    selector's bookkeeping) per call."""
    entry = _watched.get(id(loop))
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        try:
            loop.call_soon(_release, loop)
        except Exception:  # the program closed the loop meanwhile
            _release(loop)


def _release(loop):
    """Stop ``loop`` reading fd 3 unless a call started again meanwhile."""
    entry = _watched.get(id(loop))
    if entry is None or entry[1] > 0:
        return
    del _watched[id(loop)]
    try:
        loop.remove_reader(_FD)
    except Exception:  # closed
        pass


def _resolve(future, result):
    if not future.done():
        future.set_result(result)


def _dispatch_replies():
    """Settle the call of every complete reply line buffered so far."""
    while True:
        with lock:
            line = _take_line()
        if line is None:
            return
        frame = _host_frame(line)
        problem = _check_reply(frame)
        if problem is not None:
            die(EXIT_BAD_HOST_FRAME, "malformed reply frame: " + problem)
        call_id = frame["id"]
        ok = frame["ok"]
        result = (ok, frame["value"] if ok else frame["message"])
        # Under the lock: a call waiting inline may hand its entry over to
        # a future (``call_inline``), and must never miss a reply that
        # landed in its slot meanwhile.
        with lock:
            target = pending.pop(call_id, None)
            if type(target) is Slot:
                target.append(result)
                continue
        if target is None:
            continue
        loop = target.get_loop()
        if loop is get_running_loop():
            _resolve(target, result)
        else:
            try:
                loop.call_soon_threadsafe(_resolve, target, result)
            except Exception:  # the loop is closed: nobody awaits this call
                pass


#: Modules whose selector loop classes ``idle_wait`` can read: the standard
#: ones (``asyncio.run`` makes a ``_UnixSelectorEventLoop``) and the child's
#: private copy of it, which keeps their module (``_private.private_class``).
#: A program's subclass may override anything.
_INLINE_LOOP_MODULES = frozenset(("asyncio.unix_events", "asyncio.selector_events"))
_BaseSelectorEventLoop = asyncio.selector_events.BaseSelectorEventLoop


def idle_wait(loop):
    """How long ``loop`` would now wait in its selector for nothing but its
    own wake-up pipe and fd 3, or None when it has other work: a callback
    ready, a timer due, another file descriptor to watch.

    When it has none, a call can wait for its reply right here (see
    ``call_inline``) and the loop loses nothing: it would have blocked on
    the same descriptors for as long.
    """
    kind = type(loop)
    if kind.__dict__.get("__module__") not in _INLINE_LOOP_MODULES or not issubclass(kind, _BaseSelectorEventLoop):
        return None
    try:
        if loop._ready or loop._stopping:
            return None
        wake = loop._ssock.fileno()
        for fd in loop._selector.get_map():
            if fd != wake and fd != _FD:
                return None
        scheduled = loop._scheduled
        if not scheduled:
            return INLINE_WAIT_SECONDS
        timeout = scheduled[0]._when - loop.time()
        if timeout <= 0:
            return None
        return min(timeout, INLINE_WAIT_SECONDS)
    except Exception:  # not the loop internals we know: take the loop's path
        return None


def call_inline(loop, call_id, frame, timeout):
    """Send a call and wait for its reply without an iteration of ``loop``
    (which ``idle_wait`` found idle).

    Returns ``(True, (ok, value_or_message))``, or ``(False, future)`` when
    the loop must take over first (a timer came due, another thread woke
    it): the call is then pending as ``future`` on ``loop``, which is
    watching fd 3, and the caller awaits it the loop's way (and unwatches).
    """
    slot = Slot()
    pending[call_id] = slot
    wake = loop._ssock.fileno()
    send(frame)
    deadline = _monotonic() + timeout
    watched = (_FD, wake)
    while True:
        _dispatch_replies()
        if slot:
            return True, slot[0]
        left = None if deadline is None else deadline - _monotonic()
        readable = ()
        if left is None or left > 0:
            try:
                readable, _, _ = _select(watched, (), (), left)
            except (OSError, ValueError) as e:
                die(EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
        if (left is not None and left <= 0) or wake in readable:
            if not watch(loop):
                # It cannot read fd 3 after all (closed meanwhile): the
                # reply can only be waited for here, on fd 3 alone (the
                # wake fd stays readable) and with no deadline.
                deadline = None
                watched = (_FD,)
                continue
            # Hand the call to the loop. Under the lock, so a reply another
            # thread dispatches lands either in the slot (seen here) or in
            # the future.
            with lock:
                if slot:
                    unwatch(loop)
                    return True, slot[0]
                future = Future(loop=loop)
                pending[call_id] = future
            return False, future
        if readable:
            with lock:
                _pump()


def call_blocking(call_id, frame):
    """One call round trip that waits here, not in an event loop (there is
    none, it cannot watch fd 3, or the call is a ``.sync`` one):
    ``(ok, value_or_message)``."""
    slot = Slot()
    pending[call_id] = slot
    try:
        send(frame)
        while True:
            _dispatch_replies()
            if slot:
                return slot[0]
            try:
                # A timeout: another thread's loop may read this reply.
                readable, _, _ = _select((_FD,), (), (), _BLOCKING_POLL_SECONDS)
            except (OSError, ValueError) as e:
                die(EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
            if readable:
                with lock:
                    _pump()
    finally:
        pending.pop(call_id, None)
