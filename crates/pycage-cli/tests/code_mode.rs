//! MCP both ways, end to end, with real parts: `pycage run`/`stubs` with
//! `[[mcp]]` and `http` bindings, and `pycage mcp` driven by the official
//! Python SDK client, over stdio and streamable HTTP. The upstream servers
//! are the reference `server-everything` (npm) and `tests/mcp/upstream.py`
//! (the Python SDK); the HTTP endpoint is an axum server in this process.
//!
//! Needs `.ci/mcp-deps.sh` (see `tests/mcp/mod.rs`); without it each test
//! prints why and passes, unless `PYCAGE_REQUIRE_ALL_TESTS=1`.
//!
//! Programs call bindings with keyword arguments (`await ns.tool(name=value)`)
//! or one dict, which the child sends as the same arguments object.

#[path = "mcp/mod.rs"]
mod deps;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use deps::{spawn_announcing, Deps};
use serde_json::{json, Value};

const SECRET: &str = "s3cret-7f1e0c";

fn pycage() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.stdin(Stdio::null());
    cmd
}

fn toml_str(s: &str) -> String {
    // A JSON string is a valid TOML basic string for what we write here.
    Value::String(s.to_string()).to_string()
}

fn toml_argv(argv: &[String]) -> String {
    format!("[{}]", argv.iter().map(|a| toml_str(a)).collect::<Vec<_>>().join(", "))
}

/// A bindings file with `everything` (stdio) and `up` (the Python upstream),
/// plus `extra` TOML.
fn bindings(dir: &Path, d: &Deps, up: &str, extra: &str) -> PathBuf {
    let everything = toml_argv(&[d.everything.display().to_string(), "stdio".into()]);
    let text = format!(
        "[[mcp]]\nglobal = \"everything\"\ncommand = {everything}\n\
         error_class = {{ name = \"EverythingError\", member_name_property = \"tool\" }}\n\n\
         [[mcp]]\nglobal = \"up\"\n{up}\nerror_class = {{ name = \"UpError\", member_name_property = \"tool\" }}\n\n{extra}"
    );
    let path = dir.join("bindings.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn stdio_up(d: &Deps, events: &Path) -> String {
    format!("command = {}", toml_argv(&d.upstream_argv(events)))
}

fn run_json(bindings: &Path, extra: &[&str], program: &str, envs: &[(&str, &str)]) -> (Value, Output) {
    let mut cmd = pycage();
    cmd.args(["run", "--isolation", "process", "--json", "--bindings"])
        .arg(bindings)
        .args(extra)
        .arg("-c")
        .arg(program);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout:?} stderr {}", String::from_utf8_lossy(&out.stderr)));
    (v, out)
}

#[track_caller]
fn value(r: &Value) -> &Value {
    assert!(r.get("error").is_none(), "run failed: {r:#}");
    &r["value"]
}

// ---- stubs ----

#[test]
fn stubs_of_real_servers_are_typed_python() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b = bindings(dir.path(), &d, &stdio_up(&d, &dir.path().join("ev")), "");
    let out = pycage().args(["stubs", "--bindings"]).arg(&b).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "from typing import Any, Literal, NotRequired, TypedDict, Unpack\n",
        "class GetStructuredContentResult(TypedDict):\n    temperature: float  # Temperature in celsius\n",
        "class EverythingError(Exception):\n",
        "class everything:\n",
        "    async def get_sum(*, a: float, b: float) -> Any:\n        \"\"\"Returns the sum of two numbers\n",
        "        Also reachable by its own name: `getattr(everything, \"get-sum\")`.\n",
        "    async def get_structured_content(*, location: Literal[\"New York\", \"Chicago\", \"Los Angeles\"]) -> GetStructuredContentResult:\n",
        "class Stock(TypedDict):\n    \"\"\"Units of one SKU per warehouse.\"\"\"\n    sku: str\n    total: int\n    warehouses: dict[str, int]\n",
        "    async def lookup(*, sku: str) -> Stock:\n",
        "    async def tag_item(*, item: str, tag: str = \"new\") -> tag_itemOutput:\n",
        "        Raises UpError (`.tool` names the function) when a call fails.\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // The stubs are Python a model (or a type checker) can parse.
    let mut py = Command::new(&d.python)
        .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut py.stdin.take().unwrap(), text.as_bytes()).unwrap();
    assert!(py.wait().unwrap().success());
}

// ---- pycage run with [[mcp]] bindings ----

#[test]
fn run_calls_mcp_tools_over_stdio_and_http() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&d.python);
    cmd.arg(Deps::script("upstream.py")).arg("--http");
    let (_server, port) = spawn_announcing(cmd, "PORT", false);
    let b = bindings(dir.path(), &d, &format!("url = \"http://127.0.0.1:{port}/mcp\""), "");
    let program = r#"
import asyncio, pydoc
s = await everything.get_structured_content({"location": "Chicago"})
by_name = await getattr(everything, "get-sum")({"a": 2, "b": 3})
by_spelling = await everything.get_sum(a=2, b=3)
stock = await up.lookup(sku="A-1")
try:
    await up.fail({"message": "no luck"})
except UpError as e:
    failed = [type(e).__name__, e.tool, str(e)]
try:
    await everything.echo({})
except EverythingError as e:
    invalid = [e.tool, "message" in str(e)]
xs = await asyncio.gather(*[up.add(a=i, b=1) for i in range(100)])
return {
    "structured": sorted(s),
    "by_name": by_name,
    "by_spelling": by_spelling,
    "stock": stock,
    "failed": failed,
    "invalid": invalid,
    "sum": sum(x["result"] for x in xs),
    "tagged": await up.tag_item(item="x"),
    "doc": "async def lookup(*, sku: str) -> Stock:" in up.lookup.__doc__,
    "help": pydoc.render_doc(everything.get_sum, renderer=pydoc.plaintext).count("async get_sum(*, a: float, b: float) -> Any"),
    "ns_help": "13 functions from the MCP server" in pydoc.render_doc(everything, renderer=pydoc.plaintext) or pydoc.render_doc(everything, renderer=pydoc.plaintext)[:300],
}
"#;
    let (r, _) = run_json(&b, &[], program, &[]);
    assert_eq!(
        value(&r),
        &json!({
            "structured": ["conditions", "humidity", "temperature"],
            "by_name": "The sum of 2 and 3 is 5.",
            "by_spelling": "The sum of 2 and 3 is 5.",
            "stock": {"sku": "A-1", "total": 14, "warehouses": {"berlin": 4, "porto": 10}},
            "failed": ["UpError", "fail", "Error executing tool fail: no luck"],
            "invalid": ["echo", true],
            "sum": 5050,
            "tagged": {"result": "x:new"},
            "doc": true,
            "help": 1,
            "ns_help": true,
        })
    );
}

#[test]
fn upstream_crash_reconnects() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b = bindings(dir.path(), &d, &stdio_up(&d, &dir.path().join("ev")), "");
    let program = r#"
before = (await up.pid())["result"]
try:
    await up.crash()
    crashed = "no error"
except UpError as e:
    crashed = str(e)
after = (await up.pid())["result"]
return [before != after, "Transport closed" in crashed or crashed, (await up.add({"a": 1, "b": 1}))["result"]]
"#;
    let (r, _) = run_json(&b, &[], program, &[]);
    assert_eq!(value(&r), &json!([true, true, 2]));
}

#[test]
fn secrets_reach_only_where_they_are_sent() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let up =
        format!("{}\nenv = {{ GIVEN = {{ env = \"PYCAGE_TEST_SECRET\" }} }}", stdio_up(&d, &dir.path().join("ev")));
    let b = bindings(dir.path(), &d, &up, "");
    let program = r#"
import json, os
env_of_everything = await everything.get_env()
return {
    "everything_sees_it": "SECRET" in json.dumps(env_of_everything),
    "given": (await up.env({"name": "GIVEN"}))["result"],
    "not_given": (await up.env({"name": "PYCAGE_TEST_SECRET"}))["result"],
    "program_sees_it": "SECRET" in json.dumps(dict(os.environ)),
    "everything_has_path": "PATH" in json.dumps(env_of_everything),
}
"#
    .replace("SECRET", SECRET);
    let (r, _) = run_json(&b, &[], &program, &[("PYCAGE_TEST_SECRET", SECRET)]);
    assert_eq!(
        value(&r),
        &json!({
            "everything_sees_it": false,
            "given": SECRET,
            "not_given": null,
            "program_sees_it": false,
            "everything_has_path": true,
        })
    );
}

// ---- pycage run with http bindings ----

/// What the test endpoint saw.
#[derive(Default)]
struct Seen {
    authorization: Vec<Option<String>>,
}

fn http_server() -> (String, std::sync::Arc<std::sync::Mutex<Seen>>) {
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = Arc::clone(&seen);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let app = axum::Router::new()
                .route(
                    "/echo",
                    post(move |headers: HeaderMap, body: String| {
                        let seen = Arc::clone(&s2);
                        async move {
                            let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
                            seen.lock().unwrap().authorization.push(auth);
                            let ct = headers.get("content-type").map(|v| v.to_str().unwrap().to_string());
                            format!("{{\"got\": {body}, \"content_type\": {}}}", json!(ct))
                        }
                    }),
                )
                .route("/fail", post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "x".repeat(5000)) }))
                .route("/text", post(|| async { "not json" }))
                .route(
                    "/slow",
                    post(|| async {
                        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                        "{}"
                    }),
                );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    (format!("http://{}", rx.recv().unwrap()), seen)
}

#[test]
fn http_bindings_post_json_and_keep_secrets_out_of_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let (base, seen) = http_server();
    let text = format!(
        r#"[[namespace]]
global = "api"
error_class = {{ name = "ApiError", member_name_property = "fn" }}
[namespace.functions]
echo = {{ http = "{base}/echo?key=querysecret", headers = {{ Authorization = {{ env = "API_TOKEN" }} }}, description = "Echo.", input_schema = {{ type = "object", properties = {{ q = {{ type = "string" }} }}, required = ["q"] }} }}
fail = {{ http = "{base}/fail" }}
text = {{ http = "{base}/text" }}
slow = {{ http = "{base}/slow", timeout_ms = 300 }}
"#
    );
    let b = dir.path().join("b.toml");
    std::fs::write(&b, text).unwrap();
    let program = r#"
import os, json
async def attempt(f, arg):
    try:
        return await f(arg)
    except ApiError as e:
        return [e.fn, str(e)]
return {
    "echo": await api.echo({"q": "hi", "n": 2**70}),
    "fail": await attempt(api.fail, {}),
    "text": await attempt(api.text, {}),
    "slow": await attempt(api.slow, {}),
    "env": "API_TOKEN" in os.environ or "Bearer" in json.dumps(dict(os.environ)),
    "doc": api.echo.__doc__.splitlines()[0],
}
"#;
    let token = format!("Bearer {SECRET}");
    let (r, out) = run_json(&b, &[], program, &[("API_TOKEN", &token)]);
    let v = value(&r);
    assert_eq!(
        v["echo"],
        json!({"got": {"q": "hi", "n": 1180591620717411303424u128}, "content_type": "application/json"})
    );
    let fail = format!(
        "POST {base}/fail answered 503 Service Unavailable: {} [body truncated at 2048 bytes]",
        "x".repeat(2048)
    );
    assert_eq!(v["fail"], json!(["fail", fail]));
    let t = v["text"][1].as_str().unwrap();
    assert!(t.starts_with(&format!("POST {base}/text answered 200 OK but the body is not one JSON document")), "{t}");
    assert_eq!(v["slow"], json!(["slow", format!("POST {base}/slow timed out after 300 ms")]));
    assert_eq!(v["env"], json!(false));
    assert_eq!(v["doc"], json!("async def echo(*, q: str) -> Any:"));
    // The header reached the endpoint; neither it nor the query string
    // appears anywhere the program or the user sees.
    assert_eq!(seen.lock().unwrap().authorization, vec![Some(token.clone())]);
    let everything = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!everything.contains(SECRET) && !everything.contains("querysecret"), "{everything}");
}

// ---- pycage mcp, driven by the Python SDK client ----

fn mcp_stdio(b: &Path, extra: &[&str]) -> Value {
    let mut argv = vec![env!("CARGO_BIN_EXE_pycage").to_string(), "mcp".into(), "--isolation".into(), "process".into()];
    argv.push("--bindings".into());
    argv.push(b.display().to_string());
    argv.extend(extra.iter().map(|s| s.to_string()));
    json!({ "command": argv })
}

fn run_python(code: &str) -> Value {
    json!({"op": "call", "tool": "run_python", "args": {"code": code}})
}

#[test]
fn code_mode_over_stdio() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("ev");
    let b = bindings(dir.path(), &d, &stdio_up(&d, &events), "");
    let hundred = "import asyncio\nprint('start')\nxs = await asyncio.gather(*[up.add({'a': i, 'b': i}) for i in range(100)])\nprint('done', len(xs))\nreturn sum(x['result'] for x in xs)";
    let cancel_code = "print('calling')\nawait up.slow({'seconds': 60, 'marker': 'c1'})";
    let plan = json!({
        "server": mcp_stdio(&b, &[]),
        "steps": [
            {"op": "list"},
            run_python(hundred),
            run_python("print('about to fail')\n{}['missing']"),
            {"op": "gather", "tool": "run_python", "args": [{"code": "return 1"}, {"code": "return 2"}, {"code": "return 3"}]},
            {"op": "cancel", "tool": "run_python", "args": {"code": cancel_code}, "when": {"path": events, "line": "start c1"}},
            {"op": "wait_event", "path": events, "line": "cancelled c1"},
            run_python("return 'still serving'"),
        ]
    });
    let r = d.drive(&plan, &[]);
    let tools = r[0]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "run_python");
    let desc = tools[0]["description"].as_str().unwrap();
    for want in
        ["Top-level `await` works", "async def lookup(*, sku: str) -> Stock:", "class everything:", "60 s wall clock"]
    {
        assert!(desc.contains(want), "missing {want:?} in {desc}");
    }
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["code"]));
    // Servers are named by what they call themselves, never by a command
    // line (which may hold a secret).
    assert!(desc.contains("8 functions from the MCP server `pycage-test-upstream`"), "{desc}");
    assert!(!desc.contains("upstream.py") && !desc.contains(&events.display().to_string()), "{desc}");
    assert_eq!(
        r[1],
        json!({
            "isError": false,
            "structured": {"value": 9900, "logs": ["start", "done 100"]},
            "text": "{\"value\":9900,\"logs\":[\"start\",\"done 100\"]}",
            "progress": ["start", "done 100"],
            "blocks": [],
        })
    );
    assert_eq!(r[2]["isError"], json!(true));
    assert_eq!(r[2]["structured"]["error"]["kind"], json!("exception"));
    assert!(r[2]["structured"]["error"]["message"].as_str().unwrap().ends_with("KeyError: 'missing'"), "{}", r[2]);
    assert_eq!(r[2]["progress"], json!(["about to fail"]));
    let values: Vec<&Value> = r[3]["results"].as_array().unwrap().iter().map(|x| &x["structured"]["value"]).collect();
    assert_eq!(values, vec![&json!(1), &json!(2), &json!(3)]);
    // Cancelling run_python aborted the run, which cancelled its upstream call.
    assert_eq!(r[4]["progress"], json!(["calling"]));
    assert_eq!(r[5]["found"], json!(true), "{}", r[5]);
    assert_eq!(r[6]["structured"]["value"], json!("still serving"));
}

#[test]
fn run_timeout_cancels_its_upstream_calls() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("ev");
    let b = bindings(dir.path(), &d, &stdio_up(&d, &events), "");
    let plan = json!({
        "server": mcp_stdio(&b, &["--wall-ms", "3000"]),
        "steps": [
            run_python("import asyncio\nawait asyncio.gather(up.slow({'seconds': 60, 'marker': 't1'}), up.slow({'seconds': 60, 'marker': 't2'}))"),
            {"op": "wait_event", "path": events, "line": "cancelled t1"},
            {"op": "wait_event", "path": events, "line": "cancelled t2"},
        ]
    });
    let r = d.drive(&plan, &[]);
    assert_eq!(r[0]["isError"], json!(true));
    assert_eq!(r[0]["structured"]["error"]["kind"], json!("timeout"), "{}", r[0]);
    assert_eq!(r[1]["found"], json!(true), "{}", r[1]);
    assert_eq!(r[2]["found"], json!(true), "{}", r[2]);
    let lines = r[2]["lines"].as_array().unwrap();
    assert!(!lines.iter().any(|l| l.as_str().unwrap().starts_with("done")), "{lines:?}");
}

#[test]
fn code_mode_over_http_with_exposed_tools() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("ev");
    let b = bindings(dir.path(), &d, &stdio_up(&d, &events), "");
    let mut cmd = pycage();
    cmd.args(["mcp", "--isolation", "process", "--expose-tools", "--http", "127.0.0.1:0", "--bindings"]).arg(&b);
    let (_server, url) = spawn_announcing(cmd, "pycage mcp: serving", true);
    let plan = json!({
        "server": {"url": url},
        "steps": [
            {"op": "list"},
            {"op": "call", "tool": "get-sum", "args": {"a": 2, "b": 3}},
            {"op": "call", "tool": "lookup", "args": {"sku": "B-7"}},
            run_python("print('x')\nreturn (await up.lookup({'sku': 'B-7'}))['total']"),
            {"op": "cancel", "tool": "run_python", "args": {"code": "print('go')\nawait up.slow({'seconds': 60, 'marker': 'h1'})"}, "when": {"path": events, "line": "start h1"}},
            {"op": "wait_event", "path": events, "line": "cancelled h1"},
        ]
    });
    let r = d.drive(&plan, &[]);
    let names: Vec<&str> = r[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for want in ["run_python", "get-sum", "echo", "lookup", "tag-item", "crash"] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let lookup = r[0]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "lookup").unwrap();
    assert_eq!(lookup["outputSchema"]["title"], json!("Stock"), "unchanged upstream schema: {lookup}");
    assert_eq!(r[1]["text"], json!("The sum of 2 and 3 is 5."));
    assert_eq!(r[2]["structured"], json!({"sku": "B-7", "total": 3, "warehouses": {"berlin": 3, "porto": 0}}));
    assert_eq!(r[3]["structured"], json!({"value": 3, "logs": ["x"]}));
    assert_eq!(r[3]["progress"], json!(["x"]));
    assert_eq!(r[5]["found"], json!(true), "{}", r[5]);
}

#[test]
fn small_description_lists_summaries_and_help_has_the_rest() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b = bindings(dir.path(), &d, &stdio_up(&d, &dir.path().join("ev")), "");
    let plan = json!({
        "server": mcp_stdio(&b, &["--max-description-bytes", "4000"]),
        "steps": [
            {"op": "list"},
            run_python("help(everything.get_sum)\nhelp(up)"),
        ]
    });
    let r = d.drive(&plan, &[]);
    let desc = r[0]["tools"][0]["description"].as_str().unwrap();
    assert!(desc.contains("\n- everything.get_sum(a, b) -> Any: Returns the sum of two numbers\n"), "{desc}");
    assert!(desc.contains("\n- up.lookup(sku) -> Stock: Stock of one SKU across warehouses.\n"), "{desc}");
    assert!(desc.contains("everything: calls raise EverythingError(Exception)"), "{desc}");
    assert!(!desc.contains("async def"), "{desc}");
    let logs = r[1]["structured"]["logs"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect::<Vec<_>>();
    let logs = logs.join("\n");
    assert!(logs.contains("async get_sum(*, a: float, b: float) -> Any"), "{logs}");
    assert!(logs.contains("8 functions from the MCP server"), "{logs}");
}

#[test]
fn named_sessions_keep_state_and_are_capped() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b = bindings(dir.path(), &d, &stdio_up(&d, &dir.path().join("ev")), "");
    let call = |code: &str, session: &str| json!({"op": "call", "tool": "run_python", "args": {"code": code, "session": session}});
    let plan = json!({
        "server": mcp_stdio(&b, &["--max-sessions", "2", "--wall-ms", "3000"]),
        "steps": [
            call("n = (await up.add(a=40, b=1))['result']", "s1"),
            call("n += 1\nreturn n", "s1"),
            call("return 'n' in globals()", "s2"),
            run_python("return 'n' in globals()"),
            call("return 1", "s3"),
            call("import time\ntime.sleep(30)", "s1"),
            call("return n", "s1"),
            call("return n", "s1"),
            call("return 'fresh'", "s3"),
        ]
    });
    let r = d.drive(&plan, &[]);
    assert_eq!(r[0]["isError"], json!(false), "{}", r[0]);
    assert_eq!(r[1]["structured"]["value"], json!(42));
    assert_eq!(r[2]["structured"]["value"], json!(false));
    assert_eq!(r[3]["structured"]["value"], json!(false));
    // Two sessions are open: a third name is refused, naming them (they
    // are this client's: stdio has one).
    assert_eq!(r[4]["isError"], json!(true));
    let refusal = r[4]["text"].as_str().unwrap();
    assert!(refusal.starts_with("the server holds 2 sessions"), "{}", r[4]);
    assert!(refusal.contains("reuse one of yours (s1, s2)"), "{}", r[4]);
    // A run that times out ends its session; the next call says so, the one
    // after starts s1 afresh (so s1 and s2 hold both slots again).
    assert_eq!(r[5]["structured"]["error"]["kind"], json!("timeout"), "{}", r[5]);
    assert!(r[6]["text"].as_str().unwrap().starts_with("the session `s1` has ended"), "{}", r[6]);
    assert_eq!(r[7]["structured"]["error"]["kind"], json!("exception"), "{}", r[7]);
    assert_eq!(r[8]["isError"], json!(true), "s1 and s2 hold both slots again: {}", r[8]);
}

/// Issue 41: an MCP session's cells sent back to back, each keeping 24 MiB
/// more, cannot outgrow `--memory-mb 64`: the cell that crosses it fails
/// (`worker-exit`, the memory budget named), and the next call says the
/// session ended.
#[test]
fn session_cells_cannot_outgrow_the_memory_budget() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let b = bindings(dir.path(), &d, &stdio_up(&d, &dir.path().join("ev")), "");
    let call = |code: &str| json!({"op": "call", "tool": "run_python", "args": {"code": code, "session": "grow"}});
    let mut steps = vec![call("held = []")];
    steps.extend((0..4).map(|_| call("held.append(b'x' * (24 << 20))\nreturn len(held)")));
    let plan = json!({"server": mcp_stdio(&b, &["--memory-mb", "64"]), "steps": steps});
    let r = d.drive(&plan, &[]);
    assert_eq!(r[0]["isError"], json!(false), "{}", r[0]);
    let failed = r.iter().position(|s| s["structured"]["error"]["kind"] == json!("worker-exit"));
    let failed = failed.unwrap_or_else(|| panic!("4 cells of 24 MiB fit a 64 MiB budget: {r:?}"));
    assert!(failed <= 3, "{r:?}");
    let message = r[failed]["structured"]["error"]["message"].as_str().unwrap();
    assert!(message.contains("memory budget"), "{message}");
    let next = r[failed + 1]["text"].as_str().unwrap();
    assert!(next.starts_with("the session `grow` has ended"), "{next}");
}
