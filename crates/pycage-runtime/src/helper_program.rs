//! Installing an embedded shell helper program (`pycage-helper-build`'s,
//! which the Python package and the CLI embed): written once into the
//! user's pycage cache under a name of its content, and run from there.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::probe_cache::default_cache_dir;

/// `program` (a shell helper's executable, embedded in the caller) as
/// installed in the user's pycage cache ([`default_cache_dir`]): written
/// there on the first call in this process, unless a file with exactly
/// that content is there already, and given while it is still there (a
/// cache cleaned since gives `None`). `None` also without a cache
/// directory, on one mounted `noexec`, or when it cannot be written: the
/// caller then runs another helper. One program per process: later calls
/// give the first one's.
pub fn installed_shell_helper(program: &'static [u8]) -> Option<&'static Path> {
    static INSTALLED: OnceLock<Option<PathBuf>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| install(program, &default_cache_dir()?).ok())
        .as_deref()
        .filter(|installed| installed.is_file())
}

/// Writes `program` into `cache` under a name of its content (a temporary
/// file renamed into place: a file under that name is whole), unless a
/// file with exactly that content is there.
fn install(program: &[u8], cache: &Path) -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    program.hash(&mut hasher);
    let path = cache.join(format!("shell-helper-{:016x}", hasher.finish()));
    std::fs::create_dir_all(cache)?;
    let noexec =
        rustix::fs::statvfs(cache).map(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::NOEXEC)).unwrap_or(true);
    if noexec {
        return Err(std::io::Error::other("the cache directory is mounted noexec"));
    }
    sweep_stale_temporaries(cache);
    if same_content(&path, program) {
        return Ok(path);
    }
    let mut file = tempfile::Builder::new().prefix(TEMPORARY_PREFIX).tempfile_in(cache)?;
    file.write_all(program)?;
    file.as_file().set_permissions(std::fs::Permissions::from_mode(0o755))?;
    file.as_file().sync_all()?;
    match file.persist_noclobber(&path) {
        Ok(_) => Ok(path),
        // Another process installed it first (or a stale file is there).
        Err(e) if same_content(&path, program) => {
            drop(e);
            Ok(path)
        }
        Err(e) => {
            // A stale file of another content under our name: replace it.
            e.file.persist(&path).map_err(|e| e.error)?;
            Ok(path)
        }
    }
}

/// Prefix of an install's temporary file in the cache.
const TEMPORARY_PREFIX: &str = "tmp-shell-helper-";

/// How old an install's temporary file must be to be taken for the
/// leftover of a process killed mid-install (a live install writes and
/// renames its own within a second).
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the temporary files of installs that never finished (their
/// process was killed between writing and renaming): a megabyte each,
/// which nothing else would ever remove. Best effort; regular files only.
fn sweep_stale_temporaries(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else { return };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TEMPORARY_PREFIX) {
            continue;
        }
        let stale = entry
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_file)
            .and_then(|m| m.modified().ok())
            .is_some_and(|modified| modified.elapsed().is_ok_and(|age| age >= STALE_TEMPORARY));
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether `path` is an executable regular file holding exactly `content`
/// (a symlink or a truncated file is not).
fn same_content(path: &Path, content: &[u8]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    meta.is_file()
        && meta.len() == content.len() as u64
        && meta.permissions().mode() & 0o111 != 0
        && std::fs::read(path).is_ok_and(|found| found == content)
}
