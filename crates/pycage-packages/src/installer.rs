//! Running the installer on the host, and only where no package's code
//! can run: wheels only (`uv pip install --no-build`, `pip install
//! --only-binary :all:`), so nothing is built and no `setup.py` or build
//! backend runs; in an empty private working directory (a requirement can
//! never name a local file, and no `uv.toml`, `pyproject.toml` or
//! `pip/__main__.py` a run left behind is read), and with `python -I`
//! (pip never imports from the working directory). uv runs with
//! `--no-config`, since it also reads configuration files from every
//! parent directory; the operator's environment (`UV_INDEX_URL`,
//! `PIP_INDEX_URL`, ...) and pip's user config still apply.
//!
//! The installer is its own process group, killed at the deadline or on
//! cancel; its output goes to a file of which the last bytes name the
//! failure.

use std::io::{Read, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::PackageError;
use crate::requirement::Requirement;

/// Bytes of an installer's output kept for the error message.
const OUTPUT_TAIL: u64 = 2048;

/// What installs a run's packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installer {
    /// `uv pip install`, this `uv`.
    Uv(PathBuf),
    /// `python -I -m pip install`.
    Pip,
}

impl Installer {
    /// Its name in messages.
    pub fn name(&self) -> &'static str {
        match self {
            Installer::Uv(_) => "uv",
            Installer::Pip => "pip",
        }
    }

    /// uv beside `python` (`pip install uv` into a venv puts it there) or
    /// on `PATH`, else `python`'s pip.
    pub fn find(python: &Path) -> Option<Installer> {
        let beside = python.parent().map(|d| d.join("uv")).filter(|p| is_executable(p));
        if let Some(uv) = beside.or_else(on_path) {
            return Some(Installer::Uv(uv));
        }
        let pip = Command::new(python)
            .args(["-I", "-m", "pip", "--version"])
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        pip.is_ok_and(|s| s.success()).then_some(Installer::Pip)
    }

    /// The command that installs `requirements` for `python` into
    /// `target`, from the empty directory `cwd`, wheels only.
    pub fn command(&self, python: &Path, target: &Path, cwd: &Path, requirements: &[Requirement]) -> Command {
        let mut cmd = match self {
            Installer::Uv(uv) => {
                let mut c = Command::new(uv);
                // `--no-config`: uv looks for `uv.toml` and `pyproject.toml`
                // in the working directory and every parent of it, and a
                // run's `out/` may have been delivered into a parent of the
                // cache (`--output ~`). The environment (`UV_INDEX_URL`,
                // ...) still configures it.
                c.args(["pip", "install", "--no-config", "--quiet", "--no-progress", "--no-build", "--python"])
                    .arg(python);
                c
            }
            Installer::Pip => {
                let mut c = Command::new(python);
                c.args(["-I", "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check"]);
                c.args(["--only-binary", ":all:"]);
                c
            }
        };
        cmd.arg("--target").arg(target);
        // Each requirement after `--`: never read as an option, whatever
        // the checks before let through.
        cmd.arg("--").args(requirements.iter().map(|r| r.text.as_str()));
        cmd.current_dir(cwd).stdin(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    /// Runs `cmd` (from [`Installer::command`]) until it exits, `deadline`
    /// passes or `cancel` is set; its output goes to `log`.
    pub fn run(
        &self,
        mut cmd: Command,
        log: std::fs::File,
        listed: &str,
        deadline: (Instant, Duration),
        cancel: &AtomicBool,
    ) -> Result<(), PackageError> {
        let io_err = |e: std::io::Error| PackageError::Install {
            installer: self.name(),
            requirements: listed.to_owned(),
            output: format!("could not start it: {e}"),
        };
        cmd.stdout(log.try_clone().map_err(io_err)?).stderr(log.try_clone().map_err(io_err)?);
        let mut child = cmd.spawn().map_err(io_err)?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            let stop = if cancel.load(Ordering::Acquire) {
                Some(PackageError::Cancelled)
            } else if Instant::now() >= deadline.0 {
                Some(PackageError::Timeout { requirements: listed.to_owned(), timeout: deadline.1 })
            } else {
                None
            };
            if let Some(err) = stop {
                if let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    // Our child, not reaped: its group is its own.
                    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                return Err(err);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let status = status.map_err(|e| PackageError::Install {
            installer: self.name(),
            requirements: listed.to_owned(),
            output: e.to_string(),
        })?;
        if status.success() {
            return Ok(());
        }
        Err(PackageError::Install {
            installer: self.name(),
            requirements: listed.to_owned(),
            output: format!("{status}: {}", tail(log)),
        })
    }
}

/// Installs requirements where a build may run, at the caller's opt-in
/// (`RuntimeConfig::allow_builds`): a package without a wheel is built by
/// its own code, which never runs on the host. pycage-runtime's builder
/// runs pip in a sandboxed run whose only network is the package index,
/// through the egress proxy, and whose only output is its `out/` copy.
pub trait Builder: Send + Sync {
    /// Installs `requirements` (data: each goes after `--`) into `site`, a
    /// directory that does not exist yet, within `deadline`; stops when
    /// `cancel` is set. `Err`: what went wrong, with the installer's own
    /// last lines.
    fn install(
        &self,
        requirements: &[Requirement],
        site: &Path,
        deadline: (Instant, Duration),
        cancel: &AtomicBool,
    ) -> Result<(), String>;
}

/// Whether an installer's failure says that a package has no wheel (and
/// building is off), rather than that it does not exist.
pub fn says_no_wheel(output: &str) -> bool {
    let o = output.to_ascii_lowercase();
    o.contains("building from source is disabled")
        || o.contains("no-build")
        || o.contains("has no usable wheels")
        || o.contains("only-binary")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_wheels_only_from_an_empty_directory_and_names_are_data() {
        let reqs = [Requirement::parse("tabulate>=0.9").unwrap()];
        let args = |i: &Installer| {
            let cmd = i.command(Path::new("/py/bin/python3"), Path::new("/t/site"), Path::new("/t/work"), &reqs);
            let argv: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
            (argv, cmd.get_current_dir().map(Path::to_path_buf))
        };
        let (uv, cwd) = args(&Installer::Uv(PathBuf::from("/bin/uv")));
        assert!(uv.contains(&"--no-build".to_owned()) && uv.contains(&"--no-config".to_owned()), "{uv:?}");
        assert_eq!(cwd.as_deref(), Some(Path::new("/t/work")));
        assert_eq!(uv[uv.len() - 2..], ["--", "tabulate>=0.9"]);
        let (pip, _) = args(&Installer::Pip);
        assert_eq!(pip[..3], ["-I", "-m", "pip"]);
        assert!(pip.windows(2).any(|w| w == ["--only-binary", ":all:"]), "{pip:?}");
        assert_eq!(pip[pip.len() - 2..], ["--", "tabulate>=0.9"]);
    }
}
