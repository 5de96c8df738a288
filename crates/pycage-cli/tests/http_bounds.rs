//! What a peer of `pycage mcp --http` can hold, over real loopback sockets
//! against the real binary: connections beyond `--max-http-connections`
//! (and, per client, `--max-http-connections-per-client`) are refused with
//! 503, connections that send no complete request headers (or sit idle
//! after a response) are closed after `--http-header-timeout-seconds` while
//! a response in flight is never cut, a body slower than
//! `--http-body-timeout-seconds` and `--http-min-body-rate` is answered 408,
//! an `initialize` beyond `--max-mcp-sessions` is refused with 503, a run
//! beyond `--max-runs-per-client` is refused at once, `Host` is checked as
//! RFC 9112 asks, and a run whose POST drops is kept for
//! `--resume-grace-seconds` for a resume, then aborted.
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
const TOKEN_B_VAR: &str = "PYCAGE_HTTP_BOUNDS_TOKEN_B";
const TOKEN_B: &str = "bounds-b-0123456789abcdef";

/// Long enough for any answer on a loaded 2-core machine; only a hang
/// reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

/// `pycage mcp --http` on a free loopback port with a bearer token and
/// `extra` flags; its `host:port`.
fn serve(extra: &[&str]) -> (Child, String) {
    serve_with(&[&["--auth-token-env", TOKEN_VAR], extra].concat())
}

/// The same without a token (on loopback, anonymous clients).
fn serve_with(flags: &[&str]) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pycage"));
    cmd.stdin(Stdio::null())
        .args(["mcp", "--isolation", "process", "--http", "127.0.0.1:0"])
        .args(flags)
        .env(TOKEN_VAR, TOKEN)
        .env(TOKEN_B_VAR, TOKEN_B);
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
    // 204, as the SDK clients expect (the SDK server says 202).
    assert_eq!(deleted.status, 204, "{}\n{}", deleted.head, deleted.body);
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

/// One request written as it is (`head` without its final empty line),
/// answered in full on a connection closed after it.
fn raw(addr: &str, head: &str, body: &str) -> Answer {
    let mut s = connect(addr);
    s.write_all(format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes())
        .unwrap();
    Answer::parse(&read_to_close(&mut s))
}

/// RFC 9112 section 3.2: two `Host` lines are a bad request, not "the first
/// wins"; an absolute-form target's authority replaces `Host`, so a
/// foreign one is refused even with a loopback `Host`, and a loopback one
/// passes whatever `Host` says. A foreign `Host` is refused with a message
/// naming the header and `--allow-host`.
#[test]
fn host_lines_and_absolute_targets_follow_rfc_9112() {
    let (_server, addr) = serve(&[]);
    let body = initialize_body().to_string();
    let auth = format!("Authorization: {}", bearer());
    let common = format!("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}");
    let ok = raw(&addr, &format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{common}"), &body);
    assert_eq!(ok.status, 200, "{}\n{}", ok.head, ok.body);

    let two = raw(&addr, &format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nHost: evil.example\r\n{common}"), &body);
    assert_eq!(two.status, 400, "{}\n{}", two.head, two.body);
    assert!(two.message().contains("more than one Host header"), "{}", two.body);

    let foreign = raw(&addr, &format!("POST http://evil.example/mcp HTTP/1.1\r\nHost: {addr}\r\n{common}"), &body);
    assert_eq!(foreign.status, 403, "{}\n{}", foreign.head, foreign.body);
    assert!(foreign.message().contains("the request target's authority names evil.example"), "{}", foreign.body);

    let own = raw(&addr, &format!("POST http://{addr}/mcp HTTP/1.1\r\nHost: evil.example\r\n{common}"), &body);
    assert_eq!(own.status, 200, "{}\n{}", own.head, own.body);

    let rebound = raw(&addr, &format!("POST /mcp HTTP/1.1\r\nHost: evil.example:8080\r\n{common}"), &body);
    assert_eq!(rebound.status, 403, "{}\n{}", rebound.head, rebound.body);
    let message = rebound.message();
    assert!(message.contains("the Host header names evil.example:8080"), "{message}");
    assert!(message.contains("start it with --allow-host evil.example"), "{message}");
}

/// A request whose headers are in but whose body crawls, writing a byte
/// every `pace` until the server closes (or `max` bytes).
fn crawling_body(addr: &str, pace: Option<Duration>) -> (TcpStream, Option<std::thread::JoinHandle<()>>) {
    let mut s = connect(addr);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{{\"jsonrpc\"",
        bearer()
    );
    s.write_all(head.as_bytes()).unwrap();
    let trickle = pace.map(|pace| {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..10_000 {
                if w.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(pace);
            }
        })
    });
    (s, trickle)
}

/// Slow bodies from an authenticated client (one stalled, others crawling
/// below the minimum rate) held every connection place; each is answered
/// 408 and closed after the body timeout, and then a client gets in. The
/// message names both flags.
#[test]
fn slow_bodies_are_cut_and_a_client_gets_in() {
    let (_server, addr) =
        serve(&["--max-http-connections", "3", "--http-body-timeout-seconds", "1", "--http-min-body-rate", "1000"]);
    let mut slow = vec![crawling_body(&addr, None)];
    for _ in 0..2 {
        slow.push(crawling_body(&addr, Some(Duration::from_millis(20))));
    }
    for (s, trickle) in &mut slow {
        let answer = Answer::parse(&read_to_close(s));
        assert_eq!(answer.status, 408, "{}\n{}", answer.head, answer.body);
        let message = answer.message();
        assert!(message.contains("--http-body-timeout-seconds and --http-min-body-rate"), "{message}");
        assert_eq!(answer.header("connection"), Some("close"), "{}", answer.head);
        if let Some(t) = trickle.take() {
            t.join().unwrap();
        }
    }
    let answer = initialize(&addr);
    assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
}

/// Reads one answer with a `Content-Length` body, leaving the connection open.
fn read_answer(s: &mut TcpStream) -> Answer {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + len {
                return Answer::parse(&got[..end + 4 + len]);
            }
        }
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&got)));
        assert!(n > 0, "closed before an answer: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

/// A request answered at once with a short body (a GET that does not
/// accept SSE: 406 from the transport), on `s`, kept open.
fn short_request(s: &mut TcpStream, addr: &str, token: &str) -> Answer {
    let head = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    read_answer(s)
}

/// Polls `attempt` until it gives true.
fn eventually(what: &str, mut attempt: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if attempt() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not within {PATIENCE:?}");
}

/// With tokens, one token holds at most `--max-http-connections-per-client`
/// connections (counted from their first request): one more is refused with
/// 503 and closed; another token is not affected; a closed one frees its
/// place.
#[test]
fn connections_are_bounded_per_token() {
    let (_server, addr) = serve(&["--auth-token-env", TOKEN_B_VAR, "--max-http-connections-per-client", "2"]);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = connect(&addr);
        assert_eq!(short_request(&mut s, &addr, TOKEN).status, 406);
        held.push(s);
    }
    let mut third = connect(&addr);
    let refused = short_request(&mut third, &addr, TOKEN);
    assert_eq!(refused.status, 503, "{}\n{}", refused.head, refused.body);
    let message = refused.message();
    assert!(message.contains("the token in PYCAGE_HTTP_BOUNDS_TOKEN already has 2 HTTP connections open"), "{message}");
    assert!(message.contains("--max-http-connections-per-client"), "{message}");
    assert_eq!(read_to_close(&mut third), b"", "closed after the refusal");
    let mut other = connect(&addr);
    assert_eq!(short_request(&mut other, &addr, TOKEN_B).status, 406);
    drop(held.pop());
    eventually("a place freed by a closed connection", || {
        let mut s = connect(&addr);
        short_request(&mut s, &addr, TOKEN).status == 406
    });
}

/// Without tokens a connection's client is its source (every loopback
/// address is one): beyond `--max-http-connections-per-client`, a
/// connection is refused with 503 as soon as it is accepted.
#[test]
fn connections_are_bounded_per_source_without_tokens() {
    let (_server, addr) = serve_with(&["--max-http-connections-per-client", "2"]);
    // The server accepts in connection order: these two take the places.
    let mut held: Vec<TcpStream> = (0..2).map(|_| connect(&addr)).collect();
    let mut beyond = connect(&addr);
    let answer = Answer::parse(&read_to_close(&mut beyond));
    assert_eq!(answer.status, 503, "{}", answer.head);
    let message = answer.message();
    assert!(message.contains("this machine (loopback) already has 2 HTTP connections open"), "{message}");
    drop(held.pop());
    eventually("a place freed by a closed connection", || {
        let mut s = connect(&addr);
        let head = format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        read_answer(&mut s).status == 406
    });
}

/// An MCP session (`initialize` and `initialized`) with `auth` (or none);
/// its headers.
fn open_session(addr: &str, auth: Option<&str>) -> Vec<(String, String)> {
    let auth_header: Vec<(&str, &str)> = auth.map(|a| vec![("Authorization", a)]).unwrap_or_default();
    let answer = request(addr, "POST", &auth_header, Some(&initialize_body()));
    assert_eq!(answer.status, 200, "{}\n{}", answer.head, answer.body);
    let id = answer.header("mcp-session-id").unwrap().to_owned();
    let mut headers = vec![("Mcp-Session-Id".to_owned(), id), ("MCP-Protocol-Version".to_owned(), "2025-11-25".into())];
    if let Some(a) = auth {
        headers.push(("Authorization".into(), a.to_owned()));
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(request(addr, "POST", &as_refs(&headers), Some(&initialized)).status, 202);
    headers
}

fn as_refs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn tool_call(id: u64, code: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "run_python", "arguments": {"code": code}, "_meta": {"progressToken": id}}})
}

/// Without tokens, the MCP sessions of one source are one client for
/// `--max-runs-per-client`: a second session cannot add runs beyond it.
#[test]
fn runs_without_a_token_count_per_source_across_mcp_sessions() {
    let (_server, addr) = serve_with(&["--max-runs-per-client", "1"]);
    let first = open_session(&addr, None);
    let second = open_session(&addr, None);
    let mut running = connect(&addr);
    let slow = "print('started')\nimport time\ntime.sleep(3)\nreturn 6 * 7";
    send(&mut running, &addr, "POST", &as_refs(&first), Some(&tool_call(2, slow)), false);
    let progress = read_event(&mut running, "notifications/progress");
    assert_eq!(progress["params"]["message"], json!("started"), "{progress}");
    let mut more = connect(&addr);
    send(&mut more, &addr, "POST", &as_refs(&second), Some(&tool_call(3, "1 + 1")), true);
    let refused = read_event(&mut more, r#""id":3"#);
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("the clients without a token from this machine (loopback) together already have 1 run in flight"),
        "{refused}"
    );
    let done = read_event(&mut running, r#""id":2"#);
    assert_eq!(done["result"]["structuredContent"]["value"], json!(42), "{done}");
}

/// Reads SSE text from `s` until it contains `needle`; all of it.
fn read_until(s: &mut TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got);
        if text.contains(needle) {
            return text.into_owned();
        }
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(n > 0, "closed before {needle}: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// A run's heartbeat: appends to `path` every 20 ms from a thread.
fn heartbeat(path: &std::path::Path) -> String {
    format!(
        "import threading, time\n\
         def _beat():\n    while True:\n        with open({p:?}, 'a') as f:\n            f.write('beat\\n')\n        time.sleep(0.02)\n\
         threading.Thread(target=_beat, daemon=True).start()\n",
        p = path.display().to_string()
    )
}

/// Whether `path` stops growing (for a second) within a minute.
fn stops_growing(path: &std::path::Path) -> bool {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let before = size();
        std::thread::sleep(Duration::from_secs(1));
        if size() == before {
            return true;
        }
    }
    false
}

/// Opens the session's standalone GET stream (kept open by the caller).
fn standalone_stream(addr: &str, session: &[(String, String)]) -> TcpStream {
    let mut s = connect(addr);
    let mut head = format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    for (k, v) in session {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let text = read_until(&mut s, "\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    s
}

/// Starts `code` as call `id` on its own connection; the connection and
/// the id of its stream's first event (`0/<stream number>`), once the
/// program has printed `started`.
fn start_call(addr: &str, session: &[(String, String)], id: u64, code: &str) -> (TcpStream, String) {
    let mut s = connect(addr);
    send(&mut s, addr, "POST", &as_refs(session), Some(&tool_call(id, code)), false);
    let text = read_until(&mut s, "\"started\"");
    let first = text.lines().find_map(|l| l.strip_prefix("id:")).unwrap_or_else(|| panic!("no event id: {text}"));
    (s, first.trim().to_owned())
}

/// A GET resuming a stream after event `last`; the connection.
fn resume(addr: &str, session: &[(String, String)], last: &str) -> TcpStream {
    let mut s = connect(addr);
    let mut head =
        format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nLast-Event-ID: {last}\r\n");
    for (k, v) in session {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// In a live MCP session (its standalone stream open), a run whose POST
/// connection drops is aborted (its process killed) once
/// `--resume-grace-seconds` pass without a resume; the session lives on.
#[test]
fn a_dropped_post_in_a_live_session_is_aborted_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let beats = dir.path().join("beats");
    let (_server, addr) = serve(&["--resume-grace-seconds", "1", "--wall-ms", "300000", "--cpu-seconds", "300"]);
    let session = open_session(&addr, Some(&bearer()));
    let _standalone = standalone_stream(&addr, &session);
    let program = format!("{}print('started')\nimport time\ntime.sleep(240)", heartbeat(&beats));
    let (post, _) = start_call(&addr, &session, 2, &program);
    drop(post);
    assert!(stops_growing(&beats), "the run goes on after its connection dropped");
    let mut next = connect(&addr);
    send(&mut next, &addr, "POST", &as_refs(&session), Some(&tool_call(3, "6 * 7")), true);
    let done = read_event(&mut next, r#""id":3"#);
    assert_eq!(done["result"]["structuredContent"]["value"], json!(42), "{done}");
}

/// A client that resumes the dropped stream within the grace (GET with
/// `Last-Event-ID`) keeps its run, and gets its result on the new stream.
#[test]
fn a_resumed_stream_keeps_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    std::fs::write(&go, "").unwrap();
    let (_server, addr) = serve(&["--resume-grace-seconds", "600"]);
    let session = open_session(&addr, Some(&bearer()));
    let program = format!(
        "print('started')\nimport time\nwhile 'go' not in open({:?}).read():\n    time.sleep(0.02)\nreturn 6 * 7",
        go.display().to_string()
    );
    let (post, first) = start_call(&addr, &session, 2, &program);
    drop(post);
    let mut resumed = resume(&addr, &session, &first);
    let text = read_until(&mut resumed, "\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    std::fs::write(&go, "go\n").unwrap();
    let result = read_event(&mut resumed, r#""id":2"#);
    assert_eq!(result["result"]["structuredContent"]["value"], json!(42), "{result}");
}
