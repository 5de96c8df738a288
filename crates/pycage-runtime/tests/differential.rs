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

// ---- a script's edges: exit, files, output, descriptors, values ----
//
// Each program below is run by pycage and by plain `python3 -I -u prog.py`
// (unbuffered: output in the order it is written, as the docs promise it),
// with the same interpreter, in an empty working directory holding `out/`,
// and `HOME` and `TMPDIR` elsewhere. What is compared: the value (the
// program's `result`, at the end of its main module, before its exit),
// every line it wrote to stdout and stderr (one stream, in order), and the
// files it left in `out/` (pycage copies them out after the run).

/// What a program needs beyond the standard library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Stdlib,
    /// numpy and pandas (the data-science venv).
    Numpy,
    /// matplotlib (the data-science venv).
    Matplotlib,
}

/// (name, program, needs, whether it is about the exit: not for sessions,
/// whose cells do not exit).
const EDGES: &[(&str, &str, Needs, bool)] = &[
    (
        // An unclosed file was never flushed: 0 bytes where CPython wrote them.
        "unclosed files are flushed at exit",
        "import csv\n\
         w = csv.writer(open('out/accounts.csv', 'w', newline=''))\n\
         for row in [['id', 'name'], [1, 'ada'], [2, 'grace']]:\n    w.writerow(row)\n\
         log = open('out/log.txt', 'a')\n\
         log.write('partial line')\n\
         raw = open('out/raw.bin', 'wb')\n\
         raw.write(bytes(range(8)))\n\
         result = 'written'",
        Needs::Stdlib,
        true,
    ),
    (
        "atexit handlers run at exit, last registered first",
        "import atexit\n\
         atexit.register(print, 'registered first')\n\
         @atexit.register\n\
         def bye():\n    print('registered last')\n    with open('out/atexit.txt', 'w') as f:\n        f.write('bye')\n\
         print('program')\n\
         result = 1",
        Needs::Stdlib,
        true,
    ),
    (
        // Each can only finish once the script's exit began.
        "non-daemon threads and executor work finish",
        "import threading, concurrent.futures\n\
         def after_main():\n    threading.main_thread().join()\n    print('thread, after main')\n\
         \x20   with open('out/thread.txt', 'w') as f:\n        f.write('thread')\n\
         threading.Thread(target=after_main).start()\n\
         gate = threading.Event()\n\
         def job():\n    gate.wait()\n    with open('out/job.txt', 'w') as f:\n        f.write('job')\n\
         pool = concurrent.futures.ThreadPoolExecutor(1)\n\
         pool.submit(job)\n\
         threading._register_atexit(gate.set)\n\
         result = 'main done'",
        Needs::Stdlib,
        true,
    ),
    (
        // What went to sys.__stdout__ was lost.
        "sys.__stdout__ and sys.__stderr__ are the program's streams",
        "import sys\n\
         print('one')\n\
         sys.__stdout__.write('two\\n')\n\
         sys.__stderr__.write('three\\n')\n\
         print('four', file=sys.stderr)\n\
         result = [sys.__stdout__ is sys.stdout, sys.__stderr__ is sys.stderr]",
        Needs::Stdlib,
        false,
    ),
    (
        // A child process's output came back after later prints.
        "a child process's output keeps its place among the program's",
        "import os, subprocess\n\
         for i in range(3):\n\
         \x20   print('a', i)\n\
         \x20   os.system('echo b')\n\
         \x20   subprocess.run(['echo', 'c'])\n\
         \x20   print('d', i)\n\
         \x20   subprocess.run(['sh', '-c', 'echo e >&2'])\n\
         \x20   os.write(1, b'f\\n')\n\
         \x20   print('g', i)\n\
         result = 0",
        Needs::Stdlib,
        false,
    ),
    (
        // sys.stdout.fileno() raised.
        "stdout and stderr have real descriptors",
        "import faulthandler, os, subprocess, sys\n\
         faulthandler.enable()\n\
         print('before')\n\
         subprocess.run(['echo', 'through sys.stdout'], stdout=sys.stdout, check=True)\n\
         subprocess.run(['sh', '-c', 'echo through sys.stderr >&2'], stderr=sys.stderr, check=True)\n\
         os.write(sys.stdout.fileno(), b'written to its fileno\\n')\n\
         sys.stdout.buffer.write(b'through the buffer\\n')\n\
         print('after')\n\
         result = [sys.stdout.fileno(), sys.stderr.fileno(), sys.stdout.buffer.fileno(), faulthandler.is_enabled()]",
        Needs::Stdlib,
        false,
    ),
    (
        // 1005 in a run.
        "the recursion limit is CPython's",
        "import sys\n\
         seen = [sys.getrecursionlimit()]\n\
         sys.setrecursionlimit(2000)\n\
         seen.append(sys.getrecursionlimit())\n\
         sys.setrecursionlimit(1000)\n\
         result = seen + [sys.getrecursionlimit()]",
        Needs::Stdlib,
        false,
    ),
    (
        // HOME and TMPDIR were the working directory (or held it).
        "the working directory holds only what the program made",
        "import os, pathlib, tempfile\n\
         fd, _ = tempfile.mkstemp()\n\
         os.close(fd)\n\
         tempfile.mkdtemp()\n\
         cache = pathlib.Path(os.path.expanduser('~'), '.cache', 'somelib')\n\
         cache.mkdir(parents=True, exist_ok=True)\n\
         (cache / 'index').write_text('x')\n\
         with open('mine.txt', 'w') as f:\n    f.write('mine')\n\
         result = sorted(os.listdir('.'))",
        Needs::Stdlib,
        false,
    ),
    (
        // fontconfig's ~/.cache (sandbox), matplotlib's fontlist (process).
        "a chart leaves only the chart in the working directory",
        "import os, matplotlib\n\
         matplotlib.use('Agg')\n\
         import matplotlib.pyplot as plt\n\
         from matplotlib import font_manager\n\
         plt.plot([1, 2, 3])\n\
         plt.savefig('chart.png')\n\
         plt.close('all')\n\
         with open('chart.png', 'rb') as f:\n    png = f.read(8) == b'\\x89PNG\\r\\n\\x1a\\n'\n\
         result = [sorted(os.listdir('.')), png]",
        Needs::Matplotlib,
        false,
    ),
    (
        // numpy.float64, the type of df['x'].mean(), settled as invalid-output.
        "numpy scalars are values",
        "import numpy as np, pandas as pd\n\
         df = pd.DataFrame({'x': [1.5, 2.5, 4.0], 'n': [1, 2, 3], 'b': [True, False, True]})\n\
         result = {'mean': df['x'].mean(), 'sum': df['n'].sum(), 'any': df['b'].any(), 'f32': np.float32(0.5),\n\
         \x20         'i8': np.int8(-3), 'u64': np.uint64(2**64 - 1), 'list': [np.float64(1.25), np.int32(7)]}",
        Needs::Numpy,
        false,
    ),
    (
        "a numpy scalar is a value",
        "import pandas as pd\nresult = pd.DataFrame({'x': [1.0, 2.0]})['x'].mean()",
        Needs::Numpy,
        false,
    ),
];

/// What one run of a program showed.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    value: String,
    logs: Vec<String>,
    files: std::collections::BTreeMap<String, String>,
}

/// The files of `dir` (flat), as text (binary bytes as Latin-1).
fn files_of(dir: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut files = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        files.insert(e.file_name().to_string_lossy().into_owned(), bytes.iter().map(|&b| char::from(b)).collect());
    }
    files
}

/// `program` under plain `python -I -u`, its value written by an epilogue
/// at the end of its main module (numpy scalars as `item()` gives them).
fn plain_observed(python: &std::path::Path, program: &str) -> Observed {
    let dir = tempfile::tempdir().unwrap();
    let (work, home, tmp) = (dir.path().join("work"), dir.path().join("home"), dir.path().join("tmp"));
    for d in [&work.join("out"), &home, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    let value_file = dir.path().join("value.json");
    let script = dir.path().join("prog.py");
    std::fs::write(
        &script,
        format!(
            "{program}\nimport json as _json\nwith open({:?}, 'w') as _f:\n    \
             _f.write(_json.dumps(result, separators=(',', ':'), default=lambda o: o.item()))\n",
            value_file.to_str().unwrap()
        ),
    )
    .unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = std::process::Command::new(python)
        .args(["-I", "-u"])
        .arg(&script)
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut output = String::new();
    std::io::Read::read_to_string(&mut &reader, &mut output).unwrap();
    assert!(child.wait().unwrap().success(), "plain python failed on {program:?}:\n{output}");
    Observed {
        value: std::fs::read_to_string(&value_file).unwrap(),
        logs: output.lines().map(str::to_owned).collect(),
        files: files_of(&work.join("out")),
    }
}

/// `program` (with `result` as its value) as a pycage run, its `out/`
/// collected.
async fn pycage_observed(rt: &Runtime, program: &str) -> Observed {
    let out = tempfile::tempdir().unwrap();
    let mut request = RunRequest::new(format!("{program}\nresult"));
    request.output_dir = Some(out.path().join("out"));
    let r = rt.run(request).await.unwrap();
    Observed { value: value_or_error(&r), logs: r.logs.clone(), files: files_of(&out.path().join("out")) }
}

/// The run's value, or its error (a difference to report, not a panic).
fn value_or_error(r: &RunResult) -> String {
    match &r.error {
        Some(e) => format!("error {}: {}", e.kind, e.message),
        None => r.value.as_ref().map(|v| v.to_canonical_string()).unwrap_or_else(|| "<none>".into()),
    }
}

/// A mount point the sandbox makes under `/work` for a read-only host path
/// that lies there (this repository's venv, when the repository is under
/// `/work`): not the program's, and not a difference from CPython.
fn sandbox_mount_names(python: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(rest) = python.strip_prefix("/work") {
        if let Some(first) = rest.components().next() {
            names.push(first.as_os_str().to_string_lossy().into_owned());
        }
    }
    names
}

/// Runs every case of `needs` on `rt` and compares it with plain CPython;
/// every difference, each case's.
async fn compare_edges(rt: &Runtime, how: &str, needs: &[Needs], isolation: Isolation) -> Vec<String> {
    let python = rt.interpreter().executable.clone();
    let mounts = if isolation == Isolation::Sandbox { sandbox_mount_names(&python) } else { Vec::new() };
    let mut differences = Vec::new();
    for (name, program, need, _) in EDGES.iter().filter(|(_, _, n, _)| needs.contains(n)) {
        let want = plain_observed(&python, program);
        let mut got = pycage_observed(rt, program).await;
        for m in &mounts {
            got.value = got.value.replace(&format!("\"{m}\","), "").replace(&format!(",\"{m}\""), "");
        }
        if got != want {
            differences.push(format!("{name} ({how}, {need:?}):\n  pycage: {got:?}\n  python: {want:?}"));
        }
    }
    differences
}

fn sandbox_available() -> bool {
    if pycage_sandbox::probe().missing().is_empty() {
        return true;
    }
    assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "the sandbox is unavailable here");
    false
}

/// Exec'd (one run per interpreter, as `pycage run`) and forked from a
/// warm zygote (pooled runs, as `pycage mcp` and the Python package).
async fn edges_in(isolation: Isolation, venv: Option<std::path::PathBuf>, needs: &[Needs]) {
    let mut differences = Vec::new();
    for spawn in [SpawnMode::Exec, SpawnMode::Zygote] {
        let rt = runtime_with(|c| {
            c.isolation = isolation;
            c.spawn = spawn;
            c.venv = venv.clone();
        });
        assert_eq!(rt.spawn_mode().0, spawn);
        differences.extend(compare_edges(&rt, &format!("{isolation:?}, {spawn:?}"), needs, isolation).await);
        rt.shutdown().await;
    }
    assert!(differences.is_empty(), "differences from plain CPython:\n{}", differences.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_edges_are_plain_cpythons_in_process_isolation() {
    edges_in(Isolation::Process, None, &[Needs::Stdlib]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripts_edges_are_plain_cpythons_in_the_sandbox() {
    if sandbox_available() {
        edges_in(Isolation::Sandbox, None, &[Needs::Stdlib]).await;
    }
}

#[allow(clippy::print_stderr)] // a skip says so where the test output shows it
fn datasci_venv() -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("PYCAGE_DATASCI_VENV").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/datasci-venv").components().collect()
    });
    if venv.join("bin/python").symlink_metadata().is_ok() {
        return Some(venv);
    }
    assert!(
        std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(),
        "the data-science venv is missing at {}: run .ci/datasci-deps.sh",
        venv.display()
    );
    eprintln!("skipped: no data-science venv at {} (run .ci/datasci-deps.sh)", venv.display());
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numpy_pandas_and_matplotlib_programs_are_plain_cpythons() {
    let Some(venv) = datasci_venv() else { return };
    let needs = [Needs::Numpy, Needs::Matplotlib];
    edges_in(Isolation::Process, Some(venv.clone()), &needs).await;
    if sandbox_available() {
        edges_in(Isolation::Sandbox, Some(venv), &needs).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_cells_match_plain_cpython_but_for_the_exit() {
    let rt = runtime();
    let python = rt.interpreter().executable.clone();
    let s = rt.session(SessionOptions::default()).unwrap();
    let mut differences = Vec::new();
    for (name, program, _, _) in EDGES.iter().filter(|(_, _, n, at_exit)| *n == Needs::Stdlib && !at_exit) {
        // A cell has no out/ to collect (nor in its working directory):
        // the value and the output.
        let mut want = plain_observed(&python, program);
        want.value = want.value.replace(",\"out\"", "").replace("\"out\",", "");
        let r = s.run(format!("{program}\nresult")).await.unwrap();
        let got = (value_or_error(&r), r.logs.clone());
        if got != (want.value.clone(), want.logs.clone()) {
            differences.push(format!("{name} (session):\n  pycage: {got:?}\n  python: {:?}", (want.value, want.logs)));
        }
    }
    assert!(differences.is_empty(), "differences from plain CPython:\n{}", differences.join("\n"));
    s.close().await;
    rt.shutdown().await;
}

/// The host reads the program's `log` frames (fd 3) and its raw fd 1/2 pipe
/// apart. When it read late, what waited in both came back frames first: a
/// child process's output after the prints that followed it. Here the
/// host is made late on purpose: the consumer of the run's events takes
/// one line and stops (a channel of one, a second line waiting), which
/// stops the host reading either. The program meanwhile writes to its fd 1
/// (child processes, `os.write`) and prints, then says so with a file;
/// only then does the consumer go on. (Process isolation: the file is the
/// test's signal; the sandbox runs the same child and host code.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_keeps_its_order_when_the_host_reads_late() {
    for spawn in [SpawnMode::Exec, SpawnMode::Zygote] {
        let rt = runtime_with(|c| c.spawn = spawn);
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("written");
        let program = format!(
            "import os, subprocess, sys\n\
             print('one')\n\
             print('two')\n\
             subprocess.run(['echo', 'child'])\n\
             os.write(1, b'raw\\n')\n\
             subprocess.run(['echo', 'through sys.stdout'], stdout=sys.stdout)\n\
             print('three')\n\
             open({:?}, 'w').close()\n\
             print('four')",
            marker.to_str().unwrap()
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let run = {
            let rt = rt.clone();
            tokio::spawn(async move { rt.run_with_events(RunRequest::new(program), tx).await.unwrap() })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        // (A run that failed before its marker ends by itself.)
        while !marker.exists() && !run.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the program never wrote its marker ({spawn:?})");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let mut streamed = Vec::new();
        while let Some(event) = rx.recv().await {
            if let RunEvent::Log(line) = event {
                streamed.push(line);
            }
        }
        let r = run.await.unwrap();
        let want = ["one", "two", "child", "raw", "through sys.stdout", "three", "four"];
        assert_eq!(streamed, want, "{spawn:?}: the lines as streamed");
        assert_eq!(r.logs, want, "{spawn:?}: the result's lines");
        rt.shutdown().await;
    }
}
