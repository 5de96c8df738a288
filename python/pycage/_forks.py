"""The zygote's fork: a child without CPython's after-fork work it does not need.

``os.fork()`` runs CPython's after-fork steps in the child (it re-creates
the GIL, the import lock and the runtime's other locks, clears pending
signals) and then every ``after_in_child`` hook that a module registered
with ``os.register_at_fork``. In a fresh child each Python object those
steps touch is a copy-on-write fault: with the zygote's imports, a fork
and an immediate exit took 231-249 faults and 1.2-1.4 ms of CPU in the
child on a small VM, and 91 faults and 0.7-1.0 ms without those steps
(``random``'s reseed kept; BENCHMARKS.md). ``threading``'s hook, which
rebuilds the thread table and every lock of the main thread, is a quarter
of them, for a process that has one thread and so nothing to rebuild.

The zygote has one thread when it forks (it checks, and refuses to fork
otherwise), with the GIL held and no import in progress: every lock those
steps re-create is free, the thread's identity (``pthread_self``, its
thread state) is the same in the child, and no other interpreter or thread
state exists. So :func:`fork` calls the C library's ``fork`` with the GIL
held (through ``ctypes.PyDLL``, which does not release it) and runs, in the
child, the ``after_in_child`` hooks recorded while the zygote imported its
modules and preloads, all but ``threading``'s and ``logging``'s, which
only re-create free locks (:func:`_child_hooks`). ``random`` reseeds
there, as after ``os.fork()``. The C library's own ``pthread_atfork`` handlers (a
BLAS thread pool's) run either way.

What is left of CPython's steps: pending Python signal flags are not
cleared, so a signal the zygote had not handled yet at the fork would be
handled in the child too (the zygote installs no handler of its own; it
exits on ``SIGINT`` anyway). The interpreter's recorded native thread id
stays the zygote's (``threading.get_native_id()`` asks the kernel).

Hooks registered before this module was imported cannot be seen (CPython
keeps them out of reach), so the shortcut is taken only when nothing but
the interpreter's start-up modules was imported before it: a ``.pth``
file or ``sitecustomize`` that imported more (``random``, ``threading``,
anything that might register a hook) makes :func:`fork` ``os.fork()``. So
it does on CPython versions this was not checked against: it was on 3.10
to 3.13, with the GIL. Their after-fork steps re-create, for the thread
that forked, locks and keys that no other thread can hold, and discard
other threads' states (3.13 also "stops the world", for free-threaded
builds): in a child of a process with one thread that holds the GIL,
they find nothing to do. The tests fork through it on each version
(hooks, reseed, threads and a nested fork in the child).
A program's own forks in the child are ``os.fork()``, with every hook:
the recorder is removed (:func:`stop_recording`) before the zygote serves.
"""

import os
import sys

#: What an interpreter imports before its ``-c`` program (``site`` and what
#: it needs: ``pwd`` for the home directory when ``HOME`` is unset, as for
#: the zygote; ``linecache`` since CPython 3.13); none registers an at-fork hook.
_START_UP = frozenset(
    "__main__ _abc _codecs _collections_abc _distutils_hack _frozen_importlib _frozen_importlib_external "
    "_imp _io _locale _signal _sitebuiltins _stat _thread _warnings _weakref abc builtins codecs genericpath io "
    "linecache pwd "
    "marshal os os.path posix posixpath site sitecustomize stat sys time zipimport "
    "pycage pycage._forks pycage.zygote".split()
)
#: Whether every module imported so far is a start-up module: then every
#: hook is registered after this point, and recorded.
_SEES_EVERY_HOOK = all(name in _START_UP or name.startswith("encodings") for name in list(sys.modules))

#: ``after_in_child`` hooks registered since this module was imported, in
#: registration order (the order ``os.fork()`` runs them in).
_after_in_child = []
_register_at_fork = os.register_at_fork


def _recording_register_at_fork(*, before=None, after_in_child=None, after_in_parent=None):
    hooks = {"before": before, "after_in_child": after_in_child, "after_in_parent": after_in_parent}
    _register_at_fork(**{name: hook for name, hook in hooks.items() if hook is not None})
    if after_in_child is not None:
        _after_in_child.append(after_in_child)


_recording_register_at_fork.__doc__ = _register_at_fork.__doc__
os.register_at_fork = _recording_register_at_fork


def stop_recording():
    """Puts ``os.register_at_fork`` back (the children's programs see the real one),
    and settles which recorded hooks a child runs (:func:`_child_hooks`)."""
    global _settled
    os.register_at_fork = _register_at_fork
    _settled = _child_hooks()


#: The hooks a child runs, once the recording stopped.
_settled = None


def _child_hooks():
    """The recorded ``after_in_child`` hooks but those that only re-create
    locks for a child of a process with one thread, where no thread can
    hold one: ``threading``'s (it rebuilds the thread table and every lock
    of the main thread) and ``logging``'s (its module lock and every
    handler's; it also releases the module lock that ``os.fork()``'s
    ``before`` hook takes, which the C library's fork does not run). In a
    child of the zygote ``logging``'s took about 20 copy-on-write faults
    and 0.1-0.2 ms of CPU, for a run that logs nothing."""
    needless = []
    for module, name in (("threading", "_after_fork"), ("logging", "_after_at_fork_child_reinit_locks")):
        hook = getattr(sys.modules.get(module), name, None)
        if hook is not None:
            needless.append(hook)
    return tuple(hook for hook in _after_in_child if not any(hook is n for n in needless))


def _native_fork():
    """The C library's ``fork``, called with the GIL held; None where the
    shortcut was not checked."""
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    if not _SEES_EVERY_HOOK or sys.implementation.name != "cpython" or not gil:
        return None
    if not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return None
    import ctypes

    try:
        libc = ctypes.PyDLL(None, use_errno=True)
        native = libc.fork
    except (OSError, AttributeError):
        return None
    native.argtypes = ()
    native.restype = ctypes.c_int
    return native


_native = _native_fork()


def fork():
    """``os.fork()`` for a process with one thread (see the module docs)."""
    if _native is None:
        return os.fork()
    pid = _native()
    if pid < 0:
        import ctypes

        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    if pid == 0:
        hooks = _settled
        for hook in _child_hooks() if hooks is None else hooks:
            try:
                hook()
            except BaseException as e:  # as os.fork() does: reported, not raised
                _report(hook, e)
    return pid


def _report(hook, exc):
    """What ``os.fork()`` writes for a hook that raised (its
    ``sys.unraisablehook`` takes only arguments CPython builds)."""
    import traceback

    print(f"Exception ignored in an after-fork hook {hook!r}:", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
