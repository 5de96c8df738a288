"""The split compile (``pycage.script._compile_split``) against the rewrite.

A program without ``return`` compiles as a head and a tail, without Python's
``ast`` round trip; the rewrite stays the reference. Every program here runs
both ways, in fresh globals, and must end the same: value, exception (type,
message, the program's traceback lines), compile warnings, globals. The
tests also check that the split is taken where it should be, so they cannot
pass by always falling back to the rewrite.
"""

import builtins
import contextlib
import io
import os
import random
import re
import sys
import traceback
import unittest
import warnings

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

# E402: pycage is importable only once PYTHON_DIR is on sys.path.
from test_script import run_compiled  # noqa: E402  (a program run as the runner runs it)

from pycage import script  # noqa: E402

#: Programs the split must take.
SPLIT = [
    "x = 1\nx",
    "1 + 1",
    "x = 0\nx = x + 1\nx",
    "None",
    "x = 5",
    "import math\nmath.sqrt(16)",
    "def f(a, *, k=2):\n    return a * k\nf(3, k=4)",
    "def f():\n    return 1\n\n\nf()\n\n# done\n",
    "xs = [1, 2, 3]\n[x * 2 for x in xs]",
    "d = {'a': 1}\nd['a']  # the answer\n",
    "class A:\n    k = 3\nA.k",
    "for i in range(3):\n    pass\ni",
    "for i in range(3):\n    y = i\n",
    "if True:\n    z = 1\nelse:\n    z = 2\n",
    "if True:\n    x = 1\nelif x:\n    x = 2\nelse:\n    x = 3",
    "try:\n    x = 1\nexcept Exception:\n    pass\nfinally:\n    y = 2",
    "try:\n    1 / 0\nexcept ZeroDivisionError:\n    r = 'caught'\n",
    "with open(__import__('os').devnull) as f:\n    pass\n",
    "@staticmethod\ndef g():\n    pass\n",
    "async def main():\n    return 7\nawait main()",
    "import asyncio\nasync def main():\n    return 7\nasyncio.run(main())",
    "import asyncio\nawait asyncio.sleep(0)\nx = 3\nx",
    "import asyncio\nawait asyncio.sleep(0)\n",
    "from __future__ import annotations\ndef f(a: Nope): pass\nf.__annotations__",
    '"""doc"""\nx = 1\nx',
    "lambda: 1",
    "x = 1\n('a string, not a docstring')",
    "# a comment\n1 + 1",
    "\n\nb'bytes: no docstring, as the tree says'",
    # Banners: a comment of many `#` once made the docstring check backtrack
    # exponentially (these would not finish).
    "(  " + "#" * 80 + "\n    1\n)",
    "# a comment\n(  # " + "#(" * 40 + "\n    2\n)",
    "(y := 4)",
    "*a, b = [1, 2, 3]\na",
    "x = [\n    1,\n    2,\n]\nlen(x)",
    "total = sum(\n    [1, 2, 3]\n)\ntotal",
    "...",
    "-5",
    "f'{1 + 1}'",
    "b'bytes'",
    "x = 1\ndel x\n",
    "global q\nq = 1\nq",
    "undefined_name",
    "x = 1\n1 / 0\n",
    "def f():\n    raise ValueError('v')\nf()",
    "import asyncio\nasync def f():\n    raise KeyError('k')\nawait f()",
    "x is 1\nx = 1\nx",
    "x = 1\nx is 1",
    "x = 1\n(1, 2)(3)",
    "return 1",
    "x = 1\nreturn x",
    "return",
    "x = 1\nreturn None",
    "x = None\nreturn x  # the end\n",
    "import asyncio\nreturn await asyncio.sleep(0, 'slept')",
    "def f():\n    return 2\nreturn f(), f()",
    "return [\n    1,\n    2,\n]",
    "x = None\nreturn x  # the end\n\n    # more\n",
    "return 1,",
    "return *[1, 2], 3",
    "return(1)",
    "return'a'",
    "x = '{}'\nreturn x.format(1)",
    "return 1 / 0",
    "d = {}\nreturn d['missing']  # a KeyError, its columns",
    "returned = 1\nreturned",
    "return (x := 2)",
    "return (x for x in [1])",
    "return lambda: 1",
]

#: Programs the split must leave to the rewrite.
REWRITE = [
    "x = 1\nif x:\n    return x\n",
    "if True:\n    return 1\nx = 2\nx",
    "try:\n    return 1\nfinally:\n    pass",
    "return 1\nx = 2",
    "if True:\n    return 1\nreturn 2",
    "'just a docstring'",
    "x = 1\n'a string at the end'",
    "x = 1; x",
    "s = '''\nline\n'''\n",
    "s = '''\n1'''",
    "r = f(\n1)",
    "x = '\\d'\nx",
    "x = 1\r\nx",
    "x = 1\nfrom __future__ import annotations\n",
    "(\n'a docstring')",
    "# a comment\n(  # another\n    'a docstring'\n)",
    "return (1 +\n2)",
    "return 'a'\n'b'",
    "x = [await y for y in z]\nreturn x; y",
    "return *[1]",
    "x = (\n1,\n)",
    "",
    "# only a comment",
]

#: Programs that do not compile: both ways raise the same error.
BROKEN = [
    "return x := 1",
    "return x for x in y",
    "return *",
    "return (yield)",
    "return 1\n< 2",
    "return x = 1",
    "x = 1\nab\x00c",
    "x = 1\n" + "(" * 300 + ")" * 300,
    "break",
    "x = 1\nbreak",
    "x = 1\ncontinue\n",
    "yield 1",
    "x = 1\nyield x",
    "x = (",
    "x = 1\nx +",
    "def f(:\n    pass\nf()",
    "nonlocal x",
    "x = 1\n  y = 2\n",
    "x = 1\nawait",
    "for x in y:\nx",
    "x = 1\nelse:\n    pass",
]


def _splits(source):
    """Whether the split compiles ``source`` (its warnings dropped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return script._compile_split(source) is not None


def _outcome(compile_fn, source):
    """Everything a run of ``source`` shows, compiled by ``compile_fn``."""
    g = {"__name__": "__main__", "__builtins__": builtins}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        return _run(compile_fn, source, g) + (out.getvalue(),)


def _run(compile_fn, source, g):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            program = compile_fn(source)
        except SyntaxError as exc:
            return ("syntax", type(exc).__name__, exc.msg, exc.lineno, exc.offset, exc.end_lineno, exc.end_offset)
        except ValueError as exc:  # CPython 3.10 on a NUL byte in the source (3.11: a SyntaxError)
            return ("syntax", type(exc).__name__, str(exc))
        # As a set: a head with a warning and a top-level `return` warns
        # twice (pycage.script says why); test_warnings_come_once counts.
        compile_warnings = sorted({(w.category.__name__, str(w.message), w.lineno) for w in caught})
    try:
        run_compiled(program, g)
    except Exception as exc:
        frames = [
            # Columns are CPython 3.11's (3.10 keeps lines only).
            (f.lineno, f.name, getattr(f, "colno", None), getattr(f, "end_colno", None))
            for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == script.PROGRAM_FILENAME
        ]
        return ("error", type(exc).__name__, str(exc), frames, compile_warnings)
    names = {k: repr(v) for k, v in g.items() if k != "__builtins__" and not callable(v)}
    has_value, value = program.value()
    return ("value", has_value, re.sub(" at 0x[0-9a-f]+", "", repr(value)), names, compile_warnings)


class SplitAgreesWithRewriteTest(unittest.TestCase):
    def assert_same(self, source):
        self.assertEqual(
            _outcome(script.compile_program, source),
            _outcome(script._compile_rewritten, source),
            f"program {source!r}",
        )

    def test_split_programs(self):
        for source in SPLIT:
            with self.subTest(source=source):
                self.assertTrue(_splits(source), "the split should take it")
                self.assert_same(source)

    def test_programs_left_to_the_rewrite(self):
        for source in REWRITE:
            with self.subTest(source=source):
                self.assertFalse(_splits(source), "the split should leave it")
                self.assert_same(source)

    def test_broken_programs(self):
        for source in BROKEN:
            with self.subTest(source=source):
                outcome = _outcome(script.compile_program, source)
                self.assertEqual(outcome[0], "syntax", source)
                self.assert_same(source)

    def test_warnings_come_once(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            script.compile_program("x = 1\nx is 1")
        # CPython 3.12 names the literal's type in the message.
        said = '"is" with a literal' if sys.version_info < (3, 12) else "\"is\" with 'int' literal"
        self.assertEqual([str(w.message) for w in caught], [said + '. Did you mean "=="?'])

    def test_random_programs(self):
        """Programs stitched from statement pieces at random (a fixed seed):
        both ways agree, and the split takes a good share of them."""
        pieces = [
            "x = 1",
            "x = x + 1",
            "x",
            "x * 2",
            "print(x)",
            "y = [\n    x,\n    2,\n]",
            "y = [\nx,\n]",
            "s = '''\nx\n'''",
            "s = '''\nx = 1\n'''",
            "if x:\n    z = x\nelse:\n    z = 0",
            "for i in range(2):\n    x += i",
            "def f(a):\n    return a + 1",
            "f(x)",
            "class C:\n    v = 1",
            "C.v",
            "try:\n    1 / 0\nexcept ZeroDivisionError:\n    x = -1",
            "@staticmethod\ndef g():\n    pass",
            "import asyncio\nawait asyncio.sleep(0)",
            "await asyncio.sleep(0, 5)",
            "x = 1; x",
            "# a comment",
            "",
            "'''a string'''",
            "undefined",
            "return x",
            "if x:\n    return x",
            "return x  # r",
            "return (x,\n  1)",
            "return 1 / (x - x)",
            "x is 1",
            "(w := x)",
            "x = (\n1)",
            "1 / (x - x)",
            # Strings, continuations, clauses and statements the split must
            # read right or leave to the tree.
            '(\n"doc")',
            "(  # c\n'doc')",
            's = """\nreturn 1\n"""',
            "if x:\n    z = x\nelif y:\n    z = 1",
            "for i in range(2):\n    x += i\nelse:\n    x -= 1",
            "try:\n    pass\nfinally:\n    x = 3",
            "@(lambda f: f)\n@staticmethod\ndef h():\n    pass",
            "x; y = 2",
            "    # an indented comment",
            "'s'",
            "return",
            "while x:\n    return 2",
            "return x,",
            "return *[x], 1",
            "return (w := x)",
            "return i for i in y",
            "x = 1 \\\n + 2",
            "return x \\\n  + 1",
            "x = '\\n'",
            "x = '\\d'",
            "r = r'\\d'",
            "é = 1",
            "é",
            "\tx = 1",
            "[i for i in range(3)]",
            "f'''\n{x}\n'''",
            "async def co():\n    return 1",
            "await co()",
            "return await co()",
            "global gg\ngg = 1",
            "del x",
            "pass",
            "...",
            "from __future__ import annotations",
            "raise ValueError('v')",
            "break",
            "yield 1",
            "x = 1\r\nx",
            "\x0cx = 2",
            "match x:\n    case 1:\n        y = 1\n    case _:\n        y = 2",
            "returned = 3",
            "(  " + "#" * 40 + "\n 3)",
        ]
        rng = random.Random(19)
        split = 0
        for _ in range(2000):
            source = "\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
            split += _splits(source)
            with self.subTest(source=source):
                self.assert_same(source)
        self.assertGreater(split, 500)


if __name__ == "__main__":
    unittest.main()
