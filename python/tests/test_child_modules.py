"""Unit tests for the child's modules: the generated wire module as the
child uses it, unknown-member messages, the int digit limit around the
codec, the recursion headroom, and the hardening of the split package.

Run: cd python && python3 -m unittest discover -s tests -v
"""

import json
import os
import subprocess
import sys
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The CPython versions whose after-fork steps ``pycage._forks`` was checked
#: against (with the GIL): the zygote forks through the C library there.
SHORTCUT_CHECKED = (
    sys.implementation.name == "cpython"
    and (3, 10) <= sys.version_info[:2] <= (3, 13)
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)
sys.path.insert(0, PYTHON_DIR)

# E402: pycage is importable only once PYTHON_DIR is on sys.path (the tests
# run with `python3 -I`, which leaves the current directory off it).
from pycage import _wire, runner  # noqa: E402
from pycage.decoder import decode_json  # noqa: E402
from pycage.encoder import encode_json  # noqa: E402
from pycage.namespaces import missing_member_message  # noqa: E402
from pycage.signals import restore_signals  # noqa: E402


class WireTest(unittest.TestCase):
    def test_encoders_write_canonical_lines(self):
        line = _wire.encode_call(3, "tools", 'my "tool"', '{"a":[1]}')
        self.assertEqual(line, b'{"type":"call","id":3,"global":"tools","name":"my \\"tool\\"","args":{"a":[1]}}\n')
        self.assertEqual(_wire.encode_log("é\n"), '{"type":"log","text":"é\\n"}\n'.encode())
        self.assertEqual(_wire.encode_log("m", True), b'{"type":"log","text":"m","truncated":true}\n')
        self.assertEqual(_wire.encode_done(), b'{"type":"done"}\n')
        error = _wire.encode_done_error("exception", "boom")
        self.assertEqual(
            _wire.encode_done(error=error), b'{"type":"done","error":{"kind":"exception","message":"boom"}}\n'
        )
        self.assertEqual(_wire.encode_boot_ack(), b'{"type":"boot-ack"}\n')
        with self.assertRaises(ValueError):
            _wire.encode_done_error("timeout", "not a child kind")

    def test_checkers_are_key_exact(self):
        reply = {"type": "reply", "id": 1, "ok": True, "value": None}
        self.assertIsNone(_wire.check_reply(reply))
        self.assertEqual(_wire.check_reply(dict(reply, extra=1)), "reply: unknown field 'extra'")
        self.assertEqual(_wire.check_reply({"type": "reply", "id": 1, "ok": True}), "reply: missing field 'value'")
        self.assertEqual(_wire.check_reply(dict(reply, id=-1)), "reply.id must be a non-negative integer")
        self.assertEqual(_wire.check_reply(dict(reply, id=True)), "reply.id must be a non-negative integer")
        self.assertEqual(_wire.check_reply(dict(reply, type="run")), 'reply.type must be "reply"')
        self.assertEqual(_wire.check_reply(dict(reply, ok=1)), "reply.ok is not one of the variants' values")
        bad_error = {"type": "reply", "id": 1, "ok": False, "message": 3}
        self.assertEqual(_wire.check_reply(bad_error), "reply.message must be a string")
        boot = {
            "type": "boot",
            "cpuSeconds": 0,
            "addressSpaceBytes": 0,
            "maxLogBytes": 1,
            "maxValueBytes": 1,
            "maxDisplayBytes": 1,
            "namespaces": [{"global": "t", "names": ["a"], "errorClass": {"name": "E"}}],
        }
        self.assertEqual(_wire.check_boot(boot), "boot.namespaces[0].errorClass: missing field 'memberNameProperty'")

    def test_marker(self):
        self.assertEqual(_wire.log_truncation_marker(65536), "[pycage] log capture truncated at 65536 bytes")


class MissingMemberTest(unittest.TestCase):
    def test_close_matches_first(self):
        members = dict.fromkeys(["fetch", "search", "search_docs", "echo"])
        self.assertEqual(
            missing_member_message("tools", "serch", members),
            "namespace 'tools' has no function 'serch'; did you mean 'search'? "
            "Its functions: 'search', 'echo', 'search_docs', 'fetch'.",
        )
        self.assertEqual(
            missing_member_message("tools", "zzz", members),
            "namespace 'tools' has no function 'zzz'. Its functions: 'echo', 'fetch', 'search', 'search_docs'.",
        )
        self.assertEqual(
            missing_member_message("tools", "x", {}), "namespace 'tools' has no function 'x'; it has no functions"
        )

    def test_listing_is_bounded(self):
        members = dict.fromkeys(f"tool_{i:03}" for i in range(500))
        message = missing_member_message("big", "tool_1000", members)
        self.assertTrue(message.endswith(", ... (460 more)."), message[-80:])
        self.assertLess(len(message), 1000)


class IntDigitLimitTest(unittest.TestCase):
    def test_codec_lifts_the_limit_only_for_itself(self):
        if not hasattr(sys, "get_int_max_str_digits"):
            self.skipTest("this CPython has no int digit limit")
        before = sys.get_int_max_str_digits()
        self.assertNotEqual(before, 0)
        big = 7 * 10**6000
        text = encode_json([big, -big])
        self.assertEqual(sys.get_int_max_str_digits(), before)
        self.assertEqual(decode_json(text), [big, -big])
        self.assertEqual(sys.get_int_max_str_digits(), before)
        with self.assertRaises(ValueError):
            str(big)
        sys.set_int_max_str_digits(700)  # a program's own, lower limit comes back too
        try:
            self.assertEqual(decode_json(encode_json(10**800)), 10**800)
            self.assertEqual(sys.get_int_max_str_digits(), 700)
        finally:
            sys.set_int_max_str_digits(before)
        with self.assertRaises(ValueError):
            decode_json("[1, 2,")  # malformed text still fails


class RecursionDepthTest(unittest.TestCase):
    def test_depth_matches_the_interpreters(self):
        def reported():
            try:
                runner._setrecursionlimit(1)  # the interpreter's own (sys has the program's)
            except RecursionError as e:  # "... at the recursion depth N: ..."
                return int(str(e).split("depth ")[1].split(":")[0])
            raise AssertionError("a limit of 1 was accepted")

        limit = sys.getrecursionlimit()
        # Both measured one call below this frame.
        self.assertEqual(runner.recursion_depth(), reported() - 1)
        self.assertEqual(sys.getrecursionlimit(), limit)

    def test_an_announced_depth_is_the_measured_one(self):
        # The limit a program runs under: the interpreter's plus the depth
        # of the frames below it (the program itself reads the former).
        program = runner.compile_for("from pycage import runner\nrunner._getrecursionlimit()")
        main, argv = sys.modules["__main__"], sys.argv

        def middle():
            try:
                outcome = runner.run_program(program, runner.new_program_globals({}))
            finally:
                sys.modules["__main__"], sys.argv = main, argv
            restore_signals(outcome.signals)
            self.assertIsNone(outcome.error)
            return outcome.value

        def anchor():
            runner.expect_run(1, sys._getframe(), runner.recursion_depth())
            runner._depth_by_chain.clear()
            announced = middle()
            self.assertEqual(runner._depth_by_chain, {})  # nothing measured
            runner._expected.clear()
            measured = middle()
            self.assertEqual(len(runner._depth_by_chain), 1)
            self.assertEqual(announced, measured)
            self.assertGreater(measured, sys.getrecursionlimit())

        anchor()

    def test_program_gets_a_scripts_depth(self):
        # Run as the child runs programs; compare with a script of the same
        # interpreter. CPython's own answer moves by one with its warm state.
        program = "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\nf(0)\n"
        script = (
            f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "from pycage import runner\n"
            "def deep(k):\n    return deep(k - 1) if k else run()\n"
            "def run():\n"
            f"    outcome = runner.run_program(runner.compile_for({program!r}), runner.new_program_globals({{}}))\n"
            "    return [outcome.value, sys.getrecursionlimit()]\n"
            "print(deep(30))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        depth, limit_after = json.loads(out.stdout)
        plain = subprocess.run(
            [sys.executable, "-I", "-c", program.replace("f(0)\n", "print(f(0))")], capture_output=True
        )
        self.assertLessEqual(abs(depth - int(plain.stdout)), 1, (depth, plain.stdout))
        self.assertEqual(limit_after, 1000)


class ProgramRecursionLimitTest(unittest.TestCase):
    """The program reads and sets CPython's limit, not the one raised by the
    child's frames below it (``sys.getrecursionlimit()`` read 1005)."""

    PROGRAM = (
        "import sys\n"
        "seen = [sys.getrecursionlimit()]\n"
        "sys.setrecursionlimit(1500)\n"
        "seen.append(sys.getrecursionlimit())\n"
        "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\n"
        "seen.append(f(0))\n"
        "try:\n    sys.setrecursionlimit(1)\nexcept RecursionError as e:\n    seen.append(str(e))\n"
        "try:\n    sys.setrecursionlimit(0)\nexcept ValueError as e:\n    seen.append(str(e))\n"
        "sys.setrecursionlimit(1000)\n"
        "seen.append([sys.getrecursionlimit.__name__, sys.getrecursionlimit.__doc__ is not None])\n"
    )

    def test_the_program_reads_and_sets_cpythons_limit(self):
        script = (
            f"import sys, json; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "from pycage import runner\n"
            "def deep(k):\n    return deep(k - 1) if k else run()\n"
            "def run():\n"
            f"    program = runner.compile_for({self.PROGRAM + 'seen'!r})\n"
            "    outcome = runner.run_program(program, runner.new_program_globals({}))\n"
            "    return outcome.value + [sys.getrecursionlimit(), runner._getrecursionlimit()]\n"
            "print(json.dumps(deep(30)))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        got = json.loads(out.stdout)
        plain = subprocess.run(
            [sys.executable, "-I", "-c", self.PROGRAM + "import json\nprint(json.dumps(seen))\n"],
            capture_output=True,
            text=True,
        )
        want = json.loads(plain.stdout)
        self.assertLessEqual(abs(got[2] - want[2]), 1, (got, want))
        got[2] = want[2]
        # After the run, the limit the program left, without the headroom.
        self.assertEqual(got, want + [1000, 1000])


class NetworkHintTest(unittest.TestCase):
    """A lookup or an internet socket that fails in a run without network
    says so, and how to allow a host; with network, errors are unchanged."""

    def _run(self, no_network):
        script = (
            f"import sys, json, socket; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "from pycage import network\n"
            "network.install()\n"
            "network.install()  # once only\n"
            f"def refused(*a):\n    raise PermissionError(1, 'Operation not permitted')\n"
            f"if {no_network!r}:\n    network._probe = refused\n"
            "def lookup(*a, **k):\n    raise socket.gaierror(-2, 'Name or service not known')\n"
            "wrapped = network._wrap(lookup)\n"
            "out = []\n"
            "try:\n    wrapped('example.com', 80)\nexcept socket.gaierror as e:\n    out.append([e.errno, str(e)])\n"
            "init = network._wrap_init(lambda self, *a: refused())\n"
            "for family in (socket.AF_INET, socket.AF_UNIX):\n"
            "    try:\n        init(None, family)\n"
            "    except PermissionError as e:\n        out.append([e.errno, str(e)])\n"
            "out.append(socket.getaddrinfo.__name__)\n"
            "print(json.dumps(out))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_without_network_the_message_says_how_to_allow_a_host(self):
        from pycage.network import HINT

        self.assertIn("--allow-net HOST[:PORT]", HINT)
        self.assertIn("allow_net=", HINT)
        self.assertEqual(
            self._run(True),
            [
                [-2, f"[Errno -2] Name or service not known ({HINT})"],
                [1, f"[Errno 1] Operation not permitted ({HINT})"],
                [1, "[Errno 1] Operation not permitted"],
                "getaddrinfo",
            ],
        )

    def test_with_network_errors_are_unchanged(self):
        self.assertEqual(
            self._run(False),
            [
                [-2, "[Errno -2] Name or service not known"],
                [1, "[Errno 1] Operation not permitted"],
                [1, "[Errno 1] Operation not permitted"],
                "getaddrinfo",
            ],
        )


class RemapOnceTest(unittest.TestCase):
    """The zygote moves its paths into the sandbox once; its children then
    find them moved and must not move them again (``confine.remap_once``)."""

    def test_paths_move_once_and_a_second_mapping_is_refused(self):
        script = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import encodings
from pycage import confine
prefix = os.path.dirname(encodings.__path__[0])
remaps = [(prefix, "/inside")]
first = confine.remap_once(remaps)
moved = (list(sys.path), list(encodings.__path__))
again = confine.remap_once([[prefix, "/inside"]])
other = confine.remap_once([[prefix, "/elsewhere"]])
print(json.dumps([prefix, first, again, other, moved, [list(sys.path), list(encodings.__path__)]]))
"""
        out = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR], capture_output=True, text=True, check=True
        ).stdout
        prefix, first, again, other, moved, after = json.loads(out)
        self.assertEqual((first, again, other), (True, True, False))
        self.assertEqual(moved[1], ["/inside/encodings"])
        self.assertIn("/inside", moved[0])
        self.assertFalse([p for p in moved[0] if p.startswith(prefix + "/") or p == prefix])
        # Neither the repeat nor the refused mapping moved anything.
        self.assertEqual(after, moved)


class JoinPlansTest(unittest.TestCase):
    """The zygote keeps the join plan the first spawn of a plan carries, and
    gives a later spawn that names it the plan's own remaps and list
    (``zygote._JoinPlans``); a spawn naming a plan it does not hold is
    refused, and a plan whose remaps would move the paths elsewhere is not
    kept."""

    def test_a_plan_is_kept_and_named(self):
        script = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import encodings
from pycage import confine, zygote
prefix = os.path.dirname(encodings.__path__[0])
one = "06000000ff7fff7f"
steps = [{"op": "no-new-privs"}, {"op": "seccomp", "filter": one}]
plans = zygote._JoinPlans()
out = []
out.append(plans.resolve({"hostIds": [5, 5], "plan": 1})[1])
env = {"HOME": "/work", "PYCAGE_T": "1"}
whole = {"hostIds": [5, 5], "plan": 1, "env": env, "remaps": [[prefix, "/inside"]], "confine": steps}
join, why = plans.resolve(whole)
out.append([join is whole, why, one in confine._SECCOMP_PROGRAMS, encodings.__path__[0]])
out.append([os.environ.get("HOME"), os.getenv("PYCAGE_T")])
join, why = plans.resolve({"hostIds": [6, 7], "plan": 1})
out.append([join["hostIds"], join["confine"] is steps, join["remaps"], why])
out.append(plans.resolve({"hostIds": None, "plan": 2})[1])
out.append(plans.resolve({"hostIds": None})[1])
# Another plan with the same remaps replaces it; one that moves the paths elsewhere is refused.
other = [{"op": "no-new-privs"}]
out.append(plans.resolve({"hostIds": None, "plan": 2, "remaps": [[prefix, "/inside"]], "confine": other})[1])
out.append([os.environ.get("HOME"), os.getenv("PYCAGE_T")])
out.append(plans.resolve({"hostIds": None, "plan": 2})[0]["confine"] is other)
out.append(plans.resolve({"hostIds": None, "plan": 3, "remaps": [[prefix, "/else"]], "confine": other}))
out.append(plans.resolve({"hostIds": None, "plan": 3, "remaps": 5, "confine": other})[1])
out.append(plans.resolve({"hostIds": None, "plan": 3})[1])
out.append(plans.resolve({"hostIds": None, "plan": 2})[1])
for bad in ({"A": 1}, {"A=B": "x"}, ["A"]):
    plan = {"hostIds": None, "plan": 4, "env": bad, "remaps": [[prefix, "/inside"]], "confine": other}
    out.append(plans.resolve(plan))
out.append(plans.resolve({"hostIds": None, "plan": 4})[1])
print(json.dumps(out))
"""
        run = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
        )
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout)
        self.assertEqual(out[0], "the zygote holds no join plan 1")
        self.assertEqual(out.pop(1), [True, None, True, "/inside/encodings"])
        # The plan's environment is the zygote's own: its children inherit it.
        self.assertEqual(out.pop(1), ["/work", "1"])
        self.assertEqual(out[1], [[6, 7], True, [[out[1][2][0][0], "/inside"]], None])
        self.assertEqual(out[2], "the zygote holds no join plan 2")
        self.assertEqual(out[3], "the zygote holds no join plan None")
        self.assertEqual(out[4], None)
        # A plan without an environment takes the last one's away.
        self.assertEqual(out.pop(5), [os.environ.get("HOME"), None])
        self.assertEqual(out[5], True)
        self.assertEqual(out[6], [None, "the sandbox's path remaps changed"])
        self.assertTrue(out[7].startswith("malformed remaps: TypeError"), out[7])
        self.assertEqual(out[8], "the zygote holds no join plan 3")
        # The refused plans replaced nothing.
        self.assertIsNone(out[9])
        self.assertEqual(out[10], [None, "malformed env: not an object of strings"])
        self.assertEqual(out[11][0], None)
        self.assertTrue(out[11][1].startswith("malformed env: "), out[11])
        self.assertEqual(out[12], [None, "malformed env: not an object of strings"])
        # A refused environment leaves no plan kept.
        self.assertEqual(out[13], "the zygote holds no join plan 4")


class ConfinePreparedTest(unittest.TestCase):
    """What the zygote builds before it forks for a child's confinement
    steps (``confine.prepare``), and the capability drop that uses the
    kernel's own last capability number."""

    def test_seccomp_programs_are_built_once_and_bounded(self):
        script = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pycage import confine
one = "06000000ff7fff7f"  # one instruction: return ALLOW
confine.prepare({"confine": [{"op": "limit"}, {"op": "seccomp", "filter": one}]})
built = confine._SECCOMP_PROGRAMS.get(one)
same = confine._seccomp_program(one) is built[1]
# Malformed steps are left to the child, which fails the same step.
for bad in ({"confine": [{"op": "seccomp", "filter": "abc"}]}, {"confine": 5}, {"confine": [{"op": "seccomp"}]}):
    confine.prepare(bad)
errors = []
for bad in ("", "abc", "0600"):
    try:
        confine._seccomp_program(bad)
    except ValueError as e:
        errors.append(type(e).__name__)
for i in range(10):
    confine._seccomp_program(one + "%016x" % i)
print(json.dumps([built is not None, same, errors, len(confine._SECCOMP_PROGRAMS) <= 4]))
"""
        out = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
        )
        self.assertEqual(json.loads(out.stdout), [True, True, ["ValueError"] * 3, True], out.stderr)

    def test_drop_caps_empties_every_set_in_a_user_namespace(self):
        # In a forked child that made a user namespace (every capability
        # there, and a full bounding set); fails loudly where user
        # namespaces cannot be made, as the sandbox needs them anyway.
        script = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from pycage import confine
with open("/proc/sys/kernel/cap_last_cap") as f:
    last = int(f.read())
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        confine._check(confine._libc.unshare(confine._CLONE_NEWUSER), "unshare(user)")
        def sets():
            with open("/proc/self/status") as f:
                return {k: v.strip() for k, v in (l.split(":", 1) for l in f) if k.startswith("Cap")}
        before = sets()
        confine._op_drop_caps({}, {})
        out = [before, sets()]
    except OSError as e:
        out = str(e)
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = os.read(r, 65536)
os.waitpid(pid, 0)
print(json.dumps([confine._LAST_CAP, last, json.loads(data)]))
"""
        out = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
        )
        known, last, sets = json.loads(out.stdout)
        self.assertEqual(known, last)
        self.assertIsInstance(sets, list, f"no user namespace here: {sets}")
        before, after = sets
        full = format((1 << (last + 1)) - 1, "016x")
        self.assertEqual(before["CapBnd"], full)
        self.assertEqual(before["CapEff"], full)
        for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(after[name], "0" * 16, name)

    def test_a_refused_drop_up_to_the_kernels_last_capability_fails_the_step(self):
        # EINVAL for a number at most the kernel's last would leave that
        # capability in the bounding set: fatal. Only when the last is
        # unknown does EINVAL mark the numbers past it. No capability is
        # touched: every prctl of the step is refused here.
        script = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
from pycage import confine
def refuse(option, *args):
    ctypes.set_errno(22)
    return -1
def outcome(known):
    confine._KERNEL_LAST_CAP = known
    confine._LAST_CAP = 63 if known is None else known
    try:
        confine._op_drop_caps({}, {})
    except OSError as e:
        return str(e)
    return "passed"
confine._prctl_small = refuse
print(json.dumps([outcome(40), outcome(None)]))
"""
        out = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
        )
        known, guessed = json.loads(out.stdout)
        self.assertIn("prctl(PR_CAPBSET_DROP, 0): ", known)
        # Every drop refused, and the step went on to the ambient set.
        self.assertIn("prctl(PR_CAP_AMBIENT_CLEAR_ALL): ", guessed)


class HardeningTest(unittest.TestCase):
    def test_every_child_module_resolves_builtins_privately(self):
        script = (
            f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "import builtins, pycage.bootstrap\n"
            "from pycage import _private\n"
            "names = [n for n in sorted(sys.modules) if n.startswith('pycage.') and n != 'pycage.zygote']\n"
            "print([n for n in names if sys.modules[n].__builtins__ is not _private.BUILTINS], len(names))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        # Every module but the package itself and the zygote (trusted; it
        # never runs with a program).
        self.assertEqual(out.stdout.strip(), "[] 16", out.stderr)


class SettleTest(unittest.TestCase):
    """A signal handler that raises just after the program's last line (an
    interval timer's) ends the run with its exception; the handlers are
    quiet and the builtins back all the same, so the traceback is formatted
    and sent uninterrupted (it once made the child exit 3 instead)."""

    #: A handler that counts its calls and raises; a program that installs
    #: it and rebinds a builtin. (``len`` is rebound: the scripts count
    #: with ``__len__``.)
    _PRELUDE = (
        f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
        "import builtins, json, signal\n"
        "from pycage import outcome as oc, runner, signals\n"
        "real_len = builtins.len\n"
        "class Tick(Exception):\n    pass\n"
        "calls = []\n"
        "def handler(signum, frame):\n    calls.append(signum)\n    raise Tick(calls.__len__())\n"
        "program = runner.compile_for(\n"
        "    'import builtins, signal\\n'\n"
        "    'signal.signal(signal.SIGALRM, handler)\\n'\n"
        "    'builtins.len = None\\n'\n"
        "    '[1, 2]'\n"
        ")\n"
    )
    _RUN = "outcome = runner.run_program(program, runner.new_program_globals({'handler': handler}))\n"

    def _run_script(self, body):
        """Runs the prelude and ``body`` in a fresh interpreter; the JSON it
        printed."""
        script = self._PRELUDE + body
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_a_handler_raising_as_the_program_ends(self):
        got = self._run_script(
            "real = runner.quiet_signals\n"
            "def interrupted(state):\n"
            "    if not calls:\n"
            "        signal.raise_signal(signal.SIGALRM)  # runs the handler here\n"
            "    real(state)\n"
            "runner.quiet_signals = interrupted\n"
            + self._RUN
            + "after = [outcome.signals.quiet, builtins.len is real_len, sys.getrecursionlimit()]\n"
            "signal.raise_signal(signal.SIGALRM)  # ignored: the handlers are quiet\n"
            "frame = json.loads(oc.outcome_frame(outcome, 1 << 20))\n"
            "print(json.dumps({'error': type(outcome.error).__name__, 'after': after, 'calls': calls.__len__(),\n"
            "                  'frame': frame}))\n"
        )
        self.assertEqual(got["error"], "Tick")
        self.assertEqual(got["after"], [True, True, 1000])
        self.assertEqual(got["calls"], 1)
        error = got["frame"]["error"]
        self.assertEqual(error["kind"], "exception")
        self.assertTrue(error["message"].endswith("Tick: 1"), error)

    def test_a_handler_raising_on_the_way_into_settle_twice(self):
        # Outside _settle's own retries (its entry), twice: once in
        # run_program's finally, once in the settling after it (that second
        # one once escaped run_program, and the child exited 3). Then once
        # on the way into outcome_frame's quiet_signals: a session restores
        # the handlers between runs, and the frame quiets them again.
        got = self._run_script(
            "real = runner._settle\n"
            "def interrupted(outcome):\n"
            "    if calls.__len__() < 2:\n"
            "        signal.raise_signal(signal.SIGALRM)  # runs the handler here\n"
            "    return real(outcome)\n"
            "runner._settle = interrupted\n"
            + self._RUN
            + "after = [str(outcome.error), outcome.signals.quiet, builtins.len is real_len]\n"
            "signals.restore_signals(outcome.signals)\n"
            "real_quiet = oc.quiet_signals\n"
            "def quiet_interrupted(state):\n"
            "    oc.quiet_signals = real_quiet\n"
            "    signal.raise_signal(signal.SIGALRM)\n"
            "    real_quiet(state)\n"
            "oc.quiet_signals = quiet_interrupted\n"
            "frame = json.loads(oc.outcome_frame(outcome, 1 << 20))\n"
            "print(json.dumps({'after': after, 'calls': calls.__len__(), 'quiet': outcome.signals.quiet,\n"
            "                  'frame': frame}))\n"
        )
        # The first handler's exception ends the run; the second is dropped.
        self.assertEqual(got["after"], ["1", True, True])
        self.assertEqual(got["calls"], 3)
        self.assertTrue(got["quiet"])
        self.assertEqual(got["frame"]["error"]["kind"], "exception")
        self.assertTrue(got["frame"]["error"]["message"].endswith("Tick: 1"), got["frame"])

    def test_a_handler_raising_as_an_awaiting_program_ends(self):
        # Its exception ends the run, not "the main task did not finish".
        # (This one passed before the fix in _settle too: the awaiting path
        # restores the builtins in _await_program, so it guards that path
        # against a regression rather than reproducing the old failure.)
        script = (
            f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "import signal\n"
            "from pycage import runner\n"
            "class Tick(Exception):\n    pass\n"
            "def handler(signum, frame):\n    raise Tick()\n"
            "real = runner.restore_builtins\n"
            "def interrupted():\n"
            "    runner.restore_builtins = real\n"
            "    signal.raise_signal(signal.SIGALRM)  # runs the handler here\n"
            "    real()\n"
            "program = runner.compile_for('import asyncio\\nawait asyncio.sleep(0)\\n[1, 2]')\n"
            "signal.signal(signal.SIGALRM, handler)\n"
            "runner.restore_builtins = interrupted\n"
            "outcome = runner.run_program(program, runner.new_program_globals({}))\n"
            "runner.close_outcome(outcome)\n"
            "print(type(outcome.error).__name__, outcome.signals.quiet)\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["Tick", "True"])


class RestoreBuiltinsTest(unittest.TestCase):
    """``restore_builtins`` after ``track_builtins`` (the zygote's children):
    the copy is skipped only while nothing changed the shared builtins."""

    def test_the_copy_is_made_exactly_when_something_changed(self):
        script = (
            f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
            "import builtins\n"
            "from pycage import _private\n"
            "_private.track_builtins()\n"
            "copies = []\n"
            "real = _private._update_shared\n"
            "_private._update_shared = lambda d: (copies.append(1), real(d))\n"
            "def restore():\n"
            "    before = copies.__len__()\n"
            "    _private.restore_builtins()\n"
            "    return copies.__len__() - before\n"
            "out = {'tracked': _private._tag_of is not None}\n"
            "out['first'] = restore()\n"
            "out['unchanged'] = restore()\n"
            "original = builtins.len\n"
            "builtins.len = None\n"
            "out['rebound'] = [restore(), builtins.len is original]\n"
            "del builtins.print\n"
            "out['deleted'] = [restore(), 'print' in vars(builtins)]\n"
            "builtins.len = None; builtins.len = original\n"
            "out['rebound back'] = restore()\n"
            "out['after'] = restore()\n"
            "import json; print(json.dumps(out))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout)
        tracked = (3, 10) <= sys.version_info[:2] <= (3, 13)
        self.assertEqual(got["tracked"], tracked)
        self.assertEqual(got["first"], 1)
        self.assertEqual(got["unchanged"], 0 if tracked else 1)
        self.assertEqual(got["rebound"], [1, True])
        self.assertEqual(got["deleted"], [1, True])
        # A change undone by the program still moved the tag: copied again.
        self.assertEqual(got["rebound back"], 1)
        self.assertEqual(got["after"], 0 if tracked else 1)


class ZygoteMessageTest(unittest.TestCase):
    """The zygote's short ways to encode and decode control messages say
    exactly what ``json`` would (``zygote._encode``, ``zygote._decode``)."""

    def test_encode_is_compact_json(self):
        from pycage import zygote

        messages = [
            {"type": "spawned", "id": 7, "pid": 4242},
            {"type": "reaped", "id": 7, "status": 9, "cpuNs": 1234567},
            {"type": "reaped", "id": 2**70, "status": -1, "cpuNs": 0},
            {"type": "spawned", "id": True, "pid": 1},
            {"type": "spawned", "id": "7", "pid": 1},
            {"type": "reaped", "id": 7, "status": 1.5, "cpuNs": 0},
            {"type": "spawn-failed", "id": 7, "message": 'a "quoted" \u00e9 \n'},
            {"type": "ready", "pid": 1, "threads": 1},
        ]
        for message in messages:
            self.assertEqual(zygote._encode(message), json.dumps(message, separators=(",", ":")).encode(), message)

    def test_decode_reads_what_json_reads(self):
        from pycage import zygote

        for data in [b'{"type":"spawn","id":1,"env":{"A":"\\u00e9"}}', b' {"a": [1, 2.5, null]} ', b"[]", b'"s"']:
            self.assertEqual(zygote._decode(data), json.loads(data), data)
        for data in [b"{", b'{"a":1}x', b"", b"\xff", b"nul"]:
            with self.assertRaises(ValueError, msg=data):
                zygote._decode(data)


if __name__ == "__main__":
    unittest.main()


class ZygoteForkTest(unittest.TestCase):
    """``pycage._forks.fork``: the C library's fork with the recorded
    after-fork hooks but ``threading``'s, in a fresh interpreter that
    imports it first, as the zygote does."""

    def test_a_child_reseeds_runs_the_hooks_and_has_working_threads(self):
        script = """
import sys
sys.path.insert(0, sys.argv[1])
from pycage import _forks
import io, json, logging, os, random, threading, concurrent.futures
stream = io.StringIO()
logging.getLogger("t").addHandler(logging.StreamHandler(stream))
ran = []
os.register_at_fork(after_in_child=lambda: ran.append("child"), after_in_parent=lambda: ran.append("parent"))
_forks.stop_recording()
later = []
os.register_at_fork(after_in_child=lambda: later.append("child"))
r, w = os.pipe()
pid = _forks.fork()
if pid == 0:
    ran_here = list(ran)
    box = []
    t = threading.Thread(target=lambda: box.append(threading.get_native_id()))
    t.start()
    t.join()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        doubled = list(pool.map(lambda x: 2 * x, range(3)))
        # Logging's locks were free at the fork: logging works, from threads too.
        list(pool.map(lambda x: logging.getLogger("t").warning("logged %d", x), range(4)))
    logging.getLogger("t").warning("main")
    grandchild = os.fork()  # the real one: every hook runs
    if grandchild == 0:
        os._exit(len(later))
    status = os.waitpid(grandchild, 0)[1]
    out = {
        "random": random.random(), "ran": ran_here, "later": later, "pid": os.getpid(),
        "thread": box[0] != os.getpid(), "doubled": doubled, "grandchild": os.waitstatus_to_exitcode(status),
        "main": threading.current_thread() is threading.main_thread(), "count": threading.active_count(),
        "logged": sorted(stream.getvalue().splitlines()),
    }
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
print(json.dumps({
    "native": _forks._native is not None, "child": child, "random": random.random(), "ran": ran, "pid": pid,
    "restored": os.register_at_fork is _forks._register_at_fork,
    "settled": [getattr(h, "__module__", None) for h in _forks._settled],
}))
"""
        # Without `site` (-S) nothing but start-up modules comes before
        # `_forks`, so 3.10-3.13 take the shortcut; with it, a `.pth` file may
        # have imported more (then it is os.fork()): both must behave.
        for flags in ("-IS", "-I"):
            with self.subTest(flags=flags):
                out = subprocess.run(
                    [sys.executable, flags, "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
                )
                self.assertEqual(out.returncode, 0, out.stderr)
                got = json.loads(out.stdout)
                if flags == "-IS" and SHORTCUT_CHECKED:
                    self.assertTrue(got["native"], "CPython 3.10-3.13 fork through the C library")
                self.check(got)

    def check(self, got):
        child = got["child"]
        self.assertTrue(got["restored"])
        self.assertNotEqual(child["random"], got["random"], "random reseeded in the child")
        # A hook recorded before the fork ran in the child (not the parent's
        # half: the C library's fork runs no Python hook in the parent).
        self.assertEqual(child["ran"], ["child"])
        self.assertEqual(got["ran"], [] if got["native"] else ["parent"])
        # One registered once the zygote stopped recording is not the zygote's.
        self.assertEqual(child["later"], [] if got["native"] else ["child"])
        self.assertEqual(child["grandchild"], len(child["later"]) + 1, "the child's own fork runs it")
        self.assertEqual(child["pid"], got["pid"])
        self.assertTrue(child["thread"] and child["main"])
        self.assertEqual((child["doubled"], child["count"]), ([0, 2, 4], 1))
        self.assertEqual(child["logged"], ["logged 0", "logged 1", "logged 2", "logged 3", "main"])
        # What a child of the C library's fork runs: the recorded hooks
        # but threading's and logging's.
        self.assertNotIn("threading", got["settled"])
        self.assertNotIn("logging", got["settled"])
        self.assertIn("__main__", got["settled"])
        if got["native"]:
            self.assertIn("random", got["settled"])

    def test_a_hook_that_raises_is_reported_and_the_child_goes_on(self):
        script = """
import sys
sys.path.insert(0, sys.argv[1])
from pycage import _forks
import os
os.register_at_fork(after_in_child=lambda: 1 / 0)
_forks.stop_recording()
pid = _forks.fork()
if pid == 0:
    os._exit(7)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), _forks._native is not None)
"""
        out = subprocess.run(
            [sys.executable, "-IS", "-c", script, PYTHON_DIR], capture_output=True, text=True, timeout=60
        )
        code, native = out.stdout.split()
        self.assertEqual(code, "7", out.stderr)
        if SHORTCUT_CHECKED:
            self.assertEqual(native, "True")
        # The shortcut's own report; elsewhere os.fork()'s ("Exception
        # ignored in: <function ...>").
        self.assertIn(
            "Exception ignored in an after-fork hook" if native == "True" else "Exception ignored in", out.stderr
        )
        self.assertIn("ZeroDivisionError", out.stderr)
