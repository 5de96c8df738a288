"""The pycage zygote: a trusted fork server for run children.

The host starts it once per runtime as::

    python3 -I -B -c "import sys; sys.path.insert(0, '<DIR>'); from pycage.zygote import main; main()"

with fd 3 a ``SOCK_SEQPACKET`` control socket to the host. Importing this
module imports the bootstrap, and with it everything a run needs (asyncio,
the codec, the loop classes), and ``main`` then imports the runtime's
preload (``PYCAGE_PRELOAD``, see ``pycage.preload``), so a child forked
from here starts a run without an interpreter start or an import. The zygote itself never runs
model code, never starts a thread, and holds no descriptor a child keeps.

Control messages are JSON objects, one per packet. Host to zygote:

``spawn`` ``{type, id, cwd, env, rlimits}`` with two descriptors attached
    (the child's fd 3 socket and the write end of its fd 1/fd 2 pipe):
    fork one child; answer ``spawned {type, id, pid}`` with a pidfd of the
    child attached, or ``spawn-failed {type, id, message}``.
    With ``join`` (``{hostIds, remaps, confine}``: sandbox isolation) eight
    more descriptors follow, and the child joins the run's sandbox shell,
    then runs ``confine``, the program's final steps as the host ordered
    them (see ``_confine``).
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
else stays open), enters the run directory, sets ``HOME`` and ``TMPDIR``
there, applies the requested rlimits, and then serves exactly one run with
the bootstrap. ``random`` reseeds itself in every child (it registers an
``os.register_at_fork`` hook when imported, which happens here); the hash
seed and the address-space layout are the zygote's, which is why the host
replaces a zygote after a bounded number of runs or seconds.
"""

import array
import ctypes
import gc
import json
import os
import random  # noqa: F401 - unused by name: imported for its at-fork reseed hook
import resource
import select
import signal
import socket
import sys
import tempfile

from pycage import bootstrap, preload

_CTL_FD = 3
#: Largest control packet accepted from the host.
_MAX_PACKET = 1 << 16
#: Ancillary space for the descriptors a packet may carry (a spawn that
#: joins a sandbox shell: two channels and eight join descriptors).
_MAX_FDS = 16
_PR_SET_PDEATHSIG = 1
#: Exit status of a child whose setup failed before the run (the reason is
#: written to its fd 2, which the host captures as the run's logs).
_EXIT_SETUP_FAILED = 127

#: Limits by wire name (a confinement step's ``resource``, a spawn's ``rlimits``).
_RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
    "sigpending": resource.RLIMIT_SIGPENDING,
    "msgqueue": resource.RLIMIT_MSGQUEUE,
    "memlock": resource.RLIMIT_MEMLOCK,
}

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option, arg):
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _diag(message):
    try:
        os.write(2, ("pycage zygote: " + message + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass


class _Zygote:
    def __init__(self, ctl):
        self.ctl = ctl
        self.pid = os.getpid()
        # id -> [pid, pidfd, reap requested]
        self.children = {}
        self.quitting = False
        self.poll = select.poll()
        self.poll.register(ctl.fileno(), select.POLLIN)

    def send(self, message, fds=()):
        data = json.dumps(message, separators=(",", ":")).encode("utf-8")
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
            message = json.loads(data)
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
        want = 2 + (_JOIN_FDS if message.get("join") is not None else 0)
        if len(fds) != want:
            self.send({"type": "spawn-failed", "id": ident, "message": f"spawn needs {want} descriptors"})
            return
        threads = preload.os_threads()  # native threads too (a BLAS pool)
        if threads != 1:
            # Forking a process with threads is what a zygote must never do.
            self.send({"type": "spawn-failed", "id": ident, "message": f"the zygote has {threads} threads"})
            return
        try:
            pid = os.fork()
        except OSError as e:
            self.send({"type": "spawn-failed", "id": ident, "message": f"fork failed: {e}"})
            return
        if pid == 0:
            _child(message, fds, self.pid, self.ctl.fileno())
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


def _fd_array(fds):
    return array.array("i", fds)


def _fd_array_from(payload):
    out = array.array("i")
    out.frombytes(payload)
    return list(out)


def _child(message, fds, zygote_pid, ctl_fd):
    """The forked child: set up (joining a sandbox shell when asked), then
    serve one run. Never returns."""
    sock_fd, out_fd = fds[0], fds[1]
    join = message.get("join")
    try:
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:
            os._exit(_EXIT_SETUP_FAILED)  # the zygote died before the signal was armed
        os.close(ctl_fd)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(sock_fd, bootstrap.PROTOCOL_FD)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        if join is not None:
            _join_shell(join, fds[2:], zygote_pid)  # returns in the program's process
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
        bootstrap.warm_up()
    except BaseException as e:  # a cold run is slower, not wrong
        _diag(f"warm-up failed: {type(e).__name__}: {e}")
    bootstrap.main()
    os._exit(bootstrap._EXIT_INTERNAL)


# --- joining a sandbox shell ---------------------------------------------
#
# Sandbox isolation through the zygote. The host builds each run's sandbox
# (pycage-sandbox's `Prepared::into_shell`): its user, mount, PID, network,
# IPC and UTS namespaces, its root (pivoted), its tmpfs, its init process
# as PID 1 and the finished Landlock ruleset, exactly as for an exec'd
# run. The init process hands those over as descriptors instead of forking
# the program, and the host passes them here. This child joins them and
# forks the program into the run's PID namespace; the program then applies
# its own steps (rlimits, a nested user namespace as uid 1000, no
# capabilities, no_new_privs, Landlock, seccomp: `Prepared::program_plan`)
# before it reads anything of the run. Every value comes from the host.

#: Descriptors of a join, after the two channels, in this order
#: (pycage_sandbox::Join's field order).
_JOIN_FDS = 8
_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: landlock_restrict_self: the same number on every architecture (the
#: generic syscall table), x86_64 and aarch64 included.
_SYS_LANDLOCK_RESTRICT_SELF = 446
#: Exit status of a join whose program process was lost (as the sandbox's
#: supervisor uses).
_EXIT_LOST = 125


def _prctl5(option, a2=0, a3=0, a4=0, a5=0):
    """prctl with every argument as an unsigned long, as the kernel reads them."""
    ul = ctypes.c_ulong
    return _libc.prctl(ctypes.c_int(option), ul(a2), ul(a3), ul(a4), ul(a5))


def _check(ret, what):
    if ret != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _setns(fd, kind, what):
    _check(_libc.setns(fd, kind), f"setns({what})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _join_shell(join, fds, zygote_pid):
    """Join the run's namespaces and root, fork the program into its PID
    namespace, and return in the program once it is confined. The process
    that joined stays outside that namespace as the program's parent: it
    exits the way the program does (so the zygote reports the program's
    status and CPU time), and its death signal takes the program with it."""
    user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root, ruleset = fds
    host_ids = join.get("hostIds")
    if host_ids is not None:
        # A root host: the run's user namespace maps only the run's leased
        # ids, which own it; become them first.
        uid, gid = host_ids
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    _setns(user_ns, _CLONE_NEWUSER, "user")
    _setns(mount_ns, _CLONE_NEWNS, "mnt")
    os.fchdir(root)
    os.chroot(".")
    _setns(uts_ns, _CLONE_NEWUTS, "uts")
    _setns(ipc_ns, _CLONE_NEWIPC, "ipc")
    _setns(net_ns, _CLONE_NEWNET, "net")
    _setns(pid_ns, _CLONE_NEWPID, "pid")
    for fd in (user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root):
        os.close(fd)
    # The credential changes cleared the death signal: arm it again.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != zygote_pid:
        _diag("the zygote died while a child joined its sandbox")
        os._exit(_EXIT_SETUP_FAILED)
    # The program's parent stays outside the PID namespace, where getppid()
    # reads 0: it is watched through a pidfd instead.
    joiner = os.pidfd_open(os.getpid())
    program = os.fork()
    if program:
        _mirror(program)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if select.select([joiner], [], [], 0)[0]:
        _diag("the joining process died before the program was confined")
        os._exit(_EXIT_SETUP_FAILED)
    os.close(joiner)
    _confine(join, ruleset)


def _mirror(program):
    """The joiner's life after the fork: hold nothing, wait for the program,
    and exit the way it did. Never returns."""
    os.closerange(0, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    while True:
        try:
            _, status = os.waitpid(program, 0)
            break
        except InterruptedError:
            continue
        except OSError:
            os._exit(_EXIT_LOST)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else _EXIT_LOST)


def _write_proc(name, text):
    fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _confine(join, ruleset):
    """The program's own final steps, in the program's process: the host's
    ordered list (pycage-sandbox's `confine` module builds it; the exec path
    runs the same list in Rust), each step through one function of
    _CONFINE_OPS. A step this table does not know fails the setup: nothing
    is ever run less confined than the host asked."""
    state = {"ruleset": ruleset}
    for step in join["confine"]:
        op = _CONFINE_OPS.get(step.get("op")) if type(step) is dict else None
        if op is None:
            raise ValueError(f"unknown confinement step {step!r}")
        op(step, state)
    if state["ruleset"] is not None:
        raise ValueError("the confinement list has no landlock step")
    _remap_paths(join.get("remaps", ()))


def _op_death_signal(step, state):
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _op_limit(step, state):
    which = _RLIMITS[step["resource"]]
    value = step["value"]
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)  # without root, a hard limit cannot rise
    resource.setrlimit(which, (value, value))


def _op_unshare_cgroup(step, state):
    _check(_libc.unshare(_CLONE_NEWCGROUP), "unshare(cgroup)")


def _op_unshare_user(step, state):
    _check(_libc.unshare(_CLONE_NEWUSER), "unshare(user)")


def _op_dumpable(step, state):
    # The credential changes of the join made this process non-dumpable,
    # which makes its /proc/self files root's: it writes its own maps.
    _check(_prctl5(_PR_SET_DUMPABLE, 1), "prctl(PR_SET_DUMPABLE)")


def _op_id_maps(step, state):
    _write_proc("setgroups", "deny\n")
    _write_proc("uid_map", step["uidMap"])
    _write_proc("gid_map", step["gidMap"])


def _op_close_fds(step, state):
    # Only stdio, fd 3 and the ruleset (closed by its step) stay open.
    ruleset = state["ruleset"]
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if ruleset is None:
        os.closerange(bootstrap.PROTOCOL_FD + 1, nofile)
        return
    os.closerange(bootstrap.PROTOCOL_FD + 1, ruleset)
    os.closerange(ruleset + 1, max(nofile, ruleset + 1))


def _op_drop_caps(step, state):
    for cap in range(64):
        # Numbers past the kernel's last capability fail with EINVAL (22).
        if _prctl5(_PR_CAPBSET_DROP, cap) != 0 and ctypes.get_errno() != 22:
            _check(-1, "prctl(PR_CAPBSET_DROP)")
    _check(_prctl5(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _op_no_new_privs(step, state):
    _check(_prctl5(_PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")


def _op_landlock(step, state):
    # The ruleset was built with every right a hard requirement: the host
    # refused to hand over one this kernel would not fully enforce.
    ruleset = state["ruleset"]
    if ruleset is None:
        raise ValueError("a second landlock step")
    _check(
        _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)),
        "landlock_restrict_self",
    )
    os.close(ruleset)
    state["ruleset"] = None


def _op_seccomp(step, state):
    raw = bytes.fromhex(step["filter"])
    if not raw or len(raw) % 8:
        raise ValueError("a seccomp filter is whole 8-byte instructions")
    buf = ctypes.create_string_buffer(raw, len(raw))
    prog = _SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_prctl5(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog)), "seccomp")


#: One function per confinement step (pycage_protocol::zygote::ConfineStep).
_CONFINE_OPS = {
    "death-signal": _op_death_signal,
    "limit": _op_limit,
    "unshare-cgroup": _op_unshare_cgroup,
    "unshare-user": _op_unshare_user,
    "dumpable": _op_dumpable,
    "id-maps": _op_id_maps,
    "close-fds": _op_close_fds,
    "drop-caps": _op_drop_caps,
    "no-new-privs": _op_no_new_privs,
    "landlock": _op_landlock,
    "seccomp": _op_seccomp,
}


def _remap_paths(remaps):
    """The zygote runs on the host: its interpreter's paths are the host's.
    Inside the sandbox they may be elsewhere (an interpreter under /root is
    shown at /opt/python): rewrite what later imports and subprocesses use
    (with the bootstrap's mapping, which its tracebacks use too)."""
    bootstrap.set_path_remaps(remaps)

    def inside(path):
        return bootstrap._inside_path(path) if type(path) is str else path

    sys.path[:] = [inside(p) for p in sys.path]
    for name in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix", "executable", "_base_executable"):
        if hasattr(sys, name):
            setattr(sys, name, inside(getattr(sys, name)))
    # Packages imported in the zygote find their submodules through their
    # __path__ (codecs' `encodings.idna`, say): it moves too.
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if type(search) is list:
            search[:] = [inside(p) for p in search]
        spec = getattr(module, "__spec__", None)
        locations = getattr(spec, "submodule_search_locations", None)
        if type(locations) is list and locations is not search:
            locations[:] = [inside(p) for p in locations]
    sys.path_importer_cache.clear()


def main():
    """Serve the host on fd 3 until it quits or goes away (never returns)."""
    try:
        ctl = socket.socket(fileno=_CTL_FD)
        os.set_inheritable(_CTL_FD, False)
        # The runtime's preload (PYCAGE_PRELOAD), before the heap is frozen;
        # the host checked the list at construction, so a failure here is
        # a change since (a package removed): say which, and stop.
        failed = preload.from_environment()
        if failed is not None:
            _diag(f"could not preload {failed[0]}: {failed[1]}")
            os._exit(3)
        # Everything imported, nothing left to collect: freeze the heap so a
        # child's collections do not write to (and so copy) shared pages.
        gc.collect()
        gc.freeze()
        zygote = _Zygote(ctl)
        try:
            zygote.serve()
        finally:
            zygote.bury()
    except BaseException as e:
        _diag(f"internal error: {type(e).__name__}: {e}")
        os._exit(3)
    os._exit(0)
