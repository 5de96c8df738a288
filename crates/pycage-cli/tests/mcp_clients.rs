//! `pycage mcp` with more than one client, driven by the official Python
//! SDK client (`tests/mcp/client.py`), several at once: whose named
//! sessions are whose, slots per client and in total, runs admitted in
//! turn across clients, a client that goes away, the HTTP gate (`Origin`,
//! `Host`, bearer tokens, a non-loopback address), a clean session end, and
//! files and displays out of `run_python`.
//!
//! Needs `.ci/mcp-deps.sh` (see `tests/mcp/mod.rs`); without it each test
//! prints why and passes, unless `PYCAGE_REQUIRE_ALL_TESTS=1`.

#[allow(dead_code)] // code_mode.rs uses the rest
#[path = "mcp/mod.rs"]
mod deps;
mod support;

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
    serve_on("127.0.0.1:0", extra, envs)
}

/// `pycage mcp --http ADDR` with `extra` flags; its URL as announced.
fn serve_on(addr: &str, extra: &[&str], envs: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = pycage();
    cmd.args(["mcp", "--isolation", "process", "--http", addr]).args(extra);
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
    fn finish(self) -> Vec<Value> {
        self.finish_with_stderr().0
    }

    /// Waits for it; one JSON value per step, and what it wrote to stderr
    /// (the SDK's warnings).
    fn finish_with_stderr(mut self) -> (Vec<Value>, String) {
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut err = self.0 .0.stderr.take().unwrap();
        // Both pipes at once: a full stderr pipe must not stall the client.
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            err.read_to_string(&mut text).unwrap();
            text
        });
        self.0 .0.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        stderr.push_str(&reader.join().unwrap());
        let status = self.0 .0.wait().unwrap();
        assert!(status.success(), "client.py failed ({status}):\nstdout: {stdout}\nstderr: {stderr}");
        (stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect(), stderr)
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

/// One raw `initialize` POST; the status and the response's headers. A
/// `Host` among `headers` replaces the URL's.
fn raw_initialize(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let host = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("host")).map_or(addr, |(_, v)| *v);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case("host")) {
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
    // The MCP session's run is kept this long for a resume (none comes).
    let (_server, url) = serve(&[&flags[..], &["--resume-grace-seconds", "2"]].concat(), &[]);
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
                bad(json!({"invoice\u{202e}fdp.exe": "1"})),
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
            (4, "no invisible format characters (U+202E"),
            (5, "not base64"),
            (6, "over the limit of 4096 bytes per file"),
        ] {
            assert_eq!(r[i]["isError"], json!(true), "{}", r[i]);
            assert!(text(&r[i]).contains(want), "{want}: {}", r[i]);
        }
        for r in &r[7..9] {
            assert!(text(r).starts_with("`files` and `return_files` work only in calls without `session`"), "{r}");
        }
        // Without `return_files` there is no out/ to write to.
        assert!(text(&r[9]).contains("FileNotFoundError") && text(&r[9]).contains("'out/x'"), "{}", r[9]);
        assert_eq!(r[9]["blocks"], json!([]));
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
        (vec!["--http", "127.0.0.1:0", "--allow-host", "http://a"], vec![], "is not a host name"),
        (vec!["--allow-host", "a.example"], vec![], "need --http"),
        (vec!["--insecure-no-auth"], vec![], "need --http"),
        (
            vec!["--http", "127.0.0.1:0", "--insecure-no-auth", "--auth-token-env", "PYCAGE_TEST_TOKEN_A"],
            vec![("PYCAGE_TEST_TOKEN_A", TOKEN_A)],
            "contradict",
        ),
        (vec!["--max-concurrent-runs", "0"], vec![], "must be at least 1"),
        (vec!["--max-http-connections-per-client", "0"], vec![], "must be at least 1"),
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

// ---- runs admitted in turn ----

/// Polls until `path` has `n` lines starting with `prefix`.
fn wait_for_lines(path: &Path, prefix: &str, n: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let have = std::fs::read_to_string(path).map(|t| t.lines().filter(|l| l.starts_with(prefix)).count());
        if have.is_ok_and(|have| have >= n) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// One run at a time: client A queues a backlog of runs that wait for a
/// signal, then client B asks for one. B's run is admitted after at most
/// one of A's (clients take turns), not after A's whole backlog; each
/// queued call is told why it waits.
#[test]
fn runs_are_admitted_in_turn_across_clients() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (starts, go, queued) = (dir.path().join("starts"), dir.path().join("go"), dir.path().join("queued"));
    let envs = [("PYCAGE_TEST_TOKEN_A", TOKEN_A), ("PYCAGE_TEST_TOKEN_B", TOKEN_B)];
    let (_server, url) = serve(
        &[
            "--max-concurrent-runs",
            "1",
            "--auth-token-env",
            "PYCAGE_TEST_TOKEN_A",
            "--auth-token-env",
            "PYCAGE_TEST_TOKEN_B",
        ],
        &envs,
    );
    let with = |token: &str| json!({"url": url, "headers": {"Authorization": format!("Bearer {token}")}});
    let program = |who: &str, wait: bool| {
        let mut p = format!("open({:?}, 'a').write('{who}\\n')\n", starts.display().to_string());
        if wait {
            p.push_str(&format!(
                "import time\nwhile 'go' not in open({:?}).read():\n    time.sleep(0.02)\n",
                go.display().to_string()
            ));
        }
        p.push_str(&format!("return {who:?}"));
        p
    };
    std::fs::write(&go, "").unwrap();
    let backlog = 10;
    let signal = |line: &str| json!({"path": queued, "prefix": "queued", "line": line});
    let a = Client::start(
        &d,
        &json!({"server": with(TOKEN_A), "steps": [{"op": "gather", "tool": "run_python",
            "args": vec![json!({"code": program("A", true)}); backlog],
            "signals": (0..backlog).map(|i| signal(&format!("a{i}"))).collect::<Vec<_>>()}]}),
    );
    // One of A's runs holds the only place; the rest are queued.
    assert!(wait_for_lines(&queued, "a", backlog - 1), "A's backlog did not queue");
    assert!(wait_for_lines(&starts, "A", 1));
    let b = Client::start(
        &d,
        &json!({"server": with(TOKEN_B), "steps": [
            {"op": "call", "tool": "run_python", "args": {"code": program("B", false)}, "signal": signal("b")}]}),
    );
    assert!(wait_for_line(&queued, "b", Duration::from_secs(120)), "B was not queued");
    std::fs::write(&go, "go\n").unwrap();
    let (ra, rb) = (a.finish(), b.finish());
    assert_eq!(value(&rb[0]), &json!("B"));
    let results = ra[0]["results"].as_array().unwrap();
    assert!(results.iter().all(|r| value(r) == &json!("A")), "{results:?}");
    let queued_message = rb[0]["progress"][0].as_str().unwrap();
    assert!(
        queued_message.starts_with("queued: the server runs at most 1 program at once and all are busy"),
        "{queued_message}"
    );
    let order = std::fs::read_to_string(&starts).unwrap();
    let order: Vec<&str> = order.lines().collect();
    // The run in place, then one more of A's (A's turn came first), then
    // B, then the rest of A's backlog.
    assert_eq!(order.len(), backlog + 1, "{order:?}");
    assert_eq!(order[..3], ["A", "A", "B"], "admission order: {order:?}");
}

// ---- serving beyond loopback ----

/// The machine's first IPv4 address that is not loopback, on an interface
/// that is up (getifaddrs). None: fails under PYCAGE_REQUIRE_ALL_TESTS=1,
/// else says why.
fn own_address() -> Option<std::net::Ipv4Addr> {
    let mut found = None;
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list and points `list` at it; it is
    // freed once below.
    if unsafe { libc::getifaddrs(&mut list) } == 0 {
        let mut at = list;
        while !at.is_null() {
            // SAFETY: `at` is a node of the list getifaddrs made, not freed yet.
            let ifa = unsafe { &*at };
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            // SAFETY: a non-null ifa_addr points at a sockaddr.
            if up && !ifa.ifa_addr.is_null() && i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() && found.is_none() {
                    found = Some(ip);
                }
            }
            at = ifa.ifa_next;
        }
        // SAFETY: the list getifaddrs made, freed once.
        unsafe { libc::freeifaddrs(list) };
    }
    if found.is_none() {
        let why = "this machine has no IPv4 address but loopback (getifaddrs): cannot serve beyond loopback";
        assert!(
            std::env::var("PYCAGE_REQUIRE_ALL_TESTS").as_deref() != Ok("1"),
            "PYCAGE_REQUIRE_ALL_TESTS=1 and {why}"
        );
        #[allow(clippy::print_stderr)] // the test harness shows it: why this test did nothing
        {
            eprintln!("skipped: {why}");
        }
    }
    found
}

/// `pycage mcp --http 0.0.0.0:PORT` with a token: the SDK reaches it by
/// the machine's own address, in both protocols, and by a name allowed with
/// `--allow-host`; a name not allowed is refused with a message naming the
/// Host header and the flag.
#[test]
fn a_token_serves_the_sdk_on_the_machines_own_address() {
    let Some(d) = Deps::find() else { return };
    let Some(ip) = own_address() else { return };
    let envs = [("PYCAGE_TEST_TOKEN_A", TOKEN_A)];
    let flags = ["--auth-token-env", "PYCAGE_TEST_TOKEN_A", "--allow-host", "mcp.example"];
    let (_server, url) = serve_on("0.0.0.0:0", &flags, &envs);
    let url = url.replace("0.0.0.0", &ip.to_string());
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp").to_owned();
    let auth = format!("Bearer {TOKEN_A}");
    for mode in ["legacy", "auto"] {
        let server = json!({"url": url, "mode": mode, "headers": {"Authorization": auth}});
        let r = Client::start(&d, &json!({"server": server, "steps": [call("return 6 * 7")]})).finish();
        assert_eq!(value(&r[0]), &json!(42), "{mode}");
    }
    let named = |host: &str| json!({"url": url, "headers": {"Authorization": auth, "Host": host}});
    let r = Client::start(&d, &json!({"server": named(&format!("mcp.example:{port}")), "steps": [call("return 1")]}))
        .finish();
    assert_eq!(value(&r[0]), &json!(1));
    let r = Client::start(
        &d,
        &json!({"server": named(&format!("other.example:{port}")), "connect_may_fail": true, "steps": []}),
    )
    .finish();
    let error = r[0]["connect_error"].as_str().unwrap_or_else(|| panic!("connected: {}", r[0]));
    assert!(error.contains(&format!("the Host header names other.example:{port}")), "{error}");
    assert!(error.contains("start it with --allow-host other.example"), "{error}");
}

/// Without a token, an address that is not loopback is refused at start,
/// naming the flags; with `--insecure-no-auth` it serves (warning), and
/// still refuses a foreign Host (DNS rebinding).
#[test]
fn a_non_loopback_address_without_a_token_needs_insecure_no_auth() {
    let Some(ip) = own_address() else { return };
    let addr = format!("{ip}:0");
    let mut cmd = pycage();
    cmd.args(["mcp", "--isolation", "process", "--http", &addr]).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = Child(cmd.spawn().unwrap());
    let mut stderr = String::new();
    // Ends by itself, or it is serving: then the pipe stays open and this
    // read ends only when the child is killed (by the timeout below).
    let mut pipe = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    stderr.push_str(&reader.join().unwrap());
    assert_eq!(status.and_then(|s| s.code()), Some(2), "it should refuse to start: {stderr}");
    for want in ["is not a loopback address and no --auth-token-env is set", "--insecure-no-auth", "127.0.0.1"] {
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
    // Served for the time of two requests, on this machine's address only.
    let (server, url) = serve_on(&addr, &["--insecure-no-auth", "--max-http-connections", "2"], &[]);
    assert_eq!(raw_initialize(&url, &[]).0, 200);
    let (status, head) = raw_initialize(&url, &[("Host", "evil.example")]);
    drop(server);
    assert_eq!(status, 403, "{head}");
}

// ---- a clean end ----

/// A client that ends its MCP session (DELETE) gets the answer the SDK
/// expects: it logs no failure.
#[test]
fn ending_an_mcp_session_logs_no_failure() {
    let Some(d) = Deps::find() else { return };
    let (_server, url) = serve(&[], &[]);
    let (r, stderr) =
        Client::start(&d, &json!({"server": {"url": url, "mode": "legacy"}, "steps": [call("return 1")]}))
            .finish_with_stderr();
    assert_eq!(value(&r[0]), &json!(1));
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");
}

// ---- dropped connections ----

/// A stateless request (the 2026-07-28 protocol, no MCP session) whose
/// client goes away mid-run: its run is aborted at once, not after the
/// resume grace (an hour here).
#[test]
fn a_stateless_request_whose_connection_drops_aborts_at_once() {
    let Some(d) = Deps::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("ev");
    let b = upstream_bindings(dir.path(), &d, &events);
    let flags = ["--wall-ms", "300000", "--bindings", b.to_str().unwrap(), "--resume-grace-seconds", "3600"];
    let (_server, url) = serve(&flags, &[]);
    let program = "print('started')\nawait up.slow(seconds=240, marker='stateless')";
    let mut client = Client::start(&d, &json!({"server": {"url": url, "mode": "auto"}, "steps": [call(program)]}));
    assert!(wait_for_line(&events, "start stateless", Duration::from_secs(120)));
    client.0 .0.kill().unwrap();
    client.0 .0.wait().unwrap();
    assert!(wait_for_line(&events, "cancelled stateless", Duration::from_secs(120)), "the run was not aborted");
}

// ---- displays ----

/// A display whose `image/png` data is not base64 (a program's
/// `_repr_png_` may return any text) does not reach the client as an
/// image: it falls back to the display's text. A real PNG does.
#[test]
fn image_data_that_is_not_base64_is_not_an_image_block() {
    let Some(d) = Deps::find() else { return };
    let argv = [env!("CARGO_BIN_EXE_pycage"), "mcp", "--isolation", "process"];
    let program =
        "class Bad:\n    def _repr_png_(self): return 'not base64!'\n    def __repr__(self): return 'bad image'\n\
                   class Good:\n    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\n' + bytes(16)\n\
                   display(Bad())\ndisplay(Good())";
    let r = Client::start(&d, &json!({"server": {"command": argv}, "steps": [call(program)]})).finish();
    assert_eq!(r[0]["isError"], json!(false), "{}", r[0]);
    let blocks = r[0]["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "only the real PNG is an image: {blocks:?}");
    assert_eq!(blocks[0]["type"], json!("image"));
    assert_eq!(blocks[0]["data"], json!(b64(&[&b"\x89PNG\r\n\x1a\n"[..], &[0u8; 16]].concat())));
    assert!(text(&r[0]).ends_with("bad image"), "{}", r[0]);
    let shown: Vec<&Value> =
        r[0]["structured"]["displays"].as_array().unwrap().iter().map(|d| &d["shown_as"]).collect();
    assert_eq!(shown, [&json!("text/plain"), &json!("image/png")]);
}

/// `run_python`'s `type_check` through the official SDK client: a program
/// with a wrong keyword, a wrong argument type and `int + str` comes back
/// as one `type-error` at its own lines, with no call made; a correct one
/// runs; `pycage mcp --type-check` checks every call, and the description
/// tells the model what a `type-error` is.
#[test]
fn type_check_through_the_sdk_client() {
    let Some(d) = Deps::find() else { return };
    let Some(ty) = support::ty_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    std::fs::write(
        dir.path().join("stock.py"),
        format!(
            "import json, sys\nargs = json.load(sys.stdin)\nopen({:?}, 'a').write(args['sku'] + '\\n')\n\
             print(json.dumps({{'units': 7}}))\n",
            calls.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("bindings.toml"),
        "[[namespace]]\nglobal = \"tools\"\nerror_class = { name = \"ToolError\", member_name_property = \"tool\" }\n\
         [namespace.functions]\nstock = { command = [\"python3\", \"stock.py\"], description = \"Units of one SKU.\", \
         input_schema = { type = \"object\", properties = { warehouse = { type = \"string\" }, sku = { type = \"string\" } }, \
         required = [\"warehouse\", \"sku\"] }, output_schema = { type = \"object\", properties = { units = { type = \"integer\" } }, \
         required = [\"units\"] } }\n",
    )
    .unwrap();
    let bindings = dir.path().join("bindings.toml");
    let argv = |extra: &[&str]| -> Value {
        let mut v = vec![
            env!("CARGO_BIN_EXE_pycage").to_owned(),
            "mcp".into(),
            "--isolation".into(),
            "process".into(),
            "--bindings".into(),
            bindings.display().to_string(),
            "--ty".into(),
            ty.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        json!({"command": v})
    };
    let wrong = "units = await tools.stock(warehouse=\"berlin\", skus=\"A-1\")\n\
                 other = await tools.stock(warehouse=3, sku=\"A-2\")\n\
                 return \"units: \" + units[\"units\"]\n";
    let right = "r = await tools.stock(warehouse=\"berlin\", sku=\"A-1\")\nr[\"units\"] * 2\n";
    let r = d.drive(
        &json!({"server": argv(&[]), "steps": [
            {"op": "call", "tool": "run_python", "args": {"code": wrong, "type_check": true}},
            {"op": "call", "tool": "run_python", "args": {"code": right, "type_check": true}},
            {"op": "call", "tool": "run_python", "args": {"code": "s = 1\n", "session": "s1", "type_check": true}},
            {"op": "call", "tool": "run_python", "args": {"code": "s + \"x\"\n", "session": "s1", "type_check": true}},
        ]}),
        &[],
    );
    assert_eq!(r[0]["isError"], json!(true), "{}", r[0]);
    let error = &r[0]["structured"]["error"];
    assert_eq!(error["kind"], json!("type-error"), "{}", r[0]);
    let message = error["message"].as_str().unwrap();
    // A misspelt required keyword is two errors: `sku` missing, `skus` unknown.
    assert!(message.starts_with("the type check (ty) found 4 errors"), "{message}");
    assert!(
        message.contains("<program>:1:15: error[missing-argument] No argument provided for required parameter `sku`"),
        "{message}"
    );
    assert!(message.contains("<program>:1:47: error[unknown-argument] Argument `skus`"), "{message}");
    assert!(message.contains("<program>:2:27: error[invalid-argument-type]"), "{message}");
    assert!(message.contains("<program>:3:8: error[unsupported-operator]"), "{message}");
    assert_eq!(value(&r[1]), &json!(14));
    assert!(r[3]["structured"]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("<program>:1:1: error[unsupported-operator]"));
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "A-1\n", "only the correct program called the tool");
    // Checked on every call by the server; the description says so.
    let r = d.drive(
        &json!({"server": argv(&["--type-check"]), "steps": [
            {"op": "list"},
            {"op": "call", "tool": "run_python", "args": {"code": wrong}},
        ]}),
        &[],
    );
    let description = r[0]["tools"][0]["description"].as_str().unwrap();
    assert!(description.contains("Every program is type-checked (ty)"), "{description}");
    assert!(description.contains("a `type-error` result lists what to fix"), "{description}");
    assert_eq!(r[1]["structured"]["error"]["kind"], json!("type-error"), "{}", r[1]);
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "A-1\n");
}
