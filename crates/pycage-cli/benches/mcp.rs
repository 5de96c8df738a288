//! MCP benchmarks, each subject beside its floor, interleaved in one run:
//!
//! 1. `binding`: one sequential call through an `[[mcp]]` binding, timed
//!    inside the program (child → host → upstream → host → child), against
//!    the same upstream's own round trip from a plain rmcp client, over the
//!    same stdio connection to the same server process.
//! 2. `run_python`: one `run_python` call to `pycage mcp` (stdio) whose
//!    program makes 100 upstream calls, against 100 calls to the same kind
//!    of upstream from a Rust rmcp client; sequential and concurrent
//!    (`asyncio.gather` / a `JoinSet`).
//!
//! Upstreams: `server-everything` (`echo`, Node) and the Python SDK test
//! server (`add`). Needs `.ci/mcp-deps.sh`. Runs use process isolation.
//!
//! `cargo bench -p pycage-cli --bench mcp` (add `-- --quick` for fewer rounds).
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // the tests use more of it
#[path = "../tests/mcp/mod.rs"]
mod deps;

use std::time::{Duration, Instant};

use pycage_bindings::Bindings;
use pycage_runtime::{Isolation, RunRequest, Runtime, RuntimeConfig};
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::json;

struct Upstream {
    name: &'static str,
    argv: Vec<String>,
    tool: &'static str,
    args: serde_json::Value,
    /// The same arguments as a Python literal, for the program.
    py_args: &'static str,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn params(u: &Upstream) -> CallToolRequestParams {
    CallToolRequestParams::new(u.tool).with_arguments(u.args.as_object().unwrap().clone())
}

async fn connect(argv: &[String]) -> rmcp::service::RunningService<RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap();
    ClientConfig::new(Default::default(), Implementation::new("pycage-bench", "0")).serve(transport).await.unwrap()
}

async fn direct_calls(peer: &Peer<RoleClient>, u: &Upstream, n: usize, concurrent: bool) -> Duration {
    let start = Instant::now();
    if concurrent {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let peer = peer.clone();
            let p = params(u);
            set.spawn(async move { peer.call_tool(p).await.unwrap() });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    } else {
        for _ in 0..n {
            peer.call_tool(params(u)).await.unwrap();
        }
    }
    start.elapsed()
}

fn bindings_toml(u: &Upstream) -> String {
    let argv: Vec<String> = u.argv.iter().map(|a| serde_json::Value::String(a.clone()).to_string()).collect();
    format!("[[mcp]]\nglobal = \"up\"\ncommand = [{}]\n", argv.join(", "))
}

/// Bench 1: per-call time through a binding vs the plain client's round trip.
async fn binding_overhead(u: &Upstream, rounds: usize, per_round: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.toml");
    std::fs::write(&path, bindings_toml(u)).unwrap();
    let bindings = Bindings::load(&path).await.unwrap();
    let runtime = Runtime::new(RuntimeConfig { isolation: Isolation::Process, ..RuntimeConfig::default() }).unwrap();
    let peer = bindings.servers[0].upstream.peer().await.unwrap();
    let ident = pycage_bindings::spelling::spell_all([u.tool])[u.tool].clone();
    let program = format!(
        "import time\nts = []\nfor _ in range({per_round}):\n    t = time.perf_counter_ns()\n    await up.{ident}({})\n    ts.append(time.perf_counter_ns() - t)\nreturn ts",
        u.py_args
    );
    let (mut floor, mut subject, mut direct) = (Vec::new(), Vec::new(), Vec::new());
    let binding = bindings.namespaces[0].functions[&ident].clone();
    let args = pycage_protocol::JsonValue::from_serde(&u.args).unwrap();
    for _ in 0..rounds {
        for _ in 0..per_round {
            let t = Instant::now();
            peer.call_tool(params(u)).await.unwrap();
            floor.push(t.elapsed());
            // The same binding called from Rust: its own cost without the child.
            let t = Instant::now();
            binding.call(args.clone(), pycage_runtime::CallContext::detached()).await.unwrap();
            direct.push(t.elapsed());
        }
        let r = runtime
            .run(RunRequest {
                program: program.clone(),
                bindings: bindings.namespaces.clone(),
                cancel: None,
                ..RunRequest::default()
            })
            .await
            .unwrap();
        let v = r.value.unwrap_or_else(|| panic!("{:?}", r.error));
        for ns in v.root().as_array().unwrap() {
            subject.push(Duration::from_nanos(ns.as_number().unwrap().as_u64().unwrap()));
        }
    }
    // The runtime's own binding round trip, with an in-process echo binding:
    // what any binding costs before the upstream.
    let echo = pycage_runtime::Namespace::new("up")
        .with_function(ident.clone(), pycage_runtime::Binding::new(|a| async move { Ok(a) }));
    let mut local = Vec::new();
    for _ in 0..rounds {
        let r = runtime
            .run(RunRequest {
                program: program.clone(),
                bindings: vec![echo.clone()],
                cancel: None,
                ..RunRequest::default()
            })
            .await
            .unwrap();
        for ns in r.value.unwrap().root().as_array().unwrap() {
            local.push(Duration::from_nanos(ns.as_number().unwrap().as_u64().unwrap()));
        }
    }
    // The same, but the binding's future is pending once (as any I/O-bound
    // binding's is): the runtime's path for calls that do not finish inline.
    let pending = pycage_runtime::Namespace::new("up").with_function(
        ident.clone(),
        pycage_runtime::Binding::new(|a| async move {
            tokio::task::yield_now().await;
            Ok(a)
        }),
    );
    let mut yielded = Vec::new();
    for _ in 0..rounds {
        let r = runtime
            .run(RunRequest {
                program: program.clone(),
                bindings: vec![pending.clone()],
                cancel: None,
                ..RunRequest::default()
            })
            .await
            .unwrap();
        for ns in r.value.unwrap().root().as_array().unwrap() {
            yielded.push(Duration::from_nanos(ns.as_number().unwrap().as_u64().unwrap()));
        }
    }
    println!("| (in-process echo binding, same program) | {} | | |", us(median(local)));
    println!("| (in-process echo binding pending once, same program) | {} | | |", us(median(yielded)));
    println!("| (the MCP binding called from Rust, no child) | {} | | |", us(median(direct)));
    let (f, s) = (median(floor), median(subject));
    println!(
        "| binding call, {} `{}` | {} | {} | {:.2}x |",
        u.name,
        u.tool,
        us(s),
        us(f),
        s.as_secs_f64() / f.as_secs_f64()
    );
    runtime.shutdown().await;
    bindings.close().await;
}

/// Bench 2: one run_python with 100 upstream calls vs 100 direct calls.
async fn run_python_vs_direct(u: &Upstream, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.toml");
    std::fs::write(&path, bindings_toml(u)).unwrap();
    let pycage = vec![
        env!("CARGO_BIN_EXE_pycage").to_string(),
        "mcp".into(),
        "--isolation".into(),
        "process".into(),
        "--bindings".into(),
        path.display().to_string(),
    ];
    let code_mode = connect(&pycage).await;
    let direct = connect(&u.argv).await;
    let ident = pycage_bindings::spelling::spell_all([u.tool])[u.tool].clone();
    let seq = format!("for _ in range(100):\n    await up.{ident}({})\nreturn 100", u.py_args);
    let conc = format!(
        "import asyncio\nxs = await asyncio.gather(*[up.{ident}({}) for _ in range(100)])\nreturn len(xs)",
        u.py_args
    );
    let mut trivial = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        code_mode
            .peer()
            .call_tool(
                CallToolRequestParams::new("run_python")
                    .with_arguments(json!({"code": "return 1"}).as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        trivial.push(t.elapsed());
    }
    println!("| (run_python `return 1`, {} bindings) | {} | | |", u.name, ms(median(trivial)));
    for (label, code, concurrent) in [("sequential", &seq, false), ("concurrent", &conc, true)] {
        let (mut floor, mut subject) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            floor.push(direct_calls(direct.peer(), u, 100, concurrent).await);
            let t = Instant::now();
            let r = code_mode
                .peer()
                .call_tool(
                    CallToolRequestParams::new("run_python")
                        .with_arguments(json!({"code": code}).as_object().unwrap().clone()),
                )
                .await
                .unwrap();
            subject.push(t.elapsed());
            assert_eq!(r.is_error, Some(false), "{r:?}");
        }
        let (f, s) = (median(floor), median(subject));
        println!(
            "| run_python with 100 {label} calls, {} `{}` | {} | {} | {:.2}x |",
            u.name,
            u.tool,
            ms(s),
            ms(f),
            s.as_secs_f64() / f.as_secs_f64()
        );
    }
    let _ = code_mode.cancel().await;
    let _ = direct.cancel().await;
}

fn main() {
    let Some(d) = deps::Deps::find() else { return };
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, per_round, rp_rounds) = if quick { (5, 20, 3) } else { (20, 50, 15) };
    let upstreams = [
        Upstream {
            name: "server-everything",
            argv: vec![d.everything.display().to_string(), "stdio".into()],
            tool: "echo",
            args: json!({"message": "hello"}),
            py_args: "{'message': 'hello'}",
        },
        Upstream {
            name: "Python SDK server",
            argv: {
                let mut a = d.upstream_argv(std::path::Path::new("/dev/null"));
                a.truncate(2);
                a
            },
            tool: "add",
            args: json!({"a": 1, "b": 2}),
            py_args: "{'a': 1, 'b': 2}",
        },
    ];
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("| subject | subject median | floor median | ratio |");
    println!("|---|---|---|---|");
    rt.block_on(async {
        for u in &upstreams {
            binding_overhead(u, rounds, per_round).await;
        }
        for u in &upstreams {
            run_python_vs_direct(u, rp_rounds).await;
        }
    });
}
