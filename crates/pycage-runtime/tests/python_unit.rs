//! Runs the bootstrap's own Python unit tests (stdlib unittest) so the
//! workspace's one test command covers them.
#[test]
fn python_unit_tests_pass() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let out = std::process::Command::new("python3")
        .args(["-I", "-m", "unittest", "discover", "-s", "tests"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python unit tests failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
