//! What a run leaves on the host's disk, and how it goes away.
//!
//! # Removing a tree a program shaped
//!
//! [`remove_tree`] deletes a directory whatever the program did to it: any
//! depth (a chain of directories deeper than `RLIMIT_NOFILE` included),
//! any permissions (mode 0000 directories are opened up first; the run's
//! files belong to the caller's uid), symlinks and special files removed,
//! never followed. It holds a constant number of descriptors: instead of
//! descending, it *hoists* each grandchild directory into the top directory
//! (`renameat2(RENAME_NOREPLACE)`), so nothing is ever deeper than two
//! levels below the descriptor it works from, and every operation is
//! relative to a descriptor opened with `O_NOFOLLOW` (a concurrent rename
//! cannot redirect it outside the tree). A file's size does not matter:
//! a 1 GiB `fallocate(KEEP_SIZE)` file is one `unlinkat`. A tree that keeps
//! changing under it (a surviving process writing into it) is given up on
//! after [`MAX_OPERATIONS`] operations, as an error.
//!
//! A removal that fails is never silent: [`RunDir`] logs it with
//! `tracing::warn!` and records it in the runtime's [`CleanupLog`], which
//! `Runtime::cleanup_failures` drains (the CLI prints each as a warning).
//!
//! # Leftovers of a dead pycage
//!
//! A pycage process killed with SIGKILL (or by the OOM killer) runs no
//! destructor: its process-isolation run directories stay in the temp
//! directory (the bootstrap lives in the user's cache directory, shared by
//! every runtime and named by its content; only without a cache directory
//! is it written to a temporary directory, which a SIGKILL leaves behind,
//! unswept). So each runtime is an
//! [`Owner`]: it holds an exclusive `flock` on `pycage-<id>.lock` for its
//! whole life (the lock file is created under a temporary name, locked,
//! then renamed into place, so a visible lock file is always already
//! locked), and names every directory it creates `pycage-<kind>-<id>-*`.
//! [`sweep`] (run by every new runtime) takes the lock of each lock file it
//! finds; when it gets it, the owner is dead, and its directories and lock
//! file are removed. A directory whose id has no lock file is an owner's
//! that finished or died mid-cleanup. Only entries owned by the caller's
//! uid are touched, and a live owner's are never: the kernel releases a
//! `flock` only when its holder is gone, in whatever PID namespace.
//! (Sandboxed runs leave nothing on the host: their files live in a tmpfs
//! that vanishes with its last reference.)

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// Operations (unlink, rename, rmdir) one removal may make before it gives
/// up on a tree that keeps changing.
pub const MAX_OPERATIONS: u64 = 50_000_000;

/// Names read from one directory per pass: bounds the memory of a pass.
const BATCH: usize = 4096;

/// Most failures a [`CleanupLog`] keeps (the count goes on).
pub const MAX_LOGGED_FAILURES: usize = 64;

/// Most entries [`sweep`] looks at in one directory.
pub const MAX_SWEEP_ENTRIES: usize = 65_536;

/// Prefix of everything pycage creates in a temp directory.
const PREFIX: &str = "pycage-";

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a file name"))
}

/// Remove the directory (or file) at `path`, whatever is inside.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    // Most run directories are empty by the time they go (a trivial run's
    // always is): one `rmdir`, where the walk below takes five calls. It
    // removes nothing else (not a file, not through a symlink).
    if rustix::fs::unlinkat(rustix::fs::CWD, path, AtFlags::REMOVEDIR).is_ok() {
        return Ok(());
    }
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => (if parent.as_os_str().is_empty() { Path::new(".") } else { parent }, name),
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a removable path")),
    };
    let parent =
        rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    remove_tree_at(parent.as_fd(), name)
}

/// Remove `name` inside the directory `parent`, whatever it is and holds.
pub fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let name = cstr(name)?;
    let mut ops = 0u64;
    let top = match open_dir_for_removal(parent, &name) {
        Ok(Some(fd)) => fd,
        // Not a directory: one unlink.
        Ok(None) => return rustix::fs::unlinkat(parent, name.as_c_str(), AtFlags::empty()).map_err(errno),
        Err(e) => return Err(e),
    };
    empty_dir(top.as_fd(), &mut ops)?;
    drop(top);
    rustix::fs::unlinkat(parent, name.as_c_str(), AtFlags::REMOVEDIR).map_err(errno)
}

/// Open `name` in `dir` as a directory without following a symlink,
/// making it readable, writable and searchable by its owner first.
/// `Ok(None)`: it is not a directory.
fn open_dir_for_removal(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<OwnedFd>> {
    let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(e) => return Err(errno(e)),
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Ok(None);
    }
    if stat.st_mode & 0o700 != 0o700 {
        // Our own directory (the run's files are the caller's): restore the
        // owner's rights so it can be listed and emptied. Root needs none.
        let _ = rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty());
    }
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(Some)
    .map_err(errno)
}

fn count(ops: &mut u64) -> io::Result<()> {
    *ops += 1;
    if *ops > MAX_OPERATIONS {
        return Err(io::Error::other(format!(
            "gave up after {MAX_OPERATIONS} operations: the tree keeps changing (is a process still writing into it?)"
        )));
    }
    Ok(())
}

/// Up to [`BATCH`] entry names of `dir` (without `.` and `..`), with their
/// types when the file system reports them.
fn read_batch(dir: BorrowedFd<'_>) -> io::Result<Vec<(CString, FileType)>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir).map_err(errno)? {
        let entry = entry.map_err(errno)?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        names.push((name.to_owned(), entry.file_type()));
        if names.len() == BATCH {
            break;
        }
    }
    Ok(names)
}

fn is_dir(dir: BorrowedFd<'_>, name: &CStr, hint: FileType) -> io::Result<bool> {
    if hint != FileType::Unknown {
        return Ok(hint == FileType::Directory);
    }
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    Ok(FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
}

/// Empty `top` with a constant number of descriptors: files go at once;
/// an empty subdirectory goes at once; a non-empty one has its files
/// removed and its subdirectories hoisted into `top`, then goes.
fn empty_dir(top: BorrowedFd<'_>, ops: &mut u64) -> io::Result<()> {
    let mut hoisted = 0u64;
    loop {
        let batch = read_batch(top)?;
        if batch.is_empty() {
            return Ok(());
        }
        for (name, hint) in batch {
            count(ops)?;
            if !is_dir(top, &name, hint)? {
                rustix::fs::unlinkat(top, name.as_c_str(), AtFlags::empty()).map_err(errno)?;
                continue;
            }
            match rustix::fs::unlinkat(top, name.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) => continue,
                Err(Errno::NOTEMPTY | Errno::EXIST | Errno::ACCESS | Errno::PERM) => {}
                Err(e) => return Err(errno(e)),
            }
            let Some(child) = open_dir_for_removal(top, &name)? else { continue };
            hoist_children(top, child.as_fd(), &mut hoisted, ops)?;
            drop(child);
            rustix::fs::unlinkat(top, name.as_c_str(), AtFlags::REMOVEDIR).map_err(errno)?;
        }
    }
}

/// Remove `child`'s files and move its directories into `top`.
fn hoist_children(top: BorrowedFd<'_>, child: BorrowedFd<'_>, hoisted: &mut u64, ops: &mut u64) -> io::Result<()> {
    loop {
        let batch = read_batch(child)?;
        if batch.is_empty() {
            return Ok(());
        }
        for (name, hint) in batch {
            count(ops)?;
            if !is_dir(child, &name, hint)? {
                rustix::fs::unlinkat(child, name.as_c_str(), AtFlags::empty()).map_err(errno)?;
                continue;
            }
            // Moving a directory rewrites its `..`: its owner needs write
            // permission on it.
            let _ = rustix::fs::chmodat(child, name.as_c_str(), Mode::from_raw_mode(0o700), AtFlags::empty());
            loop {
                *hoisted += 1;
                let target = CString::new(format!(".pycage-rm-{hoisted}")).map_err(io::Error::other)?;
                match rustix::fs::renameat_with(child, name.as_c_str(), top, target.as_c_str(), RenameFlags::NOREPLACE)
                {
                    Ok(()) => break,
                    Err(Errno::EXIST) => continue,
                    Err(e) => return Err(errno(e)),
                }
            }
        }
    }
}

/// One failed removal, as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupFailure {
    /// What could not be removed.
    pub path: PathBuf,
    /// Why.
    pub error: String,
}

impl std::fmt::Display for CleanupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not remove {}: {}", self.path.display(), self.error)
    }
}

/// Failed removals of one runtime, for the caller to read. Keeps the last
/// [`MAX_LOGGED_FAILURES`].
#[derive(Debug, Default)]
pub struct CleanupLog {
    failures: Mutex<VecDeque<CleanupFailure>>,
}

impl CleanupLog {
    /// Log a failure (and warn through `tracing`).
    pub fn record(&self, path: &Path, error: &io::Error) {
        tracing::warn!(path = %path.display(), %error, "pycage could not remove a directory it created");
        let failure = CleanupFailure { path: path.to_path_buf(), error: error.to_string() };
        {
            let mut failures = crate::sync::lock(&self.failures);
            if failures.len() == MAX_LOGGED_FAILURES {
                failures.pop_front();
            }
            failures.push_back(failure);
        }
    }

    /// Take every failure logged so far.
    pub fn drain(&self) -> Vec<CleanupFailure> {
        crate::sync::lock(&self.failures).drain(..).collect()
    }
}

/// Removals handed to blocking threads and not finished yet; shutdown
/// waits for them.
#[derive(Debug, Default)]
pub struct PendingRemovals {
    count: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

impl PendingRemovals {
    /// Resolves once no removal is pending.
    pub async fn wait(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let notified = self.done.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A directory pycage created for a run (or for the runtime), removed with
/// [`remove_tree`] on drop; a failure goes to the [`CleanupLog`]. Dropped
/// inside a tokio runtime, the removal (as many operations as the program
/// made files) runs on the blocking pool, never on an async worker.
///
/// A run's ([`RunDirs::create`]) holds [`WORK_DIR_NAME`], the run's
/// working directory; the directory itself is the run's `HOME` and
/// temporary directory, so caches and temporary files never appear among
/// the program's own files.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    log: Arc<CleanupLog>,
    pending: Option<Arc<PendingRemovals>>,
}

impl RunDir {
    /// Create `<parent>/pycage-<kind>-<owner id>-<random>` with mode 0700.
    pub fn create(parent: &Path, kind: &str, owner: &Owner, log: Arc<CleanupLog>) -> io::Result<RunDir> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix(&owner.dir_prefix(kind))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)?;
        // Whatever the builder and the umask did: the run's alone. (A umask
        // can only take bits away from 0700; a look is cheaper than a
        // metadata write, which most runs do not need.)
        if std::fs::symlink_metadata(dir.path())?.permissions().mode() & 0o7777 != 0o700 {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        }
        // The TempDir would remove it with std's remove_dir_all; ours is
        // depth-independent and reports failures.
        Ok(RunDir { path: dir.keep(), log, pending: None })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run's working directory in it (made by [`RunDirs::create`]).
    pub fn work(&self) -> PathBuf {
        self.path.join(WORK_DIR_NAME)
    }
}

/// The working directory's name in a run's directory.
pub const WORK_DIR_NAME: &str = "work";

impl RunDir {
    fn remove(path: &Path, log: &CleanupLog) {
        // A run that left nothing behind (a trivial one) leaves an empty
        // working directory: two `rmdir`s, where the walk takes more.
        let _ = rustix::fs::unlinkat(rustix::fs::CWD, path.join(WORK_DIR_NAME), AtFlags::REMOVEDIR);
        if let Err(e) = remove_tree(path) {
            if e.kind() != io::ErrorKind::NotFound {
                log.record(path, &e);
            }
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let (Some(pending), Ok(handle)) = (self.pending.clone(), tokio::runtime::Handle::try_current()) else {
            Self::remove(&self.path, &self.log);
            return;
        };
        use std::sync::atomic::Ordering;
        pending.count.fetch_add(1, Ordering::AcqRel);
        let (path, log) = (std::mem::take(&mut self.path), Arc::clone(&self.log));
        let task = Arc::clone(&pending);
        let spawned = handle.spawn_blocking(move || {
            Self::remove(&path, &log);
            task.count.fetch_sub(1, Ordering::AcqRel);
            task.done.notify_waiters();
        });
        drop(spawned);
    }
}

/// Makes the run directories of one runtime: named for its [`Owner`],
/// failures of their removal logged.
#[derive(Debug)]
pub struct RunDirs {
    parent: PathBuf,
    owner: Owner,
    log: Arc<CleanupLog>,
    pending: Arc<PendingRemovals>,
}

impl RunDirs {
    /// Lock an owner in `parent` (sweeping what dead owners left there
    /// first, failures into `log`).
    pub fn new(parent: PathBuf, log: Arc<CleanupLog>) -> io::Result<RunDirs> {
        for failure in sweep(&parent).failed {
            log.record(&failure.path, &io::Error::other(failure.error));
        }
        let owner = Owner::new(std::slice::from_ref(&parent))?;
        Ok(RunDirs { parent, owner, log, pending: Arc::default() })
    }

    /// Resolves once every directory dropped so far is removed.
    pub async fn removed(&self) {
        self.pending.wait().await;
    }

    /// Whether every directory dropped so far is removed.
    pub fn all_removed(&self) -> bool {
        self.pending.count.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// The owner id the directories (and run cgroups) are named after.
    pub fn owner_id(&self) -> &str {
        self.owner.id()
    }

    /// A new run directory (mode 0700) holding an empty working directory
    /// ([`RunDir::work`], 0700). `out/` is the child's to make, and only
    /// when the request collects it.
    pub fn create(&self) -> io::Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let mut dir = RunDir::create(&self.parent, "run", &self.owner, Arc::clone(&self.log))?;
        dir.pending = Some(Arc::clone(&self.pending));
        std::fs::DirBuilder::new().mode(0o700).create(dir.work())?;
        Ok(dir)
    }
}

/// A live runtime's claim on the directories it creates; see the module
/// docs. Dropping it removes its lock files.
#[derive(Debug)]
pub struct Owner {
    id: String,
    locks: Vec<(PathBuf, File)>,
}

impl Owner {
    /// Create and lock `pycage-<id>.lock` in each of `parents`.
    pub fn new(parents: &[PathBuf]) -> io::Result<Owner> {
        let id = format!("{}x{:08x}", std::process::id(), random_u32());
        let mut locks = Vec::with_capacity(parents.len());
        for parent in parents {
            if locks.iter().any(|(path, _): &(PathBuf, File)| path.parent() == Some(parent.as_path())) {
                continue;
            }
            let staged = tempfile::Builder::new().prefix(".pycage-lock-").tempfile_in(parent)?;
            rustix::fs::flock(staged.as_file(), FlockOperation::NonBlockingLockExclusive).map_err(errno)?;
            let path = parent.join(format!("{PREFIX}{id}.lock"));
            // Renamed into place already locked: a sweeper never sees it unlocked.
            let file = staged.persist_noclobber(&path).map_err(|e| e.error)?;
            locks.push((path, file));
        }
        Ok(Owner { id, locks })
    }

    /// The prefix of a directory of `kind` this owner creates.
    pub fn dir_prefix(&self, kind: &str) -> String {
        format!("{PREFIX}{kind}-{}-", self.id)
    }

    /// This owner's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        return nanos ^ std::process::id();
    }
    u32::from_ne_bytes(bytes)
}

impl Drop for Owner {
    fn drop(&mut self) {
        for (path, _) in &self.locks {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What [`sweep`] did in one directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Directories and lock files of dead owners that were removed.
    pub removed: Vec<PathBuf>,
    /// Those that could not be.
    pub failed: Vec<CleanupFailure>,
}

/// The owner id in `pycage-<kind>-<id>-<random>` (a directory) or
/// `pycage-<id>.lock`, if `name` is one of pycage's.
fn owner_of(name: &str) -> Option<(&str, bool)> {
    let rest = name.strip_prefix(PREFIX)?;
    if let Some(id) = rest.strip_suffix(".lock") {
        return valid_id(id).then_some((id, true));
    }
    let (_kind, rest) = rest.split_once('-')?;
    let (id, _random) = rest.split_once('-')?;
    valid_id(id).then_some((id, false))
}

/// `<pid>x<8 hex digits>`.
fn valid_id(id: &str) -> bool {
    match id.split_once('x') {
        Some((pid, tag)) => {
            !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && tag.len() == 8
                && tag.bytes().all(|b| b.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Remove what dead pycage processes left in `parent` (see the module
/// docs). Never touches a live owner's entries or another user's.
pub fn sweep(parent: &Path) -> SweepReport {
    let mut report = SweepReport::default();
    let Ok(entries) = std::fs::read_dir(parent) else { return report };
    let me = rustix::process::geteuid().as_raw();
    let mut locks: Vec<(String, PathBuf)> = Vec::new();
    let mut dirs: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries.flatten().take(MAX_SWEEP_ENTRIES) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((id, is_lock)) = owner_of(name) else { continue };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if std::os::unix::fs::MetadataExt::uid(&meta) != me {
            continue;
        }
        if is_lock && meta.file_type().is_file() {
            locks.push((id.to_string(), path));
        } else if !is_lock && meta.file_type().is_dir() {
            dirs.push((id.to_string(), path));
        }
    }
    let mut dead: Vec<(String, Option<(PathBuf, File)>)> = Vec::new();
    for (id, path) in locks {
        let Ok(file) = File::open(&path) else { continue };
        if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
            // Still the same file at that name (not replaced meanwhile)?
            let same = std::fs::symlink_metadata(&path).ok().zip(file.metadata().ok()).is_some_and(|(a, b)| {
                std::os::unix::fs::MetadataExt::ino(&a) == std::os::unix::fs::MetadataExt::ino(&b)
            });
            if same {
                dead.push((id, Some((path, file))));
            }
        }
    }
    let live_locked = |id: &str| {
        // A lock file we did not get is held by a live owner.
        std::fs::symlink_metadata(parent.join(format!("{PREFIX}{id}.lock"))).is_ok()
            && !dead.iter().any(|(d, _)| d == id)
    };
    for (id, path) in dirs {
        if live_locked(&id) {
            continue;
        }
        match remove_tree(&path) {
            Ok(()) => report.removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => report.failed.push(CleanupFailure { path, error: e.to_string() }),
        }
    }
    for (_, lock) in dead {
        if let Some((path, _file)) = lock {
            match std::fs::remove_file(&path) {
                Ok(()) => report.removed.push(path),
                Err(e) => report.failed.push(CleanupFailure { path, error: e.to_string() }),
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn removes_links_fifos_and_locked_down_dirs_without_following() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "k").unwrap();
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b/c")).unwrap();
        std::fs::write(tree.join("a/b/c/f"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), tree.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("keep"), tree.join("a/b/flink")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            tree.join("fifo").as_path(),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::fs::set_permissions(tree.join("a/b/c"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(tree.join("a/b"), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(tree.join("a"), std::fs::Permissions::from_mode(0o000)).unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(std::fs::read_to_string(outside.path().join("keep")).unwrap(), "k");
        // A file and a symlink at the top are removed too (the link, not its target).
        std::fs::write(root.path().join("file"), "f").unwrap();
        remove_tree(&root.path().join("file")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("top-link")).unwrap();
        remove_tree(&root.path().join("top-link")).unwrap();
        assert!(outside.path().join("keep").exists());
        assert_eq!(remove_tree(&root.path().join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
        // An empty directory (one `rmdir`), whatever its own mode; a
        // symlink to one is removed as a link, its target kept.
        let empty = root.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o000)).unwrap();
        std::os::unix::fs::symlink(&empty, root.path().join("empty-link")).unwrap();
        remove_tree(&root.path().join("empty-link")).unwrap();
        assert!(empty.exists());
        remove_tree(&empty).unwrap();
        assert!(!empty.exists());
    }

    #[test]
    fn wide_directories_are_emptied_in_batches() {
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("wide");
        std::fs::create_dir(&tree).unwrap();
        for i in 0..(BATCH + 10) {
            std::fs::write(tree.join(format!("f{i}")), "").unwrap();
        }
        for i in 0..20 {
            std::fs::create_dir_all(tree.join(format!("d{i}/e/f"))).unwrap();
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
    }

    #[test]
    fn owner_names() {
        assert_eq!(owner_of("pycage-123x0000abcd.lock"), Some(("123x0000abcd", true)));
        assert_eq!(owner_of("pycage-run-123x0000abcd-Xy12Zq"), Some(("123x0000abcd", false)));
        assert_eq!(owner_of("pycage-bootstrap-9x89abcdef-a"), Some(("9x89abcdef", false)));
        assert_eq!(owner_of("pycage-run-abc"), None);
        assert_eq!(owner_of("pycage-run-12x3-abc"), None);
        assert_eq!(owner_of("other-12x0000abcd.lock"), None);
        assert_eq!(owner_of("pycage-x0000abcd.lock"), None);
    }

    #[test]
    fn a_log_keeps_the_last_failures() {
        let log = CleanupLog::default();
        for i in 0..(MAX_LOGGED_FAILURES + 3) {
            log.record(Path::new(&format!("/x/{i}")), &io::Error::other("boom"));
        }
        let failures = log.drain();
        assert_eq!(failures.len(), MAX_LOGGED_FAILURES);
        assert_eq!(failures[0].path, PathBuf::from("/x/3"));
        assert_eq!(failures[0].to_string(), "could not remove /x/3: boom");
        assert!(log.drain().is_empty());
    }
}
