//! Where the bootstrap lives, and the probe cache that lets a one-shot
//! command start the interpreter once.
//!
//! Without a cache directory, every [`crate::Runtime`] writes the embedded
//! Python files to a fresh temporary directory and probes the interpreter
//! (one start, which also imports and byte-compiles the bootstrap there).
//!
//! With one (`RuntimeConfig::cache_dir`; the CLI uses the user's cache
//! directory, as uv does), both are kept:
//!
//! - `bootstrap-<H>/pycage/*.py` (+ `__pycache__`), where `<H>` hashes the
//!   embedded files and this crate's version: written once, atomically
//!   (a temporary directory renamed into place), never modified after;
//! - `interpreter-<K>.json`, the probe's answer, where `<K>` hashes what
//!   decides what a run will see: the interpreter path as given (made
//!   absolute, symlinks *not* resolved: a virtual environment's
//!   `bin/python` is a symlink to its base interpreter, and names another
//!   `sys.prefix` and site-packages than the base does), the size and mtime
//!   of the file it leads to, the `pyvenv.cfg` beside it (a venv's), `<H>`
//!   and the preload list. An entry is used only while every file it
//!   watches is unchanged: the executable it names (`sys.executable`), the
//!   venv's `pyvenv.cfg`, and each directory on the interpreter's
//!   `sys.path` (a directory's mtime changes when a package is installed
//!   into it or removed: the preload's check is then made again).
//!   Otherwise the interpreter is probed again and the entry rewritten. A
//!   probe that fails (the bootstrap or a preload does not import) is never
//!   kept.
//!
//! A path found on `PATH` may be a wrapper script (a pyenv shim) that picks
//! its interpreter at run time; its entry stays valid while the shim and
//! the interpreter it chose are unchanged, so after switching a shim's
//! version, pass `--python` or clear the cache. Any cache failure (an
//! unwritable directory, a corrupt entry) falls back to probing: the cache
//! can make start-up faster, never fail it.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// The Python package shipped inside the binary.
pub(crate) const PYTHON_FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../../python/pycage/__init__.py")),
    ("_private.py", include_str!("../../../python/pycage/_private.py")),
    ("_wire.py", include_str!("../../../python/pycage/_wire.py")),
    ("encoder.py", include_str!("../../../python/pycage/encoder.py")),
    ("decoder.py", include_str!("../../../python/pycage/decoder.py")),
    ("channel.py", include_str!("../../../python/pycage/channel.py")),
    ("logs.py", include_str!("../../../python/pycage/logs.py")),
    ("display.py", include_str!("../../../python/pycage/display.py")),
    ("mpl_backend.py", include_str!("../../../python/pycage/mpl_backend.py")),
    ("namespaces.py", include_str!("../../../python/pycage/namespaces.py")),
    ("memberdoc.py", include_str!("../../../python/pycage/memberdoc.py")),
    ("signals.py", include_str!("../../../python/pycage/signals.py")),
    ("runner.py", include_str!("../../../python/pycage/runner.py")),
    ("outcome.py", include_str!("../../../python/pycage/outcome.py")),
    ("finalize.py", include_str!("../../../python/pycage/finalize.py")),
    ("network.py", include_str!("../../../python/pycage/network.py")),
    ("bootstrap.py", include_str!("../../../python/pycage/bootstrap.py")),
    ("script.py", include_str!("../../../python/pycage/script.py")),
    ("zygote.py", include_str!("../../../python/pycage/zygote.py")),
    ("_forks.py", include_str!("../../../python/pycage/_forks.py")),
    ("confine.py", include_str!("../../../python/pycage/confine.py")),
    ("preload.py", include_str!("../../../python/pycage/preload.py")),
    ("sitepaths.py", include_str!("../../../python/pycage/sitepaths.py")),
];

/// pycage-join's shared library (`build.rs`), written beside the Python
/// files as `pycage/_join.so`: a zygote's sandboxed children join their
/// shell through it (`python/pycage/confine.py`). Empty when it could not
/// be built: they then join in Python.
const NATIVE_JOIN: &[u8] = include_bytes!(env!("PYCAGE_NATIVE_JOIN_LIBRARY"));

/// The library's name in the bootstrap's `pycage` directory.
const NATIVE_JOIN_FILE: &str = "_join.so";

use pycage_protocol::{JsonBuilder, JsonValue, Kind};

use crate::interpreter::{self, Interpreter, InterpreterError, PreloadFailure};

/// The bootstrap directory a runtime uses.
pub(crate) enum BootstrapDir {
    /// Private to this runtime, removed with it.
    Temp(tempfile::TempDir),
    /// Shared, in the cache; never modified once written.
    Cached(PathBuf),
}

impl BootstrapDir {
    pub(crate) fn path(&self) -> &Path {
        match self {
            BootstrapDir::Temp(t) => t.path(),
            BootstrapDir::Cached(p) => p,
        }
    }
}

/// Why the bootstrap cannot be installed or imported.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    #[error(transparent)]
    Interpreter(#[from] InterpreterError),
    #[error("could not write the bootstrap files: {0}")]
    Write(std::io::Error),
    #[error("{stderr}")]
    Import { python: PathBuf, stderr: String },
    #[error("could not preload {}: {}", .0.module, .0.why)]
    Preload(PreloadFailure),
}

/// The user's cache directory for pycage: `$XDG_CACHE_HOME/pycage`, else
/// `$HOME/.cache/pycage`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    base.is_absolute().then(|| base.join("pycage"))
}

/// Installs the bootstrap and probes (or recalls) the interpreter, with
/// `preload` imported as the zygote will.
pub(crate) fn prepare(
    python: Option<&Path>,
    cache: Option<&Path>,
    preload: &[String],
) -> Result<(Interpreter, BootstrapDir), PrepareError> {
    if let Some(cache) = cache {
        if let Some(found) = cached(python, cache, preload)? {
            return Ok(found);
        }
    }
    let dir = write_bootstrap_temp().map_err(PrepareError::Write)?;
    let interpreter = probe_into(python, dir.path(), preload)?;
    Ok((interpreter, BootstrapDir::Temp(dir)))
}

fn probe_into(python: Option<&Path>, dir: &Path, preload: &[String]) -> Result<Interpreter, PrepareError> {
    let report = interpreter::probe_with_bootstrap(python, Some(dir), preload)?;
    if let Err(stderr) = report.bootstrap {
        return Err(PrepareError::Import { python: report.interpreter.executable, stderr });
    }
    share_bytecode(dir);
    report.preload.map_err(PrepareError::Preload)?;
    Ok(report.interpreter)
}

/// `Ok(None)`: the cache cannot be used; probe without it.
fn cached(
    python: Option<&Path>,
    cache: &Path,
    preload: &[String],
) -> Result<Option<(Interpreter, BootstrapDir)>, PrepareError> {
    let found = match python {
        // A bare name is looked up on PATH, as running it would.
        Some(p) if !p.as_os_str().is_empty() && p.parent() == Some(Path::new("")) => {
            match p.to_str().and_then(interpreter::which) {
                Some(found) => found,
                None => return Ok(None),
            }
        }
        Some(p) => p.to_path_buf(),
        None => interpreter::which("python3").ok_or(InterpreterError::NotFound)?,
    };
    // As given, not resolved: a venv's python is a symlink to its base.
    let Ok(given) = std::path::absolute(&found) else { return Ok(None) };
    let Some(given_stamp) = stamp(&given) else { return Ok(None) };
    let venv_cfg = pyvenv_cfg(&given).and_then(|cfg| stamp(&cfg));
    let content = content_hash();
    let bootstrap = cache.join(format!("bootstrap-{content:016x}"));
    if !bootstrap.join("pycage").is_dir() && install_bootstrap(cache, &bootstrap).is_err() {
        return Ok(None);
    }
    let mut key = std::collections::hash_map::DefaultHasher::new();
    (given.as_os_str(), given_stamp, venv_cfg, content, preload).hash(&mut key);
    let entry = cache.join(format!("interpreter-{:016x}.json", key.finish()));
    if let Some(interpreter) = read_entry(&entry) {
        return Ok(Some((interpreter, BootstrapDir::Cached(bootstrap))));
    }
    let interpreter = probe_into(Some(&found), &bootstrap, preload)?;
    // Best effort: a failed write only means the next start probes again.
    let _ = write_entry(cache, &entry, &interpreter);
    Ok(Some((interpreter, BootstrapDir::Cached(bootstrap))))
}

/// The `pyvenv.cfg` that makes `python` a virtual environment's
/// interpreter, if there is one (CPython looks beside the executable and
/// one directory up).
pub(crate) fn pyvenv_cfg(python: &Path) -> Option<PathBuf> {
    let dir = python.parent()?;
    [dir.join("pyvenv.cfg"), dir.parent()?.join("pyvenv.cfg")].into_iter().find(|p| p.is_file())
}

/// What an entry watches: the executable, the venv's `pyvenv.cfg`, and the
/// directories on `sys.path` (their mtimes change when a package is
/// installed or removed), each that exists.
fn watched(i: &Interpreter) -> Vec<PathBuf> {
    let mut paths = vec![i.executable.clone()];
    if let Some(venv) = &i.venv {
        paths.push(venv.join("pyvenv.cfg"));
    }
    paths.extend(i.sys_path.iter().filter(|p| p.is_dir()).cloned());
    paths
}

/// Size and mtime (ns) of a file (following symlinks).
fn stamp(path: &Path) -> Option<(u64, i128)> {
    let meta = std::fs::metadata(path).ok()?;
    let mtime = meta.modified().ok()?;
    let ns = match mtime.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    Some((meta.len(), ns))
}

fn content_hash() -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    for (name, text) in PYTHON_FILES {
        (name, text).hash(&mut h);
    }
    NATIVE_JOIN.hash(&mut h);
    h.finish()
}

/// Writes the files into a fresh temporary directory (mode 0755 dirs, 0644
/// files: the sandbox's unprivileged uid reads them; only the host writes).
fn write_files(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))?;
    let pkg = root.join("pycage");
    std::fs::create_dir(&pkg)?;
    std::fs::set_permissions(&pkg, std::fs::Permissions::from_mode(0o755))?;
    for (name, text) in PYTHON_FILES {
        let path = pkg.join(name);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    }
    if !NATIVE_JOIN.is_empty() {
        let path = pkg.join(NATIVE_JOIN_FILE);
        std::fs::write(&path, NATIVE_JOIN)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

pub(crate) fn write_bootstrap_temp() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("pycage-bootstrap-").tempdir()?;
    write_files(dir.path())?;
    Ok(dir)
}

/// Writes `target` atomically: a sibling temporary directory renamed into
/// place. Losing a race to another process is success.
fn install_bootstrap(cache: &Path, target: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(cache)?;
    let tmp = tempfile::Builder::new().prefix("tmp-bootstrap-").tempdir_in(cache)?;
    write_files(tmp.path())?;
    match std::fs::rename(tmp.path(), target) {
        Ok(()) => {
            // Renamed away: nothing left for the TempDir to remove.
            let _ = tmp.keep();
            Ok(())
        }
        Err(_) if target.join("pycage").is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Lets the sandboxed uid read the bytecode the probe compiled (children
/// run with `-B`, so they read it and never write their own).
pub(crate) fn share_bytecode(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let cache = dir.join("pycage").join("__pycache__");
    if let Ok(entries) = std::fs::read_dir(&cache) {
        let _ = std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755));
        for e in entries.flatten() {
            let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644));
        }
    }
}

fn write_entry(cache: &Path, entry: &Path, i: &Interpreter) -> std::io::Result<()> {
    let mut watch = Vec::new();
    for path in watched(i) {
        let Some((size, mtime)) = stamp(&path) else { return Err(std::io::Error::other("a watched file is gone")) };
        watch.push((path, size, mtime));
    }
    let mut b = JsonBuilder::new();
    let built = (|| -> Result<(), pycage_protocol::BuildError> {
        b.begin_object()?;
        b.key("executable")?;
        b.string(&i.executable.to_string_lossy())?;
        b.key("watch")?;
        b.begin_array()?;
        for (path, size, mtime) in &watch {
            b.begin_array()?;
            b.string(&path.to_string_lossy())?;
            b.number(&size.to_string())?;
            b.number(&mtime.to_string())?;
            b.end()?;
        }
        b.end()?;
        b.key("version")?;
        b.begin_array()?;
        for part in [i.version.0, i.version.1, i.version.2] {
            b.number(&part.to_string())?;
        }
        b.end()?;
        for (key, paths) in [("prefixes", &i.prefixes), ("path", &i.sys_path)] {
            b.key(key)?;
            b.begin_array()?;
            for p in paths {
                b.string(&p.to_string_lossy())?;
            }
            b.end()?;
        }
        if let Some(e) = &i.zygote_error {
            b.key("zygoteError")?;
            b.string(e)?;
        }
        if let Some(v) = &i.venv {
            b.key("venv")?;
            b.string(&v.to_string_lossy())?;
        }
        b.key("abi")?;
        b.string(&i.abi)?;
        b.end()
    })();
    let value = built.and_then(|()| b.finish()).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(cache)?;
    std::io::Write::write_all(&mut tmp, value.to_canonical_string().as_bytes())?;
    tmp.persist(entry).map_err(|e| e.error)?;
    Ok(())
}

fn read_entry(entry: &Path) -> Option<Interpreter> {
    let bytes = std::fs::read(entry).ok()?;
    let value = JsonValue::parse(&bytes).ok()?;
    let root = value.root();
    let executable = PathBuf::from(root.get("executable")?.as_str()?);
    let mut watched_executable = false;
    for item in root.get("watch")?.as_array()? {
        let mut parts = item.as_array()?;
        let path = PathBuf::from(parts.next()?.as_str()?);
        let size = parts.next()?.as_number()?.as_u64()?;
        let mtime: i128 = parts.next()?.as_number()?.as_str().parse().ok()?;
        if stamp(&path)? != (size, mtime) {
            return None;
        }
        watched_executable |= path == executable;
    }
    if !watched_executable {
        return None;
    }
    let version: Vec<u64> =
        root.get("version")?.as_array()?.filter_map(|n| n.as_number().and_then(|n| n.as_u64())).collect();
    let [major, minor, micro] = version[..] else { return None };
    let paths = |key: &str| -> Option<Vec<PathBuf>> {
        match root.get(key)?.kind() {
            Kind::Array(it) => Some(it.filter_map(|s| s.as_str().map(PathBuf::from)).collect()),
            _ => None,
        }
    };
    Some(Interpreter {
        executable,
        version: (major, minor, micro),
        prefixes: paths("prefixes")?,
        sys_path: paths("path")?,
        zygote_error: root.get("zygoteError").and_then(|e| e.as_str()).map(str::to_owned),
        venv: root.get("venv").and_then(|e| e.as_str()).map(PathBuf::from),
        abi: root.get("abi")?.as_str()?.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_prepare_reads_the_cache_and_a_changed_executable_is_probed_again() {
        let cache = tempfile::tempdir().unwrap();
        let (first, dir) = prepare(None, Some(cache.path()), &[]).unwrap();
        assert!(matches!(dir, BootstrapDir::Cached(_)));
        assert!(dir.path().join("pycage/__pycache__").is_dir(), "the probe compiled the bootstrap");
        let entries: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("interpreter-"))
            .collect();
        assert_eq!(entries.len(), 1);
        let entry = entries[0].path();
        let (second, _) = prepare(None, Some(cache.path()), &[]).unwrap();
        assert_eq!(first, second);
        assert_eq!(read_entry(&entry).as_ref(), Some(&first));
        // A stale record (the executable "changed") is not used.
        let text = std::fs::read_to_string(&entry).unwrap().replace("\"watch\":[[\"", "\"watch\":[[\"/gone");
        std::fs::write(&entry, text).unwrap();
        assert_eq!(read_entry(&entry), None);
        let (third, _) = prepare(None, Some(cache.path()), &[]).unwrap();
        assert_eq!(third, first);
        assert_eq!(read_entry(&entry).as_ref(), Some(&first), "the entry was rewritten");
        // Garbage is ignored, not an error.
        std::fs::write(&entry, b"\xff not json").unwrap();
        assert!(prepare(None, Some(cache.path()), &[]).is_ok());
    }
}
