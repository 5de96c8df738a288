"""Python callables as bindings: sync and async, errors, concurrency."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

import pycage

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")

GATHER_200 = "import asyncio\nreturn await asyncio.gather(*[ns.f({'i': i}) for i in range(200)])"


def test_sync_and_async_bindings(rt):
    def add(a, b):
        return a + b

    async def mul(a, b):
        await asyncio.sleep(0.001)
        return a * b

    r = rt.run(
        "return [await ns.add({'a': 2, 'b': 3}), await ns.mul({'a': 4, 'b': 5})]", {"ns": {"add": add, "mul": mul}}
    )
    assert r.value == [5, 20]


def test_keyword_arguments_and_an_arguments_object_call_the_same(process_rt):
    calls = []

    def search(query, limit=10):
        calls.append((query, limit))
        return len(calls)

    r = process_rt.run(
        "return [await tools.search(query='x'), await tools.search({'query': 'y', 'limit': 2}), "
        "await tools.search(query='z', limit=3)]",
        {"tools": {"search": search}},
    )
    assert r.value == [1, 2, 3]
    assert calls == [("x", 10), ("y", 2), ("z", 3)]


def test_no_argument_calls_with_no_arguments(rt):
    r = rt.run("return await ns.now()", {"ns": {"now": lambda: "called with nothing"}})
    assert r.value == "called with nothing"


def test_non_object_argument_is_one_positional(rt):
    r = rt.run(
        "return [await ns.f([1, 2]), await ns.f(3), await ns.f('s'), await ns.f(None)]",
        {"ns": {"f": lambda x: repr(x)}},
    )
    assert r.value == ["[1, 2]", "3", "'s'", "None"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_200_gathered_calls(rt, kind):
    active = 0
    peak = 0
    lock = threading.Lock()

    def f_sync(i):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return i * 2

    async def f_async(i):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return i * 2

    f = f_sync if kind == "sync" else f_async
    if kind == "sync":
        r = rt.run(GATHER_200, {"ns": {"f": f}})
    else:
        r = asyncio.run(rt.arun(GATHER_200, {"ns": {"f": f}}))
    assert r.error is None, r.error
    assert r.value == [i * 2 for i in range(200)]
    assert peak > 1, "calls did not overlap"


def test_async_bindings_run_on_the_callers_loop_with_its_context(process_rt):
    seen = []

    async def where(_):
        seen.append((asyncio.get_running_loop(), request_id.get()))
        return True

    async def main():
        request_id.set("req-42")
        r = await process_rt.arun("return await ns.where(1)", {"ns": {"where": where}})
        return r, asyncio.get_running_loop()

    r, loop = asyncio.run(main())
    assert r.value is True
    assert seen == [(loop, "req-42")]


def test_sync_bindings_see_the_callers_context_on_a_worker_thread(process_rt):
    seen = []

    def where(_):
        seen.append((threading.current_thread() is threading.main_thread(), request_id.get()))
        return True

    token = request_id.set("sync-7")
    try:
        assert process_rt.run("return await ns.where(1)", {"ns": {"where": where}}).value is True
    finally:
        request_id.reset(token)
    assert seen == [(False, "sync-7")]


def test_async_binding_in_a_sync_run_uses_a_private_loop(process_rt):
    async def f(x):
        await asyncio.sleep(0)
        return x + 1

    assert process_rt.run("return await ns.f(1)", {"ns": {"f": f}}).value == 2


def test_sync_callable_returning_an_awaitable(process_rt):
    async def later(x):
        return x * 3

    r = process_rt.run("return await ns.f(2)", {"ns": {"f": lambda x: later(x)}})
    assert r.value == 6


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_binding_exception_rejects_the_call_with_its_message(rt, kind):
    def boom_sync(_):
        raise LookupError("no such user: 42")

    async def boom_async(_):
        raise LookupError("no such user: 42")

    boom = boom_sync if kind == "sync" else boom_async
    program = "try:\n    await ns.boom(1)\nexcept RuntimeError as e:\n    return str(e)"
    r = (
        rt.run(program, {"ns": {"boom": boom}})
        if kind == "sync"
        else asyncio.run(rt.arun(program, {"ns": {"boom": boom}}))
    )
    assert r.value == "no such user: 42"


def test_error_class(rt):
    def lookup(_):
        raise KeyError("gone")

    r = rt.run(
        "try:\n    await tools.lookup(1)\n"
        "except ToolError as e:\n    return [type(e).__name__, str(e), e.tool, isinstance(e, Exception)]",
        {"tools": pycage.Namespace({"lookup": lookup}, error_class=pycage.ErrorClass("ToolError", "tool"))},
    )
    assert r.value == ["ToolError", "'gone'", "lookup", True]


def test_error_class_by_name_names_the_member_on_tool(process_rt):
    """``Namespace(error_class="X")`` uses ``.tool``, as bindings files, the
    CLI and ``python_tools`` do (it used ``.member``)."""

    def lookup(_):
        raise KeyError("gone")

    assert pycage.ErrorClass("X").member_name_property == "tool"
    r = process_rt.run(
        "try:\n    await tools.lookup(1)\nexcept LookupFailed as e:\n    return e.tool",
        {"tools": pycage.Namespace({"lookup": lookup}, error_class="LookupFailed")},
    )
    assert r.value == "lookup"


def test_old_member_attribute_still_reads_with_a_deprecation_warning(process_rt):
    """``.member`` (the old default) reads the failed member's name for one
    more release, warning which attribute to use; a class whose property is
    ``member`` has no alias to warn about."""

    def lookup(_):
        raise KeyError("gone")

    program = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    try:\n        await tools.lookup(1)\n"
        "    except LookupFailed as e:\n        name = e.member\n"
        "return [name, [(w.category.__name__, str(w.message)) for w in caught]]"
    )
    r = process_rt.run(program, {"tools": pycage.Namespace({"lookup": lookup}, error_class="LookupFailed")})
    assert r.value == ["lookup", [["DeprecationWarning", "LookupFailed.member is deprecated; use .tool"]]], r
    old = pycage.Namespace({"lookup": lookup}, error_class=pycage.ErrorClass("LookupFailed", "member"))
    r = process_rt.run(program, {"tools": old})
    assert r.value == ["lookup", []], r


def _help(rt, bindings, target):
    """What ``help(target)`` prints inside a run."""
    r = rt.run(f"import pydoc\nreturn pydoc.render_doc({target}, renderer=pydoc.plaintext)", bindings)
    assert r.error is None, r.error
    return r.value


def test_help_of_a_member_shows_the_callables_signature_and_docstring(rt):
    """``help(tools.fn)`` in a run shows the callable's signature as a
    program calls it (keyword-only), its
    annotations and its docstring (it showed ``(*args, **kwargs)``, and then
    the stub's ``async def`` line), for a dict of callables, a Namespace
    and an object alike: the stub's signature is the member's, shown once."""

    def add(a: int, b: int = 2, *, scale: float = 1.0) -> float:
        """Adds two numbers.

        Then scales the sum."""
        return (a + b) * scale

    class Store:
        async def get(self, key: str) -> "dict[str, int]":
            """The entry for key."""
            return {}

    for bindings, target, head, doc in [
        (
            {"tools": {"add": add}},
            "tools.add",
            "async add(*, a: int, b: int = 2, scale: float = 1.0) -> float\n",
            "Adds two numbers.",
        ),
        (
            {"tools": pycage.Namespace({"add": add}, error_class="E")},
            "tools.add",
            "async add(*, a: int, b: int = 2, scale: float = 1.0) -> float\n",
            "Then scales the sum.",
        ),
        ({"store": Store()}, "store.get", "async get(*, key: str) -> dict[str, int]\n", "The entry for key."),
    ]:
        text = _help(rt, bindings, target)
        assert head in text and doc in text, text
        assert "*args" not in text and "async def" not in text, text
    ns_text = _help(rt, {"tools": pycage.Namespace({"add": add}, error_class="E")}, "tools")
    assert "1 function of the host" in ns_text and "Raises E (`.tool` names the function)" in ns_text, ns_text


def test_signatures_are_shown_as_a_program_calls_them():
    """Parameters that take a keyword are shown keyword-only (a call's
    arguments cross as one object), ``*args`` is left out, positional-only
    parameters keep their ``/``, and a callable without a signature takes
    keywords."""
    from pycage._signature import signature

    def plain(query: str, limit: int = 10) -> list:
        return []

    def mixed(a, /, b, *args, c=1, **rest):
        return None

    def only(x: int, /) -> int:
        return x

    def variadic(*args, **kwargs):
        return None

    assert signature(plain) == "(*, query: str, limit: int = 10) -> list"
    assert signature(mixed) == "(a, /, *, b, c=1, **rest) -> Any"
    assert signature(only) == "(x: int, /) -> int"
    assert signature(variadic) == "(**kwargs) -> Any"
    assert signature(lambda: None) == "() -> Any"
    assert signature(len) == "(obj, /) -> Any"
    assert signature(type) == "(**kwargs: Any) -> Any"


def test_a_call_written_from_the_stub_runs(rt):
    """A program that calls a tool as its stub reads (by keyword) gets the
    tool's result; one that passes two positional arguments is told the
    signature to use."""

    def search(query: str, limit: int = 10) -> list:
        return [query, limit]

    toolset = pycage.python_tools([search])
    assert "async def search(*, query: str, limit: int = 10) -> list:" in toolset.stubs
    r = rt.run("return await tools.search(query='x', limit=2)", toolset.bindings)
    assert r.value == ["x", 2], r
    r = rt.run(
        "try:\n    await tools.search('x', 2)\nexcept TypeError as e:\n    return str(e)",
        toolset.bindings,
    )
    assert r.value == (
        "tools.search() takes keyword arguments or one positional argument (2 positional given); "
        "call it as: async def search(*, query: str, limit: int = 10) -> list"
    ), r


def test_help_through_python_tools_matches_the_stubs(rt):
    """Through ``python_tools`` the member's help is its stub (its signature
    as the member's, then its docstring), with a tool object's description."""

    def search(query: str, limit: int = 10) -> list:
        """Search the web."""
        return []

    class Tool:
        name = "count"
        description = "Count the words of a text."

        @staticmethod
        def function(text: str) -> int:
            return len(text.split())

    toolset = pycage.python_tools([search, Tool()])
    text = _help(rt, toolset.bindings, "tools.search")
    assert "async search(*, query: str, limit: int = 10) -> list\n    Search the web.\n" in text, text
    assert "async def search(*, query: str, limit: int = 10) -> list:" in toolset.stubs
    text = _help(rt, toolset.bindings, "tools.count")
    assert "async count(*, text: str) -> int\n    Count the words of a text.\n" in text, text


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), MemoryError("big")])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_crashing_binding_does_not_crash_the_host(process_rt, exc, kind):
    def crash_sync(_):
        raise exc

    async def crash_async(_):
        raise exc

    crash = crash_sync if kind == "sync" else crash_async
    program = "try:\n    await ns.crash(1)\nexcept RuntimeError as e:\n    return 'rejected: ' + str(e)"
    if kind == "sync":
        r = process_rt.run(program, {"ns": {"crash": crash}})
    else:

        async def main():
            r = await process_rt.arun(program, {"ns": {"crash": crash}})
            await asyncio.sleep(0)
            return r

        r = asyncio.run(main())
    assert r.error is None, r.error
    assert r.value.startswith("rejected: ")
    # The host still works.
    assert process_rt.run("return 1").value == 1


def test_namespace_object(process_rt):
    class Calculator:
        factor = 10

        def scale(self, x):
            return x * self.factor

        async def ascale(self, x):
            return -x * self.factor

        def _private(self, x):
            return x

    r = process_rt.run("return [await calc.scale(2), await calc.ascale(3), sorted(dir(calc))]", {"calc": Calculator()})
    assert r.value == [20, -30, ["ascale", "scale"]]


def test_member_names_are_any_strings(process_rt):
    r = process_rt.run(
        "return [await getattr(ns, 'my-tool')(1), await ns.__init__(2), await getattr(ns, '')(3)]",
        {"ns": {"my-tool": lambda x: x, "__init__": lambda x: x * 2, "": lambda x: x * 3}},
    )
    assert r.value == [1, 4, 9]


@pytest.mark.parametrize(
    ("bindings", "message"),
    [
        ({"class": {}}, "reserved word"),
        ({"print": {}, "tools": {}}, "would shadow the Python builtin print"),
        ({"1abc": {}}, "not an identifier"),
        ({"tools": {"f": 3}}, "bindings['tools']['f'] is not callable: got int 3"),
        ({"search": len}, "bindings['search'] is a function"),
        ([{"f": len}], "bindings must be a dict"),
        ({"tools": {1: len}}, "member names must be str, got int 1"),
        ({"a": pycage.Namespace({}, error_class="a")}, "distinct"),
        ({"a": pycage.Namespace({}, error_class=pycage.ErrorClass("E", "message"))}, "member_name_property"),
    ],
)
def test_invalid_bindings_name_what_was_passed(process_rt, bindings, message):
    with pytest.raises(pycage.InvalidBindingsError) as e:
        process_rt.run("return 1", bindings)
    assert message in str(e.value)
    with pytest.raises(pycage.InvalidBindingsError):
        process_rt.check_bindings(bindings)


def test_unknown_member_call_fails_in_the_program(process_rt):
    r = process_rt.run("return await ns.missing(1)", {"ns": {}})
    assert r.error.kind == "exception"
    assert "AttributeError: namespace 'ns' has no function 'missing'; it has no functions" in r.error.message


def test_timeout_cancels_an_in_flight_async_binding():
    cancelled = threading.Event()
    started = threading.Event()

    async def hang(_):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main():
        with pycage.Runtime(isolation="process", wall_seconds=1) as rt:
            r = await rt.arun("return await ns.hang(1)", {"ns": {"hang": hang}})
            for _ in range(100):
                if cancelled.is_set():
                    break
                await asyncio.sleep(0.05)
            return r

    r = asyncio.run(main())
    assert r.error.kind == "timeout"
    assert started.is_set() and cancelled.is_set()
