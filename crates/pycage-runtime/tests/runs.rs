//! End-to-end runs against the real bootstrap and real python3.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use pycage_runtime::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_values_and_nothing() {
    let rt = runtime();
    assert_eq!(value(&run(&rt, "return 1").await), "1");
    assert_eq!(value(&run(&rt, "return None").await), "null");
    assert_eq!(value(&run(&rt, "x = 1").await), "<none>");
    assert_eq!(
        value(&run(&rt, "return {'a': [1, 2.5, 'é\\n', True, None], 'b': {}}").await),
        r#"{"a":[1,2.5,"é\n",true,null],"b":{}}"#
    );
    assert_eq!(value(&run(&rt, "import asyncio\nawait asyncio.sleep(0)\nreturn 'awaited'").await), r#""awaited""#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exception_traceback_names_program_line() {
    let rt = runtime();
    let r = run(&rt, "x = 1\ny = 2\nraise ValueError('boom')\n").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(msg.contains("File \"<program>\", line 3"), "{msg}");
    assert!(msg.contains("ValueError: boom"), "{msg}");
    assert!(!msg.contains("bootstrap.py"), "{msg}");
    let r = run(&rt, "return (\n").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(msg.contains("SyntaxError"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_output_names_path_and_type() {
    let rt = runtime();
    let r = run(&rt, "return {'items': [1, 2, 3, {4, 5}]}").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::InvalidOutput);
    assert!(msg.contains("$.items[3]") && msg.contains("set"), "{msg}");
    let r = run(&rt, "a = []\na.append(a)\nreturn a").await;
    assert_eq!(failure(&r).0, FailureKind::InvalidOutput);
    assert!(failure(&r).1.contains("cycle"), "{}", failure(&r).1);
    let r = run(&rt, "return float('inf')").await;
    assert_eq!(failure(&r).0, FailureKind::InvalidOutput);
    let r = run(&rt, "return {1: 2}").await;
    assert_eq!(failure(&r).0, FailureKind::InvalidOutput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_timeout_keeps_logs() {
    let rt = runtime_with(|c| c.wall_time = Duration::from_millis(1500));
    let r = run(&rt, "print('before', flush=True)\nwhile True:\n    pass").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout);
    assert!(msg.contains("wall-clock"), "{msg}");
    assert_eq!(r.logs, vec!["before"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_timeout_says_cpu() {
    let rt = runtime_with(|c| {
        c.cpu_seconds = 1;
        c.wall_time = Duration::from_secs(30);
    });
    let r = run(&rt, "while True:\n    pass").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Timeout);
    assert!(msg.contains("CPU"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_error_is_an_exception() {
    // Past the address-space backstop (256 MiB budget: 4 GiB + 256 MiB):
    // the allocation fails in the program.
    let rt = runtime_with(|c| c.address_space_bytes = 256 << 20);
    let r = run(&rt, "x = bytearray(1 << 33)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(msg.contains("MemoryError"), "{msg}");
    // Under it but over the budget once touched: the watchdog ends the run.
    let r = run(
        &rt,
        "x = bytearray(1 << 30)
import time
time.sleep(5)",
    )
    .await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit);
    assert!(msg.contains("memory budget of 256 MiB"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_exit_reports_status_and_signal() {
    let rt = runtime();
    let r = run(&rt, "print('bye')\nimport os\nos._exit(3)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit);
    assert!(msg.contains("status 3"), "{msg}");
    assert_eq!(r.logs, vec!["bye"]);
    let r = run(&rt, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::WorkerExit);
    assert!(msg.contains("signal 9"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_fd3_is_worker_exit() {
    let rt = runtime();
    let r = run(&rt, "import os\nos.close(3)\nreturn 1").await;
    assert_eq!(failure(&r).0, FailureKind::WorkerExit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn value_over_budget_is_output_limit() {
    let rt = runtime_with(|c| c.max_value_bytes = 1000);
    let r = run(&rt, "return 'x' * 998").await;
    assert_eq!(value(&r).len(), 1000);
    let r = run(&rt, "return 'x' * 999").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::OutputLimit);
    assert!(msg.contains("1000"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_done_over_budget_is_caught_by_host() {
    let rt = runtime_with(|c| c.max_value_bytes = 1000);
    let r = run(&rt, "import os\nos.write(3, b'{\"type\":\"done\",\"value\":\"' + b'y' * 5000 + b'\"}\\n')\nimport time\ntime.sleep(5)").await;
    assert_eq!(failure(&r).0, FailureKind::OutputLimit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_line_on_fd3_is_output_limit() {
    let rt = runtime_with(|c| c.max_line_bytes = 64 * 1024);
    let r = run(&rt, "print('kept')\nimport os\nos.write(3, b'x' * (1 << 20))\nimport time\ntime.sleep(10)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::OutputLimit);
    assert!(msg.contains("line cap"), "{msg}");
    assert_eq!(r.logs, vec!["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_traffic_cap_is_output_limit() {
    let rt = runtime_with(|c| {
        c.max_line_bytes = 1024;
        c.max_control_bytes = 256 * 1024;
    });
    let r =
        run(&rt, "import os\nos.set_blocking(3, True)\nfor _ in range(100000):\n    os.write(3, b'{}\\n' * 100)").await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::OutputLimit, "{msg}");
    assert!(msg.contains("protocol traffic"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_and_forged_frames_are_dropped() {
    let rt = runtime();
    let program = r#"
import os
os.write(3, b'garbage\n{"type":"call","id":-1,"global":"tools","name":"echo","args":1}\n[1,2]\n{"type":"boot-ack"}\n\xff\xfe\n{"type":"log","text":1}\n')
os.write(3, b'{"type":"call","id":5,"global":"nope","name":"x","args":null}\n')
return await tools.echo(41) + 1
"#;
    let r = run_ns(&rt, program, vec![echo_ns()]).await;
    assert_eq!(value(&r), "42");
    assert_eq!(r.dropped_frames, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_numbers_both_ways() {
    let rt = runtime();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let ns = Namespace::new("tools")
        .with_function(
            "big",
            Binding::new(|_| async {
                Ok(JsonValue::parse(
                    b"[1606938044258990275541962092341162602522202993782792835301376, -0.0, 1e400, 0.1]",
                )
                .unwrap())
            }),
        )
        .with_function(
            "record",
            Binding::new(move |a| {
                let seen = seen2.clone();
                async move {
                    seen.lock().unwrap().push(a.to_canonical_string());
                    Ok(JsonValue::null())
                }
            }),
        );
    let program = r#"
import math
b, z, inf, tenth = await tools.big()
await tools.record([2**200, -0.0, 1.5e300, -(2**64)])
assert b == 2**200, b
assert math.copysign(1, z) == -1.0
return [b, z, tenth, type(b).__name__, type(z).__name__]
"#;
    let r = run_ns(&rt, program, vec![ns]).await;
    assert_eq!(value(&r), r#"[1606938044258990275541962092341162602522202993782792835301376,-0.0,0.1,"int","float"]"#);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [r#"[1606938044258990275541962092341162602522202993782792835301376,-0.0,1.5e+300,-18446744073709551616]"#]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_values_both_ways() {
    let rt = runtime();
    let depth = 100_000;
    let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let deep2 = deep.clone();
    let got = Arc::new(std::sync::Mutex::new(0usize));
    let got2 = got.clone();
    let ns = Namespace::new("tools")
        .with_function(
            "deep",
            Binding::new(move |_| {
                let d = deep2.clone();
                async move { Ok(JsonValue::parse(d.as_bytes()).unwrap()) }
            }),
        )
        .with_function(
            "take",
            Binding::new(move |a| {
                let got = got2.clone();
                async move {
                    *got.lock().unwrap() = a.depth();
                    Ok(JsonValue::null())
                }
            }),
        );
    let program = r#"
v = await tools.deep()
n = 0
while v:
    v = v[0]
    n += 1
x = []
for _ in range(n):
    x = [x]
await tools.take(x)
return x
"#;
    let r = run_ns(&rt, program, vec![ns]).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    let v = r.value.unwrap();
    assert_eq!(v.depth(), depth);
    assert_eq!(v.to_canonical_string(), deep);
    assert_eq!(*got.lock().unwrap(), depth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_gather() {
    let rt = runtime();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let (f, m) = (in_flight.clone(), max.clone());
    let ns = Namespace::new("tools").with_function(
        "slow",
        Binding::new(move |a| {
            let (f, m) = (f.clone(), m.clone());
            async move {
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                f.fetch_sub(1, Ordering::SeqCst);
                Ok(a)
            }
        }),
    );
    let program = "import asyncio\nr = await asyncio.gather(*[tools.slow(i) for i in range(200)])\nreturn sum(r)";
    let r = run_ns(&rt, program, vec![ns]).await;
    assert_eq!(value(&r), (0..200).sum::<u32>().to_string());
    assert!(max.load(Ordering::SeqCst) >= 20, "max in flight {}", max.load(Ordering::SeqCst));
}

fn failing_ns(error_class: bool) -> Namespace {
    let ns = Namespace::new("tools")
        .with_function("fail", Binding::new(|_| async { Err(BindingError::new("no such user")) }))
        .with_function("__class__", Binding::new(|_| async { Err(BindingError::new("dunder")) }))
        .with_function("my-tool", Binding::new(|_| async { Ok(JsonValue::from(7i64)) }));
    if error_class {
        ns.with_error_class(ErrorClass { name: "ToolError".into(), member_name_property: "tool".into() })
    } else {
        ns
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_call_with_error_class() {
    let rt = runtime();
    let program = r#"
out = []
for name in ["fail", "__class__"]:
    try:
        await getattr(tools, name)({})
    except ToolError as e:
        out.append([type(e).__name__, str(e), e.tool, isinstance(e, Exception)])
out.append(await getattr(tools, "my-tool")())
return out
"#;
    let r = run_ns(&rt, program, vec![failing_ns(true)]).await;
    assert_eq!(value(&r), r#"[["ToolError","no such user","fail",true],["ToolError","dunder","__class__",true],7]"#);
    let r = run_ns(&rt, "await tools.fail(1)", vec![failing_ns(true)]).await;
    let (kind, msg) = failure(&r);
    assert_eq!(kind, FailureKind::Exception);
    assert!(msg.contains("ToolError: no such user") && msg.contains("line 1"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_call_without_error_class() {
    let rt = runtime();
    let program = "try:\n    await tools.fail()\nexcept Exception as e:\n    return [type(e).__name__, str(e)]";
    assert_eq!(value(&run_ns(&rt, program, vec![failing_ns(false)]).await), r#"["RuntimeError","no such user"]"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_fd_output_is_captured_in_order() {
    let rt = runtime();
    let program = "import os, sys\nprint('one')\nos.write(1, b'two\\n')\nprint('three', file=sys.stderr)\nos.write(2, b'four\\npartial')\nreturn 1";
    let r = run(&rt, program).await;
    assert_eq!(value(&r), "1");
    // Frames and the raw pipe (fd 1 and fd 2 share it) are two channels:
    // order is exact within each (and lines never mix), arrival order across.
    let pos = |s: &str| r.logs.iter().position(|l| l == s).unwrap_or_else(|| panic!("{s} missing: {:?}", r.logs));
    assert_eq!(r.logs.len(), 5, "{:?}", r.logs);
    assert!(pos("one") < pos("three"));
    assert!(pos("two") < pos("four") && pos("four") < pos("partial"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_truncation_has_exactly_one_marker() {
    let rt = runtime_with(|c| c.max_log_bytes = 100);
    let r = run(&rt, "for i in range(1000):\n    print('line', i)\nreturn 1").await;
    assert_eq!(value(&r), "1");
    let marker = "[pycage] log capture truncated at 100 bytes";
    assert_eq!(r.logs.iter().filter(|l| *l == marker).count(), 1, "{:?}", r.logs);
    assert_eq!(r.logs.last().map(String::as_str), Some(marker));
    let text: usize = r.logs[..r.logs.len() - 1].iter().map(|l| l.len() + 1).sum();
    assert!(text <= 101, "{text}");

    let r = run(&rt, "import os\nos.write(1, b'z' * 500)\nreturn 2").await;
    assert_eq!(value(&r), "2");
    assert_eq!(r.logs, vec!["z".repeat(100), marker.to_string()]);

    let rt = runtime();
    let r = run(&rt, "print('[pycage] log capture truncated at 65536 bytes')\nprint('still here')").await;
    assert_eq!(r.logs, vec!["[pycage] log capture truncated at 65536 bytes", "still here"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_larger_than_a_protocol_line_is_logged_whole() {
    // 1.5 million control characters are 9 MB in one frame (`\u0001`
    // each), over the 8 MiB line cap: within a log budget that allows
    // them, the write crosses in several frames and is one log line.
    let rt = runtime_with(|c| c.max_log_bytes = 2_000_000);
    let r = run(&rt, "print('first')\nprint('\\x01' * 1_500_000)\nprint('last')\n'value'").await;
    assert_eq!(value(&r), "\"value\"");
    assert_eq!(r.logs.len(), 3, "{:?}", r.logs.iter().map(String::len).collect::<Vec<_>>());
    assert_eq!(r.logs[0], "first");
    assert!(r.logs[1].len() == 1_500_000 && r.logs[1].bytes().all(|b| b == 1));
    assert_eq!(r.logs[2], "last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_is_abort_with_logs() {
    let rt = runtime();
    let token = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let req = RunRequest::new("print('started', flush=True)\nimport time\ntime.sleep(60)").with_cancel(token.clone());
    let rt2 = rt.clone();
    let handle = tokio::spawn(async move { rt2.run_with_events(req, tx).await });
    // Cancel once the program has demonstrably started.
    loop {
        match rx.recv().await {
            Some(RunEvent::Log(l)) if l == "started" => break,
            Some(_) => {}
            None => panic!("run ended before logging"),
        }
    }
    token.cancel();
    let r = handle.await.unwrap().unwrap();
    assert_eq!(failure(&r).0, FailureKind::Abort);
    assert_eq!(r.logs, vec!["started"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_logs_and_calls() {
    let rt = runtime();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let req = RunRequest::new("print('a')\nr = await tools.echo([1])\nreturn r").with_namespace(echo_ns());
    let r = rt.run_with_events(req, tx).await.unwrap();
    assert_eq!(value(&r), "[1]");
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    assert_eq!(
        events,
        vec![
            RunEvent::Log("a".into()),
            RunEvent::Call {
                id: 0,
                global: "tools".into(),
                name: "echo".into(),
                args: JsonValue::parse(b"[1]").unwrap()
            },
            RunEvent::CallFinished { id: 0, error: None },
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_rules_are_misuse() {
    let rt = runtime();
    let r = rt.run(RunRequest::new("return 1").with_namespace(Namespace::new("match"))).await;
    assert!(matches!(r, Err(MisuseError::Names(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_members_may_have_any_name() {
    let rt = runtime();
    let mut ns = Namespace::new("tools");
    for name in ["__class__", "__getattr__", "__init__", "__dict__", "my-tool", "", "with space"] {
        let n = name.to_string();
        ns = ns.with_function(
            name,
            Binding::new(move |_| {
                let n = n.clone();
                async move { Ok(JsonValue::string(&n).unwrap()) }
            }),
        );
    }
    let program = r#"
out = []
for name in ["__class__", "__getattr__", "__init__", "__dict__", "my-tool", "", "with space"]:
    out.append(await getattr(tools, name)())
try:
    tools.missing
except AttributeError:
    out.append("missing")
return out
"#;
    let r = run_ns(&rt, program, vec![ns]).await;
    assert_eq!(value(&r), r#"["__class__","__getattr__","__init__","__dict__","my-tool","","with space","missing"]"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebinding_builtins_does_not_break_the_protocol() {
    let rt = runtime();
    let program = r#"
import builtins, sys, json
print('ok')
builtins.print = None
builtins.len = None
builtins.isinstance = None
sys.stdout = None
json.dumps = None
del sys.modules['json']
return {'still': [1, 2]}
"#;
    let r = run(&rt, program).await;
    assert_eq!(value(&r), r#"{"still":[1,2]}"#);
    assert_eq!(r.logs, vec!["ok"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_independent() {
    let rt = runtime();
    assert_eq!(value(&run(&rt, "import builtins\nbuiltins.leak = 1\nopen('f', 'w').write('x')\nreturn 1").await), "1");
    assert_eq!(
        value(&run(&rt, "import builtins, os\nreturn [hasattr(builtins, 'leak'), os.path.exists('f')]").await),
        "[false,false]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_aborts_in_flight_runs_and_refuses_new_ones() {
    let rt = runtime();
    let mut handles = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    for _ in 0..3 {
        let rt = rt.clone();
        let tx = tx.clone();
        handles.push(tokio::spawn(async move {
            rt.run_with_events(RunRequest::new("print('up', flush=True)\nimport time\ntime.sleep(60)"), tx).await
        }));
    }
    drop(tx);
    let mut started = 0;
    while started < 3 {
        if let Some(RunEvent::Log(_)) = rx.recv().await {
            started += 1;
        }
    }
    rt.shutdown().await;
    for h in handles {
        let r = h.await.unwrap().unwrap();
        assert_eq!(failure(&r).0, FailureKind::Abort);
        assert!(failure(&r).1.contains("shut down"));
    }
    assert!(matches!(rt.run(RunRequest::new("return 1")).await, Err(MisuseError::ShutDown)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_interpreters_fail_at_construction() {
    let mut c = config();
    c.python = Some("/nonexistent/python3".into());
    let e = Runtime::new(c).err().unwrap();
    assert!(e.to_string().contains("RuntimeConfig::python"), "{e}");
    assert!(!e.to_string().contains("--python"), "library messages name the setting, not a flag: {e}");
    let mut c = config();
    c.cpu_seconds = 0;
    assert!(matches!(Runtime::new(c), Err(RuntimeError::Config(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_show_in_help() {
    let rt = runtime();
    let ns = echo_ns()
        .with_function("my-tool", Binding::new(|a| async move { Ok(a) }))
        .with_doc("Tools for \"tests\".")
        .with_member_doc("echo", "async def echo(*, x: int) -> int:\n    \"\"\"Echoes.\"\"\"")
        .with_member_doc("my-tool", "the tool")
        .with_member_doc("absent", "ignored");
    // help(tools.echo) shows the stub's signature as the function's, then
    // its docstring (it showed `async echo(*args, **kwargs)` above the
    // stub); the help text as given is the member's __doc__ until then.
    let program = r#"
import pydoc
before = tools.echo.__doc__
text = pydoc.render_doc(tools.echo, renderer=pydoc.plaintext)
return [
    before,
    text.split("\n", 2)[2],
    tools.echo.__doc__,
    getattr(tools, "my-tool").__doc__,
    tools.__doc__,
    "Tools for" in pydoc.render_doc(tools, renderer=pydoc.plaintext),
]
"#;
    let r = run_ns(&rt, program, vec![ns]).await;
    assert_eq!(
        value(&r),
        r#"["async def echo(*, x: int) -> int:\n    \"\"\"Echoes.\"\"\"","async echo(*, x: int) -> int\n    Echoes.\n","Echoes.","the tool","Tools for \"tests\".\n\nFunctions:\n  async def echo(*, x: int) -> int\n  getattr(tools, 'my-tool')(...)",true]"#
    );
    // Without docs, a member keeps Python's default, and the namespace
    // still lists its functions.
    let r = run_ns(&rt, "return [tools.echo.__doc__, tools.__doc__]", vec![echo_ns()]).await;
    assert_eq!(value(&r), r#"[null,"Functions:\n  tools.echo(...)"]"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_when_a_run_settles_are_reported_abandoned() {
    let rt = runtime();
    let pending = Namespace::new("tools").with_function(
        "hang",
        Binding::new(|_| async { std::future::pending::<Result<JsonValue, BindingError>>().await }),
    );
    let program = "import asyncio\nt = asyncio.ensure_future(tools.hang())\nawait asyncio.sleep(0.2)\nreturn 1";
    let r = run_ns(&rt, program, vec![pending]).await;
    assert_eq!(value(&r), "1");
    assert_eq!(r.abandoned_calls, 1);
    let r = run(&rt, "return 2").await;
    assert_eq!(r.abandoned_calls, 0);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_isolation_run_directory_is_private() {
    for spawn in [SpawnMode::Exec, SpawnMode::Zygote] {
        let rt = runtime_with(|c| c.spawn = spawn);
        let r = run(
            &rt,
            "import os, stat\nreturn [oct(stat.S_IMODE(os.stat(p).st_mode)) for p in ('.', os.environ['HOME'])]",
        )
        .await;
        assert_eq!(value(&r), r#"["0o700","0o700"]"#, "{spawn:?}");
        rt.shutdown().await;
    }
}
