"""The pycage zygote: a trusted fork server for run children.

The host starts it once per runtime as::

    python3 -I -B -c "import sys; sys.path.insert(0, '<DIR>'); from pycage.zygote import main; main()"

with fd 3 a ``SOCK_SEQPACKET`` control socket to the host. Importing this
module imports the bootstrap, and with it everything a run needs (asyncio,
the codec, the loop classes), and ``main`` then imports the runtime's
preload (``PYCAGE_PRELOAD``, see ``pycage.preload``) and runs a child's
warm-up itself (``_warm_up``), so a child forked from here starts a run
without an interpreter start or an import, on bytecode already
specialized. The zygote itself never runs model code, never starts a
thread, and holds no descriptor a child keeps.

Control messages are JSON objects, one per packet. Host to zygote:

``spawn`` ``{type, id, cwd, env, rlimits[, join][, cold]}`` with two descriptors attached
    (the child's fd 3 socket and the write end of its fd 1/fd 2 pipe):
    fork one child; answer ``spawned {type, id, pid}`` with a pidfd of the
    child attached, or ``spawn-failed {type, id, message}``.
    With ``join`` (``{hostIds, plan, env, remaps, confine}``: sandbox
    isolation) eight more descriptors follow, and the child joins the
    run's sandbox shell, then runs ``confine``, the program's final steps
    as the host ordered them (see ``pycage.confine``). ``env``, ``remaps``
    and ``confine`` are plan ``plan``'s: the first spawn of a plan carries
    them, the zygote keeps the last plan it got (and sets its ``env`` in
    its own environment, which the children inherit), and a later spawn
    sends ``{hostIds, plan}`` only (``_JoinPlans``); a spawn naming another
    plan is refused. At its first such spawn the zygote moves its own
    paths (``sys.path``, the modules' ``__path__``) to where the sandbox
    shows them (``remaps``), once, so no child has to.
    With ``cold: true`` the child skips its warm-up (the host asks when a
    run is already waiting for the child, or its runs keep every core
    busy: the warm-up would then only take CPU from runs).
``reap`` ``{type, id}``: once the child has exited, reap it and answer
    ``reaped {type, id, status, cpuNs}`` (a ``wait4`` status and the CPU time
    of the child and its reaped descendants). The zygote never reaps a child
    on its own: until the host asks, the zombie keeps the child's pid, and so
    its process group id, from being reused while the host may signal it.
``quit`` ``{type}``: take no more spawns; exit once every child is reaped.

Zygote to host: ``ready {type, pid, threads}`` once everything is imported.
The host validates every answer key-exactly (``pycage_protocol::zygote``,
which owns this table) and treats a zygote that answers malformed, late or
not at all (stopped) as dead.
EOF on the control socket means the host is gone: the zygote exits at once
(its children die with it through their parent-death signal).

A forked child, before it reads anything a run sends: starts a session (its
own process group, so the host can signal everything it starts), arms
``PR_SET_PDEATHSIG`` against the zygote, installs its descriptors (fd 0
``/dev/null``, fd 1 and fd 2 the run's pipe, fd 3 the run's socket; nothing
else stays open), enters the run's working directory, sets the environment
the host gave (``HOME`` and ``TMPDIR`` outside the working directory; a
sandboxed child's comes with its join plan, set in the zygote itself),
applies the requested rlimits, warms up unless it is cold
(``bootstrap.warm_up``), and then serves exactly one run with the
bootstrap. The host starts the zygote as a background process for the
scheduler (``SCHED_BATCH``: waking it for a refill never preempts a run or
its caller); a child inherits that for its setup and warm-up, and becomes
an ordinary process (``SCHED_OTHER``) just before it serves its run.
``random`` reseeds itself in every child (it registers an
``os.register_at_fork`` hook when imported, which happens here); the hash
seed and the address-space layout are the zygote's, which is why the host
replaces a zygote after a bounded number of runs or seconds. The fork
itself is ``pycage._forks.fork``: where that is known to be safe, the C
library's ``fork`` and the at-fork hooks the zygote's imports registered,
without the after-fork work a process with one thread does not need.
"""

# First: it records the at-fork hooks that the imports after it register.
from pycage import _forks

# isort: split
import array
import gc
import json
import json.decoder
import json.scanner
import os
import random  # noqa: F401 - unused by name: imported for its at-fork reseed hook
import resource
import select
import signal
import socket
import sys
import tempfile

from pycage import _private, bootstrap, preload, sitepaths
from pycage.confine import (
    _EXIT_SETUP_FAILED,
    _JOIN_FDS,
    _JOIN_PID_NS,
    _PR_SET_PDEATHSIG,
    _RLIMITS,
    _diag,
    _join_shell,
    _PidNamespaces,
    _prctl,
    choose_native,
    compile_native,
    prepare,
    remap_once,
)

_CTL_FD = 3
#: Largest control packet accepted from the host.
_MAX_PACKET = 1 << 16
#: Ancillary space for the descriptors a packet may carry (a spawn that
#: joins a sandbox shell: two channels and eight join descriptors).
_MAX_FDS = 16


class _JoinPlans:
    """The join plan a sandboxed spawn names (``pycage_protocol::zygote``,
    ``JoinRequest::plan``): the first spawn of a plan carries its
    environment, path remaps and confinement list, and the zygote keeps
    them; a later spawn sends only the plan's number and its own host ids.
    Decoding, checking and looking up a 3 KB plan in every spawn cost about
    0.07 ms of the zygote's CPU per child. The plan's environment is set
    here, in the zygote, so every child inherits it: set in each child,
    its four variables took about 40 copy-on-write faults there."""

    def __init__(self):
        #: (number, remaps, confinement list) of the plan kept, or None.
        self.kept = None
        #: What a plan's environment replaced: name -> the zygote's own
        #: value, or None where it had none.
        self.started = {}

    def _set_env(self, env):
        """The zygote's environment as it started, with ``env`` on top (an
        earlier plan's variables are put back first)."""
        for name, value in self.started.items():
            if name not in env:
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        for name in env:
            if name not in self.started:
                self.started[name] = os.environ.get(name)
        os.environ.update(env)

    def resolve(self, join):
        """The spawn's whole join (``hostIds``, ``remaps``, ``confine``),
        and None; or None and why the zygote cannot fork it."""
        number = join.get("plan")
        if "confine" in join:
            remaps = join.get("remaps", ())
            try:
                moved = remap_once(remaps)
            except Exception as e:  # the host's message: say what was wrong with it
                return None, f"malformed remaps: {type(e).__name__}: {e}"
            if not moved:
                return None, "the sandbox's path remaps changed"
            env = join.get("env", {})
            if type(env) is not dict or not all(type(k) is str and type(v) is str for k, v in env.items()):
                return None, "malformed env: not an object of strings"
            prepare(join)
            self.kept = None
            try:
                self._set_env(env)
            except (ValueError, OSError) as e:  # a name with "=", a NUL
                return None, f"malformed env: {e}"
            self.kept = (number, remaps, join["confine"])
            return join, None
        kept = self.kept
        if kept is None or number is None or kept[0] != number:
            return None, f"the zygote holds no join plan {number!r}"
        return {"hostIds": join.get("hostIds"), "remaps": kept[1], "confine": kept[2]}, None


class _Zygote:
    def __init__(self, ctl):
        self.ctl = ctl
        self.pid = os.getpid()
        # id -> [pid, pidfd, reap requested]
        self.children = {}
        self.quitting = False
        # Forks a sandboxed child straight into its run's PID namespace
        # (a root host, or a zygote exec'd in the runtime's user namespace).
        self.pid_namespaces = _PidNamespaces()
        self.plans = _JoinPlans()
        self.poll = select.poll()
        self.poll.register(ctl.fileno(), select.POLLIN)

    def send(self, message, fds=()):
        data = _encode(message)
        if fds:
            self.ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fd_array(fds)))])
        else:
            self.ctl.send(data)

    def serve(self):
        self.send({"type": "ready", "pid": self.pid, "threads": preload.os_threads()})
        while True:
            for fd, _events in self.poll.poll():
                if fd == self.ctl.fileno():
                    if not self.receive():
                        return
                else:
                    self.child_exited(fd)
            if self.quitting and not self.children:
                return

    def receive(self):
        """One control packet; False when the host is gone."""
        try:
            data, ancdata, flags, _ = self.ctl.recvmsg(_MAX_PACKET, socket.CMSG_SPACE(_MAX_FDS * 4))
        except InterruptedError:
            return True
        fds = []
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(_fd_array_from(payload[:usable]))
        try:
            if not data:
                return False
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                _diag("dropped a truncated control packet")
                return True
            message = _decode(data)
            kind = message.get("type")
            if kind == "spawn":
                taken, fds = fds, []
                self.spawn(message, taken)
            elif kind == "reap":
                self.reap(message.get("id"))
            elif kind == "quit":
                self.quitting = True
            else:
                _diag(f"unknown control message {kind!r}")
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def spawn(self, message, fds):
        try:
            self._spawn(message, fds)
        finally:
            # The child's ends are the child's alone (it never returns from
            # _spawn): holding them here would keep its pipe from EOF.
            for fd in fds:
                os.close(fd)

    def _spawn(self, message, fds):
        ident = message.get("id")
        if self.quitting:
            self.send({"type": "spawn-failed", "id": ident, "message": "the zygote is retiring"})
            return
        join = message.get("join")
        if join is not None:
            join, why = self.plans.resolve(join)
            if join is None:
                self.send({"type": "spawn-failed", "id": ident, "message": why})
                return
            message["join"] = join  # the child's, whole
        want = 2 + (_JOIN_FDS if join is not None else 0)
        if len(fds) != want:
            self.send({"type": "spawn-failed", "id": ident, "message": f"spawn needs {want} descriptors"})
            return
        if join is not None:
            native = compile_native(join, fds[2:], self.pid_namespaces.own_pidfd)
        else:
            native = None
        threads = preload.os_threads()  # native threads too (a BLAS pool)
        if threads != 1:
            # Forking a process with threads is what a zygote must never do.
            self.send({"type": "spawn-failed", "id": ident, "message": f"the zygote has {threads} threads"})
            return
        # A sandboxed child is forked into its run's PID namespace: it is
        # the program (``_PidNamespaces``, ``_join_shell``).
        if join is not None:
            try:
                self.pid_namespaces.enter(fds[2 + _JOIN_PID_NS])
            except OSError as e:
                why = f"cannot enter the run's PID namespace: {e}"
                self.send({"type": "spawn-failed", "id": ident, "message": why})
                return
        elif self.pid_namespaces.stale:
            # The child would be born in the namespace of an earlier run.
            self.quitting = True
            why = "the zygote cannot place this child in its own PID namespace: retiring"
            self.send({"type": "spawn-failed", "id": ident, "message": why})
            return
        try:
            pid = _forks.fork()
        except OSError as e:
            pid, failed = None, e
        if pid == 0:
            born_watch = self.pid_namespaces.own_pidfd if join is not None else None
            _child(message, fds, self.pid, self.ctl.fileno(), born_watch, native)
        if join is not None:
            self.pid_namespaces.leave()
        if pid is None:
            self.send({"type": "spawn-failed", "id": ident, "message": f"fork failed: {failed}"})
            return
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:
            # Cannot watch it: kill and reap it now, and say so.
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self.send({"type": "spawn-failed", "id": ident, "message": f"pidfd_open failed: {e}"})
            return
        self.children[ident] = [pid, pidfd, False]
        self.send({"type": "spawned", "id": ident, "pid": pid}, (pidfd,))

    def reap(self, ident):
        child = self.children.get(ident)
        if child is None:
            return
        child[2] = True
        # Poll its pidfd: readable once it has exited, then it is reaped.
        self.poll.register(child[1], select.POLLIN)

    def bury(self):
        """Kill and reap every child still held (the host went away, or
        quit before asking). A child must never outlive its zygote
        unreaped: it would be re-parented, and die of its death signal, as
        a zombie of whatever reaps orphans (nothing, under a subreaper that
        does not), and a sandbox's init waits for every zombie of its PID
        namespace before it can exit."""
        for pid, fd, _ in self.children.values():
            try:
                # Its own session since the fork, and unreaped: the group is its.
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            os.close(fd)
        self.children.clear()

    def child_exited(self, pidfd):
        for ident, (pid, fd, requested) in list(self.children.items()):
            if fd != pidfd:
                continue
            self.poll.unregister(fd)
            if not requested:
                return
            # Close first: once the child is reaped it leaves the zygote's
            # /proc children list, and by then nothing of it may stay open.
            os.close(fd)
            _, status, usage = os.wait4(pid, 0)
            del self.children[ident]
            cpu_ns = int((usage.ru_utime + usage.ru_stime) * 1e9)
            self.send({"type": "reaped", "id": ident, "status": status, "cpuNs": cpu_ns})
            return


# Every page the zygote writes between two forks is copied, since the
# children forked before share it. ``json.dumps`` with separators builds an
# encoder per call, and ``json.loads`` detects the encoding and matches a
# regex in Python. The messages of every run (``spawned``, ``reaped``;
# ``spawn`` and ``reap``) take the short ways below, which cut the zygote's
# page faults per run from 225 to 185 (180 to 134 with process isolation);
# anything else takes the module's.
_scan_once = json.scanner.make_scanner(json.decoder.JSONDecoder())


def _encode(message):
    """A control message as its packet (compact JSON, as ``json.dumps``)."""
    kind, ident = message.get("type"), message.get("id")
    if type(ident) is int and len(message) == 3 and kind == "spawned" and type(message.get("pid")) is int:
        return b'{"type":"spawned","id":%d,"pid":%d}' % (ident, message["pid"])
    if type(ident) is int and len(message) == 4 and kind == "reaped":
        status, cpu_ns = message.get("status"), message.get("cpuNs")
        if type(status) is int and type(cpu_ns) is int:
            return b'{"type":"reaped","id":%d,"status":%d,"cpuNs":%d}' % (ident, status, cpu_ns)
    return json.dumps(message, separators=(",", ":")).encode("utf-8")


def _decode(data):
    """A control packet's JSON value, as ``json.loads`` reads it."""
    text = data.decode("utf-8")
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        return json.loads(text)  # whitespace around the value, or an error to raise
    return value


def _fd_array(fds):
    return array.array("i", fds)


def _fd_array_from(payload):
    out = array.array("i")
    out.frombytes(payload)
    return list(out)


_ORDINARY = os.sched_param(0)


def _child(message, fds, zygote_pid, ctl_fd, born_watch, native):
    """The forked child: set up (joining a sandbox shell when asked), then
    serve one run. Never returns. ``born_watch`` is a pidfd of the zygote
    when the child was born in its run's PID namespace, where its parent's
    pid reads 0 (so its death is seen through that descriptor); ``native``
    the join compiled for the native library (``compile_native``), or None."""
    sock_fd, out_fd = fds[0], fds[1]
    join = message.get("join")
    try:
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if _zygote_gone(zygote_pid, born_watch):
            os._exit(_EXIT_SETUP_FAILED)  # the zygote died before the signal was armed
        os.close(ctl_fd)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(sock_fd, bootstrap.PROTOCOL_FD)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        if join is not None:
            _join_shell(join, fds[2:], lambda: _zygote_gone(zygote_pid, born_watch), native)
        else:
            os.closerange(bootstrap.PROTOCOL_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        cwd = message["cwd"]
        os.chdir(cwd)
        for key, value in message.get("env", {}).items():
            os.environ[key] = value
        tempfile.tempdir = None  # recomputed from TMPDIR on first use
        for name, (soft, hard) in message.get("rlimits", {}).items():
            resource.setrlimit(_RLIMITS[name], (soft, hard))
        preload.after_fork()  # children must not share a preloaded generator's state
    except BaseException as e:  # report any setup failure, then exit
        _diag(f"child setup failed: {type(e).__name__}: {e}")
        os._exit(_EXIT_SETUP_FAILED)
    try:
        if not message.get("cold", False):
            bootstrap.warm_up()
    except BaseException as e:  # a cold run is slower, not wrong
        _diag(f"warm-up failed: {type(e).__name__}: {e}")
    # The zygote is a background process for the scheduler (SCHED_BATCH),
    # and so were this child's setup and warm-up; its run is an ordinary one.
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, _ORDINARY)
    except OSError:
        pass
    bootstrap.main()
    os._exit(bootstrap._EXIT_INTERNAL)


def _zygote_gone(zygote_pid, born_watch):
    """Whether the zygote that forked this child has died (it would then
    not get the death signal armed after the fork)."""
    if born_watch is None:
        return os.getppid() != zygote_pid
    return bool(select.select([born_watch], [], [], 0)[0])


#: How often the zygote runs the child's warm-up itself. CPython specializes
#: a code object's bytecode after a few executions (in place, in the code
#: object), so one pass is not enough to leave the path in its final form.
_WARM_UPS = 10


def _warm_up():
    """Run a pooled child's warm-up (``bootstrap.warm_up``) here first.

    Its first pass writes to memory a run's path uses: specialized bytecode,
    the type attribute cache, interned names, the frame stack. Done in every
    child, each write copies a page the child shares with the zygote (about
    130 of a child's 1,020 page faults with process isolation). Done
    here, before the heap is frozen, it happens once and is shared; the
    child's own warm-up then mostly reads. The warm-up leaves no state, no
    thread and no descriptor behind (checked: a descriptor left here would
    reach every child)."""
    before = sorted(os.listdir("/proc/self/fd"))
    try:
        for _ in range(_WARM_UPS):
            bootstrap.warm_up()
    except BaseException as e:  # a colder child is slower, not wrong
        _diag(f"zygote warm-up failed: {type(e).__name__}: {e}")
    after = sorted(os.listdir("/proc/self/fd"))
    if after != before:
        _diag(f"the warm-up left descriptors open ({before} -> {after})")
        os._exit(3)


def _disguise(argv_json):
    """Shows `argv` (PYCAGE_ARGV: the command line as the sandbox shows its
    paths) as this process's command line, in `/proc/self/cmdline` and
    `sys.orig_argv`, before the first fork: the children are sandboxed, and
    the host's paths (an interpreter under a home directory, the bootstrap
    in the host's cache) are not theirs to see. The argument area's size is
    fixed: a longer line is cut, a shorter one padded with NULs."""
    if not argv_json:
        return
    argv = json.loads(argv_json)
    if type(argv) is not list or not all(type(a) is str for a in argv):
        raise ValueError("PYCAGE_ARGV is not a list of strings")
    sys.orig_argv = list(argv)
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    # After the name: field 3 (the state) first; arg_start and arg_end are
    # fields 48 and 49.
    fields = stat[stat.rindex(b")") + 2 :].split()
    start, end = int(fields[45]), int(fields[46])
    room = end - start
    if room <= 0:
        return
    data = b"\0".join(a.encode() for a in argv)[: room - 1]
    data += b"\0" * (room - len(data))
    fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    try:
        os.pwrite(fd, data, start)
    finally:
        os.close(fd)


def main():
    """Serve the host on fd 3 until it quits or goes away (never returns)."""
    try:
        ctl = socket.socket(fileno=_CTL_FD)
        os.set_inheritable(_CTL_FD, False)
        _disguise(os.environ.pop("PYCAGE_ARGV", None))
        # The runtime's choice for the join; never a run's variable.
        choose_native(os.environ.pop("PYCAGE_NATIVE_JOIN", None))
        # Started with -S: what `site` adds, as data (no venv code runs here).
        sitepaths.apply()
        # The runtime's preload (PYCAGE_PRELOAD), before the heap is frozen;
        # the host checked the list at construction, so a failure here is
        # a change since (a package removed): say which, and stop.
        failed = preload.from_environment()
        if failed is not None:
            _diag(f"could not preload {failed[0]}: {failed[1]}")
            os._exit(3)
        _private.track_builtins()
        _warm_up()
        # Everything imported, nothing left to collect: freeze the heap so a
        # child's collections do not write to (and so copy) shared pages.
        gc.collect()
        gc.freeze()
        _forks.stop_recording()
        zygote = _Zygote(ctl)
        try:
            zygote.serve()
        finally:
            zygote.bury()
    except BaseException as e:
        _diag(f"internal error: {type(e).__name__}: {e}")
        os._exit(3)
    os._exit(0)
