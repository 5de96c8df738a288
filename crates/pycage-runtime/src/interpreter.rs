//! Finding and probing the Python interpreter, once, at construction.
//!
//! The probe runs the configured interpreter (or `python3` from `PATH`) in
//! isolated mode with a small embedded script that answers one JSON object.
//! It asks for `sys.executable`, so a wrapper such as a pyenv shim (a shell
//! script that costs ~100 ms per start) is paid here and never per run, and
//! for the prefixes and `sys.path` a sandbox must expose read-only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pycage_protocol::{JsonValue, Kind};

use crate::spelling::{RustSpelling, Setting, Spelling};

/// Oldest CPython the bootstrap supports.
pub const MIN_VERSION: (u64, u64) = (3, 10);

/// How long the probe may take (the preload's imports included): an import
/// that never returns must not hang the runtime's construction.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Answers one JSON object. Given a directory as its argument, it also
/// imports `pycage.bootstrap` from there — checking it and leaving its
/// bytecode in `__pycache__` — so construction starts the interpreter once.
/// It runs `-I -S` with a scrubbed environment: `site` is applied as data
/// (`pycage/sitepaths.py`, whose text comes first), so no `.pth` code line
/// or `sitecustomize` of the interpreter or a venv runs on the host.
const PROBE: &str = concat!(
    include_str!("../../../python/pycage/sitepaths.py"),
    r#"
import json
skipped_site_code = apply()
info = {
    "implementation": sys.implementation.name,
    "version": list(sys.version_info[:3]),
    "executable": sys.executable,
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}),
    "path": [p for p in sys.path if p],
}
import sysconfig
info["abi"] = "-".join([sys.implementation.cache_tag or "", getattr(sys, "abiflags", ""), sysconfig.get_platform()])
if sys.prefix != sys.base_prefix:
    info["venv"] = sys.prefix
if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])
    import traceback
    try:
        import pycage.bootstrap
    except BaseException:
        info["bootstrapError"] = traceback.format_exc()
    else:
        try:
            import pycage.zygote
        except BaseException:
            info["zygoteError"] = traceback.format_exc()
        if len(sys.argv) > 2:
            from pycage import preload
            failed = preload.run(sys.argv[2].split(","))
            if failed is not None:
                info["preloadError"] = {"module": failed[0], "error": failed[1]}
            info["threads"] = preload.os_threads()
info["skippedSiteCode"] = skipped_site_code
print(json.dumps(info))
"#
);

/// A probed interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// The executable runs spawn (`sys.executable`): the real one behind a
    /// wrapper such as a pyenv shim, but a virtual environment's own
    /// `bin/python` (not the base interpreter its symlink points to), so
    /// that runs get the environment's `sys.prefix` and site-packages.
    pub executable: PathBuf,
    /// `(major, minor, micro)`.
    pub version: (u64, u64, u64),
    /// `sys.prefix` and friends, de-duplicated.
    pub prefixes: Vec<PathBuf>,
    /// Non-empty `sys.path` entries of an isolated interpreter.
    pub sys_path: Vec<PathBuf>,
    /// Why the zygote cannot run on this interpreter (e.g. no `ctypes`),
    /// when the probe imported the bootstrap and the zygote failed.
    pub zygote_error: Option<String>,
    /// The virtual environment (`sys.prefix`) when the interpreter is one's
    /// (`sys.prefix != sys.base_prefix`).
    pub venv: Option<PathBuf>,
    /// What compiled packages must match: the cache tag, ABI flags and
    /// platform (`cpython-311--linux-x86_64`); part of the package cache's key.
    pub abi: String,
}

/// Modules a runtime imports before each program (`RuntimeConfig::preload`)
/// that could not be preloaded: which, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreloadFailure {
    /// The module that failed, or the whole list when the failure is the
    /// threads they left running.
    pub module: String,
    /// The exception (its last line), or what is wrong.
    pub why: String,
}

/// What one probe learned.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    pub interpreter: Interpreter,
    /// The bootstrap's import, when asked: its traceback if it failed.
    pub bootstrap: Result<(), String>,
    /// The preload, when asked (see [`probe_with_bootstrap`]).
    pub preload: Result<(), PreloadFailure>,
}

/// Why the interpreter cannot be used; each message says what to do
/// (in library terms; [`InterpreterError::explain`] in another interface's).
#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error("{}", self.explain(&RustSpelling))]
    NotFound,
    #[error("{}", self.explain(&RustSpelling))]
    Spawn { path: PathBuf, source: std::io::Error },
    /// The program ran but failed when asked, CPython-style, for its version.
    /// `stderr` (its head) is kept for diagnostics, not shown: for a program
    /// that is not Python it often echoes the probe script.
    #[error("{}", self.explain(&RustSpelling))]
    ProbeFailed { path: PathBuf, status: String, stderr: String },
    /// The program exited 0 but printed something other than the probe's
    /// JSON answer (kept in `answer`, not shown: `echo` prints the probe).
    #[error("{}", self.explain(&RustSpelling))]
    BadAnswer { path: PathBuf, answer: String },
    #[error("{}", self.explain(&RustSpelling))]
    Unsupported { path: PathBuf, implementation: String, version: String },
}

impl InterpreterError {
    /// The message, with the interpreter setting spelled as `spelling` names it.
    pub fn explain(&self, spelling: &dyn Spelling) -> String {
        let python = spelling.setting(Setting::Python);
        match self {
            InterpreterError::NotFound => {
                format!("no `python3` on PATH; install CPython >= 3.10 or give its path ({python})")
            }
            InterpreterError::Spawn { path, source } => {
                format!(
                    "could not run {}: {source}; check the path, or give another interpreter ({python})",
                    path.display()
                )
            }
            InterpreterError::ProbeFailed { path, status, .. } => format!(
                "{} is not a CPython >= 3.10: it failed when run as one ({status}); give another with {python}",
                path.display()
            ),
            InterpreterError::BadAnswer { path, .. } => format!(
                "{} is not a CPython >= 3.10: it did not answer as one; give another with {python}",
                path.display()
            ),
            InterpreterError::Unsupported { path, implementation, version } => format!(
                "{} is {implementation} {version}; pycage needs CPython >= 3.10 (give another with {python})",
                path.display()
            ),
        }
    }
}

/// Searches `PATH` for `name`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// Resolves and probes the interpreter.
pub fn probe(configured: Option<&Path>) -> Result<Interpreter, InterpreterError> {
    probe_with_bootstrap(configured, None, &[]).map(|r| r.interpreter)
}

/// Probes the interpreter and, in the same process, imports the bootstrap
/// from `bootstrap_dir` and then, as a zygote would before it forks, the
/// `preload` modules (with numeric libraries' thread pools at one thread):
/// the report says whether each worked, and how many OS threads the
/// process had then (a zygote must have one).
pub fn probe_with_bootstrap(
    configured: Option<&Path>,
    bootstrap_dir: Option<&Path>,
    preload: &[String],
) -> Result<ProbeReport, InterpreterError> {
    let path = match configured {
        Some(p) => p.to_path_buf(),
        None => which("python3").ok_or(InterpreterError::NotFound)?,
    };
    let mut cmd = Command::new(&path);
    cmd.args(["-I", "-S", "-c", PROBE]);
    if let Some(dir) = bootstrap_dir {
        cmd.arg(dir);
        if !preload.is_empty() {
            cmd.arg(preload_argument(preload));
        }
    }
    // Nothing of the host's environment (binding secrets, tokens) reaches
    // what the probe imports; the locale keeps its encoding UTF-8.
    cmd.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").env("LANG", "C.UTF-8").current_dir("/");
    let out = output_within(cmd, PROBE_TIMEOUT).map_err(|source| match source {
        Waited::Spawn(source) => InterpreterError::Spawn { path: path.clone(), source },
        Waited::TimedOut => InterpreterError::ProbeFailed {
            path: path.clone(),
            status: format!("it did not answer within {} s", PROBE_TIMEOUT.as_secs()),
            stderr: format!(
                "the probe (and the preload's imports: {}) took longer than {} s; a preloaded module whose \
                 import never returns would hang every zygote",
                if preload.is_empty() { "none".to_owned() } else { preload.join(", ") },
                PROBE_TIMEOUT.as_secs()
            ),
        },
    })?;
    if !out.status.success() {
        return Err(InterpreterError::ProbeFailed {
            path,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).chars().take(2000).collect(),
        });
    }
    let bad = || InterpreterError::BadAnswer {
        path: path.clone(),
        answer: String::from_utf8_lossy(&out.stdout).chars().take(500).collect(),
    };
    let v = JsonValue::parse(out.stdout.trim_ascii_end()).map_err(|_| bad())?;
    let root = v.root();
    let implementation = root.get("implementation").and_then(|x| x.as_str()).ok_or_else(bad)?.to_owned();
    let version: Vec<u64> = root
        .get("version")
        .and_then(|x| x.as_array())
        .ok_or_else(bad)?
        .filter_map(|n| n.as_number().and_then(|n| n.as_u64()))
        .collect();
    let [major, minor, micro] = version[..] else { return Err(bad()) };
    let strings = |key: &str| -> Vec<PathBuf> {
        match root.get(key).map(|x| x.kind()) {
            Some(Kind::Array(it)) => it.filter_map(|s| s.as_str().map(PathBuf::from)).collect(),
            _ => Vec::new(),
        }
    };
    let executable = PathBuf::from(root.get("executable").and_then(|x| x.as_str()).ok_or_else(bad)?);
    if implementation != "cpython" || (major, minor) < MIN_VERSION {
        return Err(InterpreterError::Unsupported {
            path,
            implementation,
            version: format!("{major}.{minor}.{micro}"),
        });
    }
    if !executable.is_absolute() {
        return Err(bad());
    }
    let bootstrap = match root.get("bootstrapError").and_then(|e| e.as_str()) {
        Some(e) => Err(e.chars().take(4000).collect()),
        None => Ok(()),
    };
    let preload_result = match root.get("preloadError") {
        Some(e) => Err(PreloadFailure {
            module: e.get("module").and_then(|m| m.as_str()).unwrap_or_default().to_owned(),
            why: e.get("error").and_then(|m| m.as_str()).unwrap_or_default().chars().take(2000).collect(),
        }),
        None => match root.get("threads").and_then(|n| n.as_number()).and_then(|n| n.as_u64()) {
            Some(threads) if threads > 1 && !preload.is_empty() => Err(PreloadFailure {
                module: preload.join(", "),
                why: format!(
                    "importing them left {threads} threads running; a zygote must fork from one thread \
                     (preload only modules that start no thread at import)"
                ),
            }),
            _ => Ok(()),
        },
    };
    let interpreter = Interpreter {
        executable,
        version: (major, minor, micro),
        prefixes: strings("prefixes"),
        sys_path: strings("path"),
        zygote_error: root.get("zygoteError").and_then(|e| e.as_str()).map(|e| e.chars().take(4000).collect()),
        venv: root.get("venv").and_then(|v| v.as_str()).map(PathBuf::from),
        abi: root.get("abi").and_then(|v| v.as_str()).unwrap_or_default().to_owned(),
    };
    Ok(ProbeReport { interpreter, bootstrap, preload: preload_result })
}

/// Why [`output_within`] has no output.
enum Waited {
    Spawn(std::io::Error),
    TimedOut,
}

/// `cmd`'s output, or [`Waited::TimedOut`] (its process group killed and
/// reaped) when it has not exited within `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Result<std::process::Output, Waited> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn().map_err(Waited::Spawn)?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let read = |pipe: Option<&mut dyn Read>| {
            let mut bytes = Vec::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(16 << 20).read_to_end(&mut bytes);
            }
            bytes
        };
        let (mut stdout, mut stderr) = (stdout, stderr);
        let err_thread = std::thread::spawn(move || read(stderr.as_mut().map(|p| p as &mut dyn Read)));
        let out = read(stdout.as_mut().map(|p| p as &mut dyn Read));
        let err = err_thread.join().unwrap_or_default();
        let _ = tx.send((out, err));
    });
    match rx.recv_timeout(limit) {
        Ok((stdout, stderr)) => {
            let _ = reader.join();
            let status = child.wait().map_err(Waited::Spawn)?;
            Ok(std::process::Output { status, stdout, stderr })
        }
        Err(_) => {
            // Our child, unreaped: its group is its own.
            if let Some(pgid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            let _ = reader.join();
            Err(Waited::TimedOut)
        }
    }
}

/// The preload list as the probe, the zygote and an exec'd child read it
/// (`PYCAGE_PRELOAD`): module names joined by commas (a module name has none).
pub(crate) fn preload_argument(preload: &[String]) -> String {
    preload.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preload whose import never returns must not hang construction:
    /// the probe is killed (its whole group) at its deadline.
    #[test]
    fn a_probe_that_never_answers_is_killed_at_its_deadline() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & sleep 60"]);
        let started = std::time::Instant::now();
        assert!(matches!(output_within(cmd, Duration::from_millis(300)), Err(Waited::TimedOut)));
        assert!(started.elapsed() < Duration::from_secs(30), "it waited for the sleeps");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2"]);
        let out = output_within(cmd, Duration::from_secs(30)).ok().unwrap();
        assert_eq!((out.stdout.as_slice(), out.stderr.as_slice()), (&b"out\n"[..], &b"err\n"[..]));
    }

    #[test]
    fn probes_the_machine_python() {
        let i = probe(None).unwrap();
        assert!(i.version >= (3, 10, 0));
        assert!(i.executable.is_absolute());
        assert!(!i.prefixes.is_empty());
    }

    #[test]
    fn bad_interpreters_are_clear_errors() {
        let e = probe(Some(Path::new("/nonexistent/python3"))).unwrap_err();
        assert!(matches!(e, InterpreterError::Spawn { .. }), "{e}");
        let e = probe(Some(Path::new("/bin/false"))).unwrap_err();
        assert!(matches!(e, InterpreterError::ProbeFailed { .. }), "{e}");
        let e = probe(Some(Path::new("/bin/echo"))).unwrap_err();
        assert!(matches!(e, InterpreterError::BadAnswer { .. }), "{e}");
        // One line, without the probe script the program echoed.
        assert_eq!(
            e.to_string(),
            "/bin/echo is not a CPython >= 3.10: it did not answer as one; give another with RuntimeConfig::python"
        );
        let e = probe(Some(Path::new("/bin/ls"))).unwrap_err();
        assert!(matches!(e, InterpreterError::ProbeFailed { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with("/bin/ls is not a CPython >= 3.10: it failed when run as one (exit status: "),
            "{text}"
        );
        assert!(!text.contains("import") && !text.contains('\n'), "{text}");
    }
}
