//! One confinement program, two executors: a run's process must see the
//! same of itself whether it was exec'd (the sandbox's steps run in Rust
//! after fork) or forked by the zygote (the same steps, sent to the zygote
//! and run by its table of one-operation functions). The program reports
//! `/proc/self/status` (no_new_privs, seccomp, capabilities, ids),
//! `/proc/self/limits`, its uid/gid maps, its Landlock state (by what it
//! is refused), its open descriptors and its environment; both spawn modes must agree
//! exactly, in both isolations, as root and as `nobody`. A sandboxed
//! zygote child joins through the native library (`pycage-join`) unless
//! `PYCAGE_NATIVE_JOIN=0`, and then through the Python steps: both are
//! compared with the exec path, and each run says which one it took.
#![allow(clippy::unwrap_used, clippy::panic)]
mod common;

use pycage_runtime::*;

const REPORT: &str = r#"
import os
keep = ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Uid", "Gid", "Groups")
status = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    if key in keep:
        status[key] = value.split()
limits = [line.rstrip() for line in open("/proc/self/limits")]
maps = [open("/proc/self/uid_map").read().split(), open("/proc/self/gid_map").read().split()]
# Landlock: /proc is readable only; a process may write its own comm
# wherever Landlock does not forbid it.
try:
    with open("/proc/self/comm", "w") as f:
        f.write("probe")
    landlock = "comm writable"
except OSError as e:
    landlock = type(e).__name__
fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
cgroup = open("/proc/self/cgroup").read().split()
# Each hierarchy's path is its namespace's root: no host path shows.
cgroup_rooted = bool(cgroup) and all(line.endswith(":/") for line in cgroup)
# PR_GET_PDEATHSIG (2): the death signal armed after the last credential change.
import ctypes
signal = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(2, ctypes.byref(signal), 0, 0, 0)
# The environment (a run's own directory, where it has one, as <home>).
home = os.environ.get("HOME", "")
env = {k: v.replace(home, "<home>") if home else v for k, v in sorted(os.environ.items())}
return {"status": status, "limits": limits, "maps": maps, "landlock": landlock, "fds": fds, "cgroup": cgroup, "cgroupRooted": cgroup_rooted, "deathSignal": signal.value, "env": env}
"#;

async fn report(isolation: Isolation, spawn: SpawnMode) -> String {
    let python = std::env::var_os("PYCAGE_TEST_PYTHON").map(std::path::PathBuf::from);
    let rt = Runtime::new(RuntimeConfig { isolation, spawn, python, ..RuntimeConfig::default() }).unwrap();
    assert_eq!(rt.spawn_mode(), (spawn, None));
    let r = rt.run(RunRequest::new(REPORT)).await.unwrap();
    assert!(r.error.is_none(), "{isolation:?}/{spawn:?}: {r:?}");
    if (isolation, spawn) == (Isolation::Sandbox, SpawnMode::Zygote) {
        let joined = rt.run(RunRequest::new(JOINED)).await.unwrap();
        let python_join = std::env::var_os("PYCAGE_NATIVE_JOIN").is_some_and(|v| v == "0");
        let expected = if python_join { "\"python\"" } else { "\"native\"" };
        let joined = joined.value.map(|v| v.to_canonical_string());
        assert_eq!(joined.as_deref(), Some(expected), "how the zygote's child joined its sandbox");
    }
    rt.shutdown().await;
    r.value.unwrap().to_canonical_string()
}

/// How a zygote's sandboxed child joined its sandbox (`pycage.confine`).
const JOINED: &str = "import sys\nreturn sys.modules['pycage.confine']._joined";

#[test]
fn both_spawn_modes_confine_alike() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut isolations = vec![Isolation::Process];
    if pycage_sandbox::probe().missing().is_empty() {
        isolations.push(Isolation::Sandbox);
    } else {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
    }
    for isolation in isolations {
        let exec = rt.block_on(report(isolation, SpawnMode::Exec));
        let zygote = rt.block_on(report(isolation, SpawnMode::Zygote));
        assert_eq!(exec, zygote, "{isolation:?}: exec and zygote runs differ");
        if isolation == Isolation::Sandbox {
            // What both must be: confined.
            for needle in [
                r#""NoNewPrivs":["1"]"#,
                r#""Seccomp":["2"]"#,
                r#""Seccomp_filters":["1"]"#,
                r#""CapEff":["0000000000000000"]"#,
                r#""CapBnd":["0000000000000000"]"#,
                r#""landlock":"PermissionError""#,
                r#""fds":[0,1,2,3,4]"#,
                r#""cgroupRooted":true"#,
                r#""deathSignal":9"#,
            ] {
                assert!(exec.contains(needle), "sandboxed runs lack {needle}: {exec}");
            }
        }
    }
}

/// The same comparison with the zygote's children joining through the
/// Python steps (`PYCAGE_NATIVE_JOIN=0`, which the runtime passes on to
/// its zygotes): the fallback where the library is missing or refused.
#[test]
fn both_spawn_modes_confine_alike_with_the_python_join() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "both_spawn_modes_confine_alike", "--nocapture"])
        .env("PYCAGE_NATIVE_JOIN", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "with the Python join:\n{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}

/// As root, the same comparison as `nobody` with the system interpreter.
#[test]
fn both_spawn_modes_confine_alike_as_an_unprivileged_user() {
    common::rerun_as_nobody("both_spawn_modes_confine_alike");
}
