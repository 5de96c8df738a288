"""What a script does at exit, done before a one-shot run's ``done``.

A one-shot child ends with ``os._exit`` once ``done`` is sent, which skips
everything CPython's own exit does (``Py_FinalizeEx``). A script relies on
some of it: an unclosed ``csv.writer(open("out/x.csv", "w"))`` is written
only when its buffer is flushed, ``atexit`` handlers and non-daemon threads
are part of what a program does. ``program_exit`` does that work, in
CPython's order, while the run is still live: before ``done``, so within
the run's CPU and wall-clock budgets and its log ledger, and before the
host collects ``out/`` (which it does once ``done`` arrived):

1. join the non-daemon threads (``threading._shutdown``: the threading
   module's own exit hooks first, which shut executors down and wait for
   their work);
2. run the ``atexit`` handlers (their exceptions are printed as CPython
   prints them, on stderr);
3. close the file objects still open, as their finalizers would: outer
   layers first (a ``TextIOWrapper`` before the buffer under it), so every
   buffered byte reaches its file (``gzip`` writes its trailer);
4. flush the C library's ``stdout`` buffers (C code that used ``printf``).

Each step is skipped when it has nothing to do, which ``note_baseline``
(read as the run starts) and a look at the run's open descriptors tell
cheaply: a program that left no handler, thread or file costs a few
microseconds here. The value of the run is encoded before any of this runs
(a handler that changes it changes nothing), and signals stay as quiet as
they are while ``done`` is built.

Not done: clearing the program's module globals (``__del__`` methods of
other objects); an ``os._exit`` costs nothing where a teardown of every
object of a large program would cost its deallocation.
"""

import _io
import atexit
import gc
import os
import sys
import threading

from pycage._private import BUILTINS

__builtins__ = BUILTINS

_ncallbacks = atexit._ncallbacks
_run_exitfuncs = atexit._run_exitfuncs
_threading = threading
_listdir = os.listdir
_get_objects = gc.get_objects
_IOBase = _io._IOBase
_get_referents = gc.get_referents
#: In-memory streams: nothing to write anywhere.
_IN_MEMORY = (_io.StringIO, _io.BytesIO)
#: Descriptors the child itself holds for the whole run: stdio and fd 3.
_OWN_FDS = 4

#: What ``note_baseline`` read: atexit handlers, logging handlers,
#: threading's exit hooks.
_baseline = [0, 0, 0]


def _handler_count():
    logging = sys.modules.get("logging")
    handlers = getattr(logging, "_handlerList", None) if logging is not None else None
    return len(handlers) if type(handlers) is list else 0


def _exit_handlers_due():
    """Whether the ``atexit`` handlers have work: the program added one, or
    made what a handler registered before it takes care of (a ``logging``
    handler: ``logging.shutdown`` flushes it; a ``multiprocessing`` child:
    its exit handler joins it)."""
    if _ncallbacks() != _baseline[0] or _handler_count() != _baseline[1]:
        return True
    process = sys.modules.get("multiprocessing.process")
    children = getattr(process, "_children", None) if process is not None else None
    return bool(children) if type(children) is set else False


def note_baseline():
    """Remember, as a one-shot run starts, what exit handlers exist before
    the program (those of the modules the child imported: ``logging``'s
    shutdown, an executor module's hook); ``program_exit`` runs them all,
    but only when the program gave them something to do."""
    _baseline[0] = _ncallbacks()
    _baseline[1] = _handler_count()
    _baseline[2] = len(_threading._threading_atexits)


def _threads_to_join():
    """Whether threading's exit would wait for anything: a non-daemon thread
    other than this one (an executor's workers are), or an exit hook of
    ``threading`` added during the run (one registered before it, by a
    module the child imported, has nothing of the program's to wait for
    unless such a thread runs)."""
    if len(_threading._threading_atexits) != _baseline[2]:
        return True
    current = _threading.current_thread()
    for thread in list(_threading._active.values()):
        if thread is not current and not thread.daemon:
            return True
    return False


def _descriptors_open():
    """Whether the program left a descriptor open above the child's own
    (the listing's own descriptor is one of them)."""
    try:
        names = _listdir("/proc/self/fd")
    except OSError:
        return True
    extra = 0
    for name in names:
        if not name.isdigit() or int(name) >= _OWN_FDS:
            extra += 1
    return extra > 1


def _open_files(keep):
    """The program's file objects, oldest first (by type only: no code of
    the program runs to find them)."""
    found = []
    kept = [id(k) for k in keep]
    # Oldest generation first: their concatenation is about creation order.
    for generation in (2, 1, 0):
        for obj in _get_objects(generation):
            t = type(obj)
            if issubclass(t, _IOBase) and not issubclass(t, _IN_MEMORY) and id(obj) not in kept:
                found.append(obj)
    return found


def _closing_order(found):
    """``found`` ordered so that a file object comes before the ones it
    wraps (a ``TextIOWrapper`` before its buffer, a ``GzipFile`` before the
    file it writes to: closing the inner one first would lose what the
    outer one still holds), and otherwise the newest first. What an object
    wraps is what it refers to, directly or through its ``__dict__``."""
    index = {id(obj): i for i, obj in enumerate(found)}
    inner = []
    wrappers = [0] * len(found)
    for obj in found:
        wrapped = set()
        for ref in _get_referents(obj):
            i = index.get(id(ref))
            if i is not None:
                wrapped.add(i)
            elif type(ref) is dict:
                for value in _get_referents(ref):
                    i = index.get(id(value))
                    if i is not None:
                        wrapped.add(i)
        wrapped.discard(index[id(obj)])
        inner.append(wrapped)
        for i in wrapped:
            wrappers[i] += 1
    order = []
    done = [False] * len(found)
    while len(order) < len(found):
        ready = [i for i in range(len(found) - 1, -1, -1) if not done[i] and not wrappers[i]]
        if not ready:  # a cycle of wrappers: the rest, newest first
            ready = [i for i in range(len(found) - 1, -1, -1) if not done[i]]
        for i in ready:
            done[i] = True
            order.append(found[i])
            for j in inner[i]:
                wrappers[j] -= 1
    return order


def close_open_files(keep=()):
    """Close the file objects of the program still open, each as its
    finalizer would (``close()``, which flushes), a wrapper before what it
    wraps (``_closing_order``). In-memory streams and the objects in
    ``keep`` (the child's own streams) are left alone; a stream on one of
    the child's descriptors (stdio, fd 3) is flushed, not closed. An
    exception is printed as a finalizer's is. Returns how many were closed."""
    closed = 0
    for obj in _closing_order(_open_files(keep)):
        try:
            if obj.closed:
                continue
            try:
                fd = obj.fileno()
            except Exception:  # no descriptor of its own (a wrapper of something else)
                fd = -1
            if 0 <= fd < _OWN_FDS:
                obj.flush()
            else:
                obj.close()
                closed += 1
        except Exception as e:
            _unraisable(e, obj)
    return closed


def _unraisable(exc, obj):
    """An exception of exit work, printed on stderr as CPython prints a
    finalizer's: ``Exception ignored in: <object>`` and the traceback."""
    try:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(f"Exception ignored in: {obj!r}\n{text}")
    except BaseException:
        pass


def _load_libc():
    """The C library through ``ctypes``, when ``ctypes`` is loaded already
    (the zygote's children always have it: it is loaded there, before they
    are forked), never imported for this; None otherwise."""
    if not _libc:
        ctypes = sys.modules.get("ctypes")
        if ctypes is None:
            return None
        try:
            _libc.append(ctypes.CDLL(None).fflush)
        except Exception:
            return None
    return _libc[0]


def _flush_c_stdio():
    """``fflush(NULL)``, as the C library's ``exit`` does."""
    fflush = _load_libc()
    if fflush is not None:
        try:
            fflush(None)
        except Exception:
            pass


def warm():
    """Take the checks a run's exit makes once, acting on nothing (the
    child's warm-up, ``bootstrap.warm_up``, so that they are not a pooled
    child's first code to run at its exit), and load the C library's
    ``fflush`` where ``ctypes`` is loaded."""
    note_baseline()
    _threads_to_join()
    _exit_handlers_due()
    _descriptors_open()
    _load_libc()


#: The C library's ``fflush``, once ``_load_libc`` found it.
_libc = []


def program_exit(keep=()):
    """Do what CPython's exit does for the program that just ran (see the
    module docs). Never raises."""
    try:
        if _threads_to_join():
            _threading._shutdown()
    except BaseException as e:
        _unraisable(e, _threading._shutdown)
    try:
        if _exit_handlers_due():
            _run_exitfuncs()
    except BaseException as e:
        _unraisable(e, _run_exitfuncs)
    try:
        if _descriptors_open():
            close_open_files(keep)
    except BaseException:
        pass
    _flush_c_stdio()
