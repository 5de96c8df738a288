"""The lossless JSON decoder: the reverse of ``pycage.encoder``.

``decode_json`` reads any JSON text the host sends: ints of any size exact
(past ``sys.get_int_max_str_digits()`` too, lifted only for that read),
iteratively at any depth, without running program code.
"""

import gc
import re
from json import JSONDecoder
from json.decoder import WHITESPACE
from json.decoder import scanstring as _scanstring

from pycage._private import BUILTINS, get_int_max_str_digits, unlimited_digits

__builtins__ = BUILTINS

_gc_isenabled = gc.isenabled
_gc_disable = gc.disable
_gc_enable = gc.enable
_re_compile = re.compile

#: JSON whitespace: ``json``'s own compiled ``[ \t\n\r]*`` (compiling a
#: pattern is a noticeable part of an exec'd child's start).
_WS = WHITESPACE
_WS_CHARS = " \t\n\r"
#: A JSON number (ASCII digits only), compiled when a value first needs
#: ``_decode_deep``.
_NUMBER_PATTERN = r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?"
_number = []
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
    An int longer than the digit limit fails the first attempt; the text is
    then read again with the limit lifted.
    """
    # The host's frames have no whitespace around their value: the regex
    # (a match object, the engine's state) is kept for text that does.
    # In a fresh child its first match took about 16 copy-on-write faults.
    start = _WS.match(text, 0).end() if text[:1] in _WS_CHARS else 0
    try:
        value, end = _scan_once(text, start)
    except StopIteration:
        raise ValueError(f"expected a JSON value at offset {start}") from None
    except RecursionError:
        pass
    except ValueError:
        if not get_int_max_str_digits():
            raise
        return unlimited_digits(decode_json, text)
    else:
        if end != len(text):
            end = _WS.match(text, end).end()
        if end != len(text):
            raise ValueError(f"extra data at offset {end}")
        return value
    gc_was_enabled = _gc_isenabled()
    _gc_disable()  # see encode_json
    try:
        return _decode_deep(text)
    except ValueError:
        if not get_int_max_str_digits():
            raise
    finally:
        if gc_was_enabled:
            _gc_enable()
    return unlimited_digits(decode_json, text)


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
    if not _number:
        _number.append(_re_compile(_NUMBER_PATTERN).match)
    number = _number[0]
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
