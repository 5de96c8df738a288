"""Values cross exactly, at any depth, in both directions."""

from __future__ import annotations

import decimal
import math
import sys

import pytest

import pycage

DEPTH = 100_000


def nested(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


def depth_of(x: list) -> int:
    d = 0
    while x:
        (x,) = x
        d += 1
    return d


def test_exact_numbers_from_a_program(rt):
    r = rt.run("return [2**100, -2**70, -0.0, 0.1, 1e300, 5e-324, 9007199254740993, True, 1.5]")
    v = r.value
    assert v[0] == 2**100 and type(v[0]) is int
    assert v[1] == -(2**70)
    assert math.copysign(1.0, v[2]) == -1.0 and v[2] == 0.0
    assert v[3:7] == [0.1, 1e300, 5e-324, 9007199254740993]
    assert v[7] is True and type(v[8]) is float


def test_huge_int_beyond_int_max_str_digits(process_rt):
    """An integer longer than ``sys.get_int_max_str_digits()`` arrives as an
    exact integral ``Decimal`` (``int()`` of it would take quadratic time),
    to a binding and in the value, and a ``Decimal`` goes back as its number."""
    n = 7**20000  # ~16,900 digits: over Python's default 4300-digit limit
    seen = []

    def echo(x):
        seen.append(x)
        return x

    r = process_rt.run(
        "import sys\nsys.set_int_max_str_digits(0)\nv = await ns.echo(7**20000)\nreturn [v == 7**20000, 7**20000]",
        {"ns": {"echo": echo}},
    )
    assert r.error is None, r.error
    assert type(seen[0]) is decimal.Decimal and seen[0] == n
    assert r.value[0] is True
    assert type(r.value[1]) is decimal.Decimal and r.value[1] == n
    assert str(r.value[1]) == str(decimal.Decimal(n))


def test_a_child_s_megabyte_of_digits_is_not_parsed_as_an_int(process_rt):
    """A hostile child's 600,000-digit integer (a forged ``done``) costs the
    host linear time: it is a ``Decimal``, never ``int()``'s quadratic
    parse (which held the GIL for minutes)."""
    program = (
        "import os\nos.set_blocking(3, True)\n"
        "line = b'{\"type\":\"done\",\"value\":[-' + b'9' * 600000 + b', 12345678901234567890123]}\\n'\n"
        "mv = memoryview(line)\nwhile mv:\n    mv = mv[os.write(3, mv):]\n"
        "import time\ntime.sleep(5)\n"
    )
    r = process_rt.run(program)
    assert r.error is None, r.error
    big, small = r.value
    assert type(big) is decimal.Decimal and str(big) == "-" + "9" * 600000
    assert type(small) is int and small == 12345678901234567890123


def test_the_int_limit_is_the_hosts_own(process_rt):
    """With the host's ``sys.set_int_max_str_digits(0)`` (no limit), a long
    integer is an ``int`` again: the host chose the cost."""
    program = "import sys\nsys.set_int_max_str_digits(0)\nreturn 7**20000"
    if not hasattr(sys, "set_int_max_str_digits"):  # 3.10: CPython's default of 4,300 digits holds
        assert type(process_rt.run(program).value) is decimal.Decimal
        return
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        r = process_rt.run(program)
    finally:
        sys.set_int_max_str_digits(before)
    assert type(r.value) is int and r.value == 7**20000


def test_exact_numbers_through_a_binding(rt):
    seen = []

    def echo(x):
        seen.append(x)
        return x

    r = rt.run(
        "v = await ns.echo([2**64 + 1, -0.0, 1e-7, 'é\\n\\u2028', None])\n"
        "return [v[0] == 2**64 + 1, str(v[1]), v[2] == 1e-7, v[3]]",
        {"ns": {"echo": echo}},
    )
    assert r.value == [True, "-0.0", True, "é\n\u2028"]
    assert seen[0][0] == 2**64 + 1 and str(seen[0][1]) == "-0.0"


def test_binding_result_tuple_crosses_as_list(process_rt):
    r = process_rt.run("return await ns.f(1)", {"ns": {"f": lambda _: (1, (2, 3))}})
    assert r.value == [1, [2, 3]]


def test_deep_values_both_ways(process_rt):
    deep = nested(DEPTH)
    got = []

    def take(x):
        got.append(depth_of(x))
        return nested(DEPTH)

    r = process_rt.run(
        "x = []\nfor _ in range(100000): x = [x]\n"
        "back = await ns.take(x)\n"
        "d = 0\nwhile back:\n    (back,) = back\n    d += 1\n"
        "return d",
        {"ns": {"take": take}},
    )
    assert r.error is None, r.error
    assert r.value == DEPTH and got == [DEPTH]
    # The program's value, and the module helpers.
    assert depth_of(pycage.from_json(pycage.to_json(deep))) == DEPTH


@pytest.mark.parametrize(
    ("value", "path", "what"),
    [
        ({"a": [1, {1, 2}]}, "$.a[1]", "set is not JSON"),
        ({"a": {1: "x"}}, "$.a", "dict key 1 (int) is not a str"),
        ([float("nan")], "$[0]", "float nan is not JSON"),
        ({"k": ["\ud800"]}, "$.k[0]", "lone surrogate"),
        ({"my key": b"x"}, '$["my key"]', "bytes is not JSON"),
        ([object()], "$[0]", "object is not JSON"),
    ],
)
def test_non_json_is_refused_with_its_path(value, path, what):
    with pytest.raises(ValueError) as e:
        pycage.to_json(value)
    assert f"{path}: " in str(e.value) and what in str(e.value)


def test_cycle_is_refused():
    x: list = [1]
    x.append({"self": x})
    with pytest.raises(ValueError, match=r"\$\[1\]\.self: circular reference"):
        pycage.to_json(x)
    shared = [1]
    assert pycage.to_json([shared, shared]) == "[[1],[1]]"


def test_a_non_json_binding_result_rejects_the_call(rt):
    r = rt.run(
        "try:\n    await ns.f(1)\nexcept RuntimeError as e:\n    return str(e)",
        {"ns": {"f": lambda _: {"when": object()}}},
    )
    assert r.value == "ns.f returned a value that cannot cross as JSON: $.when: object is not JSON " + (
        "(allowed: dict with str keys, list, tuple, str, int, float, bool, None)"
    )


def test_subclasses_cross_as_their_base():
    import collections
    import enum

    class Color(enum.IntEnum):
        RED = 1

    class Name(str):
        pass

    value = collections.OrderedDict(a=Color.RED, b=Name("n"), c=2**80 + Color.RED)
    assert pycage.to_json(value) == '{"a":1,"b":"n","c":1208925819614629174706177}'
    assert pycage.to_json(True) == "true" and pycage.to_json(-0.0) == "-0.0"
