//! Runs the bootstrap's own Python unit tests (stdlib unittest) so the
//! workspace's one test command covers them: with `python3`, and again with
//! every interpreter listed in `PYCAGE_TEST_PYTHONS` (`:`-separated; `.ci/test`
//! lists the other CPython versions it finds), because the child runs on
//! whatever CPython >= 3.10 its user has, and some of its shortcuts are
//! taken only on the versions they were checked against.
//!
//! With the native join library this crate embeds (`build.rs`) named in
//! `PYCAGE_TEST_NATIVE_JOIN`, so its tests run it (`test_native_join.py`).

use std::path::Path;

fn unit_tests_pass(python: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let library = Path::new(env!("PYCAGE_NATIVE_JOIN_LIBRARY"));
    assert!(
        std::fs::metadata(library).is_ok_and(|m| m.len() > 0),
        "the native join library was not built (the build's warnings say why): {}",
        library.display()
    );
    let out = std::process::Command::new(python)
        .args(["-I", "-B", "-m", "unittest", "discover", "-s", "tests"])
        .env("PYCAGE_TEST_NATIVE_JOIN", library)
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "python unit tests failed with {}:\n{}\n{}",
        python.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_unit_tests_pass() {
    unit_tests_pass(Path::new("python3"));
}

#[test]
fn python_unit_tests_pass_on_every_listed_python() {
    let Some(list) = std::env::var_os("PYCAGE_TEST_PYTHONS") else { return };
    for python in std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()) {
        unit_tests_pass(&python);
    }
}
