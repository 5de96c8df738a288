//! End-to-end tests: real `python3 -I` children spawned through
//! `std::process::Command` + `pre_exec(Prepared::enter)`.
//!
//! They need root (the sandbox does) and skip with a note otherwise. Each
//! test uses its own uid, run dir, staging dir and marker, so they are safe
//! to run in parallel.

#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use pycage_sandbox::{default_devices, default_read_only_paths, probe, Prepared, SandboxError, SandboxPolicy, Step};

/// The longest any sandboxed test program may run before the test kills it
/// and fails (a hang is a bug, never a pass).
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// First uid used by these tests; each test adds its own offset.
const UID_BASE: u32 = 3_100_000;

struct Python {
    executable: PathBuf,
    prefixes: Vec<PathBuf>,
}

fn python() -> &'static Python {
    static PYTHON: OnceLock<Python> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args([
                "-I",
                "-c",
                "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix); print(sys.exec_prefix)",
            ])
            .output()
            .expect("python3 on PATH");
        assert!(out.status.success(), "python3 probe failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines().map(PathBuf::from);
        let executable = lines.next().unwrap();
        let mut prefixes: Vec<PathBuf> = lines.collect();
        prefixes.dedup();
        Python { executable, prefixes }
    })
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

macro_rules! require_root {
    () => {
        if !is_root() {
            assert!(
                std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(),
                "this test needs root, and PYCAGE_REQUIRE_ALL_TESTS is set: it must run"
            );
            eprintln!("skipped: the sandbox needs root");
            return;
        }
    };
}

/// One sandboxed run's directories and policy.
struct Fixture {
    run: tempfile::TempDir,
    _staging: tempfile::TempDir,
    policy: SandboxPolicy,
}

impl Fixture {
    fn new(uid_offset: u32) -> Fixture {
        let uid = UID_BASE + uid_offset;
        let run = tempfile::Builder::new().prefix("pycage-run-").tempdir().unwrap();
        std::os::unix::fs::chown(run.path(), Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let staging = tempfile::Builder::new().prefix("pycage-stage-").tempdir().unwrap();
        let mut read_only = default_read_only_paths();
        read_only.extend(python().prefixes.iter().cloned());
        let policy = SandboxPolicy {
            read_only,
            read_write: vec![run.path().to_path_buf()],
            devices: default_devices(),
            uid,
            gid: uid,
            max_processes: 64,
            max_file_bytes: 64 << 20,
            max_open_files: 256,
            staging_dir: staging.path().to_path_buf(),
        };
        Fixture { run, _staging: staging, policy }
    }

    fn command(&self, program: &Path, args: &[&str]) -> (Command, Arc<Prepared>) {
        let prepared = Arc::new(Prepared::new(&self.policy).expect("Prepared::new"));
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("HOME", self.run.path())
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let in_child = Arc::clone(&prepared);
        let hook = move || {
            // SAFETY: pre_exec runs this in the forked, single-threaded child.
            unsafe { in_child.enter() }
        };
        // SAFETY: the hook only calls `Prepared::enter`, which is written for
        // the forked child (syscalls, no allocation).
        unsafe { command.pre_exec(hook) };
        (command, prepared)
    }

    fn python(&self, code: &str) -> (Command, Arc<Prepared>) {
        self.command(&python().executable, &["-I", "-c", code])
    }

    /// Run `code` in the sandbox to completion.
    fn run(&self, code: &str) -> Finished {
        let (mut command, prepared) = self.python(code);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(err) => panic!("spawn failed: {}", prepared.explain_spawn_error(err)),
        };
        finish(child)
    }
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {:?}\n--- stdout\n{}\n--- stderr\n{}", self.status, self.stdout, self.stderr)
    }
}

/// Wait for `child` with a deadline, collecting its output.
fn finish(mut child: Child) -> Finished {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sandboxed child did not finish within {RUN_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Finished { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// Host pids whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if cmdline.split(|b| *b == 0).any(|arg| arg == marker.as_bytes()) {
                found.push(pid);
            }
        }
    }
    found
}

/// Wait (bounded) until no host process carries `marker`.
fn assert_no_process_with(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("processes with {marker} still alive: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn marker(test: &str) -> String {
    format!("pycage-marker-{}-{test}", std::process::id())
}

/// Python that starts a `setsid` double-forked sleeper carrying `marker`
/// and waits until it runs (it touches `ready` in the run dir).
fn spawn_daemon_code(marker: &str) -> String {
    format!(
        r#"
import os, sys, time
ready = os.path.join(os.getcwd(), "ready")
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open("/dev/null", os.O_RDWR)
        for n in (0, 1, 2):
            os.dup2(fd, n)
        os.closerange(3, 1024)
        os.execv(sys.executable, [sys.executable, "-I", "-c",
            "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(300)",
            ready, "{marker}"])
    os._exit(0)
os.waitpid(pid, 0)
deadline = time.monotonic() + 20
while not os.path.exists(ready) and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready" if os.path.exists(ready) else "not-ready", flush=True)
"#
    )
}

#[test]
fn runs_as_the_run_uid_pid_1_in_a_private_root() {
    require_root!();
    let fx = Fixture::new(1);
    let done = fx.run(
        r#"
import json, os
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "pid": os.getpid(), "cwd": os.getcwd(),
    "root": sorted(os.listdir("/")), "slash_root": sorted(os.listdir("/root")),
    "proc": os.path.exists("/proc"), "etc": sorted(os.listdir("/etc")),
    "dev": sorted(os.listdir("/dev")), "hostname": os.uname().nodename,
}))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    let uid = fx.policy.uid;
    let root_entries: Vec<String> = {
        let mut top: Vec<String> = fx
            .policy
            .read_only
            .iter()
            .chain(&fx.policy.read_write)
            .chain(&fx.policy.devices)
            .filter_map(|p| p.components().nth(1))
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        top.sort();
        top.dedup();
        top
    };
    let expected = format!(
        r#"{{"uid": {uid}, "euid": {uid}, "gid": {uid}, "groups": [], "pid": 1, "cwd": {cwd:?}, "root": {root:?}, "slash_root": [".pyenv"], "proc": false, "etc": ["ld.so.cache", "localtime"], "dev": ["null", "random", "urandom", "zero"], "hostname": {host:?}}}"#,
        cwd = fx.run.path().to_str().unwrap(),
        root = root_entries,
        host = rustix::system::uname().nodename().to_str().unwrap(),
    );
    if python().prefixes[0].starts_with("/root/.pyenv") {
        assert_eq!(done.stdout.trim(), expected);
    } else {
        assert!(done.stdout.contains(r#""pid": 1"#), "{done:?}");
    }
}

#[test]
fn file_access_is_limited_to_the_exposed_paths() {
    require_root!();
    let fx = Fixture::new(2);
    let canary_dir = tempfile::Builder::new().prefix("pycage-canary-").tempdir().unwrap();
    let canary = canary_dir.path().join("canary.txt");
    std::fs::write(&canary, "secret").unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(canary_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = python().prefixes[0].display().to_string();
    let code = format!(
        r#"
import os
def attempt(label, fn):
    try:
        fn()
        print(label, "ok")
    except OSError as e:
        print(label, type(e).__name__)
def write(path):
    with open(path, "w") as f:
        f.write("x")
attempt("read-canary", lambda: open({canary:?}).read())
attempt("read-passwd", lambda: open("/etc/passwd").read())
attempt("read-stdlib", lambda: open(os.__file__).read())
attempt("write-run-dir", lambda: write("inside.txt"))
attempt("write-prefix", lambda: write({prefix:?} + "/pycage-probe"))
attempt("write-tmp", lambda: write("/tmp/pycage-probe"))
attempt("write-root", lambda: write("/pycage-probe"))
attempt("mkdir-usr", lambda: os.mkdir("/usr/pycage-probe"))
attempt("write-dev-null", lambda: write("/dev/null"))
"#,
        canary = canary.display().to_string(),
    );
    let done = fx.run(&code);
    assert!(done.status.success(), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    let readonly_error = |line: &str| {
        line.ends_with("PermissionError") || line.ends_with("OSError") // EROFS is a plain OSError
    };
    assert!(lines[0] == "read-canary FileNotFoundError" || lines[0] == "read-canary PermissionError", "{done:?}");
    assert!(lines[1] == "read-passwd FileNotFoundError" || lines[1] == "read-passwd PermissionError", "{done:?}");
    assert_eq!(lines[2], "read-stdlib ok", "{done:?}");
    assert_eq!(lines[3], "write-run-dir ok", "{done:?}");
    for line in &lines[4..8] {
        assert!(readonly_error(line), "{line} in {done:?}");
    }
    assert_eq!(lines[8], "write-dev-null ok", "{done:?}");
    assert_eq!(std::fs::read_to_string(fx.run.path().join("inside.txt")).unwrap(), "x");
    assert!(!python().prefixes[0].join("pycage-probe").exists());
}

#[test]
fn only_unix_sockets_are_allowed() {
    require_root!();
    let fx = Fixture::new(3);
    let done = fx.run(
        r#"
import errno, socket
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):
    try:
        socket.socket(family, socket.SOCK_DGRAM if family == socket.AF_NETLINK else socket.SOCK_STREAM)
        print(family.name, "allowed")
    except OSError as e:
        print(family.name, errno.errorcode[e.errno], type(e).__name__)
a, b = socket.socketpair()
a.sendall(b"ping")
print("socketpair", b.recv(4).decode())
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind("sock")
server.listen(1)
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect("sock")
conn, _ = server.accept()
client.sendall(b"pong")
print("unix", conn.recv(4).decode())
"#,
    );
    assert!(done.status.success(), "{done:?}");
    assert_eq!(
        done.stdout,
        "AF_INET EPERM PermissionError\nAF_INET6 EPERM PermissionError\n\
         AF_NETLINK EPERM PermissionError\nAF_PACKET EPERM PermissionError\n\
         socketpair ping\nunix pong\n",
        "{done:?}"
    );
}

#[test]
fn seccomp_denies_host_facing_calls_and_keeps_threads_and_subprocesses() {
    require_root!();
    let fx = Fixture::new(4);
    let done = fx.run(
        r#"
import ctypes, errno, os, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(label, fn):
    ctypes.set_errno(0)
    ret = fn()
    print(label, ret, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
call("unshare", lambda: libc.unshare(0x10000000))
call("clone3", lambda: libc.syscall(435, None, 0))
call("ptrace", lambda: libc.ptrace(0, 0, None, None))
call("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
call("setns", lambda: libc.setns(0, 0))
call("bpf", lambda: libc.syscall(321, 0, None, 0))
call("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0, 0))
call("personality", lambda: libc.personality(0xffffffff))
call("x32-getpid", lambda: libc.syscall(0x40000000 | 39))
t = threading.Thread(target=lambda: print("thread ran"))
t.start(); t.join()
out = subprocess.run([sys.executable, "-I", "-c", "import os; print(os.getpid() > 1)"], capture_output=True, text=True)
print("subprocess", out.returncode, out.stdout.strip())
pid = os.fork()
if pid == 0:
    os._exit(3)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    assert_eq!(
        done.stdout,
        "unshare -1 EPERM\nclone3 -1 ENOSYS\nptrace -1 EPERM\nmount -1 EPERM\n\
         setns -1 EPERM\nbpf -1 EPERM\nkeyctl -1 EPERM\npersonality -1 EPERM\n\
         x32-getpid -1 ENOSYS\nthread ran\nsubprocess 0 True\nfork 3\n",
        "{done:?}"
    );
}

/// fd 3 (the protocol socket the runtime dup2's in its own `pre_exec`)
/// reaches the program; a host descriptor opened without `O_CLOEXEC` does not.
#[test]
fn only_stdio_and_fd_3_are_inherited() {
    require_root!();
    let fx = Fixture::new(14);
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "secret").unwrap();
    let path = std::ffi::CString::new(secret.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: opening a file we own; closed below.
    let leaked = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(leaked > 3);
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let code = format!(
        "import os\nos.write(3, b'hello')\ntry:\n    print(os.read({leaked}, 6))\nexcept OSError as e:\n    print(e.strerror)"
    );
    let prepared = Arc::new(Prepared::new(&fx.policy).unwrap());
    let in_child = Arc::clone(&prepared);
    let theirs_fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
    let hook = move || {
        // SAFETY: dup2 in the forked child, as the runtime does for fd 3.
        if unsafe { libc::dup2(theirs_fd, 3) } != 3 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pre_exec runs this in the forked, single-threaded child.
        unsafe { in_child.enter() }
    };
    let mut command = Command::new(&python().executable);
    command.args(["-I", "-c", &code]).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: the hook only makes syscalls and calls `Prepared::enter`.
    unsafe { command.pre_exec(hook) };
    let child = command.spawn().unwrap();
    drop(theirs);
    let done = finish(child);
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(leaked) };
    assert!(done.status.success(), "{done:?}");
    assert_eq!(done.stdout, "Bad file descriptor\n", "{done:?}");
    let mut got = String::new();
    ours.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hello");
}

#[test]
fn exit_code_is_mirrored() {
    require_root!();
    let fx = Fixture::new(5);
    let done = fx.run("import os; os._exit(7)");
    assert_eq!(done.status.code(), Some(7), "{done:?}");
}

#[test]
fn fatal_signal_is_mirrored() {
    require_root!();
    let fx = Fixture::new(6);
    let done = fx.run("import ctypes; ctypes.string_at(0)");
    assert_eq!(done.status.signal(), Some(libc::SIGSEGV), "{done:?}");
}

/// PID 1 of a namespace ignores signals without a handler that come from
/// inside its namespace, SIGKILL included: the program carries on.
#[test]
fn pid_1_survives_its_own_sigkill() {
    require_root!();
    let fx = Fixture::new(7);
    let done =
        fx.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL); print('alive', flush=True); os._exit(5)");
    assert_eq!(done.status.code(), Some(5), "{done:?}");
    assert_eq!(done.stdout, "alive\n");
}

#[test]
fn double_forked_daemon_dies_with_the_interpreter() {
    require_root!();
    let fx = Fixture::new(8);
    let marker = marker("daemon");
    let done = fx.run(&spawn_daemon_code(&marker));
    assert!(done.status.success(), "{done:?}");
    assert_eq!(done.stdout, "ready\n", "{done:?}");
    assert!(fx.run.path().join("ready").exists());
    assert_no_process_with(&marker);
}

#[test]
fn killing_the_process_group_kills_the_whole_namespace() {
    require_root!();
    let fx = Fixture::new(9);
    let marker = marker("group");
    let code = format!("{}\nimport time\ntime.sleep(300)\n", spawn_daemon_code(&marker));
    let (mut command, prepared) = fx.python(&code);
    command.process_group(0);
    let child = command.spawn().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    let pgid = child.id() as i32;
    let ready = fx.run.path().join("ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the daemon never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!processes_with(&marker).is_empty());
    // SAFETY: signalling a process group we created.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGTERM) }, 0);
    let done = finish(child);
    assert_eq!(done.status.signal(), Some(libc::SIGTERM), "{done:?}");
    assert_no_process_with(&marker);
}

/// What the host sees of a running interpreter: the run uid, no
/// capabilities, no_new_privs, two seccomp filters, PID 1 of its own PID
/// namespace, and six namespaces of its own. SIGKILL on the supervisor
/// takes it down.
#[test]
fn host_sees_a_confined_interpreter() {
    require_root!();
    let fx = Fixture::new(13);
    let marker = marker("confined");
    let exe = python().executable.clone();
    let (mut command, prepared) =
        fx.command(&exe, &["-I", "-c", "import time; open('ready', 'w').close(); time.sleep(300)", &marker]);
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    let ready = fx.run.path().join("ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the interpreter never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let pid = pids[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{name} missing from {status}"))
    };
    let uid = fx.policy.uid;
    assert_eq!(field("Uid"), format!("{uid} {uid} {uid} {uid}"));
    assert_eq!(field("Gid"), format!("{uid} {uid} {uid} {uid}"));
    assert_eq!(field("Groups"), "");
    assert_eq!(field("CapEff"), "0000000000000000");
    assert_eq!(field("CapPrm"), "0000000000000000");
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    assert_eq!(field("Seccomp_filters"), "2");
    assert_eq!(field("NSpid"), format!("{pid} 1"));
    assert_eq!(field("PPid"), child.id().to_string());
    for ns in ["user", "pid", "net", "mnt", "ipc", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(theirs, ours, "{ns} namespace is shared with the host");
    }
    child.kill().unwrap();
    let done = finish(child);
    assert_eq!(done.status.signal(), Some(libc::SIGKILL), "{done:?}");
    assert_no_process_with(&marker);
}

#[test]
fn spawn_returns_when_exec_fails() {
    require_root!();
    let fx = Fixture::new(10);
    let (mut command, prepared) = fx.command(Path::new("/nonexistent/python3"), &["-I"]);
    let started = Instant::now();
    let err = command.spawn().expect_err("exec of a missing file");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(matches!(prepared.explain_spawn_error(err), SandboxError::Spawn(_)));
}

#[test]
fn spawn_reports_which_step_failed() {
    require_root!();
    let mut fx = Fixture::new(11);
    let vanishing = tempfile::Builder::new().prefix("pycage-vanish-").tempdir().unwrap();
    let vanishing_path = vanishing.path().to_path_buf();
    fx.policy.read_only.push(vanishing_path.clone());
    let (mut command, prepared) = fx.python("pass");
    drop(vanishing);
    let started = Instant::now();
    let err = command.spawn().expect_err("bind of a removed directory");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    match prepared.explain_spawn_error(err) {
        SandboxError::Child(failure) => {
            assert_eq!(failure.step, Step::BindMount);
            assert_eq!(failure.path, Some(vanishing_path));
            assert_eq!(failure.errno, libc::ENOENT);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn process_and_file_size_limits_apply() {
    require_root!();
    let mut fx = Fixture::new(12);
    fx.policy.max_processes = 1;
    fx.policy.max_file_bytes = 1024;
    fx.policy.max_open_files = 32;
    let done = fx.run(
        r#"
import errno, os, resource
try:
    os.fork()
    print("fork allowed")
except OSError as e:
    print("fork", errno.errorcode[e.errno])
try:
    with open("big", "wb") as f:
        f.write(b"x" * 4096)
    print("big write allowed")
except OSError as e:
    print("write", errno.errorcode[e.errno])
print("nofile", resource.getrlimit(resource.RLIMIT_NOFILE))
print("core", resource.getrlimit(resource.RLIMIT_CORE))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    assert_eq!(done.stdout, "fork EAGAIN\nwrite EFBIG\nnofile (32, 32)\ncore (0, 0)\n", "{done:?}");
}

#[test]
fn probe_reports_every_layer() {
    require_root!();
    let availability = probe();
    assert_eq!(availability.missing(), Vec::<&str>::new(), "{availability:#?}");
    assert!(availability.landlock_abi.unwrap_or(0) >= 3, "{availability:#?}");
    assert!(!availability.cgroup_v2.supported);
    assert!(availability.cgroup_v2.reason.starts_with("not delegated"));
    for (name, layer) in availability.layers() {
        assert!(!layer.reason.is_empty(), "{name}");
    }
}

/// Rough start-up cost of the sandbox. Run with
/// `cargo test -p pycage-sandbox --test sandbox -- --ignored --nocapture timing`.
#[test]
#[ignore = "measurement, not an assertion"]
fn timing() {
    require_root!();
    const RUNS: usize = 15;
    fn median(mut samples: Vec<Duration>) -> Duration {
        samples.sort();
        samples[samples.len() / 2]
    }
    let exe = python().executable.clone();
    let cases: [(&str, &Path, &[&str]); 3] = [
        ("/usr/bin/true", Path::new("/usr/bin/true"), &[]),
        ("python3 -I -S -c pass", &exe, &["-I", "-S", "-c", "pass"]),
        ("python3 -I -c pass", &exe, &["-I", "-c", "pass"]),
    ];
    let mut prepare = Vec::new();
    for (label, program, args) in cases {
        let mut bare = Vec::new();
        let mut sandboxed = Vec::new();
        for i in 0..RUNS {
            let started = Instant::now();
            let status = Command::new(program).args(args).env_clear().status().unwrap();
            assert!(status.success());
            bare.push(started.elapsed());

            let fx = Fixture::new(100 + i as u32);
            let started = Instant::now();
            let (mut command, _prepared) = fx.command(program, args);
            prepare.push(started.elapsed());
            let out = command.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            sandboxed.push(started.elapsed());
        }
        let min_bare = bare.iter().min().copied().unwrap_or_default();
        let min_sandboxed = sandboxed.iter().min().copied().unwrap_or_default();
        eprintln!(
            "{label}: bare median {:?} (min {min_bare:?}), sandboxed median {:?} (min {min_sandboxed:?}; includes Prepared::new)",
            median(bare),
            median(sandboxed)
        );
    }
    eprintln!("Prepared::new median {:?}", median(prepare));
}
