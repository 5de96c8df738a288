//! The sandbox shell helper a runtime starts: the `pycage-shell-helper`
//! program embedded in this module (feature `bundled-shell-helper`, see
//! `build.rs`), installed once into the user's pycage cache and run from
//! there; else this interpreter, loading only this module.
//!
//! Every sandbox shell is two forks of the helper (the shell's supervisor
//! and the run's PID 1), and a fork and an exit cost in proportion to the
//! forked process's memory: the program holds about 0.8 MiB of its own,
//! an interpreter about 3.5 MiB (BENCHMARKS.md, "Where a sandbox shell's
//! CPU goes"). The program and this module come from one build, which the
//! helper protocol checks on every request.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pyo3::prelude::*;

#[cfg(feature = "bundled-shell-helper")]
static BUNDLED: Option<&[u8]> = Some(include_bytes!(env!("PYCAGE_BUNDLED_SHELL_HELPER")));
#[cfg(not(feature = "bundled-shell-helper"))]
static BUNDLED: Option<&[u8]> = None;

/// Which helper a runtime of this module starts: `"program"` (the bundled
/// one, installed), or `"interpreter"`.
pub fn kind() -> &'static str {
    if usable().is_some() {
        "program"
    } else {
        "interpreter"
    }
}

/// The helper's argv (`RuntimeConfig::shell_helper`), or `None` when
/// neither the program nor this interpreter can serve (the runtime then
/// forks the shells itself).
pub fn argv(py: Python<'_>) -> Option<Vec<OsString>> {
    match usable() {
        Some(program) => Some(vec![program.clone().into_os_string()]),
        None => interpreter(py),
    }
}

/// The installed program while it is still there: a cache cleaned since
/// the install leaves the interpreter (a helper that cannot start would
/// leave the runtime forking the shells itself).
fn usable() -> Option<&'static PathBuf> {
    installed().filter(|program| program.is_file())
}

/// The bundled program's path in the cache, installed on first use in this
/// process; `None` without one, without a cache directory, on a cache
/// directory mounted `noexec`, or when it cannot be written.
fn installed() -> Option<&'static PathBuf> {
    static INSTALLED: OnceLock<Option<PathBuf>> = OnceLock::new();
    INSTALLED.get_or_init(|| install(BUNDLED?, &pycage_runtime::default_cache_dir()?).ok()).as_ref()
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

/// This interpreter, loading only this extension module (not the package,
/// nor `site`), as the helper: about 11 MiB. `None` when the interpreter or
/// the module's file is unknown; a `sys.executable` that is not a Python
/// (an embedded one) fails the helper's start, and the runtime then forks
/// the shells itself.
fn interpreter(py: Python<'_>) -> Option<Vec<OsString>> {
    const CODE: &str = "import sys, importlib.util as u\n\
        s = u.spec_from_file_location('pycage._native', sys.argv[1])\n\
        m = u.module_from_spec(s)\n\
        s.loader.exec_module(m)\n\
        m._serve_shell_helper()\n";
    let executable: PathBuf = py.import("sys").ok()?.getattr("executable").ok()?.extract().ok()?;
    let module: PathBuf = py.import("pycage._native").ok()?.getattr("__file__").ok()?.extract().ok()?;
    if executable.as_os_str().is_empty() || !module.is_absolute() {
        return None;
    }
    Some(vec![executable.into(), "-I".into(), "-S".into(), "-c".into(), CODE.into(), module.into()])
}
