//! The kernel's floor for a sandboxed run, with nothing of pycage in it:
//! `n` times, fork a process that makes the namespaces a run gets (user
//! with its uid/gid maps, mount, PID with a PID-1 child, UTS, cgroup;
//! network and IPC only when asked, since pycage recycles a run's network
//! and IPC namespaces), mounts a small tmpfs with a recursive read-only bind of
//! each path a run sees and a second, size-capped tmpfs (the run's own
//! `/work`), forks the PID namespace's first process, which mounts the
//! namespace's procfs, pivots into the new root and detaches the old one,
//! and exits. No Python, no seccomp, no Landlock.
//! `pycage bench` measures the whole machine's busy CPU around it (the
//! kernel threads that tear namespaces down included), beside pycage's
//! CPU per run.
//!
//! With [`FloorPlan::confine`], the PID-1 child also confines itself the
//! way a run's program does, and only that (steps 16-18 of
//! [`crate::prepared`], through the exec path's executor
//! `confine::apply`): rlimits, a cgroup namespace, a nested user
//! namespace with its maps, the 41 bounding-set drops, `no_new_privs`, a
//! Landlock domain from a ruleset with a rule per bind (built in the parent
//! for each spawn, as the shell helper builds one per shell), and the run's
//! seccomp program (the kernel checks, converts and compiles it for every
//! process that installs it). The difference between the two floors is
//! what the kernel charges for a program's own confinement.
//!
//! Call it from a process with one thread (the CLI runs it in a process of
//! its own): the forked child makes only async-signal-safe calls, and
//! everything it needs is prepared before the fork.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{RulesetCreated, ABI};
use rustix::process::Resource;

use crate::confine::ConfineStep;
use crate::landlock_rules::{handled_abi, kernel_landlock, open_rules, ruleset_with, PathRule};
use crate::plan::{MountKind, NodeKind};
use crate::seccomp;

/// Most bind mounts one floor spawn makes (a run's plan has about 16).
pub const MAX_FLOOR_BINDS: usize = 64;

/// What one floor spawn does.
#[derive(Debug, Clone)]
pub struct FloorPlan {
    /// Bind these host paths (read-only, recursive) into the tmpfs.
    pub binds: Vec<PathBuf>,
    /// Also make a network namespace and an IPC namespace (what a run gets
    /// where they are not recycled).
    pub network: bool,
    /// An empty directory to mount the tmpfs on (in the child's own mount
    /// namespace: the host never sees it).
    pub root: PathBuf,
    /// Also confine the PID-1 child as a run's program (module docs).
    pub confine: bool,
}

/// Everything the child needs, as C strings, made before any fork.
struct Prepared {
    root: CString,
    /// `<root>/proc` and `<root>/work`: the run's procfs and its own tmpfs.
    proc: CString,
    work: CString,
    /// Source, target, and whether the source is a directory.
    binds: Vec<(CString, CString, bool)>,
    uid_map: CString,
    gid_map: CString,
    flags: libc::c_int,
    /// The program's confinement steps, with [`FloorPlan::confine`].
    confine: Option<Vec<ConfineStep>>,
}

/// The run limits a program gets by default, for the confinement floor.
const FLOOR_LIMITS: [(Resource, u64); 7] = [
    (Resource::Nproc, 64 + crate::limits::SANDBOX_PROCESSES),
    (Resource::Fsize, 256 << 20),
    (Resource::Nofile, 256),
    (Resource::Core, 0),
    (Resource::Sigpending, crate::limits::RUN_SIGPENDING),
    (Resource::Msgqueue, crate::limits::RUN_MSGQUEUE_BYTES),
    (Resource::Memlock, crate::limits::RUN_MEMLOCK_BYTES),
];

/// The Landlock rules of a read-only bind per path, as a run's, opened
/// once (the shell helper keeps a policy's), and the ABI they are for.
fn floor_rules(binds: &[PathBuf]) -> io::Result<(Vec<PathRule>, ABI)> {
    let abi = handled_abi(kernel_landlock()).ok_or_else(|| io::Error::other("this kernel has no usable Landlock"))?;
    let rules = binds.iter().map(|p| {
        let node = if p.is_dir() { NodeKind::Dir } else { NodeKind::File };
        (p.as_path(), MountKind::ReadOnly, node)
    });
    Ok((open_rules(rules, abi).map_err(io::Error::other)?, abi))
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

/// Runs `n` floor spawns (see the module docs), one after another; the
/// first failure of a child is an error.
pub fn run_floor(plan: &FloorPlan, n: usize) -> io::Result<()> {
    let mut binds = Vec::new();
    let sources: Vec<PathBuf> = plan.binds.iter().filter(|p| p.exists()).take(MAX_FLOOR_BINDS).cloned().collect();
    for (i, source) in sources.iter().enumerate() {
        let target = plan.root.join(format!("b{i}"));
        binds.push((cstring(source)?, cstring(&target)?, source.is_dir()));
    }
    let confine = match plan.confine {
        true => {
            let filters = seccomp::compile_native(seccomp::Network::None).map_err(io::Error::other)?;
            let map = b"1000 1000 1\n";
            Some(crate::confine::build(&FLOOR_LIMITS, map, map, &filters))
        }
        false => None,
    };
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS | libc::CLONE_NEWCGROUP;
    if plan.network {
        flags |= libc::CLONE_NEWNET | libc::CLONE_NEWIPC;
    }
    let prepared = Prepared {
        root: cstring(&plan.root)?,
        proc: cstring(&plan.root.join("proc"))?,
        work: cstring(&plan.root.join("work"))?,
        binds,
        uid_map: CString::new(format!("1000 {uid} 1")).map_err(io::Error::other)?,
        gid_map: CString::new(format!("1000 {gid} 1")).map_err(io::Error::other)?,
        flags,
        confine,
    };
    let rules = match prepared.confine {
        Some(_) => Some(floor_rules(&sources)?),
        None => None,
    };
    for _ in 0..n {
        let ruleset = match &rules {
            Some((rules, abi)) => Some(ruleset_with(rules, *abi, None).map_err(io::Error::other)?),
            None => None,
        };
        // SAFETY: the caller's process has one thread (module docs); the
        // child makes only async-signal-safe calls on memory prepared
        // before the fork, and always ends with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child, as above.
            let code = unsafe { child(&prepared, ruleset) };
            // SAFETY: ends the forked child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        drop(ruleset);
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
unsafe fn child(p: &Prepared, ruleset: Option<RulesetCreated>) -> libc::c_int {
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
        // The run's own size-capped tmpfs (its /work, /tmp and /dev/shm),
        // and where its procfs goes.
        if libc::mkdir(p.work.as_ptr(), 0o755) != 0
            || libc::mkdir(p.proc.as_ptr(), 0o555) != 0
            || libc::mount(
                c"tmpfs".as_ptr(),
                p.work.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=1m,nr_inodes=1024".as_ptr().cast(),
            ) != 0
        {
            return 19;
        }
        // The PID namespace's first process, as a run's init: it mounts
        // the namespace's procfs (only a process inside may), pivots into
        // the new root and detaches the old one.
        let init = libc::fork();
        if init == 0 {
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            if libc::mount(
                c"proc".as_ptr(),
                p.proc.as_ptr(),
                c"proc".as_ptr(),
                flags,
                c"hidepid=invisible".as_ptr().cast(),
            ) != 0
                || libc::chdir(p.root.as_ptr()) != 0
                || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
                || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                libc::_exit(20);
            }
            let code = match (&p.confine, ruleset) {
                (Some(steps), Some(ruleset)) => match crate::confine::apply(steps, ruleset) {
                    Ok(()) => 0,
                    Err(_) => 18,
                },
                _ => 0,
            };
            libc::_exit(code);
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
        let mut plan = FloorPlan {
            binds: vec!["/usr".into(), "/etc".into(), "/etc/passwd".into()],
            network: false,
            root: root.clone(),
            confine: false,
        };
        let bare = run_floor(&plan, 3);
        plan.confine = true;
        let confined = run_floor(&plan, 3);
        let _ = std::fs::remove_dir(&root);
        bare.unwrap();
        // Every step of the program's confinement succeeded in each spawn
        // (a failed one exits 18, which run_floor reports).
        confined.unwrap();
    }
}
