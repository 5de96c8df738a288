//! Whole-run harness: each figure beside its floor, measured in the same
//! process, interleaved, so the ratio survives a noisy shared machine.
//!
//! `cargo bench -p pycage-runtime --bench runs [-- ITERATIONS]`
//!
//! - trivial run (`return 1`) vs `python3 -I -c "import asyncio, json"`
//!   spawned the same way (scrubbed env, piped stdio, waited for);
//! - one binding call's round trip (1,000 sequential awaits timed inside
//!   the program, over 1,000) vs one JSON line's round trip over a pipe to a
//!   Python child that decodes and re-encodes it with `json`;
//! - 1,000 calls with `asyncio.gather`: calls per second.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pycage_runtime::*;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn floor_spawn(python: &std::path::Path) -> Duration {
    let t = Instant::now();
    let st = Command::new(python)
        .args(["-I", "-B", "-c", "import asyncio, json"])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(st.status.success());
    t.elapsed()
}

const ECHO_CHILD: &str = "import sys, json\nr = sys.stdin.buffer\nw = sys.stdout\nfor line in r:\n    w.write(json.dumps(json.loads(line), separators=(',', ':')) + '\\n')\n    w.flush()\n";

fn floor_pipe_round_trips(python: &std::path::Path, n: usize) -> Duration {
    let mut child = Command::new(python)
        .args(["-I", "-B", "-c", ECHO_CHILD])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // Warm-up round trip (the child's start-up is not part of the floor).
    writeln!(stdin, "{{\"type\":\"call\",\"id\":0,\"args\":0}}").unwrap();
    stdout.read_line(&mut line).unwrap();
    let t = Instant::now();
    for i in 0..n {
        line.clear();
        writeln!(stdin, "{{\"type\":\"call\",\"id\":{i},\"global\":\"tools\",\"name\":\"echo\",\"args\":{i}}}")
            .unwrap();
        stdout.read_line(&mut line).unwrap();
    }
    let el = t.elapsed();
    drop(stdin);
    child.wait().unwrap();
    el
}

/// A trivial run under each isolation, interleaved in one loop, so their
/// ratio is not skewed by load that changes between two loops.
async fn sandbox_vs_process(iterations: usize) {
    let make = |isolation| Runtime::new(RuntimeConfig { isolation, ..RuntimeConfig::default() });
    let (process, sandbox) = match (make(Isolation::Process), make(Isolation::Sandbox)) {
        (Ok(p), Ok(s)) => (p, s),
        (_, Err(e)) | (Err(e), _) => {
            println!("sandbox vs process: unavailable: {e}");
            return;
        }
    };
    let mut p = Vec::new();
    let mut s = Vec::new();
    for i in 0..=iterations {
        let t = Instant::now();
        process.run(RunRequest::new("return 1")).await.unwrap();
        let tp = t.elapsed();
        let t = Instant::now();
        sandbox.run(RunRequest::new("return 1")).await.unwrap();
        let ts = t.elapsed();
        if i > 0 {
            p.push(tp);
            s.push(ts);
        }
    }
    let (pm, sm) = (median(p), median(s));
    println!(
        "[sandbox vs process] trivial run: sandbox {:.2} ms, process {:.2} ms (interleaved); ratio {:.2}",
        sm.as_secs_f64() * 1e3,
        pm.as_secs_f64() * 1e3,
        sm.as_secs_f64() / pm.as_secs_f64()
    );
    process.shutdown().await;
    sandbox.shutdown().await;
}

fn main() {
    let iterations: usize = std::env::args().filter_map(|a| a.parse().ok()).next().unwrap_or(30);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        sandbox_vs_process(iterations).await;
        for isolation in [Isolation::Process, Isolation::Sandbox] {
            let config = RuntimeConfig { isolation, ..RuntimeConfig::default() };
            let runtime = match Runtime::new(config) {
                Ok(r) => r,
                Err(e) => {
                    println!("{}: unavailable: {e}", isolation.as_str());
                    continue;
                }
            };
            let python = runtime.interpreter().executable.clone();
            let tools = Namespace::new("tools").with_function("echo", Binding::new(|a| async move { Ok(a) }));
            // Warm caches.
            runtime.run(RunRequest::new("return 1")).await.unwrap();
            floor_spawn(&python);

            let mut trivial = Vec::new();
            let mut floor = Vec::new();
            for _ in 0..iterations {
                let t = Instant::now();
                let r = runtime.run(RunRequest::new("return 1")).await.unwrap();
                trivial.push(t.elapsed());
                assert!(r.error.is_none(), "{r:?}");
                floor.push(floor_spawn(&python));
            }
            let (tm, fm) = (median(trivial), median(floor));
            println!(
                "[{}] trivial run: median {:.2} ms; floor python3 -I -c 'import asyncio, json': {:.2} ms; ratio {:.2}",
                isolation.as_str(),
                tm.as_secs_f64() * 1e3,
                fm.as_secs_f64() * 1e3,
                tm.as_secs_f64() / fm.as_secs_f64()
            );
            if isolation == Isolation::Sandbox {
                continue;
            }

            let calls = 1000;
            // Timed inside the program, so spawn and boot are not in it.
            let seq = format!("import time\nt = time.perf_counter_ns()\nfor i in range({calls}):\n    await tools.echo(i)\nreturn time.perf_counter_ns() - t");
            let mut per_call = Vec::new();
            let mut per_pipe = Vec::new();
            for _ in 0..(iterations / 3).max(5) {
                let r = runtime.run(RunRequest::new(seq.clone()).with_namespace(tools.clone())).await.unwrap();
                assert!(r.error.is_none(), "{r:?}");
                per_call.push(Duration::from_nanos(r.value.unwrap().root().as_number().unwrap().as_u64().unwrap()) / calls);
                per_pipe.push(floor_pipe_round_trips(&python, calls as usize) / calls);
            }
            let (cm, pm) = (median(per_call), median(per_pipe));
            println!(
                "[process] binding call round trip: median {:.1} us; floor JSON line over a pipe to python (json decode+encode): {:.1} us; ratio {:.2}",
                cm.as_secs_f64() * 1e6,
                pm.as_secs_f64() * 1e6,
                cm.as_secs_f64() / pm.as_secs_f64()
            );

            let gather = "import asyncio, time\nt = time.perf_counter_ns()\nr = await asyncio.gather(*[tools.echo(i) for i in range(1000)])\nreturn time.perf_counter_ns() - t";
            let mut rates = Vec::new();
            for _ in 0..(iterations / 3).max(5) {
                let r = runtime.run(RunRequest::new(gather).with_namespace(tools.clone())).await.unwrap();
                assert!(r.error.is_none(), "{r:?}");
                let whole = Duration::from_nanos(r.value.unwrap().root().as_number().unwrap().as_u64().unwrap());
                rates.push(whole / 1000);
            }
            let per = median(rates);
            println!("[process] 1,000 calls with asyncio.gather: {:.0} calls/s (timed inside the program)", 1.0 / per.as_secs_f64());
            runtime.shutdown().await;
        }
    });
}
