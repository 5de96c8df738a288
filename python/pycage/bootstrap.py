"""The pycage child: runs model-written programs, talking JSON lines on fd 3.

The host starts it as::

    python3 -I -c "import sys; sys.path.insert(0, '<DIR>'); from pycage.bootstrap import main; main()"

where ``<DIR>`` holds the ``pycage`` package, or forks it from the zygote
(``pycage.zygote``). Importing this module does every import a run needs, so
a warm pool can start children before their request is known; ``main()``
then blocks on fd 3 for ``boot``. The wire protocol is ``docs/protocol.md``:

1. ``boot``: apply ``RLIMIT_CPU`` / ``RLIMIT_AS``, build the namespace objects
   and error classes, answer ``boot-ack``.
2. ``run``: compile the program as the script ``__main__`` (file name
   ``<program>``; see ``pycage.script`` for top-level ``return`` and the final
   expression's value) and run it. Binding calls go out as ``call`` frames
   from whichever loop awaits them; ``reply`` frames are dispatched by id.
3. Do what the script's exit would (``pycage.finalize``: join non-daemon
   threads, run ``atexit`` handlers, close open files), send ``done``
   (value, no value, or error) and ``os._exit(0)``; a session
   (``boot.session``) waits for its next ``run`` instead.

The child's modules, by concern:

* ``_private``: the private builtins every module resolves its names in,
  and the exits and diagnostics they share;
* ``_wire``: every frame's encoder and checker, generated from the host's
  table (``crates/pycage-protocol/src/table.rs``);
* ``encoder`` / ``decoder``: the lossless, iterative JSON codec;
* ``channel``: fd 3 (frames out, host lines in, replies to their calls);
* ``logs``: ``sys.stdout`` / ``sys.stderr`` as ``log`` frames;
* ``display``: the ``display()`` builtin (rich output as ``display`` frames)
  and ``mpl_backend``, the matplotlib backend that makes ``plt.show()`` use it;
* ``namespaces``: the namespace objects and error classes;
* ``runner``: a program's globals, compile, run and event loop;
* ``signals``: the program's handlers, quiet while its outcome is sent;
* ``outcome``: the ``done`` frame, tracebacks without pycage's frames;
* ``finalize``: what a script's exit does, before a one-shot run's ``done``;
* ``network``: the message of a lookup or socket that fails for want of a network;
* ``memberdoc``: what ``help(<namespace>.<member>)`` shows;
* ``bootstrap`` (this module): the serve loop, rlimits and a run's budgets,
  the warm-up.

And beside the child: ``zygote``, the fork server children come from;
``confine``, a zygote child's joining of its sandbox shell and the host's
confinement steps; ``preload``, the modules a zygote imports first;
``script``, how a program compiles as a script.

Exit statuses without a ``done``: 1 the host is gone (EOF or error on fd 3),
2 the host sent a malformed frame, 3 a bug in the child. The reason goes to
fd 2, never to fd 3.

None of the child's care (private builtins, captured functions, quiet
signals) is a security boundary: the program can write on fd 3 itself,
which is why the host validates everything.
"""

import linecache
import os
import resource
import sys
import time
import traceback

from pycage import _wire
from pycage._private import BUILTINS, EXIT_INTERNAL, diag, die
from pycage.channel import _host_frame, hold, lock, pending, read_frame, send, set_nonblocking, touch_read_path
from pycage.decoder import decode_json
from pycage.display import flush_figures, start_display_ledger
from pycage.encoder import encode_json
from pycage.finalize import note_baseline, program_exit
from pycage.finalize import warm as _warm_exit
from pycage.logs import start_ledger, stderr, stdout
from pycage.namespaces import RESERVED_GLOBALS, SEEDED_GLOBALS, boot_namespaces, build_globals
from pycage.network import install as _install_network_hints
from pycage.outcome import (
    error_frame,
    format_compile_error,
    format_exception,
    inside_path,
    outcome_frame,
    set_path_remaps,
)
from pycage.runner import (
    close_outcome,
    compile_for,
    expect_run,
    new_program_globals,
    recursion_depth,
    run_program,
)
from pycage.script import PROGRAM_FILENAME
from pycage.signals import restore_signals

__builtins__ = BUILTINS

# What the zygote and the host's tests read here (under their old names).
PROTOCOL_FD = _wire.PROTOCOL_FD
_EXIT_INTERNAL = EXIT_INTERNAL
_RESERVED_GLOBALS = RESERVED_GLOBALS
_SEEDED_GLOBALS = SEEDED_GLOBALS
_inside_path = inside_path
__all__ = ["PROTOCOL_FD", "main", "set_path_remaps", "warm_up"]

_os_exit = os._exit
_getframe = sys._getframe
#: The child's own streams, which exit work must leave open; and the
#: interpreter's original ones (fd 1 and fd 2), kept referenced.
_OWN_STREAMS = (stdout, stderr, stdout.buffer, stderr.buffer)
_ORIGINAL_STREAMS = (sys.__stdout__, sys.__stderr__)
_sched_yield = os.sched_yield
_BOOT_ACK = _wire.encode_boot_ack()

# A run without network says so when a name lookup or a socket fails.
_install_network_hints()

#: Clears CPython's type attribute cache (3.13 deprecates the older name).
_clear_type_cache = getattr(sys, "_clear_internal_caches", None) or getattr(sys, "_clear_type_cache", None)

#: matplotlib, if the program imports it, draws with pycage's backend:
#: ``plt.show()`` and the figures open at the end become displays. Set
#: here, in the child's own environment, before any program runs.
os.environ["MPLBACKEND"] = "module://pycage.mpl_backend"


def _finish(frame):
    """Send ``done`` and exit; holding the lock keeps later frames out.

    The yield between them is for the host's sake: a write on a Unix socket
    is a synchronous wake-up, so the scheduler tends to queue the host's
    reader on this CPU, behind this process, and exiting (unmapping a
    forked interpreter) kept it waiting ~0.6 ms of a ~1.3 ms trivial run.
    """
    with lock:
        send(frame)
        _sched_yield()
        _os_exit(0)


# --- limits and budgets ------------------------------------------------------
#
# ``boot`` sets ``RLIMIT_CPU`` (soft ``cpuSeconds``, hard one second above) and
# ``RLIMIT_AS``; 0 leaves a limit unset. A session's runs carry their own
# budgets instead: its CPU budget is counted from each run's start (the soft
# ``RLIMIT_CPU`` moves to the CPU time used so far plus the run's
# ``cpuSeconds``), and each run starts a new log ledger and value budget.

_getrlimit = resource.getrlimit
_setrlimit = resource.setrlimit
_process_time = time.process_time


def _set_limit(which, soft, hard):
    current_soft, current_hard = _getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    if soft == current_soft and hard == current_hard:
        return  # a session's cells in one CPU second: the limit is already this
    try:
        _setrlimit(which, (soft, hard))
    except (OSError, ValueError) as e:
        die(EXIT_INTERNAL, f"cannot set resource limit {which} to {(soft, hard)}: {e}")


def apply_boot_limits(boot):
    """``RLIMIT_CPU`` (not for a session: its runs count their own) and
    ``RLIMIT_AS`` from a checked ``boot`` frame."""
    cpu = boot["cpuSeconds"]
    if cpu and not boot.get("session", False):
        _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    address_space = boot["addressSpaceBytes"]
    if address_space:
        _set_limit(resource.RLIMIT_AS, address_space, address_space)


class Budgets:
    """One run's budgets: its own (a session run carries them) or boot's."""

    __slots__ = ("cpu_seconds", "max_log_bytes", "max_value_bytes", "max_display_bytes")

    def __init__(self, run, boot):
        self.cpu_seconds = run.get("cpuSeconds", boot["cpuSeconds"])
        self.max_log_bytes = run.get("maxLogBytes", boot["maxLogBytes"])
        self.max_value_bytes = run.get("maxValueBytes", boot["maxValueBytes"])
        self.max_display_bytes = run.get("maxDisplayBytes", boot["maxDisplayBytes"])


def start_run(budgets, session):
    """Per-run state: the log and display ledgers, and in a session the CPU budget counted
    from now (SIGXCPU ends the session's process when a run overspends, and
    each run's wall clock bounds one that handles SIGXCPU)."""
    start_ledger(budgets.max_log_bytes)
    start_display_ledger(budgets.max_display_bytes)
    cpu = budgets.cpu_seconds
    if session and cpu:
        # The process's user + system time, as RLIMIT_CPU counts it (the
        # clock is one cheap call; getrusage builds a 16-field result).
        used = int(_process_time()) + 1
        _set_limit(resource.RLIMIT_CPU, used + cpu, resource.RLIM_INFINITY)


# --- a run's packages -------------------------------------------------------


def add_package_dirs(dirs):
    """Put the directories the host installed the run's declared packages
    into (``run.sysPath``) on ``sys.path``, their ``.pth`` files processed as
    for a site directory: after the standard library, ahead of the
    interpreter's site-packages, so the program's pins win over the
    environment's and no package shadows a standard module."""
    import site

    before = list(sys.path)
    for d in dirs:
        if d not in sys.path:
            site.addsitedir(d)
    added = [p for p in sys.path if p not in before]
    at = next((i for i, p in enumerate(before) if p.endswith(("site-packages", "dist-packages"))), len(before))
    sys.path[:] = before[:at] + added + before[at:]


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


#: Frames like the ones a run reads, for the warm-up to check, and their checkers.
_WARM_UP_FRAMES = (
    (
        '{"type":"boot","cpuSeconds":0,"addressSpaceBytes":0,"maxLogBytes":1,"maxValueBytes":1,"maxDisplayBytes":1,'
        '"namespaces":[{"global":"w","names":["w"],"errorClass":{"name":"W","memberNameProperty":"m"},'
        '"doc":"w","docs":{"w":"w"}}]}',
        _wire.check_boot,
    ),
    (
        '{"type":"run","program":"","cpuSeconds":0,"maxLogBytes":1,"maxValueBytes":1,"maxDisplayBytes":1}',
        _wire.check_run,
    ),
    ('{"type":"reply","id":0,"ok":true,"value":null}', _wire.check_reply),
)


def warm_up():
    """Exercise a run's common path once, with nothing sent: compile, a
    loop, the codec, traceback formatting.

    A child forked from the zygote shares the zygote's memory copy-on-write,
    and CPython writes to every object it touches (reference counts), so the
    first run in a fresh child takes hundreds of page faults. A pooled child
    calls this while it waits for its run, which moves those faults off the
    run's critical path; it also takes faults a simple run never would
    (about 270 of a trivial run's 980), so the host forks a child cold,
    without it, when no core is free for it (``pycage.zygote``). Leaves no
    state behind: the globals, loop and signal state it used are discarded
    or restored.
    """
    # The type attribute cache is one table of 4,096 entries (16 pages) that
    # every attribute lookup may write to: clearing it writes all of it, so
    # in a pooled child those pages are copied here, and the lookups below
    # fill it again with what a run looks up.
    if _clear_type_cache is not None:
        _clear_type_cache()
    # Recursion depths are measured here rather than on the run's critical
    # path: this function's (one measurement), the warm-up run's, and the
    # run that comes next, from the same caller through main() and _serve().
    depth = recursion_depth()
    expect_run(0, _getframe(), depth)
    touch_read_path()
    # The boot and run path on samples: read, checked, built, encoded; nothing
    # is sent and nothing kept (a run starts its ledgers again).
    boot, run, _ = frames = [_host_frame(text) for text, _ in _WARM_UP_FRAMES]
    if all(check(frame) is None for frame, (_, check) in zip(frames, _WARM_UP_FRAMES, strict=True)):
        apply_boot_limits(boot)
        build_globals(boot_namespaces(boot))
        budgets = Budgets(run, boot)
        start_run(budgets, False)
        # Each ledger builds its marker only when the budget changes: once
        # more with another budget, so that this child builds one itself
        # (the zygote's own warm-up left one built for this budget).
        start_ledger(budgets.max_log_bytes + 1)
        start_display_ledger(budgets.max_display_bytes + 1)
    for function in (main, _serve, _finish):
        function.__code__  # noqa: B018 -- a call writes its reference count
    _wire.encode_call(0, "w", "w", "{}")
    _wire.encode_log("w", True)
    error_frame("exception", "w")
    program = compile_for(_WARM_UP_PROGRAM)
    outcome = run_program(program, new_program_globals({}))
    expect_run(2, _getframe(1), depth - 1)
    if outcome.has_value:
        decode_json(encode_json(outcome.value))
    format_exception(ValueError("warm"))
    _warm_exit()
    close_outcome(outcome)
    restore_signals(outcome.signals)
    linecache.cache.pop(PROGRAM_FILENAME, None)


# --- serve -----------------------------------------------------------------


def main():
    """Serve one run (or a session's runs) on fd 3, then exit the process
    (never returns)."""
    try:
        _serve()
    except BaseException:
        try:
            diag("internal error:\n" + traceback.format_exc())
        finally:
            _os_exit(EXIT_INTERNAL)
    _os_exit(EXIT_INTERNAL)


def _serve():
    set_nonblocking()
    boot = read_frame(_wire.check_boot)
    session = boot.get("session", False)
    namespaces = boot_namespaces(boot)
    apply_boot_limits(boot)
    injected = build_globals(namespaces)
    if boot.get("output", False):
        # Only a run whose output is collected has `out/`: otherwise the
        # working directory starts empty, as under plain python3.
        os.mkdir("out", 0o755)
    # The ack goes out with the run's first frame (a log, a call, `done`).
    hold(_BOOT_ACK)

    program_globals = None
    # One run, or in a session one run after another in the same globals.
    while True:
        run = read_frame(_wire.check_run)
        source = run["program"]
        if "sysPath" in run:
            add_package_dirs(run["sysPath"])
        budgets = Budgets(run, boot)
        start_run(budgets, session)
        if program_globals is None:
            program_globals = new_program_globals(injected)
            # From here on, compile warnings included, output is log
            # frames; as under CPython, sys.__stdout__ is sys.stdout.
            sys.stdout = sys.__stdout__ = stdout
            sys.stderr = sys.__stderr__ = stderr
        try:
            program = compile_for(source)
        except BaseException as exc:  # SyntaxError, ValueError (NUL), RecursionError, ...
            frame = error_frame("exception", format_compile_error(exc, source))
            if not session:
                _finish(frame)
            send(frame)
            continue
        if not session:
            note_baseline()
        outcome = run_program(program, program_globals)
        # Figures the program left open are shown, as after a notebook cell.
        flush_figures()
        # Encode first: the loop's cleanup runs program code that could change the value.
        frame = outcome_frame(outcome, budgets.max_value_bytes)
        close_outcome(outcome)
        pending.clear()
        if not session:
            # What the script's exit does (threads, atexit, open files),
            # before `done`: the host collects out/ once `done` is in.
            program_exit(_OWN_STREAMS)
            _finish(frame)
        # The session goes on: the program's signal handlers come back.
        restore_signals(outcome.signals)
        send(frame)
