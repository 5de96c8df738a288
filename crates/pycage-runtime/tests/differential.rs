//! Differential: a program run by pycage and the same program run by plain
//! CPython (`python3 -I prog.py`, the runtime's own interpreter) compute the
//! same values, whichever way the child was started (forked from the zygote,
//! exec'd, a session's cell).
//!
//! Each program leaves its answer in `result`; pycage returns it as the
//! run's value, plain CPython prints it as JSON.
mod common;

use common::*;
use pycage_runtime::*;

/// Programs whose answer must not depend on pycage: (name, program, the
/// difference allowed). CPython's own depth at a `RecursionError` moves by
/// one with the interpreter's warm state (the same recursion twice in one
/// process can stop at 998, then 999), so depths may differ by one; the
/// child's own frames, uncompensated, took 5 (exec) to 12 (zygote) levels.
const PROGRAMS: &[(&str, &str, i64)] = &[
    (
        // The int digit limit is the interpreter's: pycage lifts it only
        // around its own encoding and decoding.
        "int digit limit",
        "import sys\n\
         try:\n    str(10 ** 6000)\n    converted = 'no error'\nexcept ValueError as e:\n    converted = type(e).__name__\n\
         try:\n    int('7' * 5000)\n    parsed = 'no error'\nexcept ValueError as e:\n    parsed = type(e).__name__\n\
         result = [converted, parsed, sys.get_int_max_str_digits()]",
        0,
    ),
    (
        // A fresh working directory is empty (there is no `out/` unless
        // the request collects one).
        "fresh working directory",
        "import os\nresult = sorted(os.listdir('.'))",
        0,
    ),
    (
        // The depth a program can recurse to from its top level.
        "recursion depth",
        "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\n\
         result = f(0)",
        1,
    ),
    (
        "recursion depth in a function",
        "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\n\
         def main():\n    return f(0)\n\
         result = main()",
        1,
    ),
];

fn plain_python(python: &std::path::Path, program: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prog.py");
    std::fs::write(&path, format!("{program}\nimport json\nprint(json.dumps(result, separators=(',', ':')))\n"))
        .unwrap();
    // Started in an empty directory of its own, as a run is.
    let cwd = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(python).arg("-I").arg(&path).current_dir(cwd.path()).output().unwrap();
    assert!(out.status.success(), "plain python failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim_end().to_string()
}

#[track_caller]
fn assert_same(got: &str, want: &str, slack: i64, what: &str) {
    if slack == 0 {
        assert_eq!(got, want, "{what} differs from plain CPython");
    } else {
        let (g, w): (i64, i64) = (got.parse().unwrap(), want.parse().unwrap());
        assert!((g - w).abs() <= slack, "{what}: {g} under pycage, {w} under plain CPython");
    }
}

async fn compare(rt: &Runtime, how: &str) {
    let python = rt.interpreter().executable.clone();
    for (name, program, slack) in PROGRAMS {
        let want = plain_python(&python, program);
        let got = value(&run(rt, &format!("{program}\nresult")).await);
        assert_same(&got, &want, *slack, &format!("{name} ({how})"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forked_children_compute_what_plain_cpython_does() {
    let rt = runtime_with(|c| c.spawn = SpawnMode::Zygote);
    assert_eq!(rt.spawn_mode().0, SpawnMode::Zygote);
    compare(&rt, "zygote").await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_children_compute_what_plain_cpython_does() {
    let rt = runtime_with(|c| c.spawn = SpawnMode::Exec);
    compare(&rt, "exec").await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cells_compute_what_plain_cpython_does() {
    let rt = runtime();
    let python = rt.interpreter().executable.clone();
    let s = rt.session(SessionOptions::default()).unwrap();
    for _ in 0..2 {
        for (name, program, slack) in PROGRAMS {
            let want = plain_python(&python, program);
            let got = value(&s.run(format!("{program}\nresult")).await.unwrap());
            assert_same(&got, &want, *slack, &format!("{name} (session)"));
        }
        // A huge int crosses both ways, and the limit is the program's again after.
        let huge = value(&s.run("x = 10 ** 6000\nx").await.unwrap());
        assert_eq!(huge, format!("1{}", "0".repeat(6000)));
    }
    s.close().await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_level_await_program_recurses_as_deep_as_a_script() {
    let rt = runtime();
    let python = rt.interpreter().executable.clone();
    let (name, program, slack) = PROGRAMS[1];
    let want = plain_python(&python, program);
    let got = value(&run(&rt, &format!("import asyncio\nawait asyncio.sleep(0)\n{program}\nresult")).await);
    assert_same(&got, &want, slack, &format!("{name} (top-level await)"));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_ints_cross_both_ways() {
    let rt = runtime();
    let big = format!("1{}", "0".repeat(6000));
    let ns = Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }));
    // Out as an argument, back as a reply, out as the value; the program's
    // own conversion still refuses it.
    let program = "x = await tools.echo(10 ** 6000)\n\
                   try:\n    str(x)\n    refused = False\nexcept ValueError:\n    refused = True\n\
                   [x == 10 ** 6000, refused, x]";
    let got = value(&run_ns(&rt, program, vec![ns]).await);
    assert!(got == format!("[true,true,{big}]"), "{}...", &got[..got.len().min(40)]);
    rt.shutdown().await;
}
