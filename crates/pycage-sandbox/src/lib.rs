//! pycage's `sandbox` isolation for the CPython child, on Linux, for any
//! user: built from an unprivileged user namespace (as bubblewrap and
//! Chromium's namespace sandbox are), with no setuid helper.
//!
//! The runtime spawns the interpreter with `std`/`tokio` `Command` and, in
//! `pre_exec`, calls [`Prepared::enter`]. The program then runs:
//!
//! - as uid 1000 of a nested user namespace, PID 2 of its own PID namespace
//!   (under a reaping init), in its own mount, network (no interface up),
//!   IPC and UTS (hostname `pycage`) namespaces; on a root host as a
//!   per-run unprivileged host uid, otherwise as the caller's uid;
//! - in a small real Linux: a read-only tmpfs root with the exposed host
//!   paths ([`MountPlan`]), `/proc` of its PID namespace, a generated
//!   `/etc`, and `/work`, `/tmp`, `/dev/shm` on one size-capped tmpfs;
//! - under Landlock (the same view, enforced a second time), with no
//!   capabilities, `no_new_privs`, rlimits, SysV IPC limits, and a seccomp
//!   allow list ([`seccomp`]).
//!
//! The work is split the way the project's style asks: a pure plan
//! ([`MountPlan`], the seccomp policy, the Landlock access table),
//! unit-tested anywhere, and thin apply functions that make the syscalls in
//! the forked child ([`prepared`] documents every step, its order and the
//! reason for it). [`probe()`] reports which layers the machine supports and
//! why one is missing; [`cgroup`] finds a delegated cgroup v2 subtree.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//!
//! 1. Leaves: `error` (what failed, with the step and errno), [`limits`],
//!    `syscalls` (the syscall table), `plan` (the pure mount plan),
//!    [`cgroup`], [`lease`] (per-run host uids).
//! 2. Policies as data: `landlock_rules`, [`seccomp`], `sys` (thin syscall
//!    wrappers for the forked child).
//! 3. [`confine`] (the program's own final steps), `join` (what a process
//!    joining a shell gets and does), `resolved` (what a policy fixes for
//!    every run of it), [`prepared`] (the sandbox built and entered, and
//!    what a policy fixes kept between runs), `template` (a policy's read-only root, built once by the
//!    shell helper and cloned by each shell), [`fork`] (a forked child's
//!    first steps; a shell's fork).
//! 4. `zygote_userns`, `probe` (what this machine supports), [`helper`]
//!    (the shell helper's server and wire), [`floor`] (the kernel's floor
//!    for a run's namespaces, for `pycage bench`).
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
pub mod confine;
mod error;
pub mod floor;
pub mod fork;
pub mod helper;
mod join;
mod landlock_rules;
pub mod lease;
pub mod limits;
mod plan;
pub mod prepared;
mod probe;
mod resolved;
pub mod seccomp;
mod sys;
mod syscalls;
mod template;
mod zygote_userns;

use std::path::{Path, PathBuf};

pub use error::{ChildFailure, SandboxError, Step};
pub use join::{Handoff, Join, JoinPlan};
pub use landlock_rules::{MIN_ABI as MIN_LANDLOCK_ABI, TARGET_ABI as TARGET_LANDLOCK_ABI};
pub use limits::{INHERITED_FDS, SUPERVISOR_LOST_EXIT, SYSV_SEM_LIMITS, SYSV_SHM_SEGMENTS};
pub use plan::{
    disk_inodes, Bind, Entry, FileId, GeneratedFile, HostFs, HostIds, MountKind, MountPlan, NodeKind, Plans, RealFs,
    Remap, SandboxPolicy, Symlink, BYTES_PER_INODE, DISK_DIRS, FIXED_DIRS, GENERATED_FILES, HOSTNAME, INSIDE_GID,
    INSIDE_UID, MAX_BINDS, MAX_MOUNT_ENTRIES, MAX_SYMLINK_HOPS, MIN_DISK_INODES, OUTPUT_DIR, PROC_DIR, SHM_DIR,
    TMP_DIR, USER_NAME, WORK_DIR,
};
pub use prepared::{OuterNamespaces, Preparations, Prepared};
pub use probe::{diagnose_user_namespace, probe, Availability, Layer};
pub use sys::{as_fs_ids, occupy_low_fds};
pub use template::RootTemplates;
pub use zygote_userns::zygote_user_namespace;

/// System paths a dynamically linked CPython and `subprocess` need, among
/// those that exist here: `/usr`, `/bin` and `/sbin` (links into `/usr` on a
/// merged-usr host), the C library and loader (`/lib*`), the loader cache,
/// the local time zone, and the files of `/etc` the standard library reads
/// (TLS roots, MIME types, services, protocols) and fontconfig's. The runtime adds the interpreter's `prefix`,
/// `base_prefix`, `exec_prefix` and `sys.path` directories, and the
/// bootstrap dir.
pub fn default_read_only_paths() -> Vec<PathBuf> {
    const CANDIDATES: [&str; 15] = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32",
        "/etc/ld.so.cache",
        "/etc/localtime",
        // What the standard library reads, none of it secret: TLS roots
        // (`ssl`), MIME types (`mimetypes`), service and protocol names
        // (`socket.getservbyname`).
        "/etc/ssl",
        "/etc/ca-certificates.conf",
        "/etc/mime.types",
        "/etc/services",
        "/etc/protocols",
        // fontconfig's configuration (where the system's fonts are, no
        // secret): without it matplotlib's font lookup prints
        // "Fontconfig error: Cannot load default config file" into the run.
        "/etc/fonts",
    ];
    existing(&CANDIDATES)
}

/// The host's CA certificates (the TLS trust store), among those that
/// exist here: Debian's and Alpine's `/etc/ssl/certs` (OpenSSL's default
/// paths link there), Fedora's and RHEL's `/etc/pki` bundles, SUSE's
/// `/var/lib/ca-certificates`. Exposed read-only to runs that may reach
/// the network, so that certificate verification works as on the host.
pub fn default_ca_paths() -> Vec<PathBuf> {
    const CANDIDATES: [&str; 7] = [
        "/etc/ssl/certs",
        "/etc/ssl/cert.pem",
        "/etc/ssl/ca-bundle.pem",
        "/etc/pki/tls/certs",
        "/etc/pki/tls/cert.pem",
        "/etc/pki/ca-trust/extracted",
        "/var/lib/ca-certificates",
    ];
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
