//! Files into and out of a run: bounded copies that never follow a symlink.
//!
//! [`copy_entry`] copies one file or directory tree from a source directory
//! descriptor to a destination directory descriptor. Every open is an
//! `openat` relative to a descriptor opened with `O_NOFOLLOW`, so a path
//! the program controls can never lead outside the tree it names, even if
//! it renames or replaces entries while the copy runs. Only regular files
//! and directories are copied; symlinks, devices, FIFOs and sockets are
//! skipped (never opened: a device could react to an open) and listed in
//! the report with the reason. A regular file is opened `O_NONBLOCK |
//! O_NOCTTY` after `fstatat` said it was one, and checked again with
//! `fstat` (same inode, still regular) before a byte is read.
//!
//! Nothing that already exists at the destination is written or entered:
//! a file is created `O_CREAT | O_EXCL | O_NOFOLLOW` and a directory with
//! `mkdirat`, and a name that exists (a file, a symlink, a directory) is
//! skipped and reported ([`SkipKind::Failed`]), a directory with its whole
//! subtree. Only the copied entry itself may be an existing directory (the
//! caller's output directory). The output directory is the caller's, and
//! what the program leaves in `out/` is the program's: merging one into the
//! other would let a sandboxed program overwrite the caller's files or plant
//! new ones in the caller's trees (`out/.git/hooks/pre-commit` run by the
//! next `git commit` in an output directory that is a repository). The
//! create itself fails on an existing name, so no race between a check and
//! the write can turn a new name into an existing one.
//!
//! Bounds: [`CopyLimits`] caps the total bytes (a file that does not fit is
//! skipped whole, never cut), the number of entries and the depth; the
//! descriptors held are two per level of the current path, at most
//! `2 * max_depth`. A file that grows while it is copied is cut at the size
//! `fstat` reported.

/// The directory, inside the run's working directory, whose files are
/// copied to the caller's output directory when the run settles. It exists
/// (empty) when the program starts.
pub const OUTPUT_DIR_NAME: &str = "out";

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Read/write chunk of a file copy.
const CHUNK: usize = 64 * 1024;

/// The entries a run's output may leave in the caller's output directory:
/// the cap of the `out/` copy ([`CopyLimits::output`]), and of the display
/// files the CLI writes beside it, so neither can flood the directory.
pub const MAX_OUTPUT_ENTRIES: u64 = 10_000;

/// Caps of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLimits {
    /// Total bytes of file content.
    pub max_bytes: u64,
    /// Files, directories and skipped entries together.
    pub max_entries: u64,
    /// Directory levels below the copied entry.
    pub max_depth: usize,
}

impl CopyLimits {
    /// Caps for a run's output: `max_bytes`, [`MAX_OUTPUT_ENTRIES`]
    /// entries, 32 levels.
    pub fn output(max_bytes: u64) -> CopyLimits {
        CopyLimits { max_bytes, max_entries: MAX_OUTPUT_ENTRIES, max_depth: 32 }
    }
}

/// How the destination is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Files 0644 (0755 when the source is executable), directories 0755.
    Writable,
    /// Files 0444 (0555), directories 0555: a run's inputs, read-only by mode.
    ReadOnly,
}

impl Access {
    /// The destination as a skip reason names it: writable copies are a
    /// run's output, read-only ones its inputs in its own directory.
    fn place(self) -> &'static str {
        match self {
            Access::Writable => "the output directory",
            Access::ReadOnly => "the destination",
        }
    }
}

/// Why one entry could not be copied; its text is the skip reason.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error("exists in {0}; not overwritten")]
    FileExists(&'static str),
    #[error("a directory that exists in {0}; not merged into (nothing below it copied)")]
    DirExists(&'static str),
    #[error("replaced while it was being copied: not copied")]
    Replaced,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One copied file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedFile {
    /// Its path relative to the copied entry's parent (`out/a/b.txt` is
    /// reported as `a/b.txt` when `out`'s contents are copied).
    pub path: PathBuf,
    /// Bytes copied.
    pub bytes: u64,
}

/// Why an entry was not copied, in classes a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipKind {
    /// Never copied, by rule: a symlink, a device, a FIFO, a socket.
    Excluded,
    /// A limit of the copy (bytes, entries, depth) left it out.
    Limit,
    /// An error reading or writing it (the destination could not be
    /// written, the entry vanished or was replaced meanwhile, ...).
    Failed,
}

impl SkipKind {
    /// The name in JSON: `excluded`, `limit`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::Excluded => "excluded",
            SkipKind::Limit => "limit",
            SkipKind::Failed => "failed",
        }
    }
}

/// One entry that was not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its relative path (empty: the copied entry itself, e.g. all of `out/`
    /// when the destination could not be opened).
    pub path: PathBuf,
    /// Why.
    pub reason: String,
    /// The class of `reason`.
    pub kind: SkipKind,
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Files copied, in the order they were.
    pub files: Vec<CopiedFile>,
    /// Entries not copied.
    pub skipped: Vec<Skipped>,
    /// Total bytes copied.
    pub bytes: u64,
    /// A limit stopped the copy (some entries were not even looked at).
    pub truncated: bool,
}

impl CopyReport {
    /// Whether something that should have been copied was not: an entry
    /// skipped for a limit or an error (symlinks, devices, FIFOs and sockets
    /// are never copied, so their absence is not a loss).
    pub fn incomplete(&self) -> bool {
        self.skipped.iter().any(|s| s.kind != SkipKind::Excluded)
    }

    /// Append this report as a JSON object to `b`.
    pub fn write_json(&self, b: &mut pycage_protocol::JsonBuilder) -> Result<(), pycage_protocol::BuildError> {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        b.begin_object()?;
        b.key("files")?;
        b.begin_array()?;
        for f in &self.files {
            b.begin_object()?;
            b.key("path")?;
            b.string(&path(&f.path))?;
            b.key("bytes")?;
            b.number(&f.bytes.to_string())?;
            b.end()?;
        }
        b.end()?;
        b.key("skipped")?;
        b.begin_array()?;
        for s in &self.skipped {
            b.begin_object()?;
            b.key("path")?;
            b.string(&path(&s.path))?;
            b.key("reason")?;
            b.string(&s.reason)?;
            b.key("kind")?;
            b.string(s.kind.as_str())?;
            b.end()?;
        }
        b.end()?;
        b.key("bytes")?;
        b.number(&self.bytes.to_string())?;
        b.key("truncated")?;
        b.bool(self.truncated)?;
        b.key("complete")?;
        b.bool(!self.incomplete())?;
        b.end()
    }
}

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

fn describe(file_type: FileType) -> &'static str {
    match file_type {
        FileType::Symlink => "a symlink: never followed or copied",
        FileType::Fifo => "a FIFO: not copied",
        FileType::Socket => "a socket: not copied",
        FileType::CharacterDevice | FileType::BlockDevice => "a device: not copied",
        FileType::RegularFile | FileType::Directory | FileType::Unknown => "not a regular file or directory",
    }
}

/// Open `name` in `dir` as a directory, never through a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Open (creating it, mode 0755) the directory at `path` for writing
/// copies into.
pub fn create_dir_all(path: &Path) -> io::Result<OwnedFd> {
    std::fs::create_dir_all(path)?;
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)
}

/// One directory being copied: the names still to handle.
struct Frame {
    src: OwnedFd,
    dst: OwnedFd,
    rel: PathBuf,
    depth: usize,
    names: Vec<CString>,
    access: Access,
}

/// Copy the entry `name` of `src_dir` to `dst_name` in `dst_dir` (see the
/// module docs). `rel` is the name reported for it. A directory's
/// entries are reported below `rel`.
pub fn copy_entry(
    src_dir: BorrowedFd<'_>,
    name: &OsStr,
    dst_dir: BorrowedFd<'_>,
    dst_name: &OsStr,
    rel: &Path,
    limits: CopyLimits,
    access: Access,
) -> CopyReport {
    let mut report = CopyReport::default();
    let (Ok(name), Ok(dst_name)) = (CString::new(name.as_bytes()), CString::new(dst_name.as_bytes())) else {
        report.skipped.push(Skipped {
            path: rel.to_path_buf(),
            reason: "a NUL byte in its name".into(),
            kind: SkipKind::Failed,
        });
        return report;
    };
    let mut entries = 0u64;
    let mut stack: Vec<Frame> = Vec::new();
    copy_one(src_dir, &name, dst_dir, &dst_name, rel, 0, limits, access, &mut report, &mut entries, &mut stack);
    while let Some(frame) = stack.last_mut() {
        let Some(child) = frame.names.pop() else {
            if let Some(done) = stack.pop() {
                if done.access == Access::ReadOnly {
                    let _ = rustix::fs::fchmod(&done.dst, Mode::from_raw_mode(0o555));
                }
            }
            continue;
        };
        if entries >= limits.max_entries {
            report.truncated = true;
            report.skipped.push(Skipped {
                path: frame.rel.join(OsStr::from_bytes(child.as_bytes())),
                reason: format!("over the limit of {} entries", limits.max_entries),
                kind: SkipKind::Limit,
            });
            // Stop looking: drop every pending name.
            for f in &mut stack {
                f.names.clear();
            }
            continue;
        }
        let (src, dst) = (frame.src.try_clone(), frame.dst.try_clone());
        let (rel, depth, frame_access) =
            (frame.rel.join(OsStr::from_bytes(child.as_bytes())), frame.depth, frame.access);
        match (src, dst) {
            (Ok(src), Ok(dst)) => copy_one(
                src.as_fd(),
                &child,
                dst.as_fd(),
                &child,
                &rel,
                depth + 1,
                limits,
                frame_access,
                &mut report,
                &mut entries,
                &mut stack,
            ),
            (Err(e), _) | (_, Err(e)) => {
                report.skipped.push(Skipped { path: rel, reason: e.to_string(), kind: SkipKind::Failed })
            }
        }
    }
    report
}

#[allow(clippy::too_many_arguments)]
fn copy_one(
    src_dir: BorrowedFd<'_>,
    name: &CStr,
    dst_dir: BorrowedFd<'_>,
    dst_name: &CStr,
    rel: &Path,
    depth: usize,
    limits: CopyLimits,
    access: Access,
    report: &mut CopyReport,
    entries: &mut u64,
    stack: &mut Vec<Frame>,
) {
    *entries += 1;
    let skip_as = |report: &mut CopyReport, kind: SkipKind, reason: String| {
        report.skipped.push(Skipped { path: rel.to_path_buf(), reason, kind });
    };
    let skip = |report: &mut CopyReport, reason: String| skip_as(report, SkipKind::Failed, reason);
    let stat = match rustix::fs::statat(src_dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(e) => return skip(report, errno(e).to_string()),
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {
            let size = u64::try_from(stat.st_size).unwrap_or(0);
            if report.bytes.saturating_add(size) > limits.max_bytes {
                report.truncated = true;
                return skip_as(
                    report,
                    SkipKind::Limit,
                    format!("{size} bytes would pass the output limit of {} bytes: not copied", limits.max_bytes),
                );
            }
            match copy_file(src_dir, name, dst_dir, dst_name, &stat, access) {
                Ok(bytes) => {
                    report.bytes += bytes;
                    report.files.push(CopiedFile { path: rel.to_path_buf(), bytes });
                }
                Err(e) => skip(report, e.to_string()),
            }
        }
        FileType::Directory => {
            if depth >= limits.max_depth {
                report.truncated = true;
                return skip_as(
                    report,
                    SkipKind::Limit,
                    format!("deeper than {} levels: not copied", limits.max_depth),
                );
            }
            let src = match open_dir_at(src_dir, name) {
                Ok(fd) => fd,
                Err(e) => return skip(report, e.to_string()),
            };
            // The copied entry itself may be the caller's existing output
            // directory; below it, only directories this copy made.
            let dst = match make_dir(dst_dir, dst_name, depth == 0, access) {
                Ok(fd) => fd,
                Err(e) => return skip(report, e.to_string()),
            };
            let mut names = Vec::new();
            match rustix::fs::Dir::read_from(&src) {
                Ok(dir) => {
                    for entry in dir {
                        match entry {
                            Ok(entry) if entry.file_name() != c"." && entry.file_name() != c".." => {
                                names.push(entry.file_name().to_owned());
                                if names.len() as u64 > limits.max_entries {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                skip(report, format!("listing stopped: {}", errno(e)));
                                break;
                            }
                        }
                    }
                }
                Err(e) => return skip(report, errno(e).to_string()),
            }
            // Popped from the end: reverse so entries go in listing order.
            names.reverse();
            stack.push(Frame { src, dst, rel: rel.to_path_buf(), depth, names, access });
        }
        other => skip_as(report, SkipKind::Excluded, describe(other).into()),
    }
}

/// Create `name` in `dir` as a directory and open it, never through a
/// symlink. One already there is an error unless `may_exist`.
fn make_dir(dir: BorrowedFd<'_>, name: &CStr, may_exist: bool, access: Access) -> Result<OwnedFd, EntryError> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
        Ok(()) => {}
        Err(Errno::EXIST) if may_exist => {}
        Err(Errno::EXIST) => return Err(EntryError::DirExists(access.place())),
        Err(e) => return Err(errno(e).into()),
    }
    Ok(open_dir_at(dir, name)?)
}

fn copy_file(
    src_dir: BorrowedFd<'_>,
    name: &CStr,
    dst_dir: BorrowedFd<'_>,
    dst_name: &CStr,
    expected: &rustix::fs::Stat,
    access: Access,
) -> Result<u64, EntryError> {
    let src = rustix::fs::openat(
        src_dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let stat = rustix::fs::fstat(&src).map_err(errno)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
        || stat.st_ino != expected.st_ino
        || stat.st_dev != expected.st_dev
    {
        return Err(EntryError::Replaced);
    }
    let executable = stat.st_mode & 0o111 != 0;
    let mode = match (access, executable) {
        (Access::Writable, false) => 0o644,
        (Access::Writable, true) => 0o755,
        (Access::ReadOnly, false) => 0o444,
        (Access::ReadOnly, true) => 0o555,
    };
    // `EXCL`: an existing name (a symlink too, even a dangling one) fails
    // the create itself, so no file of the caller's is ever truncated.
    let dst = rustix::fs::openat(
        dst_dir,
        dst_name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| match e {
        Errno::EXIST => EntryError::FileExists(access.place()),
        e => errno(e).into(),
    })?;
    let mut left = u64::try_from(stat.st_size).unwrap_or(0);
    let mut buf = vec![0u8; CHUNK];
    let mut copied = 0u64;
    while left > 0 {
        let want = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = match rustix::io::read(&src, buf.get_mut(..want).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(errno(e).into()),
        };
        let mut chunk = buf.get(..n).unwrap_or_default();
        while !chunk.is_empty() {
            match rustix::io::write(&dst, chunk) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(w) => chunk = chunk.get(w..).unwrap_or_default(),
                Err(Errno::INTR) => {}
                Err(e) => return Err(errno(e).into()),
            }
        }
        copied += n as u64;
        left -= n as u64;
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir_fd(path: &Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    fn copy_out(src_parent: &Path, dst: &Path, limits: CopyLimits) -> CopyReport {
        let src = dir_fd(src_parent);
        let dst_fd = create_dir_all(dst).unwrap();
        copy_entry(
            src.as_fd(),
            OsStr::new("out"),
            dst_fd.as_fd(),
            OsStr::new("."),
            Path::new(""),
            limits,
            Access::Writable,
        )
    }

    #[test]
    fn copies_files_and_dirs_and_skips_everything_else() {
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("key"), "secret").unwrap();
        let run = tempfile::tempdir().unwrap();
        let out = run.path().join("out");
        std::fs::create_dir_all(out.join("sub/deeper")).unwrap();
        std::fs::write(out.join("a.txt"), "hello").unwrap();
        std::fs::write(out.join("sub/deeper/b.bin"), vec![7u8; 100_000]).unwrap();
        std::fs::write(out.join("tool.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(out.join("tool.sh"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(secret.path().join("key"), out.join("link")).unwrap();
        std::os::unix::fs::symlink(secret.path(), out.join("dirlink")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, out.join("fifo").as_path(), FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .unwrap();
        let dest = tempfile::tempdir().unwrap();
        let report = copy_out(run.path(), dest.path(), CopyLimits::output(1 << 20));
        let mut files: Vec<(String, u64)> =
            report.files.iter().map(|f| (f.path.display().to_string(), f.bytes)).collect();
        files.sort();
        assert_eq!(files, [("a.txt".into(), 5), ("sub/deeper/b.bin".into(), 100_000), ("tool.sh".into(), 10)]);
        let mut skipped: Vec<(String, String)> =
            report.skipped.iter().map(|s| (s.path.display().to_string(), s.reason.clone())).collect();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                ("dirlink".into(), "a symlink: never followed or copied".into()),
                ("fifo".into(), "a FIFO: not copied".into()),
                ("link".into(), "a symlink: never followed or copied".into()),
            ]
        );
        assert_eq!((report.bytes, report.truncated), (100_015, false));
        assert!(report.skipped.iter().all(|s| s.kind == SkipKind::Excluded));
        assert!(!report.incomplete(), "what is never copied is not a loss");
        assert_eq!(std::fs::read_to_string(dest.path().join("a.txt")).unwrap(), "hello");
        let mode = std::fs::metadata(dest.path().join("tool.sh")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert!(!dest.path().join("link").exists() && !dest.path().join("dirlink").exists());
    }

    #[test]
    fn limits_bound_bytes_entries_and_depth() {
        let run = tempfile::tempdir().unwrap();
        let out = run.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("big"), vec![1u8; 5000]).unwrap();
        std::fs::write(out.join("small"), vec![1u8; 10]).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let report = copy_out(run.path(), dest.path(), CopyLimits::output(1000));
        assert_eq!(report.files, [CopiedFile { path: PathBuf::from("small"), bytes: 10 }]);
        assert!(report.truncated);
        assert_eq!(report.skipped[0].path, PathBuf::from("big"));
        assert_eq!(report.skipped[0].kind, SkipKind::Limit);
        assert!(report.incomplete());
        assert!(!dest.path().join("big").exists(), "never cut: skipped whole");

        let mut deep = out.clone();
        for _ in 0..40 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let report =
            copy_out(run.path(), dest.path(), CopyLimits { max_bytes: 1 << 20, max_entries: 1000, max_depth: 5 });
        assert!(report.truncated);
        assert!(report.skipped.iter().any(|s| s.reason.starts_with("deeper than 5 levels")), "{report:?}");

        for i in 0..50 {
            std::fs::write(out.join(format!("n{i}")), "").unwrap();
        }
        let dest = tempfile::tempdir().unwrap();
        let report =
            copy_out(run.path(), dest.path(), CopyLimits { max_bytes: 1 << 20, max_entries: 20, max_depth: 5 });
        assert!(report.truncated);
        assert!(report.files.len() < 20, "{}", report.files.len());
    }

    #[test]
    fn a_symlinked_source_or_destination_is_never_followed() {
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("key"), "secret").unwrap();
        let run = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(secret.path(), run.path().join("out")).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let report = copy_out(run.path(), dest.path(), CopyLimits::output(1 << 20));
        assert!(report.files.is_empty());
        assert_eq!(report.skipped.len(), 1);
        assert!(!dest.path().join("key").exists());

        // A destination file that is a symlink is not written through, nor
        // is a directory symlink entered.
        let run = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(run.path().join("out/sub")).unwrap();
        std::fs::write(run.path().join("out/key"), "overwrite").unwrap();
        std::fs::write(run.path().join("out/sub/key"), "overwrite").unwrap();
        let dest = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(secret.path().join("key"), dest.path().join("key")).unwrap();
        std::os::unix::fs::symlink(secret.path(), dest.path().join("sub")).unwrap();
        let report = copy_out(run.path(), dest.path(), CopyLimits::output(1 << 20));
        let mut skipped: Vec<(String, String)> =
            report.skipped.iter().map(|s| (s.path.display().to_string(), s.reason.clone())).collect();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                ("key".into(), "exists in the output directory; not overwritten".into()),
                (
                    "sub".into(),
                    "a directory that exists in the output directory; not merged into (nothing below it copied)".into()
                ),
            ]
        );
        assert_eq!(std::fs::read_to_string(secret.path().join("key")).unwrap(), "secret");
        assert_eq!(std::fs::read_dir(secret.path()).unwrap().count(), 1);
    }

    /// The output directory is the caller's: what exists there is never
    /// overwritten or merged into, only new names are made, and what is
    /// not copied for it is a failed delivery.
    #[test]
    fn nothing_that_exists_at_the_destination_is_overwritten_or_entered() {
        use std::os::unix::fs::PermissionsExt;
        let run = tempfile::tempdir().unwrap();
        let out = run.path().join("out");
        std::fs::create_dir_all(out.join(".git/hooks")).unwrap();
        std::fs::write(out.join(".git/hooks/pre-commit"), "#!/bin/sh\necho pwned\n").unwrap();
        std::fs::set_permissions(out.join(".git/hooks/pre-commit"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(out.join("notes.txt"), "from the program").unwrap();
        std::fs::write(out.join("new.txt"), "new").unwrap();
        std::fs::create_dir(out.join("fresh")).unwrap();
        std::fs::write(out.join("fresh/f.txt"), "f").unwrap();
        let dest = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dest.path().join(".git/hooks")).unwrap();
        std::fs::write(dest.path().join("notes.txt"), "user data").unwrap();

        let report = copy_out(run.path(), dest.path(), CopyLimits::output(1 << 20));
        let mut files: Vec<String> = report.files.iter().map(|f| f.path.display().to_string()).collect();
        files.sort();
        assert_eq!(files, ["fresh/f.txt", "new.txt"]);
        let mut skipped: Vec<(String, &str)> =
            report.skipped.iter().map(|s| (s.path.display().to_string(), s.kind.as_str())).collect();
        skipped.sort();
        assert_eq!(skipped, [(".git".into(), "failed"), ("notes.txt".into(), "failed")]);
        assert!(report.incomplete() && !report.truncated);
        assert!(!dest.path().join(".git/hooks/pre-commit").exists(), "no hook planted");
        assert_eq!(std::fs::read_dir(dest.path().join(".git/hooks")).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(dest.path().join("notes.txt")).unwrap(), "user data");
        assert_eq!(std::fs::read_to_string(dest.path().join("new.txt")).unwrap(), "new");

        // A second copy into the same directory finds every name taken by
        // the first, and changes nothing.
        std::fs::write(out.join("new.txt"), "second").unwrap();
        let again = copy_out(run.path(), dest.path(), CopyLimits::output(1 << 20));
        assert!(again.files.is_empty(), "{again:?}");
        let mut skipped: Vec<String> = again.skipped.iter().map(|s| s.path.display().to_string()).collect();
        skipped.sort();
        assert_eq!(skipped, [".git", "fresh", "new.txt", "notes.txt"]);
        assert_eq!(std::fs::read_to_string(dest.path().join("new.txt")).unwrap(), "new");
    }

    #[test]
    fn read_only_copies_for_inputs() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("data/sub")).unwrap();
        std::fs::write(src.path().join("data/sub/x"), "x").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let report = copy_entry(
            dir_fd(src.path()).as_fd(),
            OsStr::new("data"),
            dir_fd(dest.path()).as_fd(),
            OsStr::new("data"),
            Path::new("data"),
            CopyLimits { max_bytes: u64::MAX, max_entries: u64::MAX, max_depth: 64 },
            Access::ReadOnly,
        );
        assert_eq!(report.files, [CopiedFile { path: PathBuf::from("data/sub/x"), bytes: 1 }]);
        let mode = |p: &str| std::fs::metadata(dest.path().join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode("data"), mode("data/sub"), mode("data/sub/x")), (0o555, 0o555, 0o444));
        crate::cleanup::remove_tree(&dest.path().join("data")).unwrap();
    }
}
