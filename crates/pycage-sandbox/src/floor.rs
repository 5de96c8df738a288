//! The kernel's floor for a sandboxed run, with nothing of pycage in it:
//! `n` times, fork a process that makes the namespaces a run gets (user
//! with its uid/gid maps, mount, PID with a PID-1 child, IPC, UTS, cgroup;
//! network only when asked, since pycage recycles a run's network
//! namespace), mounts a small tmpfs with a recursive read-only bind of
//! each path a run sees, and exits. No Python, no seccomp, no Landlock.
//! `pycage bench` measures the whole machine's busy CPU around it (the
//! kernel threads that tear namespaces down included), beside pycage's
//! CPU per run.
//!
//! Call it from a process with one thread (the CLI runs it in a process of
//! its own): the forked child makes only async-signal-safe calls, and
//! everything it needs is prepared before the fork.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Most bind mounts one floor spawn makes (a run's plan has about 16).
pub const MAX_FLOOR_BINDS: usize = 64;

/// What one floor spawn does.
#[derive(Debug, Clone)]
pub struct FloorPlan {
    /// Bind these host paths (read-only, recursive) into the tmpfs.
    pub binds: Vec<PathBuf>,
    /// Also make a network namespace.
    pub network: bool,
    /// An empty directory to mount the tmpfs on (in the child's own mount
    /// namespace: the host never sees it).
    pub root: PathBuf,
}

/// Everything the child needs, as C strings, made before any fork.
struct Prepared {
    root: CString,
    /// Source, target, and whether the source is a directory.
    binds: Vec<(CString, CString, bool)>,
    uid_map: CString,
    gid_map: CString,
    flags: libc::c_int,
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

/// Runs `n` floor spawns (see the module docs), one after another; the
/// first failure of a child is an error.
pub fn run_floor(plan: &FloorPlan, n: usize) -> io::Result<()> {
    let mut binds = Vec::new();
    for (i, source) in plan.binds.iter().filter(|p| p.exists()).take(MAX_FLOOR_BINDS).enumerate() {
        let target = plan.root.join(format!("b{i}"));
        binds.push((cstring(source)?, cstring(&target)?, source.is_dir()));
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let mut flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if plan.network {
        flags |= libc::CLONE_NEWNET;
    }
    let prepared = Prepared {
        root: cstring(&plan.root)?,
        binds,
        uid_map: CString::new(format!("1000 {uid} 1")).map_err(io::Error::other)?,
        gid_map: CString::new(format!("1000 {gid} 1")).map_err(io::Error::other)?,
        flags,
    };
    for _ in 0..n {
        // SAFETY: the caller's process has one thread (module docs); the
        // child makes only async-signal-safe calls on memory prepared
        // before the fork, and always ends with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child, as above.
            let code = unsafe { child(&prepared) };
            // SAFETY: ends the forked child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a live local.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::last_os_error());
            }
        }
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(io::Error::other(format!("a floor spawn failed (wait status {status})")));
        }
    }
    Ok(())
}

/// Writes `data` to the file `path` (async-signal-safe).
///
/// # Safety
/// Only in a forked child, on C strings made before the fork.
unsafe fn write_file(path: &std::ffi::CStr, data: &std::ffi::CStr) -> bool {
    // SAFETY: open/write/close on valid C strings; async-signal-safe.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let len = data.to_bytes().len();
        let ok = libc::write(fd, data.as_ptr().cast(), len) == len as isize;
        libc::close(fd);
        ok
    }
}

/// The child's steps; its exit code.
///
/// # Safety
/// Only in a forked child of a process with one thread.
unsafe fn child(p: &Prepared) -> libc::c_int {
    // SAFETY: every call below is an async-signal-safe syscall wrapper on
    // memory prepared before the fork.
    unsafe {
        if libc::unshare(p.flags) != 0 {
            return 10;
        }
        if !write_file(c"/proc/self/setgroups", c"deny")
            || !write_file(c"/proc/self/uid_map", &p.uid_map)
            || !write_file(c"/proc/self/gid_map", &p.gid_map)
        {
            return 11;
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return 12;
        }
        if libc::mount(c"tmpfs".as_ptr(), p.root.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=1m".as_ptr().cast()) != 0 {
            return 13;
        }
        for (source, target, is_dir) in &p.binds {
            let made = if *is_dir {
                libc::mkdir(target.as_ptr(), 0o755) == 0
            } else {
                let fd = libc::open(target.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644);
                fd >= 0 && libc::close(fd) == 0
            };
            if !made {
                return 14;
            }
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) != 0
            {
                return 15;
            }
            // Read-only, as a run's binds are.
            let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_REC;
            if libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), flags, std::ptr::null()) != 0 {
                return 16;
            }
        }
        // The PID namespace's first process, as a run's init.
        let init = libc::fork();
        if init == 0 {
            libc::_exit(0);
        }
        if init < 0 {
            return 17;
        }
        let mut status = 0;
        libc::waitpid(init, &mut status, 0);
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the floor in a process of its own (this test binary, one test,
    /// on its main thread: `--test-threads 1`), as the CLI does: the floor
    /// forks, which a process with other threads must not do before it
    /// allocates.
    #[test]
    fn floor_spawns_make_namespaces_and_mounts() {
        if !crate::probe().missing().is_empty() {
            assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "floor::tests::floor_in_its_own_process", "--test-threads", "1", "--include-ignored"])
            .env("PYCAGE_FLOOR_TEST", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    #[ignore = "run by floor_spawns_make_namespaces_and_mounts in a process of its own"]
    fn floor_in_its_own_process() {
        assert!(
            std::env::var_os("PYCAGE_FLOOR_TEST").is_some(),
            "run it through floor_spawns_make_namespaces_and_mounts"
        );
        let root = std::env::temp_dir().join(format!("pycage-floor-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let plan = FloorPlan {
            binds: vec!["/usr".into(), "/etc".into(), "/etc/passwd".into()],
            network: false,
            root: root.clone(),
        };
        let result = run_floor(&plan, 3);
        let _ = std::fs::remove_dir(&root);
        result.unwrap();
    }
}
