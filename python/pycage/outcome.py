"""The ``done`` frame of a run: its value, no value, or what went wrong.

``outcome_frame`` encodes an ``Outcome`` (``pycage.runner``) as a ``done``
frame, metered against the run's ``maxValueBytes``: ``invalid-output`` when
the value is not JSON, ``output-limit`` when its canonical encoding is over
the budget, ``exception`` with the program's traceback when it raised.
``sys.exit()``, ``sys.exit(0)`` and ``exit()`` end a run with no value, as a
script that exits 0.

Tracebacks point at ``<program>`` lines (``linecache`` holds the source) and
show only the program's frames and those of the library code it called:
every frame of a file of this package is dropped, through the exception's
cause, context and group members. In a sandboxed child forked from the
zygote, file names are shown as the program sees them (``set_path_remaps``).
"""

import os
import traceback

from pycage import _wire
from pycage._private import BUILTINS, clean
from pycage.encoder import NotJsonError, OverBudgetError, encode_json
from pycage.signals import quiet_signals

__builtins__ = BUILTINS

#: Encoding attempts before a value that keeps failing to encode (another
#: thread of the program changing it mid-walk) is reported as an exception.
_ENCODE_ATTEMPTS = 5

_encode_done = _wire.encode_done
_encode_done_error = _wire.encode_done_error

DONE_NO_VALUE = _encode_done()

#: What an invalid-output message for a value of a non-JSON type adds: a
#: run's value is strict JSON; rich objects are shown, not returned.
_NOT_JSON_HINT = (
    "; to show it, display() it and return something else; to return it, convert it to lists, dicts, "
    "str and numbers (a DataFrame: df.to_dict('records'))"
)


# --- tracebacks ------------------------------------------------------------

#: The directory of this package: its files' frames are never shown.
_OWN_DIR = os.path.dirname((lambda: None).__code__.co_filename) + os.sep
_type_name = type.__dict__["__name__"].__get__

#: Host path prefixes and where the program sees them: set by a zygote's
#: child that joined a sandbox (the zygote's modules were imported at host
#: paths), so tracebacks name files the program can see, with their lines.
_PATH_REMAPS = []


def set_path_remaps(remaps):
    """Use ``[(host_prefix, inside_prefix), ...]`` for traceback file names."""
    _PATH_REMAPS[:] = [(h, i) for h, i in remaps]


def inside_path(path):
    """``path`` as the program sees it."""
    for host, shown in _PATH_REMAPS:
        if path == host or path.startswith(host + "/"):
            return shown + path[len(host) :]
    return path


def _is_own(filename):
    return filename.startswith(_OWN_DIR) and os.sep not in filename[len(_OWN_DIR) :]


def _drop_own_frames(te):
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
        kept = [f for f in stack if not _is_own(f.filename)]
        if len(kept) != len(stack):
            stack[:] = kept
        if _PATH_REMAPS:
            for f in stack:
                f.filename = inside_path(f.filename)
        todo.append(t.__cause__)
        todo.append(t.__context__)
        todo.extend(getattr(t, "exceptions", None) or ())


def format_exception(exc):
    """Traceback text pointing at ``<program>`` lines, without pycage's frames."""
    try:
        # Lines are looked up when formatted, after the file names moved.
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
        _drop_own_frames(te)
        text = "".join(te.format())
    except BaseException:
        try:
            text = f"{_type_name(type(exc))} (the exception could not be formatted)"
        except BaseException:
            text = "the program raised an exception that could not be formatted"
    return clean(text.rstrip("\n"))


def format_compile_error(exc, source):
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
    return clean(text.rstrip("\n"))


# --- the done frame --------------------------------------------------------


def error_frame(kind, message):
    """A ``done`` frame with ``error`` of ``kind`` (exception,
    invalid-output or output-limit)."""
    return _encode_done(error=_encode_done_error(kind, clean(message)))


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
    # Again: a no-op unless interrupted before. A handler raising on the way
    # into quiet_signals (outside its own retries) is caught here.
    for _ in range(_ENCODE_ATTEMPTS):
        try:
            quiet_signals(outcome.signals)
            break
        except BaseException:
            pass
    error = outcome.error
    if error is not None:
        if _is_clean_exit(error):
            return DONE_NO_VALUE
        return error_frame("exception", format_exception(error))
    if not outcome.has_value:
        return DONE_NO_VALUE
    failure = None
    for _ in range(_ENCODE_ATTEMPTS):
        try:
            body = encode_json(outcome.value, max_value_bytes)
        except NotJsonError as e:
            message = f"return value is not JSON: {e}"
            if e.rich:
                message += _NOT_JSON_HINT
            return error_frame("invalid-output", message)
        except OverBudgetError:
            return error_frame("output-limit", f"return value is over the {max_value_bytes}-byte value budget")
        except BaseException as e:
            failure = e
            continue
        return _encode_done(value=body)
    try:
        reason = f"{_type_name(type(failure))}: {failure}"
    except BaseException:
        reason = "an error that could not be formatted"
    return error_frame(
        "exception",
        f"the return value could not be encoded ({reason}); "
        "did another thread of the program change it while it was read?",
    )
