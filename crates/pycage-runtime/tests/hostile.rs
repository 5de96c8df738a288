//! The hostile-program suite: each program attacks the sandbox (or the
//! host supervisor) and must produce one exact outcome. Runs under
//! `Isolation::Sandbox`, as whoever runs the tests; as root, a second test
//! runs the suite again as `nobody` (`setpriv`) with `/usr/bin/python3`.
//! After the suite: no process of a run survives, nothing was written
//! where the programs tried, and pycage's temp directory holds nothing.
#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stderr)]

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

mod common;

use pycage_runtime::*;

type Check = Box<dyn Fn(&RunResult) -> Result<(), String> + Send + Sync>;

struct Case {
    name: &'static str,
    program: String,
    tweak: fn(&mut RuntimeConfig),
    check: Check,
}

fn keep(_: &mut RuntimeConfig) {}

fn is_value(expected: &'static str) -> Check {
    Box::new(move |r| match (&r.value, &r.error) {
        (Some(v), None) if v.to_canonical_string() == expected => Ok(()),
        _ => Err(format!("expected value {expected}, got {:?} / {:?}", r.value, r.error)),
    })
}

fn is_failure(kind: FailureKind, needle: &'static str) -> Check {
    Box::new(move |r| match &r.error {
        Some(e) if e.kind == kind && e.message.contains(needle) && r.value.is_none() => Ok(()),
        _ => Err(format!("expected {kind} containing {needle:?}, got {:?} / {:?}", r.value, r.error)),
    })
}

fn with_logs(first: &'static str, inner: Check) -> Check {
    Box::new(move |r| {
        inner(r)?;
        if r.logs.first().map(String::as_str) != Some(first) {
            return Err(format!("logs before the attack were lost: {:?}", r.logs));
        }
        Ok(())
    })
}

/// The daemon's `sleep` duration doubles as its marker (sleep rejects
/// extra non-numeric arguments); the test's pid makes it unique to this run.
fn marker() -> String {
    format!("3600.{}", std::process::id())
}

fn cases(canary: &str, port: u16, host_pid: u32) -> Vec<Case> {
    let marker = marker();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let c = |name, program: &str, tweak, check| Case { name, program: program.to_string(), tweak, check };
    vec![
        c("cpu spin", "print('go')\nwhile True:\n    pass", |k| { k.cpu_seconds = 1; k.wall_time = Duration::from_secs(30) },
            with_logs("go", is_failure(FailureKind::Timeout, "CPU"))),
        c("sleep forever", "print('go')\nimport time\ntime.sleep(3600)", |k| k.wall_time = Duration::from_secs(2),
            with_logs("go", is_failure(FailureKind::Timeout, "wall-clock"))),
        c("memory bomb at once", "print('go')\nx = bytearray(1 << 36)", keep,
            with_logs("go", is_failure(FailureKind::Exception, "MemoryError"))),
        // Each block is written (bytearray zero-fills it): the run's PSS
        // crosses the 512 MiB budget long before RLIMIT_AS (its backstop).
        c("memory bomb growing", "print('go')\nl = []\nwhile True:\n    l.append(bytearray(1 << 24))", keep,
            with_logs("go", is_failure(FailureKind::WorkerExit, "memory budget of 512 MiB was exceeded"))),
        c("fork bomb", "print('go')\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            |k| k.wall_time = Duration::from_secs(3), with_logs("go", is_failure(FailureKind::Timeout, "wall-clock"))),
        c("setsid double-fork daemon", &format!(
            "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.write(w, str(os.getpid()).encode())\n        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\nos.wait()\nos.close(w)\npid = int(os.read(r, 32))\ntime.sleep(0.3)\n# The orphaned daemon is the run's init's now: is it running?\nos.kill(pid, 0)\nreturn 'spawned'"),
            keep, is_value("\"spawned\"")),
        c("read a canary outside the run dir", &format!(
            "print('go')\ntry:\n    open({canary:?}).read()\n    return 'read it'\nexcept (PermissionError, FileNotFoundError) as e:\n    return 'denied'"),
            keep, with_logs("go", is_value("\"denied\""))),
        c("/etc is generated, without host users or secrets",
            "import os\npasswd = open('/etc/passwd').read()\nreturn [passwd.count('\\n'), passwd.split(':')[0], os.path.exists('/etc/shadow'), open('/etc/hostname').read(), sorted(os.listdir('/etc'))]",
            keep, is_value("[3,\"root\",false,\"pycage\\n\",[\"ca-certificates.conf\",\"fonts\",\"group\",\"hostname\",\"hosts\",\"ld.so.cache\",\"localtime\",\"mime.types\",\"nsswitch.conf\",\"passwd\",\"protocols\",\"services\",\"ssl\"]]")),
        c("write outside the run dir", "out = []\nfor p in ['/usr/pycage-hostile-w', '/root/pycage-hostile-w', '/pycage-hostile-w', '/etc/pycage-hostile-w', '/opt/pycage-hostile-w', '/proc/sys/kernel/shmmax']:\n    try:\n        open(p, 'w').write('x')\n        out.append(p)\n    except OSError:\n        pass\nreturn out",
            keep, is_value("[]")),
        c("/tmp is the run's own", "open('/tmp/pycage-hostile-w', 'w').write('x')\nreturn open('/tmp/pycage-hostile-w').read()",
            keep, is_value("\"x\"")),
        c("write inside the run dir", "import os\nopen('f', 'w').write('x' * 10)\nreturn os.path.getsize('f')", keep, is_value("10")),
        c("list /home", "import os\ntry:\n    return os.listdir('/home')\nexcept OSError as e:\n    return type(e).__name__", keep,
            is_value("\"FileNotFoundError\"")),
        c("host environment through /proc", "import os\ntry:\n    return open(f'/proc/{os.getppid()}/environ').read()\nexcept OSError as e:\n    return type(e).__name__",
            keep, is_value("\"FileNotFoundError\"")),
        c("/proc/1/environ of the host", &format!("try:\n    return open('/proc/{host_pid}/environ').read()\nexcept OSError as e:\n    return type(e).__name__"),
            keep, is_value("\"FileNotFoundError\"")),
        c("tcp to a host listener", &format!(
            "import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    return 'connected'\nexcept OSError as e:\n    return type(e).__name__"),
            keep, is_value("\"PermissionError\"")),
        c("udp socket", "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 53))\n    return 'sent'\nexcept OSError as e:\n    return type(e).__name__",
            keep, is_value("\"PermissionError\"")),
        c("unix socketpair still works", "import socket\na, b = socket.socketpair()\na.send(b'hi')\nreturn b.recv(2).decode()", keep, is_value("\"hi\"")),
        c("ptrace the parent", "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.ptrace(16, os.getppid(), 0, 0)\nreturn [r, ctypes.get_errno()]",
            keep, is_value("[-1,1]")),
        c("kill the host", &format!("import os\ntry:\n    os.kill({host_pid}, 9)\n    return 'killed'\nexcept OSError as e:\n    return type(e).__name__"),
            keep, is_value("\"ProcessLookupError\"")),
        c("unshare and mount", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nout = [libc.unshare(0x10000000), ctypes.get_errno()]\nout += [libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno()]\nreturn out",
            keep, is_value("[-1,1,-1,1]")),
        c("raise rlimits back", "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_NPROC, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n    return 'raised'\nexcept (ValueError, OSError) as e:\n    return 'refused'",
            keep, is_value("\"refused\"")),
        // The parent is the run's init (exec), or the zygote, which forked
        // the program into the run's PID namespace from outside it (and so
        // reads as 0): never a host process the program can see.
        c("runs as an unprivileged uid", "import os\nreturn [os.getuid(), os.geteuid(), os.getgid(), os.getpid(), os.getppid() in (0, 1)]", keep, is_value("[1000,1000,1000,2,true]")),
        c("flood stdout through print", "for i in range(200000):\n    print('x' * 100)\nreturn 'flooded'", keep,
            Box::new(|r| {
                is_value("\"flooded\"")(r)?;
                let markers = r.logs.iter().filter(|l| l.starts_with("[pycage] log capture truncated")).count();
                if markers != 1 { return Err(format!("{markers} markers")); }
                Ok(())
            })),
        c("flood fd 1 directly", "import os\nfor _ in range(500):\n    os.write(1, b'y' * 100000)\nreturn 'flooded'", keep,
            Box::new(|r| {
                is_value("\"flooded\"")(r)?;
                if r.logs.last().map(|l| l.starts_with("[pycage] log capture truncated")) != Some(true) {
                    return Err(format!("no marker: {} lines", r.logs.len()));
                }
                Ok(())
            })),
        c("100 MB on fd 3 without a newline", "print('go')\nimport os\nos.set_blocking(3, True)\nos.write(3, b'z' * (100 << 20))\nimport time\ntime.sleep(60)",
            keep, with_logs("go", is_failure(FailureKind::OutputLimit, "line cap"))),
        c("junk and forged frames", "import os\nos.write(3, b'junk\\n{\"type\":\"call\",\"id\":1.5}\\n{\"type\":\"done\",\"error\":{\"kind\":\"timeout\",\"message\":\"x\"}}\\n{\"type\":\"log\",\"text\":\"forged\"}\\n')\nreturn 'survived'",
            keep, Box::new(|r| {
                is_value("\"survived\"")(r)?;
                if r.logs != ["forged"] || r.dropped_frames != 3 { return Err(format!("{:?} dropped {}", r.logs, r.dropped_frames)); }
                Ok(())
            })),
        c("forged done settles first", "import os\nos.write(3, b'{\"type\":\"done\",\"value\":\"forged\",\"extra\":1}\\n')\nimport time\ntime.sleep(60)",
            keep, is_value("\"forged\"")),
        c("close fd 3", "print('go')\nimport os\nos.close(3)\nimport time\ntime.sleep(60)", keep,
            with_logs("go", is_failure(FailureKind::WorkerExit, "fd 3"))),
        c("os._exit mid-run", "print('go')\nimport os\nos._exit(9)", keep, with_logs("go", is_failure(FailureKind::WorkerExit, "status 9"))),
        c("segfault", "print('go')\nimport ctypes\nctypes.string_at(0)", keep,
            with_logs("go", is_failure(FailureKind::WorkerExit, "signal 11"))),
        c("huge return value", "return 'v' * (8 << 20)", keep, is_failure(FailureKind::OutputLimit, "value budget")),
        c("deep recursion", "def f(n):\n    return f(n + 1)\nf(0)", keep, is_failure(FailureKind::Exception, "RecursionError")),
        c("netlink to list interfaces", "import socket\nreturn [n for _, n in socket.if_nameindex()]", keep,
            is_failure(FailureKind::Exception, "PermissionError")),
        // ---- issue 8's findings, each with the outcome its fix gives ----
        c("a chain of directories deeper than RLIMIT_NOFILE with 1 GiB fallocated at the bottom", &deep_chain(),
            |k| { k.max_file_bytes = 4 << 30; k.wall_time = Duration::from_secs(120); k.cpu_seconds = 60 },
            Box::new(|r| {
                is_value("\"ENOSPC\"")(r)?;
                if r.logs != [DEEP_LEVELS.to_string()] { return Err(format!("the chain stopped early: {:?}", r.logs)); }
                Ok(())
            })),
        c("sixteen 64 MiB files", "import errno\nn = 0\ntry:\n    for i in range(16):\n        with open(f'/tmp/f{i}', 'wb') as f:\n            f.write(b'x' * (64 << 20))\n        n += 1\nexcept OSError as e:\n    return [n, errno.errorcode[e.errno]]\nreturn [n, 'all written']",
            |k| k.disk_bytes = 100 << 20, is_value("[1,\"ENOSPC\"]")),
        c("sixteen 64 MiB memfds", "import errno, os\nn = 0\ntry:\n    for i in range(16):\n        fd = os.memfd_create(f'm{i}')\n        os.ftruncate(fd, 64 << 20)\n        os.write(fd, b'x' * (64 << 20))\n        n += 1\nexcept OSError as e:\n    return [n, errno.errorcode[e.errno]]\nreturn [n, 'all created']",
            keep, is_value("[0,\"ENOSYS\"]")),
        c("1 GiB of detached SysV shared memory", SYSV_SHM, keep, is_value("[\"EINVAL\",1,\"ENOSPC\"]")),
        c("twelve children of 200 MiB under a 256 MiB budget", TWELVE_CHILDREN,
            |k| { k.address_space_bytes = 256 << 20; k.wall_time = Duration::from_secs(60) },
            with_logs("go", is_failure(FailureKind::WorkerExit, "memory budget of 256 MiB was exceeded by the run's processes together"))),
        c("eight spinning children under a 2 s CPU budget", EIGHT_SPINNERS,
            |k| { k.cpu_seconds = 2; k.wall_time = Duration::from_secs(40) },
            with_logs("go", is_failure(FailureKind::Timeout, "CPU budget of 2 s was exceeded by the run's processes together"))),
        c("descriptors sent with frames on fd 3", FD3_DESCRIPTORS, |k| k.wall_time = Duration::from_secs(10),
            Box::new(|r| {
                is_value("\"read all\"")(r)?;
                let expected: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
                if r.logs != expected { return Err(format!("logs {:?}", r.logs)); }
                Ok(())
            })),
        c("the hostname is neutral", "import os, socket\nreturn [socket.gethostname(), os.uname().nodename]", keep,
            is_value("[\"pycage\",\"pycage\"]")),
        c("the run dir is 0700", "import os\nreturn [os.getcwd(), oct(os.stat('.').st_mode & 0o777), os.environ['HOME']]", keep,
            is_value("[\"/work\",\"0o700\",\"/tmp\"]")),
        c("modify_ldt and open_tree_attr", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\nfor nr, args in ((154, (0, None, 0)), (467, (-100, b'/', 1, None, 0))):\n    out += [libc.syscall(nr, *args), ctypes.get_errno()]\nreturn out",
            keep, is_value(if cfg!(target_arch = "x86_64") { "[-1,1,-1,1]" } else { "[-1,38,-1,1]" })),
        c("the host's layout does not show", "import os, sys\nreturn [os.path.exists('/root'), os.path.exists('/home'), sys.executable.startswith(('/root', '/home')), sys.prefix.startswith(('/root', '/home')), [p for p in os.listdir('/proc') if p.isdigit()], os.cpu_count() > 0]",
            keep, is_value("[false,false,false,false,[\"2\"],true]")),
        // ---- issue 17: kernel memory and the host uid's quotas ----
        c("socket and pipe buffers keep the kernel's size", BUFFERS, keep,
            is_value("[\"EPERM\",\"EPERM\",\"EPERM\",\"EPERM\",\"EPERM\",65536,true]")),
        c("inotify, POSIX message queues and io_uring are not there", NOT_THERE, keep,
            is_value("[-1,\"ENOSYS\",-1,\"ENOSYS\",-1,\"EPERM\"]")),
        c("pending signals, message queues and locked memory are the run's share", QUOTAS, keep,
            is_value("[true,[[1024,1024],[0,0],[65536,65536]],\"ENOMEM\",\"EPERM\"]")),
        c("the boot id is the run's own", &format!("import re\npath = '/proc/sys/kernel/random/boot_id'\na, b = open(path).read(), open(path).read()\ntry:\n    open(path, 'w').write('x')\n    written = 'written'\nexcept OSError as e:\n    written = type(e).__name__\nreturn [a == b, a != {boot_id:?}, bool(re.fullmatch(r'[0-9a-f]{{8}}-[0-9a-f]{{4}}-4[0-9a-f]{{3}}-[89ab][0-9a-f]{{3}}-[0-9a-f]{{12}}\\n', a)), written]"),
            keep, is_value("[true,true,true,\"OSError\"]")),
        c("/proc/self/cgroup shows only the run's own root", "return sorted(set(line.split(':', 2)[2] for line in open('/proc/self/cgroup').read().splitlines()))",
            keep, is_value("[\"/\"]")),
        c("processes that hide their descriptors count at RLIMIT_NOFILE", HIDDEN, |k| k.wall_time = Duration::from_secs(20),
            Box::new(|r| if rustix::process::geteuid().is_root() {
                // The host reads every process's descriptors: nothing hides.
                is_value("\"held\"")(r)
            } else {
                // One hidden process at its RLIMIT_NOFILE plus the run's
                // own pipe is already past the budget, so the watchdog may
                // end the run before the second child has exec'd: 1 or 2.
                is_failure(FailureKind::WorkerExit, "process(es) that hide their descriptors at their RLIMIT_NOFILE")(r)
            })),
        // The host's stop signal reaches the program's parent outside its
        // PID namespace as well: that parent must live to report how the
        // program ended (it used to die of the SIGTERM first, which raced
        // with the SIGKILL case below). The grace is waited twice (for the
        // child to end by itself, then between SIGTERM and SIGKILL): long
        // enough for the handler to run on a loaded machine, short enough
        // not to stretch the suite.
        c("ends its own way when stopped after closing fd 3",
            "print('go')\nimport os, signal, time\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(7))\nos.close(3)\ntime.sleep(60)",
            |c| c.grace = Duration::from_secs(5),
            with_logs("go", is_failure(FailureKind::WorkerExit, "exited with status 7"))),
        c("SIGKILL to itself", "print('go')\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nimport time\ntime.sleep(60)", keep,
            with_logs("go", is_failure(FailureKind::WorkerExit, "signal 9"))),
    ]
}

/// Levels of the deep chain: 8 times the sandbox's `RLIMIT_NOFILE` (a
/// walker holding a descriptor per level runs out), and a path of 2 bytes
/// per level past `PATH_MAX` (4096). Not more: under Landlock each `mkdir`
/// and `chdir` checks every ancestor, so the chain costs the square of its
/// depth (25,000 levels took over a minute of CPU on a loaded machine, and
/// the case hit its wall clock).
const DEEP_LEVELS: u64 = 2100;

fn deep_chain() -> String {
    let nofile = RuntimeConfig::default().max_open_files;
    assert!(DEEP_LEVELS >= 8 * nofile && DEEP_LEVELS * 2 > 4096, "the chain must stay deeper than both limits");
    format!(
        "import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
for i in range({DEEP_LEVELS}):
    os.mkdir('d')
    os.chdir('d')
print(i + 1)
fd = os.open('big', os.O_CREAT | os.O_WRONLY, 0o600)
r = libc.fallocate(fd, 1, 0, 1 << 30)
return errno.errorcode[ctypes.get_errno()] if r else 'allocated'"
    )
}

/// Twenty frames, each with descriptors, queued at once, then `done`: the
/// kernel ends a read at every descriptor-carrying message, and a reader
/// that takes a short read for "drained" stalls here (the run then timed
/// out, its logs lost).
const FD3_DESCRIPTORS: &str = "import array, os, socket, time
s = socket.socket(fileno=os.dup(3))
fds = array.array('i', [0, 1, 2, 3])
for i in range(20):
    s.sendmsg([b'{\"type\":\"log\",\"text\":\"f%d\\\\n\"}\\n' % i], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
s.sendall(b'{\"type\":\"done\",\"value\":\"read all\"}\\n')
time.sleep(30)";

/// Every way to grow a socket's or a pipe's buffer is refused; what the
/// kernel gave them stays, and other socket options work.
const BUFFERS: &str = "import errno, fcntl, os, socket
out = []
a, b = socket.socketpair()
for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF, 32, 33):
    try:
        a.setsockopt(socket.SOL_SOCKET, opt, 1 << 24)
        out.append('set')
    except OSError as e:
        out.append(errno.errorcode[e.errno])
r, w = os.pipe()
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    out.append('grown')
except OSError as e:
    out.append(errno.errorcode[e.errno])
out.append(fcntl.fcntl(w, 1032))
a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
out.append(a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) > 0)
return out";

/// inotify and POSIX message queues are not provided (ENOSYS), io_uring is
/// denied (EPERM; 425 on both architectures).
const NOT_THERE: &str = "import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
out = []
for call in (lambda: libc.inotify_init1(0), lambda: libc.mq_open(b'/pycage', 0o102, 0o600, None),
             lambda: libc.syscall(425, 8, ctypes.create_string_buffer(128))):
    ctypes.set_errno(0)
    out += [call(), errno.errorcode.get(ctypes.get_errno(), 'none')]
return out";

/// Four children queue real-time signals to themselves until refused: all
/// of them together get the run's RLIMIT_SIGPENDING, not four times it.
/// Locking 1 MiB is over RLIMIT_MEMLOCK; no new user namespace.
const QUOTAS: &str = "import ctypes, errno, os, resource, signal
libc = ctypes.CDLL(None, use_errno=True)
sig = signal.SIGRTMIN + 3
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
class Info(ctypes.Structure):
    _fields_ = [('signo', ctypes.c_int), ('errno', ctypes.c_int), ('code', ctypes.c_int), ('pad', ctypes.c_byte * 116)]
r, w = os.pipe()
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        n, info = 0, Info(sig, 0, -1)
        while n < 100000 and libc.syscall(129, os.getpid(), sig, ctypes.byref(info)) == 0:
            n += 1
        os.write(w, b'%d\\n' % n)
        signal.pause()
        os._exit(0)
    kids.append(pid)
data = b''
while data.count(b'\\n') < 4:
    data += os.read(r, 64)
total = sum(int(n) for n in data.split())
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
limits = [list(resource.getrlimit(x)) for x in (resource.RLIMIT_SIGPENDING, resource.RLIMIT_MSGQUEUE, resource.RLIMIT_MEMLOCK)]
buf = ctypes.create_string_buffer(1 << 20)
locked = errno.errorcode.get(ctypes.get_errno(), 'locked') if libc.mlock(buf, 1 << 20) else 'locked'
ctypes.set_errno(0)
userns = errno.errorcode.get(ctypes.get_errno(), 'none') if libc.unshare(0x10000000) else 'created'
return [1000 <= total <= 1024, limits, locked, userns]";

/// Two children exec an execute-only copy of `sleep`: the kernel makes
/// them non-dumpable, so a host without root cannot read their descriptors.
const HIDDEN: &str = "import os, shutil, time
shutil.copy('/bin/sleep', 'hidden-sleep')
os.chmod('hidden-sleep', 0o111)
kids = [os.spawnv(os.P_NOWAIT, 'hidden-sleep', ['hidden-sleep', '60']) for _ in range(2)]
time.sleep(2)
for pid in kids:
    os.kill(pid, 9)
return 'held'";

const SYSV_SHM: &str = "import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
def get(size):
    ctypes.set_errno(0)
    return libc.shmget(0, size, 0o1600) >= 0
big = 'created' if get(1 << 30) else errno.errorcode[ctypes.get_errno()]
n = 0
while n < 64 and get(16 << 20):
    n += 1
return [big, n, errno.errorcode[ctypes.get_errno()]]";

const TWELVE_CHILDREN: &str = "import os, time
print('go', flush=True)
for i in range(12):
    if os.fork() == 0:
        block = bytearray(200 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(60)
        os._exit(0)
for i in range(12):
    os.wait()";

const EIGHT_SPINNERS: &str = "import os
print('go', flush=True)
for i in range(8):
    if os.fork() == 0:
        while True:
            pass
import time
time.sleep(60)";

/// This process's live children (a sandbox's supervisor, a zygote, and,
/// with this process their subreaper, anything a run left behind), but for
/// the unprivileged test's own run of this test binary.
fn children_of_self() -> Vec<String> {
    let this_binary = std::env::current_exe().ok();
    common::live_children(|proc_dir| {
        let exe = std::fs::read_link(proc_dir.join("exe")).ok();
        let setpriv = exe.as_ref().is_some_and(|x| x.file_name().is_some_and(|n| n == "setpriv"));
        setpriv || (exe.is_some() && exe == this_binary)
    })
}

/// Each suite leases run uids from its own range, so the two suites can run
/// at once and each checks only its own runs' processes.
fn uid_base(launch: Launch) -> u32 {
    match launch {
        Launch::Zygote => 2_100_000,
        Launch::Exec => 2_200_000,
        Launch::ZygoteHelper => 2_300_000,
    }
}

/// How a suite's runs are made.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// A zygote's child joins a shell the host forked.
    Zygote,
    /// ... a shell the shell helper forked.
    ZygoteHelper,
    /// A new interpreter enters its sandbox itself.
    Exec,
}

impl Launch {
    fn spawn(self) -> SpawnMode {
        match self {
            Launch::Zygote | Launch::ZygoteHelper => SpawnMode::Zygote,
            Launch::Exec => SpawnMode::Exec,
        }
    }

    fn shell_helper(self) -> Option<Vec<std::ffi::OsString>> {
        matches!(self, Launch::ZygoteHelper).then(|| vec![common::shell_helper_program()])
    }
}

const UID_COUNT: u32 = 10_000;

/// Processes of a suite's uid range on a root host.
fn sandbox_uid_processes(launch: Launch) -> Vec<String> {
    let range = uid_base(launch)..uid_base(launch) + UID_COUNT;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(status) = std::fs::read_to_string(e.path().join("status")) {
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().next());
            if uid.and_then(|u| u.parse::<u32>().ok()).is_some_and(|u| range.contains(&u)) {
                out.push(status.lines().next().unwrap_or_default().to_string());
            }
        }
    }
    out
}

/// Every case through the zygote (a forked child joins a sandbox the host
/// built), again with the shells built by the shell helper, then through a
/// new interpreter per run. One after the other: the checks after each
/// suite look at every child of this process.
#[test]
fn hostile_programs_get_exact_outcomes() {
    common::become_subreaper();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(suite(Launch::Zygote));
    rt.block_on(suite(Launch::ZygoteHelper));
    rt.block_on(suite(Launch::Exec));
}

async fn suite(launch: Launch) {
    let spawn = launch.spawn();
    let python = std::env::var_os("PYCAGE_TEST_PYTHON").map(std::path::PathBuf::from);
    let canary_dir = tempfile::tempdir().unwrap();
    let canary = canary_dir.path().join("secret.txt");
    std::fs::write(&canary, "top secret").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // pycage's own temp directory for the suite: bootstrap, owner locks.
    let pycage_temp = tempfile::tempdir().unwrap();

    let all = cases(&canary.to_string_lossy(), port, std::process::id());
    assert!(all.len() >= 51);
    let mut failures = Vec::new();
    for case in all {
        let mut config = RuntimeConfig {
            isolation: Isolation::Sandbox,
            run_dir_parent: Some(pycage_temp.path().to_path_buf()),
            python: python.clone(),
            spawn,
            sandbox_uid_base: uid_base(launch),
            sandbox_uid_count: UID_COUNT,
            shell_helper: launch.shell_helper(),
            ..RuntimeConfig::default()
        };
        (case.tweak)(&mut config);
        let rt = Runtime::new(config).unwrap();
        assert_eq!(rt.spawn_mode(), (spawn, None), "{} ({launch:?})", case.name);
        let r = rt.run(RunRequest::new(case.program.clone())).await.unwrap();
        if let Err(e) = (case.check)(&r) {
            failures.push(format!("{} ({launch:?}): {e}", case.name));
        }
        rt.shutdown().await;
        assert_eq!(rt.cleanup_failures(), Vec::new(), "{} ({launch:?})", case.name);
    }
    // Nothing connected to the listener, the canary is intact, no process
    // of a run survived, nothing was written where the programs tried, and
    // pycage's temp directory is empty again.
    let mut buf = [0u8; 1];
    if let Ok((mut s, _)) = listener.accept() {
        let _ = s.read(&mut buf);
        failures.push("a program connected to the host's listener".into());
    }
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "top secret");
    // A child killed on drop is reaped by a background thread, and a
    // leftover reaches this subreaper once its parent is gone: wait for both.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !children_of_self().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(children_of_self(), Vec::<String>::new());
    if rustix::process::geteuid().is_root() {
        // A killed supervisor's init dies of its death signal an instant later.
        while !sandbox_uid_processes(launch).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(sandbox_uid_processes(launch), Vec::<String>::new());
    }
    for p in [
        "/tmp/pycage-hostile-w",
        "/usr/pycage-hostile-w",
        "/root/pycage-hostile-w",
        "/pycage-hostile-w",
        "/etc/pycage-hostile-w",
        "/opt/pycage-hostile-w",
    ] {
        assert!(!std::path::Path::new(p).exists(), "{p} was written");
    }
    let left: Vec<_> = std::fs::read_dir(pycage_temp.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "pycage's temp directory holds {left:?}");
    assert!(failures.is_empty(), "hostile outcomes differ:\n{}", failures.join("\n"));
}

/// As root, the whole suite again as `nobody`, with the system interpreter
/// (the default `python3` may live under `/root`, which nobody can read).
#[test]
fn hostile_programs_get_exact_outcomes_as_an_unprivileged_user() {
    common::rerun_as_nobody("hostile_programs_get_exact_outcomes");
}
