"""Joining a sandbox shell and the confinement program, in a zygote's child.

Sandbox isolation through the zygote: the zygote forks the child straight
into the run's PID namespace (``_PidNamespaces``), so the child is the
program; it joins the run's other namespaces and root the host built
(``_join_shell``), and runs the host's ordered list of final steps
(``_confine``: one function per step in ``_CONFINE_OPS``; a step it does not
know fails the setup). The policy and the order live in Rust
(pycage-sandbox's ``confine`` module; the exec path runs the same list
there); this module only executes them. Also the few helpers the zygote
shares with it (``_prctl``, ``_diag``, the rlimit names).

Where the runtime wrote pycage-join's shared library beside this file
(``_join.so``), the zygote compiles the join and the list into that
library's flat program before it forks (``compile_native``), and the child
runs it in one call (``_join_shell``): the same steps in the same order,
without the interpreter's cost per step (about 0.3 ms of CPU a child; the
library closes inherited descriptors with one ``close_range`` up to the
highest number, and fails a map write that is not whole). Anything it
cannot compile, and a library that is missing or does not load, leaves
the child to the Python steps below, which also report a malformed list.
``PYCAGE_NATIVE_JOIN=0`` in the host's environment keeps the zygote's
children to them (``choose_native``).
"""

import ctypes
import marshal
import os
import resource
import signal
import sys

from pycage import bootstrap

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
# Looked up here, in the zygote, so its children inherit them: a ``CDLL``
# resolves a function at its first use (the dynamic linker's search, a new
# function object stored on the library), which each child did again.
for _name in ("setns", "unshare", "capset", "syscall", "prctl"):
    getattr(_libc, _name)
del _name

#: prctl for small arguments (options, flags, capability and signal
#: numbers): without declared argument types ctypes passes a Python int as
#: a C int, which libffi widens to the whole 64-bit register (x86_64 and
#: aarch64 alike), so the kernel reads the unsigned long it expects. About
#: 0.65 us a call here against 1.7 us through ``_prctl_ulong`` (whose
#: declared types run a converter per argument): the bounding-set drops
#: make 41 calls in every sandboxed child. Never for a value of 2**31 or
#: more (an address): ctypes would pass its low 32 bits, sign-extended.
_prctl_small = _libc.prctl

#: prctl with its argument types declared, for an argument that may not fit
#: a C int (the seccomp program's address). Built here, in the zygote
#: before it forks: a child that built ctypes arguments per call
#: (``c_ulong(...)``) spent about 5 us a call on it, most of it first-touch
#: copy-on-write faults.
_prctl_ulong = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, use_errno=True
)(("prctl", _libc))


def _prctl(option, arg):
    if _prctl_small(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _diag(message):
    try:
        os.write(2, ("pycage zygote: " + message + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass


# --- joining a sandbox shell ---------------------------------------------
#
# Sandbox isolation through the zygote. The host builds each run's sandbox
# (pycage-sandbox's `Prepared::into_shell`): its user, mount, PID, network,
# IPC and UTS namespaces, its root (pivoted), its tmpfs, its init process
# as PID 1 and the finished Landlock ruleset, exactly as for an exec'd
# run. The init process hands those over as descriptors instead of forking
# the program, and the host passes them here. The zygote forks this child
# into the run's PID namespace; it joins the others and, as the program,
# applies its own steps (rlimits, a nested user namespace as uid 1000, no
# capabilities, no_new_privs, Landlock, seccomp: `Prepared::program_plan`)
# before it reads anything of the run. Every value comes from the host.

#: Descriptors of a join, after the two channels, in this order
#: (pycage_sandbox::Join's field order).
_JOIN_FDS = 8
#: Index of the run's PID namespace among them.
_JOIN_PID_NS = 2
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


def _prctl5(option, a2=0, a3=0, a4=0, a5=0):
    """prctl with small arguments (``_prctl_small``), all five passed."""
    return _prctl_small(option, a2, a3, a4, a5)


def _last_capability():
    """The kernel's highest capability number, or None when it cannot be
    read."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as f:
            last = int(f.read())
    except (OSError, ValueError):
        return None
    return last if 0 <= last <= 63 else None


#: Read in the zygote: a sandboxed child cannot see the host's /proc/sys.
#: Each drop below commits new credentials (about 6 us in a child), and
#: this kernel's numbers are fewer than 64 (41 on Linux 6.x).
_KERNEL_LAST_CAP = _last_capability()
#: Unknown, the bounding-set loop tries every number a 64-bit set holds and
#: accepts EINVAL for those past the kernel's last (a guess too high costs
#: only calls). Known, an EINVAL fails the step: the kernel refuses no
#: number up to its last, so one would mean a drop that did nothing.
_LAST_CAP = 63 if _KERNEL_LAST_CAP is None else _KERNEL_LAST_CAP


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd, kind, what):
    _check(_libc.setns(fd, kind), f"setns({what})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


#: capset's arguments for "no capabilities", built before the fork (making a
#: ctypes array type and instances in the child took about 0.15 ms).
_NO_CAPS_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
_NO_CAPS_DATA = (_CapData * 2)()


#: The kernel's limit on a classic BPF program's instructions.
_BPF_MAXINSNS = 4096

#: Built seccomp programs by filter text: (buffer, sock_fprog).
_SECCOMP_PROGRAMS = {}


def _seccomp_program(hex_filter):
    """The ``sock_fprog`` for a confinement step's filter (hex of whole
    8-byte instructions), kept by its text. The zygote builds it before it
    forks (``prepare``), so a child finds it built: decoding and copying
    2.6 KB into a ctypes buffer took about 0.2 ms in a fresh child. At most
    four filters are kept (a runtime's policy gives one)."""
    program = _SECCOMP_PROGRAMS.get(hex_filter)
    if program is None:
        raw = bytes.fromhex(hex_filter)
        if not raw or len(raw) % 8:
            raise ValueError("a seccomp filter is whole 8-byte instructions")
        if len(raw) // 8 > _BPF_MAXINSNS:
            # sock_fprog's length is 16 bits: more would be cut, silently.
            raise ValueError(f"a seccomp filter has at most {_BPF_MAXINSNS} instructions")
        buf = ctypes.create_string_buffer(raw, len(raw))
        program = (buf, _SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p)))
        if len(_SECCOMP_PROGRAMS) >= 4:
            _SECCOMP_PROGRAMS.clear()
        _SECCOMP_PROGRAMS[hex_filter] = program
    return program[1]


def prepare(join):
    """In the zygote, before it forks a child to join a shell: build what
    the child's confinement steps need that does not depend on the child
    (the seccomp program), so every child inherits it built. A step this
    cannot prepare is left to fail in the child, with the child's error."""
    try:
        for step in join.get("confine", ()):
            if type(step) is dict and step.get("op") == "seccomp":
                _seccomp_program(step["filter"])
    except (TypeError, KeyError, ValueError):
        pass  # the child fails the same step and reports it


class _PidNamespaces:
    """The zygote's way into a run's PID namespace for one fork.

    A process enters a PID namespace only by being forked into it.
    ``setns(CLONE_NEWPID)`` changes where this process's next children are
    born, and needs ``CAP_SYS_ADMIN`` over the target namespace and in this
    process's own user namespace. A zygote of a root host has both; so does
    one the host started as root of a user namespace of its own (a host that
    is not root: pycage_sandbox's ``zygote_user_namespace``), of which every
    run's user namespace is a child.

    After the fork the zygote sets its own PID namespace back. A zygote in
    its own user namespace may not (that needs ``CAP_SYS_ADMIN`` over the
    host's): its next child would be born in the namespace of the run
    before (``stale``), so every later fork must enter its own run's
    namespace first, and a fork that cannot is refused."""

    def __init__(self):
        self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        #: Watched by a child born in a run's namespace, whose getppid()
        #: reads 0 (its parent is outside).
        self.own_pidfd = os.pidfd_open(os.getpid())
        #: Children would be born in a namespace entered for an earlier fork.
        self.stale = False

    def enter(self, fd):
        """Make the next fork's child be born in the PID namespace ``fd``."""
        _setns(fd, _CLONE_NEWPID, "pid")

    def leave(self):
        """Children are born in this process's own namespace again, where
        the kernel lets it go back (else ``stale``)."""
        self.stale = _libc.setns(self.own, _CLONE_NEWPID) != 0


def _join_shell(join, fds, zygote_gone, native=None):
    """Join the run's namespaces and root, in a child the zygote forked in
    the run's PID namespace (``_PidNamespaces``), and confine it: it is the
    program. ``zygote_gone()`` says whether the zygote died (the credential
    changes clear the death signal, which is armed again). ``native`` is
    what ``compile_native`` made of the join in the zygote, or None."""
    global _joined
    if native is not None:
        _run_native(native)
        _joined = "native"
        return
    _joined = "python"
    user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root, ruleset = fds
    # The network and IPC namespaces first, with the zygote's capabilities:
    # recycled ones are owned outside the run's user namespace (by the
    # host's or the zygote's), where the run's ids hold none.
    _setns(net_ns, _CLONE_NEWNET, "net")
    _setns(ipc_ns, _CLONE_NEWIPC, "ipc")
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
    for fd in (user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root):
        os.close(fd)
    # The credential changes cleared the death signal: arm it again.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if zygote_gone():
        _diag(_ZYGOTE_DIED)
        os._exit(_EXIT_SETUP_FAILED)
    _confine(join, ruleset)


_ZYGOTE_DIED = "the zygote died while a child joined its sandbox"

#: How this process joined its sandbox ("native" or "python"), for the
#: runtime's tests; None outside a zygote's sandboxed child.
_joined = None


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
    state = {"ruleset": ruleset, "closed": False}
    for step in join["confine"]:
        op = _CONFINE_OPS.get(step.get("op")) if type(step) is dict else None
        if op is None:
            raise ValueError(f"unknown confinement step {step!r}")
        op(step, state)
    if state["ruleset"] is not None:
        raise ValueError("the confinement list has no landlock step")
    if not state["closed"]:
        # The zygote's descriptors (its PID namespace, its pidfd) must not
        # reach the program.
        raise ValueError("the confinement list has no close-fds step")
    if not remap_once(join.get("remaps", ())):
        raise ValueError("the sandbox's path remaps differ from the ones the zygote applied")


#: The remaps this process's paths went through (``remap_once``), or None.
_applied_remaps = None


def remap_once(remaps):
    """Move this process's paths into the sandbox (``_remap_paths``) unless
    that is done; False if another mapping already moved them (paths move
    once).

    The zygote calls it at its first sandboxed spawn, so every child forked
    after inherits the moved paths. Rewriting them in each child touched
    every module's ``__path__`` and spec: about 420 copy-on-write page
    faults where it ran, about 200 fewer per sandboxed child in all (its
    warm-up touches some of the same pages). The zygote imports nothing
    after it: the new paths exist only inside the sandbox."""
    global _applied_remaps
    remaps = [[host, inside] for host, inside in remaps]
    if _applied_remaps is None:
        _remap_paths(remaps)
        _applied_remaps = remaps
        return True
    return _applied_remaps == remaps


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
    state["closed"] = True
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if ruleset is None:
        os.closerange(bootstrap.PROTOCOL_FD + 1, nofile)
        return
    os.closerange(bootstrap.PROTOCOL_FD + 1, ruleset)
    os.closerange(ruleset + 1, max(nofile, ruleset + 1))


def _op_drop_caps(step, state):
    drop, guessed = _prctl_small, _KERNEL_LAST_CAP is None
    for cap in range(_LAST_CAP + 1):
        # Past the kernel's last capability a number fails with EINVAL (22).
        if drop(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and not (guessed and ctypes.get_errno() == 22):
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
    _check(_prctl5(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    _check(_libc.capset(ctypes.byref(_NO_CAPS_HEADER), ctypes.byref(_NO_CAPS_DATA)), "capset")


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
    prog = _seccomp_program(step["filter"])
    _check(_prctl_ulong(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")


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


# --- the native join -------------------------------------------------------
#
# pycage-join's shared library runs a flat program of operations, four
# 64-bit words each (its code, then three arguments: crates/pycage-join's
# ``Op``). The zygote compiles one per confinement list and keeps it; the
# child inherits it, and every buffer it points at, at the same addresses.

_NATIVE_SETNS = 1
_NATIVE_HOST_IDS = 2
_NATIVE_ENTER_ROOT = 3
_NATIVE_CLOSE = 4
_NATIVE_PRCTL = 5
_NATIVE_PARENT_ALIVE = 6
_NATIVE_LIMIT = 7
_NATIVE_UNSHARE = 8
_NATIVE_WRITE_FILE = 9
_NATIVE_CLOSE_FROM = 10
_NATIVE_DROP_CAPS = 11
_NATIVE_LANDLOCK = 12
_NATIVE_SECCOMP = 13
_U64_MAX = 2**64 - 1
#: Bit ``_NATIVE_SLOT_SHIFT + i`` of an operation's code: its argument ``i``
#: is an index into the call's values (``_Compiled.patch``).
_NATIVE_SLOT_SHIFT = 8
#: The library's program format this compiler writes (pycage-join's ``ABI``).
_NATIVE_ABI = 1
#: A plain int: an operation's words are ints, not enum members.
_SIGKILL = int(signal.SIGKILL)

#: Where the runtime writes the library: beside this file.
_NATIVE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_join.so")
#: The library's entry point once loaded (``_native_entry``), False when
#: it is absent, refused or failed to load.
_native = None


#: False when the host's environment said ``PYCAGE_NATIVE_JOIN=0``
#: (``choose_native``).
_native_wanted = True


def choose_native(setting):
    """The zygote's ``PYCAGE_NATIVE_JOIN`` (None when unset): ``"0"``
    keeps its sandboxed children to the Python steps."""
    global _native_wanted
    _native_wanted = setting != "0"


def _native_entry():
    """The library's ``pycage_join_run``, loaded at the first sandboxed
    spawn (a zygote that only forks unsandboxed children never maps it),
    or False."""
    global _native
    if _native is None:
        _native = False
        if _native_wanted and os.path.isfile(_NATIVE_PATH):
            try:
                library = _load_native(_NATIVE_PATH)
                abi = library.pycage_join_abi()
                entry = library.pycage_join_run
            except (OSError, AttributeError) as e:
                _diag(f"the native join did not load ({e}); sandboxed children join in Python")
            else:
                if abi != _NATIVE_ABI:
                    _diag(f"the native join speaks version {abi}, not {_NATIVE_ABI}; sandboxed children join in Python")
                    return _native
                entry.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
                entry.restype = ctypes.c_int64
                _native = entry
    return _native


def _load_native(path):
    """The library at ``path``, loaded from an anonymous copy: every child
    inherits the mapping, and its ``/proc/self/maps`` then names
    ``/memfd:pycage-join``, not the host's cache directory. From ``path``
    itself where no memfd may be mapped executable."""
    with open(path, "rb") as f:
        image = f.read()
    try:
        fd = os.memfd_create("pycage-join", os.MFD_CLOEXEC)
    except OSError:
        fd = None
    if fd is not None:
        try:
            if os.write(fd, image) == len(image):
                return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW)
        except OSError:
            pass  # a kernel that maps no memfd executable (vm.memfd_noexec)
        finally:
            os.close(fd)
    return ctypes.CDLL(path, mode=os.RTLD_NOW)


class _Slot:
    """An argument a spawn gives (a descriptor, a host id, the zygote's
    pidfd): a compiled program is kept between spawns of one list, and
    each spawn writes its values into these words."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


#: The join's descriptors (pycage_sandbox::Join's order), then the host
#: uid and gid, then the zygote's pidfd: ``_Compiled.patch``'s values.
_USER_NS, _MOUNT_NS, _PID_NS, _NET_NS, _IPC_NS, _UTS_NS, _ROOT, _RULESET, _UID, _GID, _WATCH = map(_Slot, range(11))
_SLOTS = 11


class _Compiled:
    """A join and confinement list compiled for the native library: the
    program (a ctypes array of words), what each operation is (for the
    message of the one that fails), the buffers its operations point at
    (kept alive with it), and the values a spawn gives its slots."""

    def __init__(self, entry, key, host_ids):
        self.entry = entry
        #: What it was compiled from (``_key``), whether host ids are set,
        #: and the list object the last spawn gave (``compile_native``).
        self.key = key
        self.host_ids = host_ids
        self.source = None
        self.words = []
        self.what = []
        self.keep = []
        self.values = (ctypes.c_uint64 * _SLOTS)()
        self.errno = ctypes.c_int(0)
        self.program = None

    def op(self, code, what, *args):
        words = [0, 0, 0]
        for i, word in enumerate(args):
            if type(word) is _Slot:
                code |= 1 << (_NATIVE_SLOT_SHIFT + i)
                word = word.index
            elif type(word) is not int or not 0 <= word <= _U64_MAX:
                raise ValueError(f"{what}: {word!r} is not a 64-bit argument")
            words[i] = word
        self.words += (code, *words)
        self.what.append(what)

    def write_file(self, path, text):
        name = ctypes.create_string_buffer(path.encode("ascii"))
        data = text.encode("ascii")
        buf = ctypes.create_string_buffer(data, len(data))
        self.keep += (name, buf)
        self.op(_NATIVE_WRITE_FILE, f"writing {path}", ctypes.addressof(name), ctypes.addressof(buf), len(data))

    def finish(self):
        self.program = (ctypes.c_uint64 * len(self.words))(*self.words)

    def patch(self, values):
        """Gives one spawn's values to the program's slots. Written into
        one small array: the zygote writes between forks into pages its
        children share, and each such page is a copy-on-write fault
        (about 3.5 us here)."""
        for value in values:
            if type(value) is not int or not 0 <= value <= _U64_MAX:
                raise ValueError(f"{value!r} is not a 64-bit argument")
        self.values[:] = values


#: The last program compiled (``compile_native``): a runtime sends every
#: spawn the same list, so each spawn only writes its own values into it.
#: The zygote forks one child at a time, and each child has its own copy.
_compiled = None


def compile_native(join, fds, zygote_watch):
    """In the zygote, before it forks a child to join a shell: the join and
    the confinement list as the native library's program, for
    ``_join_shell``; None without the library, or for a list it does not
    take (the child then runs the Python steps, which report what was
    wrong). ``fds`` are the join's descriptors, ``zygote_watch`` the
    zygote's pidfd the child polls. The zygote checked the join's path
    remaps (``remap_once``) before."""
    global _compiled
    entry = _native_entry()
    if not entry:
        return None
    why = "a step it does not take"
    try:
        confine, host_ids = join["confine"], join.get("hostIds")
        compiled = _compiled
        # The zygote gives every spawn of a plan the plan's own list
        # (``_JoinPlans``): the same object is the same list, and needs
        # no key. A list sent again is compared by its key.
        if compiled is None or compiled.source is not confine or compiled.host_ids != (host_ids is not None):
            key = _key(confine, host_ids)
            if compiled is None or compiled.key != key:
                _compiled = None
                compiled = _compile(entry, key, confine, host_ids is not None)
                _compiled = compiled
            if compiled is not None:
                compiled.source = confine
        if compiled is not None:
            uid, gid = (0, 0) if host_ids is None else host_ids
            compiled.patch((*fds, uid, gid, zygote_watch))
    except Exception as e:  # the host's message, malformed: the Python steps report it
        compiled, why = None, f"{type(e).__name__}: {e}"
    if compiled is None:
        # The host's lists always compile: one that does not is malformed,
        # and the Python steps will say so in the child.
        _diag(f"the native join cannot run this confinement list ({why}); the child joins in Python")
    return compiled


def _key(confine, host_ids):
    """What a compiled program depends on, as one bytes object: the list,
    and whether host ids are set. Comparing it with the last program's
    touches one old object; comparing the lists touched every old step
    (their reference counts), about 24 copy-on-write faults a spawn.
    ``marshal`` at version 2 writes no back-references, so equal lists
    from the host's encoder give equal bytes (about 4 us for 6 kB; JSON
    took 29 us), and equal bytes are equal lists."""
    return marshal.dumps((host_ids is not None, confine), 2)


def _compile(entry, key, confine, host_ids):
    """The program of ``_join_shell``'s steps and then ``_confine``'s, in
    their order, with the same checks; None for a list ``_confine`` would
    refuse."""
    p = _Compiled(entry, key, host_ids)
    p.op(_NATIVE_SETNS, "setns(net)", _NET_NS, _CLONE_NEWNET)
    p.op(_NATIVE_SETNS, "setns(ipc)", _IPC_NS, _CLONE_NEWIPC)
    if host_ids:
        p.op(_NATIVE_HOST_IDS, "setting the run's host ids", _UID, _GID)
    p.op(_NATIVE_SETNS, "setns(user)", _USER_NS, _CLONE_NEWUSER)
    p.op(_NATIVE_SETNS, "setns(mnt)", _MOUNT_NS, _CLONE_NEWNS)
    p.op(_NATIVE_ENTER_ROOT, "entering the run's root", _ROOT)
    p.op(_NATIVE_SETNS, "setns(uts)", _UTS_NS, _CLONE_NEWUTS)
    for fd in (_USER_NS, _MOUNT_NS, _PID_NS, _NET_NS, _IPC_NS, _UTS_NS, _ROOT):
        p.op(_NATIVE_CLOSE, "closing a namespace descriptor", fd)
    p.op(_NATIVE_PRCTL, "prctl(PR_SET_PDEATHSIG)", _PR_SET_PDEATHSIG, _SIGKILL)
    p.op(_NATIVE_PARENT_ALIVE, _ZYGOTE_DIED, _WATCH)
    ruleset, closed = _RULESET, False
    for step in confine:
        op = step["op"]
        if op == "death-signal":
            p.op(_NATIVE_PRCTL, "prctl(PR_SET_PDEATHSIG)", _PR_SET_PDEATHSIG, _SIGKILL)
        elif op == "limit":
            p.op(_NATIVE_LIMIT, f"setrlimit({step['resource']})", _RLIMITS[step["resource"]], step["value"])
        elif op == "unshare-cgroup":
            p.op(_NATIVE_UNSHARE, "unshare(cgroup)", _CLONE_NEWCGROUP)
        elif op == "unshare-user":
            p.op(_NATIVE_UNSHARE, "unshare(user)", _CLONE_NEWUSER)
        elif op == "dumpable":
            p.op(_NATIVE_PRCTL, "prctl(PR_SET_DUMPABLE)", _PR_SET_DUMPABLE, 1)
        elif op == "id-maps":
            p.write_file("/proc/self/setgroups", "deny\n")
            p.write_file("/proc/self/uid_map", step["uidMap"])
            p.write_file("/proc/self/gid_map", step["gidMap"])
        elif op == "close-fds":
            closed = True
            keep = _U64_MAX if ruleset is None else ruleset
            p.op(_NATIVE_CLOSE_FROM, "closing inherited descriptors", bootstrap.PROTOCOL_FD + 1, keep)
        elif op == "drop-caps":
            p.op(_NATIVE_DROP_CAPS, "dropping capabilities", _LAST_CAP, int(_KERNEL_LAST_CAP is None))
        elif op == "no-new-privs":
            p.op(_NATIVE_PRCTL, "prctl(PR_SET_NO_NEW_PRIVS)", _PR_SET_NO_NEW_PRIVS, 1)
        elif op == "landlock":
            if ruleset is None:
                return None
            p.op(_NATIVE_LANDLOCK, "landlock_restrict_self", ruleset)
            ruleset = None
        elif op == "seccomp":
            prog = _seccomp_program(step["filter"])
            # Kept with the program: the zygote's cache of filters may drop
            # this one while the program still points at it.
            p.keep.append(_SECCOMP_PROGRAMS[step["filter"]])
            p.op(_NATIVE_SECCOMP, "seccomp", ctypes.addressof(prog))
        else:
            return None
    if ruleset is not None or not closed:
        return None
    p.finish()
    return p


def _run_native(native):
    """Runs a compiled join (``compile_native``) in the child; its failure
    raises as the Python steps' would."""
    errno = native.errno
    failed = native.entry(native.program, len(native.words), native.values, _SLOTS, ctypes.addressof(errno))
    if failed == -1:
        return
    what = native.what
    step = what[failed] if 0 <= failed < len(what) else "the native join's program"
    if step is _ZYGOTE_DIED and errno.value == 3:  # ESRCH
        _diag(_ZYGOTE_DIED)
        os._exit(_EXIT_SETUP_FAILED)
    raise OSError(errno.value, f"{step}: {os.strerror(errno.value)}")


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
