//! Bring your environment: a virtual environment's interpreter means that
//! environment (symlinked, `--copies` and uv-made venvs; `python=` and
//! `venv=`), in both isolations, through the zygote and by exec, with the
//! probe cache shared; numpy, pandas and matplotlib through a venv; the
//! preload (fork safety, thread pools, failures). A program's declared
//! packages are `tests/packages.rs`.
//!
//! The data-science venv comes from `.ci/datasci-deps.sh`
//! (`$PYCAGE_DATASCI_VENV`, default `target/datasci-venv`); without it these
//! tests say so and pass, except under `PYCAGE_REQUIRE_ALL_TESTS=1`, where
//! they fail.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use pycage_runtime::*;

fn require_all() -> bool {
    std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_some()
}

#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
/// The data-science venv, or `None` (failing under
/// `PYCAGE_REQUIRE_ALL_TESTS=1`) when it is not installed.
fn datasci_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    // `bin/python` links to the interpreter the venv was made from, which
    // an unprivileged user may not be able to read (a pyenv under /root):
    // the link is enough here, and such a user only needs `bin/uv`.
    if venv.join("bin/python").symlink_metadata().is_ok() && venv.join("bin/uv").exists() {
        return Some(venv);
    }
    assert!(!require_all(), "the data-science venv is missing at {}: run .ci/datasci-deps.sh", venv.display());
    eprintln!("skipped: no data-science venv at {} (run .ci/datasci-deps.sh)", venv.display());
    None
}

fn base_python() -> PathBuf {
    std::env::var_os("PYCAGE_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("python3"))
}

/// `uv` from the data-science venv or `PATH`.
fn uv() -> Option<PathBuf> {
    if let Some(venv) = datasci_venv() {
        return Some(venv.join("bin/uv"));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("uv")).find(|p| p.exists())
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn site_packages(venv: &Path) -> PathBuf {
    let lib = venv.join("lib");
    let version =
        std::fs::read_dir(&lib).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with("python"));
    lib.join(version.unwrap().file_name()).join("site-packages")
}

/// Opens every directory on the way for the sandbox's uid (a root host's
/// runs have their own).
fn share(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
}

/// A venv of `kind` (`symlinks`, `copies`, `uv`) with a module of its own.
fn make_venv(root: &Path, kind: &str) -> PathBuf {
    let venv = root.join(kind);
    match kind {
        "symlinks" => sh(Command::new(base_python()).args(["-m", "venv", "--without-pip"]).arg(&venv)),
        "copies" => sh(Command::new(base_python()).args(["-m", "venv", "--without-pip", "--copies"]).arg(&venv)),
        "uv" => {
            let python = which(&base_python());
            sh(Command::new(uv().unwrap())
                .args(["venv", "--quiet", "--no-project", "--python"])
                .arg(python)
                .arg(&venv)
                .env("UV_PYTHON_DOWNLOADS", "never"))
        }
        _ => unreachable!(),
    }
    std::fs::write(site_packages(&venv).join("venvmark.py"), format!("WHERE = {kind:?}\n")).unwrap();
    share(&venv);
    venv
}

fn which(python: &Path) -> PathBuf {
    if python.is_absolute() {
        return python.to_path_buf();
    }
    let out = Command::new(python).args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

const VENV_PROGRAM: &str = r#"
import subprocess, sys, venvmark
child = subprocess.run([sys.executable, "-c", "import sys, venvmark; print(sys.prefix, venvmark.WHERE)"],
                       capture_output=True, text=True)
return [sys.prefix, venvmark.WHERE, child.stdout.strip(), child.returncode]
"#;

/// `python = "some/dir/python3"`, relative to the host's working
/// directory, is that file for every spawn mode (the zygote starts in
/// another directory: it could not find it, and `pycage bench --plot
/// target/venv/bin/python` fell back to exec with "could not run").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_interpreter_path_is_read_from_the_hosts_working_directory() {
    // A link in a directory of the test's own, named from the working
    // directory by a path that means nothing from `/`.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::os::unix::fs::symlink(which(&base_python()), dir.path().join("python3")).unwrap();
    let cwd = std::env::current_dir().unwrap();
    let target = dir.path().join("python3");
    let common = cwd.components().zip(target.components()).take_while(|(a, b)| a == b).count();
    let mut relative = PathBuf::new();
    for _ in common..cwd.components().count() {
        relative.push("..");
    }
    relative.extend(target.components().skip(common));
    assert!(relative.is_relative() && std::fs::metadata(&relative).is_ok(), "{}", relative.display());
    assert!(std::fs::metadata(Path::new("/").join(&relative)).is_err(), "{}", relative.display());
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        let rt = Runtime::new(RuntimeConfig {
            python: Some(relative.clone()),
            isolation,
            spawn: SpawnMode::Zygote,
            pool_size: 1,
            ..common::config()
        })
        .unwrap();
        assert_eq!(rt.spawn_mode(), (SpawnMode::Zygote, None), "{isolation:?}");
        let r = run(&rt, "return 1").await;
        assert_eq!(value(&r), "1", "{isolation:?}: {r:?}");
        rt.shutdown().await;
    }
}

/// Issue 21: `python = VENV/bin/python` is that venv, whatever made it,
/// with a probe cache that also holds the base interpreter (the cache used
/// to answer for the venv with the base's, or another venv's, entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_venvs_python_means_that_venv() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let mut kinds = vec!["symlinks", "copies"];
    if uv().is_some() {
        kinds.push("uv");
    } else {
        assert!(!require_all(), "no uv for the uv-made venv: run .ci/datasci-deps.sh");
    }
    let venvs: Vec<PathBuf> = kinds.iter().map(|k| make_venv(root.path(), k)).collect();
    share(root.path());
    // The base first: its entry must not answer for any venv.
    let base = Runtime::new(RuntimeConfig {
        python: Some(base_python()),
        cache_dir: Some(cache.clone()),
        spawn: SpawnMode::Exec,
        ..common::config()
    })
    .unwrap();
    assert_eq!(base.interpreter().venv, None);
    base.shutdown().await;
    let mut failures = Vec::new();
    for (kind, venv) in kinds.iter().zip(&venvs) {
        for isolation in [Isolation::Process, Isolation::Sandbox] {
            for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
                for by_venv in [false, true] {
                    let config = RuntimeConfig {
                        python: (!by_venv).then(|| venv.join("bin/python")),
                        venv: by_venv.then(|| venv.clone()),
                        cache_dir: Some(cache.clone()),
                        isolation,
                        spawn,
                        pool_size: 1,
                        ..RuntimeConfig::default()
                    };
                    let rt = Runtime::new(config).unwrap();
                    assert_eq!(rt.interpreter().venv.as_deref(), Some(venv.as_path()), "{kind}");
                    assert_eq!(rt.interpreter().executable, venv.join("bin/python"), "{kind}");
                    let r = run(&rt, VENV_PROGRAM).await;
                    let want = format!("[{:?},{kind:?},\"{} {kind}\",0]", venv.display().to_string(), venv.display());
                    if r.error.is_some() || value(&r) != want {
                        failures.push(format!("{kind} {isolation:?} {spawn:?} venv={by_venv}: {r:?}"));
                    }
                    rt.shutdown().await;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A venv's probe is kept under its own path, beside the base's.
    let entries = std::fs::read_dir(&cache).unwrap().flatten();
    let probes = entries.filter(|e| e.file_name().to_string_lossy().starts_with("interpreter-")).count();
    assert!(probes > kinds.len(), "{probes} probe entries");
}

#[test]
fn a_venvs_python_means_that_venv_as_an_unprivileged_user() {
    common::rerun_as_nobody("a_venvs_python_means_that_venv");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_venv_that_is_not_one_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = |venv: &Path| match Runtime::new(RuntimeConfig { venv: Some(venv.to_path_buf()), ..common::config() }) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{} was accepted as a venv", venv.display()),
    };
    let missing = err(&dir.path().join("nope"));
    assert!(missing.contains("no such directory"), "{missing}");
    let plain = err(dir.path());
    assert!(plain.contains("not a virtual environment (it has no pyvenv.cfg)"), "{plain}");
    assert!(plain.starts_with("RuntimeConfig::venv "), "{plain}");
}

const STACK_PROGRAM: &str = r#"
import os
import certifi, matplotlib, numpy as np, pandas as pd
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.arange(12.0).reshape(3, 4)
t = pd.date_range("2024-03-30", periods=3, freq="D", tz="Europe/Paris")
fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
ax.plot([1, 3, 2])
ax.set_title("pycage")
fig.savefig("plot.png")
with open("plot.png", "rb") as f:
    head = f.read(24)
return {
    "matmul": float((a @ a.T).sum()),
    "offsets": [str(x.utcoffset()) for x in t],
    "png": head[:8].hex(),
    "size": [int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")],
    "certifi": os.path.getsize(certifi.where()) > 10000,
    "mplconfig": matplotlib.get_configdir() == os.environ["MPLCONFIGDIR"],
}
"#;

/// Issue 18: numpy's BLAS, pandas' time zones, matplotlib (its font cache
/// in the run's own place) and certifi's bundle, through `venv=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numpy_pandas_and_matplotlib_through_a_venv() {
    let Some(venv) = datasci_venv() else { return };
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        let rt = Runtime::new(RuntimeConfig {
            venv: Some(venv.clone()),
            isolation,
            pool_size: 1,
            wall_time: std::time::Duration::from_secs(120),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let r = run(&rt, STACK_PROGRAM).await;
        assert_eq!(
            value(&r),
            r#"{"matmul":1134.0,"offsets":["1:00:00","1:00:00","2:00:00"],"png":"89504e470d0a1a0a","size":[640,480],"certifi":true,"mplconfig":true}"#,
            "{isolation:?}"
        );
        rt.shutdown().await;
    }
}

const PRELOADED: &str = r#"
import os, sys
preloaded = "numpy" in sys.modules and "pandas" in sys.modules
import numpy as np
from threadpoolctl import threadpool_info
pools = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
return {
    "preloaded": preloaded,
    "sum": int(np.arange(10).sum()),
    "rand": np.random.rand(3).tolist(),
    "tasks": len(os.listdir("/proc/self/task")),
    "openblas": pools,
    "env": [os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PYCAGE_PRELOAD")],
}
"#;

fn preloading(venv: &Path, isolation: Isolation, cache: &Path) -> Runtime {
    let rt = Runtime::new(RuntimeConfig {
        venv: Some(venv.to_path_buf()),
        preload: vec!["numpy".into(), "pandas".into()],
        cache_dir: Some(cache.to_path_buf()),
        isolation,
        pool_size: 2,
        wall_time: std::time::Duration::from_secs(120),
        ..RuntimeConfig::default()
    })
    .unwrap();
    assert_eq!(rt.spawn_mode(), (SpawnMode::Zygote, None));
    rt
}

/// Issue 18: numpy and pandas imported in the zygote work in every child,
/// two after each other and two at once; each child draws its own random
/// numbers; the BLAS pool is one thread (the zygote has one thread, and so
/// does a run), and a run may raise it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preloaded_numpy_and_pandas_are_fork_safe() {
    let Some(venv) = datasci_venv() else { return };
    let cache = tempfile::tempdir().unwrap();
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        let rt = preloading(&venv, isolation, cache.path());
        let mut results = vec![run(&rt, PRELOADED).await, run(&rt, PRELOADED).await];
        let (a, b) = tokio::join!(run(&rt, PRELOADED), run(&rt, PRELOADED));
        results.extend([a, b]);
        let mut draws = std::collections::HashSet::new();
        for r in &results {
            let v = r.value.as_ref().unwrap_or_else(|| panic!("{isolation:?}: {r:?}")).root();
            assert_eq!(v.get("preloaded").unwrap().as_bool(), Some(true), "{isolation:?} {r:?}");
            assert_eq!(v.get("sum").unwrap().as_number().unwrap().as_u64(), Some(45));
            assert_eq!(v.get("tasks").unwrap().as_number().unwrap().as_u64(), Some(1), "{r:?}");
            assert_eq!(v.get("openblas").unwrap().to_owned().to_canonical_string(), "[1]", "{r:?}");
            assert_eq!(v.get("env").unwrap().to_owned().to_canonical_string(), "[null,null,null]", "{r:?}");
            draws.insert(v.get("rand").unwrap().to_owned().to_canonical_string());
        }
        assert_eq!(draws.len(), 4, "children share numpy's random state: {draws:?}");
        let zygote = rt.zygote_pid().unwrap();
        let tasks = std::fs::read_dir(format!("/proc/{zygote}/task")).unwrap().count();
        assert_eq!(tasks, 1, "the preloading zygote has threads");
        let raised = run(
            &rt,
            "import os, numpy as np\nfrom threadpoolctl import threadpool_limits, threadpool_info\n\
             threadpool_limits(2)\nm = np.ones((400, 400))\nfor _ in range(3): (m @ m).sum()\n\
             return [p['num_threads'] for p in threadpool_info() if p['internal_api'] == 'openblas']",
        )
        .await;
        assert_eq!(value(&raised), "[2]", "{isolation:?}");
        rt.shutdown().await;
    }
}

/// Issue 18: an exec'd child imports the preload too (the same modules, the
/// same one-thread pools), so a program sees the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_children_preload_too() {
    let Some(venv) = datasci_venv() else { return };
    let rt = Runtime::new(RuntimeConfig {
        venv: Some(venv.clone()),
        preload: vec!["numpy".into()],
        spawn: SpawnMode::Exec,
        ..common::config()
    })
    .unwrap();
    let r = run(&rt, PRELOADED.replace("and \"pandas\" in sys.modules", "").as_str()).await;
    let v = r.value.as_ref().unwrap_or_else(|| panic!("{r:?}")).root();
    assert_eq!(v.get("preloaded").unwrap().as_bool(), Some(true), "{r:?}");
    assert_eq!(v.get("openblas").unwrap().to_owned().to_canonical_string(), "[1]", "{r:?}");
    assert_eq!(v.get("env").unwrap().to_owned().to_canonical_string(), "[null,null,null]", "{r:?}");
    rt.shutdown().await;
}

/// Issue 18: a preload that cannot work is refused when the runtime is
/// built, naming the module and why: one that is missing, one that raises,
/// one that leaves a thread running (a zygote cannot fork then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preload_that_fails_names_the_module_and_why() {
    let root = tempfile::tempdir().unwrap();
    let venv = make_venv(root.path(), "symlinks");
    let site = site_packages(&venv);
    std::fs::write(site.join("raiser.py"), "raise ValueError('not on this machine')\n").unwrap();
    std::fs::write(
        site.join("spinner.py"),
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
    )
    .unwrap();
    let cache = root.path().join("cache");
    let refuse = |module: &str| {
        let config = RuntimeConfig {
            venv: Some(venv.clone()),
            preload: vec!["json".into(), module.into()],
            cache_dir: Some(cache.clone()),
            ..common::config()
        };
        match Runtime::new(config) {
            Err(RuntimeError::Preload(failure)) => {
                let text = RuntimeError::Preload(failure.clone()).to_string();
                (failure.module, text)
            }
            Err(e) => panic!("{module}: {e}"),
            Ok(_) => panic!("{module} was accepted"),
        }
    };
    let (module, message) = refuse("no_such_module_xyz");
    assert_eq!(module, "no_such_module_xyz");
    assert_eq!(
        message,
        "RuntimeConfig::preload no_such_module_xyz: ModuleNotFoundError: No module named 'no_such_module_xyz' \
         (install it into the interpreter's environment, or give one that has it with RuntimeConfig::venv)"
    );
    let (module, message) = refuse("raiser");
    assert_eq!(module, "raiser");
    assert!(message.ends_with("raiser: ValueError: not on this machine"), "{message}");
    let (module, message) = refuse("spinner");
    assert_eq!(module, "json, spinner");
    assert!(message.contains("left 2 threads running"), "{message}");
    // A failed check is never cached: fixed, the next runtime starts.
    std::fs::write(site.join("raiser.py"), "VALUE = 1\n").unwrap();
    let fixed = Runtime::new(RuntimeConfig {
        venv: Some(venv.clone()),
        preload: vec!["raiser".into()],
        cache_dir: Some(cache.clone()),
        ..common::config()
    })
    .unwrap();
    assert_eq!(value(&run(&fixed, "import sys\nreturn sys.modules['raiser'].VALUE").await), "1");
    fixed.shutdown().await;
    // The cached check watches site-packages: with the module gone, the
    // next runtime checks again and refuses.
    std::fs::remove_file(site.join("raiser.py")).unwrap();
    let (module, _) = refuse("raiser");
    assert_eq!(module, "raiser");
}

/// Issue 41: a venv's start-up code (`.pth` code lines, `sitecustomize`)
/// never runs outside a run's sandbox: not in the interpreter probe (on
/// the host, with pycage's environment), not in the zygote (uid 0 of
/// pycage's user namespace, or root). Its `.pth` path lines still count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_venvs_start_up_code_never_runs_outside_a_sandbox() {
    if !pycage_sandbox::probe().missing().is_empty() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    share(root.path());
    let venv = make_venv(root.path(), "symlinks");
    let site = site_packages(&venv);
    let marks = root.path().join("marks");
    let mark = |what: &str| {
        format!("import os; open({:?}, 'a').write('{what} ' + str(os.getpid()) + chr(10))", marks.to_str().unwrap())
    };
    std::fs::write(site.join("evil.pth"), format!("{}\n", mark("pth"))).unwrap();
    std::fs::write(site.join("sitecustomize.py"), format!("{}\n", mark("sitecustomize"))).unwrap();
    let extra = root.path().join("extra");
    std::fs::create_dir(&extra).unwrap();
    std::fs::write(extra.join("extramod.py"), "WHERE = 'extra'\n").unwrap();
    std::fs::write(site.join("extra.pth"), format!("# a comment\n{}\n", extra.display())).unwrap();
    share(root.path());
    let cache = tempfile::tempdir().unwrap();
    for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
        let rt = Runtime::new(RuntimeConfig {
            venv: Some(venv.clone()),
            spawn,
            pool_size: 1,
            cache_dir: Some(cache.path().to_path_buf()),
            allow_read: vec![extra.clone()],
            ..RuntimeConfig::default()
        })
        .unwrap();
        let r = run(&rt, "import extramod\nreturn extramod.WHERE").await;
        assert_eq!(value(&r), "\"extra\"", "{spawn:?}: a .pth path line no longer counts");
        rt.shutdown().await;
        let ran = std::fs::read_to_string(&marks).unwrap_or_default();
        assert!(ran.is_empty(), "{spawn:?}: the venv's start-up code ran on the host: {ran}");
    }
}
