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

/// Processes anywhere whose command line contains `marker`.
pub fn processes_with_marker(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("cargo") {
                out.push(cmd);
            }
        }
    }
    out
}
