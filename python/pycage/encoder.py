"""The lossless JSON encoder: what crosses fd 3 is exactly what the program had.

``encode_json`` writes the canonical encoding (compact ``JSON.stringify``:
docs/protocol.md, "Lossless JSON") and meters it against a byte budget as it
goes. It is iterative (a 1,000,000-deep list encodes without
``RecursionError``) and never runs program code: exact type checks only, no
``__eq__``, ``__hash__``, ``__iter__``, ``__len__`` or ``__repr__`` of program
objects. Its reverse is ``pycage.decoder``.

Numbers whose plain value can be read without program code cross as that
value (``_plain_number``): an ``int`` or ``float`` subclass (``IntEnum``
members, ``numpy.float64``) through the value the interpreter holds, not
through any method of the subclass; numpy's own scalar types
(``numpy.bool_``, its integer types, ``float16``, ``float32``,
``float64``) through numpy's ``item()``, only when the type is numpy's
(a built-in type, which no program can define or change).

Ints longer than the interpreter's ``sys.get_int_max_str_digits()`` cross
too: the limit is lifted only around the conversion that needs it, so the
program's own ``str(10**6000)`` raises ``ValueError`` as under CPython.
"""

import gc
import itertools
import sys
from json.encoder import encode_basestring as _quote
from types import CoroutineType

from pycage._private import BUILTINS, is_ident, unlimited_digits

__builtins__ = BUILTINS

#: Path segments an error message shows before eliding the middle of a path.
_PATH_SEGMENTS_SHOWN = 40
#: Characters of a dict key an error message shows.
_PATH_KEY_CHARS = 60
#: Ints up to this many bits have fewer digits than the lowest digit limit
#: an interpreter accepts (640): their text never needs the limit lifted.
_SAFE_INT_BITS = 2000

_int_repr = int.__repr__
#: Ints below this in magnitude take the scalar path (at most 19 digits).
_SMALL_INT = 1 << 63
_float_repr = float.__repr__
_type_name = type.__dict__["__name__"].__get__
_gc_isenabled = gc.isenabled
_gc_disable = gc.disable
_gc_enable = gc.enable


class NotJsonError(Exception):
    """The value cannot cross as JSON; ``str(e)`` names the path and type.
    ``rich`` is true when the value is of a type no JSON hint covers (a
    DataFrame, a figure): what a run should ``display()`` instead."""

    rich = False


class OverBudgetError(Exception):
    """The canonical encoding went over the byte budget."""


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

_float_value = float.__float__  # a float subclass's value, as a plain float
_int_value = int.__int__  # an int subclass's value, as a plain int
_type_flags = type.__dict__["__flags__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_module = type.__dict__["__module__"].__get__
#: ``Py_TPFLAGS_HEAPTYPE``: every class made in Python has it; numpy's
#: scalar types, defined in C, do not.
_HEAP_TYPE = 1 << 9
#: numpy's abstract scalar types (by their built-in names) and the plain
#: type ``item()`` gives for their values.
_NUMPY_KINDS = {"bool_": bool, "bool": bool, "integer": int, "floating": float}
#: numpy types under those whose ``item()`` is not a number: not read.
_NUMPY_NOT_NUMBERS = ("timedelta64", "datetime64")
_NOT_A_NUMBER = object()


def _numpy_kind(t):
    """The plain type of numpy scalar type ``t``'s values (bool, int or
    float), or None when ``t`` is not one of numpy's own: read from the
    type's flags and MRO, never from anything a program can define."""
    if _type_flags(t) & _HEAP_TYPE or _type_module(t) != "numpy" or _type_name(t) in _NUMPY_NOT_NUMBERS:
        return None
    for base in _type_mro(t):
        if _type_flags(base) & _HEAP_TYPE:
            return None
        if _type_module(base) == "numpy":
            kind = _NUMPY_KINDS.get(_type_name(base))
            if kind is not None:
                return kind
    return None


def _plain_number(x, t):
    """``x`` (of type ``t``, not an exact JSON type) as a plain bool, int or
    float when it is a number whose value can be read without program code
    (see the module docs), else ``_NOT_A_NUMBER``."""
    if issubclass(t, float):
        return _float_value(x)
    if issubclass(t, int):
        return _int_value(x)
    kind = _numpy_kind(t)
    if kind is None:
        return _NOT_A_NUMBER
    value = t.item(x)  # numpy's own method: a built-in type's cannot be replaced
    if type(value) is not kind:  # longdouble: a numpy scalar again
        return _NOT_A_NUMBER
    return value


def _describe_type(t):
    """'a tuple (use a list)', 'a Color (a subclass of int; ...)'.

    Identity and ``issubclass`` against exact builtin types only, so no
    metaclass code of the program runs.
    """
    name = _type_name(t)
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
        else:
            if _type_module(t) == "numpy" and not _type_flags(t) & _HEAP_TYPE:
                if name == "ndarray":
                    hint = " (a numpy array; convert it with .tolist())"
                elif any(_type_name(b) == "generic" and _type_module(b) == "numpy" for b in _type_mro(t)):
                    hint = " (a numpy scalar; convert it to a plain int, float or str)"
    return f"{_with_article(name)}{hint}"


def _with_article(name):
    """'a float32', 'an int64'."""
    article = "an" if name[:1] in ("a", "e", "i", "o", "u", "A", "E", "I", "O", "U") else "a"
    return f"{article} {name}"


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
        elif is_ident(key):
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
    which become arrays as ``json.dumps`` writes them, and numbers whose
    plain value can be read without program code (the module docs), which
    are written as that value; anything else raises ``NotJsonError``
    naming the path and the type. Floats are written as ``float.__repr__``
    (shortest round trip), ints exactly. Raises ``OverBudgetError`` as soon as
    the UTF-8 length of the text is known to exceed ``budget`` bytes.
    Iterative, so depth is unbounded; never calls program code. The cyclic GC
    is paused meanwhile: the walk allocates one frame per open container, and
    collections triggered by them would scan every live frame again.
    """
    # A scalar value (most often a run's): its text at once, without the
    # walk, whose every line runs from cold caches when runs come apart.
    t = type(value)
    if t is int and -_SMALL_INT < value < _SMALL_INT:
        text = _int_repr(value)
    elif value is None:
        text = "null"
    elif t is bool:
        text = "true" if value else "false"
    else:
        text = None
    if text is not None:
        if len(text) > budget:
            raise OverBudgetError
        return text
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
                s = _int_repr(x) if bits <= _SAFE_INT_BITS else unlimited_digits(_int_repr, x)
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
                # A number of another type: its plain value, written as above.
                v = _plain_number(x, t)
                tv = type(v)
                if tv is float:
                    if v - v != 0.0:
                        kind = _with_article(_type_name(t))
                        raise NotJsonError(
                            f"value at {_path(frames, len(frames))} is {_float_repr(v)} ({kind}), "
                            "which is not JSON (NaN and infinities have no JSON form)"
                        )
                    s = _float_repr(v)
                elif tv is int:
                    bits = v.bit_length()
                    if bits > 64 and bits > 4 * (budget - size + 2):
                        raise OverBudgetError
                    s = _int_repr(v) if bits <= _SAFE_INT_BITS else unlimited_digits(_int_repr, v)
                elif tv is bool:
                    s = "true" if v else "false"
                else:
                    error = NotJsonError(
                        f"value at {_path(frames, len(frames))} is {_describe_type(t)}, which is not JSON"
                    )
                    # No builtin-type hint applies: a rich object (a DataFrame, a figure).
                    error.rich = _describe_type(t).find("(") < 0
                    raise error
                size += len(s)
                put(s)
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
