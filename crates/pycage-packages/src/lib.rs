//! A run's declared packages: what a program asks for (a PEP 723
//! `# /// script` block) and what the caller adds
//! (`RuntimeConfig::with_packages`), checked, installed by the host, and
//! kept in a content-addressed cache that runs see read-only.
//!
//! - **Requirements** are PEP 508 names with extras, version specifiers and
//!   markers (`tabulate`, `rich[jupyter]>=13; python_version >= "3.10"`).
//!   Direct references (`name @ https://...`, `file:` paths), options
//!   (`--index-url`) and anything else an installer would read as more than
//!   a requirement are refused: a program must not make the host fetch a
//!   URL of its choosing or read a host file into its run.
//! - **The allow-list** (`RuntimeConfig::allow_packages`) is checked on the
//!   names a program declares, PEP 503-normalized (`Foo_Bar` is `foo-bar`);
//!   the caller's own `with_packages` are trusted. What those packages
//!   depend on is the resolver's choice and is not checked.
//! - **Installing** happens on the host, before the program starts, with
//!   the host's network and installer configuration: `uv pip install
//!   --target` (the `uv` next to the interpreter, as the `uv` PyPI package
//!   installs it into a venv, else on `PATH`), or `python -m pip install
//!   --target` when there is no uv. The run itself never gets a network.
//!   One install per requirement set at a time, across processes (an
//!   `flock` beside the entry); bounded by `RuntimeConfig::install_timeout`
//!   and by the run's cancel (the installer's process group is killed).
//! - **The cache** is `<cache_dir>/packages` (a per-runtime temporary
//!   directory without a cache directory, or when that one cannot be
//!   written). An entry's name is a SHA-256 of
//!   the sorted requirement set, the interpreter (path, version) and its
//!   ABI and platform: a second run with the same requirements finds it and
//!   installs nothing. An entry is written into a temporary sibling and
//!   renamed into place when complete, so one that exists is whole; it is
//!   made readable to every uid (sandboxed runs on a root host have their
//!   own). Sandboxed runs see the whole cache read-only at
//!   [`PACKAGES_DIR`]; the child puts the run's entry on `sys.path`.

use std::io::{Read, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Where sandboxed runs see the package cache.
pub const PACKAGES_DIR: &str = "/opt/pycage-packages";

/// Longest requirement string accepted.
const MAX_REQUIREMENT: usize = 512;
/// Most requirements one run may declare.
const MAX_REQUIREMENTS: usize = 64;
/// Largest `# /// script` block read.
const MAX_BLOCK: usize = 64 * 1024;
/// Deepest bracket nesting of a block handed to the TOML parser (which
/// recurses on it); a dependency list needs two.
const MAX_BLOCK_NESTING: usize = 16;
/// Bytes of an installer's output kept for the error message.
const OUTPUT_TAIL: u64 = 2048;

/// Why a run's packages could not be provided. The run fails with
/// `dependencies` and this message; the program did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackageError {
    /// The `# /// script` block or a requirement in it is malformed.
    #[error("{0}")]
    Invalid(String),
    /// A declared package is not on the allow-list.
    #[error("the package {name:?} is not allowed here (allowed: {allowed})")]
    NotAllowed { name: String, allowed: String },
    /// Neither uv nor pip is available.
    #[error(
        "no installer for the run's packages: install uv next to the interpreter or on PATH \
         (pip install uv), or pip into the interpreter"
    )]
    NoInstaller,
    /// The installer failed (resolution, download, build).
    #[error("installing {requirements} with {installer} failed: {output}")]
    Install { installer: &'static str, requirements: String, output: String },
    /// Past `RuntimeConfig::install_timeout`.
    #[error("installing {requirements} took longer than {} s", .timeout.as_secs())]
    Timeout { requirements: String, timeout: Duration },
    /// The run was cancelled while its packages were being installed.
    #[error("the run was cancelled while its packages were being installed")]
    Cancelled,
    /// The cache could not be written.
    #[error("the package cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
}

/// One checked requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// As given, trimmed.
    pub text: String,
    /// The project name, PEP 503-normalized.
    pub name: String,
}

impl Requirement {
    /// Checks `text` (see the module docs); the message says what is wrong.
    pub fn parse(text: &str) -> Result<Requirement, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty requirement".into());
        }
        if text.len() > MAX_REQUIREMENT {
            return Err(format!("a requirement longer than {MAX_REQUIREMENT} bytes"));
        }
        let name_end =
            text.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(text.len());
        let name = &text[..name_end];
        if !is_project_name(name) {
            return Err(format!("{text:?} does not start with a package name"));
        }
        let rest = &text[name_end..];
        if let Some(bad) = rest.chars().find(|&c| {
            !(c.is_ascii_alphanumeric()
                || matches!(c, ' ' | '\t' | '<' | '>' | '=' | '!' | '~' | '.' | ',' | '*' | '+' | '_' | '-')
                || matches!(c, ';' | '\'' | '"' | '(' | ')' | '[' | ']'))
        }) {
            let why = match bad {
                '@' | '/' | ':' | '\\' => "direct references (URLs and paths) are not accepted",
                _ => "only a name, extras, version specifiers and markers are accepted",
            };
            return Err(format!("{text:?}: {bad:?} is not allowed in a requirement: {why}"));
        }
        Ok(Requirement { text: text.to_owned(), name: normalize(name) })
    }
}

/// Whether `name` is a PEP 508 project name.
pub fn is_project_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// PEP 503 normalization: lower case, each run of `-`, `_`, `.` one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The `dependencies` of the program's PEP 723 `# /// script` block, if it
/// has one.
pub fn script_dependencies(program: &str) -> Result<Vec<Requirement>, PackageError> {
    let Some(block) = script_block(program)? else { return Ok(Vec::new()) };
    let invalid = |m: String| PackageError::Invalid(format!("the program's `# /// script` block: {m}"));
    let mut depth = 0usize;
    for c in block.chars() {
        match c {
            '[' | '{' => {
                depth += 1;
                if depth > MAX_BLOCK_NESTING {
                    return Err(invalid(format!("nested deeper than {MAX_BLOCK_NESTING}")));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let table: toml::Table = block.parse().map_err(|e: toml::de::Error| invalid(e.message().to_owned()))?;
    let Some(deps) = table.get("dependencies") else { return Ok(Vec::new()) };
    let toml::Value::Array(items) = deps else {
        return Err(invalid("`dependencies` must be an array of strings".into()));
    };
    if items.len() > MAX_REQUIREMENTS {
        return Err(invalid(format!("more than {MAX_REQUIREMENTS} dependencies")));
    }
    items
        .iter()
        .map(|item| match item {
            toml::Value::String(s) => Requirement::parse(s).map_err(&invalid),
            _ => Err(invalid("`dependencies` must be an array of strings".into())),
        })
        .collect()
}

/// The line that opens a PEP 723 `script` block.
const SCRIPT_START: &str = "# /// script";

/// The TOML inside the program's one `# /// script` block (PEP 723's
/// reference regular expression, line by line: after `# /// script`, a
/// run of `#` and `# ...` lines, closed by its last `# ///`).
fn script_block(program: &str) -> Result<Option<String>, PackageError> {
    let invalid = |m: &str| PackageError::Invalid(format!("the program's `# /// script` block {m}"));
    // A block starts at a line that is exactly this: most programs have
    // none, and are not split into lines for every run.
    if !program.contains(SCRIPT_START) {
        return Ok(None);
    }
    let lines: Vec<&str> = program.lines().collect();
    let mut found: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        if lines.get(i).copied() != Some(SCRIPT_START) {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while let Some(line) = lines.get(end) {
            if *line == "#" || line.starts_with("# ") {
                end += 1;
            } else {
                break;
            }
        }
        let Some(close) = (start..end).rev().find(|&j| lines.get(j).copied() == Some("# ///")) else {
            return Err(invalid("is not closed by a `# ///` line"));
        };
        if found.is_some() {
            return Err(invalid("appears twice (PEP 723 allows one)"));
        }
        let mut text = String::new();
        for line in lines.get(start..close).unwrap_or_default() {
            text.push_str(line.strip_prefix("# ").unwrap_or(""));
            text.push('\n');
            if text.len() > MAX_BLOCK {
                return Err(invalid(&format!("is larger than {MAX_BLOCK} bytes")));
            }
        }
        found = Some(text);
        i = close + 1;
    }
    Ok(found)
}

/// The installer the cache uses.
#[derive(Debug, Clone)]
enum Installer {
    Uv(PathBuf),
    Pip,
}

impl Installer {
    fn name(&self) -> &'static str {
        match self {
            Installer::Uv(_) => "uv",
            Installer::Pip => "pip",
        }
    }
}

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

/// The package cache of one runtime (see the module docs).
pub struct PackageCache {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
    python: PathBuf,
    /// The interpreter's part of every key.
    identity: String,
    installer: OnceLock<Option<Installer>>,
    /// The caller's requirements, part of every run's set.
    with: Vec<Requirement>,
    allow: Option<Vec<String>>,
    timeout: Duration,
}

impl PackageCache {
    /// The cache under `cache_dir` (or a temporary directory), for runs of
    /// `interpreter`.
    pub fn new(
        cache_dir: Option<&Path>,
        interpreter: &Target,
        with: &[String],
        allow: Option<&[String]>,
        timeout: Duration,
    ) -> Result<PackageCache, PackageError> {
        // Sandboxed runs (on a root host, as their own uid) read it.
        let shared_dir = |root: &Path| {
            std::fs::create_dir_all(root)?;
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))
        };
        let in_cache_dir = cache_dir.map(|dir| dir.join("packages")).and_then(|root| match shared_dir(&root) {
            Ok(()) => Some(root),
            Err(e) => {
                // A cache directory that cannot be written (a service
                // user whose HOME is `/`) must not stop a runtime that may
                // never install anything: fall back to a temporary cache,
                // as the bootstrap cache does.
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
                shared_dir(&root).map_err(|e| PackageError::Cache { path: root.clone(), message: e.to_string() })?;
                (root, Some(t))
            }
        };
        let with =
            with.iter().map(|r| Requirement::parse(r).map_err(PackageError::Invalid)).collect::<Result<_, _>>()?;
        let (major, minor, micro) = interpreter.version;
        Ok(PackageCache {
            root,
            _temp: temp,
            python: interpreter.python.clone(),
            identity: format!("{}\n{major}.{minor}.{micro}\n{}", interpreter.python.display(), interpreter.abi),
            installer: OnceLock::new(),
            with,
            allow: allow.map(|a| a.iter().map(|n| normalize(n)).collect()),
            timeout,
        })
    }

    /// The cache's directory on the host.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The requirement set of a run of `program` (the caller's and the
    /// program's), checked against the allow-list; empty when it needs
    /// nothing.
    pub fn requirements(&self, program: &str) -> Result<Vec<Requirement>, PackageError> {
        let declared = script_dependencies(program)?;
        if let Some(allow) = &self.allow {
            if let Some(r) = declared.iter().find(|r| !allow.contains(&r.name)) {
                let allowed = if allow.is_empty() { "none".to_owned() } else { allow.join(", ") };
                return Err(PackageError::NotAllowed { name: r.name.clone(), allowed });
            }
        }
        if declared.is_empty() {
            return Ok(if self.with.is_empty() { Vec::new() } else { self.with.clone() });
        }
        let mut all = self.with.clone();
        all.extend(declared);
        Ok(all)
    }

    /// The entry's name for `requirements`.
    fn key(&self, requirements: &[Requirement]) -> String {
        let mut texts: Vec<String> =
            requirements.iter().map(|r| r.text.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        texts.sort();
        texts.dedup();
        let mut h = Sha256::new();
        h.update(b"pycage-packages-v1\n");
        h.update(self.identity.as_bytes());
        for t in &texts {
            h.update(b"\n");
            h.update(t.as_bytes());
        }
        let digest = h.finalize();
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// The host directory holding `requirements`, installed now if it is
    /// not in the cache. Blocking; `cancel` stops it (and kills the
    /// installer).
    pub fn ensure(&self, requirements: &[Requirement], cancel: &AtomicBool) -> Result<PathBuf, PackageError> {
        let key = self.key(requirements);
        let entry = self.root.join(&key);
        if entry.is_dir() {
            return Ok(entry);
        }
        let listed = requirements.iter().map(|r| r.text.as_str()).collect::<Vec<_>>().join(", ");
        let started = Instant::now();
        let cache_err = |e: std::io::Error| PackageError::Cache { path: self.root.clone(), message: e.to_string() };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join(format!("{key}.lock")))
            .map_err(cache_err)?;
        loop {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
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
            std::thread::sleep(Duration::from_millis(50));
        }
        // Another process may have installed it while this one waited.
        if entry.is_dir() {
            return Ok(entry);
        }
        let staging =
            tempfile::Builder::new().prefix(&format!(".tmp-{key}-")).tempdir_in(&self.root).map_err(cache_err)?;
        let target = staging.path().join("site");
        let log = tempfile::tempfile_in(staging.path()).map_err(cache_err)?;
        let installer = self.installer().ok_or(PackageError::NoInstaller)?;
        let mut cmd = match &installer {
            Installer::Uv(uv) => {
                let mut c = Command::new(uv);
                c.args(["pip", "install", "--quiet", "--no-progress", "--python"]).arg(&self.python);
                c
            }
            Installer::Pip => {
                let mut c = Command::new(&self.python);
                c.args(["-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check"]);
                c
            }
        };
        cmd.arg("--target").arg(&target).args(requirements.iter().map(|r| r.text.as_str()));
        let out = log.try_clone().map_err(cache_err)?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(log.try_clone().map_err(cache_err)?);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| PackageError::Install {
            installer: installer.name(),
            requirements: listed.clone(),
            output: format!("could not start it: {e}"),
        })?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let stop = if cancel.load(Ordering::Acquire) {
                Some(PackageError::Cancelled)
            } else if started.elapsed() >= self.timeout {
                Some(PackageError::Timeout { requirements: listed.clone(), timeout: self.timeout })
            } else {
                None
            };
            if let Some(err) = stop {
                if let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                return Err(err);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let failed = |output: String| PackageError::Install {
            installer: installer.name(),
            requirements: listed.clone(),
            output,
        };
        let status = status.map_err(|e| failed(e.to_string()))?;
        if !status.success() {
            return Err(failed(format!("{status}: {}", tail(log))));
        }
        share_tree(&target).map_err(cache_err)?;
        match std::fs::rename(&target, &entry) {
            Ok(()) => Ok(entry),
            Err(_) if entry.is_dir() => Ok(entry),
            Err(e) => Err(cache_err(e)),
        }
    }

    /// uv beside the interpreter (`pip install uv` into a venv puts it
    /// there) or on `PATH`, else the interpreter's pip; looked up once.
    fn installer(&self) -> Option<Installer> {
        self.installer
            .get_or_init(|| {
                let beside = self.python.parent().map(|d| d.join("uv")).filter(|p| is_executable(p));
                if let Some(uv) = beside.or_else(on_path) {
                    return Some(Installer::Uv(uv));
                }
                let pip = Command::new(&self.python)
                    .args(["-m", "pip", "--version"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                pip.is_ok_and(|s| s.success()).then_some(Installer::Pip)
            })
            .clone()
    }
}

/// `uv` on `PATH`.
fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("uv")).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// The last bytes of the installer's output, as one line of text.
fn tail(mut log: std::fs::File) -> String {
    let len = log.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    let _ = log.seek(std::io::SeekFrom::Start(len.saturating_sub(OUTPUT_TAIL)));
    let mut bytes = Vec::new();
    let _ = log.take(OUTPUT_TAIL).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        "no output".to_owned()
    } else {
        lines.join(" | ")
    }
}

/// Makes an installed tree readable (and its directories searchable) by
/// every uid. Iterative; symlinks are left as they are, never followed.
fn share_tree(root: &Path) -> std::io::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let mode = entry.metadata()?.permissions().mode();
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode((mode | 0o444) & 0o755))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_names_specifiers_and_markers_only() {
        for ok in ["tabulate", "tabulate==0.9.0", "Rich[jupyter] >= 13, <14", "a.b_c-d; python_version >= \"3.10\""] {
            Requirement::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(Requirement::parse("Foo__Bar.baz>=1").unwrap().name, "foo-bar-baz");
        for bad in [
            "",
            "--index-url=https://evil.example",
            "-r /etc/passwd",
            "pkg @ https://evil.example/pkg.whl",
            "pkg @ file:///etc/passwd",
            "./local-dir",
            "/abs/path.whl",
            "pkg; os_name == 'posix' \\",
            "pkg\n--extra-index-url x",
            "pkg #comment",
            "_private",
        ] {
            assert!(Requirement::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let e = Requirement::parse("x @ https://h/x.whl").unwrap_err();
        assert!(e.contains("direct references"), "{e}");
    }

    #[test]
    fn pep_723_blocks() {
        let program = "# /// script\n# requires-python = \">=3.10\"\n# dependencies = [\n#   \"tabulate\",\n#   \"rich>=13\",\n# ]\n# ///\nimport tabulate\n";
        let deps = script_dependencies(program).unwrap();
        assert_eq!(deps.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(), ["tabulate", "rich>=13"]);
        assert!(script_dependencies("import os\n# /// other\n# x = 1\n# ///\n").unwrap().is_empty());
        assert!(script_dependencies("# /// script\n# ///\nreturn 1").unwrap().is_empty());
        let twice = "# /// script\n# dependencies = []\n# ///\nx = 1\n# /// script\n# ///\n";
        assert!(script_dependencies(twice).unwrap_err().to_string().contains("twice"));
        let open = "# /// script\n# dependencies = []\nx = 1\n";
        assert!(script_dependencies(open).unwrap_err().to_string().contains("not closed"));
        let bad_toml = "# /// script\n# dependencies = [\n# ///\n";
        assert!(script_dependencies(bad_toml).is_err());
        let not_strings = "# /// script\n# dependencies = [1]\n# ///\n";
        assert!(script_dependencies(not_strings).unwrap_err().to_string().contains("array of strings"));
        let deep = format!("# /// script\n# x = {}{}\n# ///\n", "[".repeat(1000), "]".repeat(1000));
        assert!(script_dependencies(&deep).unwrap_err().to_string().contains("nested deeper"));
        // Dotted keys nest tables too, without a bracket: the parser's own
        // recursion limit refuses them.
        let dotted = format!("# /// script\n# {}x = 1\n# ///\n", "a.".repeat(30_000));
        let e = script_dependencies(&dotted).unwrap_err().to_string();
        assert!(e.contains("recursion limit"), "{e}");
        let huge = format!("# /// script\n# x = \"{}\"\n# ///\n", "a".repeat(100_000));
        assert!(script_dependencies(&huge).unwrap_err().to_string().contains("larger than"));
        let url = "# /// script\n# dependencies = [\"x @ file:///etc/passwd\"]\n# ///\n";
        assert!(script_dependencies(url).unwrap_err().to_string().contains("direct references"));
        let crlf = "# /// script\r\n# dependencies = [\"tabulate\"]\r\n# ///\r\n";
        assert_eq!(script_dependencies(crlf).unwrap().len(), 1);
        // Only a line that is exactly the opening opens a block.
        for not_a_block in [
            "x = '# /// script'\n# dependencies = [\"tabulate\"]\n# ///\n",
            "  # /// script\n# dependencies = [\"tabulate\"]\n# ///\n",
            "# /// scripts\n# dependencies = [\"tabulate\"]\n# ///\n",
            "return 1 + 1",
        ] {
            assert!(script_dependencies(not_a_block).unwrap().is_empty(), "{not_a_block:?}");
        }
    }

    fn interp() -> Target {
        Target {
            python: PathBuf::from("/usr/bin/python3"),
            version: (3, 11, 2),
            abi: "cpython-311--linux-x86_64".into(),
        }
    }

    #[test]
    fn a_cache_dir_that_cannot_be_written_falls_back_to_a_temporary_cache() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the directory should be: no uid can make it one.
        std::fs::write(dir.path().join("packages"), b"").unwrap();
        let cache = PackageCache::new(Some(dir.path()), &interp(), &[], None, Duration::from_secs(1)).unwrap();
        assert!(cache.root().is_dir(), "{}", cache.root().display());
        assert!(!cache.root().starts_with(dir.path()), "{}", cache.root().display());
        let root = cache.root().to_path_buf();
        drop(cache);
        assert!(!root.exists(), "the temporary cache goes with its runtime");
    }

    #[test]
    fn a_cached_set_installs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // An interpreter without any installer: a miss would fail.
        let none = Target { python: PathBuf::from("/nonexistent/python3"), ..interp() };
        let cache = PackageCache::new(Some(dir.path()), &none, &[], None, Duration::from_secs(5)).unwrap();
        let reqs = [Requirement::parse("tabulate").unwrap()];
        let stop = AtomicBool::new(false);
        assert_eq!(cache.ensure(&reqs, &stop), Err(PackageError::NoInstaller));
        assert!(std::fs::read_dir(cache.root())
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".tmp")));
        let entry = cache.root().join(cache.key(&reqs));
        std::fs::create_dir(&entry).unwrap();
        assert_eq!(cache.ensure(&reqs, &stop), Ok(entry));
    }

    #[test]
    fn the_key_is_the_set_and_the_interpreter_and_the_allow_list_is_normalized() {
        let dir = tempfile::tempdir().unwrap();
        let allow = ["Tabulate".to_owned()];
        let cache = PackageCache::new(Some(dir.path()), &interp(), &[], Some(&allow), Duration::from_secs(1)).unwrap();
        let p = |deps: &str| format!("# /// script\n# dependencies = [{deps}]\n# ///\n");
        let a = cache.requirements(&p("\"tabulate\", \"TABULATE\"")).unwrap();
        assert_eq!(a.len(), 2);
        let e = cache.requirements(&p("\"requests\"")).unwrap_err();
        assert_eq!(e, PackageError::NotAllowed { name: "requests".into(), allowed: "tabulate".into() });
        assert!(cache.requirements("return 1").unwrap().is_empty());
        let r = |t: &str| Requirement::parse(t).unwrap();
        assert_eq!(cache.key(&[r("a"), r("b")]), cache.key(&[r("b"), r("a"), r("a")]));
        assert_eq!(cache.key(&[r("a >= 1")]), cache.key(&[r("a  >=  1")]));
        assert_ne!(cache.key(&[r("a")]), cache.key(&[r("a==1")]));
        let mut other = interp();
        other.version = (3, 12, 0);
        let cache2 = PackageCache::new(Some(dir.path()), &other, &[], None, Duration::from_secs(1)).unwrap();
        assert_ne!(cache.key(&[r("a")]), cache2.key(&[r("a")]));
        // The caller's requirements are in every set, and not checked
        // against the allow-list.
        let with = ["requests".to_owned()];
        let cache3 =
            PackageCache::new(Some(dir.path()), &interp(), &with, Some(&allow), Duration::from_secs(1)).unwrap();
        assert_eq!(cache3.requirements("return 1").unwrap(), vec![r("requests")]);
        assert_eq!(cache3.requirements(&p("\"tabulate\"")).unwrap(), vec![r("requests"), r("tabulate")]);
    }
}
