"""The program's signal handlers, silenced while its outcome is sent.

Once the program has finished, ``quiet_signals`` blocks every signal in this
thread and sets every Python-level handler to ``SIG_IGN`` before the value is
encoded: an interval timer whose handler raises cannot turn a good value into
a failed encoding or cut a frame in half. A session puts them back with
``restore_signals`` before its next run.
"""

import _signal
import signal

from pycage._private import BUILTINS

__builtins__ = BUILTINS

#: Attempts at silencing signals, each of which a program handler may interrupt.
_QUIET_ATTEMPTS = 100

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
_HANDLER_SIGNALS = tuple(sorted(sig for sig in _ALL_SIGNALS if sig not in (signal.SIGKILL, signal.SIGSTOP)))


class SignalState:
    """What ``quiet_signals`` changed: the thread's signal mask before (None
    until blocked), each Python-level handler it replaced, and whether it
    finished (``quiet``)."""

    __slots__ = ("mask", "handlers", "quiet")

    def __init__(self):
        self.mask = None
        self.handlers = {}
        self.quiet = False


def _quiet_once(state):
    if state.mask is None:
        state.mask = _pthread_sigmask(_SIG_BLOCK, _ALL_SIGNALS)
    handlers = state.handlers
    for sig in _HANDLER_SIGNALS:
        handler = _getsignal(sig)
        # None: not set from Python; SIG_DFL / SIG_IGN are ints (or int
        # enum members, when the program passed those). The type, not
        # `__class__`, which a handler object may fake.
        if handler is None or issubclass(type(handler), int):
            continue
        if sig not in handlers:
            handlers[sig] = handler
        try:
            _setsignal(sig, _SIG_IGN)
        except (OSError, ValueError):
            pass
    state.quiet = True


def quiet_signals(state):
    """Block every signal in this thread and set every Python-level handler
    to ``SIG_IGN``, so no program handler runs while the outcome is encoded
    and sent.

    Blocking alone is not enough: a signal may already be pending, or be
    delivered to another thread of the program, and CPython runs Python
    handlers in the main thread either way; a handler replaced by SIG_IGN
    is skipped even when its signal is pending. A handler may raise while
    this runs; that attempt is retried (the state records what was already
    changed, so nothing is saved twice). Once it has finished, calling it
    again does nothing until ``restore_signals`` (a second call is for a
    first one that handlers kept interrupting). The host's
    SIGTERM/SIGKILL still end the process: SIGKILL cannot be blocked, and a
    one-shot child exits right after ``done`` (a session calls
    ``restore_signals`` instead).
    """
    if state.quiet:
        return
    for _ in range(_QUIET_ATTEMPTS):
        try:
            _quiet_once(state)
            return
        except BaseException:  # a program handler raised meanwhile
            pass


def restore_signals(state):
    """Undo ``quiet_signals``: handlers first, then the mask (pending
    signals are delivered once the mask is restored)."""
    for sig, handler in state.handlers.items():
        try:
            _setsignal(sig, handler)
        except (OSError, ValueError, TypeError):
            pass
    state.handlers = {}
    state.quiet = False
    if state.mask is not None:
        _pthread_sigmask(_SIG_SETMASK, state.mask)
        state.mask = None
