//! `pycage bench --venv` measures every row it reports: the fresh runs
//! with `--preload numpy,pandas` and without, and a program that declares
//! a package (PEP 723), which its runtime must allow (a program's
//! declarations are refused by default), installed from PyPI by the
//! venv's uv into an empty cache and found there afterwards.
//! BENCHMARKS.md's numpy/pandas lane comes from this command
//! (`benchmarks/run.sh datasci`).
//!
//! It runs in the data-science venv `.ci/datasci-deps.sh` installs (numpy,
//! pandas and uv); without it the test prints why and passes, unless
//! `PYCAGE_REQUIRE_ALL_TESTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{pycage, stderr, stdout};

/// `$PYCAGE_DATASCI_VENV`, default `<workspace>/target/datasci-venv`.
fn datasci_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    if venv.join("bin/python").exists() && venv.join("bin/uv").exists() {
        return Some(venv);
    }
    let why = format!("the data-science venv is not installed in {} (run .ci/datasci-deps.sh)", venv.display());
    if std::env::var("PYCAGE_REQUIRE_ALL_TESTS").as_deref() == Ok("1") {
        panic!("PYCAGE_REQUIRE_ALL_TESTS=1 and {why}");
    }
    #[allow(clippy::print_stderr)] // the test harness shows it: why this test did nothing
    {
        eprintln!("skipped: {why}");
    }
    None
}

#[test]
fn every_row_of_bench_venv_is_measured_the_declared_package_included() {
    let Some(venv) = datasci_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = pycage(dir.path())
        .args(["bench", "--iterations", "1", "--json", "--venv"])
        .arg(&venv)
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(stdout(&out).trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {}\nstderr: {}", stdout(&out), stderr(&out)));
    for key in ["freshRun", "declaredPackages"] {
        let rows = report[key].as_array().unwrap_or_else(|| panic!("no {key}: {report}"));
        assert!(!rows.is_empty(), "{key}: {report}");
        for row in rows {
            assert_eq!(row["failed"], 0, "{key}: a row's runs failed: {row}\nstderr: {}", stderr(&out));
            assert!(row["runs"].as_u64().unwrap_or(0) > 0 && row["p50Ms"].is_number(), "{key}: {row}");
        }
    }
    assert!(out.status.success(), "stderr: {}", stderr(&out));
}
