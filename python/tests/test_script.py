"""Tests for pycage.script: a program compiled as the script ``__main__``.

These run compiled programs in this process, in a fresh globals dict, the
way the bootstrap does (``exec`` without an event loop, or the coroutine on
a loop when the program awaits at top level).
"""

import asyncio
import builtins
import os
import sys
import traceback
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

# E402: pycage is importable only once PYTHON_DIR is on sys.path (the tests
# run with `python3 -I`, which leaves the current directory off it).
from pycage.script import PROGRAM_FILENAME, compile_program  # noqa: E402


def fresh_globals():
    return {"__name__": "__main__", "__builtins__": builtins}


def run(source, program_globals=None):
    """(has_value, value, globals) of running ``source``."""
    g = fresh_globals() if program_globals is None else program_globals
    program = compile_program(source)
    run_compiled(program, g)
    has_value, value = program.value()
    return has_value, value, g


def run_compiled(program, g):
    """Run a compiled program as the runner does."""
    if program.is_coroutine:
        asyncio.run(_awaited(program, g))
    else:
        eval(program.code, g)
        if program.tail is not None:
            program.keep(eval(program.tail, g))


async def _awaited(program, g):
    """What the runner's loop does with a program that awaits."""
    result = eval(program.code, g)
    if program.code_awaits:
        await result
    if program.tail is not None:
        result = eval(program.tail, g)
        program.keep(await result if program.tail_awaits else result)


def value(source):
    has_value, v, _ = run(source)
    assert has_value, f"no value from {source!r}"
    return v


def no_value(source):
    has_value, v, _ = run(source)
    return not has_value


class ReturnTest(unittest.TestCase):
    def test_plain_and_bare_return(self):
        self.assertEqual(value("return 1"), 1)
        self.assertEqual(value('return "a", 1'), ("a", 1))
        self.assertIsNone(value("return"))
        self.assertIsNone(value("return None"))
        self.assertTrue(no_value("x = 1"))
        self.assertTrue(no_value(""))

    def test_return_ends_the_program(self):
        has_value, v, g = run("x = 1\nreturn x\nx = 2\n")
        self.assertEqual((has_value, v, g["x"]), (True, 1, 1))

    def test_return_inside_if(self):
        program = "if n > 1:\n    return 'big'\nelif n:\n    return 'one'\nreturn 'zero'\n"
        for n, want in ((5, "big"), (1, "one"), (0, "zero")):
            g = fresh_globals()
            g["n"] = n
            self.assertEqual(run(program, g)[1], want)

    def test_return_inside_nested_loops_skips_else_and_rest(self):
        program = (
            "seen = []\n"
            "for i in range(5):\n"
            "    while True:\n"
            "        for j in range(5):\n"
            "            seen.append((i, j))\n"
            "            if i == 1 and j == 2:\n"
            "                return seen\n"
            "        else:\n"
            "            seen.append('inner else')\n"
            "        break\n"
            "else:\n"
            "    seen.append('outer else')\n"
            "seen.append('after')\n"
        )
        has_value, v, g = run(program)
        self.assertEqual(v, [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), "inner else", (1, 0), (1, 1), (1, 2)])
        self.assertIs(v, g["seen"])

    def test_loop_that_ends_normally_keeps_going(self):
        self.assertEqual(value("for i in range(3):\n    if i == 10:\n        return i\nreturn 'done'\n"), "done")
        self.assertEqual(value("while False:\n    return 1\nelse:\n    x = 2\nx\n"), 2)

    def test_return_in_loop_else_leaves_the_enclosing_loop(self):
        program = (
            "out = []\n"
            "for i in range(3):\n"
            "    for j in range(2):\n"
            "        pass\n"
            "    else:\n"
            "        if i == 1:\n"
            "            return out\n"
            "        out.append(i)\n"
            "out.append('after')\n"
        )
        self.assertEqual(value(program), [0])

    def test_return_inside_try_finally_runs_finally(self):
        has_value, v, g = run("log = []\ntry:\n    return 'v'\nfinally:\n    log.append('finally')\n")
        self.assertEqual((v, g["log"]), ("v", ["finally"]))

    def test_return_in_finally_overrides_and_discards_the_exception(self):
        self.assertEqual(value("try:\n    return 1\nfinally:\n    return 2\n"), 2)
        self.assertEqual(value("try:\n    1 / 0\nfinally:\n    return 'swallowed'\n"), "swallowed")

    def test_exception_in_finally_beats_the_return(self):
        with self.assertRaises(KeyError):
            run("try:\n    return 1\nfinally:\n    raise KeyError('k')\n")

    def test_return_cannot_be_swallowed_or_seen_by_the_program(self):
        program = (
            "import contextlib, sys\n"
            "seen = []\n"
            "try:\n"
            "    with contextlib.suppress(BaseException):\n"
            "        try:\n"
            "            return 'kept'\n"
            "        except BaseException as e:\n"
            "            seen.append(('caught', e))\n"
            "        finally:\n"
            "            seen.append(sys.exc_info())\n"
            "except:\n"
            "    seen.append('bare except')\n"
            "seen.append('after')\n"
        )
        has_value, v, g = run(program)
        self.assertEqual(v, "kept")
        self.assertEqual(g["seen"], [(None, None, None)])

    def test_return_inside_with_exits_cleanly(self):
        program = (
            "class Txn:\n"
            "    def __init__(self): self.log = []\n"
            "    def __enter__(self): return self\n"
            "    def __exit__(self, *exc):\n"
            "        self.log.append('commit' if exc == (None, None, None) else 'rollback')\n"
            "t = Txn()\n"
            "with t:\n"
            "    return t.log\n"
        )
        self.assertEqual(value(program), ["commit"])

    def test_return_inside_except_and_match(self):
        self.assertEqual(value("try:\n    {}['x']\nexcept KeyError as e:\n    return 'caught'\n"), "caught")
        program = "match [1, 2]:\n    case [a, b]:\n        return a + b\n    case _:\n        return 0\n"
        self.assertEqual(value(program), 3)

    def test_return_inside_async_for_and_async_with(self):
        program = (
            "import contextlib\n"
            "async def gen():\n"
            "    for i in range(10):\n"
            "        yield i\n"
            "@contextlib.asynccontextmanager\n"
            "async def cm():\n"
            "    yield 'cm'\n"
            "async with cm() as c:\n"
            "    async for i in gen():\n"
            "        if i == 3:\n"
            "            return [c, i]\n"
        )
        self.assertTrue(compile_program(program).is_coroutine)
        self.assertEqual(value(program), ["cm", 3])

    def test_returns_in_functions_and_classes_are_theirs(self):
        self.assertEqual(
            value("def f():\n    return 5\nclass A:\n    def g(self):\n        return 6\nf() + A().g()\n"), 11
        )
        with self.assertRaises(SyntaxError) as caught:
            compile_program("class A:\n    return 1\n")
        self.assertEqual(caught.exception.msg, "'return' outside function")

    def test_no_extra_globals(self):
        _, _, g = run("x = 1\nif x:\n    return x\n")
        self.assertEqual(sorted(g), ["__builtins__", "__name__", "x"])

    def test_code_object_stays_hashable(self):
        program = compile_program("for i in range(2):\n    return i\n1\n")
        hash(program.code)


class FinalExpressionTest(unittest.TestCase):
    def test_final_expression_is_the_value(self):
        self.assertEqual(value("20 + 22"), 42)
        self.assertEqual(value("x = [1]\nx"), [1])
        self.assertEqual(value("import asyncio\nawait asyncio.sleep(0, 'slept')"), "slept")

    def test_none_and_non_final_expressions_give_no_value(self):
        self.assertTrue(no_value("None"))
        self.assertTrue(no_value("[].append(1)"))
        self.assertTrue(no_value("1\nx = 2"))
        self.assertTrue(no_value("if True:\n    5\n"))

    def test_return_wins_over_the_final_expression(self):
        g = fresh_globals()
        g["flag"] = True
        self.assertEqual(run("if flag:\n    return 'returned'\n'final'", g)[1], "returned")
        g["flag"] = False
        self.assertEqual(run("if flag:\n    return 'returned'\n'final'", g)[1], "final")

    def test_docstring(self):
        has_value, v, g = run('"""Doc."""\nx = 1\n')
        self.assertEqual((has_value, g["__doc__"]), (False, "Doc."))
        has_value, v, g = run('"just a string"')
        self.assertEqual((has_value, v, g["__doc__"]), (True, "just a string", "just a string"))


class ScriptSemanticsTest(unittest.TestCase):
    def test_global_statement(self):
        self.assertEqual(value("x = 1\ndef f():\n    global x\n    x = 2\nf()\nreturn x"), 2)

    def test_exec_eval_and_star_import(self):
        self.assertEqual(value('exec("y = 3")\nreturn y'), 3)
        self.assertEqual(value("from math import *\nreturn floor(2.5)"), 2)
        self.assertEqual(value("z = 4\nreturn eval('z * 2')"), 8)
        self.assertEqual(value("a = 1\nreturn globals()['a'] is a and locals() is globals()"), True)

    def test_class_bodies_closures_comprehensions(self):
        program = (
            "n = 3\n"
            "class A:\n"
            "    k = n\n"
            "    doubled = [n * 2 for _ in range(2)]\n"
            "def make():\n"
            "    c = 10\n"
            "    return lambda: c + n\n"
            "return [A.k, A.doubled, make()(), {i: n for i in range(2)}, A.__module__]\n"
        )
        self.assertEqual(value(program), [3, [6, 6], 13, {0: 3, 1: 3}, "__main__"])

    def test_module_annotations(self):
        _, _, g = run("x: int = 1\nif True:\n    y: str = 'a'\n")
        self.assertEqual(g["__annotations__"], {"x": int, "y": str})

    def test_future_imports(self):
        program = '"""doc"""\nfrom __future__ import annotations\ndef f(a: Nope): pass\nreturn f.__annotations__'
        self.assertEqual(value(program), {"a": "Nope"})
        with self.assertRaises(SyntaxError) as caught:
            compile_program("x = 1\nfrom __future__ import annotations\n")
        self.assertIn("beginning of the file", caught.exception.msg)

    def test_top_level_await_makes_a_coroutine(self):
        self.assertTrue(compile_program("import asyncio\nawait asyncio.sleep(0)").is_coroutine)
        self.assertTrue(compile_program("x = [await a for a in b]").is_coroutine)
        self.assertFalse(compile_program("async def f():\n    await g()\nimport asyncio").is_coroutine)
        self.assertFalse(compile_program("return 1").is_coroutine)

    def test_traceback_names_module_frames(self):
        try:
            run("def f():\n    raise ValueError('x')\nf()\n")
        except ValueError as e:
            frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == PROGRAM_FILENAME]
        self.assertEqual(
            [(f.filename, f.lineno, f.name) for f in frames],
            [(PROGRAM_FILENAME, 3, "<module>"), (PROGRAM_FILENAME, 2, "f")],
        )


class SyntaxTest(unittest.TestCase):
    def assert_syntax_error(self, source, message, lineno):
        with self.assertRaises(SyntaxError) as caught:
            compile_program(source)
        self.assertEqual((caught.exception.msg, caught.exception.lineno), (message, lineno))
        self.assertEqual(caught.exception.filename, PROGRAM_FILENAME)

    def test_break_and_continue_outside_loops(self):
        self.assert_syntax_error("x = 1\nbreak\n", "'break' outside loop", 2)
        self.assert_syntax_error("if True:\n    continue\n", "'continue' not properly in loop", 2)
        self.assert_syntax_error("for i in x:\n    pass\nelse:\n    break\n", "'break' outside loop", 4)
        self.assert_syntax_error("try:\n    pass\nfinally:\n    break\n", "'break' outside loop", 4)
        # Inside loops, and inside functions, they are fine.
        compile_program("while True:\n    break\nfor i in x:\n    continue\ndef f():\n    return\n")

    def test_yield_and_nonlocal_at_top_level(self):
        self.assert_syntax_error("x = 1\nyield x\n", "'yield' outside function", 2)
        self.assert_syntax_error("await x\nyield 1\n", "'yield' outside function", 2)
        self.assert_syntax_error("for i in x:\n    yield i\n", "'yield' outside function", 2)
        with self.assertRaises(SyntaxError):
            compile_program("nonlocal x\n")

    def test_deep_nesting_is_an_error_not_a_crash(self):
        with self.assertRaises((SyntaxError, RecursionError, MemoryError)):
            compile_program("x = " + "(" * 100_000 + ")" * 100_000)


if __name__ == "__main__":
    unittest.main()
