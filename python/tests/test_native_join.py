"""Unit tests for the native join's compiler (``pycage.confine``'s
``compile_native``): the program it makes of a join, the lists it leaves
to the Python steps, and the program run by pycage-join's library in a
forked child.

The library's tests need its path in ``PYCAGE_TEST_NATIVE_JOIN`` (the
runtime's ``python_unit`` test gives the one it embeds); without it they
are skipped.

Run: cd python && python3 -m unittest discover -s tests -v
"""

import json
import os
import subprocess
import sys
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)

from pycage import confine  # noqa: E402

#: A list shaped as pycage-sandbox's ``confine::build`` makes it, with a
#: one-instruction filter ("return allow").
FILTER = "06000000" + "0000ff7f"


def sandbox_list(**changes):
    steps = [
        {"op": "death-signal"},
        {"op": "limit", "resource": "nproc", "value": 66},
        {"op": "unshare-cgroup"},
        {"op": "unshare-user"},
        {"op": "dumpable"},
        {"op": "id-maps", "uidMap": "1000 0 1\n", "gidMap": "1001 0 1\n"},
        {"op": "death-signal"},
        {"op": "close-fds"},
        {"op": "limit", "resource": "nofile", "value": 256},
        {"op": "drop-caps"},
        {"op": "no-new-privs"},
        {"op": "landlock"},
        {"op": "seccomp", "filter": FILTER},
    ]
    for index, step in changes.items():
        steps[int(index[1:])] = step
    return steps


#: The join's descriptors as the zygote would hold them.
FDS = [10, 11, 12, 13, 14, 15, 16, 17]


class CompileTest(unittest.TestCase):
    def setUp(self):
        # compile_native's library: any entry point will do for compiling.
        self.saved = confine._native, confine._compiled
        confine._native, confine._compiled = "entry", None

    def tearDown(self):
        confine._native, confine._compiled = self.saved

    def compile(self, steps, host_ids=(1500001, 1500002), fds=FDS, watch=30):
        join = {"confine": json.loads(json.dumps(steps)), "remaps": []}
        if host_ids is not None:
            join["hostIds"] = list(host_ids)
        return confine.compile_native(join, fds, watch)

    def ops(self, compiled):
        """The program as (code, slot bits, three arguments) per operation,
        slot arguments replaced by the spawn's value."""
        words, values, out = list(compiled.program), list(compiled.values), []
        for i in range(0, len(words), 4):
            code, args = words[i], words[i + 1 : i + 4]
            slots = code >> confine._NATIVE_SLOT_SHIFT
            args = [values[a] if slots >> n & 1 else a for n, a in enumerate(args)]
            out.append((code & 0xFF, *args))
        return out

    def test_the_join_then_the_list_in_their_order(self):
        compiled = self.compile(sandbox_list())
        self.assertIsNotNone(compiled)
        ops = self.ops(compiled)
        self.assertEqual(len(ops), len(compiled.what))
        c = confine
        self.assertEqual(
            ops[:17],
            [
                # Network and IPC first: recycled ones are owned outside
                # the run's user namespace.
                (c._NATIVE_SETNS, 13, c._CLONE_NEWNET, 0),
                (c._NATIVE_SETNS, 14, c._CLONE_NEWIPC, 0),
                (c._NATIVE_HOST_IDS, 1500001, 1500002, 0),
                (c._NATIVE_SETNS, 10, c._CLONE_NEWUSER, 0),
                (c._NATIVE_SETNS, 11, c._CLONE_NEWNS, 0),
                (c._NATIVE_ENTER_ROOT, 16, 0, 0),
                (c._NATIVE_SETNS, 15, c._CLONE_NEWUTS, 0),
                *[(c._NATIVE_CLOSE, fd, 0, 0) for fd in (10, 11, 12, 13, 14, 15, 16)],
                (c._NATIVE_PRCTL, c._PR_SET_PDEATHSIG, 9, 0),
                (c._NATIVE_PARENT_ALIVE, 30, 0, 0),
                (c._NATIVE_PRCTL, c._PR_SET_PDEATHSIG, 9, 0),
            ],
        )
        import resource

        writes = [op[1:] for op in ops[21:24]]
        self.assertEqual(
            ops[17:],
            [
                (c._NATIVE_LIMIT, resource.RLIMIT_NPROC, 66, 0),
                (c._NATIVE_UNSHARE, c._CLONE_NEWCGROUP, 0, 0),
                (c._NATIVE_UNSHARE, c._CLONE_NEWUSER, 0, 0),
                (c._NATIVE_PRCTL, c._PR_SET_DUMPABLE, 1, 0),
                *[(c._NATIVE_WRITE_FILE, *w) for w in writes],
                (c._NATIVE_PRCTL, c._PR_SET_PDEATHSIG, 9, 0),
                # Every descriptor from 4 up goes but the ruleset, until
                # Landlock has used it.
                (c._NATIVE_CLOSE_FROM, 4, 17, 0),
                (c._NATIVE_LIMIT, resource.RLIMIT_NOFILE, 256, 0),
                (c._NATIVE_DROP_CAPS, c._LAST_CAP, int(c._KERNEL_LAST_CAP is None), 0),
                (c._NATIVE_PRCTL, c._PR_SET_NO_NEW_PRIVS, 1, 0),
                (c._NATIVE_LANDLOCK, 17, 0, 0),
                (c._NATIVE_SECCOMP, ops[-1][1], 0, 0),
            ],
        )

    def test_the_map_writes_point_at_their_text(self):
        import ctypes

        compiled = self.compile(sandbox_list())
        writes = [op for op in self.ops(compiled) if op[0] == confine._NATIVE_WRITE_FILE]
        seen = [
            (ctypes.string_at(path).decode(), ctypes.string_at(data, size).decode()) for _, path, data, size in writes
        ]
        self.assertEqual(
            seen,
            [
                ("/proc/self/setgroups", "deny\n"),
                ("/proc/self/uid_map", "1000 0 1\n"),
                ("/proc/self/gid_map", "1001 0 1\n"),
            ],
        )

    def test_a_root_host_without_host_ids_joins_without_them(self):
        ops = self.ops(self.compile(sandbox_list(), host_ids=None))
        self.assertNotIn(confine._NATIVE_HOST_IDS, [op[0] for op in ops])

    def test_the_same_list_is_compiled_once_and_each_spawn_gives_its_values(self):
        first = self.compile(sandbox_list())
        again = self.compile(sandbox_list(), fds=[20, 21, 22, 23, 24, 25, 26, 27], watch=31)
        self.assertIs(first, again)
        self.assertEqual(self.ops(again)[0], (confine._NATIVE_SETNS, 23, confine._CLONE_NEWNET, 0))
        self.assertEqual(self.ops(again)[15][:2], (confine._NATIVE_PARENT_ALIVE, 31))
        # Another limit is another program.
        other = self.compile(sandbox_list(s1={"op": "limit", "resource": "nproc", "value": 67}))
        self.assertIsNot(other, first)
        self.assertEqual(self.ops(other)[17][2], 67)
        # And so are host ids where there were none.
        self.assertIsNot(self.compile(sandbox_list(), host_ids=None), first)

    def test_what_the_python_steps_refuse_is_left_to_them(self):
        # Lists the host never sends: the compiler leaves each to the
        # Python steps, which report what is wrong with it (or, for a
        # negative limit, take it as "unlimited" where the hard limit is).
        refused = {
            "an unknown step": sandbox_list(s2={"op": "mount-everything"}),
            "no landlock step": [s for s in sandbox_list() if s["op"] != "landlock"],
            "a second landlock step": sandbox_list() + [{"op": "landlock"}],
            "no close-fds step": [s for s in sandbox_list() if s["op"] != "close-fds"],
            "an unknown resource": sandbox_list(s1={"op": "limit", "resource": "stack", "value": 1}),
            "a limit that is no integer": sandbox_list(s1={"op": "limit", "resource": "nproc", "value": "66"}),
            "a negative limit": sandbox_list(s1={"op": "limit", "resource": "nproc", "value": -1}),
            "a map that is not ASCII": sandbox_list(s5={"op": "id-maps", "uidMap": "é", "gidMap": ""}),
            "a step that is no object": sandbox_list(s0="death-signal"),
        }
        for why, steps in refused.items():
            with self.subTest(why):
                self.assertIsNone(self.compile(steps))
        self.assertIsNone(self.compile(sandbox_list(), host_ids=("0", 0)))
        self.assertIsNone(self.compile(sandbox_list(), host_ids=(-1, 0)))

    def test_the_program_keeps_its_seccomp_filter_alive(self):
        import ctypes

        compiled = self.compile(sandbox_list())
        address = self.ops(compiled)[-1][1]
        saved = dict(confine._SECCOMP_PROGRAMS)
        self.addCleanup(lambda: (confine._SECCOMP_PROGRAMS.clear(), confine._SECCOMP_PROGRAMS.update(saved)))
        # The zygote's cache of filters holds four at most, then forgets:
        # the program must hold the buffers its operation points at.
        for n in range(5):
            confine._seccomp_program("0600000000%02x0000" % n)
        self.assertNotIn(FILTER, confine._SECCOMP_PROGRAMS)
        held = [k for k in compiled.keep if type(k) is tuple and ctypes.addressof(k[1]) == address]
        self.assertEqual(len(held), 1)
        buf, prog = held[0]
        self.assertEqual((prog.len, prog.filter), (1, ctypes.addressof(buf)))
        self.assertEqual(bytes(buf).hex(), FILTER)

    def test_without_the_library_nothing_is_compiled(self):
        confine._native = False
        self.assertIsNone(self.compile(sandbox_list()))


@unittest.skipUnless(os.environ.get("PYCAGE_TEST_NATIVE_JOIN"), "PYCAGE_TEST_NATIVE_JOIN names no library")
class LibraryTest(unittest.TestCase):
    """pycage-join's library running programs in a forked child: in a user
    namespace of its own (every capability there), which the sandbox needs
    anyway, so these fail loudly where one cannot be made."""

    def fork_and_run(self, body):
        """Runs ``body`` (indented 8) in a child forked from a Python
        process that loaded the library: what the child wrote to the pipe
        ``w`` (its fd 2 too, where it dups it), and its exit status."""
        script = f"""
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
from pycage import confine
confine._NATIVE_PATH = sys.argv[2]
entry = confine._native_entry()
assert entry, "the library did not load"
def status():
    with open("/proc/self/status") as f:
        return {{k: v.strip() for k, v in (l.split(":", 1) for l in f)}}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
{body}
    except OSError as e:
        out = "OSError: " + str(e)
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
_, code = os.waitpid(pid, 0)
print(json.dumps([data.decode(), os.waitstatus_to_exitcode(code)]))
"""
        out = subprocess.run(
            [sys.executable, "-I", "-c", script, PYTHON_DIR, os.environ["PYCAGE_TEST_NATIVE_JOIN"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def run_child(self, body):
        """What ``body`` left in ``out``, from a child that exited 0."""
        data, code = self.fork_and_run(body)
        self.assertEqual(code, 0, data)
        return json.loads(data)

    def test_a_program_confines_the_child(self):
        body = """
        p = confine._Compiled(entry, b"", False)
        p.op(confine._NATIVE_UNSHARE, "unshare(user)", confine._CLONE_NEWUSER)
        p.op(confine._NATIVE_PRCTL, "prctl(PR_SET_DUMPABLE)", confine._PR_SET_DUMPABLE, 1)
        uid = os.getuid()
        p.write_file("/proc/self/setgroups", "deny\\n")
        p.write_file("/proc/self/uid_map", f"1000 {uid} 1\\n")
        import resource
        p.op(confine._NATIVE_LIMIT, "setrlimit(nofile)", resource.RLIMIT_NOFILE, 200)
        guessed = int(confine._KERNEL_LAST_CAP is None)
        p.op(confine._NATIVE_DROP_CAPS, "dropping capabilities", confine._LAST_CAP, guessed)
        p.op(confine._NATIVE_PRCTL, "prctl(PR_SET_NO_NEW_PRIVS)", confine._PR_SET_NO_NEW_PRIVS, 1)
        p.finish()
        confine._run_native(p)
        s = status()
        out = {k: s[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")}
        out["uid"] = os.getuid()
        out["nofile"] = list(resource.getrlimit(resource.RLIMIT_NOFILE))
        out["map"] = open("/proc/self/uid_map").read().split()
"""
        out = self.run_child(body)
        self.assertIsInstance(out, dict, out)
        zero = "0000000000000000"
        for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(out[key], zero, key)
        self.assertEqual(out["NoNewPrivs"], "1")
        self.assertEqual(out["uid"], 1000)
        self.assertEqual(out["nofile"], [200, 200])
        self.assertEqual(out["map"][:2], ["1000", str(os.getuid())])

    def test_a_failing_operation_raises_with_its_step_and_stops_the_program(self):
        body = """
        p = confine._Compiled(entry, b"", False)
        p.op(confine._NATIVE_PRCTL, "prctl(PR_SET_NO_NEW_PRIVS)", confine._PR_SET_NO_NEW_PRIVS, 1)
        p.op(confine._NATIVE_CLOSE, "closing a namespace descriptor", 900000)
        p.op(confine._NATIVE_PRCTL, "prctl(PR_SET_DUMPABLE)", confine._PR_SET_DUMPABLE, 0)
        p.finish()
        try:
            confine._run_native(p)
            out = "ran"
        except OSError as e:
            # PR_GET_DUMPABLE (3): still 1, as every forked child starts.
            out = [e.errno, str(e), status()["NoNewPrivs"], ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)]
"""
        errno, message, no_new_privs, dumpable = self.run_child(body)
        self.assertEqual(errno, 9)  # EBADF
        self.assertIn("closing a namespace descriptor: ", message)
        self.assertEqual(no_new_privs, "1")  # the operation before it ran
        self.assertEqual(dumpable, 1)  # the one after it did not

    def test_a_library_of_another_format_is_refused(self):
        body = """
        confine._native = None
        confine._NATIVE_ABI += 1
        out = [confine._native_entry(), confine.compile_native({"confine": []}, [], 0)]
"""
        self.assertEqual(self.run_child(body), [False, None])

    def test_a_zygote_gone_ends_the_child_as_a_failed_setup(self):
        body = """
        rp, wp = os.pipe()
        os.write(wp, b"x")  # "readable": what a dead zygote's pidfd polls
        p = confine._Compiled(entry, b"", False)
        p.op(confine._NATIVE_PARENT_ALIVE, confine._ZYGOTE_DIED, rp)
        p.finish()
        os.dup2(w, 2)
        confine._run_native(p)
        out = "survived"
"""
        # The child exits 127 before it writes its outcome; its diagnostic
        # went to its fd 2, here the same pipe.
        data, code = self.fork_and_run(body)
        self.assertEqual(code, 127, data)
        self.assertIn(confine._ZYGOTE_DIED, data)
        self.assertNotIn("survived", data)


if __name__ == "__main__":
    unittest.main()
