//! End-to-end tests: real `python3 -I` children spawned through
//! `std::process::Command` + `pre_exec(Prepared::enter)`.
//!
//! They run as whoever runs the tests: as root, each run gets its own host
//! uid; as any other user, the run is mapped to that user's uid through an
//! unprivileged user namespace. When run as root, `tests_pass_as_an_
//! unprivileged_user` also re-runs every other test of this file as
//! `nobody` (`setpriv --reuid 65534`) with `/usr/bin/python3`.
//!
//! When run as root, `tests_pass_with_a_root_template` re-runs every other
//! test with each root cloned from a [`RootTemplates`] template, as the
//! shell helper does, instead of built by the run.
//!
//! Each test uses its own uid, directories and marker, so they are safe to
//! run in parallel.

#![allow(clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pycage_sandbox::{
    default_devices, default_read_only_paths, probe, HostIds, Prepared, Remap, RootTemplates, SandboxError,
    SandboxPolicy, Step,
};

/// Set (by `tests_pass_with_a_root_template`): every run's root is cloned
/// from a template of its policy.
const TEMPLATE_ENV: &str = "PYCAGE_TEST_ROOT_TEMPLATE";

/// The templates of this test process, as a shell helper keeps them.
fn templates() -> &'static Mutex<RootTemplates> {
    static TEMPLATES: OnceLock<Mutex<RootTemplates>> = OnceLock::new();
    TEMPLATES.get_or_init(|| Mutex::new(RootTemplates::new()))
}

/// The longest any sandboxed test program may run before the test kills it
/// and fails (a hang is a bug, never a pass).
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// First uid used by these tests on a root host; each test adds its own offset.
const UID_BASE: u32 = 3_100_000;

/// Where the tests expose the interpreter's prefix when it is not a system one.
const NEUTRAL_PREFIX: &str = "/opt/python";

/// The interpreter as the host sees it and as the sandbox shows it.
struct Python {
    /// Host path of the real executable.
    executable: PathBuf,
    /// The executable as the sandbox shows it.
    inside: PathBuf,
    /// The prefix remapped to [`NEUTRAL_PREFIX`], if any.
    remap: Option<Remap>,
    /// Extra environment (the loader path of a remapped prefix).
    env: Vec<(String, String)>,
}

fn python() -> &'static Python {
    static PYTHON: OnceLock<Python> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let python = std::env::var("PYCAGE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = Command::new(&python)
            .args(["-I", "-c", "import sys; print(sys.executable); print(sys.prefix)"])
            .output()
            .expect("python3 on PATH");
        assert!(out.status.success(), "python3 probe failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines().map(PathBuf::from);
        let executable = lines.next().unwrap();
        let prefix = lines.next().unwrap();
        if prefix.starts_with("/usr") {
            return Python { inside: executable.clone(), executable, remap: None, env: Vec::new() };
        }
        let relative = executable.strip_prefix(&prefix).expect("the executable lies in its prefix");
        Python {
            inside: Path::new(NEUTRAL_PREFIX).join(relative),
            executable,
            remap: Some(Remap { host: prefix, inside: PathBuf::from(NEUTRAL_PREFIX) }),
            env: vec![("LD_LIBRARY_PATH".into(), format!("{NEUTRAL_PREFIX}/lib"))],
        }
    })
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// One sandboxed run's policy.
struct Fixture {
    policy: SandboxPolicy,
    /// Templates of this fixture's own (else, with [`TEMPLATE_ENV`], the
    /// process's).
    templates: Option<Arc<Mutex<RootTemplates>>>,
}

impl Fixture {
    fn new(uid_offset: u32) -> Fixture {
        let uid = UID_BASE + uid_offset;
        let policy = SandboxPolicy {
            read_only: default_read_only_paths(),
            remapped: python().remap.iter().cloned().collect(),
            devices: default_devices(),
            host_ids: is_root().then_some(HostIds { uid, gid: uid }),
            max_processes: 64,
            max_file_bytes: 64 << 20,
            max_open_files: 256,
            disk_bytes: 64 << 20,
            sysv_shm_bytes: 4 << 20,
            egress_port: None,
        };
        Fixture { policy, templates: None }
    }

    /// The uid the run's processes have on the host.
    fn host_uid(&self) -> u32 {
        self.policy.host_ids.map_or_else(|| rustix::process::geteuid().as_raw(), |ids| ids.uid)
    }

    fn command(&self, program: &Path, args: &[&str]) -> (Command, Arc<Prepared>) {
        let mut prepared = Prepared::new(&self.policy).expect("Prepared::new");
        let own = self.templates.as_deref();
        if let Some(templates) = own.or_else(|| std::env::var_os(TEMPLATE_ENV).map(|_| templates())) {
            let mut templates = templates.lock().unwrap();
            let attached = templates.attach(&mut prepared);
            assert!(attached, "no template: {:?} / {:?}", templates.unsupported(), templates.last_failure());
        }
        let prepared = Arc::new(prepared);
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("HOME", "/work")
            .env("TMPDIR", "/tmp")
            .env("LANG", "C.UTF-8")
            .env("PATH", "/usr/bin:/bin")
            .envs(python().env.iter().map(|(k, v)| (k, v)))
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
        self.command(&python().inside, &["-I", "-c", code])
    }

    /// Run `code` in the sandbox to completion.
    fn run(&self, code: &str) -> Finished {
        let (mut command, prepared) = self.python(code);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(err) => panic!("spawn failed: {}", prepared.explain_spawn_error(err)),
        };
        let mut done = finish(child);
        done.handoff = prepared.take_handoff();
        done
    }
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    handoff: Option<pycage_sandbox::Handoff>,
}

impl Finished {
    /// A file the program left in its working directory, read after the run.
    fn work_file(&self, name: &str) -> Option<String> {
        let work = &self.handoff.as_ref()?.work_dir;
        read_at(work, name)
    }
}

fn read_at(dir: &OwnedFd, name: &str) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut text = String::new();
    std::fs::File::from(fd).read_to_string(&mut text).ok()?;
    Some(text)
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
    Finished { status, stdout: out.join().unwrap(), stderr: err.join().unwrap(), handoff: None }
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
/// and waits until it runs (it touches `ready` in the working directory).
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

/// Wait (bounded) until the run's working directory holds `name`.
fn wait_for_work_file(prepared: &Prepared, name: &str) -> pycage_sandbox::Handoff {
    let deadline = Instant::now() + Duration::from_secs(30);
    let handoff = loop {
        if let Some(h) = prepared.take_handoff() {
            break h;
        }
        assert!(Instant::now() < deadline, "no handoff from the supervisor");
        std::thread::sleep(Duration::from_millis(10));
    };
    while read_at(&handoff.work_dir, name).is_none() {
        assert!(Instant::now() < deadline, "{name} never appeared in the working directory");
        std::thread::sleep(Duration::from_millis(10));
    }
    handoff
}

#[test]
fn runs_as_uid_1000_pid_2_in_a_small_real_linux() {
    let fx = Fixture::new(1);
    let done = fx.run(
        r#"
import json, os, pwd, grp, socket, subprocess, sys
procs = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
    "user": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name,
    "pid": os.getpid(), "ppid": os.getppid(), "procs": procs, "cwd": os.getcwd(),
    "home": os.path.expanduser("~"), "root": sorted(os.listdir("/")),
    "etc": sorted(os.listdir("/etc")), "dev": sorted(os.listdir("/dev")),
    "hostname": socket.gethostname(), "cpus": os.cpu_count() > 0,
    "self_status": open("/proc/self/status").read().startswith("Name:"),
    "sh": subprocess.run(["/bin/sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True).stdout.strip(),
    "prefix": sys.prefix, "modes": [oct(os.stat(d).st_mode & 0o7777) for d in ("/work", "/tmp", "/dev/shm")],
}))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    let value: serde_like::Value = serde_like::parse(done.stdout.trim());
    assert_eq!(value.get("ids"), "[1000, 1000, 1000, 1000]", "{done:?}");
    assert_eq!(value.get("user"), "\"pycage\"");
    assert_eq!(value.get("group"), "\"pycage\"");
    assert_eq!(value.get("pid"), "2", "the program is not PID 1: {done:?}");
    assert_eq!(value.get("ppid"), "1");
    // The init process (PID 1) is hidden; the sh of the probe has exited.
    assert_eq!(value.get("procs"), "[2]", "{done:?}");
    assert_eq!(value.get("cwd"), "\"/work\"");
    assert_eq!(value.get("home"), "\"/work\"");
    let root = value.get("root");
    for entry in ["\"bin\"", "\"dev\"", "\"etc\"", "\"proc\"", "\"tmp\"", "\"usr\"", "\"work\""] {
        assert!(root.contains(entry), "{entry} missing from / = {root}");
    }
    for entry in ["\"root\"", "\"home\"", "\"sys\"", "\"var\""] {
        assert!(!root.contains(entry), "{entry} in / = {root}");
    }
    // The generated files, and what of the host's /etc the defaults show
    // (those of them that exist here).
    let mut etc: Vec<String> = ["group", "hostname", "hosts", "nsswitch.conf", "passwd"].map(String::from).to_vec();
    etc.extend(pycage_sandbox::default_read_only_paths().iter().filter_map(|p| {
        p.strip_prefix("/etc").ok().filter(|rest| rest.components().count() == 1).map(|rest| rest.display().to_string())
    }));
    etc.sort();
    let listed: Vec<String> = etc.iter().map(|e| format!("{e:?}")).collect();
    assert_eq!(value.get("etc"), format!("[{}]", listed.join(", ")));
    assert_eq!(
        value.get("dev"),
        "[\"fd\", \"null\", \"random\", \"shm\", \"stderr\", \"stdin\", \"stdout\", \"urandom\", \"zero\"]"
    );
    assert_eq!(value.get("hostname"), "\"pycage\"");
    assert_eq!(value.get("cpus"), "true");
    assert_eq!(value.get("self_status"), "true");
    assert_eq!(value.get("sh"), "\"42\"");
    assert_eq!(value.get("modes"), "[\"0o700\", \"0o1777\", \"0o1777\"]");
    if python().remap.is_some() {
        assert_eq!(value.get("prefix"), format!("\"{NEUTRAL_PREFIX}\""));
    }
}

/// A tiny reader for the flat JSON objects the programs above print (the
/// sandbox crate has no JSON dependency): `get` returns a field's raw text.
mod serde_like {
    pub struct Value(Vec<(String, String)>);

    pub fn parse(text: &str) -> Value {
        let inner = text.trim().strip_prefix('{').and_then(|t| t.strip_suffix('}')).expect("an object");
        let mut fields = Vec::new();
        let (mut depth, mut in_string, mut escaped, mut start) = (0i32, false, false, 0usize);
        let bytes = inner.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match (in_string, escaped, b) {
                (true, true, _) => escaped = false,
                (true, false, b'\\') => escaped = true,
                (true, false, b'"') => in_string = false,
                (false, _, b'"') => in_string = true,
                (false, _, b'[' | b'{') => depth += 1,
                (false, _, b']' | b'}') => depth -= 1,
                (false, _, b',') if depth == 0 => {
                    fields.push(inner[start..i].to_string());
                    start = i + 1;
                }
                _ => {}
            }
        }
        fields.push(inner[start..].to_string());
        Value(
            fields
                .iter()
                .map(|f| {
                    let (k, v) = f.split_once(':').expect("key: value");
                    (k.trim().trim_matches('"').to_string(), v.trim().to_string())
                })
                .collect(),
        )
    }

    impl Value {
        pub fn get(&self, key: &str) -> String {
            self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("no {key}"))
        }
    }
}

#[test]
fn file_access_is_limited_to_the_exposed_paths() {
    let fx = Fixture::new(2);
    let canary_dir = tempfile::Builder::new().prefix("pycage-canary-").tempdir().unwrap();
    let canary = canary_dir.path().join("canary.txt");
    std::fs::write(&canary, "secret").unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(canary_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let code = format!(
        r#"
import os, sys
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
attempt("read-shadow", lambda: open("/etc/shadow").read())
attempt("read-stdlib", lambda: open(os.__file__).read())
attempt("write-work", lambda: write("inside.txt"))
attempt("write-tmp", lambda: write("/tmp/inside.txt"))
attempt("write-prefix", lambda: write(sys.prefix + "/pycage-probe"))
attempt("write-etc", lambda: write("/etc/passwd"))
attempt("write-root", lambda: write("/pycage-probe"))
attempt("mkdir-usr", lambda: os.mkdir("/usr/pycage-probe"))
attempt("write-proc-sys", lambda: write("/proc/sys/kernel/shmmax"))
attempt("write-dev-null", lambda: write("/dev/null"))
"#,
        canary = canary.display().to_string(),
    );
    let done = fx.run(&code);
    assert!(done.status.success(), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 11, "{done:?}");
    assert_eq!(lines[0], "read-canary FileNotFoundError", "{done:?}");
    assert_eq!(lines[1], "read-shadow FileNotFoundError", "{done:?}");
    assert_eq!(lines[2], "read-stdlib ok", "{done:?}");
    assert_eq!(lines[3], "write-work ok", "{done:?}");
    assert_eq!(lines[4], "write-tmp ok", "{done:?}");
    for line in &lines[5..10] {
        // EROFS is a plain OSError; Landlock says PermissionError.
        assert!(line.ends_with("PermissionError") || line.ends_with(" OSError"), "{line} in {done:?}");
    }
    assert_eq!(lines[10], "write-dev-null ok", "{done:?}");
    assert_eq!(done.work_file("inside.txt").as_deref(), Some("x"), "the host reads the run's files afterwards");
    assert!(!python().executable.parent().unwrap().parent().unwrap().join("pycage-probe").exists());
}

#[test]
fn only_unix_sockets_are_allowed() {
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

/// With `egress_port`, the host holds a socket listening on the run's own
/// loopback: the program's connection to it is accepted by the host, and
/// it stays the program's only way out.
#[test]
fn the_egress_listener_is_the_only_way_out() {
    let mut fx = Fixture::new(19);
    fx.policy.egress_port = Some(3128);
    let (mut command, prepared) = fx.python(
        r#"
import errno, socket
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"ping")
print("proxy", s.recv(4).decode())
print("other port", attempt(lambda: socket.create_connection(("127.0.0.1", 80), timeout=5)))
print("elsewhere", attempt(lambda: socket.create_connection(("192.0.2.1", 3128), timeout=5)))
print("udp", attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))
print("raw", attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))
print("ipv6", attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)))
print("bind", attempt(lambda: socket.socket().bind(("127.0.0.1", 8080))))
"#,
    );
    let child = command.spawn().unwrap_or_else(|e| panic!("spawn failed: {}", prepared.explain_spawn_error(e)));
    // The program is exec'd only after the handoff: it is here now.
    let handoff = prepared.take_handoff().expect("handoff");
    let listener = std::net::TcpListener::from(handoff.egress.expect("the egress listener"));
    assert_eq!(listener.local_addr().unwrap().to_string(), "127.0.0.1:3128");
    let (mut conn, _) = listener.accept().unwrap();
    let mut ping = [0u8; 4];
    std::io::Read::read_exact(&mut conn, &mut ping).unwrap();
    assert_eq!(&ping, b"ping");
    std::io::Write::write_all(&mut conn, b"pong").unwrap();
    let done = finish(child);
    assert!(done.status.success(), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some("proxy pong"), "{done:?}");
    // Landlock ABI 4+ (Linux 6.7) refuses any other TCP port (without it,
    // nothing listens there); the proxy's port elsewhere has no route.
    assert!(matches!(lines.get(1).copied(), Some("other port EACCES" | "other port ECONNREFUSED")), "{done:?}");
    assert_eq!(lines.get(2).copied(), Some("elsewhere ENETUNREACH"), "{done:?}");
    assert_eq!(lines.get(3..6), Some(&["udp EPERM", "raw EPERM", "ipv6 EPERM"][..]), "{done:?}");
    assert!(matches!(lines.get(6).copied(), Some("bind EACCES" | "bind ok")), "{done:?}");
    // Without egress there is no listener, and no TCP at all.
    let done = Fixture::new(19).run("import socket\nsocket.socket()");
    assert!(done.handoff.as_ref().is_some_and(|h| h.egress.is_none()), "{done:?}");
    assert!(done.stderr.contains("PermissionError"), "{done:?}");
}

#[test]
fn seccomp_denies_host_facing_calls_and_keeps_threads_and_subprocesses() {
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
call("personality-query", lambda: libc.personality(0xffffffff))
call("personality", lambda: libc.personality(0x0400000))
call("memfd_create", lambda: libc.memfd_create(b"x", 0))
call("modify_ldt", lambda: libc.syscall(154, 0, None, 0))
call("open_tree_attr", lambda: libc.syscall(467, -100, b"/", 1, None, 0))
call("x32-getpid", lambda: libc.syscall(0x40000000 | 39))
t = threading.Thread(target=lambda: print("thread ran"))
t.start(); t.join()
out = subprocess.run([sys.executable, "-I", "-c", "import os; print(os.getpid() > 2)"], capture_output=True, text=True)
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
         setns -1 EPERM\nbpf -1 EPERM\nkeyctl -1 EPERM\npersonality-query 0 0\npersonality -1 EPERM\n\
         memfd_create -1 ENOSYS\nmodify_ldt -1 EPERM\nopen_tree_attr -1 EPERM\n\
         x32-getpid -1 ENOSYS\nthread ran\nsubprocess 0 True\nfork 3\n",
        "{done:?}"
    );
}

/// What CPython's standard library needs works under the allow list.
#[test]
fn a_representative_stdlib_workload_runs() {
    let fx = Fixture::new(15);
    let done = fx.run(
        r#"
import asyncio, ctypes, mmap, multiprocessing, os, select, signal, sqlite3, ssl, subprocess, sys, tempfile, threading, time

def square(n):
    return n * n

async def main():
    proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", "echo async", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    await asyncio.sleep(0.01)
    return out.decode().strip()

if __name__ == "__main__":
    results = []
    results.append(subprocess.run(["/bin/sh", "-c", "echo sh; ls / >/dev/null"], capture_output=True, text=True, check=True).stdout.strip())
    box = []
    threads = [threading.Thread(target=box.append, args=(i,)) for i in range(8)]
    [t.start() for t in threads]; [t.join() for t in threads]
    results.append(sorted(box) == list(range(8)))
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results.append(pool.map(square, range(5)))
    spawned = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0.01,))
    spawned.start(); spawned.join()
    results.append(spawned.exitcode)
    lock = multiprocessing.Lock()
    with lock:
        results.append("lock")
    db = sqlite3.connect(":memory:")
    db.execute("create table t (x)"); db.executemany("insert into t values (?)", [(1,), (2,)])
    results.append(db.execute("select sum(x) from t").fetchone()[0])
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"abc"); f.flush()
        results.append(os.path.dirname(f.name))
        with mmap.mmap(f.fileno(), 3) as m:
            results.append(m[:].decode())
    anon = mmap.mmap(-1, 1 << 20); anon[0] = 1; results.append(anon[0])
    results.append(asyncio.run(main()))
    r, w = os.pipe(); os.write(w, b"x")
    results.append(select.select([r], [], [], 1)[0] == [r])
    ep = select.epoll(); ep.register(r, select.EPOLLIN); results.append(len(ep.poll(1)))
    signal.signal(signal.SIGUSR1, lambda *a: results.append("sig")); os.kill(os.getpid(), signal.SIGUSR1)
    results.append(ssl.create_default_context().protocol > 0)
    results.append(ctypes.CDLL(None).getpid() == os.getpid())
    results.append(time.monotonic() > 0 and time.time() > 1e9)
    results.append(os.cpu_count() > 0 and len(os.sched_getaffinity(0)) > 0)
    import multiprocessing.shared_memory as sm
    block = sm.SharedMemory(create=True, size=4096); block.buf[0] = 9; results.append(block.buf[0]); block.close(); block.unlink()
    print(results)
"#,
    );
    assert!(done.status.success(), "{done:?}");
    assert_eq!(
        done.stdout.trim(),
        "['sh', True, [0, 1, 4, 9, 16], 0, 'lock', 3, '/tmp', 'abc', 1, 'async', True, 1, 'sig', True, True, True, True, 9]",
        "{done:?}"
    );
}

/// The run's files share one size-capped tmpfs; SysV shared memory is
/// capped by the IPC namespace; `memfd_create` does not exist.
#[test]
fn disk_and_shared_memory_are_bounded() {
    let mut fx = Fixture::new(16);
    fx.policy.disk_bytes = 8 << 20;
    fx.policy.max_file_bytes = 4 << 30;
    fx.policy.sysv_shm_bytes = 1 << 20;
    let done = fx.run(
        r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
out = []
def attempt(label, fn):
    try:
        fn()
        out.append(label + " ok")
    except OSError as e:
        out.append(label + " " + errno.errorcode[e.errno])
def fill(path, n):
    with open(path, "wb") as f:
        f.write(b"x" * n)
def check(ret):
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt("work 4M", lambda: fill("/work/a", 4 << 20))
attempt("tmp 3M", lambda: fill("/tmp/b", 3 << 20))
attempt("shm 2M", lambda: fill("/dev/shm/c", 2 << 20))
for path in ("/work/a", "/tmp/b", "/dev/shm/c"):
    os.unlink(path)
fd = os.open("/tmp/sparse", os.O_CREAT | os.O_WRONLY, 0o600)
attempt("fallocate keep-size 1G", lambda: check(libc.fallocate(fd, 1, 0, 1 << 30)))
attempt("ftruncate 1G", lambda: os.ftruncate(fd, 1 << 30))
attempt("write 16M at 900M", lambda: check(0 if os.pwrite(fd, b"x" * (16 << 20), 900 << 20) == 16 << 20 else errno.ENOSPC))
os.close(fd)
os.unlink("/tmp/sparse")
names = 0
try:
    while names < 100000:
        open(f"/tmp/n{names}", "w").close()
        names += 1
except OSError as e:
    out.append("inodes " + errno.errorcode[e.errno])
out.append("files<=1024 " + str(names <= 1024))
attempt("sysv 512K", lambda: check(0 if libc.shmget(0, 512 << 10, 0o1600) >= 0 else 1))
attempt("sysv 2M", lambda: check(0 if libc.shmget(0, 2 << 20, 0o1600) >= 0 else 1))
attempt("memfd", lambda: os.memfd_create("x"))
out.append("shmmax " + open("/proc/sys/kernel/shmmax").read().strip())
print("\n".join(out))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    assert_eq!(
        done.stdout,
        "work 4M ok\ntmp 3M ok\nshm 2M ENOSPC\nfallocate keep-size 1G ENOSPC\nftruncate 1G ok\n\
         write 16M at 900M ENOSPC\ninodes ENOSPC\nfiles<=1024 True\nsysv 512K ok\nsysv 2M EINVAL\n\
         memfd ENOSYS\nshmmax 1048576\n",
        "{done:?}"
    );
}

/// fd 3 (the protocol socket the runtime dup2's in its own `pre_exec`)
/// reaches the program; a host descriptor opened without `O_CLOEXEC` does not.
#[test]
fn only_stdio_and_fd_3_are_inherited() {
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
    let mut command = Command::new(&python().inside);
    command
        .args(["-I", "-c", &code])
        .env_clear()
        .envs(python().env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    let fx = Fixture::new(5);
    let done = fx.run("import os; os._exit(7)");
    assert_eq!(done.status.code(), Some(7), "{done:?}");
}

#[test]
fn fatal_signal_is_mirrored() {
    let fx = Fixture::new(6);
    let done = fx.run("import ctypes; ctypes.string_at(0)");
    assert_eq!(done.status.signal(), Some(libc::SIGSEGV), "{done:?}");
}

/// The program is not its namespace's init: a SIGKILL to itself ends it,
/// as anywhere else.
#[test]
fn the_program_dies_of_its_own_sigkill() {
    let fx = Fixture::new(7);
    let done =
        fx.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL); print('alive', flush=True); os._exit(5)");
    assert_eq!(done.status.signal(), Some(libc::SIGKILL), "{done:?}");
    assert_eq!(done.stdout, "");
}

#[test]
fn double_forked_daemon_dies_with_the_program() {
    let fx = Fixture::new(8);
    let marker = marker("daemon");
    let done = fx.run(&spawn_daemon_code(&marker));
    assert!(done.status.success(), "{done:?}");
    assert_eq!(done.stdout, "ready\n", "{done:?}");
    assert_eq!(done.work_file("ready").as_deref(), Some(""));
    assert_no_process_with(&marker);
}

#[test]
fn killing_the_process_group_kills_the_whole_namespace() {
    let fx = Fixture::new(9);
    let marker = marker("group");
    let code = format!("{}\nimport time\ntime.sleep(300)\n", spawn_daemon_code(&marker));
    let (mut command, prepared) = fx.python(&code);
    command.process_group(0);
    let child = command.spawn().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    let pgid = child.id() as i32;
    let _handoff = wait_for_work_file(&prepared, "ready");
    assert!(!processes_with(&marker).is_empty());
    // SAFETY: signalling a process group we created.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGTERM) }, 0);
    let done = finish(child);
    assert_eq!(done.status.signal(), Some(libc::SIGTERM), "{done:?}");
    assert_no_process_with(&marker);
}

/// What the host sees of a running program: the run's host uid, no
/// capabilities at all, no_new_privs, one seccomp filter, PID 2 of its own
/// PID namespace under the init the handoff names, and six namespaces of
/// its own. SIGKILL on the supervisor takes it down.
#[test]
fn host_sees_a_confined_program() {
    let fx = Fixture::new(13);
    let marker = marker("confined");
    let exe = python().inside.clone();
    let (mut command, prepared) =
        fx.command(&exe, &["-I", "-c", "import time; open('ready', 'w').close(); time.sleep(300)", &marker]);
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    let handoff = wait_for_work_file(&prepared, "ready");
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
    let uid = fx.host_uid();
    assert_eq!(field("Uid"), format!("{uid} {uid} {uid} {uid}"));
    if is_root() {
        assert_eq!(field("Gid"), format!("{uid} {uid} {uid} {uid}"));
        assert_eq!(field("Groups"), "");
    }
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(set), "0000000000000000", "{set}");
    }
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("Seccomp"), "2");
    assert_eq!(field("Seccomp_filters"), "1", "the whole policy is one program");
    assert_eq!(field("NSpid"), format!("{pid} 2"));
    assert_eq!(field("PPid"), handoff.init_pid.as_raw_nonzero().to_string());
    let init_status = std::fs::read_to_string(format!("/proc/{}/status", handoff.init_pid.as_raw_nonzero())).unwrap();
    assert!(init_status.contains(&format!("PPid:\t{}", child.id())), "{init_status}");
    // The init holds no capability once it has forked the program (it drops
    // them right after the fork; its bounding set stays, as it never execs).
    let held = ["CapInh", "CapPrm", "CapEff", "CapAmb"];
    let holds_none = |status: &str| {
        held.iter().all(|set| status.lines().any(|l| l.starts_with(&format!("{set}:\t0000000000000000"))))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut init_status = init_status;
    while !holds_none(&init_status) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        init_status = std::fs::read_to_string(format!("/proc/{}/status", handoff.init_pid.as_raw_nonzero())).unwrap();
    }
    assert!(holds_none(&init_status), "{init_status}");
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
    let mut fx = Fixture::new(11);
    let vanishing = tempfile::Builder::new().prefix("pycage-vanish-").tempdir().unwrap();
    std::fs::set_permissions(vanishing.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let vanishing_path = vanishing.path().to_path_buf();
    fx.policy.read_only.push(vanishing_path.clone());
    let (mut command, prepared) = fx.python("pass");
    drop(vanishing);
    let started = Instant::now();
    let err = command.spawn().expect_err("clone of a removed directory");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    match prepared.explain_spawn_error(err) {
        SandboxError::Child(failure) => {
            assert_eq!(failure.step, Step::CloneMount);
            assert_eq!(failure.path, Some(vanishing_path));
            assert_eq!(failure.errno, libc::ENOENT);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn process_and_file_size_limits_apply() {
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
    let availability = probe();
    assert_eq!(availability.missing(), Vec::<&str>::new(), "{availability:#?}");
    assert!(availability.landlock_abi.unwrap_or(0) >= 3, "{availability:#?}");
    for (name, layer) in availability.layers() {
        assert!(!layer.reason.is_empty(), "{name}");
    }
}

/// As root, run every other test of this file again as `nobody`, with the
/// system interpreter (the default `python3` may live under `/root`).
#[test]
fn tests_pass_as_an_unprivileged_user() {
    if !is_root() {
        // Re-running as `nobody` needs root; CI runs as root and requires it.
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(&exe)
        // Root templates need root: their tests say so and fail under CI.
        .args(["--skip", "tests_pass_as_an_unprivileged_user", "--skip", "timing", "--skip", "root_template"])
        .args(["--test-threads", "2"])
        .env("PYCAGE_TEST_PYTHON", "/usr/bin/python3")
        .env("TMPDIR", "/tmp")
        .env("HOME", "/tmp")
        .output()
        .expect("setpriv (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "as nobody:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("test result: ok. "), "{stdout}");
    assert!(!stdout.contains(" 0 passed"), "{stdout}");
}

/// As root, run every other test of this file again with each run's root
/// cloned from a template (a kernel that cannot clone detached mounts,
/// before 6.15, has none: shells build their roots there).
#[test]
fn tests_pass_with_a_root_template() {
    if !is_root() || std::env::var_os(TEMPLATE_ENV).is_some() {
        // Templates need root; CI runs as root and requires it.
        assert!(is_root() || std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let mut templates = RootTemplates::new();
    let mut prepared = Prepared::new(&Fixture::new(40).policy).unwrap();
    if !templates.attach(&mut prepared) {
        let why = templates.unsupported().map(ToString::to_string);
        assert!(why.is_some(), "a template failed for its paths: {:?}", templates.last_failure());
        eprintln!("no root templates on this kernel ({why:?}): nothing to re-run");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(&exe)
        .args(["--skip", "tests_pass_as_an_unprivileged_user", "--skip", "timing", "--test-threads", "2"])
        .env(TEMPLATE_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "with a root template:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("test result: ok. "), "{stdout}");
    assert!(!stdout.contains(" 0 passed"), "{stdout}");
}

/// With kept plans (the shell helper's way), a template is checked against
/// its paths once per plan, and a path made again since (the same kind,
/// another inode) makes a new plan, under which the template is checked
/// again and built anew.
#[test]
fn a_kept_plans_root_template_is_built_again_when_a_path_is_made_again() {
    if !is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let base = tempfile::Builder::new().prefix("pycage-template-").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let venv = base.path().join("venv");
    std::fs::create_dir(&venv).unwrap();
    let mut fx = Fixture::new(44);
    fx.policy.read_only.push(venv.clone());
    let mut preparations = pycage_sandbox::Preparations::new();
    let mut templates = RootTemplates::new();
    let mut attach = |preparations: &mut pycage_sandbox::Preparations| {
        let mut prepared = preparations.prepare(&fx.policy).unwrap();
        let attached = templates.attach(&mut prepared);
        (attached, templates.built(), templates.unsupported().is_some())
    };
    let (attached, built, unsupported) = attach(&mut preparations);
    if !attached {
        assert!(unsupported, "a template failed for its paths");
        eprintln!("no root templates on this kernel: nothing to check");
        return;
    }
    assert_eq!(built, 1);
    assert_eq!(attach(&mut preparations), (true, 1, false));
    assert_eq!(preparations.resolved(), 1);
    std::fs::remove_dir(&venv).unwrap();
    std::fs::create_dir(&venv).unwrap();
    assert_eq!(attach(&mut preparations), (true, 2, false));
    assert_eq!(preparations.resolved(), 2);
    assert_eq!(attach(&mut preparations), (true, 2, false));
}

/// A template serves every run of its policy while its paths stay what
/// they were; a path replaced since (a venv made again) gets a new one, so
/// no run sees the old inode, and so does a file system mounted below an
/// exposed path. Entries in the run's own tmpfs (under `/tmp`) stay the
/// run's.
#[test]
fn a_root_template_follows_its_paths() {
    if !is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let base = tempfile::Builder::new().prefix("pycage-template-").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = base.path().join("venv");
    let make = |dir: &Path, text: &str| {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.join("version"), text).unwrap();
    };
    make(&shared, "one");
    let in_tmp = tempfile::Builder::new().prefix("pycage-template-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(in_tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(in_tmp.path().join("version"), "tmp").unwrap();
    let mut fx = Fixture::new(41);
    fx.policy.read_only.push(shared.clone());
    fx.policy.read_only.push(in_tmp.path().to_path_buf());
    let code = format!(
        r#"
import os
mounted = open({m:?}).read() if os.path.exists({m:?}) else "-"
print(open({v:?}).read(), open({t:?}).read(), mounted)
for path in ({v:?}, "/etc/pycage-probe", "/pycage-probe"):
    try:
        open(path, "w")
        print("wrote", path)
    except OSError:
        pass
"#,
        v = shared.join("version").display().to_string(),
        t = in_tmp.path().join("version").display().to_string(),
        m = shared.join("sub/mounted").display().to_string(),
    );
    let templates = Arc::new(Mutex::new(RootTemplates::new()));
    fx.templates = Some(Arc::clone(&templates));
    let run = || {
        let done = fx.run(&code);
        assert!(done.status.success(), "{done:?}");
        done.stdout
    };
    let built = || templates.lock().unwrap().built();
    assert_eq!(run(), "one tmp -\n");
    assert_eq!(run(), "one tmp -\n");
    assert_eq!(built(), 1, "the second run took the first one's template");
    // Replaced, as `python -m venv --clear` or a package manager does.
    let fresh = base.path().join("venv.new");
    make(&fresh, "two");
    std::fs::rename(&shared, base.path().join("venv.old")).unwrap();
    std::fs::rename(&fresh, &shared).unwrap();
    assert_eq!(run(), "two tmp -\n");
    assert_eq!(built(), 2, "a new template for the new inode");
    // A file changed in place is the same inode: the template shows it.
    std::fs::write(shared.join("version"), "three").unwrap();
    assert_eq!(run(), "three tmp -\n");
    assert_eq!(built(), 2);
    // A file system mounted below an exposed path since: the template's
    // recursive clone predates it, the mount table's change drops it.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }
    let sub = shared.join("sub");
    std::fs::create_dir(&sub).unwrap();
    rustix::mount::mount("tmpfs", &sub, "tmpfs", rustix::mount::MountFlags::empty(), c"size=64k,mode=0755").unwrap();
    let mounted = Unmount(sub.clone());
    std::fs::write(sub.join("mounted"), "yes").unwrap();
    assert_eq!(run(), "three tmp yes\n");
    assert_eq!(built(), 3, "a new template for the new mount");
    drop(mounted);
    assert_eq!(run(), "three tmp -\n");
    assert_eq!(built(), 4, "and again once it is gone");
}

/// The mounts a program sees are read-only where they should be, it can
/// neither remount nor unmount any of them, and the run's tmpfs staged
/// under `/proc` stays hidden.
#[test]
fn the_program_cannot_remount_or_unmount() {
    let fx = Fixture::new(42);
    let done = fx.run(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 1, 32, 4096, 2
def attempt(label, ret):
    print(label, "ok" if ret == 0 else os.strerror(ctypes.get_errno()))
attempt("remount-root-rw", libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None))
attempt("remount-usr-rw", libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None))
attempt("umount-usr", libc.umount2(b"/usr", MNT_DETACH))
attempt("umount-proc", libc.umount2(b"/proc", MNT_DETACH))
attempt("umount-root", libc.umount2(b"/", MNT_DETACH))
mounts = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts[fields[4]] = fields[5].split(",")[0]
print("root", mounts.get("/"), "usr", mounts.get("/usr"), "etc", mounts.get("/etc/passwd", "none"))
print("work", mounts.get("/work"), "tmp", mounts.get("/tmp"), "proc", mounts.get("/proc"))
at_proc = [line.split(" - ")[1].split()[0] for line in open("/proc/self/mountinfo") if line.split()[4] == "/proc"]
print("at /proc", *at_proc, os.path.exists("/proc/boot_id"), os.path.exists("/proc/work"))
"#,
    );
    assert!(done.status.success(), "{done:?}");
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{done:?}");
    for line in &lines[..5] {
        assert!(!line.ends_with(" ok"), "{line}: {done:?}");
    }
    assert_eq!(lines[5], "root ro usr ro etc none", "{done:?}");
    assert_eq!(lines[6], "work rw tmp rw proc rw", "{done:?}");
    // The run's tmpfs was staged on the root's `/proc` and stays there,
    // under procfs, which hides it: nothing of it shows through.
    assert_eq!(lines[7], "at /proc tmpfs proc False False", "{done:?}");
}

/// CPU per sandboxed `/usr/bin/true`, its root built by the run against
/// cloned from a template, in alternating blocks: this process's own
/// (`Prepared::new`, the template's check) and its children's (the
/// supervisor, init and program), from `getrusage`. Run as root with
/// `cargo test --release -p pycage-sandbox --test sandbox -- --ignored --nocapture --test-threads 1 template_cpu`.
#[test]
#[ignore = "measurement, not an assertion"]
fn template_cpu() {
    const BLOCK: u32 = 100;
    fn cpu(who: libc::c_int) -> Duration {
        // SAFETY: `usage` is a live rusage the kernel fills in.
        let usage = unsafe {
            let mut usage = std::mem::zeroed::<libc::rusage>();
            assert_eq!(libc::getrusage(who, &mut usage), 0);
            usage
        };
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
    }
    let mut fx = Fixture::new(60);
    let templates = Arc::new(Mutex::new(RootTemplates::new()));
    for round in 0..3 {
        // `PYCAGE_TEMPLATE_CPU=template` (or `built`): one kind only, to profile it.
        let only = std::env::var("PYCAGE_TEMPLATE_CPU").ok();
        for with_template in [false, true] {
            if only.as_deref().is_some_and(|only| (only == "template") != with_template) {
                continue;
            }
            fx.templates = with_template.then(|| Arc::clone(&templates));
            let (own, children) = (cpu(libc::RUSAGE_SELF), cpu(libc::RUSAGE_CHILDREN));
            let started = Instant::now();
            for _ in 0..BLOCK {
                let (mut command, _prepared) = fx.command(Path::new("/usr/bin/true"), &[]);
                let out = command.output().unwrap();
                assert!(out.status.success(), "{out:?}");
            }
            let own = cpu(libc::RUSAGE_SELF) - own;
            let children = cpu(libc::RUSAGE_CHILDREN) - children;
            eprintln!(
                "round {round} template {with_template}: per run own {:?} children {:?} wall {:?}",
                own / BLOCK,
                children / BLOCK,
                started.elapsed() / BLOCK
            );
        }
    }
}

/// Rough start-up cost of the sandbox. Run with
/// `cargo test -p pycage-sandbox --test sandbox -- --ignored --nocapture timing`.
#[test]
#[ignore = "measurement, not an assertion"]
fn timing() {
    const RUNS: usize = 15;
    fn median(mut samples: Vec<Duration>) -> Duration {
        samples.sort();
        samples[samples.len() / 2]
    }
    let cases: [(&str, &Path, &Path, &[&str]); 2] = [
        ("/usr/bin/true", Path::new("/usr/bin/true"), Path::new("/usr/bin/true"), &[]),
        ("python3 -I -c pass", &python().executable, &python().inside, &["-I", "-c", "pass"]),
    ];
    let mut prepare = Vec::new();
    for (label, host, inside, args) in cases {
        let mut bare = Vec::new();
        let mut sandboxed = Vec::new();
        for i in 0..RUNS {
            let started = Instant::now();
            let status = Command::new(host).args(args).env_clear().status().unwrap();
            assert!(status.success());
            bare.push(started.elapsed());

            let fx = Fixture::new(100 + i as u32);
            let started = Instant::now();
            let (mut command, _prepared) = fx.command(inside, args);
            prepare.push(started.elapsed());
            let out = command.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            sandboxed.push(started.elapsed());
        }
        eprintln!(
            "{label}: bare median {:?}, sandboxed median {:?} (includes Prepared::new)",
            median(bare),
            median(sandboxed)
        );
    }
    eprintln!("Prepared::new median {:?}", median(prepare));
}

/// The compiled filters as bytes, installed from Python with
/// `prctl(PR_SET_SECCOMP)` (as a zygote's child does): the same verdicts
/// as when the sandbox installs them.
#[test]
fn filter_bytes_install_from_python() {
    let filters = pycage_sandbox::seccomp::compile(pycage_sandbox::seccomp::native_arch().unwrap()).unwrap();
    let hex: Vec<String> = filters.to_bytes().iter().map(|b| b.iter().map(|x| format!("{x:02x}")).collect()).collect();
    let code = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
assert libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
keep = []
for text in sys.argv[1:]:
    raw = bytes.fromhex(text)
    buf = ctypes.create_string_buffer(raw, len(raw))
    keep.append(buf)
    prog = SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p))
    assert libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0, ctypes.get_errno()
def call(fn):
    ctypes.set_errno(0)
    r = fn()
    return errno.errorcode.get(ctypes.get_errno(), "ok") if r == -1 else "ok"
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    inet = "ok"
except OSError as e:
    inet = errno.errorcode[e.errno]
print(call(lambda: libc.ptrace(0, 0, None, None)), call(lambda: libc.memfd_create(b"x", 0)), inet, call(lambda: libc.getpid()))
"#;
    let out = Command::new(&python().executable).args(["-I", "-c", code]).args(&hex).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "EPERM ENOSYS EPERM ok\n");
}

/// With a cgroup, the supervisor joins it before anything else: it writes
/// "0" to the `cgroup.procs` descriptor the host opened. (No cgroup v2 is
/// delegated on the machines this runs on, so a plain file stands in for
/// `cgroup.procs`; a descriptor it cannot write fails the named step.)
#[test]
fn the_supervisor_joins_the_run_cgroup_first() {
    let fx = Fixture::new(17);
    let procs = tempfile::NamedTempFile::new().unwrap();
    let mut prepared = Prepared::new(&fx.policy).unwrap();
    prepared.join_cgroup(std::fs::OpenOptions::new().write(true).open(procs.path()).unwrap().into());
    let prepared = Arc::new(prepared);
    let in_child = Arc::clone(&prepared);
    let mut command = Command::new(&python().inside);
    command.args(["-I", "-c", "pass"]).env_clear().envs(python().env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the hook only calls `Prepared::enter`.
    unsafe { command.pre_exec(move || in_child.enter()) };
    let status = command.status().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(procs.path()).unwrap(), "0");

    let mut prepared = Prepared::new(&fx.policy).unwrap();
    prepared.join_cgroup(std::fs::File::open(procs.path()).unwrap().into());
    let prepared = Arc::new(prepared);
    let in_child = Arc::clone(&prepared);
    let mut command = Command::new(&python().inside);
    command.args(["-I", "-c", "pass"]).env_clear();
    // SAFETY: the hook only calls `Prepared::enter`.
    unsafe { command.pre_exec(move || in_child.enter()) };
    let err = command.spawn().expect_err("a read-only cgroup.procs");
    match prepared.explain_spawn_error(err) {
        SandboxError::Child(failure) => assert_eq!((failure.step, failure.errno), (Step::JoinCgroup, libc::EBADF)),
        other => panic!("unexpected {other:?}"),
    }
}

/// A shell forked by `fork::fork_shell` (the shell helper's fork) hands over
/// the namespaces of its init: each owned by the run's user namespace, the
/// PID namespace a child of the test's, and, where `/proc/<pid>/ns` can be
/// read (as root: the supervisor shares the init's memory, which is not
/// dumpable), the very one its supervisor's shows (they share all but the
/// PID namespace, which is the supervisor's `pid_for_children`). The init
/// runs in the supervisor's address space. A shell whose steps fail
/// returns the failing step, its child reaped.
#[test]
fn a_forked_shell_hands_over_its_inits_namespaces_or_its_failure() {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new(43);
    let prepared = Arc::new(Prepared::new(&fx.policy).unwrap().into_shell());
    let shell = pycage_sandbox::fork::fork_shell(&prepared).unwrap_or_else(|e| panic!("{e}"));
    let (handoff, join) = prepared.take_shell().unwrap_or_else(|e| panic!("{e}"));
    let handoff = handoff.expect("the supervisor's handoff");
    if rustix::process::geteuid().is_root() {
        // One address space: the init runs in the supervisor's memory, on
        // a stack of its own (root reads both maps; nobody reads neither).
        let maps = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert_eq!(maps(shell), maps(handoff.init_pid.as_raw_nonzero().get()), "the init shares its memory");
    }
    let pycage_sandbox::Join { user_ns, mount_ns, pid_ns, net_ns, ipc_ns, uts_ns, root, ruleset } = join;
    // By its handoff the init has detached the host's tree, which
    // `pivot_root` stacked over the run's root: a joiner's `setns` lands
    // on the namespace's own root, and that is the run's.
    assert_eq!(mount_namespace_shows(&user_ns, &mount_ns), Ok(RUN_ROOT), "the host's tree is detached");
    // The namespace a `NS_GET_USERNS` or `NS_GET_PARENT` ioctl names.
    let related = |fd: &std::os::fd::OwnedFd, request: libc::c_ulong| {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: an nsfs ioctl on a live descriptor; it returns a new one.
        let got = unsafe { libc::ioctl(fd.as_raw_fd(), request as _) };
        assert!(got >= 0, "ioctl {request:#x}: {}", std::io::Error::last_os_error());
        // SAFETY: the descriptor the ioctl just made, owned here alone.
        std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(got) }).metadata().unwrap().ino()
    };
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    const NS_GET_PARENT: libc::c_ulong = 0xb702;
    let user_ino = std::fs::File::from(user_ns.try_clone().unwrap()).metadata().unwrap().ino();
    assert_eq!(related(&pid_ns, NS_GET_PARENT), std::fs::metadata("/proc/self/ns/pid").unwrap().ino());
    let sent =
        [("user", user_ns), ("mnt", mount_ns), ("pid", pid_ns), ("net", net_ns), ("ipc", ipc_ns), ("uts", uts_ns)];
    for (name, fd) in sent {
        if ["mnt", "pid", "ipc", "uts"].contains(&name) {
            assert_eq!(related(&fd, NS_GET_USERNS), user_ino, "{name}: owned by the run's user namespace");
        }
        let got = std::fs::File::from(fd).metadata().unwrap();
        let in_supervisor = if name == "pid" { "pid_for_children" } else { name };
        // The supervisor shares the init's memory, which the init makes
        // not dumpable: only root reads its namespaces.
        match std::fs::metadata(format!("/proc/{shell}/ns/{in_supervisor}")) {
            Ok(init_ns) => assert_eq!((got.dev(), got.ino()), (init_ns.dev(), init_ns.ino()), "{name}: the init's"),
            Err(e) => {
                assert!(!rustix::process::geteuid().is_root(), "{name}: {e}");
                assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{name}: {e}");
            }
        }
        let ours = std::fs::metadata(format!("/proc/self/ns/{name}")).unwrap();
        if name != "net" {
            // The network namespace may be a recycled one made outside.
            assert_ne!(got.ino(), ours.ino(), "{name}: not the test's own");
        }
    }
    drop((root, ruleset));
    let pid = rustix::process::Pid::from_raw(shell).unwrap();
    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).unwrap();
    rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()).unwrap();

    let procs = tempfile::NamedTempFile::new().unwrap();
    let mut prepared = Prepared::new(&fx.policy).unwrap();
    prepared.join_cgroup(std::fs::File::open(procs.path()).unwrap().into());
    let prepared = Arc::new(prepared.into_shell());
    match pycage_sandbox::fork::fork_shell(&prepared) {
        Err(SandboxError::Child(failure)) => assert_eq!((failure.step, failure.errno), (Step::JoinCgroup, libc::EBADF)),
        other => panic!("unexpected {other:?}"),
    }
    // Reaped: this process has no child left of that fork.
    let left =
        std::fs::read_to_string(format!("/proc/self/task/{}/children", rustix::thread::gettid().as_raw_nonzero()))
            .unwrap_or_default();
    assert_eq!(left.trim(), "", "children left: {left}");
}

/// What [`mount_namespace_shows`] finds at the root of a run's mount namespace.
const RUN_ROOT: i32 = 0;

/// Joins `user_ns` and then `mount_ns` in a forked child and looks at what
/// the namespace's own root (where `setns` puts a joiner) holds:
/// `Ok(RUN_ROOT)` for the run's (`/work`, and not this test's executable),
/// `Ok(1)` for the host's, `Err` with the errno of a `setns` that failed.
fn mount_namespace_shows(user_ns: &std::os::fd::OwnedFd, mount_ns: &std::os::fd::OwnedFd) -> Result<i32, i32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let exe = std::ffi::CString::new(std::env::current_exe().unwrap().as_os_str().as_bytes()).unwrap();
    let (user, mount) = (user_ns.as_raw_fd(), mount_ns.as_raw_fd());
    // SAFETY: the child makes only system calls (no allocation, no lock)
    // on what was made before the fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: as above; setns and access take descriptors and the C
        // strings made before the fork.
        unsafe {
            for (fd, kind) in [(user, libc::CLONE_NEWUSER), (mount, libc::CLONE_NEWNS)] {
                if libc::setns(fd, kind) != 0 {
                    libc::_exit(100 + *libc::__errno_location());
                }
            }
            let run_root =
                libc::access(c"/work".as_ptr(), libc::F_OK) == 0 && libc::access(exe.as_ptr(), libc::F_OK) != 0;
            libc::_exit(if run_root { RUN_ROOT } else { 1 })
        }
    }
    let mut status = 0;
    // SAFETY: our own child, into this frame's `status`.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    match libc::WEXITSTATUS(status) {
        code @ 100.. => Err(code - 100),
        code => Ok(code),
    }
}

/// In a host that has fd 3 closed (a Python host, say), the sandbox's own
/// descriptors must not be numbered 3: the spawn's `dup2` of the protocol
/// socket onto fd 3 would replace one of them. The test re-runs itself in
/// a fresh process that closes fd 3 first.
#[test]
fn a_host_without_fd_3_still_spawns() {
    if std::env::var_os("PYCAGE_TEST_FD3_CLOSED").is_some() {
        return fd3_closed_child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_host_without_fd_3_still_spawns", "--test-threads", "1", "--nocapture"])
        .env("PYCAGE_TEST_FD3_CLOSED", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stderr.contains("fd3-child: ok"), "{stdout}\n{stderr}");
}

fn fd3_closed_child() {
    // SAFETY: closing fds 3 and 4 of this single-test process, which holds
    // nothing it uses there.
    unsafe {
        libc::close(3);
        libc::close(4);
    }
    let fx = Fixture::new(18);
    let prepared = Arc::new(Prepared::new(&fx.policy).unwrap());
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
    let in_child = Arc::clone(&prepared);
    let mut command = Command::new(&python().inside);
    command
        .args(["-I", "-c", "import os; os.write(3, b'hi')"])
        .env_clear()
        .envs(python().env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    let hook = move || {
        // SAFETY: dup2 in the forked child, as the runtime does for fd 3.
        if unsafe { libc::dup2(theirs_fd, 3) } != 3 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pre_exec runs this in the forked, single-threaded child.
        unsafe { in_child.enter() }
    };
    // SAFETY: the hook only makes syscalls and calls `Prepared::enter`.
    unsafe { command.pre_exec(hook) };
    let status = command.status().unwrap_or_else(|e| panic!("{}", prepared.explain_spawn_error(e)));
    drop(theirs);
    let mut got = String::new();
    ours.read_to_string(&mut got).unwrap();
    assert!(status.success());
    assert_eq!(got, "hi");
    eprintln!("fd3-child: ok");
}

/// A host whose shells another process builds computes the program's own
/// steps from the policy alone: the very plan the built sandbox would
/// give, for each network mode.
#[test]
fn the_join_plan_from_the_policy_is_the_built_sandboxs() {
    for egress_port in [None, Some(8080)] {
        let mut fixture = Fixture::new(90);
        fixture.policy.egress_port = egress_port;
        let built = Prepared::new(&fixture.policy).expect("Prepared::new").join_plan();
        let from_policy = pycage_sandbox::JoinPlan::for_policy(&fixture.policy).expect("JoinPlan::for_policy");
        assert_eq!(from_policy, built, "egress {egress_port:?}");
        assert!(from_policy.confine.len() > 10);
    }
}
