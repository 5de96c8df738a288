//! Files in and out of runs in both isolations, per-run host uids, and the
//! watchdog against real process trees.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pycage_runtime::watchdog::{self, Budget, Scope};
use pycage_runtime::*;

fn config(isolation: Isolation, temp: &Path) -> RuntimeConfig {
    RuntimeConfig {
        isolation,
        run_dir_parent: Some(temp.to_path_buf()),
        python: std::env::var_os("PYCAGE_TEST_PYTHON").map(PathBuf::from),
        max_output_bytes: 1 << 20,
        ..RuntimeConfig::default()
    }
}

const FILES_PROGRAM: &str = r#"
import os
out = {}
out["cwd_listing"] = sorted(os.listdir("."))
out["csv"] = open("table.csv").read()
out["nested"] = open("data/sub/x.txt").read()
for label, path in (("write-input", "table.csv"), ("write-in-input-dir", "data/new.txt")):
    try:
        open(path, "w").write("changed")
        out[label] = "written"
    except OSError as e:
        out[label] = type(e).__name__
os.makedirs("out/reports", exist_ok=True)
open("out/summary.txt", "w").write("3 rows\n")
open("out/reports/r1.json", "w").write('{"ok": true}')
open("out/too-big.bin", "wb").write(b"x" * (2 << 20))
os.symlink("/etc/passwd", "out/passwd-link")
os.mkfifo("out/fifo")
return out
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_in_and_outputs_out_in_both_isolations() {
    let inputs = tempfile::tempdir().unwrap();
    std::fs::write(inputs.path().join("table.csv"), "a,b\n1,2\n").unwrap();
    std::fs::create_dir_all(inputs.path().join("data/sub")).unwrap();
    std::fs::write(inputs.path().join("data/sub/x.txt"), "nested").unwrap();
    for dir in [inputs.path().to_path_buf(), inputs.path().join("data"), inputs.path().join("data/sub")] {
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        let temp = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let rt = Runtime::new(config(isolation, temp.path())).unwrap();
        let request = RunRequest::new(FILES_PROGRAM)
            .with_input(inputs.path().join("table.csv"))
            .with_input(inputs.path().join("data"))
            .with_output_dir(dest.path().join("results"));
        let r = rt.run(request).await.unwrap();
        let value = common::value(&r);
        let readonly = match isolation {
            // A copy, read-only by mode: root ignores modes (process
            // isolation contains accidents, not attacks); the caller's
            // files are never touched either way.
            Isolation::Process if rustix::process::geteuid().is_root() => "written",
            Isolation::Process => "PermissionError",
            // Small inputs: a copy in the pooled run's own tmpfs, read-only
            // by mode, owned by the host's uid (the run has no capability
            // to ignore modes).
            Isolation::Sandbox => "PermissionError",
        };
        assert_eq!(
            value,
            format!(
                r#"{{"cwd_listing":["data","out","table.csv"],"csv":"a,b\n1,2\n","nested":"nested","write-input":"{readonly}","write-in-input-dir":"{readonly}"}}"#
            )
            .replace('\n', "\\n"),
            "{isolation:?}"
        );
        let output = r.output.clone().unwrap();
        let mut files: Vec<(String, u64)> =
            output.files.iter().map(|f| (f.path.display().to_string(), f.bytes)).collect();
        files.sort();
        assert_eq!(files, [("reports/r1.json".to_string(), 12), ("summary.txt".to_string(), 7)], "{isolation:?}");
        let mut skipped: Vec<String> =
            output.skipped.iter().map(|s| format!("{}: {}", s.path.display(), s.reason)).collect();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                "fifo: a FIFO: not copied".to_string(),
                "passwd-link: a symlink: never followed or copied".to_string(),
                "too-big.bin: 2097152 bytes would pass the output limit of 1048576 bytes: not copied".to_string(),
            ],
            "{isolation:?}"
        );
        assert!(output.truncated);
        assert_eq!(std::fs::read_to_string(dest.path().join("results/summary.txt")).unwrap(), "3 rows\n");
        assert!(!dest.path().join("results/passwd-link").exists());
        // The inputs are untouched.
        assert_eq!(std::fs::read_to_string(inputs.path().join("table.csv")).unwrap(), "a,b\n1,2\n");
        assert!(!inputs.path().join("data/new.txt").exists());
        // In JSON too.
        assert!(r.to_json().to_canonical_string().contains(r#""output":{"files":["#));
        assert_eq!(rt.cleanup_failures(), Vec::new());
        rt.shutdown().await;
    }
}

/// Issue 43: a sandboxed run with small inputs stays in the pool (a forked
/// child: the zygote's `-S`), with its inputs copied into its own tmpfs;
/// big inputs get a sandbox of their own, shown by a read-only mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_inputs_keep_a_sandboxed_run_in_the_pool() {
    let inputs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(inputs.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(inputs.path().join("small.txt"), "four").unwrap();
    std::fs::write(inputs.path().join("big.bin"), vec![7u8; 20 << 20]).unwrap();
    let temp = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig { pool_size: 1, ..config(Isolation::Sandbox, temp.path()) }).unwrap();
    let program = |name: &str| {
        format!(
            "import os, sys\ntry:\n    open({name:?}, 'a').write('x')\n    wrote = 'written'\n\
             except OSError:\n    wrote = 'refused'\n\
             return [sys.flags.no_site, os.path.getsize({name:?}), wrote]"
        )
    };
    let small =
        rt.run(RunRequest::new(program("small.txt")).with_input(inputs.path().join("small.txt"))).await.unwrap();
    assert_eq!(common::value(&small), r#"[1,4,"refused"]"#, "pooled (-S), a read-only copy");
    let big = rt.run(RunRequest::new(program("big.bin")).with_input(inputs.path().join("big.bin"))).await.unwrap();
    assert_eq!(common::value(&big), r#"[0,20971520,"refused"]"#, "exec'd (site ran), a read-only mount");
    assert_eq!(std::fs::read_to_string(inputs.path().join("small.txt")).unwrap(), "four");
    // An input only its owner may read (an MCP client's files, kept 0700):
    // copied all the same, as the run's uid on a root host.
    let private = tempfile::tempdir().unwrap();
    std::fs::write(private.path().join("own.txt"), "mine").unwrap();
    std::fs::set_permissions(private.path().join("own.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let own = rt.run(RunRequest::new(program("own.txt")).with_input(private.path().join("own.txt"))).await.unwrap();
    assert_eq!(common::value(&own), r#"[1,4,"refused"]"#, "a private input, pooled");
    rt.shutdown().await;
}

#[test]
fn small_inputs_keep_a_sandboxed_run_in_the_pool_as_an_unprivileged_user() {
    common::rerun_as_nobody("small_inputs_keep_a_sandboxed_run_in_the_pool");
}

/// A run that collects no output starts in an empty working directory, as
/// under plain python3 (it had an empty `out/`), whether it was forked,
/// exec'd, sandboxed or a session's cell; a run that collects output finds
/// `out/` there, empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_exists_only_when_output_is_collected() {
    const LISTING: &str = "import os\nreturn sorted(os.listdir('.'))";
    for isolation in [Isolation::Process, Isolation::Sandbox] {
        for spawn in [SpawnMode::Zygote, SpawnMode::Exec] {
            let temp = tempfile::tempdir().unwrap();
            let dest = tempfile::tempdir().unwrap();
            let rt = Runtime::new(RuntimeConfig { spawn, ..config(isolation, temp.path()) }).unwrap();
            let what = format!("{isolation:?}/{:?}", rt.spawn_mode().0);
            let bare = rt.run(RunRequest::new(LISTING)).await.unwrap();
            assert_eq!(common::value(&bare), "[]", "{what}");
            let made = rt.run(RunRequest::new("import os\nos.mkdir('out')\nreturn 1")).await.unwrap();
            assert_eq!(common::value(&made), "1", "{what}: os.mkdir('out') as under python3");
            let collected = rt.run(RunRequest::new(LISTING).with_output_dir(dest.path().join("r"))).await.unwrap();
            assert_eq!(common::value(&collected), r#"["out"]"#, "{what}");
            let session = rt.session(SessionOptions::default()).unwrap();
            assert_eq!(common::value(&session.run(LISTING).await.unwrap()), "[]", "{what}: session");
            session.close().await;
            rt.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_misuse() {
    let temp = tempfile::tempdir().unwrap();
    let rt = Runtime::new(config(Isolation::Process, temp.path())).unwrap();
    let missing = rt.run(RunRequest::new("return 1").with_input(temp.path().join("missing"))).await;
    assert!(matches!(missing, Err(MisuseError::Input(ref m)) if m.contains("missing")), "{missing:?}");
    std::fs::create_dir(temp.path().join("out")).unwrap();
    let reserved = rt.run(RunRequest::new("return 1").with_input(temp.path().join("out"))).await;
    assert!(matches!(reserved, Err(MisuseError::Input(ref m)) if m.contains("output directory")), "{reserved:?}");
    rt.shutdown().await;
}

/// Host uid of the process whose command line carries `marker`, once it runs.
fn uid_of_marked(marker: &str) -> u32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmd.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
                let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
                if let Some(uid) = status.lines().find_map(|l| l.strip_prefix("Uid:")) {
                    return uid.split_whitespace().next().unwrap().parse().unwrap();
                }
            }
        }
        assert!(std::time::Instant::now() < deadline, "{marker} never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// On a root host, concurrent runs of different runtimes (as of different
/// pycage processes: each has its own counter) get different host uids,
/// held by leases. Without root, every run is the caller's uid by design.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runtimes_lease_distinct_uids() {
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let lease_dir = temp.path().join("uids");
    let mut tasks = Vec::new();
    let mut markers = Vec::new();
    for i in 0..3 {
        let mut c = config(Isolation::Sandbox, temp.path());
        // A three-uid range: three concurrent runs take all of it.
        c.sandbox_uid_base = 3_200_000;
        c.sandbox_uid_count = 3;
        c.uid_lease_dir = Some(lease_dir.clone());
        // Pooled sandboxed children hold their leases while they wait: with
        // three uids in all, none may wait here. Each run holds its uid for
        // 8 s: long enough to be seen on a loaded machine.
        c.pool_size = 0;
        let rt = Runtime::new(c).unwrap();
        let marker = format!("40.{}{i}", std::process::id());
        let program =
            format!("import subprocess, time\np = subprocess.Popen(['sleep', '{marker}'])\ntime.sleep(8)\np.kill()\nreturn 'ok'");
        markers.push(marker);
        tasks.push(tokio::spawn(async move {
            let r = rt.run(RunRequest::new(program)).await.unwrap();
            rt.shutdown().await;
            r
        }));
    }
    let uids: Vec<u32> = markers.iter().map(|m| uid_of_marked(m)).collect();
    for task in tasks {
        assert_eq!(common::value(&task.await.unwrap()), "\"ok\"");
    }
    let mut distinct = uids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{uids:?}");
    assert!(uids.iter().all(|u| (3_200_000..3_200_003).contains(u)), "{uids:?}");
}

/// The watchdog finds a process tree and sums it: four processes, the
/// memory each child touched, CPU spent; processes that exit mid-life
/// are skipped, never an error.
#[test]
fn the_watchdog_sums_a_real_process_tree() {
    let mut child = std::process::Command::new(std::env::var_os("PYCAGE_TEST_PYTHON").unwrap_or("python3".into()))
        .args([
            "-I",
            "-c",
            "import os, sys, time
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        block = bytearray(50 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        n = 0
        for k in range(3_000_000):
            n += k
        print('ready', flush=True)
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
time.sleep(60)",
        ])
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
    }
    let root = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let usage = watchdog::sample(Scope::Descendants { root });
    assert_eq!(usage.processes, 4, "{usage:?}");
    assert!(usage.memory_bytes >= 150 << 20, "{usage:?}");
    assert!(usage.cpu > Duration::ZERO, "{usage:?}");
    assert!(!usage.truncated);
    // The CPU-only sample (a session's run edges) counts the same CPU: the
    // tree is asleep, so at most a clock tick (10 ms) or two apart.
    let cpu = watchdog::sample_cpu(Scope::Descendants { root }, &watchdog::ScanCache::default());
    assert!(cpu >= usage.cpu && cpu <= usage.cpu + Duration::from_millis(20), "{cpu:?} against {usage:?}");
    let budget = Budget { cpu: Duration::from_secs(3600), memory_bytes: 100 << 20 };
    assert!(matches!(usage.check(&budget), Some(watchdog::Exceeded::Memory { .. })));
    // SAFETY: signalling the process group this test created.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) }, 0);
    child.wait().unwrap();
    // The root is gone and reaped; its orphans may still be dying: nothing
    // of this tree is found, and nothing fails.
    assert_eq!(watchdog::sample(Scope::Descendants { root }).processes, 0);
}
