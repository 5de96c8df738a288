"""Argument checks shared by every entry point: each error names the
argument, what was given and the bound it broke (budgets from the budgets
table, ``pycage._budgets``)."""

from __future__ import annotations

import os
from typing import Any, Optional

from . import _budgets, _native
from .errors import ConfigError


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _check_int(
    name: str, value: Optional[int], minimum: int, owner: str = "pycage.Runtime", *, why: str = ""
) -> Optional[int]:
    """``value`` when it is an int from ``minimum`` to 2**64 - 1; the
    message states that bound (and ``why``, after a colon)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {_describe(value)}")
    if value < minimum:
        reason = f": {why}" if why else ""
        raise ConfigError(f"invalid {owner} argument: {name} must be at least {minimum}{reason}, got {value}")
    if value >= 1 << 64:
        raise ConfigError(f"invalid {owner} argument: {name} must be below 2**64, got {value}")
    return value


def _check_at_most(name: str, value: Optional[int], maximum: int, owner: str = "pycage.Runtime") -> Optional[int]:
    if value is not None and value > maximum:
        raise ConfigError(f"invalid {owner} argument: {name} must be at most {maximum}, got {value}")
    return value


def _check_seconds(
    name: str,
    value: Optional[float],
    owner: str = "pycage.Runtime",
    *,
    positive: bool = False,
    maximum: Optional[float] = None,
) -> Optional[float]:
    """``value`` as float seconds when it is finite, ``> 0`` if ``positive``
    (else ``>= 0``) and at most ``maximum``; the message states the bound."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number of seconds, got {_describe(value)}")
    value = float(value)
    low_ok = value > 0 if positive else value >= 0
    if not (low_ok and value < float("inf")) or (maximum is not None and value > maximum):
        bound = "greater than 0" if positive else ">= 0"
        if maximum is not None:
            bound = f"{bound} and at most {maximum:g}"
        raise ConfigError(f"invalid {owner} argument: {name} must be a finite number {bound}, got {value}")
    return value


#: The smallest ``RLIMIT_AS`` a run may have: CPython cannot start in less.
_MIN_ADDRESS_SPACE = _native.MIN_ADDRESS_SPACE_BYTES
_ADDRESS_SPACE_WHY = f"{_MIN_ADDRESS_SPACE >> 20} MiB; CPython cannot start in less"

_UNIT_SUFFIX = {"bytes": " bytes", "MiB": " MiB", "ms": " ms", "s": " s", "count": ""}


def _budget_bound(keyword: str) -> str:
    """The bound of a budget keyword, in the keyword's unit (from the
    budgets table): "must be at least 1 s", "must be between 1 and 65536"."""
    _field, unit, _field_unit, kw_scale, field_scale, low, high, _default, _per_run = _budgets.BUDGETS[keyword]

    def shown(x: float) -> str:
        return f"{x:g}" if kw_scale > field_scale else str(int(x))

    low_kw = low * field_scale / kw_scale
    suffix = _UNIT_SUFFIX[unit]
    if high is None:
        return f"must be at least {shown(low_kw)}{suffix}" if low else "must be >= 0"
    high_kw = high * field_scale / kw_scale
    if not low:
        return f"must be at most {shown(high_kw)}{suffix}"
    return f"must be between {shown(low_kw)} and {shown(high_kw)}{suffix}"


def _check_budget(keyword: str, value: Any, owner: str = "pycage.Runtime") -> int:
    """A budget keyword's value in its config field's unit, checked against
    the budgets table (the message states the bound in the keyword's unit)."""
    _field, unit, _field_unit, kw_scale, field_scale, low, high, _default, _per_run = _budgets.BUDGETS[keyword]
    if kw_scale > field_scale:  # seconds into milliseconds: fractions count
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{owner}: {keyword} must be a number of seconds, got {_describe(value)}")
        if not value == value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"invalid {owner} argument: {keyword} {_budget_bound(keyword)}, got {value}")
        converted = round(value * kw_scale / field_scale)
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{owner}: {keyword} must be an int, got {_describe(value)}")
        converted = value * kw_scale // field_scale
    if converted < low or (high is not None and converted > high) or converted >= 1 << 64:
        raise ConfigError(f"invalid {owner} argument: {keyword} {_budget_bound(keyword)}, got {value}")
    return converted


def _budget_fields(given: dict[str, Any], owner: str, *, per_run: bool = False) -> dict[str, int]:
    """``{config field: value}`` for budget keywords (``None`` keeps the
    default); a keyword that is not a budget (of one run, with ``per_run``)
    is a ``TypeError`` listing the ones there are."""
    fields = {}
    for keyword, value in given.items():
        entry = _budgets.BUDGETS.get(keyword)
        if entry is None or (per_run and not entry[8]):
            known = sorted(k for k, e in _budgets.BUDGETS.items() if e[8] or not per_run)
            raise TypeError(f"{owner}() got an unexpected keyword argument {keyword!r}; budgets: {', '.join(known)}")
        if value is not None:
            fields[entry[0]] = _check_budget(keyword, value, owner)
    return fields


def _strings(name: str, value: Any, what: str) -> list[str]:
    """A list of strings from an iterable of them (a lone string is refused:
    it would iterate as characters)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"pycage.Runtime: {name} must be a list of {what}, got {_describe(value)}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"pycage.Runtime: {name} items must be {what}, got {_describe(item)}")
    return items


def _check_path(name: str, value: Any) -> str:
    try:
        return os.fspath(value)
    except TypeError:
        raise TypeError(f"pycage.Runtime: {name} must be a path (str or os.PathLike), got {_describe(value)}") from None


def _check_code(code: Any) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str holding a Python program, got {_describe(code)}")
    return code


def _check_flag(name: str, value: Any, optional: bool = False) -> Any:
    """``value`` if it is a bool (or ``None`` when ``optional``)."""
    if isinstance(value, bool) or (optional and value is None):
        return value
    raise TypeError(f"pycage: {name} must be {'True, False or None' if optional else 'a bool'}, got {_describe(value)}")
