//! Where a run happens: its files, its view of the host, and what is left
//! of it when it settles.
//!
//! [`SandboxLayout`] is decided once per runtime: which host paths a
//! sandboxed run sees read-only, and where. The interpreter's prefix, when
//! it lives in a home directory or `/root` (a pyenv or uv-managed build), is
//! shown at the neutral [`INTERPRETER_DIR`] (CPython finds its standard
//! library relative to its executable; `LD_LIBRARY_PATH` covers a
//! `libpython` found through an absolute `RUNPATH`), and the bootstrap at
//! [`BOOTSTRAP_DIR`]. A virtual environment keeps its host paths, and so
//! does its base installation, wherever they are: its `pyvenv.cfg` and its
//! `bin/python` symlink name the base by absolute path, and modules a
//! zygote preloaded from it hold their host paths (a font list, a data
//! directory) that must stay valid in every run. The package cache
//! (`pycage_packages`) is shown at [`pycage_packages::PACKAGES_DIR`].
//!
//! [`RunSite`] is one run's: in process isolation a private 0700 host
//! directory ([`RunDir`]: removed when the run settles, failures reported),
//! inputs copied into it read-only; in the sandbox nothing on the host at
//! all: the run's files live in its tmpfs, inputs are read-only bind mounts,
//! and the host reads `out/` through the working-directory descriptor the
//! sandbox hands over ([`pycage_sandbox::Handoff`]).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pycage_sandbox::{Handoff, Prepared, Remap};

use crate::config::RuntimeConfig;
use crate::error::AllowReadError;
use crate::interpreter::Interpreter;
use pycage_files::cleanup::RunDir;
use pycage_files::copy::{self as files, Access, CopyLimits, CopyReport};

/// Where a remapped interpreter prefix appears inside the sandbox.
pub const INTERPRETER_DIR: &str = "/opt/python";
/// Where the bootstrap package's directory appears inside the sandbox.
pub const BOOTSTRAP_DIR: &str = "/opt/pycage";
pub use pycage_files::copy::OUTPUT_DIR_NAME;

/// A sandboxed run's view of the host, decided once per runtime.
#[derive(Debug, Clone)]
pub(crate) struct SandboxLayout {
    /// Host paths exposed read-only at their own path.
    pub read_only: Vec<PathBuf>,
    /// Host paths exposed read-only elsewhere (interpreter prefix, bootstrap).
    pub remapped: Vec<Remap>,
    /// The interpreter as the sandbox shows it.
    pub python: PathBuf,
    /// The bootstrap directory as the sandbox shows it.
    pub bootstrap: PathBuf,
    /// Extra environment (`LD_LIBRARY_PATH` of a remapped prefix; with
    /// egress, the proxy variables).
    pub env: Vec<(OsString, OsString)>,
    /// With egress: where the supervisor listens inside the run.
    pub egress_port: Option<u16>,
}

/// What a sandboxed run sees of the host, beyond the fixed layout of
/// `docs/sandbox.md` (for `pycage doctor` and the curious).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxView {
    /// Host paths shown read-only at their own path.
    pub read_only: Vec<PathBuf>,
    /// Host paths shown read-only elsewhere: `(host, inside)`.
    pub remapped: Vec<(PathBuf, PathBuf)>,
    /// The interpreter runs start, as the sandbox shows it.
    pub python: PathBuf,
    /// Environment runs get beyond `HOME`, `TMPDIR`, `PATH` and `LANG`.
    pub env: Vec<(String, String)>,
}

impl SandboxLayout {
    /// The layout as a [`SandboxView`].
    pub(crate) fn view(&self) -> SandboxView {
        SandboxView {
            read_only: self.read_only.clone(),
            remapped: self.remapped.iter().map(|r| (r.host.clone(), r.inside.clone())).collect(),
            python: self.python.clone(),
            env: self
                .env
                .iter()
                .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
                .collect(),
        }
    }
}

/// Whether `path` is in a place that shows the host's users: `/root`,
/// `/home`, or the caller's home directory.
fn is_private(path: &Path, home: Option<&Path>) -> bool {
    let home = home.filter(|h| h.is_absolute() && *h != Path::new("/"));
    path.starts_with("/root") || path.starts_with("/home") || home.is_some_and(|h| path.starts_with(h))
}

/// Absolute form of a caller-given path (relative to the current directory).
pub(crate) fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    std::path::absolute(path)
}

/// `HOME` of a sandboxed run: its temporary directory, not its working
/// directory, where what programs and libraries keep under `HOME`
/// (fontconfig's `~/.cache`, dotfiles) would appear among the program's
/// own files. (A process-isolated run's is its [`RunDir`], which holds
/// its working directory: see [`RunDir::work`].)
pub(crate) const SANDBOX_HOME: &str = pycage_sandbox::TMP_DIR;

/// Environment every run gets for the Python packages it may use, with
/// `tmp` its temporary directory: matplotlib's configuration and font
/// cache in a writable place of the run's own (not its working directory).
pub(crate) fn python_env(tmp: &Path) -> Vec<(OsString, OsString)> {
    vec![(OsString::from("MPLCONFIGDIR"), tmp.join("matplotlib").into_os_string())]
}

impl SandboxLayout {
    pub(crate) fn new(
        config: &RuntimeConfig,
        interp: &Interpreter,
        bootstrap: &Path,
        packages: Option<&Path>,
    ) -> Result<Self, AllowReadError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self::build(config, interp, bootstrap, packages, home.as_deref())
    }

    fn build(
        config: &RuntimeConfig,
        interp: &Interpreter,
        bootstrap: &Path,
        packages: Option<&Path>,
        home: Option<&Path>,
    ) -> Result<Self, AllowReadError> {
        let mut read_only = pycage_sandbox::default_read_only_paths();
        let mut remapped = vec![Remap { host: bootstrap.to_path_buf(), inside: PathBuf::from(BOOTSTRAP_DIR) }];
        // The caller's own packages, the same for every run; a run whose
        // program declares more sees its own entry there instead.
        remapped.extend(
            packages.map(|p| Remap { host: p.to_path_buf(), inside: PathBuf::from(pycage_packages::PACKAGES_DIR) }),
        );
        let mut env = python_env(Path::new(pycage_sandbox::TMP_DIR));
        let add = |paths: &mut Vec<PathBuf>, p: &Path| {
            if p.is_absolute() && p.exists() && !paths.iter().any(|q| p.starts_with(q)) {
                paths.retain(|q| !q.starts_with(p));
                paths.push(p.to_path_buf());
            }
        };
        let python = match interp.prefixes.as_slice() {
            [prefix] if interp.venv.is_none() && is_private(prefix, home) && interp.executable.starts_with(prefix) => {
                let inside = Path::new(INTERPRETER_DIR);
                remapped.push(Remap { host: prefix.clone(), inside: inside.to_path_buf() });
                if prefix.join("lib").is_dir() {
                    env.push((OsString::from("LD_LIBRARY_PATH"), inside.join("lib").into_os_string()));
                }
                for p in interp.sys_path.iter().filter(|p| !p.starts_with(prefix)) {
                    add(&mut read_only, p);
                }
                inside.join(interp.executable.strip_prefix(prefix).unwrap_or(Path::new("bin/python3")))
            }
            prefixes => {
                // A venv (`interp.venv` is one of the prefixes) and its base
                // installation, at their own paths.
                for p in interp.venv.iter().chain(prefixes).chain(&interp.sys_path) {
                    add(&mut read_only, p);
                }
                if let Some(dir) = interp.executable.parent() {
                    add(&mut read_only, dir);
                }
                interp.executable.clone()
            }
        };
        for p in &config.allow_read {
            let p = absolute(p).map_err(|e| AllowReadError { path: p.clone(), problem: e.to_string() })?;
            if !p.exists() {
                return Err(AllowReadError { path: p, problem: "no such file or directory".into() });
            }
            add(&mut read_only, &p);
        }
        let egress_port = (!config.allow_net.is_empty()).then_some(pycage_egress::EGRESS_PROXY_PORT);
        if egress_port.is_some() {
            // Programs that may reach a server verify its certificate
            // against the host's trust store, as they would outside.
            for p in pycage_sandbox::default_ca_paths() {
                add(&mut read_only, &p);
            }
            env.extend(pycage_egress::proxy_env().into_iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        }
        Ok(SandboxLayout { read_only, remapped, python, bootstrap: PathBuf::from(BOOTSTRAP_DIR), env, egress_port })
    }
}

/// A caller-named input, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    /// The absolute host path.
    pub host: PathBuf,
    /// Its base name: where it appears in the working directory.
    pub name: OsString,
}

/// Resolve the request's inputs: absolute, existing, distinct base names,
/// none named like the output directory.
pub(crate) fn resolve_inputs(inputs: &[PathBuf]) -> Result<Vec<Input>, String> {
    let mut resolved: Vec<Input> = Vec::with_capacity(inputs.len());
    for given in inputs {
        let host = absolute(given).map_err(|e| format!("input {}: {e}", given.display()))?;
        if let Err(e) = std::fs::symlink_metadata(&host) {
            return Err(format!("input {}: {e}", given.display()));
        }
        let Some(name) = host.file_name().map(OsStr::to_os_string) else {
            return Err(format!("input {} has no base name", given.display()));
        };
        if name == OUTPUT_DIR_NAME {
            return Err(format!("input {}: the name `{OUTPUT_DIR_NAME}` is the output directory", given.display()));
        }
        if resolved.iter().any(|i| i.name == name) {
            return Err(format!("two inputs are named {:?}; each appears under its base name", name));
        }
        resolved.push(Input { host, name });
    }
    Ok(resolved)
}

/// Copies `inputs` read-only into the run directory `dir` (process
/// isolation).
pub(crate) fn copy_inputs(dir: &Path, inputs: &[Input]) -> Result<(), String> {
    if inputs.is_empty() {
        return Ok(());
    }
    let dst = files::create_dir_all(dir).map_err(|e| format!("could not open the run directory: {e}"))?;
    copy_inputs_into(dst.as_fd(), inputs)
}

/// Most bytes of inputs a pooled sandboxed run gets as copies in its own
/// tmpfs (they count against its disk budget); bigger inputs are shown
/// read-only in a sandbox of the run's own instead (an exec'd interpreter).
pub(crate) const POOLED_INPUT_BYTES: u64 = 16 << 20;
/// Most entries of inputs a pooled sandboxed run gets as copies.
pub(crate) const POOLED_INPUT_ENTRIES: u64 = 4096;

/// Whether `inputs` are small enough to be copied into a pooled sandboxed
/// run (see [`POOLED_INPUT_BYTES`]). Iterative, no link followed; stops at
/// the first bound crossed.
pub(crate) fn inputs_fit_a_pooled_run(inputs: &[Input]) -> bool {
    let (mut bytes, mut entries) = (0u64, 0u64);
    let mut stack: Vec<PathBuf> = inputs.iter().map(|i| i.host.clone()).collect();
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { return false };
        entries += 1;
        bytes = bytes.saturating_add(meta.len());
        if bytes > POOLED_INPUT_BYTES || entries > POOLED_INPUT_ENTRIES {
            return false;
        }
        if meta.is_dir() {
            let Ok(dir) = std::fs::read_dir(&path) else { return false };
            for entry in dir {
                let Ok(entry) = entry else { return false };
                stack.push(entry.path());
                if stack.len() as u64 > POOLED_INPUT_ENTRIES {
                    return false;
                }
            }
        }
    }
    true
}

/// Copies `inputs` read-only into the directory `dst` (a run directory,
/// or a pooled sandboxed run's `/work` through the descriptor its sandbox
/// handed over).
pub(crate) fn copy_inputs_into(dst: BorrowedFd<'_>, inputs: &[Input]) -> Result<(), String> {
    for input in inputs {
        let Some(parent) = input.host.parent() else { continue };
        let src = rustix::fs::open(
            parent,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("input {}: {e}", input.host.display()))?;
        let limits = CopyLimits { max_bytes: u64::MAX, max_entries: u64::MAX, max_depth: 256 };
        let report = files::copy_entry(
            src.as_fd(),
            &input.name,
            dst,
            &input.name,
            Path::new(&input.name),
            limits,
            Access::ReadOnly,
        );
        if let Some(skipped) = report.skipped.first() {
            return Err(format!("input {}: {} ({})", input.host.display(), skipped.reason, skipped.path.display()));
        }
    }
    Ok(())
}

/// One run's files.
pub(crate) enum RunSite {
    /// Process isolation: a host directory (removed when the last holder
    /// drops it: the worker and the output copy each hold one).
    Host(Arc<RunDir>),
    /// The sandbox: the handoff once spawned.
    Sandbox(Option<Handoff>),
}

impl RunSite {
    /// The remaps that show `inputs` read-only in a sandboxed run's
    /// working directory.
    pub(crate) fn input_remaps(inputs: &[Input]) -> Vec<Remap> {
        let work = Path::new(pycage_sandbox::WORK_DIR);
        inputs.iter().map(|i| Remap { host: i.host.clone(), inside: work.join(&i.name) }).collect()
    }

    /// Record what the sandbox handed over after a successful spawn.
    pub(crate) fn sandboxed(prepared: &Prepared) -> RunSite {
        RunSite::Sandbox(prepared.take_handoff())
    }

    /// The host pid of a sandboxed run's init process (PID 1 of its PID
    /// namespace: the watchdog's scope).
    pub(crate) fn init_pid(&self) -> Option<rustix::process::Pid> {
        match self {
            RunSite::Sandbox(Some(handoff)) => Some(handoff.init_pid),
            RunSite::Sandbox(None) | RunSite::Host(_) => None,
        }
    }

    /// The run's `sock_diag` socket, for the watchdog's count of its
    /// socket buffers (see `crate::watchdog`), when the sandbox made one.
    pub(crate) fn sock_diag(&self) -> Option<pycage_watchdog::SockDiag> {
        match self {
            RunSite::Sandbox(Some(Handoff { sock_diag: Some(socket), .. })) => {
                socket.try_clone().ok().map(pycage_watchdog::SockDiag::new)
            }
            RunSite::Sandbox(_) | RunSite::Host(_) => None,
        }
    }

    /// A copy of the run's egress listener (see `crate::egress`), when the
    /// sandbox made one.
    pub(crate) fn egress_listener(&self) -> Option<std::io::Result<OwnedFd>> {
        match self {
            RunSite::Sandbox(Some(Handoff { egress: Some(listener), .. })) => Some(listener.try_clone()),
            RunSite::Sandbox(_) | RunSite::Host(_) => None,
        }
    }

    /// The working directory, opened for reading what the program left.
    fn work_dir(&self) -> std::io::Result<OwnedFd> {
        match self {
            RunSite::Host(dir) => files::create_dir_all(&dir.work()),
            RunSite::Sandbox(Some(handoff)) => handoff.work_dir.try_clone(),
            RunSite::Sandbox(None) => Err(std::io::Error::other("the sandbox handed over no working directory")),
        }
    }

    /// Copy what the program left in `out/` to `dest` (created if needed).
    pub(crate) fn collect_output(&self, dest: &Path, max_bytes: u64) -> CopyReport {
        let failed = |reason: String| CopyReport {
            skipped: vec![files::Skipped { path: PathBuf::new(), reason, kind: files::SkipKind::Failed }],
            ..CopyReport::default()
        };
        let work = match self.work_dir() {
            Ok(fd) => fd,
            Err(e) => return failed(e.to_string()),
        };
        let dst = match files::create_dir_all(dest) {
            Ok(fd) => fd,
            Err(e) => return failed(format!("cannot create {}: {e}", dest.display())),
        };
        files::copy_entry(
            work.as_fd(),
            OsStr::new(OUTPUT_DIR_NAME),
            dst.as_fd(),
            OsStr::new("."),
            Path::new(""),
            CopyLimits::output(max_bytes),
            Access::Writable,
        )
    }
}

/// A sandboxed run's cgroup (when one is delegated to pycage): killed and
/// removed once the run's supervisor is reaped. The kernel refuses to
/// remove a cgroup until its last process is gone, so a removal that finds
/// it busy is retried on a short-lived thread instead of blocking here.
pub(crate) struct CgroupGuard(pub(crate) pycage_sandbox::cgroup::RunCgroup);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        use pycage_sandbox::cgroup::RealCgroupFs;
        if self.0.kill_and_remove(&RealCgroupFs).is_ok() {
            return;
        }
        let path = self.0.path().to_path_buf();
        let _ = std::thread::Builder::new().name("pycage-cgroup-rm".into()).spawn(move || {
            for _ in 0..250 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                if std::fs::remove_dir(&path).is_ok() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interp<P: AsRef<Path>>(executable: P, prefixes: &[P], sys_path: &[P]) -> Interpreter {
        Interpreter {
            executable: executable.as_ref().to_path_buf(),
            version: (3, 11, 7),
            prefixes: prefixes.iter().map(|p| p.as_ref().to_path_buf()).collect(),
            sys_path: sys_path.iter().map(|p| p.as_ref().to_path_buf()).collect(),
            zygote_error: None,
            venv: None,
            abi: String::new(),
        }
    }

    /// The layout for `i`, with `home` as the caller's home directory.
    fn layout_in(i: &Interpreter, home: Option<&Path>) -> SandboxLayout {
        SandboxLayout::build(&RuntimeConfig::default(), i, Path::new("/tmp/boot"), Some(Path::new("/tmp/pk")), home)
            .unwrap()
    }

    #[test]
    fn a_prefix_in_a_home_is_shown_at_a_neutral_path() {
        let home = tempfile::tempdir().unwrap();
        let prefix = home.path().join(".pyenv/versions/3.11.7");
        std::fs::create_dir_all(prefix.join("lib/python3.11")).unwrap();
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        let i = interp(prefix.join("bin/python3.11"), std::slice::from_ref(&prefix), &[prefix.join("lib/python3.11")]);
        let layout = layout_in(&i, Some(home.path()));
        assert_eq!(layout.python, PathBuf::from("/opt/python/bin/python3.11"));
        assert!(layout.remapped.contains(&Remap { host: prefix.clone(), inside: PathBuf::from(INTERPRETER_DIR) }));
        assert!(layout.read_only.iter().all(|p| !p.starts_with(home.path())), "{:?}", layout.read_only);
        assert_eq!(
            layout.env,
            vec![
                (OsString::from("MPLCONFIGDIR"), OsString::from("/tmp/matplotlib")),
                (OsString::from("LD_LIBRARY_PATH"), OsString::from("/opt/python/lib"))
            ]
        );
        // Without the home directory being the caller's, /tmp is not private.
        let layout = layout_in(&i, None);
        assert_eq!(layout.python, prefix.join("bin/python3.11"));
    }

    #[test]
    fn a_system_interpreter_keeps_its_paths() {
        let i = interp("/usr/bin/python3.11", &["/usr"], &["/usr/lib/python3.11", "/usr/lib/python3/dist-packages"]);
        let layout =
            SandboxLayout::new(&RuntimeConfig::default(), &i, Path::new("/tmp/boot"), Some(Path::new("/tmp/pk")))
                .unwrap();
        assert_eq!(layout.python, PathBuf::from("/usr/bin/python3.11"));
        assert_eq!(
            layout.remapped,
            vec![
                Remap { host: PathBuf::from("/tmp/boot"), inside: PathBuf::from(BOOTSTRAP_DIR) },
                Remap { host: PathBuf::from("/tmp/pk"), inside: PathBuf::from(pycage_packages::PACKAGES_DIR) },
            ]
        );
        assert_eq!(layout.env, python_env(Path::new("/tmp")));
        assert!(layout.read_only.contains(&PathBuf::from("/usr")));
    }

    #[test]
    fn a_venv_and_its_base_keep_their_paths_even_in_a_home() {
        let home = tempfile::tempdir().unwrap();
        let base = home.path().join(".pyenv/versions/3.11.7");
        let venv = home.path().join("project/.venv");
        for d in
            [base.join("lib/python3.11"), base.join("bin"), venv.join("lib/python3.11/site-packages"), venv.join("bin")]
        {
            std::fs::create_dir_all(d).unwrap();
        }
        let i = Interpreter {
            venv: Some(venv.clone()),
            ..interp(
                venv.join("bin/python"),
                &[base.clone(), venv.clone()],
                &[base.join("lib/python3.11"), venv.join("lib/python3.11/site-packages")],
            )
        };
        let layout = layout_in(&i, Some(home.path()));
        assert_eq!(layout.python, venv.join("bin/python"));
        assert!(layout.read_only.contains(&venv), "{:?}", layout.read_only);
        assert!(layout.read_only.contains(&base), "{:?}", layout.read_only);
        assert!(layout.remapped.iter().all(|r| r.inside != Path::new(INTERPRETER_DIR)));
        // A venv whose only prefix is itself (a --copies venv of a base in
        // a home directory reports both) is never moved either.
        let copies = Interpreter { prefixes: vec![venv.clone()], sys_path: vec![], ..i };
        let layout = layout_in(&copies, Some(home.path()));
        assert_eq!(layout.python, venv.join("bin/python"));
    }

    #[test]
    fn inputs_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), "x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.csv"), "y").unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let ok = resolve_inputs(&[dir.path().join("a.csv"), dir.path().join("sub")]).unwrap();
        assert_eq!(ok.iter().map(|i| i.name.clone()).collect::<Vec<_>>(), ["a.csv", "sub"]);
        let err = resolve_inputs(&[dir.path().join("a.csv"), dir.path().join("sub/a.csv")]).unwrap_err();
        assert!(err.contains("two inputs are named"), "{err}");
        assert!(resolve_inputs(&[dir.path().join("out")]).unwrap_err().contains("output directory"));
        assert!(resolve_inputs(&[dir.path().join("missing")]).is_err());
        assert!(resolve_inputs(&[PathBuf::from("/")]).unwrap_err().contains("no base name"));
    }
}
