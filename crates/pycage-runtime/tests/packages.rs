//! A program's declared packages (PEP 723) and the caller's own
//! (`with_packages`): refused unless allowed, checked on what the resolver
//! chose, installed as wheels only (no package's code runs on the host),
//! once per resolved set, and shown to a sandboxed run as its own entry
//! alone, read-only.
//!
//! These reach PyPI through uv on the host (the data-science venv's, from
//! `.ci/datasci-deps.sh`); without that venv they say so and pass, except
//! under `PYCAGE_REQUIRE_ALL_TESTS=1`, where they fail.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use pycage_runtime::*;

#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
/// The data-science venv (its interpreter and its uv), or `None` (failing
/// under `PYCAGE_REQUIRE_ALL_TESTS=1`) when it is not installed.
fn datasci_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    if venv.join("bin/python").symlink_metadata().is_ok() && venv.join("bin/uv").exists() {
        return Some(venv);
    }
    let require_all = std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_some();
    assert!(!require_all, "the data-science venv is missing at {}: run .ci/datasci-deps.sh", venv.display());
    eprintln!("skipped: no data-science venv at {} (run .ci/datasci-deps.sh)", venv.display());
    None
}

/// The venv a test runs in: the data-science venv as root; as another
/// user (`rerun_as_nobody`, who cannot read an interpreter under `/root`),
/// a venv of the system's `python3` made here, with the data-science
/// venv's `uv` beside its interpreter.
fn test_venv() -> Option<(PathBuf, Option<tempfile::TempDir>)> {
    let datasci = datasci_venv()?;
    if rustix::process::geteuid().is_root() {
        return Some((datasci, None));
    }
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let out = std::process::Command::new(datasci.join("bin/uv"))
        .args(["venv", "--quiet", "--no-project", "--python", "/usr/bin/python3"])
        .arg(&venv)
        .env("UV_PYTHON_DOWNLOADS", "never")
        .output()
        .unwrap();
    assert!(out.status.success(), "uv venv: {}", String::from_utf8_lossy(&out.stderr));
    std::os::unix::fs::symlink(datasci.join("bin/uv"), venv.join("bin/uv")).unwrap();
    Some((venv, Some(dir)))
}

/// A cache directory the sandbox's uid (a root host's runs have their
/// own) can reach.
fn cache_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn runtime_for(venv: &Path, cache: &Path, isolation: Isolation, f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let mut config = RuntimeConfig {
        venv: Some(venv.to_path_buf()),
        cache_dir: Some(cache.to_path_buf()),
        isolation,
        pool_size: 1,
        ..RuntimeConfig::default()
    };
    f(&mut config);
    Runtime::new(config).unwrap()
}

fn declaring(deps: &str, body: &str) -> String {
    format!("# /// script\n# dependencies = [{deps}]\n# ///\n{body}")
}

/// The installed sets in a cache.
fn sets(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache.join("packages/sets"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

const TABULATE: &str = "import os, tabulate\n\
try:\n    open(os.path.join(os.path.dirname(tabulate.__file__), 'x'), 'w')\n    wrote = True\n\
except OSError:\n    wrote = False\n\
return [tabulate.tabulate([[1, 2]]), os.path.dirname(os.path.dirname(tabulate.__file__)), wrote]";

/// Issue 41: without the caller's leave, a program's declarations are
/// refused before anything is resolved, and the message names the flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_programs_declarations_are_refused_by_default() {
    let rt = runtime();
    let r = run(&rt, &declaring("\"docopt\"", "print('started')\nreturn 1")).await;
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Dependencies, "{message}");
    for part in ["\"docopt\"", "--allow-package", "--allow-any-package", "allow_packages=", "allow_any_package=True"] {
        assert!(message.contains(part), "{part} is not in: {message}");
    }
    assert!(r.logs.is_empty(), "the program started: {:?}", r.logs);
    rt.shutdown().await;
}

/// Issue 18 and 41: an allowed package is installed by the host once per
/// resolved set and shown read-only, in both isolations; requests that
/// resolve alike share one entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_packages_are_installed_once_per_resolved_set_and_read_only() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    for isolation in [Isolation::Sandbox, Isolation::Process] {
        let rt = runtime_for(&venv, cache.path(), isolation, |c| c.allow_packages = vec!["tabulate".into()]);
        let r = run(&rt, &declaring("\"tabulate==0.9.0\"", TABULATE)).await;
        let v = r.value.as_ref().unwrap_or_else(|| panic!("{isolation:?}: {r:?}")).root();
        let items: Vec<_> = v.as_array().unwrap().collect();
        assert_eq!(items[0].as_str(), Some("-  -\n1  2\n-  -"));
        let dir = PathBuf::from(items[1].as_str().unwrap());
        if isolation == Isolation::Sandbox {
            assert_eq!(dir, Path::new(PACKAGES_DIR), "the run's own entry, where runs see it");
            assert_eq!(items[2].as_bool(), Some(false), "a run wrote into the package cache");
        } else {
            assert!(dir.starts_with(cache.path()), "{dir:?}");
        }
        rt.shutdown().await;
    }
    assert_eq!(sets(cache.path()).len(), 1, "the second run installed again");
    // Other texts that resolve to the same set: no second copy.
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| c.allow_packages = vec!["tabulate".into()]);
    for exclude in ["0.0.1", "0.0.2", "0.0.3"] {
        let r = run(&rt, &declaring(&format!("\"tabulate!={exclude}\", \"tabulate==0.9.0\""), "return 1")).await;
        assert_eq!(value(&r), "1");
    }
    rt.shutdown().await;
    assert_eq!(sets(cache.path()).len(), 1, "requests that resolve alike made copies");
    let staging: Vec<_> = std::fs::read_dir(cache.path().join("packages"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(staging.is_empty(), "staging left: {staging:?}");
}

/// Issue 41: what an allowed package brings must be allowed too
/// (`tabulate[widechars]` brings `wcwidth`); the caller's own requirements
/// bring what they bring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_allowed_package_brings_is_checked() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| c.allow_packages = vec!["tabulate".into()]);
    let r = run(&rt, &declaring("\"tabulate[widechars]==0.9.0\"", "import wcwidth\nreturn 1")).await;
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Dependencies, "{message}");
    assert!(message.contains("would bring wcwidth") && message.contains("--allow-package"), "{message}");
    assert!(sets(cache.path()).is_empty(), "a refused set entered the cache");
    rt.shutdown().await;
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| {
        c.allow_packages = vec!["tabulate".into(), "wcwidth".into()];
    });
    let r = run(&rt, &declaring("\"tabulate[widechars]==0.9.0\"", "import wcwidth\nreturn 1")).await;
    assert_eq!(value(&r), "1");
    rt.shutdown().await;
    // The caller's own: trusted, with what they bring.
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| {
        c.with_packages = vec!["tabulate[widechars]==0.9.0".into()];
        c.allow_packages = vec!["six".into()];
    });
    let r = run(&rt, &declaring("\"six\"", "import six, wcwidth, tabulate\nreturn 1")).await;
    assert_eq!(value(&r), "1");
    rt.shutdown().await;
}

/// Issue 41: a package that has no wheel is never built on the host (its
/// `setup.py` would run there): `docopt` is published as an sdist only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_without_a_wheel_is_never_built() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| c.allow_packages = vec!["docopt".into()]);
    let r = run(&rt, &declaring("\"docopt\"", "return 1")).await;
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Dependencies, "{message}");
    assert!(message.contains("docopt") && message.contains("wheels only"), "{message}");
    rt.shutdown().await;
}

/// Issue 41: with the caller's leave (`allow_builds`), a package without a
/// wheel is built, by pip in a sandboxed run of its own (here beside runs
/// with process isolation): the set it made says pip installed it, where
/// the host's installer is uv.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_without_a_wheel_is_built_in_a_sandbox_when_allowed() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| {
        c.allow_packages = vec!["docopt".into()];
        c.allow_builds = true;
    });
    let r = run(&rt, &declaring("\"docopt==0.6.2\"", "import docopt\nreturn docopt.__version__")).await;
    assert_eq!(value(&r), "\"0.6.2\"");
    let sets = sets(cache.path());
    assert_eq!(sets.len(), 1, "{sets:?}");
    let installer = cache.path().join("packages/sets").join(&sets[0]).join("docopt-0.6.2.dist-info/INSTALLER");
    assert_eq!(std::fs::read_to_string(&installer).unwrap().trim(), "pip", "{}", installer.display());
    // What it brings is still checked: an allowed name whose build fails
    // says so, and nothing enters the cache.
    let r = run(&rt, &declaring("\"docopt==0.0.0\"", "return 1")).await;
    let (kind, message) = failure(&r);
    assert_eq!(kind, FailureKind::Dependencies, "{message}");
    assert!(message.contains("building docopt==0.0.0 in a sandbox failed"), "{message}");
    rt.shutdown().await;
}

/// Issue 41: a sandboxed run sees its own entry alone: not the cache, not
/// another run's set (tenant B cannot import tenant A's package by putting
/// A's entry on `sys.path`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_run_sees_its_own_entry_alone() {
    let Some((venv, _made)) = test_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Sandbox, |c| {
        c.allow_packages = vec!["tabulate".into(), "six".into()];
    });
    assert_eq!(value(&run(&rt, &declaring("\"tabulate==0.9.0\"", "import tabulate\nreturn 1")).await), "1");
    let probe = "import os, sys\n\
try:\n    import tabulate\n    has = True\nexcept ImportError:\n    has = False\n\
seen = sorted(os.listdir('/opt/pycage-packages')) if os.path.isdir('/opt/pycage-packages') else None\n\
return [has, 'six.py' in (seen or []), any('tabulate' in n for n in (seen or [])), os.path.exists(sys.argv[0] if sys.argv else '')]";
    let r = run(&rt, &declaring("\"six\"", probe)).await;
    let v = value(&r);
    assert!(v.starts_with("[false,true,false"), "{v}");
    // Without packages: nothing there at all.
    let r = run(&rt, "import os\nreturn os.path.exists('/opt/pycage-packages')").await;
    assert_eq!(value(&r), "false");
    rt.shutdown().await;
}

#[test]
fn a_sandboxed_run_sees_its_own_entry_alone_as_an_unprivileged_user() {
    if datasci_venv().is_some() {
        common::rerun_as_nobody("a_sandboxed_run_sees_its_own_entry_alone");
    }
}

/// Issue 41: four runs installing one set at once: one install, every run
/// gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_share_one_install() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| c.allow_packages = vec!["tabulate".into()]);
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..4 {
        let program = declaring(&format!("\"tabulate!=0.0.{i}\""), "import tabulate\nreturn 1");
        let rt = rt.clone();
        runs.spawn(async move { run(&rt, &program).await });
    }
    while let Some(r) = runs.join_next().await {
        let r = r.unwrap();
        assert_eq!(value(&r), "1", "{r:?}");
    }
    assert_eq!(sets(cache.path()).len(), 1);
    rt.shutdown().await;
}

/// Issue 18: what cannot be provided settles as `dependencies` before the
/// program starts: a direct reference, a name that reads as a file, a
/// malformed block, a package the index does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeliverable_packages_fail_before_the_program_starts() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    let rt = runtime_for(&venv, cache.path(), Isolation::Process, |c| c.allow_any_package = true);
    let cases = [
        (declaring("\"tabulate @ https://example.com/t.whl\"", "print('started')"), "direct references"),
        (declaring("\"h4local-1.0.tar.gz\"", "print('started')"), "names a file, not a package"),
        ("# /// script\n# dependencies = \"tabulate\"\n# ///\nreturn 1".to_owned(), "must be an array of strings"),
        (declaring("\"pycage-no-such-package-4e1d\"", "print('started')"), "installing pycage-no-such-package-4e1d"),
        (declaring("\"pycage-no-such-package-5f2e\"", "print('started')"), "declared names in this runtime: 2 of 16"),
    ];
    for (program, want) in cases {
        let r = run(&rt, &program).await;
        let (kind, message) = failure(&r);
        assert_eq!(kind, FailureKind::Dependencies, "{message}");
        assert!(message.contains(want), "{message}");
        assert!(r.logs.is_empty(), "the program started: {:?}", r.logs);
    }
    rt.shutdown().await;
}

/// The caller's `with_packages` are installed when the runtime is built
/// (a bad one fails there), and every run has them, sandboxed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_packages_are_installed_at_construction() {
    let Some(venv) = datasci_venv() else { return };
    let cache = cache_dir();
    for isolation in [Isolation::Sandbox, Isolation::Process] {
        let rt = runtime_for(&venv, cache.path(), isolation, |c| c.with_packages = vec!["tabulate==0.9.0".into()]);
        assert_eq!(value(&run(&rt, "import tabulate\nreturn tabulate.__version__").await), "\"0.9.0\"");
        rt.shutdown().await;
    }
    let bad = RuntimeConfig {
        venv: Some(venv.clone()),
        cache_dir: Some(cache.path().to_path_buf()),
        with_packages: vec!["pycage-no-such-package-4e1d".into()],
        ..common::config()
    };
    match Runtime::new(bad) {
        Err(e @ RuntimeError::Packages(_)) => {
            let text = e.to_string();
            assert!(text.starts_with("RuntimeConfig::with_packages: installing pycage-no-such-package-4e1d"), "{text}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("an uninstallable requirement was accepted"),
    }
}
