//! The two floors of a sandboxed run's CPU, measured beside it:
//!
//! - the namespace set: what the kernel charges for the namespaces and
//!   mounts a run gets, with nothing of pycage in it
//!   ([`pycage_sandbox::floor`], run by this program in a process of its
//!   own, `__ns-floor`), and the same with the program's own confinement
//!   (nested user namespace, bounding set, Landlock, seccomp) in each
//!   spawn: the kernel's whole floor for what a sandbox adds to a run;
//! - CPython's fork and exit, in an interpreter that imported what the
//!   zygote imports (pycage's bootstrap and zygote modules).
//!
//! Both are whole-machine busy CPU per spawn (`/proc/stat`), so the kernel
//! threads that tear namespaces down count, as they do for pycage's own
//! CPU per run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::bench::measure::busy;

/// The hidden first argument that makes this program run the namespace
/// floor: `__ns-floor N ROOT bare|confine [BIND...]`.
pub(crate) const NS_FLOOR_ARG: &str = "__ns-floor";

/// Serves `__ns-floor`: `n` floor spawns, then exit (0 on success).
pub(crate) fn serve_ns_floor(args: &[OsString]) -> ExitCode {
    let mut args = args.iter();
    let n = args.next().and_then(|a| a.to_str()?.parse::<usize>().ok());
    let root = args.next().map(PathBuf::from);
    let confine = match args.next().and_then(|a| a.to_str()) {
        Some("bare") => Some(false),
        Some("confine") => Some(true),
        _ => None,
    };
    let (Some(n), Some(root), Some(confine)) = (n, root, confine) else {
        crate::output::stderr_line("pycage __ns-floor: usage: __ns-floor N ROOT bare|confine [BIND...]");
        return ExitCode::from(2);
    };
    let binds = args.map(PathBuf::from).collect();
    let plan = pycage_sandbox::floor::FloorPlan { binds, network: false, root, confine };
    match pycage_sandbox::floor::run_floor(&plan, n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::output::stderr_line(&format!("pycage __ns-floor: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// The namespace floor's CPU per spawn, over `n` spawns binding `binds`;
/// with `confine`, each spawn's PID-1 process also confines itself as a
/// run's program does ([`pycage_sandbox::floor`]).
pub(crate) fn namespace_set(n: usize, binds: &[PathBuf], confine: bool) -> anyhow::Result<Duration> {
    let root = tempfile::tempdir().context("a directory for the floor's tmpfs")?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(NS_FLOOR_ARG).arg(n.to_string()).arg(root.path());
    cmd.arg(if confine { "confine" } else { "bare" }).args(binds);
    per_spawn(cmd, n)
}

/// CPython's fork and `_exit` per spawn, in `python` with the zygote's
/// imports from `bootstrap`, over `n` forks.
pub(crate) fn cpython_fork(python: &Path, bootstrap: &Path, n: usize) -> anyhow::Result<Duration> {
    let mut quoted = Vec::new();
    pycage_protocol::write_json_string(&mut quoted, &bootstrap.to_string_lossy());
    let code = format!(
        "import os, sys\nsys.path.insert(0, {})\nimport pycage.zygote, pycage.bootstrap\n\
         for _ in range({n}):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n",
        String::from_utf8_lossy(&quoted)
    );
    let mut cmd = Command::new(python);
    cmd.args(["-I", "-S", "-B", "-c", &code]).env_clear();
    // The interpreter's start is not the floor: measured alone, subtracted.
    let start = per_spawn(
        {
            let mut c = Command::new(python);
            c.args(["-I", "-S", "-B", "-c", &code.replace(&format!("range({n})"), "range(0)")]).env_clear();
            c
        },
        1,
    )?;
    let total = per_spawn(cmd, 1)?;
    Ok(total.saturating_sub(start) / n.max(1) as u32)
}

/// Whole-machine busy CPU while `cmd` runs (and the kernel's deferred
/// work after it), divided by `n`.
fn per_spawn(mut cmd: Command, n: usize) -> anyhow::Result<Duration> {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let before = busy();
    let out = cmd.output().context("cannot run the floor")?;
    anyhow::ensure!(out.status.success(), "the floor failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    // Namespaces are torn down by kernel threads after the last exit.
    std::thread::sleep(Duration::from_millis(300));
    Ok(busy().saturating_sub(before) / n.max(1) as u32)
}
