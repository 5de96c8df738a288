//! The hostile-program suite: each program attacks the sandbox (or the
//! host supervisor) and must produce one exact outcome. Runs under
//! `Isolation::Sandbox` (this project's CI runs as root, as the sandbox
//! needs). After the suite: no leftover process, and nothing written
//! outside the run directories.
#![allow(clippy::unwrap_used, clippy::panic)]

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
    let c = |name, program: &str, tweak, check| Case { name, program: program.to_string(), tweak, check };
    vec![
        c("cpu spin", "print('go')\nwhile True:\n    pass", |k| { k.cpu_seconds = 1; k.wall_time = Duration::from_secs(30) },
            with_logs("go", is_failure(FailureKind::Timeout, "CPU"))),
        c("sleep forever", "print('go')\nimport time\ntime.sleep(3600)", |k| k.wall_time = Duration::from_secs(2),
            with_logs("go", is_failure(FailureKind::Timeout, "wall-clock"))),
        c("memory bomb at once", "print('go')\nx = bytearray(1 << 36)", keep,
            with_logs("go", is_failure(FailureKind::Exception, "MemoryError"))),
        c("memory bomb growing", "print('go')\nl = []\nwhile True:\n    l.append(bytearray(1 << 24))", keep,
            with_logs("go", is_failure(FailureKind::Exception, "MemoryError"))),
        c("fork bomb", "print('go')\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            |k| k.wall_time = Duration::from_secs(3), with_logs("go", is_failure(FailureKind::Timeout, "wall-clock"))),
        c("setsid double-fork daemon", &format!(
            "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.write(w, str(os.getpid()).encode())\n        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\nos.wait()\nos.close(w)\npid = int(os.read(r, 32))\ntime.sleep(0.3)\n# The orphaned daemon is our child now (we are PID 1): still running?\nreturn 'spawned' if os.waitpid(pid, os.WNOHANG) == (0, 0) else 'daemon died early'"),
            keep, is_value("\"spawned\"")),
        c("read a canary outside the run dir", &format!(
            "print('go')\ntry:\n    open({canary:?}).read()\n    return 'read it'\nexcept (PermissionError, FileNotFoundError) as e:\n    return 'denied'"),
            keep, with_logs("go", is_value("\"denied\""))),
        c("read /etc/passwd and /etc/shadow", "out = []\nfor p in ['/etc/passwd', '/etc/shadow', '/etc/hostname']:\n    try:\n        open(p).read()\n        out.append(p)\n    except OSError:\n        pass\nreturn out",
            keep, is_value("[]")),
        c("write outside the run dir", "out = []\nfor p in ['/tmp/pycage-hostile-w', '/usr/pycage-hostile-w', '/root/pycage-hostile-w', '/pycage-hostile-w', '/etc/pycage-hostile-w']:\n    try:\n        open(p, 'w').write('x')\n        out.append(p)\n    except OSError:\n        pass\nreturn out",
            keep, is_value("[]")),
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
        c("runs as an unprivileged uid", "import os\nreturn [os.getuid() != 0, os.geteuid() != 0, os.getpid()]", keep, is_value("[true,true,1]")),
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
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_programs_get_exact_outcomes() {
    if !rustix::process::geteuid().is_root() {
        // The sandbox needs root (see `pycage doctor`); CI runs as root and
        // requires this test.
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let canary_dir = tempfile::tempdir().unwrap();
    let canary = canary_dir.path().join("secret.txt");
    std::fs::write(&canary, "top secret").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let run_parent = tempfile::tempdir().unwrap();

    let all = cases(&canary.to_string_lossy(), port, std::process::id());
    assert!(all.len() >= 25);
    let mut failures = Vec::new();
    for case in all {
        let mut config = RuntimeConfig {
            isolation: Isolation::Sandbox,
            run_dir_parent: Some(run_parent.path().to_path_buf()),
            ..RuntimeConfig::default()
        };
        (case.tweak)(&mut config);
        let rt = Runtime::new(config).unwrap();
        let r = rt.run(RunRequest::new(case.program.clone())).await.unwrap();
        if let Err(e) = (case.check)(&r) {
            failures.push(format!("{}: {e}", case.name));
        }
        rt.shutdown().await;
    }
    // Nothing connected to the listener, the canary is intact, no daemon
    // survived, nothing was written where the programs tried, and every
    // run directory is gone.
    let mut buf = [0u8; 1];
    if let Ok((mut s, _)) = listener.accept() {
        let _ = s.read(&mut buf);
        failures.push("a program connected to the host's listener".into());
    }
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "top secret");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(common::processes_with_marker(&marker()), Vec::<String>::new());
    for p in [
        "/tmp/pycage-hostile-w",
        "/usr/pycage-hostile-w",
        "/root/pycage-hostile-w",
        "/pycage-hostile-w",
        "/etc/pycage-hostile-w",
    ] {
        assert!(!std::path::Path::new(p).exists(), "{p} was written");
    }
    assert_eq!(std::fs::read_dir(run_parent.path()).unwrap().count(), 0);
    assert!(failures.is_empty(), "hostile outcomes differ:\n{}", failures.join("\n"));
}
