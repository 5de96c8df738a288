//! Helpers shared by the CLI's integration tests: the real `pycage` binary,
//! run with `--isolation process` (the sandbox is tested in its own crate)
//! in a temporary directory of its own, so tests run in parallel.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `pycage` binary, in `dir`, stdin closed.
pub fn pycage(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd
}

/// `pycage run --isolation process <args>` in `dir`.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    pycage(dir).args(["run", "--isolation", "process"]).args(args).output().unwrap()
}

/// `pycage run --isolation process <args>` in a fresh temporary directory.
pub fn run(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    run_in(dir.path(), args)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "stdout: {}\nstderr: {}", stdout(o), stderr(o));
}

/// Writes an executable script.
pub fn write_script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// ty from the data-science venv (`.ci/datasci-deps.sh`), or `None`
/// (failing under `PYCAGE_REQUIRE_ALL_TESTS=1`).
#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
pub fn ty_binary() -> Option<PathBuf> {
    let ty = datasci_dir().join("bin/ty");
    if ty.exists() {
        return Some(ty);
    }
    assert!(
        std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(),
        "no ty at {}: run .ci/datasci-deps.sh",
        ty.display()
    );
    eprintln!("skipped: no ty at {} (run .ci/datasci-deps.sh)", ty.display());
    None
}

/// Where the data-science venv is (`.ci/datasci-deps.sh`), whether or not
/// it is there.
fn datasci_dir() -> PathBuf {
    std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    })
}

/// The data-science venv (its interpreter and its uv), or `None` (failing
/// under `PYCAGE_REQUIRE_ALL_TESTS=1`).
#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
pub fn datasci_venv() -> Option<PathBuf> {
    let venv = datasci_dir();
    if venv.join("bin/python").exists() && venv.join("bin/uv").exists() {
        return Some(venv);
    }
    assert!(
        std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(),
        "no data-science venv at {}: run .ci/datasci-deps.sh",
        venv.display()
    );
    eprintln!("skipped: no data-science venv at {} (run .ci/datasci-deps.sh)", venv.display());
    None
}
