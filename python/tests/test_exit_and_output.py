"""Unit tests for what a one-shot run does at exit (``pycage.finalize``) and
for the order of its output (``pycage.logs``): each runs a script in a
fresh interpreter that sets up its descriptors as a child's are (fd 1 and
fd 2 one pipe, fd 3 a socket), so nothing here touches this process's own.

Run: cd python && python3 -m unittest discover -s tests -v
"""

import json
import os
import subprocess
import sys
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A child's descriptors: fd 1 and fd 2 the write end of one pipe (its read
#: end kept as ``pipe_r``), fd 3 one end of a socketpair (``host``).
_CHILD_FDS = f"""
import fcntl, os, socket, sys, json
sys.path.insert(0, {PYTHON_DIR!r})

def high(fd):  # a copy of fd above the numbers a child's stdio and fd 3 take
    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return copy

report = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 10)
# What goes wrong in the script still reaches the test's stderr.
sys.stderr = os.fdopen(fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, 10), "w", buffering=1)
pipe_r, pipe_w = (high(fd) for fd in os.pipe())
host, child = socket.socketpair()
host = socket.socket(fileno=high(host.detach()))
child_fd = high(child.detach())
os.dup2(pipe_w, 1)
os.dup2(pipe_w, 2)
os.dup2(child_fd, 3)
os.close(pipe_w)
os.close(child_fd)
os.set_blocking(pipe_r, False)
host.setblocking(False)

def pipe():
    try:
        return os.read(pipe_r, 1 << 16).decode()
    except BlockingIOError:
        return ""

def frames():
    try:
        data = host.recv(1 << 16)
    except BlockingIOError:
        return []
    return [json.loads(line)["text"] for line in data.decode().splitlines()]

def done(value):
    os.write(report, (json.dumps(value) + "\\n").encode())
"""


def _run(body):
    """Runs ``_CHILD_FDS`` and ``body`` in a fresh interpreter; what it
    passed to ``done``."""
    out = subprocess.run([sys.executable, "-I", "-c", _CHILD_FDS + body], capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout:
        raise AssertionError(f"the script failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)


class OutputOrderTest(unittest.TestCase):
    def test_stdout_and_stderr_have_the_real_descriptors(self):
        got = _run(
            "from pycage import logs\n"
            "done([logs.stdout.fileno(), logs.stderr.fileno(), logs.stdout.buffer.fileno(),"
            " logs.stderr.buffer.fileno()])\n"
        )
        self.assertEqual(got, [1, 2, 1, 2])

    def test_a_write_after_unread_pipe_output_follows_it_in_the_pipe(self):
        got = _run(
            "from pycage import logs\n"
            "logs.start_ledger(1000)\n"
            "logs.stdout.write('first\\n')\n"
            "a = [frames(), pipe()]\n"
            # A subprocess's output the host has not read yet: the next
            # line goes after it, in the pipe, not ahead of it as a frame.
            "os.write(1, b'child\\n')\n"
            "logs.stdout.write('second\\n')\n"
            "logs.stderr.buffer.write(b'third\\n')\n"
            "b = [frames(), pipe()]\n"
            # The host read it all: frames again.
            "logs.stdout.write('fourth\\n')\n"
            "c = [frames(), pipe()]\n"
            "done([a, b, c])\n"
        )
        self.assertEqual(
            got,
            [
                [["first\n"], ""],
                [[], "child\nsecond\nthird\n"],
                [["fourth\n"], ""],
            ],
        )

    def test_a_line_is_never_split_between_the_frames_and_the_pipe(self):
        got = _run(
            "from pycage import logs\n"
            "logs.start_ledger(1000)\n"
            # Begun as a frame, the line ends as frames, whatever waits.
            "logs.stdout.write('a')\n"
            "os.write(1, b'raw')\n"
            "logs.stdout.write('b\\n')\n"
            "a = [frames(), pipe()]\n"
            # Begun in the pipe, it ends there, though the pipe was read.
            "os.write(1, b'raw')\n"
            "logs.stdout.write('c')\n"
            "first = pipe()\n"
            "logs.stdout.write('d\\n')\n"
            "b = [frames(), first, pipe()]\n"
            "done([a, b])\n"
        )
        self.assertEqual(got, [[["a", "b\n"], "raw"], [[], "rawc", "d\n"]])

    def test_the_ledger_counts_what_goes_into_the_pipe(self):
        got = _run(
            "from pycage import logs\n"
            "logs.start_ledger(8)\n"
            "os.write(1, b'x')\n"
            "logs.stdout.write('12345\\n')\n"
            "logs.stdout.write('67890\\n')\n"
            "done([frames(), pipe()])\n"
        )
        self.assertEqual(got, [["[pycage] log capture truncated at 8 bytes"], "x12345\n67"])


#: Runs a program as a one-shot child would, with ``out/`` in a temporary
#: working directory, then the exit work; reports what the directory holds.
_EXIT = """
from pycage import finalize, logs, runner
from pycage.signals import restore_signals
work = tempfile.mkdtemp()
os.chdir(work)
os.mkdir("out")
logs.start_ledger(1 << 20)
sys.stdout = sys.__stdout__ = logs.stdout
sys.stderr = sys.__stderr__ = logs.stderr
finalize.note_baseline()
outcome = runner.run_program(runner.compile_for(PROGRAM), runner.new_program_globals({}))
restore_signals(outcome.signals)
finalize.program_exit((logs.stdout, logs.stderr, logs.stdout.buffer, logs.stderr.buffer))
files = {}
for name in sorted(os.listdir("out")):
    with open(os.path.join("out", name), "rb") as f:
        files[name] = f.read().decode("latin-1")
done({"files": files, "logs": "".join(frames()) + pipe(), "error": repr(outcome.error)})
"""


def _exit(program):
    return _run(f"import tempfile\nPROGRAM = {program!r}\n" + _EXIT)


class ProgramExitTest(unittest.TestCase):
    def test_unclosed_files_are_flushed(self):
        got = _exit(
            "import csv\n"
            "w = csv.writer(open('out/accounts.csv', 'w', newline=''))\n"
            "w.writerow(['id', 'name'])\n"
            "w.writerow([1, 'ada'])\n"
            "b = open('out/raw.bin', 'wb')\n"
            "b.write(b'\\x00\\x01')\n"
            "t = open('out/t.txt', 'w')\n"
            "t.write('x' * 10)\n"
            "t.flush()\n"
            "t.write('y')\n"
        )
        self.assertEqual(
            got["files"], {"accounts.csv": "id,name\r\n1,ada\r\n", "raw.bin": "\x00\x01", "t.txt": "x" * 10 + "y"}
        )

    def test_a_wrapper_is_closed_before_what_it_wraps(self):
        # gzip.open makes its GzipFile before the file it writes to: closed
        # the other way round, the trailer would be lost.
        got = _exit(
            "import gzip, io\n"
            "z = gzip.open('out/a.gz', 'wt')\n"
            "z.write('hello')\n"
            "raw = open('out/b.gz', 'wb')\n"
            "text = io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode='wb'))\n"
            "text.write('world')\n"
        )
        import gzip

        self.assertEqual(gzip.decompress(got["files"]["a.gz"].encode("latin-1")), b"hello")
        self.assertEqual(gzip.decompress(got["files"]["b.gz"].encode("latin-1")), b"world")

    def test_atexit_handlers_run_last_registered_first(self):
        got = _exit(
            "import atexit\n"
            "atexit.register(print, 'first registered')\n"
            "atexit.register(print, 'second registered')\n"
            "def failing():\n    raise ValueError('in a handler')\n"
            "atexit.register(failing)\n"
            "print('program')\n"
        )
        logs = got["logs"]
        self.assertTrue(logs.startswith("program\n"), logs)
        self.assertIn("ValueError: in a handler", logs)
        self.assertLess(logs.index("ValueError"), logs.index("second registered"))
        self.assertLess(logs.index("second registered"), logs.index("first registered"))

    def test_non_daemon_threads_and_executor_work_finish(self):
        # Each can only finish once the exit began, as at a script's end:
        # the thread waits for the main thread, the executor's job for a
        # hook of threading's exit (run before executors are shut down and
        # waited for). Without the exit work neither would.
        got = _exit(
            "import threading, concurrent.futures\n"
            "def after_main():\n"
            "    threading.main_thread().join()\n"
            "    with open('out/thread.txt', 'w') as f:\n"
            "        f.write('thread')\n"
            "threading.Thread(target=after_main).start()\n"
            "pool = concurrent.futures.ThreadPoolExecutor(1)\n"
            "gate = threading.Event()\n"
            "def job():\n"
            "    gate.wait()\n"
            "    open('out/job.txt', 'w').write('job')\n"
            "pool.submit(job)\n"
            "threading._register_atexit(gate.set)\n"
        )
        self.assertEqual(got["files"], {"job.txt": "job", "thread.txt": "thread"})

    def test_a_multiprocessing_child_is_joined_though_the_module_was_imported_before(self):
        # multiprocessing registered its exit handler before the program
        # ran (a preload), as did a handler that lets the child finish: the
        # program adds no handler, and its unjoined child is still joined,
        # after that handler ran. Without the exit work the child would
        # wait (up to a minute, then exit without writing).
        got = _run(
            "import atexit, tempfile\n"
            "import multiprocessing, multiprocessing.util\n"
            "gate = multiprocessing.get_context('fork').Event()\n"
            "atexit.register(gate.set)\n"
            "multiprocessing.test_gate = gate\n"
            "PROGRAM = (\n"
            "    'import multiprocessing\\n'\n"
            "    'def child(gate):\\n'\n"
            "    '    if gate.wait(60):\\n'\n"
            '    \'        with open("out/child.txt", "w") as f:\\n\'\n'
            "    '            f.write(\"joined\")\\n'\n"
            "    'ctx = multiprocessing.get_context(\"fork\")\\n'\n"
            "    'ctx.Process(target=child, args=(multiprocessing.test_gate,)).start()\\n'\n"
            ")\n" + _EXIT
        )
        self.assertEqual(got["files"], {"child.txt": "joined"})

    def test_what_went_to_the_original_stdout_is_there(self):
        got = _exit("import sys\nsys.__stdout__.write('one\\n')\nprint('two')\n")
        self.assertEqual(got["logs"], "one\ntwo\n")

    def test_after_an_exception_too(self):
        got = _exit("f = open('out/x', 'w')\nf.write('kept')\nraise KeyError('k')\n")
        self.assertEqual(got["files"], {"x": "kept"})
        self.assertEqual(got["error"], "KeyError('k')")

    def test_nothing_to_do_is_seen_as_such(self):
        # The checks that keep a trivial run's exit to a few microseconds.
        got = _run(
            "from pycage import finalize\n"
            "finalize.note_baseline()\n"
            "quiet = [finalize._threads_to_join(), finalize._descriptors_open()]\n"
            "f = open(os.devnull)\n"
            "import threading, atexit\n"
            "gate = threading.Event()\n"
            "t = threading.Thread(target=gate.wait)\n"
            "t.start()\n"
            "busy = [finalize._threads_to_join(), finalize._descriptors_open()]\n"
            "gate.set()\n"
            "t.join()\n"
            "done([quiet, busy])\n"
        )
        # The script's own descriptors (the pipe's read end, the socket, the
        # report) are open throughout: only the thread changes.
        self.assertEqual(got[0][0], False)
        self.assertEqual(got[1], [True, True])


if __name__ == "__main__":
    unittest.main()
