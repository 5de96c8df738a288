"""Tests for pycage.bootstrap and pycage.protocol (stdlib unittest only).

Run: cd python && python3 -m unittest discover -s tests -v

The codec tests call the encoder/decoder directly. The end-to-end tests play
the host: a socketpair whose far end becomes the child's fd 3, a real
``python3 -I`` child started with the same command line the Rust host uses,
and frames written and read by hand.
"""

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

# E402: pycage is importable only once PYTHON_DIR is on sys.path (the tests
# run with `python3 -I`, which leaves the current directory off it).
from pycage import _wire  # noqa: E402
from pycage.decoder import _decode_deep, decode_json  # noqa: E402
from pycage.encoder import NotJsonError, OverBudgetError, _encode, encode_json  # noqa: E402

BOOTSTRAP_COMMAND = f"import sys; sys.path.insert(0, {PYTHON_DIR!r}); from pycage.bootstrap import main; main()"


def canonical(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def deep_list(depth, leaf=None):
    value = [] if leaf is None else [leaf]
    for _ in range(depth - 1):
        value = [value]
    return value


def list_depth(value):
    depth = 0
    while type(value) is list:
        depth += 1
        value = value[0] if value else None
    return depth


class EncoderTest(unittest.TestCase):
    def test_matches_compact_json_dumps(self):
        values = [
            None,
            True,
            False,
            0,
            -1,
            1,
            2**63,
            -(2**100),
            10**400,
            0.0,
            -0.0,
            0.1,
            1.5,
            -2.5e-7,
            1e16,
            1e22,
            1.7976931348623157e308,
            5e-324,
            "",
            "plain",
            'quote " backslash \\ slash /',
            "tab\tnewline\ncr\rbs\bff\f",
            "\x00\x01\x1f\x7f\x80",
            "é ü 日本 \u2028 \u2029 \ufeff 😀 \U0010ffff",
            [],
            {},
            [[]],
            {"": {}},
            [1, "a", None, [True, {"k": [0.5]}]],
            {"a": 1, "b c": [1, 2], "é": "ü", "\n": "\x00"},
            {"nested": {"deeper": {"list": [1, 2, {"x": None}]}}},
            [list(range(50)), {str(i): i for i in range(50)}],
        ]
        for value in values:
            with self.subTest(value=value):
                self.assertEqual(encode_json(value), canonical(value))

    def test_control_characters_escaped_like_json_stringify(self):
        text = "".join(chr(c) for c in range(0x20)) + '"\\\x7f'
        expected = (
            '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007'
            "\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013"
            "\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c"
            '\\u001d\\u001e\\u001f\\"\\\\\x7f"'
        )
        self.assertEqual(encode_json(text), expected)
        self.assertEqual(encode_json({text: 1}), "{" + expected + ":1}")

    def test_numbers_keep_exact_text(self):
        self.assertEqual(encode_json(2**100), "1267650600228229401496703205376")
        self.assertEqual(encode_json(-(10**5000)), "-1" + "0" * 5000)
        self.assertEqual(encode_json(-0.0), "-0.0")
        self.assertEqual(encode_json(1e16), "1e+16")
        self.assertEqual(encode_json(0.1 + 0.2), "0.30000000000000004")

    def test_scalars_encode_as_the_walk_does(self):
        # encode_json writes a lone scalar at once; the walk (_encode) is
        # the reference, at the edges of the scalar path and past them.
        edge = 1 << 63
        values = [None, True, False, 0, -1, 1, edge - 1, -(edge - 1), edge, -edge, edge + 1, 10**30, -(10**30)]
        for value in values:
            for budget in range(0, 23):
                with self.subTest(value=value, budget=budget):
                    try:
                        expected = _encode(value, budget)
                    except OverBudgetError:
                        expected = OverBudgetError
                    try:
                        got = encode_json(value, budget)
                    except OverBudgetError:
                        got = OverBudgetError
                    self.assertEqual(got, expected)
            self.assertEqual(encode_json(value), _encode(value, sys.maxsize))

    def test_shared_reference_is_not_a_cycle(self):
        shared = [1]
        self.assertEqual(encode_json([shared, shared, {"a": shared}]), '[[1],[1],{"a":[1]}]')

    def assert_not_json(self, value, message):
        with self.assertRaises(NotJsonError) as caught:
            encode_json(value)
        self.assertEqual(str(caught.exception), message)

    def test_non_json_values_name_path_and_type(self):
        self.assert_not_json({1, 2}, "value at $ is a set (use a list), which is not JSON")
        self.assert_not_json(
            {"items": [0, 1, 2, frozenset()]},
            "value at $.items[3] is a frozenset (use a list), which is not JSON",
        )
        self.assert_not_json(
            {"items": (0, (1, {2}))},
            "value at $.items[1][1] is a set (use a list), which is not JSON",
        )
        self.assert_not_json({"my key": {1}}, 'value at $["my key"] is a set (use a list), which is not JSON')
        self.assert_not_json([b"x"], "value at $[0] is a bytes (decode it to a str), which is not JSON")
        self.assert_not_json({"a": [object()]}, "value at $.a[0] is an object, which is not JSON")
        self.assert_not_json(
            {"a": {1: "x"}},
            "dict key at $.a is an int, which is not JSON (object keys must be str)",
        )

    def test_subclasses_of_json_containers_and_str_are_not_json(self):
        import collections

        self.assert_not_json(
            collections.OrderedDict(),
            "value at $ is an OrderedDict (a subclass of dict; convert it to a plain dict), which is not JSON",
        )

        class Name(str):
            pass

        self.assert_not_json(
            [Name("x")], "value at $[0] is a Name (a subclass of str; convert it to a plain str), which is not JSON"
        )

    def test_number_subclasses_cross_as_their_plain_value_without_their_code(self):
        import enum

        class Color(enum.IntEnum):
            RED = 1

        def ran(*args):
            raise AssertionError("program code ran")

        # Every way the value could be asked for runs program code here;
        # none is used: the interpreter's own value is read.
        odd = {name: ran for name in ("__float__", "__int__", "__index__", "__repr__", "__str__", "__sub__", "__eq__")}
        Odd = type("Odd", (float,), dict(odd, __hash__=float.__hash__))
        Big = type("Big", (int,), dict(odd, __hash__=int.__hash__))
        self.assertEqual(
            encode_json([Color.RED, Odd(2.5), {"b": Big(10**30)}, (Odd(-0.0),)]),
            '[1,2.5,{"b":1000000000000000000000000000000},[-0.0]]',
        )
        self.assert_not_json(
            {"x": Odd("nan")},
            "value at $.x is nan (an Odd), which is not JSON (NaN and infinities have no JSON form)",
        )
        with self.assertRaises(OverBudgetError):
            encode_json([Big(10**300)], budget=100)

    def test_non_finite_floats(self):
        self.assert_not_json(
            {"x": [float("nan")]},
            "value at $.x[0] is nan, which is not JSON (NaN and infinities have no JSON form)",
        )
        self.assert_not_json(
            [float("-inf")], "value at $[0] is -inf, which is not JSON (NaN and infinities have no JSON form)"
        )

    def test_cycles(self):
        a = {"b": {}}
        a["b"]["c"] = a
        self.assert_not_json(a, "cycle at $.b.c: this dict contains itself, which JSON cannot represent")
        x = [1]
        x.append(x)
        self.assert_not_json(x, "cycle at $[1]: this list contains itself, which JSON cannot represent")

    def test_lone_surrogates(self):
        self.assert_not_json(
            {"s": "a\ud800"},
            "value at $.s is a str with a lone surrogate, which cannot be encoded as UTF-8",
        )
        self.assert_not_json(
            [{"\udc80": 1}],
            "dict key at $[0] is a str with a lone surrogate, which cannot be encoded as UTF-8",
        )

    def test_deep_path_is_elided(self):
        value = deep_list(1000, leaf={1})
        with self.assertRaises(NotJsonError) as caught:
            encode_json(value)
        message = str(caught.exception)
        self.assertIn("(960 more levels)", message)
        self.assertLess(len(message), 400)

    def test_metering(self):
        value = {"a": "é" * 10, "b": [1, 2, 3]}
        size = len(canonical(value).encode("utf-8"))
        self.assertEqual(encode_json(value, size), canonical(value))
        with self.assertRaises(OverBudgetError):
            encode_json(value, size - 1)
        for budget in range(size):
            with self.assertRaises(OverBudgetError):
                encode_json(value, budget)
        self.assertEqual(encode_json(None, 4), "null")
        with self.assertRaises(OverBudgetError):
            encode_json(None, 3)

    def test_metering_stops_early(self):
        with self.assertRaises(OverBudgetError):
            encode_json(["x" * 20_000_000], 1 << 20)
        with self.assertRaises(OverBudgetError):
            encode_json(1 << 20_000_000, 1000)  # ~6M digits: slow to print
        with self.assertRaises(OverBudgetError):
            encode_json([{"k" * 2000: 1}], 1000)
        # Over budget wins over a later invalid item: work stops at the budget.
        with self.assertRaises(OverBudgetError):
            encode_json(["x" * 100, {1}], 50)

    def test_million_deep_list_round_trip(self):
        depth = 1_000_000
        text = encode_json({"a": deep_list(depth, leaf={"k": 2**80})})
        self.assertEqual(text, '{"a":' + "[" * depth + '{"k":1208925819614629174706176}' + "]" * depth + "}")
        inner = decode_json(text)["a"]
        for _ in range(depth - 1):
            inner = inner[0]
        self.assertEqual(inner, [{"k": 2**80}])


class DecoderTest(unittest.TestCase):
    samples = [
        "null",
        "true",
        "false",
        "0",
        "-0",
        "12",
        "-7",
        "123456789012345678901234567890",
        "1.5",
        "-0.0",
        "1e16",
        "1E+2",
        "2.5e-3",
        "1e400",
        '""',
        '"a\\u00e9\\ud83d\\ude00\\n"',
        '"\\ud800"',
        "[]",
        "{}",
        ' [ 1 , { "a" : [ null , true ] } , "x" ] ',
        '{"a":1,"a":2,"b":3}',
        '{"":{"":[]}}',
        "[" * 50 + "]" * 50,
    ]

    def test_matches_json_loads(self):
        for text in self.samples:
            with self.subTest(text=text):
                expected = json.loads(text)
                for decoded in (decode_json(text), _decode_deep(text)):
                    self.assertEqual(repr(decoded), repr(expected))
                    self.assertEqual(type(decoded), type(expected))

    def test_rejects_what_json_loads_rejects_and_constants(self):
        bad = [
            "",
            "[",
            "]",
            "[1,]",
            "{,}",
            '{"a"}',
            '{"a":}',
            "[1 2]",
            "01",
            "1.",
            ".5",
            "+1",
            "NaN",
            "Infinity",
            "-Infinity",
            "[NaN]",
            "tru",
            '"\x01"',
            "1 2",
            "{1:2}",
            "\u0661",
        ]
        for text in bad:
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    decode_json(text)
                with self.assertRaises(ValueError):
                    _decode_deep(text)

    def test_round_trip_through_encoder(self):
        value = {"ints": [2**200, -(2**70), 0], "floats": [0.1, -0.0, 1e-300], "s": 'é\x00"\\', "n": None}
        self.assertEqual(decode_json(encode_json(value)), value)
        self.assertEqual(encode_json(decode_json(encode_json(value))), encode_json(value))


# --- end to end ----------------------------------------------------------


class Child:
    """A real bootstrap child with this test as its host."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        host_end, child_end = socket.socketpair()
        child_fd = child_end.fileno()

        def as_fd3():
            os.dup2(child_fd, 3)  # dup2 clears close-on-exec: fd 3 survives exec

        # close_fds=False: pass_fds would close fd 3 again after preexec_fn.
        # Every other fd of this process is close-on-exec.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOTSTRAP_COMMAND],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=False,
            preexec_fn=as_fd3,
            cwd=self.tmp.name,
            env={},
        )
        child_end.close()
        host_end.settimeout(30)
        self.sock = host_end
        self.reader = host_end.makefile("rb")
        self.lines = []
        self.ack_due = False

    def send(self, frame):
        self.sock.sendall((canonical(frame) + "\n").encode("utf-8"))

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self):
        line = self.reader.readline()
        if not line:
            return None
        self.assertion_line_ok(line)
        text = line[:-1].decode("utf-8")
        frame = decode_json(text)
        if self.ack_due:
            self.ack_due = False
            assert frame == {"type": "boot-ack"}, frame
            return self.recv()
        self.lines.append(text)
        return frame

    @staticmethod
    def assertion_line_ok(line):
        assert line.endswith(b"\n"), line
        text = line[:-1].decode("utf-8")
        assert "\n" not in text
        # Frames are in canonical form: re-encoding them gives the same bytes.
        assert encode_json(decode_json(text)) == text, text

    def boot(self, namespaces=(), cpu=0, address_space=0, max_log=65536, max_value=1 << 20, max_display=1 << 23):
        self.send(
            {
                "type": "boot",
                "cpuSeconds": cpu,
                "addressSpaceBytes": address_space,
                "maxLogBytes": max_log,
                "maxValueBytes": max_value,
                "maxDisplayBytes": max_display,
                "namespaces": list(namespaces),
            }
        )
        # The ack comes with the run's first frame: `recv` takes it then.
        self.ack_due = True

    def finish(self):
        """Wait for exit; return (status, stdout, stderr)."""
        self.reader.close()
        self.sock.close()
        try:
            out, err = self.proc.communicate(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.tmp.cleanup()
        return self.proc.returncode, out, err


def run(program, on_call=None, namespaces=(), **boot):
    """Boot, run ``program``, serve calls; return (done, logs, calls, lines).

    ``on_call(child, frame)`` answers a call (or defers it); default: error.
    """
    done, logs, calls, lines, _ = run_with_displays(program, on_call, namespaces, **boot)
    return done, logs, calls, lines


def run_with_displays(program, on_call=None, namespaces=(), **boot):
    """``run``, also returning the ``display`` frames, in order."""
    child = Child()
    displays = []
    try:
        child.boot(namespaces, **boot)
        child.send({"type": "run", "program": program})
        logs, calls = [], []
        while True:
            frame = child.recv()
            if frame is None:
                raise AssertionError("child closed fd 3 without done")
            kind = frame["type"]
            if kind == "log":
                logs.append(frame)
            elif kind == "call":
                calls.append(frame)
                if on_call is None:
                    child.send({"type": "reply", "id": frame["id"], "ok": False, "message": "no bindings"})
                else:
                    on_call(child, frame)
            elif kind == "display":
                displays.append(frame)
            elif kind == "done":
                done = frame
                break
            else:
                raise AssertionError(f"unexpected frame {frame}")
        lines = list(child.lines)
    except BaseException:
        child.proc.kill()
        raise
    finally:
        status, out, err = child.finish()
    assert status == 0, (status, err)
    assert err == b"", err
    return done, logs, calls, lines, displays


def reply_ok(value):
    def on_call(child, frame):
        child.send({"type": "reply", "id": frame["id"], "ok": True, "value": value})

    return on_call


TOOLS = {"global": "tools", "names": ["search", "__class__", "__init__", "__getattr__", "__dict__", "my-tool", ""]}
TOOLS_WITH_ERRORS = dict(TOOLS, errorClass={"name": "ToolError", "memberNameProperty": "tool"})


class EndToEndTest(unittest.TestCase):
    def test_return_values(self):
        done, _, _, lines = run("return 1")
        self.assertEqual(lines[-1], '{"type":"done","value":1}')
        done, _, _, lines = run("x = 1")
        self.assertEqual(lines[-1], '{"type":"done"}')
        done, _, _, lines = run("return None")
        self.assertEqual(lines[-1], '{"type":"done","value":null}')
        done, _, _, lines = run(
            "import asyncio\nawait asyncio.sleep(0)\n"
            "def f():\n    return 'inner'\n"
            "if True:\n    return {'big': 2**100, 'f': -0.0, 's': f(), 'u': 'é\\n'}\n"
        )
        self.assertEqual(
            lines[-1],
            '{"type":"done","value":{"big":1267650600228229401496703205376,"f":-0.0,"s":"inner","u":"é\\n"}}',
        )

    def test_exception_points_at_program_line(self):
        done, _, _, _ = run("x = 1\n\nraise ValueError('boom')\n")
        self.assertEqual(done["error"]["kind"], "exception")
        message = done["error"]["message"]
        self.assertIn('File "<program>", line 3, in <module>', message)
        self.assertNotIn("__dsh_main__", message)
        self.assertIn("raise ValueError('boom')", message)
        self.assertTrue(message.endswith("ValueError: boom"), message)
        self.assertNotIn("bootstrap.py", message)
        self.assertNotIn(os.path.join(PYTHON_DIR, "pycage"), message)
        self.assertNotIn("value", done)

    @unittest.skipIf(sys.version_info < (3, 11), "CPython 3.10 marks no expression in a traceback")
    def test_carets_under_an_error_on_the_last_line(self):
        """The traceback marks the failing expression where python3 does,
        also on a last line without a newline."""
        for program in ('d = {}\ny = d["missing"]', 'd = {}\nd["missing"]', 'd = {}\nreturn d["missing"]  # c'):
            with self.subTest(program=program):
                done, _, _, _ = run(program)
                mine = done["error"]["message"].splitlines()[-3:-1]
                with tempfile.TemporaryDirectory() as tmp:
                    script_path = os.path.join(tmp, "p.py")
                    with open(script_path, "w") as f:
                        f.write(program.replace("return ", "_ = "))
                    out = subprocess.run(
                        [sys.executable, "-I", script_path], capture_output=True, text=True, timeout=60, check=False
                    )
                source_line, carets = out.stderr.splitlines()[-3:-1]
                self.assertEqual(mine[0].strip(), program.splitlines()[-1].strip())
                # The same columns under the same expression (the line itself differs for `return`).
                self.assertEqual(
                    carets.index("~") - source_line.index("d["),
                    mine[1].index("~") - mine[0].index("d["),
                    (mine, out.stderr),
                )

    def test_system_exit_is_an_exception(self):
        done, _, _, _ = run("import sys\nsys.exit(3)")
        self.assertEqual(done["error"]["kind"], "exception")
        self.assertIn("SystemExit: 3", done["error"]["message"])

    def test_syntax_error(self):
        done, _, _, _ = run("x = 1\ny = (\n")
        self.assertEqual(done["error"]["kind"], "exception")
        message = done["error"]["message"]
        self.assertIn('File "<program>", line 2', message)
        self.assertIn("SyntaxError", message)
        self.assertIn("y = (", message)
        self.assertNotIn("bootstrap.py", message)
        self.assertNotIn(os.path.join(PYTHON_DIR, "pycage"), message)
        self.assertNotIn("ast.py", message)
        done, _, _, _ = run("x = 1\nyield x\n")
        self.assertIn("SyntaxError: 'yield' outside function", done["error"]["message"])

    def test_program_globals(self):
        program = (
            '"""A docstring."""\nfrom __future__ import annotations\n'
            "def f(x: Undefined): pass\n"
            "import sys\n"
            "return [sorted(globals()), f.__annotations__, sys.modules['__main__'].__dict__ is globals()]\n"
        )
        done, _, _, _ = run(program, namespaces=[TOOLS_WITH_ERRORS])
        seeded = [
            "__annotations__",
            "__builtins__",
            "__cached__",
            "__doc__",
            "__file__",
            "__loader__",
            "__name__",
            "__package__",
            "__spec__",
        ]
        self.assertEqual(
            done["value"],
            # `from __future__ import annotations` binds `annotations`, as in any script.
            [sorted(seeded + ["ToolError", "annotations", "f", "sys", "tools"]), {"x": "Undefined"}, True],
        )

    def test_call_round_trip_with_error_class(self):
        def on_call(child, frame):
            if frame["name"] == "search":
                child.send({"type": "reply", "id": frame["id"], "ok": True, "value": {"hits": [1, 2**70]}})
            else:
                child.send({"type": "reply", "id": frame["id"], "ok": False, "message": "no such thing"})

        program = (
            "r = await tools.search({'q': 1})\n"
            "try:\n"
            "    await tools.__class__()\n"
            "except ToolError as e:\n"
            "    err = [str(e), e.tool, type(e).__name__, isinstance(e, Exception)]\n"
            "return [r, err]\n"
        )
        done, _, calls, lines = run(program, on_call, namespaces=[TOOLS_WITH_ERRORS])
        self.assertEqual(done["value"], [{"hits": [1, 2**70]}, ["no such thing", "__class__", "ToolError", True]])
        self.assertEqual(lines[0], '{"type":"call","id":0,"global":"tools","name":"search","args":{"q":1}}')
        self.assertEqual(lines[1], '{"type":"call","id":1,"global":"tools","name":"__class__","args":{}}')
        self.assertEqual(len(calls), 2)

    def test_error_class_with_odd_property_name(self):
        ns = dict(TOOLS, errorClass={"name": "Failed", "memberNameProperty": "my prop"})
        done, _, _, _ = run(
            "try:\n    await getattr(tools, 'my-tool')(1)\n"
            "except Failed as e:\n    return [str(e), getattr(e, 'my prop')]\n",
            namespaces=[ns],
        )
        self.assertEqual(done["value"], ["no bindings", "my-tool"])

    def test_uncaught_binding_error_traceback(self):
        done, _, _, _ = run("x = 1\nawait tools.search(None)\n", namespaces=[TOOLS_WITH_ERRORS])
        message = done["error"]["message"]
        self.assertIn('File "<program>", line 2', message)
        self.assertTrue(message.endswith("ToolError: no bindings"), message)
        self.assertNotIn("bootstrap.py", message)
        self.assertNotIn(os.path.join(PYTHON_DIR, "pycage"), message)

    def test_call_error_without_error_class(self):
        done, _, _, _ = run(
            "try:\n    await tools.search()\nexcept RuntimeError as e:\n    return [type(e).__name__, str(e)]\n",
            namespaces=[TOOLS],
        )
        self.assertEqual(done["value"], ["RuntimeError", "no bindings"])

    def test_namespace_object_members(self):
        program = (
            "out = []\n"
            "for name in ['__class__', '__init__', '__getattr__', '__dict__', 'my-tool', '']:\n"
            "    out.append(await getattr(tools, name)(name))\n"
            "out.append(await tools.__init__())\n"
            "try:\n    tools.nope\nexcept AttributeError as e:\n    out.append(str(e))\n"
            "out.append(repr(tools))\n"
            "out.append(type(tools).__name__)\n"
            "out.append(hasattr(tools, 'search'))\n"
            "return out\n"
        )

        def echo(child, frame):
            child.send({"type": "reply", "id": frame["id"], "ok": True, "value": frame["args"]})

        done, _, calls, _ = run(program, echo, namespaces=[TOOLS])
        self.assertEqual(
            done["value"],
            [
                "__class__",
                "__init__",
                "__getattr__",
                "__dict__",
                "my-tool",
                "",
                {},
                "namespace 'tools' has no function 'nope'. Its functions: '', '__class__', '__dict__', '__getattr__', "
                "'__init__', 'my-tool', 'search'.",
                "<pycage namespace tools (7 members)>",
                "Namespace",
                True,
            ],
        )
        self.assertEqual([c["id"] for c in calls], list(range(7)))

    def test_call_argument_validation(self):
        program = (
            "out = []\n"
            "for call in (lambda: tools.search(1, 2), lambda: tools.search({}, q=1),\n"
            "             lambda: tools.search({'a': {1}}), lambda: tools.search(q={1: 2})):\n"
            "    try:\n        await call()\n    except TypeError as e:\n        out.append(str(e))\n"
            "return out\n"
        )
        done, _, calls, _ = run(program, namespaces=[TOOLS])
        self.assertEqual(
            done["value"],
            [
                "tools.search() takes keyword arguments or one positional argument (2 positional given)",
                "tools.search() takes keyword arguments or one positional argument, not both "
                "(got 1 positional and 1 keyword)",
                "argument of tools.search() is not JSON: value at $.a is a set (use a list), which is not JSON",
                "argument of tools.search() is not JSON: dict key at $.q is an int, which is not JSON "
                "(object keys must be str)",
            ],
        )
        self.assertEqual(calls, [])

    def test_refused_arguments_quote_the_members_signature(self):
        # A model that called a tool positionally is shown how to call it,
        # from the member's help text when it starts with the signature.
        documented = dict(
            TOOLS,
            docs={
                "search": 'async def search(*, query: str, limit: int = 10) -> list:\n    """Search."""\n',
                "my-tool": "Does things.",
            },
        )
        program = (
            "out = []\n"
            "for call in (lambda: tools.search('x', 2), lambda: tools.search('x', limit=2),\n"
            "             lambda: getattr(tools, 'my-tool')(1, 2)):\n"
            "    try:\n        await call()\n    except TypeError as e:\n        out.append(str(e))\n"
            "return out\n"
        )
        done, _, calls, _ = run(program, namespaces=[documented])
        usage = "; call it as: async def search(*, query: str, limit: int = 10) -> list"
        self.assertEqual(
            done["value"],
            [
                "tools.search() takes keyword arguments or one positional argument (2 positional given)" + usage,
                "tools.search() takes keyword arguments or one positional argument, not both "
                "(got 1 positional and 1 keyword)" + usage,
                "getattr(tools, 'my-tool')() takes keyword arguments or one positional argument (2 positional given)",
            ],
        )
        self.assertEqual(calls, [])

    def test_help_of_a_namespace_lists_its_functions(self):
        documented = dict(
            TOOLS,
            names=["search", "my-tool"],
            doc="2 functions of the host.",
            docs={"search": 'async def search(*, query: str) -> list:\n    """Search."""\n'},
        )
        program = (
            "import io, pydoc\n"
            "text = pydoc.render_doc(tools, renderer=pydoc.plaintext)\n"
            "return [tools.__doc__, 'Methods defined here' in text, '__setattr__' in text, 'search' in text]\n"
        )
        done, _, _, _ = run(program, namespaces=[documented])
        self.assertEqual(
            done["value"],
            [
                "2 functions of the host.\n\nFunctions:\n  async def search(*, query: str) -> list\n"
                "  getattr(tools, 'my-tool')(...)",
                False,
                False,
                True,
            ],
        )
        done, _, _, _ = run("return tools.__doc__", namespaces=[dict(TOOLS, names=[])])
        self.assertEqual(done["value"], "It has no functions.")

    def test_help_of_a_member_shows_the_stubs_signature_once(self):
        # pydoc printed the member's own `async search(*args, **kwargs)`
        # above the stub; now the stub's line is the signature, the
        # docstring and the types it uses the text.
        documented = dict(
            TOOLS,
            names=["search", "raw", "plain"],
            docs={
                "search": "class Hit(TypedDict):\n    id: int\n\n"
                'async def search(*, query: str, state: Literal["open", "closed"] = ...) -> list[Hit]:\n'
                '    """Search issues.\n\n    Raises ToolError when a call fails.\n    """\n',
                "raw": 'async def raw(args: Any = None, /) -> Any:\n    """Any JSON."""\n',
                "plain": "Just text.",
            },
        )
        program = (
            "import inspect, pydoc\n"
            "def shown(f):  # blank lines as 3.12+ writes them (unindented)\n"
            "    text = pydoc.render_doc(f, renderer=pydoc.plaintext).split('\\n', 2)[2]\n"
            "    return '\\n'.join(line.rstrip() for line in text.split('\\n'))\n"
            "return [shown(tools.search), shown(tools.raw), shown(tools.plain), str(inspect.signature(tools.raw)),\n"
            "        inspect.iscoroutinefunction(tools.search)]\n"
        )
        done, _, _, _ = run(program, namespaces=[documented])
        self.assertEqual(
            done["value"],
            [
                'async search(*, query: str, state: Literal["open", "closed"] = ...) -> list[Hit]\n'
                "    Search issues.\n\n    Raises ToolError when a call fails.\n\n"
                "    class Hit(TypedDict):\n        id: int\n",
                "async raw(args: Any = None, /) -> Any\n    Any JSON.\n",
                "async plain(*args, **kwargs)\n    Just text.\n",
                "(args: Any = None, /) -> Any",
                True,
            ],
        )

    def test_two_hundred_concurrent_calls_replied_out_of_order(self):
        held = []

        def on_call(child, frame):
            held.append(frame)
            if len(held) == 250:
                for f in reversed(held):
                    child.send({"type": "reply", "id": f["id"], "ok": True, "value": f["args"]["n"] * 2})

        program = (
            "import asyncio\n"
            "values = await asyncio.gather(*(tools.search({'n': n}) for n in range(250)))\n"
            "return values\n"
        )
        done, _, calls, _ = run(program, on_call, namespaces=[TOOLS])
        self.assertEqual(done["value"], [n * 2 for n in range(250)])
        self.assertEqual(sorted(c["id"] for c in calls), list(range(250)))

    def test_unknown_reply_ids_are_ignored(self):
        def on_call(child, frame):
            child.send({"type": "reply", "id": 999, "ok": True, "value": "stray"})
            child.send({"type": "reply", "id": frame["id"], "ok": True, "value": "real"})

        done, _, _, _ = run("return await tools.search()", on_call, namespaces=[TOOLS])
        self.assertEqual(done["value"], "real")

    def test_deep_values_cross_both_ways(self):
        depth = 20_000

        def on_call(child, frame):
            self.assertEqual(list_depth(frame["args"]), depth)
            head = '{"type":"reply","id":%d,"ok":true,"value":' % frame["id"]
            child.send_raw((head + encode_json(frame["args"]) + "}\n").encode())

        program = (
            f"v = []\nfor _ in range({depth} - 1):\n    v = [v]\n"
            "r = await tools.search(v)\n"
            "n = 0\nwhile r:\n    r = r[0]\n    n += 1\n"
            "return [n + 1, v]\n"
        )
        done, _, _, _ = run(program, on_call, namespaces=[TOOLS])
        self.assertEqual(done["value"][0], depth)
        self.assertEqual(list_depth(done["value"][1]), depth)

    def test_print_becomes_log_frames(self):
        program = (
            "import sys\nprint('hello', 42)\nprint('to stderr', file=sys.stderr)\n"
            "sys.stdout.write('')\nsys.stdout.buffer.write('é'.encode())\nprint('bad \\udc80 char')\n"
        )
        done, logs, _, lines = run(program)
        self.assertEqual(done, {"type": "done"})
        self.assertEqual("".join(f["text"] for f in logs), "hello 42\nto stderr\né" + "bad \\udc80 char\n")
        self.assertTrue(all(f["text"] for f in logs))
        self.assertTrue(all("truncated" not in f for f in logs))
        self.assertEqual(lines[0], '{"type":"log","text":"hello"}')

    def test_log_truncation_sends_exactly_one_marker(self):
        marker = _wire.log_truncation_marker(10)
        program = (
            f"print({marker!r})\n"  # the marker text as ordinary output
            "print('abcdéfghij')\nprint('more')\nprint('and more')\nreturn 1\n"
        )
        done, logs, _, _ = run(program, max_log=len(marker) + 1 + 8)
        self.assertEqual(done["value"], 1)
        texts = [f["text"] for f in logs]
        # 8 bytes left after the marker line and its newline: 'abcd' + 'é' (2) + 'fg' fits.
        self.assertEqual(texts[:3], [marker, "\n", "abcdéfg"])
        self.assertEqual(texts[3:], [_wire.log_truncation_marker(len(marker) + 9)])
        self.assertEqual([f.get("truncated") for f in logs], [None, None, None, True])

    def test_log_budget_cut_inside_a_character(self):
        done, logs, _, _ = run("print('aé')\nprint('x')", max_log=2)
        self.assertEqual([f["text"] for f in logs], ["a", _wire.log_truncation_marker(2)])
        self.assertIs(logs[-1]["truncated"], True)

    def test_value_over_budget(self):
        done, _, _, _ = run("return 'x' * 200", max_value=100)
        self.assertEqual(
            done["error"], {"kind": "output-limit", "message": "return value is over the 100-byte value budget"}
        )
        self.assertNotIn("value", done)
        done, _, _, _ = run("return 'x' * 98", max_value=100)
        self.assertEqual(done["value"], "x" * 98)

    def test_invalid_output(self):
        done, _, _, _ = run("return {'items': [1, 2, 3, {4, 5}]}")
        self.assertEqual(
            done["error"],
            {
                "kind": "invalid-output",
                "message": "return value is not JSON: value at $.items[3] is a set (use a list), which is not JSON",
            },
        )
        done, _, _, _ = run("return float('nan')")
        self.assertEqual(done["error"]["kind"], "invalid-output")

    def test_number_subclasses_are_values(self):
        # As json.dumps writes them: an IntEnum member is its int.
        done, _, _, _ = run(
            "import enum\nclass C(enum.IntEnum):\n    A = 2\nclass F(float):\n    pass\nreturn [C.A, F(0.5)]"
        )
        self.assertEqual(done, {"type": "done", "value": [2, 0.5]})

    def test_program_cannot_break_frame_emission(self):
        program = (
            "import builtins, sys, json\n"
            "builtins.len = None\nbuiltins.isinstance = None\nbuiltins.print = None\n"
            "builtins.str = None\nbuiltins.type = None\nbuiltins.iter = None\n"
            "sys.stdout = None\nsys.stderr = None\n"
            "for name in list(sys.modules):\n    del sys.modules[name]\n"
            "json.dumps = None\n"
            "r = await tools.search({'a': [1]})\n"
            "return {'r': r}\n"
        )
        done, _, _, _ = run(program, reply_ok("ok"), namespaces=[TOOLS])
        self.assertEqual(done["value"], {"r": "ok"})
        done, _, _, _ = run("import builtins\nbuiltins.len = None\nbuiltins.isinstance = None\nraise KeyError('k')\n")
        self.assertTrue(done["error"]["message"].endswith("KeyError: 'k'"), done)
        self.assertIn('File "<program>", line 4', done["error"]["message"])

    def test_leftover_tasks_are_cancelled(self):
        program = (
            "import asyncio\n"
            "async def forever():\n"
            "    try:\n        await asyncio.sleep(3600)\n"
            "    finally:\n        print('cancelled')\n"
            "t = asyncio.ensure_future(forever())\nawait asyncio.sleep(0)\nreturn 'done'\n"
        )
        done, logs, _, _ = run(program)
        self.assertEqual(done["value"], "done")
        self.assertEqual("".join(f["text"] for f in logs), "cancelled\n")

    def test_limits_are_applied(self):
        program = (
            "import resource\n"
            "return [list(resource.getrlimit(resource.RLIMIT_CPU)), list(resource.getrlimit(resource.RLIMIT_AS))]\n"
        )
        done, _, _, _ = run(program, cpu=7, address_space=1 << 33)
        self.assertEqual(done["value"], [[7, 8], [1 << 33, 1 << 33]])

    def test_malformed_reply_exits_2(self):
        child = Child()
        child.boot([TOOLS])
        child.send({"type": "run", "program": "await tools.search()"})
        self.assertEqual(child.recv()["type"], "call")
        child.send({"type": "reply", "id": 0, "ok": True})  # no value
        child.proc.wait(timeout=30)
        status, _, err = child.finish()
        self.assertEqual(status, 2)
        self.assertIn(b"malformed reply frame: reply: missing field 'value'", err)

    def test_boot_ack_goes_out_with_the_first_frame(self):
        # One write: the host's reader wakes once for both (nothing waits
        # for the ack alone), and the ack still comes first.
        child = Child()
        child.boot([TOOLS])
        # Booted and waiting for `run`: nothing is sent yet.
        readable, _, _ = select.select([child.sock], [], [], 0.3)
        self.assertEqual(readable, [])
        child.send({"type": "run", "program": "return 1"})
        data = child.sock.recv(65536)
        self.assertEqual(data, b'{"type":"boot-ack"}\n{"type":"done","value":1}\n')
        status, _, _ = child.finish()
        self.assertEqual(status, 0)

    def test_host_gone_mid_run_exits_1(self):
        child = Child()
        child.boot([TOOLS])
        child.send({"type": "run", "program": "await tools.search()\nreturn 1"})
        self.assertEqual(child.recv()["type"], "call")
        child.sock.shutdown(socket.SHUT_RDWR)
        child.proc.wait(timeout=30)
        status, _, _ = child.finish()
        self.assertEqual(status, 1)

    def test_host_gone_before_boot_exits_1(self):
        child = Child()
        status, _, _ = child.finish()
        self.assertEqual(status, 1)

    def test_malformed_host_frame_exits_2(self):
        for data in (b"not json\n", b'{"type":"run","program":"return 1"}\n', b'{"type":"boot"}\n'):
            with self.subTest(data=data):
                child = Child()
                child.send_raw(data)
                child.proc.wait(timeout=30)
                status, _, err = child.finish()
                self.assertEqual(status, 2)
                self.assertIn(b"pycage bootstrap:", err)


def echo_args(child, frame):
    child.send({"type": "reply", "id": frame["id"], "ok": True, "value": frame["args"]})


def reply_reversed_after(n):
    """Hold calls until ``n`` are in flight, then answer them last first
    with ``args["n"] * 10``: replies cross between whichever loops wait."""
    held = []

    def on_call(child, frame):
        held.append(frame)
        if len(held) == n:
            for f in reversed(held):
                child.send({"type": "reply", "id": f["id"], "ok": True, "value": f["args"]["n"] * 10})

    return on_call


class ScriptSemanticsTest(unittest.TestCase):
    """The program is the script __main__: examples a model writes."""

    def value_of(self, program, **kw):
        done, _, _, _ = run(program, **kw)
        self.assertNotIn("error", done, done.get("error"))
        return done.get("value", "<no value>")

    def test_examples(self):
        self.assertEqual(self.value_of("x = 1\ndef f():\n    global x\n    x = 2\nf()\nreturn x"), 2)
        self.assertEqual(self.value_of("import asyncio\nasync def main(): return 1\nreturn asyncio.run(main())"), 1)
        self.assertEqual(self.value_of("from math import *\nreturn floor(2.5)"), 2)
        self.assertEqual(self.value_of('exec("y = 3")\nreturn y'), 3)
        self.assertEqual(self.value_of('return "a", 1'), ["a", 1])
        self.assertEqual(self.value_of("20 + 22"), 42)
        self.assertEqual(self.value_of("x = 20\nx + 22\n"), 42)
        self.assertEqual(self.value_of("None"), "<no value>")
        self.assertEqual(self.value_of("print('x')"), "<no value>")

    def test_what_a_script_sees(self):
        program = (
            "import sys, asyncio\n"
            "try:\n    asyncio.get_running_loop()\n    running = True\nexcept RuntimeError:\n    running = False\n"
            "return [__name__, __file__, sys.argv, sys.modules['__main__'].__dict__ is globals(), running]\n"
        )
        self.assertEqual(self.value_of(program), ["__main__", "<program>", ["<program>"], True, False])

    def test_tuples_and_named_tuples_are_arrays(self):
        program = (
            "import collections\n"
            "P = collections.namedtuple('P', 'x y')\n"
            "class Odd(tuple):\n    def __iter__(self): raise RuntimeError('program code ran')\n"
            "    def __len__(self): raise RuntimeError('program code ran')\n"
            "return {'t': (1, (2, [3])), 'p': P(1, 2), 'o': Odd((4,)), 'e': ()}\n"
        )
        self.assertEqual(self.value_of(program), {"t": [1, [2, [3]]], "p": [1, 2], "o": [4], "e": []})
        done, _, _, _ = run("class Odd(tuple):\n    def __len__(self): raise RuntimeError('ran')\nreturn Odd((1, {2}))")
        self.assertEqual(
            done["error"]["message"], "return value is not JSON: value at $[1] is a set (use a list), which is not JSON"
        )

    def test_final_expression_must_be_json(self):
        done, _, _, _ = run("async def main():\n    return 1\nmain()")
        self.assertEqual(done["error"]["kind"], "invalid-output")
        self.assertIn("coroutine (did you mean to await it?)", done["error"]["message"])

    def test_sys_exit(self):
        for program in ("import sys\nsys.exit()", "import sys\nsys.exit(0)", "exit()", "raise SystemExit(False)"):
            with self.subTest(program=program):
                done, _, _, _ = run("print('before')\n" + program + "\nreturn 'not reached'")
                self.assertEqual(done, {"type": "done"})
        done, _, _, _ = run("import sys\nsys.exit('bad input')")
        self.assertEqual(done["error"]["kind"], "exception")
        self.assertIn("SystemExit: bad input", done["error"]["message"])

    def test_asyncio_run_traceback_shows_program_and_library_frames(self):
        done, _, _, _ = run("import asyncio\nasync def main():\n    raise ValueError('inner')\nasyncio.run(main())\n")
        message = done["error"]["message"]
        self.assertIn('File "<program>", line 4, in <module>', message)
        self.assertIn('File "<program>", line 3, in main', message)
        self.assertIn("asyncio", message)  # the library frames the program called
        self.assertNotIn("bootstrap.py", message)
        self.assertNotIn(os.path.join(PYTHON_DIR, "pycage"), message)
        self.assertNotIn("script.py", message)


class EventLoopTest(unittest.TestCase):
    """Binding calls work in whichever loop the program runs, or none."""

    def test_bindings_in_sequential_asyncio_runs(self):
        program = (
            "import asyncio\n"
            "async def one(n):\n    return await tools.search({'n': n})\n"
            "a = asyncio.run(one(1))\n"
            "b = asyncio.run(one(2))\n"
            "loop = asyncio.new_event_loop()\n"
            "c = loop.run_until_complete(one(3))\n"
            "loop.close()\n"
            "return [a, b, c]\n"
        )
        done, _, calls, _ = run(program, echo_args, namespaces=[TOOLS])
        self.assertEqual(done["value"], [{"n": 1}, {"n": 2}, {"n": 3}])
        self.assertEqual([c["id"] for c in calls], [0, 1, 2])

    def test_gather_inside_asyncio_run_out_of_order(self):
        program = (
            "import asyncio\n"
            "async def main():\n    return await asyncio.gather(*(tools.search({'n': n}) for n in range(30)))\n"
            "return asyncio.run(main())\n"
        )
        done, _, _, _ = run(program, reply_reversed_after(30), namespaces=[TOOLS])
        self.assertEqual(done["value"], [n * 10 for n in range(30)])

    def test_two_loops_in_two_threads_at_once(self):
        # Each loop's calls are answered only once all 20 are in flight, last
        # first: one loop's reader reads the replies of the other's calls.
        program = (
            "import asyncio, threading\n"
            "out = {}\n"
            "async def batch(base):\n"
            "    return await asyncio.gather(*(tools.search({'n': base + i}) for i in range(10)))\n"
            "t = threading.Thread(target=lambda: out.update(thread=asyncio.run(batch(100))))\n"
            "t.start()\n"
            "out['main'] = asyncio.run(batch(0))\n"
            "t.join()\n"
            "return out\n"
        )
        done, _, _, _ = run(program, reply_reversed_after(20), namespaces=[TOOLS])
        self.assertEqual(
            done["value"], {"main": [i * 10 for i in range(10)], "thread": [(100 + i) * 10 for i in range(10)]}
        )

    def test_top_level_await_and_gather(self):
        program = "import asyncio\nr = await asyncio.gather(*(tools.search({'n': n}) for n in range(5)))\nr"
        done, _, _, _ = run(program, reply_reversed_after(5), namespaces=[TOOLS])
        self.assertEqual(done["value"], [0, 10, 20, 30, 40])

    def test_asyncio_run_under_top_level_await_fails_as_in_python(self):
        done, _, _, _ = run("import asyncio\nawait asyncio.sleep(0)\nasync def f(): pass\nasyncio.run(f())")
        self.assertIn("asyncio.run() cannot be called from a running event loop", done["error"]["message"])

    def test_coroutine_driven_by_hand_blocks_for_its_reply(self):
        program = (
            "coro = tools.search(n=7)\n"
            "try:\n    coro.send(None)\nexcept StopIteration as stop:\n    return stop.value\n"
        )
        done, _, calls, _ = run(program, echo_args, namespaces=[TOOLS])
        self.assertEqual(done["value"], {"n": 7})

    def test_loop_that_cannot_watch_fd3_falls_back_to_blocking(self):
        program = (
            "import asyncio\n"
            "class NoReader(asyncio.SelectorEventLoop):\n"
            "    def add_reader(self, *a):\n        raise NotImplementedError\n"
            "async def main():\n    return await asyncio.gather(tools.search(n=1), tools.search(n=2))\n"
            "loop = NoReader()\n"
            "r = loop.run_until_complete(main())\n"
            "loop.close()\n"
            "return r\n"
        )
        done, _, _, _ = run(program, echo_args, namespaces=[TOOLS])
        self.assertEqual(done["value"], [{"n": 1}, {"n": 2}])


def reply_in_order_after(n):
    """Hold calls until ``n`` are in flight, then answer them first first
    with ``args["n"] * 10``."""
    held = []

    def on_call(child, frame):
        held.append(frame)
        if len(held) == n:
            for f in held:
                child.send({"type": "reply", "id": f["id"], "ok": True, "value": f["args"]["n"] * 10})

    return on_call


class SyncCallTest(unittest.TestCase):
    """``<member>.sync``: the same call without ``await``, with or without a
    running loop, beside async calls in flight."""

    def test_without_a_loop(self):
        done, _, calls, _ = run("a = tools.search.sync(n=7)\nb = tools.search.sync([1])\n[a, b]", echo_args, [TOOLS])
        self.assertEqual(done["value"], [{"n": 7}, [1]])
        self.assertEqual([c["name"] for c in calls], ["search", "search"])

    def test_inside_asyncio_run(self):
        program = "import asyncio\nasync def main():\n    return tools.search.sync(n=1)\nasyncio.run(main())"
        done, _, _, _ = run(program, echo_args, namespaces=[TOOLS])
        self.assertEqual(done["value"], {"n": 1})

    def test_beside_async_calls_of_its_own_loop(self):
        # Two async calls go out, then a sync one blocks the loop's thread;
        # nothing is answered before all three are in flight. In order, the
        # async replies arrive while the sync call waits: it must settle
        # them, not drop them; reversed, its own reply comes first.
        program = (
            "import asyncio\n"
            "pending = asyncio.ensure_future(asyncio.gather(tools.search(n=1), tools.search(n=2)))\n"
            "await asyncio.sleep(0)\n"
            "s = tools.search.sync(n=3)\n"
            "return [s, await pending]\n"
        )
        for answer in (reply_in_order_after, reply_reversed_after):
            with self.subTest(answer=answer.__name__):
                done, _, calls, _ = run(program, answer(3), namespaces=[TOOLS])
                self.assertEqual(done["value"], [30, [10, 20]])
                self.assertEqual([c["args"]["n"] for c in calls], [1, 2, 3])

    def test_from_a_thread_while_the_loop_waits(self):
        # The main thread's loop reads fd 3 for its own call; the thread's
        # reply may land there, and the thread must still get it.
        program = (
            "import asyncio\n"
            "return await asyncio.gather(tools.search(n=1), asyncio.to_thread(tools.search.sync, n=2))\n"
        )
        for answer in (reply_in_order_after, reply_reversed_after):
            with self.subTest(answer=answer.__name__):
                done, _, _, _ = run(program, answer(2), namespaces=[TOOLS])
                self.assertEqual(done["value"], [10, 20])

    def test_failures_and_refused_arguments(self):
        program = (
            "out = []\n"
            "try:\n    tools.search.sync(q=1)\nexcept ToolError as e:\n    out.append([e.tool, str(e)])\n"
            "try:\n    tools.search.sync(1, 2)\nexcept TypeError as e:\n    out.append(str(e))\n"
            "try:\n    tools.search.sync({1})\nexcept TypeError as e:\n    out.append(str(e)[:34])\n"
            "return out\n"
        )
        done, _, calls, _ = run(program, namespaces=[TOOLS_WITH_ERRORS])
        self.assertEqual(
            done["value"],
            [
                ["search", "no bindings"],
                "tools.search.sync() takes keyword arguments or one positional argument (2 positional given)",
                "argument of tools.search.sync() is",
            ],
        )
        self.assertEqual(len(calls), 1)  # refused arguments send nothing

    def test_a_refused_call_quotes_the_members_signature(self):
        documented = dict(TOOLS, names=["search"], docs={"search": "async def search(*, query: str) -> list:\n"})
        done, _, calls, _ = run(
            "try:\n    tools.search.sync('x', 2)\nexcept TypeError as e:\n    return str(e)\n", namespaces=[documented]
        )
        self.assertEqual(
            done["value"],
            "tools.search.sync() takes keyword arguments or one positional argument (2 positional given)"
            "; call it as: async def search(*, query: str) -> list",
        )
        self.assertEqual(calls, [])

    def test_a_member_named_sync_stays_a_member(self):
        names = {"global": "tools", "names": ["sync", "search"]}
        program = "[tools.sync.sync(n=1), await tools.sync(n=2), sorted(dir(tools)), tools.sync.sync.__qualname__]"
        done, _, calls, _ = run(program, echo_args, namespaces=[names])
        self.assertEqual(done["value"], [{"n": 1}, {"n": 2}, ["search", "sync"], "tools.sync.sync"])
        self.assertEqual([c["name"] for c in calls], ["sync", "sync"])


class BindingArgumentsTest(unittest.TestCase):
    def test_argument_forms(self):
        program = (
            "await tools.search(a=1, b=[2], c=('t', None))\n"
            "await tools.search({'q': 1})\n"
            "await tools.search([1])\n"
            "await tools.search(None)\n"
            "await tools.search()\n"
            "await tools.search(**{'not an identifier': 1})\n"
        )
        done, _, _, lines = run(program, echo_args, namespaces=[TOOLS])
        self.assertEqual(done, {"type": "done", "value": {"not an identifier": 1}})  # the final expression
        args = [line.split('"args":', 1)[1][:-1] for line in lines if line.startswith('{"type":"call"')]
        self.assertEqual(
            args, ['{"a":1,"b":[2],"c":["t",null]}', '{"q":1}', "[1]", "null", "{}", '{"not an identifier":1}']
        )


class SignalsTest(unittest.TestCase):
    def test_raising_timer_handler_never_makes_invalid_output(self):
        # The value takes tens of milliseconds to encode; the program's timer
        # fires every 0.5 ms and its handler raises. Before signals were
        # quieted, encoding failed part-way and the run was invalid-output.
        program = (
            "import signal\n"
            "class Tick(Exception):\n    pass\n"
            "def handler(signum, frame):\n    raise Tick()\n"
            "value = [{'k': 'x' * 40, 'n': list(range(30))} for _ in range(20000)]\n"
            "signal.signal(signal.SIGALRM, handler)\n"
            "signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\n"
            "return value\n"
        )
        expected = [{"k": "x" * 40, "n": list(range(30))} for _ in range(20000)]
        for _ in range(3):
            done, _, _, _ = run(program, max_value=64 << 20)
            if "error" in done:
                # Only if the timer fired before the program's last line
                # finished (a loaded machine): then the program raised.
                self.assertEqual(done["error"]["kind"], "exception", done["error"])
                self.assertTrue(done["error"]["message"].startswith("Traceback"), done["error"])
                self.assertIn('File "<program>", line', done["error"]["message"])
            else:
                self.assertEqual(done["value"], expected)

    def test_quiet_andrestore_signals(self):
        import signal

        from pycage.signals import SignalState, quiet_signals, restore_signals

        hits = []
        previous = signal.signal(signal.SIGUSR1, lambda signum, frame: hits.append(signum))
        mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        try:
            state = SignalState()
            quiet_signals(state)
            self.assertEqual(signal.getsignal(signal.SIGUSR1), signal.SIG_IGN)
            self.assertIn(signal.SIGUSR1, signal.pthread_sigmask(signal.SIG_BLOCK, []))
            signal.raise_signal(signal.SIGUSR1)
            self.assertEqual(hits, [])
            quiet_signals(state)  # idempotent: the saved handler is still the program's
            restore_signals(state)
            self.assertEqual(signal.pthread_sigmask(signal.SIG_BLOCK, []), mask_before)
            self.assertIsNot(signal.getsignal(signal.SIGUSR1), signal.SIG_IGN)
            self.assertTrue(callable(signal.getsignal(signal.SIGUSR1)))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask_before)
            signal.signal(signal.SIGUSR1, previous)


if __name__ == "__main__":
    unittest.main()


class WarmUpTest(unittest.TestCase):
    """``warm_up`` runs in a pooled child before its run: it must leave
    nothing a run could notice."""

    def assert_prints_ok(self, script):
        """Run ``script`` in a fresh interpreter with the child modules importable."""
        script = f"import sys\nsys.path.insert(0, {PYTHON_DIR!r})\n" + script
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout.strip(), "ok", out.stderr)

    def test_warm_up_leaves_no_state(self):
        script = (
            "import asyncio, linecache, signal\n"
            "from pycage import bootstrap\n"
            "mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])\n"
            "handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}\n"
            "bootstrap.warm_up()\n"
            "assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask, 'signal mask changed'\n"
            "assert {s: signal.getsignal(s) for s in handlers} == handlers, 'handlers changed'\n"
            "assert '<program>' not in linecache.cache\n"
            "assert asyncio.get_event_loop_policy()._local._loop is None, 'an event loop is set'\n"
            "print('ok')\n"
        )
        self.assert_prints_ok(script)

    def test_warm_up_keeps_what_the_channel_holds(self):
        # What the host sent before the warm-up touched the read path (a
        # child forked cold reads early) is still there, in order, after it.
        script = (
            "import threading\n"
            "from pycage import bootstrap, channel\n"
            "channel._readbuf[0] = 7\n"
            'channel._inbuf.extend(b\'{"type":"bo\')\n'
            "assert channel._take_line() is None\n"
            "scan = channel._scan_from\n"
            "bootstrap.warm_up()\n"
            'assert channel._inbuf == b\'{"type":"bo\', bytes(channel._inbuf)\n'
            "assert channel._scan_from == scan, channel._scan_from\n"
            "assert channel._readbuf[0] == 7\n"
            "assert channel._held is None and not channel._backlog and not channel._sending\n"
            "got = []\n"
            "def take():\n"
            "    got.append(channel.lock.acquire(timeout=5))\n"
            "    channel.lock.release()\n"
            "t = threading.Thread(target=take)\n"
            "t.start(); t.join()\n"
            "assert got == [True], 'the warm-up left the channel lock held'\n"
            "channel._inbuf.clear(); channel._scan_from = 0\n"
            "bootstrap.warm_up()\n"
            "assert not channel._inbuf and channel._scan_from == 0\n"
            "print('ok')\n"
        )
        self.assert_prints_ok(script)
