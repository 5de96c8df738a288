#![allow(dead_code)]
use pycage_runtime::*;

pub fn config() -> RuntimeConfig {
    RuntimeConfig { isolation: Isolation::Process, ..RuntimeConfig::default() }
}

pub fn runtime() -> Runtime {
    Runtime::new(config()).unwrap()
}

pub fn runtime_with(f: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let mut c = config();
    f(&mut c);
    Runtime::new(c).unwrap()
}

pub async fn run(rt: &Runtime, program: &str) -> RunResult {
    rt.run(RunRequest::new(program)).await.unwrap()
}

pub async fn run_ns(rt: &Runtime, program: &str, ns: Vec<Namespace>) -> RunResult {
    let mut req = RunRequest::new(program);
    req.bindings = ns;
    rt.run(req).await.unwrap()
}

pub fn value(r: &RunResult) -> String {
    assert!(r.error.is_none(), "run failed: {:?}", r);
    r.value.as_ref().map(|v| v.to_canonical_string()).unwrap_or_else(|| "<none>".into())
}

pub fn failure(r: &RunResult) -> (FailureKind, &str) {
    let e = r.error.as_ref().unwrap_or_else(|| panic!("expected a failure, got {:?}", r));
    assert!(r.value.is_none());
    (e.kind, e.message.as_str())
}

pub fn echo_ns() -> Namespace {
    Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }))
}

/// Makes this test process the subreaper of everything it starts: a
/// process a run leaves behind (an orphan, whatever session or group it
/// moved to) is re-parented to this process, so [`live_children`] finds it
/// without looking at any process this test did not start.
pub fn become_subreaper() {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).expect("PR_SET_CHILD_SUBREAPER");
}

/// This process's live (not zombie) children as `/proc/<pid>/stat` lines,
/// except those `skip` rejects (given each child's `/proc` directory).
///
/// As a subreaper, this process must also reap what it adopts: a zombie
/// of a sandbox's PID namespace (a zygote child's program, orphaned when
/// the child was killed) keeps that namespace's init from exiting until
/// it is reaped. Only zombies of nested PID namespaces are reaped here:
/// the runtime waits for its own children, all in this namespace, and so
/// do other tests.
pub fn live_children(skip: impl Fn(&std::path::Path) -> bool) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let mut after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("").split_whitespace();
        let (state, parent) = (after.next(), after.next());
        if parent != Some(me.as_str()) {
            continue;
        }
        if state == Some("Z") {
            // An adopted orphan that died is dead, not a leftover.
            reap_if_nested(&e.path());
        } else if !skip(&e.path()) {
            out.push(stat);
        }
    }
    out
}

fn reap_if_nested(proc_dir: &std::path::Path) {
    let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
    let nested =
        status.lines().find_map(|l| l.strip_prefix("NSpid:")).is_some_and(|ids| ids.split_whitespace().count() > 1);
    let pid = proc_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .and_then(rustix::process::Pid::from_raw);
    if let (true, Some(pid)) = (nested, pid) {
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
    }
}

/// Runs this test binary's test `name` again as `nobody` (uid and gid
/// 65534, no groups), with the system interpreter (the default `python3`
/// may live under `/root`, which nobody can read), and asserts it passed.
/// Without root it cannot switch users: it returns, and fails under
/// `PYCAGE_REQUIRE_ALL_TESTS` (CI runs as root and requires it). The
/// re-run's stderr (figures some tests print) is passed on.
#[allow(clippy::print_stderr)]
pub fn rerun_as_nobody(name: &str) {
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env("PYCAGE_TEST_PYTHON", "/usr/bin/python3")
        .env("TMPDIR", "/tmp")
        .env("HOME", "/tmp")
        .output()
        .expect("setpriv (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "as nobody:\n{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}

/// Starts `n` runs that log `up` and then sleep for an hour, and returns
/// once each has logged: their results, once something ends them.
pub async fn sleeping_runs(rt: &Runtime, n: usize) -> Vec<tokio::task::JoinHandle<RunResult>> {
    let (up_tx, mut up_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut runs = Vec::new();
    for _ in 0..n {
        let rt = rt.clone();
        let up = up_tx.clone();
        runs.push(tokio::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::channel(64);
            let forward = tokio::spawn(async move {
                while let Some(ev) = rx.recv().await {
                    if matches!(ev, RunEvent::Log(_)) {
                        let _ = up.send(());
                    }
                }
            });
            let r = rt
                .run_with_events(RunRequest::new("print('up', flush=True)\nimport time\ntime.sleep(3600)"), tx)
                .await
                .unwrap();
            let _ = forward.await;
            r
        }));
    }
    for _ in 0..n {
        tokio::time::timeout(std::time::Duration::from_secs(60), up_rx.recv()).await.unwrap().unwrap();
    }
    runs
}

/// The sandbox crate's `pycage-shell-helper` program, which `cargo test
/// --workspace` builds beside this test (target/<profile>/). A test run of
/// this crate alone must build it first.
pub fn shell_helper_program() -> std::ffi::OsString {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>/pycage-shell-helper
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("pycage-shell-helper");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p pycage-sandbox --bin pycage-shell-helper` \
         (cargo test --workspace does)",
        path.display()
    );
    path.into_os_string()
}
