//! Per-run host uids on a root host, unique across every pycage process.
//!
//! A sandboxed run on a root host gets its own unprivileged uid, so two
//! runs never share a uid (signals, `/proc` access, file ownership and
//! `RLIMIT_NPROC` would cross between them). A counter per process is not
//! enough when several pycage processes run at once, so a uid is *leased*:
//! an exclusive `flock` on `<dir>/<uid>.lock`, held until the run's last
//! process is reaped (the sandbox's PID namespace is dead by then). The
//! kernel drops the lock when its holder dies, however it dies, so a lease
//! never outlives its run and needs no cleanup.
//!
//! The lease directory must be root's and not writable by anyone else
//! (checked, never trusted): `/run/pycage/uids` by default.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

/// The default lease directory on a root host.
pub const DEFAULT_LEASE_DIR: &str = "/run/pycage/uids";

/// Most uids tried before giving up: every one of them is in use.
pub const MAX_TRIES: u32 = 4096;

/// A leased uid; the lease ends when this is dropped.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    _lock: File,
}

impl UidLease {
    /// The leased uid (also the gid the run gets).
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// Why no uid could be leased.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease directory cannot be created or is unsafe.
    #[error("uid lease directory {dir}: {problem}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// Every tried uid is leased by a running run.
    #[error("all {tried} tried uids of {base}..{end} are in use by other runs")]
    Exhausted {
        /// How many were tried.
        tried: u32,
        /// First uid of the range.
        base: u32,
        /// One past the last.
        end: u64,
    },
    /// A lock file could not be opened or locked.
    #[error("uid lease file {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Create (if needed) and check the lease directory: a real directory,
/// owned by the caller, writable by nobody else.
pub fn ensure_lease_dir(dir: &Path) -> Result<(), LeaseError> {
    let problem = |problem: String| LeaseError::Directory { dir: dir.to_path_buf(), problem };
    match std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) => return Err(problem(format!("cannot create it: {e}"))),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| problem(e.to_string()))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.file_type().is_dir() {
        return Err(problem("is not a directory (or is a symlink)".into()));
    }
    if meta.uid() != me {
        return Err(problem(format!("is owned by uid {}, not by this process (uid {me})", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(problem(format!("is writable by others (mode {:o})", meta.mode() & 0o7777)));
    }
    Ok(())
}

/// Lease a uid of `base..base + count` in `dir`, starting at a random one.
pub fn lease_uid(dir: &Path, base: u32, count: u32) -> Result<UidLease, LeaseError> {
    ensure_lease_dir(dir)?;
    let count = count.max(1);
    let start = random_below(count);
    let tries = count.min(MAX_TRIES);
    for i in 0..tries {
        let uid = base.saturating_add((start + i) % count);
        let path = dir.join(format!("{uid}.lock"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| LeaseError::Lock { path: path.clone(), source })?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(UidLease { uid, _lock: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => continue,
            Err(e) => {
                return Err(LeaseError::Lock { path, source: io::Error::from_raw_os_error(e.raw_os_error()) });
            }
        }
    }
    Err(LeaseError::Exhausted { tried: tries, base, end: u64::from(base) + u64::from(count) })
}

fn random_below(n: u32) -> u32 {
    let mut bytes = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(bytes) % n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn lease_dir() -> (tempfile::TempDir, PathBuf) {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("uids");
        (parent, dir)
    }

    /// Lease again a uid whose lease this process just dropped. The lock
    /// belongs to the open file description, and a process that another
    /// test thread is spawning holds a copy of every descriptor between its
    /// fork and its exec (`O_CLOEXEC` closes them only at the exec), so a
    /// dropped lease can outlive its drop by that window. The bound is not a
    /// timing claim, only how long to wait before calling a lease stuck.
    fn lease_once_released(dir: &Path, base: u32, count: u32) -> UidLease {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match lease_uid(dir, base, count) {
                Ok(lease) => return lease,
                Err(LeaseError::Exhausted { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => panic!("no lease of {base}..{} within 30 s: {e}", base + count),
            }
        }
    }

    #[test]
    fn leases_are_exclusive_and_end_on_drop() {
        let (_parent, dir) = lease_dir();
        let a = lease_uid(&dir, 5000, 2).unwrap();
        let b = lease_uid(&dir, 5000, 2).unwrap();
        assert_ne!(a.uid(), b.uid());
        assert!(matches!(lease_uid(&dir, 5000, 2), Err(LeaseError::Exhausted { tried: 2, base: 5000, end: 5002 })));
        let freed = a.uid();
        drop(a);
        assert_eq!(lease_once_released(&dir, 5000, 2).uid(), freed);
    }

    #[test]
    fn another_process_holding_a_lease_is_respected() {
        let (_parent, dir) = lease_dir();
        ensure_lease_dir(&dir).unwrap();
        // A separate process (python3) holds uid 7000's lock.
        let mut holder = std::process::Command::new("python3")
            .args([
                "-I",
                "-c",
                "import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)",
            ])
            .arg(dir.join("7000.lock"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line, "held\n");
        for _ in 0..8 {
            assert_eq!(lease_once_released(&dir, 7000, 2).uid(), 7001);
        }
        holder.kill().unwrap();
        holder.wait().unwrap();
        let leases: Vec<UidLease> = (0..2).map(|_| lease_once_released(&dir, 7000, 2)).collect();
        let mut uids: Vec<u32> = leases.iter().map(UidLease::uid).collect();
        uids.sort();
        assert_eq!(uids, [7000, 7001]);
    }

    #[test]
    fn an_unsafe_directory_is_refused() {
        let (_parent, dir) = lease_dir();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = lease_uid(&dir, 1, 1).unwrap_err();
        assert!(err.to_string().contains("writable by others"), "{err}");
        let (_parent, dir) = lease_dir();
        std::os::unix::fs::symlink("/tmp", &dir).unwrap();
        assert!(lease_uid(&dir, 1, 1).unwrap_err().to_string().contains("not a directory"));
    }
}
