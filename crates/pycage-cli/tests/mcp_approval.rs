//! Approval gates in `pycage mcp` (docs/durable.md), driven by the official
//! Python SDK client (`tests/mcp/client.py`): a client that can be asked
//! (form elicitation, the initialize handshake) is asked inside the
//! `run_python` call; one that cannot (the stateless 2026-07-28 protocol)
//! gets a suspended run and a token for `resume_python`, which no other
//! client can use. The functions are commands that log each call, so the
//! tests see what ran, and how often.
//!
//! Needs `.ci/mcp-deps.sh` (see `tests/mcp/mod.rs`); without it each test
//! prints why and passes, unless `PYCAGE_REQUIRE_ALL_TESTS=1`.

#[allow(dead_code)] // the other MCP tests use the rest
#[path = "mcp/mod.rs"]
mod deps;

use std::path::Path;
use std::process::{Command, Stdio};

use deps::{spawn_announcing, Deps};
use serde_json::{json, Value};

const TOKEN_A: &str = "token-a-0123456789abcdef";
const TOKEN_B: &str = "token-b-0123456789abcdef";

const PROGRAM: &str = r#"
amount = await tools.lookup(invoice=7)
try:
    receipt = await tools.pay(to="ACME", amount=amount)
except ToolError as e:
    receipt = "refused: " + str(e)
return {"amount": amount, "receipt": receipt}
"#;

/// A bindings file in `dir`: `lookup` and `pay` (which needs approval),
/// commands that append their name to `calls.log` there.
fn setup(dir: &Path) -> String {
    let script = |name: &str, out: &str| {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(format!("{name}.sh"));
        std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\necho {name} >> calls.log\necho '{out}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script("lookup", "40");
    script("pay", "\"paid by the command\"");
    let bindings = dir.join("bindings.toml");
    std::fs::write(
        &bindings,
        "[[namespace]]\nglobal = \"tools\"\nerror_class = { name = \"ToolError\" }\n\n[namespace.functions]\n\
         lookup = { command = [\"./lookup.sh\"] }\npay = { command = [\"./pay.sh\"], approval = true }\n",
    )
    .unwrap();
    bindings.display().to_string()
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("calls.log")).unwrap_or_default()
}

fn stdio_server(bindings: &str) -> Value {
    json!([env!("CARGO_BIN_EXE_pycage"), "mcp", "--isolation", "process", "--bindings", bindings])
}

fn run_python() -> Value {
    json!({"op": "call", "tool": "run_python", "args": {"code": PROGRAM}})
}

fn token_of(step: usize) -> Value {
    json!({"$ref": [step, "structured", "resume_token"]})
}

fn resume(token: Value, approve: bool) -> Value {
    let mut args = json!({"token": token, "approve": approve});
    if !approve {
        args["message"] = json!("over budget");
    }
    json!({"op": "call", "tool": "resume_python", "args": args})
}

#[test]
fn a_client_that_cannot_be_asked_gets_a_token_and_resumes_with_it() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bindings = setup(dir.path());
    // The stateless protocol: the server cannot ask the client anything.
    let steps = json!([
        {"op": "list"},
        run_python(),
        run_python(),
        resume(token_of(1), true),
        resume(token_of(2), false),
        resume(token_of(1), true),
        resume(json!("a made-up token"), true),
    ]);
    let out = d.drive(&json!({"server": {"command": stdio_server(&bindings)}, "steps": steps}), &[]);
    let names: Vec<&str> = out[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run_python", "resume_python"]);
    let description = out[0]["tools"][0]["description"].as_str().unwrap();
    assert!(description.contains("These functions need a person's approval: tools.pay."), "{description}");
    for suspended in &out[1..3] {
        assert_eq!(suspended["isError"], false, "{suspended}");
        let s = &suspended["structured"];
        assert_eq!(s["error"]["kind"], "suspended", "{suspended}");
        assert_eq!(
            s["suspended"]["call"],
            json!({"global": "tools", "name": "pay", "args": {"to": "ACME", "amount": 40}})
        );
        assert!(suspended["text"].as_str().unwrap().contains("call resume_python with token"), "{suspended}");
    }
    assert_ne!(out[1]["structured"]["resume_token"], out[2]["structured"]["resume_token"]);
    assert_eq!(out[3]["isError"], false, "{}", out[3]);
    assert_eq!(out[3]["structured"]["value"], json!({"amount": 40, "receipt": "paid by the command"}));
    assert_eq!(out[4]["structured"]["value"], json!({"amount": 40, "receipt": "refused: over budget"}));
    for used in &out[5..7] {
        assert_eq!(used["isError"], true);
        assert!(used["text"].as_str().unwrap().contains("no run waits for approval under this token"), "{used}");
    }
    assert_eq!(
        calls(dir.path()),
        "lookup\nlookup\npay\n",
        "each lookup once (the replay answered it), pay on approval"
    );
}

#[test]
fn another_client_cannot_resume_a_clients_run() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bindings = setup(dir.path());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.stdin(Stdio::null())
        .args(["mcp", "--isolation", "process", "--http", "127.0.0.1:0", "--bindings", &bindings])
        .args(["--auth-token-env", "PYCAGE_TEST_TOKEN_A", "--auth-token-env", "PYCAGE_TEST_TOKEN_B"])
        .env("PYCAGE_TEST_TOKEN_A", TOKEN_A)
        .env("PYCAGE_TEST_TOKEN_B", TOKEN_B);
    let (_server, url) = spawn_announcing(cmd, "pycage mcp: serving", true);
    let with = |token: &str| json!({"url": url, "headers": {"Authorization": format!("Bearer {token}")}});
    let a = d.drive(&json!({"server": with(TOKEN_A), "steps": [run_python()]}), &[]);
    let token = a[0]["structured"]["resume_token"].clone();
    assert!(token.is_string(), "{}", a[0]);
    let b = d.drive(&json!({"server": with(TOKEN_B), "steps": [resume(token.clone(), true)]}), &[]);
    assert_eq!(b[0]["isError"], true);
    assert!(b[0]["text"].as_str().unwrap().contains("no run waits for approval under this token"), "{}", b[0]);
    assert_eq!(calls(dir.path()), "lookup\n", "the other client's attempt ran nothing");
    // The token is still the first client's (another connection of it).
    let a2 = d.drive(&json!({"server": with(TOKEN_A), "steps": [resume(token, true)]}), &[]);
    assert_eq!(a2[0]["structured"]["value"], json!({"amount": 40, "receipt": "paid by the command"}), "{}", a2[0]);
    assert_eq!(calls(dir.path()), "lookup\npay\n");
}

#[test]
fn a_client_that_can_be_asked_is_asked_inside_the_call() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bindings = setup(dir.path());
    let plan = json!({
        "server": {"command": stdio_server(&bindings), "mode": "legacy"},
        "elicit": [
            {"action": "accept", "content": {"approve": true}},
            {"action": "accept", "content": {"approve": false, "message": "not this month"}},
            {"action": "decline"},
        ],
        "steps": [run_python(), run_python(), run_python()],
    });
    let out = d.drive(&plan, &[]);
    assert_eq!(out[0]["isError"], false, "{}", out[0]);
    assert_eq!(out[0]["structured"]["value"], json!({"amount": 40, "receipt": "paid by the command"}));
    assert!(out[0]["structured"].get("resume_token").is_none(), "{}", out[0]);
    let asked = out[0]["elicited"][0].as_str().unwrap();
    assert!(asked.contains(r#"tools.pay({"to":"ACME","amount":40})"#), "{asked}");
    assert_eq!(out[1]["structured"]["value"]["receipt"], "refused: the user refused tools.pay: not this month");
    assert_eq!(out[2]["structured"]["value"]["receipt"], "refused: the user refused tools.pay");
    assert_eq!(calls(dir.path()), "lookup\npay\nlookup\nlookup\n", "pay ran once, when approved");
}
