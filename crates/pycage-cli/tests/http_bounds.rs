//! What a peer of `pycage mcp --http` can hold, over real loopback sockets
//! against the real binary: connections beyond `--max-http-connections`
//! are refused with 503, connections that send no complete request
//! headers (or sit idle after a response) are closed after
//! `--http-header-timeout-seconds` while a response in flight is never cut,
//! an `initialize` beyond `--max-mcp-sessions` is refused with 503, and a
//! run beyond `--max-runs-per-client` is refused at once.
//!
//! Plain HTTP/1.1 over `TcpStream`: no MCP client needed (a run's Python
//! is the only dependency, in one test).

#[allow(dead_code)] // the MCP client tests use the rest
#[path = "mcp/mod.rs"]
mod deps;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deps::{spawn_announcing, Child};
use serde_json::{json, Value};

const TOKEN_VAR: &str = "PYCAGE_HTTP_BOUNDS_TOKEN";
const TOKEN: &str = "bounds-0123456789abcdef";

/// Long enough for any answer on a loaded 2-core machine; only a hang
/// reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

/// `pycage mcp --http` on a free loopback port with a bearer token and
/// `extra` flags; its `host:port`.
fn serve(extra: &[&str]) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.stdin(Stdio::null())
        .args(["mcp", "--isolation", "process", "--http", "127.0.0.1:0", "--auth-token-env", TOKEN_VAR])
        .args(extra)
        .env(TOKEN_VAR, TOKEN);
    let (child, url) = spawn_announcing(cmd, "pycage mcp: serving", true);
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    (child, addr)
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s
}

/// Reads until the peer closes; a reset counts as a close.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("no close within {PATIENCE:?}: {e} (read so far: {})", String::from_utf8_lossy(&got)),
        }
    }
}

/// One HTTP/1.1 request on `s`, its body JSON; with `close`, asks the
/// server to close the connection after the answer.
fn send(s: &mut TcpStream, addr: &str, method: &str, headers: &[(&str, &str)], body: Option<&Value>, close: bool) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if close {
        request.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    s.write_all(request.as_bytes()).unwrap();
}

/// An answer: the status, the head (lower-cased names) and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn parse(raw: &[u8]) -> Answer {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
        Answer { status, head: head.to_ascii_lowercase(), body: body.to_owned() }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
    }

    /// The message of a JSON-RPC error body.
    fn message(&self) -> String {
        let v: Value = serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body));
        v["error"]["message"].as_str().unwrap_or_else(|| panic!("no error message in {v}")).to_owned()
    }
}

/// One request on a new connection, answered in full.
fn request(addr: &str, method: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Answer {
    let mut s = connect(addr);
    send(&mut s, addr, method, headers, body, true);
    Answer::parse(&read_to_close(&mut s))
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bounds", "version": "0"}}})
}

/// An authenticated `initialize`.
fn initialize(addr: &str) -> Answer {
    request(addr, "POST", &[("Authorization", &bearer())], Some(&initialize_body()))
}

/// Connections beyond the cap get a 503 at once, before authentication;
/// the idle ones within it are closed by the header timeout, after which
/// an authenticated client is answered.
#[test]
fn connections_beyond_the_cap_are_refused_and_idle_ones_closed() {
    let (_server, addr) = serve(&["--max-http-connections", "2", "--http-header-timeout-seconds", "1"]);
    // The server accepts in connection order: these two take both places.
    let mut idle = connect(&addr);
    let mut half = connect(&addr);
    half.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    let mut beyond: Vec<TcpStream> = (0..3).map(|_| connect(&addr)).collect();
    for s in &mut beyond {
        let answer = Answer::parse(&read_to_close(s));
        assert_eq!(answer.status, 503, "{}", answer.head);
        let message = answer.message();
        assert!(message.contains("2 HTTP connections open, the most it serves at once"), "{message}");
    }
    assert_eq!(read_to_close(&mut idle), b"", "an idle connection got an answer");
    let _ = read_to_close(&mut half);
    // Their places are free once they are closed.
    let answer = initialize(&addr);
    assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
    assert!(answer.header("mcp-session-id").is_some(), "{}", answer.head);
}

/// Half-sent headers, and a keep-alive connection idle after its answer,
/// are closed after the header timeout (never before it).
#[test]
fn slow_headers_and_idle_keep_alive_are_closed_after_the_header_timeout() {
    let (_server, addr) = serve(&["--http-header-timeout-seconds", "1"]);
    let mut half = connect(&addr);
    let start = Instant::now();
    half.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl").unwrap();
    let got = read_to_close(&mut half);
    assert!(start.elapsed() >= Duration::from_millis(900), "closed after {:?}", start.elapsed());
    assert!(!String::from_utf8_lossy(&got).contains(" 200 "), "{}", String::from_utf8_lossy(&got));

    // A whole request (refused without a token) on a keep-alive connection:
    // answered, then the connection is closed once idle.
    let mut kept = connect(&addr);
    send(&mut kept, &addr, "POST", &[], Some(&initialize_body()), false);
    let raw = read_to_close(&mut kept);
    let answer = Answer::parse(&raw);
    assert_eq!(answer.status, 401, "{}", answer.head);
    assert_ne!(answer.header("connection"), Some("close"), "{}", answer.head);
}

/// An SSE answer that takes longer than the header timeout is not cut.
#[test]
fn a_response_in_flight_outlives_the_header_timeout() {
    let (_server, addr) = serve(&["--http-header-timeout-seconds", "1"]);
    let auth = bearer();
    let answer = initialize(&addr);
    assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
    let id = answer.header("mcp-session-id").unwrap().to_owned();
    let session = [("Authorization", auth.as_str()), ("Mcp-Session-Id", &id), ("MCP-Protocol-Version", "2025-11-25")];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(request(&addr, "POST", &session, Some(&initialized)).status, 202);
    // Keep-alive, as SDK clients ask: the header timer must not run while
    // the answer is being written.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_python", "arguments": {"code": "import time\ntime.sleep(2.5)\nreturn 6 * 7"}}});
    let mut s = connect(&addr);
    send(&mut s, &addr, "POST", &session, Some(&call), false);
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&got).contains(r#""id":2"#) {
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&got)));
        assert!(n > 0, "closed before the result: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let event = text.lines().find(|l| l.contains(r#""id":2"#)).unwrap();
    let data: Value = serde_json::from_str(event.trim_start_matches("data:").trim()).unwrap();
    assert_eq!(data["result"]["structuredContent"]["value"], json!(42), "{data}");
}

/// The `initialize` beyond the MCP-session cap is refused with 503 and a
/// message saying how to free one; a DELETE frees one.
#[test]
fn the_mcp_session_cap_refuses_the_next_initialize() {
    let (_server, addr) = serve(&["--max-mcp-sessions", "2", "--session-idle-seconds", "900"]);
    let first = initialize(&addr);
    let second = initialize(&addr);
    for a in [&first, &second] {
        assert_eq!(a.status, 200, "{}\n{}", a.head, a.body);
    }
    let refused = initialize(&addr);
    assert_eq!(refused.status, 503, "{}\n{}", refused.head, refused.body);
    let message = refused.message();
    assert!(message.contains("the server holds 2 MCP sessions, the most it keeps at once"), "{message}");
    assert!(message.contains("HTTP DELETE") && message.contains("900 s without a request"), "{message}");
    // The gate comes first: without the token, still 401.
    assert_eq!(request(&addr, "POST", &[], Some(&initialize_body())).status, 401);

    let auth = bearer();
    let id = first.header("mcp-session-id").unwrap();
    let deleted = request(&addr, "DELETE", &[("Authorization", &auth), ("Mcp-Session-Id", id)], None);
    assert!((200..300).contains(&deleted.status), "{}\n{}", deleted.head, deleted.body);
    let again = initialize(&addr);
    assert_eq!(again.status, 200, "{}\n{}", again.head, again.body);
}

/// Reads SSE from `s` until an event line contains `needle`; that event's data.
fn read_event(s: &mut TcpStream, needle: &str) -> Value {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(line) = String::from_utf8_lossy(&got).lines().find(|l| l.starts_with("data:") && l.contains(needle))
        {
            return serde_json::from_str(line.trim_start_matches("data:").trim()).unwrap();
        }
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&got)));
        assert!(n > 0, "closed before {needle}: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

/// One client (here: two MCP sessions of one token) may have at most
/// `--max-runs-per-client` runs in flight; one more is refused at once,
/// and the run in flight is not disturbed.
#[test]
fn runs_in_flight_are_capped_per_client() {
    let (_server, addr) = serve(&["--max-runs-per-client", "1"]);
    let auth = bearer();
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let answer = initialize(&addr);
        assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
        let id = answer.header("mcp-session-id").unwrap().to_owned();
        let headers =
            [("Authorization", auth.as_str()), ("Mcp-Session-Id", &id), ("MCP-Protocol-Version", "2025-11-25")];
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(request(&addr, "POST", &headers, Some(&initialized)).status, 202);
        sessions.push(id);
    }
    let headers = |id: &str| -> Vec<(String, String)> {
        vec![
            ("Authorization".into(), auth.clone()),
            ("Mcp-Session-Id".into(), id.to_owned()),
            ("MCP-Protocol-Version".into(), "2025-11-25".into()),
        ]
    };
    let call = |id: u64, code: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run_python", "arguments": {"code": code}, "_meta": {"progressToken": id}}})
    };
    let first_headers = headers(&sessions[0]);
    let first_headers: Vec<(&str, &str)> = first_headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut first = connect(&addr);
    let slow = "print('started')\nimport time\ntime.sleep(3)\nreturn 6 * 7";
    send(&mut first, &addr, "POST", &first_headers, Some(&call(2, slow)), false);
    // Its log line arrives as progress: the run holds its slot by then.
    let progress = read_event(&mut first, "notifications/progress");
    assert_eq!(progress["params"]["message"], json!("started"), "{progress}");

    let second_headers = headers(&sessions[1]);
    let second_headers: Vec<(&str, &str)> = second_headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut second = connect(&addr);
    send(&mut second, &addr, "POST", &second_headers, Some(&call(3, "1 + 1")), true);
    let refused = read_event(&mut second, r#""id":3"#);
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("this client already has 1 run in flight"), "{refused}");

    let done = read_event(&mut first, r#""id":2"#);
    assert_eq!(done["result"]["structuredContent"]["value"], json!(42), "{done}");
    // The slot is free again once the run has answered.
    let mut third = connect(&addr);
    send(&mut third, &addr, "POST", &second_headers, Some(&call(4, "1 + 1")), true);
    let ok = read_event(&mut third, r#""id":4"#);
    assert_eq!(ok["result"]["structuredContent"]["value"], json!(2), "{ok}");
}
