"""Running one program: its module globals, its compile, its run, its loop.

The run path is what a long-lived child calls once per run:
``new_program_globals`` + ``compile_for`` (compile a program for given module
globals), ``run_program`` (run it; returns an ``Outcome``), then, after its
``done`` is built (``pycage.outcome``), ``close_outcome``.

A program runs with no event loop at all, or, when it awaits at top level, as
a coroutine on a private loop whose methods resolve builtins in the private
copy (``_private.private_class``). When the program finishes, whichever way,
the shared builtins are restored and its signal handlers are silenced before
anything else runs.

The frames below the program (the child's) would take recursion depth from
it, so while it runs the recursion limit is raised by exactly the depth they
use: the program can recurse as deep as under ``python3 program.py``. The
program still reads CPython's limit: ``sys.getrecursionlimit`` and
``sys.setrecursionlimit`` are replaced (once, at import) by functions that
take that headroom off what they read and add it to what they set, and say
the depths in their errors as the program counts them.
"""

import asyncio
import linecache
import selectors
import sys
from types import ModuleType

from pycage import script
from pycage._private import BUILTINS, private_class, restore_builtins
from pycage.signals import SignalState, quiet_signals

__builtins__ = BUILTINS

_PROGRAM = script.PROGRAM_FILENAME
#: Seconds the loop gets, after the program finished, for its leftover tasks
#: and async generators to finish after cancellation. A task that ignores
#: cancellation is abandoned when this expires; ``done`` is sent regardless.
_CLEANUP_GRACE_SECONDS = 1.0

_Loop = private_class(asyncio.SelectorEventLoop)
_Selector = private_class(selectors.DefaultSelector)
_set_event_loop = asyncio.set_event_loop
_all_tasks = asyncio.all_tasks
_wait = asyncio.wait
_shared_builtins = sys.modules["builtins"]
_modules = sys.modules
_getrecursionlimit = sys.getrecursionlimit
_setrecursionlimit = sys.setrecursionlimit
_getframe = sys._getframe
#: What the recursion limit is raised by while a program runs (the
#: depth of the child's frames below it), which the program does not see.
_headroom = 0


def new_program_globals(injected):
    """Fresh globals of a new module ``__main__`` holding ``injected`` (the
    namespaces and error classes); the module replaces ``sys.modules["__main__"]``
    and ``sys.argv`` becomes a script's."""
    module = ModuleType("__main__")
    program_globals = module.__dict__
    program_globals.clear()
    program_globals.update(
        __annotations__={},
        __builtins__=_shared_builtins,
        __cached__=None,
        __doc__=None,
        __file__=_PROGRAM,
        __loader__=None,
        __name__="__main__",
        __package__=None,
        __spec__=None,
    )
    program_globals.update(injected)
    _modules["__main__"] = module
    sys.argv = [_PROGRAM]
    return program_globals


def compile_for(source):
    """The program compiled as a script (``pycage.script``); its lines go
    into ``linecache`` so tracebacks quote them. Raises what ``compile`` raises."""
    lines = source.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        # As linecache reads a file: without it, tracebacks put the carets
        # under an error on the last line one column too far right.
        lines[-1] += "\n"
    linecache.cache[_PROGRAM] = (len(source), None, lines, _PROGRAM)
    return script.compile_program(source)


class Outcome:
    """How a run ended: ``error`` (the exception that ended it, or None),
    else ``has_value``/``value``. ``loop`` is the private loop of a program
    that awaited at top level, closed by ``close_outcome``; ``signals`` is
    what ``quiet_signals`` changed; ``headroom`` is what the recursion limit
    was raised by."""

    __slots__ = ("error", "has_value", "value", "loop", "signals", "headroom")

    def __init__(self):
        self.error = None
        self.has_value = False
        self.value = None
        self.loop = None
        self.signals = SignalState()
        self.headroom = 0


def run_program(program, program_globals):
    """Run a compiled program in ``program_globals``: with no event loop
    running, or on a fresh private loop when it awaits at top level.

    When this returns, the shared builtins are restored and the program's
    signal handlers are quiet, so encoding the value cannot be interrupted.
    """
    outcome = Outcome()
    # The program's frame sits on this one, entered from C as a script's
    # is: the depth down to here is the child's.
    depth = _announced_depth()
    if depth is None:
        depth = _depth_here()
    try:
        try:
            if program.is_coroutine:
                _run_in_loop(program, program_globals, outcome, depth)
            else:
                _raise_limit(outcome, depth)
                eval(program.code, program_globals)
                if program.tail is not None:
                    program.keep(eval(program.tail, program_globals))
        finally:
            # First thing after the program, whichever way it ended. A
            # handler that raises before the signals are quiet ends the run
            # with that exception.
            raised = _settle(outcome)
            if raised is not None:
                raise raised
    except BaseException as exc:
        outcome.error = exc
    # A handler that raised outside _settle's own retries (on the way in or
    # out): settle again, caught here, until the signals are quiet.
    for _ in range(_SETTLE_ATTEMPTS):
        try:
            if outcome.signals.quiet:
                break
            _settle(outcome)
        except BaseException:
            pass
    if outcome.error is None:
        outcome.has_value, outcome.value = program.value()
    return outcome


_RUN_PROGRAM_CODE = run_program.__code__

#: Attempts at ``_settle``'s steps: a bound for handlers that keep raising
#: (``quiet_signals`` retries on its own too, and keeps what it quieted).
_SETTLE_ATTEMPTS = 100


def _settle(outcome):
    """Quiet the program's signal handlers, put the shared builtins back and
    take the recursion headroom back, retrying when a handler raises
    meanwhile (up to ``_SETTLE_ATTEMPTS`` times); return the first exception
    a handler raised here, or None. (Handlers that raise while
    ``quiet_signals`` retries on its own are swallowed there.)

    Signals first: once they are quiet, no signal handler of the program
    runs in this thread until ``restore_signals`` (its ``finally`` blocks
    and finalizers still can, when an exception unwinds or an object dies).
    Each step may be repeated: a handler that raised midway left it half
    done (a session's next run, the error's traceback and the ``done``
    frame need all three). A handler can still raise on the way into or
    out of this function; ``run_program`` calls it again for that.
    """
    raised = None
    for _ in range(_SETTLE_ATTEMPTS):
        try:
            quiet_signals(outcome.signals)
            restore_builtins()
            _lower_limit(outcome)
            break
        except BaseException as exc:
            if raised is None:
                raised = exc
    return raised


async def _await_program(program, program_globals, outcome, depth):
    """The program's coroutine, with its exception (or None) as the result."""
    try:
        _raise_limit(outcome, depth + _loop_depth(depth) + _AWAIT_EXTRA)
        result = eval(program.code, program_globals)
        if program.code_awaits:
            await result
        tail = program.tail
        if tail is not None:
            result = eval(tail, program_globals)
            if program.tail_awaits:
                result = await result
            program.keep(result)
    except BaseException as exc:
        restore_builtins()
        return exc
    restore_builtins()
    return None


def _run_in_loop(program, program_globals, outcome, depth):
    loop = outcome.loop = _Loop(_Selector())
    _set_event_loop(loop)
    task = loop.create_task(_await_program(program, program_globals, outcome, depth))
    loop_error = None
    try:
        loop.run_until_complete(task)
    except BaseException as exc:  # the program broke the loop or stopped it
        loop_error = exc
    restore_builtins()
    if task.done() and not task.cancelled() and task.exception() is None:
        outcome.error = task.result()
    else:
        outcome.error = loop_error or RuntimeError("the program's main task did not finish")


def close_outcome(outcome):
    """Cancel what a top-level-await program left running on its loop,
    give it a grace period, close the loop. Runs program code (``finally``
    blocks of cancelled tasks): call it after the outcome's frame is built."""
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


# --- recursion headroom ------------------------------------------------------


def recursion_depth():
    """The interpreter's recursion depth at the caller's frame.

    CPython has no getter, but ``sys.setrecursionlimit`` refuses a limit at
    or below the current depth, and says the depth when it does. Should the
    message ever read otherwise, the depth is found by bisection instead (a
    refused limit changes nothing). The limit is put back before this
    returns.
    """
    limit = _getrecursionlimit()
    depth = 0
    try:
        _setrecursionlimit(1)
    except RecursionError as e:
        # "cannot set the recursion limit to 1 at the recursion depth N: ..."
        digits = str(e).partition("recursion depth ")[2].partition(":")[0]
        depth = int(digits) if digits.isdigit() else 0
    if not depth:
        low, high = 0, max(limit, 2)  # refused: <= depth < accepted
        while high - low > 1:
            mid = (low + high) // 2
            try:
                _setrecursionlimit(mid)
            except RecursionError:
                low = mid
            else:
                high = mid
        depth = low
    _setrecursionlimit(limit)
    return depth - 1  # this function's own frame


#: Depths by frame chain: the ids of the code objects from a frame down,
#: and the code objects themselves (kept, so no id is reused meanwhile).
#: Ids, because hashing a code object hashes its contents every time.
_depth_by_chain = {}
#: Frame chains whose depth is remembered (a child sees two or three).
_CHAINS_KEPT = 16


def _chain(frame, stop=None):
    codes = []
    while frame is not None:
        code = frame.f_code
        if code is stop:
            break
        codes.append(code)
        frame = frame.f_back
    return codes


def _remember(table, codes, depth):
    if len(table) >= _CHAINS_KEPT:
        table.clear()
    table[tuple(map(id, codes))] = (depth, codes)
    return depth


def _depth_here():
    """``recursion_depth()`` of the caller, remembered by the code objects
    of its frame and those below it: the same chain always has the same
    depth, and walking it costs a fraction of measuring it (a measurement is
    tens of microseconds in a freshly forked child: see ``expect_run``)."""
    codes = _chain(_getframe(1))
    known = _depth_by_chain.get(tuple(map(id, codes)))
    if known is not None:
        return known[0]
    return _remember(_depth_by_chain, codes, recursion_depth() - 1)  # the caller's, not this frame's


#: ``[levels, anchor frame, depth]`` of the run ``expect_run`` announced.
_expected = []


def expect_run(callers, anchor, anchor_depth):
    """Announce, off a run's critical path, that ``run_program`` will be
    called through ``callers`` (how many functions, each calling the next
    directly: one level each) from the frame ``anchor``, at ``anchor_depth``.
    ``run_program`` then knows its depth by finding ``anchor`` that many
    frames down, without walking or measuring the stack: a measurement is
    tens of microseconds in a freshly forked child. The warm-up announces
    the run it prepares for (``pycage.bootstrap``)."""
    _expected[:] = [callers + 1, anchor, anchor_depth + callers + 1]


def _announced_depth():
    """The depth ``expect_run`` announced for the caller (``run_program``),
    or None when this run is not the one announced."""
    if not _expected:
        return None
    levels, anchor, depth = _expected
    try:
        found = _getframe(levels + 1)  # counted from the caller
    except ValueError:  # the stack is not that deep
        return None
    return depth if found is anchor else None


_loop_depths = {}


def _loop_depth(base):
    """How much deeper the caller (``_await_program``) is than the
    ``run_program`` frame below it, at depth ``base``: the event loop's
    frames between them, remembered by their code objects (the warm-up's
    top-level-await program measures them before a run needs them)."""
    codes = _chain(_getframe(1), _RUN_PROGRAM_CODE)
    known = _loop_depths.get(tuple(map(id, codes)))
    if known is not None:
        return known[0]
    return _remember(_loop_depths, codes, recursion_depth() - 1 - base)


def _sync_probe():
    return recursion_depth()


async def _async_probe():
    return recursion_depth()


def _evaluated():
    base = recursion_depth()
    return eval(_sync_probe.__code__, _probe_globals) - base


async def _awaited():
    base = recursion_depth()
    return await eval(_async_probe.__code__, _probe_globals) - base


def _await_extra():
    """How much deeper code awaited from a coroutine starts than code run
    with ``eval`` (which is how a script's frame starts). The probes' code
    is run as the program's is: ``eval`` of a code object, awaited or not."""
    awaited = _awaited()
    try:
        awaited.send(None)
    except StopIteration as stop:
        return stop.value - _evaluated()
    awaited.close()
    return 0


_probe_globals = globals()
#: Measured once, at import (in the zygote, before any fork).
_AWAIT_EXTRA = _await_extra()


def _raise_limit(outcome, headroom):
    global _headroom
    if headroom > 0:
        _setrecursionlimit(_getrecursionlimit() + headroom)
        outcome.headroom = _headroom = headroom


def _lower_limit(outcome):
    """Take the headroom back, from whatever limit the program left."""
    global _headroom
    headroom = outcome.headroom
    outcome.headroom = _headroom = 0
    if headroom:
        try:
            _setrecursionlimit(max(_getrecursionlimit() - headroom, 1))
        except (RecursionError, ValueError):  # the program left a limit below this depth
            pass


# --- the limit as the program reads it --------------------------------------


def getrecursionlimit():
    return _getrecursionlimit() - _headroom


def setrecursionlimit(limit, /):
    headroom = _headroom
    if not headroom or type(limit) is not int or limit < 1:
        return _setrecursionlimit(limit)  # the interpreter's own errors
    try:
        _setrecursionlimit(limit + headroom)
    except RecursionError as e:
        # "cannot set the recursion limit to N at the recursion depth D: ..."
        raise RecursionError(_program_counts(str(e), headroom)) from None


def _program_counts(message, headroom):
    """``setrecursionlimit``'s message with its numbers as the program counts
    them: without the headroom, and without ``setrecursionlimit``'s own frame."""
    head, sep, rest = message.partition("recursion limit to ")
    limit, sep2, rest = rest.partition(" at the recursion depth ")
    depth, sep3, tail = rest.partition(":")
    if not (sep and sep2 and sep3 and limit.isdigit() and depth.isdigit()):
        return message
    return f"{head}{sep}{int(limit) - headroom}{sep2}{int(depth) - headroom - 1}{sep3}{tail}"


# In place of the interpreter's, their help text and names theirs.
for _function, _original in ((getrecursionlimit, _getrecursionlimit), (setrecursionlimit, _setrecursionlimit)):
    _function.__doc__ = _original.__doc__
    _function.__module__ = "sys"
    setattr(sys, _function.__name__, _function)
del _function, _original
