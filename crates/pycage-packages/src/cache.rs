//! The package cache of one runtime: requests checked against the
//! caller's policy, installs (one at a time, across processes), entries
//! keyed by what was installed, leases held by the runs that use them,
//! and eviction past a size bound.
//!
//! Layout under the root (`<cache_dir>/packages`, or a temporary
//! directory):
//!
//! - `sets/<key>/`: an installed set (the installer's `--target`); `<key>`
//!   is a SHA-256 of the interpreter, the sorted `name==version` of
//!   every distribution in it and a digest of its files, so requests that
//!   resolve alike share one entry (six runs excluding six versions that
//!   do not exist get one copy, not six), and a package whose metadata
//!   claims to be another distribution gets an entry of its own, never
//!   the one an honest install of that distribution would reuse.
//!   `sets/<key>.size` holds its bytes; `sets/<key>.use` is locked shared
//!   by every run using it, and exclusively by eviction, which skips an
//!   entry in use.
//! - `index/<request key>`: the `<key>` a request resolved to, so a repeated
//!   request installs nothing and asks no index.
//! - `install.lock`: one install at a time (an `flock`, so across pycage
//!   processes too); a request that waited finds the index written.
//!
//! Only the host writes here: a sandboxed run sees its own entry alone,
//! read-only (the runtime mounts it), never the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use sha2::{Digest, Sha256};

use crate::error::PackageError;
use crate::installer::{says_no_wheel, Builder, Installer};
use crate::metadata::{closure, installed};
use crate::requirement::{script_dependencies, Requirement};

/// Failed installs of program-declared names a runtime allows when any
/// name may be declared: each failure asked the index for names of the
/// program's choosing.
pub const MAX_FAILED_RESOLUTIONS: u64 = 16;

/// How the caller lets programs declare packages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Declarations {
    /// None may be declared (the default).
    #[default]
    Refused,
    /// These names (PEP 503-normalized), and what they bring only when
    /// that is allowed too.
    Allowed(Vec<String>),
    /// Any name, and whatever it brings.
    Any,
}

/// How to allow a declaration, in every interface's words.
pub const HOW_TO_ALLOW: &str = "`pycage run --allow-package NAME` or `--allow-any-package`; \
    `allow_packages=[...]` or `allow_any_package=True` in Python; `RuntimeConfig::allow_packages` in Rust";

/// The interpreter runs use, as far as packages care.
#[derive(Debug, Clone)]
pub struct Target {
    /// The executable (the installer installs for it).
    pub python: PathBuf,
    /// `(major, minor, micro)`.
    pub version: (u64, u64, u64),
    /// Cache tag, ABI flags and platform.
    pub abi: String,
}

/// What one run needs installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The caller's requirements, then the program's.
    pub requirements: Vec<Requirement>,
    /// Whether the program declared any (otherwise this is the caller's
    /// set alone, the same for every run).
    pub declared: bool,
}

/// An installed set a run uses: leased (shared) until dropped, so that
/// eviction leaves it alone.
#[derive(Debug)]
pub struct Entry {
    path: PathBuf,
    _lease: File,
}

impl Entry {
    /// The installed tree on the host.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The package cache of one runtime (see the module docs).
pub struct PackageCache {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
    python: PathBuf,
    /// The interpreter's part of every key.
    identity: String,
    abi: String,
    installer: OnceLock<Option<Installer>>,
    with: Vec<Requirement>,
    declarations: Declarations,
    timeout: Duration,
    max_bytes: u64,
    failures: AtomicU64,
    /// Where a package without a wheel is built, if the caller allowed
    /// builds ([`PackageCache::set_builder`]).
    builder: Option<Arc<dyn Builder>>,
}

impl PackageCache {
    /// The cache under `cache_dir` (or a temporary directory), for runs of
    /// `interpreter`, holding at most about `max_bytes` of installed sets.
    pub fn new(
        cache_dir: Option<&Path>,
        interpreter: &Target,
        with: &[String],
        declarations: Declarations,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<PackageCache, PackageError> {
        let make = |root: &Path| -> std::io::Result<()> {
            for dir in [root.to_path_buf(), root.join("sets"), root.join("index")] {
                std::fs::create_dir_all(&dir)?;
                // Sandboxed runs on a root host (their own uids) read their
                // entry; nothing else here is theirs to list.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
            }
            Ok(())
        };
        let in_cache_dir = cache_dir.map(|dir| dir.join("packages")).and_then(|root| match make(&root) {
            Ok(()) => Some(root),
            Err(e) => {
                // A cache directory that cannot be written (a service user
                // whose HOME is `/`) must not stop a runtime that may never
                // install anything: fall back to a temporary cache.
                tracing::warn!("the package cache {} cannot be used ({e}); using a temporary one", root.display());
                None
            }
        });
        let (root, temp) = match in_cache_dir {
            Some(root) => (root, None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("pycage-packages-")
                    .tempdir()
                    .map_err(|e| PackageError::Cache { path: std::env::temp_dir(), message: e.to_string() })?;
                let root = t.path().to_path_buf();
                make(&root).map_err(|e| PackageError::Cache { path: root.clone(), message: e.to_string() })?;
                (root, Some(t))
            }
        };
        let with =
            with.iter().map(|r| Requirement::parse(r).map_err(PackageError::Invalid)).collect::<Result<_, _>>()?;
        let declarations = match declarations {
            Declarations::Allowed(names) => {
                Declarations::Allowed(names.iter().map(|n| crate::requirement::normalize(n)).collect())
            }
            other => other,
        };
        let (major, minor, micro) = interpreter.version;
        Ok(PackageCache {
            root,
            _temp: temp,
            python: interpreter.python.clone(),
            identity: format!("{}\n{major}.{minor}.{micro}\n{}", interpreter.python.display(), interpreter.abi),
            abi: interpreter.abi.clone(),
            installer: OnceLock::new(),
            with,
            declarations,
            timeout,
            max_bytes,
            failures: AtomicU64::new(0),
            builder: None,
        })
    }

    /// Lets installs build what has no wheel, with `builder` (which runs
    /// the build in a sandbox): the caller's opt-in. Without it, a package
    /// without a wheel fails as [`PackageError::NoWheel`].
    pub fn set_builder(&mut self, builder: Arc<dyn Builder>) {
        self.builder = Some(builder);
    }

    /// The cache's directory on the host.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Failed installs of program-declared names so far.
    pub fn failed_resolutions(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// What a run of `program` needs installed (the caller's requirements
    /// and the program's, checked against the policy); `None` when it
    /// needs nothing.
    pub fn request(&self, program: &str) -> Result<Option<Request>, PackageError> {
        let declared = script_dependencies(program)?;
        if !declared.is_empty() {
            self.check_declared(&declared)?;
        }
        if declared.is_empty() && self.with.is_empty() {
            return Ok(None);
        }
        let mut requirements = self.with.clone();
        let any = !declared.is_empty();
        requirements.extend(declared);
        Ok(Some(Request { requirements, declared: any }))
    }

    /// The caller's own set (every run's, when the program declares none).
    pub fn with_request(&self) -> Option<Request> {
        (!self.with.is_empty()).then(|| Request { requirements: self.with.clone(), declared: false })
    }

    fn check_declared(&self, declared: &[Requirement]) -> Result<(), PackageError> {
        let names = || declared.iter().map(|r| format!("{:?}", r.name)).collect::<Vec<_>>().join(", ");
        match &self.declarations {
            Declarations::Any => Ok(()),
            Declarations::Refused => Err(PackageError::NotAllowed {
                what: format!("packages ({})", names()),
                how: HOW_TO_ALLOW.to_owned(),
                allowed: String::new(),
            }),
            Declarations::Allowed(list) => match declared.iter().find(|r| !list.contains(&r.name)) {
                None => Ok(()),
                Some(r) => Err(PackageError::NotAllowed {
                    what: format!("the package {:?}", r.name),
                    how: HOW_TO_ALLOW.to_owned(),
                    allowed: format!("; allowed here: {}", list.join(", ")),
                }),
            },
        }
    }

    /// The key of a request: the interpreter and the sorted texts.
    fn request_key(&self, requirements: &[Requirement]) -> String {
        let mut texts: Vec<String> =
            requirements.iter().map(|r| r.text.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        texts.sort();
        texts.dedup();
        digest("pycage-request-v2", &self.identity, &texts)
    }

    /// The installed set for `request`, installed now unless the cache has
    /// what it resolved to. Blocking; `cancel` stops it (and kills the
    /// installer).
    pub fn ensure(&self, request: &Request, cancel: &AtomicBool) -> Result<Entry, PackageError> {
        let started = Instant::now();
        let listed = request.requirements.iter().map(|r| r.text.as_str()).collect::<Vec<_>>().join(", ");
        let req_key = self.request_key(&request.requirements);
        if let Some(entry) = self.indexed(&req_key)? {
            return Ok(entry);
        }
        let counts = request.declared && self.declarations == Declarations::Any;
        if counts && self.failed_resolutions() >= MAX_FAILED_RESOLUTIONS {
            return Err(PackageError::TooManyFailures { requirements: listed, failed: self.failed_resolutions() });
        }
        let cache_err = |e: std::io::Error| PackageError::Cache { path: self.root.clone(), message: e.to_string() };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join("install.lock"))
            .map_err(cache_err)?;
        loop {
            match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {}
                Err(e) => return Err(cache_err(e.into())),
            }
            if cancel.load(Ordering::Acquire) {
                return Err(PackageError::Cancelled);
            }
            if started.elapsed() >= self.timeout {
                return Err(PackageError::Timeout { requirements: listed, timeout: self.timeout });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Another install may have made it while this one waited.
        if let Some(entry) = self.indexed(&req_key)? {
            return Ok(entry);
        }
        let mut result = self.install(request, &listed, (started + self.timeout, self.timeout), cancel);
        if counts {
            if let Err(
                PackageError::Install { output, .. }
                | PackageError::NoWheel { detail: output, .. }
                | PackageError::Build { output, .. },
            ) = &mut result
            {
                // The count is in the result: each failed name reached the
                // index, a channel out of a run without network.
                let failed = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                output.push_str(&format!(
                    " (failed installs of declared names in this runtime: {failed} of {MAX_FAILED_RESOLUTIONS}; past \
                     them the index is asked for no new name)"
                ));
            }
        }
        let set_key = result?;
        write_atomic(&self.root.join("index").join(&req_key), set_key.as_bytes()).map_err(cache_err)?;
        self.evict(&set_key);
        drop(lock);
        self.lease(&set_key)?.ok_or_else(|| PackageError::Cache {
            path: self.root.join("sets").join(&set_key),
            message: "the entry just installed is gone".to_owned(),
        })
    }

    /// The entry an earlier install of this request made, leased, if it
    /// is still there.
    fn indexed(&self, req_key: &str) -> Result<Option<Entry>, PackageError> {
        let Ok(text) = std::fs::read_to_string(self.root.join("index").join(req_key)) else { return Ok(None) };
        let key = text.trim();
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        self.lease(key)
    }

    /// `sets/<key>`, leased (shared lock on its `.use` file), if it exists.
    fn lease(&self, key: &str) -> Result<Option<Entry>, PackageError> {
        let sets = self.root.join("sets");
        let path = sets.join(key);
        let cache_err = |e: std::io::Error| PackageError::Cache { path: path.clone(), message: e.to_string() };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(sets.join(format!("{key}.use")))
            .map_err(cache_err)?;
        loop {
            match rustix::fs::flock(&file, FlockOperation::LockShared) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(cache_err(e.into())),
            }
        }
        // Evicted before the lock was taken: a miss.
        if !path.is_dir() {
            return Ok(None);
        }
        // The least recently used entry goes first.
        let _ = file.set_modified(std::time::SystemTime::now());
        Ok(Some(Entry { path, _lease: file }))
    }

    /// Installs `request` into a staging directory, checks what came, and
    /// moves it into `sets/`: its key.
    fn install(
        &self,
        request: &Request,
        listed: &str,
        deadline: (Instant, Duration),
        cancel: &AtomicBool,
    ) -> Result<String, PackageError> {
        let cache_err = |e: std::io::Error| PackageError::Cache { path: self.root.clone(), message: e.to_string() };
        let staging = tempfile::Builder::new().prefix(".tmp-").tempdir_in(&self.root).map_err(cache_err)?;
        let work = staging.path().join("work");
        let site = staging.path().join("site");
        std::fs::create_dir(&work).map_err(cache_err)?;
        let log = tempfile::tempfile_in(staging.path()).map_err(cache_err)?;
        let installer =
            self.installer.get_or_init(|| Installer::find(&self.python)).clone().ok_or(PackageError::NoInstaller)?;
        let cmd = installer.command(&self.python, &site, &work, &request.requirements);
        match installer.run(cmd, log, listed, deadline, cancel) {
            // pip's "no wheel" reads as "no such version" (`from
            // versions: none`): with builds allowed, any failed wheels-only
            // install is tried again where building is possible.
            Err(PackageError::Install { output, .. }) if self.builder.is_some() || says_no_wheel(&output) => {
                match &self.builder {
                    // The whole set again, in the builder's sandbox: what the
                    // wheels-only attempt left is not mixed in.
                    Some(builder) => {
                        if site.exists() {
                            std::fs::remove_dir_all(&site).map_err(cache_err)?;
                        }
                        builder.install(&request.requirements, &site, deadline, cancel).map_err(|output| {
                            if cancel.load(Ordering::Acquire) {
                                PackageError::Cancelled
                            } else {
                                PackageError::Build { requirements: listed.to_owned(), output }
                            }
                        })?;
                    }
                    None => {
                        return Err(PackageError::NoWheel {
                            requirements: listed.to_owned(),
                            detail: output,
                            platform: self.abi.clone(),
                        })
                    }
                }
            }
            other => other?,
        }
        let dists = match installed(&site) {
            Ok(Some(dists)) => dists,
            Ok(None) => return Err(PackageError::Invalid(format!("installing {listed} brought too many packages"))),
            // Nothing to install (every requirement's marker was false).
            Err(_) if !site.exists() => BTreeMap::new(),
            Err(e) => return Err(cache_err(e)),
        };
        if request.declared {
            if let Declarations::Allowed(list) = &self.declarations {
                let roots: Vec<(String, Vec<String>)> =
                    self.with.iter().map(|r| (r.name.clone(), r.extras.clone())).collect();
                let trusted: BTreeSet<String> = closure(&roots, &dists);
                if let Some(d) = dists.values().find(|d| !list.contains(&d.name) && !trusted.contains(&d.name)) {
                    return Err(PackageError::DependencyNotAllowed {
                        requirements: listed.to_owned(),
                        name: d.name.clone(),
                        version: d.version.clone(),
                        how: HOW_TO_ALLOW.to_owned(),
                    });
                }
            }
        }
        // The key covers the files, not only the names and versions their
        // metadata claims: a package (or a build) whose `dist-info` claims
        // to be another distribution gets a set of its own, never the key
        // an honest install of that distribution would find and reuse.
        let mut pins: Vec<String> = dists.values().map(|d| format!("{}=={}", d.name, d.version)).collect();
        if site.exists() {
            pins.push(format!("files {}", tree_digest(&site).map_err(cache_err)?));
        }
        let key = digest("pycage-set-v3", &self.identity, &pins);
        let entry = self.root.join("sets").join(&key);
        if entry.is_dir() {
            return Ok(key);
        }
        if !site.exists() {
            std::fs::create_dir(&site).map_err(cache_err)?;
        }
        let bytes = share_tree(&site).map_err(cache_err)?;
        std::fs::write(self.root.join("sets").join(format!("{key}.size")), bytes.to_string()).map_err(cache_err)?;
        match std::fs::rename(&site, &entry) {
            Ok(()) => Ok(key),
            Err(_) if entry.is_dir() => Ok(key),
            Err(e) => Err(cache_err(e)),
        }
    }

    /// Removes the least recently used sets no run holds until the cache
    /// is within its bound; never `keep`. Best effort: a failure leaves the
    /// cache larger, never a run without its entry.
    fn evict(&self, keep: &str) {
        let sets = self.root.join("sets");
        let Ok(dir) = std::fs::read_dir(&sets) else { return };
        let mut entries: Vec<(std::time::SystemTime, String, u64)> = Vec::new();
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_suffix(".size") else { continue };
            let size = std::fs::read_to_string(e.path()).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
            let used = std::fs::metadata(sets.join(format!("{key}.use")))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            entries.push((used, key.to_owned(), size));
        }
        let mut total: u64 = entries.iter().map(|e| e.2).sum();
        entries.sort();
        for (_, key, size) in entries {
            if total <= self.max_bytes {
                break;
            }
            if key == keep {
                continue;
            }
            let Ok(lock) = File::options().write(true).open(sets.join(format!("{key}.use"))) else { continue };
            if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            if std::fs::remove_dir_all(sets.join(&key)).is_ok() || !sets.join(&key).exists() {
                let _ = std::fs::remove_file(sets.join(format!("{key}.size")));
                total = total.saturating_sub(size);
            }
        }
    }
}

/// A hex SHA-256 of `kind`, the interpreter and `items`.
fn digest(kind: &str, identity: &str, items: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update(b"\n");
    h.update(identity.as_bytes());
    for t in items {
        h.update(b"\n");
        h.update(t.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `data` to `path` whole or not at all.
fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::fs::write(tmp.path(), data)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A digest of an installed tree: every entry's path, kind and (for a
/// file) executable bit and bytes, or (for a symlink) target, in path
/// order. Iterative; nothing is followed.
fn tree_digest(root: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let mut entries: Vec<(PathBuf, std::fs::FileType)> = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = rel.join(entry.file_name());
            if kind.is_dir() {
                stack.push(path.clone());
            }
            entries.push((path, kind));
        }
    }
    entries.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    for (path, kind) in entries {
        h.update(path.as_os_str().as_bytes());
        let full = root.join(&path);
        if kind.is_file() {
            let mut file = File::open(&full)?;
            let exec = file.metadata()?.permissions().mode() & 0o111 != 0;
            h.update(if exec { b"\0x\0" } else { b"\0f\0" });
            let mut len = 0u64;
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                len += n as u64;
                h.update(buf.get(..n).unwrap_or_default());
            }
            h.update(len.to_le_bytes());
        } else if kind.is_symlink() {
            h.update(b"\0l\0");
            h.update(std::fs::read_link(&full)?.as_os_str().as_bytes());
        } else {
            h.update(if kind.is_dir() { b"\0d\0" } else { b"\0o\0" });
        }
        h.update(b"\n");
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes an installed tree readable (and its directories searchable) by
/// every uid, and sums its file sizes. Iterative; symlinks are left as
/// they are, never followed.
fn share_tree(root: &Path) -> std::io::Result<u64> {
    let mut stack = vec![root.to_path_buf()];
    let mut bytes = 0u64;
    while let Some(dir) = stack.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let meta = entry.metadata()?;
                bytes = bytes.saturating_add(meta.len());
                let mode = meta.permissions().mode();
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode((mode | 0o444) & 0o755))?;
            }
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_digest_covers_paths_bytes_and_modes_but_not_listing_order() {
        let make = |files: &[(&str, &str)]| {
            let dir = tempfile::tempdir().unwrap();
            for (path, text) in files {
                let p = dir.path().join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            }
            dir
        };
        let honest = [("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n"), ("pkg/__init__.py", "x = 1\n")];
        let a = make(&honest);
        let b = make(&[honest[1], honest[0]]);
        assert_eq!(tree_digest(a.path()).unwrap(), tree_digest(b.path()).unwrap());
        // The same metadata over other code: another digest, so another set.
        let forged = make(&[honest[0], ("pkg/__init__.py", "import os\n")]);
        assert_ne!(tree_digest(a.path()).unwrap(), tree_digest(forged.path()).unwrap());
        let moved = make(&[honest[0], ("pkg/__main__.py", "x = 1\n")]);
        assert_ne!(tree_digest(a.path()).unwrap(), tree_digest(moved.path()).unwrap());
        std::fs::set_permissions(b.path().join("pkg/__init__.py"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_ne!(tree_digest(a.path()).unwrap(), tree_digest(b.path()).unwrap());
    }

    fn interp() -> Target {
        Target {
            python: PathBuf::from("/nonexistent/python3"),
            version: (3, 11, 2),
            abi: "cpython-311--linux-x86_64".into(),
        }
    }

    fn cache(dir: &Path, with: &[&str], declarations: Declarations, max_bytes: u64) -> PackageCache {
        let with: Vec<String> = with.iter().map(|s| (*s).to_owned()).collect();
        PackageCache::new(Some(dir), &interp(), &with, declarations, Duration::from_secs(5), max_bytes).unwrap()
    }

    fn program(deps: &str) -> String {
        format!("# /// script\n# dependencies = [{deps}]\n# ///\nreturn 1\n")
    }

    #[test]
    fn declarations_are_refused_unless_allowed_and_the_message_says_how() {
        let dir = tempfile::tempdir().unwrap();
        let refused = cache(dir.path(), &["requests"], Declarations::Refused, 1 << 30);
        let e = refused.request(&program("\"tabulate\"")).unwrap_err().to_string();
        assert!(e.contains("\"tabulate\"") && e.contains("--allow-package") && e.contains("allow_any_package"), "{e}");
        // The caller's own requirements need no permission.
        assert_eq!(refused.request("return 1").unwrap(), refused.with_request());
        let allowed = cache(dir.path(), &[], Declarations::Allowed(vec!["Tabulate".into()]), 1 << 30);
        let r = allowed.request(&program("\"tabulate>=0.9\"")).unwrap().unwrap();
        assert!(r.declared);
        let e = allowed.request(&program("\"tabulate\", \"rich\"")).unwrap_err().to_string();
        assert!(e.contains("\"rich\"") && e.contains("allowed here: tabulate"), "{e}");
        let any = cache(dir.path(), &[], Declarations::Any, 1 << 30);
        assert!(any.request(&program("\"anything\"")).unwrap().is_some());
        assert_eq!(any.request("return 1").unwrap(), None);
    }

    #[test]
    fn an_indexed_request_installs_nothing_and_keys_ignore_spacing_and_order() {
        let dir = tempfile::tempdir().unwrap();
        // No installer behind this interpreter: a miss would fail.
        let c = cache(dir.path(), &[], Declarations::Any, 1 << 30);
        let r = |t: &str| Requirement::parse(t).unwrap();
        assert_eq!(c.request_key(&[r("a"), r("b")]), c.request_key(&[r("b"), r("a"), r("a")]));
        assert_eq!(c.request_key(&[r("a >= 1")]), c.request_key(&[r("a  >=  1")]));
        assert_ne!(c.request_key(&[r("a")]), c.request_key(&[r("a==1")]));
        let request = Request { requirements: vec![r("tabulate")], declared: true };
        let stop = AtomicBool::new(false);
        assert_eq!(c.ensure(&request, &stop).unwrap_err(), PackageError::NoInstaller);
        let key = digest("pycage-set-v2", &c.identity, &["tabulate==0.9.0".to_owned()]);
        std::fs::create_dir(c.root().join("sets").join(&key)).unwrap();
        std::fs::write(c.root().join("index").join(c.request_key(&request.requirements)), &key).unwrap();
        let entry = c.ensure(&request, &stop).unwrap();
        assert_eq!(entry.path(), c.root().join("sets").join(&key));
        // A forged index line is a miss, not a path.
        std::fs::write(c.root().join("index").join(c.request_key(&request.requirements)), "../../etc").unwrap();
        assert_eq!(c.ensure(&request, &stop).unwrap_err(), PackageError::NoInstaller);
    }

    #[test]
    fn eviction_keeps_what_runs_hold_and_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[], Declarations::Any, 250);
        let sets = c.root().join("sets");
        let make = |key: &str, age: u64| {
            std::fs::create_dir(sets.join(key)).unwrap();
            std::fs::write(sets.join(format!("{key}.size")), "100").unwrap();
            let f = File::create(sets.join(format!("{key}.use"))).unwrap();
            f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000 + age)).unwrap();
        };
        let key = |c: char| c.to_string().repeat(64);
        make(&key('a'), 1);
        make(&key('b'), 2);
        make(&key('c'), 3);
        make(&key('d'), 4);
        // A run holds the oldest.
        let held = c.lease(&key('a')).unwrap().unwrap();
        // lease() made `a` the most recently used: set it back.
        File::options()
            .write(true)
            .open(sets.join(format!("{}.use", key('a'))))
            .unwrap()
            .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
            .unwrap();
        c.evict(&key('d'));
        let left: Vec<bool> = ['a', 'b', 'c', 'd'].iter().map(|&k| sets.join(key(k)).is_dir()).collect();
        assert_eq!(left, [true, false, false, true], "held and kept stay; the oldest free ones go to fit 250");
        drop(held);
    }

    #[test]
    fn too_many_failures_ask_the_index_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[], Declarations::Any, 1 << 30);
        c.failures.store(MAX_FAILED_RESOLUTIONS, Ordering::Relaxed);
        let request = Request { requirements: vec![Requirement::parse("leak-abcdef").unwrap()], declared: true };
        let e = c.ensure(&request, &AtomicBool::new(false)).unwrap_err();
        assert!(matches!(e, PackageError::TooManyFailures { failed: MAX_FAILED_RESOLUTIONS, .. }), "{e}");
        // The caller's own set is not a program's channel.
        let own = Request { declared: false, ..request };
        assert_eq!(c.ensure(&own, &AtomicBool::new(false)).unwrap_err(), PackageError::NoInstaller);
    }

    #[test]
    fn a_cache_dir_that_cannot_be_written_falls_back_to_a_temporary_cache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("packages"), b"").unwrap();
        let c = cache(dir.path(), &[], Declarations::Refused, 1 << 30);
        assert!(c.root().is_dir());
        assert!(!c.root().starts_with(dir.path()));
        let root = c.root().to_path_buf();
        drop(c);
        assert!(!root.exists(), "the temporary cache goes with its runtime");
    }
}
