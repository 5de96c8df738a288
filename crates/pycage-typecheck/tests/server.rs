//! The checker's server process, with the real `ty` from the data-science
//! venv (`.ci/datasci-deps.sh`; without it these tests say so and pass,
//! except under `PYCAGE_REQUIRE_ALL_TESTS=1`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pycage_typecheck::{CheckRequest, Checker, CheckerConfig};

#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
fn config() -> Option<CheckerConfig> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    let ty = venv.join("bin/ty");
    if !ty.exists() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "no ty at {}", ty.display());
        eprintln!("skipped: no ty at {} (run .ci/datasci-deps.sh)", ty.display());
        return None;
    }
    Some(CheckerConfig {
        ty,
        python: venv.join("bin/python"),
        python_version: (3, 11),
        extra_paths: Vec::new(),
        memory_bytes: pycage_typecheck::DEFAULT_MEMORY_BYTES,
        work_dir_parent: None,
    })
}

/// A checker outlives the tokio runtime it checked on (a host drops its
/// runtime first): dropping it then kills its server and does not panic.
#[test]
fn a_checker_dropped_after_its_tokio_runtime_kills_its_server() {
    let Some(config) = config() else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let checker = Checker::new(config);
    let request = CheckRequest { program: "1 + 1\n", namespaces: &[], own_packages: None, history: None };
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(60);
    let checked = rt.block_on(checker.check(request, deadline())).unwrap();
    assert!(checked.report.passed(), "{}", checked.report.message());
    let pid = checker.server_pid().expect("a server runs after a check");
    drop(rt);
    drop(checker);
    // Killed: gone, or a zombie nobody reaps in this test process.
    let stat = Path::new("/proc").join(pid.to_string()).join("stat");
    let dead = || {
        std::fs::read_to_string(&stat)
            .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
    };
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !dead() && std::time::Instant::now() < until {
        std::thread::yield_now();
    }
    assert!(dead(), "the server {pid} outlived its checker");
}
