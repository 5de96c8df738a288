"""The ``done`` frame of a run: its value, no value, or what went wrong.

``outcome_frame`` encodes an ``Outcome`` (``pycage.runner``) as a ``done``
frame, metered against the run's ``maxValueBytes``: ``invalid-output`` when
the value is not JSON, ``output-limit`` when its canonical encoding is over
the budget, ``exception`` with the program's traceback (``pycage.tracebacks``)
when it raised. ``sys.exit()``, ``sys.exit(0)`` and ``exit()`` end a run with
no value, as a script that exits 0.
"""

from pycage import _wire
from pycage._private import BUILTINS, clean
from pycage.encoder import NotJsonError, OverBudgetError, encode_json
from pycage.signals import quiet_signals
from pycage.tracebacks import format_exception

__builtins__ = BUILTINS

#: Encoding attempts before a value that keeps failing to encode (another
#: thread of the program changing it mid-walk) is reported as an exception.
_ENCODE_ATTEMPTS = 5

_encode_done = _wire.encode_done
_encode_done_error = _wire.encode_done_error
_type_name = type.__dict__["__name__"].__get__

DONE_NO_VALUE = _encode_done()


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
    error = outcome.error
    if error is not None:
        if _is_clean_exit(error):
            return DONE_NO_VALUE
        return error_frame("exception", format_exception(error))
    if not outcome.has_value:
        return DONE_NO_VALUE
    quiet_signals(outcome.signals)  # again: a no-op unless interrupted before
    failure = None
    for _ in range(_ENCODE_ATTEMPTS):
        try:
            body = encode_json(outcome.value, max_value_bytes)
        except NotJsonError as e:
            return error_frame("invalid-output", f"return value is not JSON: {e}")
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
