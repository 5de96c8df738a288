//! `pycage mcp` with more than one client, driven by the official Python
//! SDK client (`tests/mcp/client.py`), several at once: whose named
//! sessions are whose, slots per client and in total, a client that goes
//! away, the HTTP gate (`Origin`, bearer tokens), and files in and out of
//! `run_python`.
//!
//! Needs `.ci/mcp-deps.sh` (see `tests/mcp/mod.rs`); without it each test
//! prints why and passes, unless `PYCAGE_REQUIRE_ALL_TESTS=1`.

#[allow(dead_code)] // code_mode.rs uses the rest
#[path = "mcp/mod.rs"]
mod deps;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deps::{spawn_announcing, Child, Deps};
use serde_json::{json, Value};

const TOKEN_A: &str = "token-a-0123456789abcdef";
const TOKEN_B: &str = "token-b-0123456789abcdef";

fn pycage() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.stdin(Stdio::null());
    cmd
}

/// `pycage mcp --http` on a free loopback port with `extra` flags; its URL.
fn serve(extra: &[&str], envs: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = pycage();
    cmd.args(["mcp", "--isolation", "process", "--http", "127.0.0.1:0"]).args(extra);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    spawn_announcing(cmd, "pycage mcp: serving", true)
}

/// A client.py process working through `plan` while the test goes on.
struct Client(Child);

impl Client {
    fn start(d: &Deps, plan: &Value) -> Client {
        let child = Command::new(&d.python)
            .arg(Deps::script("client.py"))
            .arg(plan.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Client(Child(child))
    }

    /// Waits for it; one JSON value per step.
    fn finish(mut self) -> Vec<Value> {
        let mut stdout = String::new();
        let mut stderr = String::new();
        self.0 .0.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        self.0 .0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        let status = self.0 .0.wait().unwrap();
        assert!(status.success(), "client.py failed ({status}):\nstdout: {stdout}\nstderr: {stderr}");
        stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

fn call(code: &str) -> Value {
    json!({"op": "call", "tool": "run_python", "args": {"code": code}})
}

fn call_in(session: &str, code: &str) -> Value {
    json!({"op": "call", "tool": "run_python", "args": {"code": code, "session": session}})
}

fn signal(path: &Path, line: &str) -> Value {
    json!({"op": "signal", "path": path, "line": line})
}

fn wait(path: &Path, line: &str) -> Value {
    json!({"op": "wait_event", "path": path, "line": line, "timeout": 120})
}

#[track_caller]
fn text(r: &Value) -> &str {
    r["text"].as_str().unwrap_or_else(|| panic!("no text in {r}"))
}

#[track_caller]
fn value(r: &Value) -> &Value {
    assert_eq!(r["isError"], json!(false), "{r}");
    &r["structured"]["value"]
}

/// Polls until `path` has the line `line`.
fn wait_for_line(path: &Path, line: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|t| t.lines().any(|l| l == line)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Waits until `path` stops growing for a second (its writer is gone);
/// false if it is still growing after a minute.
fn stops_growing(path: &Path) -> bool {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let before = size();
        std::thread::sleep(Duration::from_secs(1));
        if size() == before {
            return true;
        }
    }
    false
}

/// A program that appends `beat` to `path` every 0.1 s from a thread, in
/// the background of whatever follows.
fn heartbeat(path: &Path) -> String {
    format!(
        "import threading, time\n\
         def _beat():\n    while True:\n        with open({p:?}, 'a') as f:\n            f.write('beat\\n')\n        time.sleep(0.1)\n\
         threading.Thread(target=_beat, daemon=True).start()\n",
        p = path.display().to_string()
    )
}

/// One raw `initialize` POST; the status and the response's headers.
fn raw_initialize(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the headers: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&got).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head)
}

// ---- whose sessions are whose ----

/// Two clients with MCP sessions (the initialize handshake), connected at
/// once: B's `work` is its own, A's globals and function stay A's, and no
/// refusal names the other client's sessions.
#[test]
fn two_clients_cannot_reach_each_others_sessions() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sync = dir.path().join("sync");
    let (_server, url) = serve(&["--max-sessions-per-client", "2", "--max-sessions", "3"], &[]);
    let server = json!({"url": url, "mode": "legacy"});
    let a = Client::start(
        &d,
        &json!({"server": server, "steps": [
            call_in("work", "secret = 'A-secret'\ndef f():\n    return 'A'"),
            call_in("notes", "x = 1"),
            signal(&sync, "a-ready"),
            wait(&sync, "b-done"),
            call_in("work", "return [secret, f()]"),
            call_in("third", "return 3"),
        ]}),
    );
    let b = Client::start(
        &d,
        &json!({"server": server, "steps": [
            wait(&sync, "a-ready"),
            call_in("work", "return ['secret' in globals(), 'f' in globals()]"),
            call_in("work", "secret = 'B-secret'\ndef f():\n    return 'B'"),
            call_in("b2", "return 2"),
            call_in("notes", "return 'x' in globals()"),
            signal(&sync, "b-done"),
        ]}),
    );
    let (ra, rb) = (a.finish(), b.finish());
    assert_eq!(ra[0]["structured"]["session"], json!("work"), "{}", ra[0]);
    // B's `work` is a new, empty session of its own.
    assert_eq!(value(&rb[1]), &json!([false, false]));
    assert_eq!(rb[2]["isError"], json!(false), "{}", rb[2]);
    // A's state is untouched by B's assignments.
    assert_eq!(value(&ra[4]), &json!(["A-secret", "A"]));
    // B: the server's total (A 2 + B 1) is reached; the refusal names B's
    // own session only.
    let refusal = text(&rb[3]);
    assert_eq!(rb[3]["isError"], json!(true));
    assert!(refusal.starts_with("the server holds 3 sessions"), "{refusal}");
    assert!(refusal.contains("reuse one of yours (work), run") && !refusal.contains("notes"), "{refusal}");
    // `notes` is A's: for B it would be a new one, refused for the same reason.
    assert!(text(&rb[4]).starts_with("the server holds 3 sessions"), "{}", rb[4]);
    // A: its own slots are full; the refusal names its own sessions only.
    let refusal = text(&ra[5]);
    assert!(refusal.starts_with("2 sessions are open for this client"), "{refusal}");
    assert!(refusal.contains("(notes, work)") && !refusal.contains("b2"), "{refusal}");
}

/// With bearer tokens, a request without an MCP session belongs to its
/// token: two connections with token A share A's sessions; B (and an MCP
/// session, even one of A's token) sees none of them.
#[test]
fn bearer_tokens_are_required_and_own_their_sessions() {
    let Some(d) = Deps::find() else { return };
    let envs = [("PYCAGE_TEST_TOKEN_A", TOKEN_A), ("PYCAGE_TEST_TOKEN_B", TOKEN_B)];
    let (_server, url) =
        serve(&["--auth-token-env", "PYCAGE_TEST_TOKEN_A", "--auth-token-env", "PYCAGE_TEST_TOKEN_B"], &envs);
    // Raw requests: no token, a wrong one, a prefix, then a right one.
    let (status, head) = raw_initialize(&url, &[]);
    assert_eq!(status, 401, "{head}");
    assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"), "{head}");
    for wrong in ["Bearer token-a-0123456789abcdeX", "Bearer token-a-0123456789abcde", "Basic dG9rZW4="] {
        assert_eq!(raw_initialize(&url, &[("Authorization", wrong)]).0, 401, "{wrong}");
    }
    assert_eq!(raw_initialize(&url, &[("Authorization", &format!("Bearer {TOKEN_A}"))]).0, 200);
    // The SDK client without a token cannot connect.
    let r = Client::start(&d, &json!({"server": {"url": url}, "connect_may_fail": true, "steps": [call("return 1")]}))
        .finish();
    assert!(
        r[0]["connect_error"].as_str().is_some_and(|e| e.contains("Unauthorized: a valid bearer token")),
        "{}",
        r[0]
    );
    let with = |token: &str, mode: &str| json!({"url": url, "mode": mode, "headers": {"Authorization": format!("Bearer {token}")}});
    let r = Client::start(&d, &json!({"server": with(TOKEN_A, "auto"), "steps": [call_in("work", "secret = 'A'")]}))
        .finish();
    assert_eq!(r[0]["structured"]["session"], json!("work"), "{}", r[0]);
    // Another connection with token A is the same client; B is not.
    let a2 = Client::start(&d, &json!({"server": with(TOKEN_A, "auto"), "steps": [call_in("work", "return secret")]}));
    let b = Client::start(
        &d,
        &json!({"server": with(TOKEN_B, "auto"), "steps": [call_in("work", "return 'secret' in globals()")]}),
    );
    let legacy_a = Client::start(
        &d,
        &json!({"server": with(TOKEN_A, "legacy"), "steps": [call_in("work", "return 'secret' in globals()")]}),
    );
    assert_eq!(value(&a2.finish()[0]), &json!("A"));
    assert_eq!(value(&b.finish()[0]), &json!(false));
    assert_eq!(value(&legacy_a.finish()[0]), &json!(false), "an MCP session is its own client");
}

/// Without an MCP session and without a token, nobody can be told apart:
/// sessions get unguessable names from the server, and only those reach them.
#[test]
fn anonymous_sessions_get_minted_names() {
    let Some(d) = Deps::find() else { return };
    let (_server, url) = serve(&[], &[]);
    let server = json!({"url": url});
    let r = Client::start(&d, &json!({"server": server, "steps": [call_in("work", "secret = 41")]})).finish();
    let minted = r[0]["structured"]["session"].as_str().unwrap().to_owned();
    assert!(minted.starts_with("work-") && minted.len() == "work-".len() + 22, "{minted}");
    assert!(text(&r[0]).contains("Pass exactly that name as `session`"), "{}", r[0]);
    let r = Client::start(
        &d,
        &json!({"server": server, "steps": [
            call_in("work", "return 'secret' in globals()"),
            call_in(&minted, "secret += 1\nreturn secret"),
        ]}),
    )
    .finish();
    // `work` alone is a new session (with a new name); the minted name is the old one.
    assert_eq!(value(&r[0]), &json!(false));
    assert_ne!(r[0]["structured"]["session"], json!(minted));
    assert_eq!(value(&r[1]), &json!(42));
    assert_eq!(r[1]["structured"]["session"], json!(minted));
}

// ---- a client that goes away ----

fn upstream_bindings(dir: &Path, d: &Deps, events: &Path) -> PathBuf {
    let argv: Vec<String> = d.upstream_argv(events);
    let argv = argv.iter().map(|a| Value::String(a.clone()).to_string()).collect::<Vec<_>>().join(", ");
    let path = dir.join("bindings.toml");
    // Calls may outlast every wait of the tests: only an abort ends them early.
    std::fs::write(&path, format!("[[mcp]]\nglobal = \"up\"\ncommand = [{argv}]\ntimeout_ms = 600000\n")).unwrap();
    path
}

/// A client killed in the middle of `run_python` (stdio, an MCP session
/// over HTTP, a stateless HTTP request): its run is aborted long before its
/// wall clock, which cancels the run's upstream call and ends its process.
#[test]
fn a_client_that_disconnects_aborts_its_run() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("ev");
    let b = upstream_bindings(dir.path(), &d, &events);
    let flags = ["--wall-ms", "300000", "--cpu-seconds", "300", "--bindings", b.to_str().unwrap()];
    let (_server, url) = serve(&flags, &[]);
    let mut stdio =
        vec![env!("CARGO_BIN_EXE_pycage").to_string(), "mcp".into(), "--isolation".into(), "process".into()];
    stdio.extend(flags.iter().map(|s| s.to_string()));
    for (i, server) in
        [json!({"command": stdio}), json!({"url": url, "mode": "legacy"}), json!({"url": url, "mode": "auto"})]
            .into_iter()
            .enumerate()
    {
        let beats = dir.path().join(format!("beats{i}"));
        let marker = format!("gone{i}");
        let program = format!("{}print('started')\nawait up.slow(seconds=240, marker={marker:?})", heartbeat(&beats));
        let mut client = Client::start(&d, &json!({"server": server, "steps": [call(&program)]}));
        assert!(wait_for_line(&events, &format!("start {marker}"), Duration::from_secs(120)), "{server}");
        assert!(wait_for_line(&beats, "beat", Duration::from_secs(60)), "{server}");
        client.0 .0.kill().unwrap();
        client.0 .0.wait().unwrap();
        if i > 0 {
            // Over HTTP the server lives on: the run was aborted, and its
            // upstream call cancelled with it (stdio: the server exits).
            assert!(wait_for_line(&events, &format!("cancelled {marker}"), Duration::from_secs(120)), "{server}");
        }
        assert!(stops_growing(&beats), "the run's process still writes: {server}");
        let lines = std::fs::read_to_string(&events).unwrap();
        assert!(!lines.contains(&format!("done {marker}")), "{lines}");
    }
}

/// An MCP session that ends (the client closes it) closes its named
/// sessions: their processes are gone.
#[test]
fn a_closed_mcp_session_closes_its_sessions() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let beats = dir.path().join("beats");
    let (_server, url) = serve(&[], &[]);
    let r = Client::start(
        &d,
        &json!({"server": {"url": url, "mode": "legacy"}, "steps": [
            call_in("work", &format!("{}x = 1", heartbeat(&beats))),
            wait(&beats, "beat"),
        ]}),
    )
    .finish();
    assert_eq!(r[0]["isError"], json!(false), "{}", r[0]);
    assert_eq!(r[1]["found"], json!(true));
    // The client has exited (closing its MCP session); the thread's process is gone.
    assert!(stops_growing(&beats));
}

// ---- the HTTP gate ----

/// `Origin`: absent and loopback pass; another is 403 unless allowed.
#[test]
fn foreign_origins_are_refused() {
    let Some(d) = Deps::find() else { return };
    let (_server, url) = serve(&["--allow-origin", "https://app.example.com"], &[]);
    assert_eq!(raw_initialize(&url, &[]).0, 200);
    for ok in ["http://localhost:5173", "http://127.0.0.1", "https://app.example.com"] {
        assert_eq!(raw_initialize(&url, &[("Origin", ok)]).0, 200, "{ok}");
    }
    for foreign in ["https://evil.example", "https://app.example.com:8443", "http://app.example.com", "null"] {
        let (status, head) = raw_initialize(&url, &[("Origin", foreign)]);
        assert_eq!(status, 403, "{foreign}: {head}");
    }
    let r = Client::start(
        &d,
        &json!({"server": {"url": url, "headers": {"Origin": "https://evil.example"}}, "connect_may_fail": true, "steps": []}),
    )
    .finish();
    assert!(r[0]["connect_error"].as_str().is_some_and(|e| e.contains("Forbidden: this Origin")), "{}", r[0]);
}

// ---- files ----

const PNG_BYTES: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0xff, 0x10];

fn b64(bytes: &[u8]) -> String {
    // Small and exact: the test's own encoder, checked by the server's decoder.
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

const FILES_PROGRAM: &str = "import os\n\
    data = open('data.csv').read()\n\
    raw = open('image.bin', 'rb').read()\n\
    os.mkdir('out/sub')\n\
    open('out/sum.txt', 'w').write(str(sum(int(x) for x in data.split(','))))\n\
    open('out/sub/copy.png', 'wb').write(raw)\n\
    open('out/big.csv', 'w').write('x' * 5000)\n\
    os.symlink('/etc/passwd', 'out/link')\n\
    read_only = os.stat('data.csv').st_mode & 0o222 == 0 or not os.access('data.csv', os.W_OK)\n\
    return [sorted(os.listdir('.')), read_only]";

fn files_call() -> Value {
    json!({"op": "call", "tool": "run_python", "args": {"code": FILES_PROGRAM, "return_files": true, "files": {
        "data.csv": "1,2,3",
        "image.bin": {"base64": b64(PNG_BYTES)},
    }}})
}

fn check_files_result(r: &Value, isolation: &str) {
    assert_eq!(value(r), &json!([["data.csv", "image.bin", "out"], true]), "{isolation}: read-only");
    let output = &r["structured"]["output"];
    let mut returned: Vec<&str> =
        output["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    returned.sort();
    assert_eq!(returned, ["sub/copy.png", "sum.txt"], "{isolation}: {output}");
    let mut skipped: Vec<&str> =
        output["skipped"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    skipped.sort();
    assert_eq!(skipped, ["big.csv", "link"], "{isolation}: {output}");
}

/// Files in (text and base64) and out (text and binary, embedded under the
/// cap; symlinks and files over the cap listed as skipped), in both
/// isolations; bad names and files with `session` refused; out/ only on
/// request.
#[test]
fn files_in_and_out_embedded() {
    let Some(d) = Deps::find() else { return };
    for isolation in ["process", "sandbox"] {
        let argv = [
            env!("CARGO_BIN_EXE_pycage"),
            "mcp",
            "--isolation",
            isolation,
            "--max-embedded-bytes",
            "1000",
            "--max-input-file-bytes",
            "4096",
        ];
        let bad =
            |files: Value| json!({"op": "call", "tool": "run_python", "args": {"code": "return 1", "files": files}});
        let r = Client::start(
            &d,
            &json!({"server": {"command": argv}, "steps": [
                files_call(),
                bad(json!({"../x": "1"})),
                bad(json!({"a/b": "1"})),
                bad(json!({"out": "1"})),
                bad(json!({"x": {"base64": "not base64!"}})),
                bad(json!({"x": "y".repeat(5000)})),
                {"op": "call", "tool": "run_python", "args": {"code": "return 1", "files": {"x": "1"}, "session": "s"}},
                {"op": "call", "tool": "run_python", "args": {"code": "return 1", "return_files": true, "session": "s"}},
                call("_ = open('out/x', 'w').write('y')"),
            ]}),
        )
        .finish();
        check_files_result(&r[0], isolation);
        let blocks = r[0]["blocks"].as_array().unwrap();
        let by_uri = |uri: &str| {
            blocks.iter().find(|b| b["resource"]["uri"] == uri).unwrap_or_else(|| panic!("{uri}: {blocks:?}"))
        };
        assert_eq!(
            by_uri("pycage://out/sum.txt")["resource"],
            json!({"uri": "pycage://out/sum.txt", "mimeType": "text/plain", "text": "6"})
        );
        assert_eq!(
            by_uri("pycage://out/sub/copy.png")["resource"],
            json!({"uri": "pycage://out/sub/copy.png", "mimeType": "image/png", "blob": b64(PNG_BYTES)})
        );
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        for (i, want) in [
            (1, "`..`"),
            (2, "no `/`"),
            (3, "`out` is where"),
            (4, "not base64"),
            (5, "over the limit of 4096 bytes per file"),
        ] {
            assert_eq!(r[i]["isError"], json!(true), "{}", r[i]);
            assert!(text(&r[i]).contains(want), "{want}: {}", r[i]);
        }
        for r in &r[6..8] {
            assert!(text(r).starts_with("`files` and `return_files` work only in calls without `session`"), "{r}");
        }
        // Without `return_files` there is no out/ to write to.
        assert!(text(&r[8]).contains("FileNotFoundError") && text(&r[8]).contains("'out/x'"), "{}", r[8]);
        assert_eq!(r[8]["blocks"], json!([]));
    }
}

/// With `--output-dir`, out/ is copied under it and comes back as links.
#[test]
fn files_out_as_links_with_an_output_dir() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let argv = [
        env!("CARGO_BIN_EXE_pycage"),
        "mcp",
        "--isolation",
        "process",
        "--output-dir",
        out.to_str().unwrap(),
        "--max-output-bytes",
        "1000",
    ];
    let r = Client::start(&d, &json!({"server": {"command": argv}, "steps": [files_call(), files_call()]})).finish();
    let mut runs = Vec::new();
    for r in &r {
        check_files_result(r, "process");
        let links = r["blocks"].as_array().unwrap();
        assert_eq!(links.len(), 2, "{links:?}");
        for link in links {
            assert_eq!(link["type"], json!("resource_link"), "{link}");
            let path = PathBuf::from(link["uri"].as_str().unwrap().strip_prefix("file://").unwrap());
            assert!(path.starts_with(&out), "{link}");
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(link["size"], json!(bytes.len()));
            match link["name"].as_str().unwrap() {
                "sum.txt" => assert_eq!(bytes, b"6"),
                "sub/copy.png" => assert_eq!((bytes.as_slice(), &link["mimeType"]), (PNG_BYTES, &json!("image/png"))),
                other => panic!("{other}"),
            }
            runs.push(path.strip_prefix(&out).unwrap().components().next().unwrap().as_os_str().to_owned());
        }
    }
    runs.dedup();
    assert_eq!(runs.len(), 2, "each run has its own directory: {runs:?}");
}

/// As root, files through `pycage mcp` again as `nobody` (sandbox).
#[test]
fn files_for_an_unprivileged_user() {
    let Some(d) = Deps::find() else { return };
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("pycage-mcp-nobody-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let tmp = dir.path().display().to_string();
    let argv = [
        "setpriv",
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        &format!("TMPDIR={tmp}"),
        &format!("HOME={tmp}"),
        env!("CARGO_BIN_EXE_pycage"),
        "mcp",
        "--python",
        "/usr/bin/python3",
        "--max-embedded-bytes",
        "1000",
    ];
    let r = Client::start(&d, &json!({"server": {"command": argv}, "steps": [files_call()]})).finish();
    check_files_result(&r[0], "sandbox as nobody");
    assert_eq!(r[0]["blocks"].as_array().unwrap().len(), 2);
}

// ---- flags ----

#[test]
fn misuse_of_the_new_flags_is_exit_2() {
    for (args, envs, want) in [
        (vec!["--session-idle-seconds", "0"], vec![], "must be at least 1"),
        (vec!["--max-sessions-per-client", "0"], vec![], "must be at least 1"),
        (vec!["--auth-token-env", "PYCAGE_TEST_TOKEN_A"], vec![("PYCAGE_TEST_TOKEN_A", TOKEN_A)], "need --http"),
        (vec!["--http", "127.0.0.1:0", "--auth-token-env", "PYCAGE_TEST_UNSET"], vec![], "is not set"),
        (vec!["--http", "127.0.0.1:0", "--auth-token-env", "T"], vec![("T", "short")], "shorter than 16 bytes"),
        (vec!["--http", "127.0.0.1:0", "--allow-origin", "example.com"], vec![], "is not an origin"),
    ] {
        let mut cmd = pycage();
        cmd.arg("mcp").args(&args).env_remove("PYCAGE_TEST_UNSET");
        for (k, v) in &envs {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        // A token is never repeated back.
        assert!(!stderr.contains(TOKEN_A), "{stderr}");
    }
}
