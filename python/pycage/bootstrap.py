"""The pycage child: runs one model-written program, talking JSON lines on fd 3.

The host starts it as::

    python3 -I -c "import sys; sys.path.insert(0, '<DIR>'); from pycage.bootstrap import main; main()"

where ``<DIR>`` holds the ``pycage`` package. Importing this module does every
import a run needs, so a warm pool can start children before their request is
known; ``main()`` then blocks on fd 3 for ``boot``. Per process, exactly one
run (the wire protocol is described in ``docs/protocol.md``):

1. ``boot``: apply ``RLIMIT_CPU`` / ``RLIMIT_AS``, build the namespace objects
   and error classes, answer ``boot-ack``.
2. ``run``: compile the program as the script ``__main__`` (file name
   ``<program>``; see ``pycage.script`` for top-level ``return`` and the final
   expression's value) and run it: with no event loop at all, or, when it
   awaits at top level, as a coroutine on a private loop. Binding calls go out
   as ``call`` frames from whichever loop awaits them; ``reply`` frames are
   dispatched by id, so any number of calls can be in flight in any number of
   loops (see "the fd-3 channel" below).
3. Send ``done`` (value, no value, or error) and ``os._exit(0)``.

The run path is three functions a long-lived child can call once per run:
``new_program_globals`` + ``compile_for`` (compile a program for given module
globals), ``run_program`` (run it; returns an ``Outcome``), ``outcome_frame``
(encode the outcome as a ``done`` frame), then ``close_outcome``.

Exit statuses without a ``done``: 1 the host is gone (EOF or error on fd 3),
2 the host sent a malformed frame, 3 a bug in this file. The reason goes to
fd 2, never to fd 3.

The program is untrusted and runs in this interpreter, so this module keeps
what it needs out of its reach:

* Functions here resolve builtins in a private copy of the builtins dict
  (``__builtins__`` is rebound below, before anything else is defined; on
  CPython >= 3.10 a function keeps the builtins it was created with). A program
  that sets ``builtins.len = None`` cannot break frame emission. The shared
  builtins are restored from that copy once the program finishes, so the
  loop's own cleanup and traceback formatting work again.
* Module references (``os.write``, the JSON pieces, the writers, the asyncio
  functions) are captured at import time; the program rebinding
  ``sys.stdout``, ``print``, ``json``, ``asyncio`` or deleting ``sys.modules``
  entries does not reach them.
* The JSON encoder below never runs program code (exact type checks only; no
  ``__eq__``, ``__hash__``, ``__iter__``, ``__len__`` or ``__repr__`` of
  program objects).
* Once the program has finished, its signal handlers are silenced (signals
  blocked in this thread, Python-level handlers set to ``SIG_IGN``) before the
  value is encoded: an interval timer whose handler raises cannot turn a good
  value into a failed encoding or cut a frame in half.

Everything that touches values crossing the wire is iterative: a
1,000,000-deep list encodes and decodes without ``RecursionError``.
"""

import builtins as _builtins_module

#: Builtins as they were before any program ran. Rebinding ``__builtins__``
#: makes every function defined below resolve builtins here, not in the
#: shared, program-writable ``builtins`` module.
_PRIVATE_BUILTINS = dict(_builtins_module.__dict__)
__builtins__ = _PRIVATE_BUILTINS

import asyncio  # noqa: E402
import codecs  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import selectors  # noqa: E402
import _signal  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from json import JSONDecoder  # noqa: E402
from json.decoder import scanstring as _scanstring  # noqa: E402
from json.encoder import encode_basestring as _quote  # noqa: E402
from types import CoroutineType, FunctionType, ModuleType  # noqa: E402

from pycage import script  # noqa: E402
from pycage.protocol import PROTOCOL_FD, log_truncation_marker  # noqa: E402

if hasattr(sys, "set_int_max_str_digits"):
    # Ints of any size cross exactly, in both directions.
    sys.set_int_max_str_digits(0)

_FD = PROTOCOL_FD
_PROGRAM = script.PROGRAM_FILENAME
#: Files whose frames tracebacks never show: this one and the compiler's.
_OWN_FILES = frozenset(
    ((lambda: None).__code__.co_filename, script.compile_program.__code__.co_filename)
)

#: Bytes asked of fd 3 per read.
_READ_CHUNK = 1 << 18
#: Seconds the loop gets, after the program finished, for its leftover tasks
#: and async generators to finish after cancellation. A task that ignores
#: cancellation is abandoned when this expires; ``done`` is sent regardless.
_CLEANUP_GRACE_SECONDS = 1.0
#: Path segments an error message shows before eliding the middle of a path.
_PATH_SEGMENTS_SHOWN = 40
#: Characters of a dict key an error message shows.
_PATH_KEY_CHARS = 60

_EXIT_HOST_GONE = 1
_EXIT_BAD_HOST_FRAME = 2
_EXIT_INTERNAL = 3

#: Module globals every program starts with, besides its namespaces and
#: error classes: those of a script read from stdin (``python3 -``), with
#: ``__file__`` set to ``<program>``.
_SEEDED_GLOBALS = (
    "__annotations__",
    "__builtins__",
    "__cached__",
    "__doc__",
    "__file__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
)
#: Names no namespace global or error class may take: the seeded globals,
#: ``__debug__`` (a constant the compiler owns), and the globals other
#: pycage runtimes own (``console``, ``__dsh_main__``), so one binding list
#: stays valid for every runtime. The host lists the same names
#: (``RUNTIME_GLOBALS`` in crates/pycage-runtime/src/names.rs; a test
#: compares them).
_RESERVED_GLOBALS = frozenset(_SEEDED_GLOBALS + ("__debug__", "__dsh_main__", "console"))
#: Seconds a blocking binding call waits in one ``select`` before it checks
#: again whether another thread has read its reply.
_BLOCKING_POLL_SECONDS = 0.05
#: Longest a call waits for its reply outside the loop before it lets the
#: loop check its own business (a signal's wake-up, say) and waits its way.
_INLINE_WAIT_SECONDS = 0.05
#: Encoding attempts before a value that keeps failing to encode (another
#: thread of the program changing it mid-walk) is reported as an exception.
_ENCODE_ATTEMPTS = 5
#: Attempts at silencing signals, each of which a program handler may interrupt.
_QUIET_ATTEMPTS = 100

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_os_write = os.write
_os_readv = os.readv
_os_exit = os._exit
_sched_yield = os.sched_yield
_select = select.select
_monotonic = time.monotonic
_int_repr = int.__repr__
_float_repr = float.__repr__
_object_getattribute = object.__getattribute__
_type_name = type.__dict__["__name__"].__get__
_Future = asyncio.Future
_get_running_loop = asyncio.events._get_running_loop
_set_event_loop = asyncio.set_event_loop
# The C functions under `signal`: its Python wrappers turn every number they
# return into an enum member, which made quieting and restoring ~62 handlers
# after each program most of a trivial run's Python time (~80 of ~100 µs).
_pthread_sigmask = _signal.pthread_sigmask
_getsignal = _signal.getsignal
_setsignal = _signal.signal
_SIG_BLOCK = int(signal.SIG_BLOCK)
_SIG_SETMASK = int(signal.SIG_SETMASK)
_SIG_IGN = int(signal.SIG_IGN)
_ALL_SIGNALS = _signal.valid_signals()
_HANDLER_SIGNALS = tuple(
    sorted(sig for sig in _ALL_SIGNALS if sig not in (signal.SIGKILL, signal.SIGSTOP))
)
_gc_isenabled = gc.isenabled
_gc_disable = gc.disable
_gc_enable = gc.enable
_all_tasks = asyncio.all_tasks
_wait = asyncio.wait


# --- an event loop the program's builtins cannot break ------------------


def _private_function(func, globals_by_module):
    """``func`` re-created over a snapshot of its module globals whose
    ``__builtins__`` is the private copy (a function takes its builtins from
    its globals when it is created)."""
    source = func.__globals__
    private = globals_by_module.get(id(source))
    if private is None:
        private = dict(source)
        private["__builtins__"] = _PRIVATE_BUILTINS
        globals_by_module[id(source)] = private
    copy = FunctionType(func.__code__, private, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    copy.__module__ = func.__module__
    return copy


def _private_class(cls):
    """A subclass of ``cls`` whose Python methods, through the MRO, are private
    re-creations: the loop's and selector's own code keeps working when the
    program rebinds ``builtins.len`` and the like. Calls made through
    ``super()`` still reach the originals; the per-iteration path
    (``_run_once``, ``select``, ``_process_events``, ``call_soon``) does not
    use ``super()``."""
    namespace = {}
    globals_by_module = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            kind = type(attr)
            if kind is FunctionType:
                namespace[name] = _private_function(attr, globals_by_module)
            elif kind is staticmethod or kind is classmethod:
                func = attr.__func__
                if type(func) is FunctionType:
                    func = _private_function(func, globals_by_module)
                namespace[name] = kind(func)
            else:  # a data attribute overriding a base method
                namespace.pop(name, None)
    return type(cls.__name__, (cls,), namespace)


_Loop = _private_class(asyncio.SelectorEventLoop)
_Selector = _private_class(selectors.DefaultSelector)


# --- diagnostics ---------------------------------------------------------


def _diag(message):
    """Write a bootstrap diagnostic to the real stderr (fd 2)."""
    try:
        text = "pycage bootstrap: " + message + "\n"
        _os_write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _die(status, message=None):
    if message is not None:
        _diag(message)
    _os_exit(status)


def _clean(text):
    """``text`` made encodable as UTF-8 (lone surrogates become escapes)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# --- lossless JSON: encoder ----------------------------------------------


class NotJsonError(Exception):
    """The value cannot cross as JSON; ``str(e)`` names the path and type."""


class OverBudgetError(Exception):
    """The canonical encoding went over the byte budget."""


_END = object()
_tuple_iter = tuple.__iter__
_UNLIMITED = sys.maxsize
_HINTS = (
    (set, " (use a list)"),
    (frozenset, " (use a list)"),
    (bytes, " (decode it to a str)"),
    (bytearray, " (decode it to a str)"),
    (CoroutineType, " (did you mean to await it?)"),
)
_JSON_TYPES = (bool, int, float, str, list, dict)


def _describe_type(t):
    """'a tuple (use a list)', 'a Color (a subclass of int; ...)'.

    Identity and ``issubclass`` against exact builtin types only, so no
    metaclass code of the program runs.
    """
    name = _type_name(t)
    article = "an" if name[:1] in ("a", "e", "i", "o", "u", "A", "E", "I", "O", "U") else "a"
    hint = ""
    for known, known_hint in _HINTS:
        if t is known:
            hint = known_hint
            break
    else:
        for base in _JSON_TYPES:
            if t is not base and issubclass(t, base):
                base_name = _type_name(base)
                hint = f" (a subclass of {base_name}; convert it to a plain {base_name})"
                break
    return f"{article} {name}{hint}"


def _path(frames, depth):
    """Where the current item of ``frames[depth - 1]`` is, JSONPath-like.

    ``frames[0]`` is the virtual frame around the top-level value (``$``).
    Positions come from the iterators (``__length_hint__`` is what is left),
    so the encoder keeps no per-item index; this runs only for a message.
    """
    segments = []
    for container, it, is_dict in frames[1:depth]:
        # The exact type's __len__: a tuple subclass may override len().
        size = dict.__len__ if is_dict else list.__len__ if type(container) is list else tuple.__len__
        index = size(container) - it.__length_hint__() - 1
        if not is_dict:
            segments.append(f"[{index}]")
            continue
        key = next(itertools.islice(container, index, None), None)
        if type(key) is not str:
            segments.append("[?]")
        elif _IDENT.match(key):
            segments.append("." + key)
        else:
            if len(key) > _PATH_KEY_CHARS:
                key = key[:_PATH_KEY_CHARS] + "\u2026"
            segments.append("[" + _quote(key) + "]")
    shown = _PATH_SEGMENTS_SHOWN
    if len(segments) > shown:
        half = shown // 2
        segments[half:-half] = [f"\u2026({len(segments) - shown} more levels)\u2026"]
    return "$" + "".join(segments)


def encode_json(value, budget=_UNLIMITED):
    """The canonical JSON text of ``value`` (compact ``JSON.stringify``).

    Only exact ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` and
    ``dict`` with ``str`` keys are JSON, plus tuples (named tuples included),
    which become arrays as ``json.dumps`` writes them; anything else raises
    ``NotJsonError`` naming the path and the type. Floats are written as ``float.__repr__``
    (shortest round trip), ints exactly. Raises ``OverBudgetError`` as soon as
    the UTF-8 length of the text is known to exceed ``budget`` bytes.
    Iterative, so depth is unbounded; never calls program code. The cyclic GC
    is paused meanwhile: the walk allocates one frame per open container, and
    collections triggered by them would scan every live frame again.
    """
    gc_was_enabled = _gc_isenabled()
    _gc_disable()
    try:
        return _encode(value, budget)
    finally:
        if gc_was_enabled:
            _gc_enable()


def _encode(value, budget):
    parts = []
    put = parts.append
    size = 0  # UTF-8 bytes in parts
    # Open containers as (container, iterator, is_dict); frames[0] is a
    # virtual one-item container around the top-level value. A container is
    # resumed where its iterator stopped once the child that interrupted it
    # closes.
    frames = [(None, iter((value,)), False)]
    open_ids = set()  # ids of open containers: a repeat is a cycle
    quoted_keys = {}  # key -> ('"k":', ',"k":', UTF-8 bytes of '"k":'); records repeat keys
    fresh = True  # the innermost container has written no item yet
    while frames:
        container, it, is_dict = frames[-1]
        for x in it:
            if is_dict:
                key, x = x
                if type(key) is not str:
                    raise NotJsonError(
                        f"dict key at {_path(frames, len(frames) - 1)} is "
                        f"{_describe_type(type(key))}, which is not JSON (object keys must be str)"
                    )
                quoted = quoted_keys.get(key)
                if quoted is None:
                    if size + len(key) + 4 > budget:  # "k": + value + closer
                        raise OverBudgetError
                    s = _quote(key)
                    if s.isascii():
                        n = len(s) + 1
                    else:
                        try:
                            n = len(s.encode("utf-8")) + 1
                        except UnicodeEncodeError:
                            raise NotJsonError(
                                f"dict key at {_path(frames, len(frames) - 1)} is a str with "
                                "a lone surrogate, which cannot be encoded as UTF-8"
                            ) from None
                    quoted = quoted_keys[key] = (s + ":", "," + s + ":", n)
                if fresh:
                    fresh = False
                    size += quoted[2]
                    put(quoted[0])
                else:
                    size += quoted[2] + 1
                    put(quoted[1])
            elif fresh:
                fresh = False
            else:
                size += 1
                put(",")
            t = type(x)
            if t is str:
                if size + len(x) + 2 > budget:  # every char is at least one byte
                    raise OverBudgetError
                s = _quote(x)
                if s.isascii():
                    size += len(s)
                else:
                    try:
                        size += len(s.encode("utf-8"))
                    except UnicodeEncodeError:
                        raise NotJsonError(
                            f"value at {_path(frames, len(frames))} is a str with a lone "
                            "surrogate, which cannot be encoded as UTF-8"
                        ) from None
                put(s)
            elif t is int:
                bits = x.bit_length()
                if bits > 64 and bits > 4 * (budget - size + 2):  # digits > 0.3 * bits
                    raise OverBudgetError
                s = _int_repr(x)
                size += len(s)
                put(s)
            elif t is float:
                if x - x != 0.0:  # NaN or an infinity
                    raise NotJsonError(
                        f"value at {_path(frames, len(frames))} is {_float_repr(x)}, which "
                        "is not JSON (NaN and infinities have no JSON form)"
                    )
                s = _float_repr(x)
                size += len(s)
                put(s)
            elif x is None:
                size += 4
                put("null")
            elif t is bool:
                if x:
                    size += 4
                    put("true")
                else:
                    size += 5
                    put("false")
            elif t is list or t is dict or t is tuple or issubclass(t, tuple):
                ident = id(x)
                if ident in open_ids:
                    raise NotJsonError(
                        f"cycle at {_path(frames, len(frames))}: this {_type_name(t)} "
                        "contains itself, which JSON cannot represent"
                    )
                open_ids.add(ident)
                if t is dict:
                    frames.append((x, iter(x.items()), True))
                    put("{")
                else:
                    # tuple.__iter__: a named tuple's class may override __iter__.
                    frames.append((x, iter(x) if t is list else _tuple_iter(x), False))
                    put("[")
                size += 1
                fresh = True
                break
            else:
                raise NotJsonError(
                    f"value at {_path(frames, len(frames))} is {_describe_type(t)}, "
                    "which is not JSON"
                )
            if size > budget:
                raise OverBudgetError
        else:
            frames.pop()
            if container is not None:
                put("}" if is_dict else "]")
                size += 1
                open_ids.discard(id(container))
            fresh = False
    if size > budget:
        raise OverBudgetError
    return "".join(parts)


# --- lossless JSON: decoder ----------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_WS_CHARS = " \t\n\r"
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LIST = object()


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


#: The C scanner behind json.loads (JSONDecoder.decode itself is Python code
#: that resolves builtins in the program-writable builtins module).
_scan_once = JSONDecoder(parse_constant=_reject_constant).scan_once


def decode_json(text):
    """Parse one JSON text. Ints of any size stay exact ints; other numbers
    become the nearest ``float`` (an exponent out of range gives an infinity,
    as ``json.loads`` does). NaN/Infinity tokens are rejected. Duplicate keys:
    the last wins. Raises ``ValueError`` on anything that is not JSON.

    ``json.loads`` (C) does the work unless the value is deeper than the
    recursion limit; then the iterative ``_decode_deep`` gives the same result.
    """
    start = _WS.match(text, 0).end()
    try:
        value, end = _scan_once(text, start)
    except StopIteration:
        raise ValueError(f"expected a JSON value at offset {start}") from None
    except RecursionError:
        pass
    else:
        end = _WS.match(text, end).end()
        if end != len(text):
            raise ValueError(f"extra data at offset {end}")
        return value
    gc_was_enabled = _gc_isenabled()
    _gc_disable()  # see encode_json
    try:
        return _decode_deep(text)
    finally:
        if gc_was_enabled:
            _gc_enable()


def _decode_key(s, i):
    """A string key at ``s[i]`` and its ``:``; returns (key, index after)."""
    if s[i : i + 1] != '"':
        raise ValueError(f"expected a string key at offset {i}")
    key, i = _scanstring(s, i + 1, True)
    if s[i : i + 1] in _WS_CHARS:
        i = _WS.match(s, i).end()
    if s[i : i + 1] != ":":
        raise ValueError(f"expected ':' at offset {i}")
    i += 1
    if s[i : i + 1] in _WS_CHARS:
        i = _WS.match(s, i).end()
    return key, i


def _decode_deep(s):
    """Iterative JSON parser, result-identical to ``json.loads``.

    Whitespace is skipped with a regex only where there is some: the host
    writes compact JSON. (``"" in _WS_CHARS`` is true; at the end of the text
    the regex then matches nothing.)
    """
    ws = _WS.match
    number = _NUMBER.match
    blank = _WS_CHARS
    n = len(s)
    stack = []  # [container, key], key is _LIST for a list
    i = ws(s, 0).end()
    while True:
        c = s[i : i + 1]
        if c == "[":
            i += 1
            if s[i : i + 1] in blank:
                i = ws(s, i).end()
            if s[i : i + 1] == "]":
                value = []
                i += 1
            else:
                stack.append([[], _LIST])
                continue
        elif c == "{":
            i += 1
            if s[i : i + 1] in blank:
                i = ws(s, i).end()
            if s[i : i + 1] == "}":
                value = {}
                i += 1
            else:
                key, i = _decode_key(s, i)
                stack.append([{}, key])
                continue
        elif c == '"':
            value, i = _scanstring(s, i + 1, True)
        elif c == "n" and s.startswith("null", i):
            value = None
            i += 4
        elif c == "t" and s.startswith("true", i):
            value = True
            i += 4
        elif c == "f" and s.startswith("false", i):
            value = False
            i += 5
        else:
            m = number(s, i)
            if m is None:
                raise ValueError(f"expected a JSON value at offset {i}")
            integer, frac, exp = m.groups()
            if frac or exp:
                value = float(integer + (frac or "") + (exp or ""))
            else:
                value = int(integer)
            i = m.end()
        # Attach the value; close every container the text closes.
        while True:
            c = s[i : i + 1]
            if c in blank:
                i = ws(s, i).end()
                c = s[i : i + 1]
            if not stack:
                if i != n:
                    raise ValueError(f"extra data at offset {i}")
                return value
            top = stack[-1]
            container, key = top
            if key is _LIST:
                container.append(value)
                if c == ",":
                    i += 1
                    if s[i : i + 1] in blank:
                        i = ws(s, i).end()
                    break
                if c != "]":
                    raise ValueError(f"expected ',' or ']' at offset {i}")
            else:
                container[key] = value
                if c == ",":
                    i += 1
                    if s[i : i + 1] in blank:
                        i = ws(s, i).end()
                    top[1], i = _decode_key(s, i)
                    break
                if c != "}":
                    raise ValueError(f"expected ',' or '}}' at offset {i}")
            i += 1
            value = container
            stack.pop()


# --- the fd-3 channel ----------------------------------------------------
#
# fd 3 is non-blocking from the start of main(). Writes: a frame goes out
# whole (one os.write when the socket has room; otherwise wait in select()
# for writability, reading meanwhile so a host that writes synchronously
# cannot deadlock us). _lock serializes frames across threads (a program
# thread may print); a re-entrant send on the same thread (a signal handler
# printing mid-write) is queued behind the frame in progress.
#
# Reads. Boot and run frames are read by blocking in select(). Replies are
# read by whichever event loop awaits a binding call: the program may run
# no loop, one, several in a row (asyncio.run twice), nested ones in threads,
# or the private loop of a program that awaits at top level. So a call
# creates its future on the loop running it *at call time*, and that loop
# gets a reader for fd 3 while it has calls pending (_watch/_unwatch; each
# loop has its own selector, so several loops may watch fd 3 at once). A
# reader parses every complete reply line and settles each reply's future:
# directly when the future belongs to the reader's own loop, otherwise with
# the future's loop's call_soon_threadsafe. A call with no running loop (a
# coroutine driven by hand) or on a loop that cannot watch a file
# descriptor blocks in select() until its reply is in: slower, never wrong.

_lock = threading.RLock()
_inbuf = bytearray()
_scan_from = 0  # _inbuf[:_scan_from] holds no newline
_sending = False
_backlog = []
_pending = {}  # call id -> asyncio Future, or a _Slot for a blocking call
_watched = {}  # id(loop) -> [loop, calls pending on it]; it reads fd 3 meanwhile
_ids = itertools.count()


class _Slot(list):
    """Where a blocking call's reply lands: ``[(ok, value_or_message)]``."""

    __slots__ = ()


# Reads land in one preallocated buffer: os.read(fd, n) would allocate
# (and, at this size, mmap and page-fault) a fresh n-byte object per call,
# which cost more than the rest of a binding call's round trip together.
_readbuf = bytearray(_READ_CHUNK)
_readview = memoryview(_readbuf)


def _pump():
    """Move what fd 3 has into _inbuf; exit if the host is gone."""
    try:
        n = _os_readv(_FD, (_readbuf,))
    except BlockingIOError:
        return False
    except OSError as e:
        _die(_EXIT_HOST_GONE, f"reading fd {_FD} failed: {e}")
    if not n:
        _die(_EXIT_HOST_GONE)
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
        _die(_EXIT_BAD_HOST_FRAME, f"host frame is not UTF-8: {e}")


def _host_frame(line):
    """Parse one host line into a dict with a str ``type``; exit if malformed."""
    try:
        frame = decode_json(line)
    except (ValueError, MemoryError) as e:
        _die(_EXIT_BAD_HOST_FRAME, f"host frame is not JSON: {e}")
    if type(frame) is not dict or type(frame.get("type")) is not str:
        _die(_EXIT_BAD_HOST_FRAME, "host frame is not an object with a string type")
    return frame


def _read_frame():
    """Block until the next host frame (boot and run phases)."""
    while True:
        line = _take_line()
        if line is not None:
            return _host_frame(line)
        try:
            _select((_FD,), (), ())
        except (OSError, ValueError) as e:
            _die(_EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
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
            _die(_EXIT_HOST_GONE, f"writing fd {_FD} failed: {e}")
        if done >= len(data):
            return
        if view is None:
            view = memoryview(data)
        try:
            readable, _, _ = _select((_FD,), (_FD,), ())
        except (OSError, ValueError) as e:
            _die(_EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
        if readable and _pump():
            _dispatch_replies()


def _send(data):
    """Write one whole frame (bytes ending in a newline) to fd 3."""
    global _sending
    with _lock:
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
    with _lock:
        _pump()
    _dispatch_replies()


def _watch(loop):
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


def _unwatch(loop):
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
        with _lock:
            line = _take_line()
        if line is None:
            return
        frame = _host_frame(line)
        call_id = frame.get("id")
        ok = frame.get("ok")
        if (
            frame["type"] != "reply"
            or type(call_id) is not int
            or call_id < 0
            or type(ok) is not bool
            or (ok and "value" not in frame)
            or (not ok and type(frame.get("message")) is not str)
        ):
            _die(_EXIT_BAD_HOST_FRAME, "expected a reply frame with id, ok and value or message")
        result = (ok, frame["value"] if ok else frame["message"])
        # Under the lock: a call waiting inline may hand its entry over to
        # a future (``_call_inline``), and must never miss a reply that
        # landed in its slot meanwhile.
        with _lock:
            target = _pending.pop(call_id, None)
            if type(target) is _Slot:
                target.append(result)
                continue
        if target is None:
            continue
        loop = target.get_loop()
        if loop is _get_running_loop():
            _resolve(target, result)
        else:
            try:
                loop.call_soon_threadsafe(_resolve, target, result)
            except Exception:  # the loop is closed: nobody awaits this call
                pass


#: Modules whose selector loop classes ``_idle_wait`` can read: the
#: bootstrap's own loop and the standard ones (``asyncio.run`` makes a
#: ``_UnixSelectorEventLoop``). A program's subclass may override anything.
_INLINE_LOOP_MODULES = frozenset(("asyncio.unix_events", "asyncio.selector_events", __name__))
_BaseSelectorEventLoop = asyncio.selector_events.BaseSelectorEventLoop


def _idle_wait(loop):
    """How long ``loop`` would now wait in its selector for nothing but its
    own wake-up pipe and fd 3, or None when it has other work: a callback
    ready, a timer due, another file descriptor to watch.

    When it has none, a call can wait for its reply right here (see
    ``_call_inline``) and the loop loses nothing: it would have blocked on
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
            return _INLINE_WAIT_SECONDS
        timeout = scheduled[0]._when - loop.time()
        if timeout <= 0:
            return None
        return min(timeout, _INLINE_WAIT_SECONDS)
    except Exception:  # not the loop internals we know: take the loop's path
        return None


def _call_inline(loop, call_id, frame, timeout):
    """Send a call and wait for its reply without an iteration of ``loop``
    (which ``_idle_wait`` found idle).

    Returns ``(True, (ok, value_or_message))``, or ``(False, future)`` when
    the loop must take over first (a timer came due, another thread woke
    it): the call is then pending as ``future`` on ``loop``, which is
    watching fd 3, and the caller awaits it the loop's way (and unwatches).
    """
    slot = _Slot()
    _pending[call_id] = slot
    wake = loop._ssock.fileno()
    _send(frame)
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
                _die(_EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
        if (left is not None and left <= 0) or wake in readable:
            if not _watch(loop):
                # It cannot read fd 3 after all (closed meanwhile): the
                # reply can only be waited for here, on fd 3 alone (the
                # wake fd stays readable) and with no deadline.
                deadline = None
                watched = (_FD,)
                continue
            # Hand the call to the loop. Under the lock, so a reply another
            # thread dispatches lands either in the slot (seen here) or in
            # the future.
            with _lock:
                if slot:
                    _unwatch(loop)
                    return True, slot[0]
                future = _Future(loop=loop)
                _pending[call_id] = future
            return False, future
        if readable:
            with _lock:
                _pump()


def _call_blocking(call_id, frame):
    """One call round trip without an event loop: ``(ok, value_or_message)``."""
    slot = _Slot()
    _pending[call_id] = slot
    try:
        _send(frame)
        while True:
            _dispatch_replies()
            if slot:
                return slot[0]
            try:
                # A timeout: another thread's loop may read this reply.
                readable, _, _ = _select((_FD,), (), (), _BLOCKING_POLL_SECONDS)
            except (OSError, ValueError) as e:
                _die(_EXIT_HOST_GONE, f"waiting on fd {_FD} failed: {e}")
            if readable:
                with _lock:
                    _pump()
    finally:
        _pending.pop(call_id, None)


# --- logs ----------------------------------------------------------------

_log_left = 0  # bytes the ledger still accepts; -1 once the marker is sent
_marker_frame = b""


def _log(text):
    """Send ``text`` as log frames, within the maxLogBytes ledger."""
    global _log_left
    if not text:
        return
    with _lock:
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
            _send(('{"type":"log","text":' + _quote(text) + "}\n").encode("utf-8"))
            return
        if data is None:
            fits = text[:_log_left]
        else:
            fits = data[:_log_left].decode("utf-8", "ignore")  # drops a cut character
        _log_left = -1
        if fits:
            _send(('{"type":"log","text":' + _quote(fits) + "}\n").encode("utf-8"))
        _send(_marker_frame)


class _LogBuffer(io.BufferedIOBase):
    """``sys.stdout.buffer``: bytes are decoded as UTF-8 and logged."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self):
        return True

    def write(self, data):
        data = bytes(memoryview(data))
        _log(self._decoder.decode(data))
        return len(data)

    def flush(self):
        pass


class _LogWriter(io.TextIOBase):
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
        _log(s)
        return len(s)

    def flush(self):
        pass


_stdout = _LogWriter("<stdout>")
_stderr = _LogWriter("<stderr>")


# --- boot ----------------------------------------------------------------


def _bad_boot(what):
    _die(_EXIT_BAD_HOST_FRAME, f"malformed boot frame: {what}")


def _utf8_str(x):
    if type(x) is not str:
        return False
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_boot(frame):
    """Validate ``boot``; return (limits dict, [(global, names, error_class, docs)])."""
    if frame["type"] != "boot":
        _bad_boot(f"expected boot, got {frame['type']!r}")
    limits = {}
    for key in ("cpuSeconds", "addressSpaceBytes", "maxLogBytes", "maxValueBytes"):
        v = frame.get(key)
        if type(v) is not int or v < 0:
            _bad_boot(f"{key} must be a non-negative integer")
        limits[key] = v
    session = frame.get("session", False)
    if type(session) is not bool:
        _bad_boot("session must be a boolean")
    limits["session"] = session
    entries = frame.get("namespaces")
    if type(entries) is not list:
        _bad_boot("namespaces must be a list")
    seen = set()
    namespaces = []
    for entry in entries:
        if type(entry) is not dict:
            _bad_boot("a namespace entry must be an object")
        glob = entry.get("global")
        names = entry.get("names")
        error_class = entry.get("errorClass")  # absent or null: none
        if type(glob) is not str or not _IDENT.match(glob) or glob in _RESERVED_GLOBALS:
            _bad_boot(f"namespace global {glob!r} is not a usable identifier")
        if type(names) is not list or not all(_utf8_str(name) for name in names):
            _bad_boot(f"names of {glob} must be a list of strings")
        injected = [glob]
        if error_class is not None:
            if type(error_class) is not dict:
                _bad_boot(f"errorClass of {glob} must be an object")
            class_name = error_class.get("name")
            prop = error_class.get("memberNameProperty")
            if (
                type(class_name) is not str
                or not _IDENT.match(class_name)
                or class_name in _RESERVED_GLOBALS
            ):
                _bad_boot(f"errorClass name {class_name!r} is not a usable identifier")
            if not _utf8_str(prop) or not prop:
                _bad_boot(f"memberNameProperty of {class_name} must be a non-empty string")
            error_class = (class_name, prop)
            injected.append(class_name)
        for name in injected:
            if name in seen:
                _bad_boot(f"global {name} is injected twice")
            seen.add(name)
        docs = _check_docs(glob, entry.get("doc"), entry.get("docs"))
        namespaces.append((glob, names, error_class, docs))
    return limits, namespaces


def _check_docs(glob, doc, docs):
    """``(namespace doc or None, {member: doc})`` from a namespace entry."""
    if doc is not None and not _utf8_str(doc):
        _bad_boot(f"doc of {glob} must be a string")
    if docs is None:
        docs = {}
    if type(docs) is not dict or not all(_utf8_str(d) for d in docs.values()):
        _bad_boot(f"docs of {glob} must be an object of strings")
    return doc, docs


def _set_limit(which, soft, hard):
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    try:
        resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError) as e:
        _die(_EXIT_INTERNAL, f"cannot set resource limit {which} to {(soft, hard)}: {e}")


def _apply_limits(limits):
    cpu = limits["cpuSeconds"]
    if cpu and not limits["session"]:
        _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    address_space = limits["addressSpaceBytes"]
    if address_space:
        _set_limit(resource.RLIMIT_AS, address_space, address_space)


def _run_budgets(run, limits):
    """A run's budgets: its own (a session run carries them) or boot's."""
    budgets = {}
    for key in ("cpuSeconds", "maxLogBytes", "maxValueBytes"):
        v = run.get(key, limits[key])
        if type(v) is not int or v < 0:
            _die(_EXIT_BAD_HOST_FRAME, f"run.{key} must be a non-negative integer")
        budgets[key] = v
    return budgets


def _start_run(budgets, session):
    """Per-run state: the log ledger, and in a session the CPU budget counted
    from now (the soft RLIMIT_CPU moves; SIGXCPU ends the session's process
    when a run overspends, and each run's wall clock bounds one that
    handles SIGXCPU)."""
    global _log_left, _marker_frame
    max_log_bytes = budgets["maxLogBytes"]
    _log_left = max_log_bytes
    marker = _quote(log_truncation_marker(max_log_bytes))
    _marker_frame = ('{"type":"log","text":' + marker + ',"truncated":true}\n').encode("utf-8")
    cpu = budgets["cpuSeconds"]
    if session and cpu:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        _set_limit(resource.RLIMIT_CPU, used + cpu, hard)


def _call_label(glob, name):
    return f"{glob}.{name}" if _IDENT.match(name) else f"getattr({glob}, {name!r})"


def _call_payload(label, args, kwargs):
    """The JSON text a call sends: keyword arguments as an object, one
    positional argument as it is, no argument as ``{}``."""
    if kwargs:
        if args:
            raise TypeError(
                f"{label}() takes keyword arguments or one positional argument, not both "
                f"(got {len(args)} positional and {len(kwargs)} keyword)"
            )
        value = kwargs
    elif len(args) == 1:
        value = args[0]
    elif not args:
        value = {}
    else:
        raise TypeError(
            f"{label}() takes keyword arguments or one positional argument "
            f"({len(args)} positional given)"
        )
    try:
        return encode_json(value)
    except NotJsonError as e:
        raise TypeError(f"argument of {label}() is not JSON: {e}") from None


def _make_member(glob, name, error_class, prop):
    """The async callable behind ``<glob>.<name>``."""
    head = '{"type":"call","id":'
    tail = ',"global":' + _quote(glob) + ',"name":' + _quote(name) + ',"args":'
    label = _call_label(glob, name)

    async def member(*args, **kwargs):
        payload = _call_payload(label, args, kwargs)
        call_id = next(_ids)
        frame = (head + str(call_id) + tail + payload + "}\n").encode("utf-8")
        loop = _get_running_loop()
        timeout = _idle_wait(loop) if loop is not None else None
        if timeout is not None:
            # Nothing else to run: answer it here, without a loop iteration
            # (the sequential-await fast path), unless the loop must take over.
            try:
                answered, reply = _call_inline(loop, call_id, frame, timeout)
                if answered:
                    ok, result = reply
                else:
                    try:
                        ok, result = await reply
                    finally:
                        _unwatch(loop)
            finally:
                _pending.pop(call_id, None)
        elif loop is not None and _watch(loop):
            try:
                future = _Future(loop=loop)
                _pending[call_id] = future
                _send(frame)
                ok, result = await future
            finally:
                _pending.pop(call_id, None)
                _unwatch(loop)
        else:
            ok, result = _call_blocking(call_id, frame)
        if ok:
            return result
        if error_class is None:
            raise RuntimeError(result)
        error = error_class(result)
        setattr(error, prop, name)
        raise error

    member.__name__ = name
    member.__qualname__ = f"{glob}.{name}"
    return member


def _make_namespace(glob, members, doc=None):
    """The program's ``<glob>`` object: every member name, dunders included,
    is an attribute; other dunders fall back to ``object``. ``doc`` is what
    ``help(<glob>)`` shows."""

    def __getattribute__(self, attr):
        try:
            return members[attr]
        except KeyError:
            pass
        if attr[:2] == "__" and attr[-2:] == "__":
            return _object_getattribute(self, attr)
        raise AttributeError(f"namespace {glob!r} has no member {attr!r}")

    def __setattr__(self, attr, value):
        raise AttributeError(f"namespace {glob!r} is read-only")

    def __repr__(self):
        return f"<pycage namespace {glob} ({len(members)} members)>"

    def __dir__(self):
        return list(members)

    cls = type(
        "Namespace",
        (),
        {
            "__slots__": (),
            "__getattribute__": __getattribute__,
            "__setattr__": __setattr__,
            "__delattr__": __setattr__,
            "__repr__": __repr__,
            "__dir__": __dir__,
            "__module__": "pycage",
            "__doc__": doc,
        },
    )
    return cls()


def _build_globals(namespaces):
    injected = {}
    for glob, names, error_class, (ns_doc, docs) in namespaces:
        cls = prop = None
        if error_class is not None:
            class_name, prop = error_class
            doc = f"Raised when a call on {glob} fails; attribute {prop!r} names the member."
            cls = type(
                class_name,
                (Exception,),
                {"__module__": "__main__", "__qualname__": class_name, "__doc__": doc},
            )
            injected[class_name] = cls
        members = {name: _make_member(glob, name, cls, prop) for name in names}
        for name, text in docs.items():
            if name in members:
                members[name].__doc__ = text
        injected[glob] = _make_namespace(glob, members, ns_doc)
    return injected


# --- run ----------------------------------------------------------------


def new_program_globals(injected):
    """Fresh globals of a new module ``__main__`` holding ``injected`` (the
    namespaces and error classes); the module replaces ``sys.modules["__main__"]``
    and ``sys.argv`` becomes a script's."""
    module = ModuleType("__main__")
    program_globals = module.__dict__
    program_globals.clear()
    program_globals.update(
        __annotations__={},
        __builtins__=_builtins_module,
        __cached__=None,
        __doc__=None,
        __file__=_PROGRAM,
        __loader__=None,
        __name__="__main__",
        __package__=None,
        __spec__=None,
    )
    program_globals.update(injected)
    sys.modules["__main__"] = module
    sys.argv = [_PROGRAM]
    return program_globals


def compile_for(source):
    """The program compiled as a script (``pycage.script``); its lines go
    into ``linecache`` so tracebacks quote them. Raises what ``compile`` raises."""
    linecache.cache[_PROGRAM] = (len(source), None, source.splitlines(True), _PROGRAM)
    return script.compile_program(source)


class Outcome:
    """How a run ended: ``error`` (the exception that ended it, or None),
    else ``has_value``/``value``. ``loop`` is the private loop of a program
    that awaited at top level, closed by ``close_outcome``; ``signals`` is
    what ``_quiet_signals`` changed."""

    __slots__ = ("error", "has_value", "value", "loop", "signals")

    def __init__(self):
        self.error = None
        self.has_value = False
        self.value = None
        self.loop = None
        self.signals = _SignalState()


def run_program(program, program_globals):
    """Run a compiled program in ``program_globals``: with no event loop
    running, or on a fresh private loop when it awaits at top level.

    When this returns, the shared builtins are restored and the program's
    signal handlers are quiet, so encoding the value cannot be interrupted.
    """
    outcome = Outcome()
    try:
        try:
            if program.is_coroutine:
                _run_in_loop(program.code, program_globals, outcome)
            else:
                eval(program.code, program_globals)
        finally:
            # First thing after the program, whichever way it ended. A
            # handler that raises before the signals are quiet raises here,
            # inside the try: the run then ends with that exception.
            _restore_builtins()
            _quiet_signals(outcome.signals)
    except BaseException as exc:
        outcome.error = exc
    if outcome.error is None:
        outcome.has_value, outcome.value = program.value()
    return outcome


async def _await_program(code, program_globals):
    """The program's coroutine, with its exception (or None) as the result."""
    try:
        await eval(code, program_globals)
    except BaseException as exc:
        _restore_builtins()
        return exc
    _restore_builtins()
    return None


def _run_in_loop(code, program_globals, outcome):
    loop = outcome.loop = _Loop(_Selector())
    _set_event_loop(loop)
    task = loop.create_task(_await_program(code, program_globals))
    loop_error = None
    try:
        loop.run_until_complete(task)
    except BaseException as exc:  # the program broke the loop or stopped it
        loop_error = exc
    _restore_builtins()
    if task.done() and not task.cancelled() and task.exception() is None:
        outcome.error = task.result()
    else:
        outcome.error = loop_error or RuntimeError("the program's main task did not finish")


def close_outcome(outcome):
    """Cancel what a top-level-await program left running on its loop,
    give it a grace period, close the loop. Runs program code (``finally``
    blocks of cancelled tasks): call it after ``outcome_frame``."""
    loop = outcome.loop
    outcome.loop = None
    if loop is None:
        return
    try:
        tasks = [t for t in _all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        # Nothing left running and no async generator to finalize (the
        # common case): skip the loop iterations a cleanup costs.
        if tasks or loop._asyncgens:
            tasks.append(loop.create_task(loop.shutdown_asyncgens()))
            loop.run_until_complete(_wait(tasks, timeout=_CLEANUP_GRACE_SECONDS))
    except BaseException:
        pass
    try:
        loop.close()
    except BaseException:
        pass
    try:
        _set_event_loop(None)
    except BaseException:
        pass


# --- signals after the program --------------------------------------------


class _SignalState:
    """What ``_quiet_signals`` changed: the thread's signal mask before (None
    until blocked) and each Python-level handler it replaced."""

    __slots__ = ("mask", "handlers")

    def __init__(self):
        self.mask = None
        self.handlers = {}


def _quiet_once(state):
    if state.mask is None:
        state.mask = _pthread_sigmask(_SIG_BLOCK, _ALL_SIGNALS)
    for sig in _HANDLER_SIGNALS:
        handler = _getsignal(sig)
        # None: not set from Python; SIG_DFL / SIG_IGN are ints.
        if handler is None or issubclass(type(handler), int):
            continue
        state.handlers.setdefault(sig, handler)
        try:
            _setsignal(sig, _SIG_IGN)
        except (OSError, ValueError):
            pass


def _quiet_signals(state):
    """Block every signal in this thread and set every Python-level handler
    to ``SIG_IGN``, so no program handler runs while the outcome is encoded
    and sent.

    Blocking alone is not enough: a signal may already be pending, or be
    delivered to another thread of the program, and CPython runs Python
    handlers in the main thread either way; a handler replaced by SIG_IGN
    is skipped even when its signal is pending. A handler may raise while
    this runs; that attempt is retried (the state records what was already
    changed, so nothing is saved twice). The host's SIGTERM/SIGKILL still end
    the process: SIGKILL cannot be blocked, and a one-shot child exits right
    after ``done`` (a session calls ``_restore_signals`` instead).
    """
    for _ in range(_QUIET_ATTEMPTS):
        try:
            _quiet_once(state)
            return
        except BaseException:  # a program handler raised meanwhile
            pass


def _restore_signals(state):
    """Undo ``_quiet_signals``: handlers first, then the mask (pending
    signals are delivered once the mask is restored)."""
    for sig, handler in state.handlers.items():
        try:
            _setsignal(sig, handler)
        except (OSError, ValueError, TypeError):
            pass
    state.handlers = {}
    if state.mask is not None:
        _pthread_sigmask(_SIG_SETMASK, state.mask)
        state.mask = None


# --- outcome -------------------------------------------------------------


def _restore_builtins():
    _builtins_module.__dict__.update(_PRIVATE_BUILTINS)


#: Host path prefixes and where the program sees them: set by a zygote's
#: child that joined a sandbox (the zygote's modules were imported at host
#: paths), so tracebacks name files the program can see, with their lines.
_PATH_REMAPS = []


def set_path_remaps(remaps):
    """Use ``[(host_prefix, inside_prefix), ...]`` for traceback file names."""
    _PATH_REMAPS[:] = [(h, i) for h, i in remaps]


def _inside_path(path):
    for host, shown in _PATH_REMAPS:
        if path == host or path.startswith(host + "/"):
            return shown + path[len(host) :]
    return path


def _drop_bootstrap_frames(te):
    """Remove pycage's own frames from a TracebackException and its chain,
    and show the others' files as the program sees them."""
    seen = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        stack = t.stack
        kept = [f for f in stack if f.filename not in _OWN_FILES]
        if len(kept) != len(stack):
            stack[:] = kept
        if _PATH_REMAPS:
            for f in stack:
                f.filename = _inside_path(f.filename)
        todo.append(t.__cause__)
        todo.append(t.__context__)
        todo.extend(getattr(t, "exceptions", None) or ())


def _format_exception(exc):
    """Traceback text pointing at ``<program>`` lines, without pycage's frames."""
    try:
        # Lines are looked up when formatted, after the file names moved.
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
        _drop_bootstrap_frames(te)
        text = "".join(te.format())
    except BaseException:
        try:
            text = f"{_type_name(type(exc))} (the exception could not be formatted)"
        except BaseException:
            text = "the program raised an exception that could not be formatted"
    return _clean(text.rstrip("\n"))


def _format_compile_error(exc, source):
    """A compile failure without a traceback: for a SyntaxError, its
    ``File "<program>", line N``, the line, a caret and the message."""
    try:
        if isinstance(exc, SyntaxError) and exc.text is None:
            lines = source.splitlines(True)
            lineno = exc.lineno
            if type(lineno) is int and 0 < lineno <= len(lines):
                exc.text = lines[lineno - 1]
        text = "".join(traceback.format_exception_only(type(exc), exc))
    except BaseException:
        text = f"{_type_name(type(exc))} (the error could not be formatted)"
    return _clean(text.rstrip("\n"))


def _done_error(kind, message):
    head = '{"type":"done","error":{"kind":"' + kind + '","message":'
    return (head + _quote(_clean(message)) + "}}\n").encode("utf-8")


_DONE_NO_VALUE = b'{"type":"done"}\n'


def _is_clean_exit(exc):
    """``sys.exit()``, ``sys.exit(0)``, ``exit()``: a script that exits 0."""
    if type(exc) is not SystemExit:
        return False
    code = exc.code
    return code is None or code is False or (type(code) is int and code == 0)


def outcome_frame(outcome, max_value_bytes):
    """The ``done`` frame for an outcome, as bytes.

    ``invalid-output`` means only that the value is not JSON. Any other
    failure to encode (a thread of the program changing the value mid-walk,
    or running out of memory) is retried and then reported as an
    ``exception``.
    """
    error = outcome.error
    if error is not None:
        if _is_clean_exit(error):
            return _DONE_NO_VALUE
        return _done_error("exception", _format_exception(error))
    if not outcome.has_value:
        return _DONE_NO_VALUE
    _quiet_signals(outcome.signals)  # again: a no-op unless interrupted before
    failure = None
    for _ in range(_ENCODE_ATTEMPTS):
        try:
            body = encode_json(outcome.value, max_value_bytes)
        except NotJsonError as e:
            return _done_error("invalid-output", f"return value is not JSON: {e}")
        except OverBudgetError:
            message = f"return value is over the {max_value_bytes}-byte value budget"
            return _done_error("output-limit", message)
        except BaseException as e:
            failure = e
            continue
        return ('{"type":"done","value":' + body + "}\n").encode("utf-8")
    try:
        reason = f"{_type_name(type(failure))}: {failure}"
    except BaseException:
        reason = "an error that could not be formatted"
    return _done_error(
        "exception",
        f"the return value could not be encoded ({reason}); "
        "did another thread of the program change it while it was read?",
    )


def _finish(frame):
    """Send ``done`` and exit; holding the lock keeps later frames out.

    The yield between them is for the host's sake: a write on a Unix socket
    is a synchronous wake-up, so the scheduler tends to queue the host's
    reader on this CPU, behind this process, and exiting (unmapping a
    forked interpreter) kept it waiting ~0.6 ms of a ~1.3 ms trivial run.
    """
    with _lock:
        _send(frame)
        _sched_yield()
        _os_exit(0)


# --- warm-up --------------------------------------------------------------

_WARM_UP_PROGRAM = """\
import asyncio
async def _f(x):
    await asyncio.sleep(0)
    return {"a": [x, 2.5, "s", None, True], "t": (1, 2)}
value = await _f(1)
try:
    raise ValueError("warm")
except ValueError:
    pass
return value
"""


def warm_up():
    """Exercise a run's common path once, with nothing sent: compile, a
    loop, the codec, traceback formatting.

    A child forked from the zygote shares the zygote's memory copy-on-write,
    and CPython writes to every object it touches (reference counts), so the
    first run in a fresh child takes hundreds of page faults. A pooled child
    calls this while it waits for its run, which moves those faults off the
    run's critical path. Leaves no state behind: the globals, loop and
    signal state it used are discarded or restored.
    """
    program = compile_for(_WARM_UP_PROGRAM)
    outcome = run_program(program, new_program_globals({}))
    if outcome.has_value:
        decode_json(encode_json(outcome.value))
    _format_exception(ValueError("warm"))
    close_outcome(outcome)
    _restore_signals(outcome.signals)
    linecache.cache.pop(_PROGRAM, None)


# --- main ----------------------------------------------------------------


def main():
    """Serve one run on fd 3, then exit the process (never returns)."""
    try:
        _serve()
    except BaseException:
        try:
            _diag("internal error:\n" + traceback.format_exc())
        finally:
            _os_exit(_EXIT_INTERNAL)
    _os_exit(_EXIT_INTERNAL)


def _serve():
    try:
        os.set_blocking(_FD, False)
    except OSError as e:
        _die(_EXIT_HOST_GONE, f"fd {_FD} is not usable: {e}")

    limits, namespaces = _check_boot(_read_frame())
    session = limits["session"]
    _apply_limits(limits)
    injected = _build_globals(namespaces)
    _send(b'{"type":"boot-ack"}\n')

    program_globals = None
    # One run, or in a session one run after another in the same globals.
    while True:
        run = _read_frame()
        if run["type"] != "run" or type(run.get("program")) is not str:
            _die(_EXIT_BAD_HOST_FRAME, "expected a run frame with a string program")
        source = run["program"]
        budgets = _run_budgets(run, limits)
        _start_run(budgets, session)
        if program_globals is None:
            program_globals = new_program_globals(injected)
            sys.stdout = _stdout  # from here on, compile warnings included, output is log frames
            sys.stderr = _stderr
        try:
            program = compile_for(source)
        except BaseException as exc:  # SyntaxError, ValueError (NUL), RecursionError, ...
            frame = _done_error("exception", _format_compile_error(exc, source))
            if not session:
                _finish(frame)
            _send(frame)
            continue
        outcome = run_program(program, program_globals)
        # Encode first: the loop's cleanup runs program code that could change the value.
        frame = outcome_frame(outcome, budgets["maxValueBytes"])
        close_outcome(outcome)
        _pending.clear()
        if not session:
            _finish(frame)
        # The session goes on: the program's signal handlers come back.
        _restore_signals(outcome.signals)
        _send(frame)
