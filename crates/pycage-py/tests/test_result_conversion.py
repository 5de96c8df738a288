"""A binding's result is read through the C API: converting it runs no
method of the value (a subclass's own __len__, __getitem__, __iter__,
__repr__, __int__, __index__ or items()), as json.dumps does."""

import pycage

CALLED = []


class SneakyList(list):
    def __len__(self):
        CALLED.append("list.__len__")
        return 0

    def __getitem__(self, i):
        CALLED.append("list.__getitem__")
        return "planted"

    def __iter__(self):
        CALLED.append("list.__iter__")
        return iter(["planted"])


class SneakyTuple(tuple):
    def __len__(self):
        CALLED.append("tuple.__len__")
        return 0


class SneakyDict(dict):
    def items(self):
        CALLED.append("dict.items")
        return [("planted", 1)]


class SneakyInt(int):
    def __repr__(self):
        CALLED.append("int.__repr__")
        return "666"

    def __int__(self):
        CALLED.append("int.__int__")
        return 666

    def __index__(self):
        CALLED.append("int.__index__")
        return 666


def test_conversion_never_runs_the_values_code():
    CALLED.clear()

    def sneaky():
        return SneakyDict(
            a=SneakyList([1, 2, SneakyTuple((3, 4))]),
            small=SneakyInt(7),
            big=SneakyInt(2**200),
        )

    with pycage.Runtime(isolation="process") as rt:
        result = rt.run("return await tools.sneaky()", bindings={"tools": {"sneaky": sneaky}})
    assert result.error is None, result
    assert result.value == {"a": [1, 2, [3, 4]], "small": 7, "big": 2**200}
    assert CALLED == []
