//! pycage's `sandbox` isolation for the CPython child, on Linux.
//!
//! The runtime spawns `python3 -I` with `std`/`tokio` `Command` and, in
//! `pre_exec`, calls [`Prepared::enter`]. The child then runs:
//!
//! - in a private root: a read-only tmpfs holding only the exposed paths,
//!   each bind-mounted at its own absolute path (read-only, nosuid, nodev),
//!   the run dir read-write, four device nodes, and no `/proc`;
//! - as a per-run unprivileged uid, in a new user namespace that maps only
//!   that uid, and new PID, network (no interface up), IPC and UTS
//!   namespaces; the interpreter is PID 1, so every process it starts dies
//!   with it, `setsid` and double-forked daemons included;
//! - under Landlock (read-only beneath the exposed paths, read-write beneath
//!   the run dir, nothing else; TCP and scoping where the ABI has them),
//!   required to be fully enforced;
//! - with only fds 0-3 inherited, `no_new_privs`, `RLIMIT_NPROC`, `RLIMIT_FSIZE`, `RLIMIT_NOFILE` and
//!   no core dumps;
//! - under a seccomp filter that denies non-`AF_UNIX` sockets, `ptrace`,
//!   mounts, namespaces, `bpf`, keyrings and other host-facing calls (a deny
//!   list; [`seccomp`] explains why and what backs it up).
//!
//! The work is split the way the project's style asks: a pure plan
//! ([`MountPlan`], the seccomp table, the Landlock access table), unit-tested
//! anywhere, and thin apply functions that make the syscalls in the forked
//! child ([`prepared`] documents every step, its order and the reason for
//! it). [`probe`] reports which layers the machine supports. The host must be
//! root; cgroup limits are not applied (see [`Availability::cgroup_v2`]).
//!
//! ```no_run
//! use std::os::unix::process::CommandExt;
//! use std::sync::Arc;
//! # fn demo(policy: pycage_sandbox::SandboxPolicy) -> Result<(), pycage_sandbox::SandboxError> {
//! let prepared = Arc::new(pycage_sandbox::Prepared::new(&policy)?);
//! let mut command = std::process::Command::new("/usr/bin/python3");
//! command.arg("-I").env_clear();
//! let in_child = Arc::clone(&prepared);
//! let hook = move || {
//!     // SAFETY: pre_exec runs this in the forked, single-threaded child.
//!     unsafe { in_child.enter() }
//! };
//! // SAFETY: the hook only calls `Prepared::enter`, written for that child.
//! unsafe { command.pre_exec(hook) };
//! let child = command.spawn().map_err(|e| prepared.explain_spawn_error(e))?;
//! # drop(child); Ok(()) }
//! ```

pub mod cgroup;
mod error;
mod landlock_rules;
mod plan;
pub mod prepared;
mod probe;
pub mod seccomp;
mod sys;
mod syscalls;

use std::path::{Path, PathBuf};

pub use error::{ChildFailure, SandboxError, Step};
pub use landlock_rules::{MIN_ABI as MIN_LANDLOCK_ABI, TARGET_ABI as TARGET_LANDLOCK_ABI};
pub use plan::{
    Bind, Entry, GeneratedFile, HostFs, HostIds, MountKind, MountPlan, NodeKind, RealFs, Remap, SandboxPolicy, Symlink,
    BYTES_PER_INODE, DISK_DIRS, FIXED_DIRS, GENERATED_FILES, HOSTNAME, INSIDE_GID, INSIDE_UID, MAX_BINDS,
    MAX_MOUNT_ENTRIES, MAX_SYMLINK_HOPS, MIN_DISK_INODES, OUTPUT_DIR, PROC_DIR, SHM_DIR, TMP_DIR, USER_NAME, WORK_DIR,
};
pub use prepared::{Handoff, Prepared, INHERITED_FDS, SUPERVISOR_LOST_EXIT, SYSV_SEM_LIMITS, SYSV_SHM_SEGMENTS};
pub use probe::{diagnose_user_namespace, probe, Availability, Layer};

/// System paths a dynamically linked CPython and `subprocess` need, among
/// those that exist here: `/usr`, `/bin` and `/sbin` (links into `/usr` on a
/// merged-usr host), the C library and loader (`/lib*`), the loader cache,
/// and the local time zone. The runtime adds the interpreter's `prefix`,
/// `base_prefix`, `exec_prefix` and `sys.path` directories, and the
/// bootstrap dir.
pub fn default_read_only_paths() -> Vec<PathBuf> {
    const CANDIDATES: [&str; 9] =
        ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache", "/etc/localtime"];
    existing(&CANDIDATES)
}

/// The device nodes the child gets, among those that exist here:
/// `/dev/null`, `/dev/zero`, `/dev/urandom`, `/dev/random`.
pub fn default_devices() -> Vec<PathBuf> {
    existing(&["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"])
}

fn existing(candidates: &[&str]) -> Vec<PathBuf> {
    candidates.iter().map(Path::new).filter(|p| p.exists()).map(Path::to_path_buf).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_exist_and_are_absolute() {
        for path in default_read_only_paths().iter().chain(&default_devices()) {
            assert!(path.is_absolute() && path.exists(), "{path:?}");
        }
        assert!(default_read_only_paths().contains(&PathBuf::from("/usr")));
        assert!(default_devices().contains(&PathBuf::from("/dev/null")));
    }
}
