//! The egress proxy: how a sandboxed run with an allow-list reaches the
//! network, and the only way it can.
//!
//! The run's network namespace has `lo` and no route. Its supervisor
//! listens on `127.0.0.1:`[`crate::rules::EGRESS_PROXY_PORT`] inside it and hands the
//! socket to the host (`pycage_sandbox::Handoff::egress`); a socket stays
//! in the namespace it was made in, so what the host accepts on it are the
//! program's connections, and what the host connects to from here is the
//! host's network. No process runs in between and nothing is mounted.
//!
//! This module serves one run's listener while the run is in flight
//! ([`Egress::start`] before the program is sent, [`Egress::finish`] when
//! it settles: every open connection is cut then). It speaks HTTP/1.x as a
//! forward proxy:
//!
//! - `CONNECT host:port` opens a tunnel (TLS, end to end between the
//!   program and the server: the proxy sees neither keys nor plaintext);
//! - a request with an absolute `http://host[:port]/...` target is sent on
//!   to that server in origin form with `Host` set from the URL and
//!   `Connection: close` (one request per connection), and the response is
//!   passed back as it comes;
//! - anything else is answered `400`.
//!
//! The target must be on the allow-list exactly (name or address literal,
//! and port: [`NetRule::allows`]); names are resolved on the host, only
//! once they are allowed. A refusal is an HTTP error whose status line
//! says why (`403 pycage egress: evil.example is not on the allow-list`),
//! which Python shows in its exception.
//!
//! Bounds: the request head is at most [`MAX_HEAD_BYTES`] and must arrive
//! within [`HEAD_TIMEOUT`]; connecting upstream (resolution included) takes
//! at most [`CONNECT_TIMEOUT`]; every connection is counted against
//! `max_net_connections` (refused ones too; past it, a connection is
//! answered `429` at once and only counted), and every byte relayed (the
//! rewritten request head included, the proxy's own answers not) against
//! `max_net_bytes`: the chunk that would cross it is cut at the budget and
//! both sides are closed. So the host holds at most `max_net_connections`
//! connections of a run, each with two `BUF_BYTES` buffers.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::rules::{Connection, NetBudget, NetHost, NetRule, NetworkReport};
use crate::sync::lock;

/// Longest request head (request line and headers) the proxy reads.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most headers a request may have.
const MAX_HEADERS: usize = 64;

/// How long the program has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long resolving and connecting to an allowed server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Each direction's relay buffer.
const BUF_BYTES: usize = 16 * 1024;

/// What a host name or request target is kept as, at most, in the report.
const MAX_REPORTED_TARGET: usize = 256;

/// Headers that concern only one hop: never sent on (with whatever the
/// request's `Connection` header names).
const HOP_HEADERS: [&str; 8] =
    ["host", "connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "trailer", "upgrade"];

/// The budgets and list one run's proxy enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// What the run may reach.
    pub rules: Vec<NetRule>,
    /// Bytes relayed at most, both ways together.
    pub max_bytes: u64,
    /// Connections accepted at most (refused ones count).
    pub max_connections: u64,
}

/// What the proxy knows of a run so far.
#[derive(Default)]
struct State {
    report: NetworkReport,
    /// Per connection of `report.connections`: still relaying.
    open: Vec<bool>,
}

struct Shared {
    limits: Limits,
    state: Mutex<State>,
}

/// Which way bytes go.
#[derive(Clone, Copy)]
enum Direction {
    Up,
    Down,
}

impl Shared {
    /// A new connection's slot in the report, or `None` past the budget.
    fn admit(&self) -> Option<usize> {
        let mut state = lock(&self.state);
        let count = state.report.connections.len();
        if count as u64 >= self.limits.max_connections {
            state.report.refused_over_budget = state.report.refused_over_budget.saturating_add(1);
            state.report.budget_exceeded.get_or_insert(NetBudget::Connections);
            return None;
        }
        state.report.connections.push(Connection::default());
        state.open.push(true);
        Some(count)
    }

    fn update(&self, id: usize, f: impl FnOnce(&mut Connection)) {
        let mut state = lock(&self.state);
        if let Some(c) = state.report.connections.get_mut(id) {
            f(c);
        }
    }

    fn close(&self, id: usize, reason: Option<String>) {
        let mut state = lock(&self.state);
        if let Some(open) = state.open.get_mut(id) {
            *open = false;
        }
        if let (Some(c), Some(reason)) = (state.report.connections.get_mut(id), reason) {
            c.reason.get_or_insert(reason);
        }
    }

    fn bytes_spent(&self) -> bool {
        let state = lock(&self.state);
        state.report.bytes_up.saturating_add(state.report.bytes_down) >= self.limits.max_bytes
    }

    /// Takes up to `n` bytes of the run's byte budget for connection `id`:
    /// how many may be relayed (fewer than `n` when the budget runs out).
    fn take(&self, id: usize, direction: Direction, n: usize) -> usize {
        let mut state = lock(&self.state);
        let spent = state.report.bytes_up.saturating_add(state.report.bytes_down);
        let left = self.limits.max_bytes.saturating_sub(spent);
        let granted = u64::try_from(n).unwrap_or(u64::MAX).min(left);
        if granted < n as u64 {
            state.report.budget_exceeded.get_or_insert(NetBudget::Bytes);
        }
        let report = &mut state.report;
        let total = match direction {
            Direction::Up => &mut report.bytes_up,
            Direction::Down => &mut report.bytes_down,
        };
        *total = total.saturating_add(granted);
        if let Some(c) = report.connections.get_mut(id) {
            let count = match direction {
                Direction::Up => &mut c.bytes_up,
                Direction::Down => &mut c.bytes_down,
            };
            *count = count.saturating_add(granted);
        }
        usize::try_from(granted).unwrap_or(n)
    }

    fn byte_budget_message(&self) -> String {
        format!("cut: the run's network byte budget (max_net_bytes = {}) is spent", self.limits.max_bytes)
    }
}

/// One run's proxy, serving while the run is in flight.
pub struct Egress {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Egress {
    /// Serves `listener` (the run's egress socket; a copy the proxy owns)
    /// with `limits`. Needs a tokio runtime.
    pub fn start(listener: OwnedFd, limits: Limits) -> io::Result<Egress> {
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = Arc::new(Shared { limits, state: Mutex::new(State::default()) });
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stop.clone()));
        Ok(Egress { shared, stop, task: Some(task) })
    }

    /// Stops serving (every open connection is cut; what is queued in the
    /// listener stays there, for a session's next run) and reports.
    pub async fn finish(mut self) -> NetworkReport {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let mut state = lock(&self.shared.state);
        let State { report, open } = &mut *state;
        for (c, open) in report.connections.iter_mut().zip(open.iter()) {
            if *open {
                c.reason.get_or_insert_with(|| "cut: the run settled".to_owned());
            }
        }
        std::mem::take(report)
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match shared.admit() {
                    Some(id) => {
                        connections.spawn(serve(Arc::clone(&shared), id, stream));
                    }
                    None => refuse_at_once(stream, shared.limits.max_connections),
                },
                // Out of descriptors, or the connection was reset before
                // it was taken: nothing is lost by a short pause.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    // Dropping the set aborts every connection's task: their sockets close.
    connections.shutdown().await;
}

/// A connection past `max_net_connections`: answered without a task (so
/// no number of them costs the host more than the accept), and closed.
fn refuse_at_once(stream: TcpStream, budget: u64) {
    // Plain non-blocking calls: tokio's `try_read`/`try_write` answer
    // `WouldBlock` without asking the kernel until its reactor has seen
    // the socket ready, which a socket accepted a moment ago never was.
    let Ok(mut stream) = stream.into_std() else { return };
    // Reading what the program already sent first lets the close be a
    // FIN, not a reset.
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        match std::io::Read::read(&mut stream, &mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let answer =
        response(429, &format!("pycage egress: the run's connection budget (max_net_connections = {budget}) is spent"));
    // A fresh socket's send buffer takes the whole answer at once.
    let _ = std::io::Write::write(&mut stream, answer.as_bytes());
}

/// An HTTP answer from the proxy itself: the status line carries the
/// reason (clients put it in their exceptions), the body repeats it.
fn response(status: u16, reason: &str) -> String {
    // The reason is built by this module from validated parts; a CR or LF
    // could only come from a bug, and must never split the head.
    let reason: String = reason.chars().filter(|c| !c.is_control()).collect();
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reason}\n",
        reason.len() + 1
    )
}

/// Why a connection ended without relaying, as (status, reason).
struct Refusal {
    status: u16,
    reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal { status, reason: reason.into() }
    }
}

/// The request head, read and parsed.
struct Head {
    method: String,
    target: String,
    /// `HTTP/1.0` or `HTTP/1.1` (httparse's minor version).
    minor: u8,
    headers: Vec<(String, Vec<u8>)>,
    /// Bytes after the head (a body, or a TLS hello sent early).
    rest: Vec<u8>,
}

async fn read_head(stream: &mut TcpStream) -> Result<Head, Refusal> {
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        let n = stream
            .read(buf.get_mut(len..).unwrap_or_default())
            .await
            .map_err(|e| Refusal::new(400, format!("pycage egress: reading the request failed: {e}")))?;
        if n == 0 {
            return Err(Refusal::new(400, "pycage egress: the connection closed before a complete request"));
        }
        len += n;
        // A head ends with an empty line: parse only once one may have
        // arrived, so a head sent a byte at a time costs one scan per byte.
        let fresh = buf.get(len.saturating_sub(n + 3)..len).unwrap_or_default();
        let ended = fresh.windows(2).any(|w| w == b"\n\n") || fresh.windows(3).any(|w| w == b"\n\r\n");
        if !ended && len < buf.len() {
            continue;
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(buf.get(..len).unwrap_or_default()) {
            Ok(httparse::Status::Complete(end)) => {
                let method = request.method.unwrap_or_default().to_owned();
                let target = request.path.unwrap_or_default().to_owned();
                let minor = request.version.unwrap_or(1);
                let headers = request.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
                let rest = buf.get(end..len).unwrap_or_default().to_vec();
                return Ok(Head { method, target, minor, headers, rest });
            }
            Ok(httparse::Status::Partial) if len < buf.len() => {}
            Ok(httparse::Status::Partial) => {
                return Err(Refusal::new(
                    431,
                    format!("pycage egress: the request head is over {MAX_HEAD_BYTES} bytes"),
                ));
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Refusal::new(431, format!("pycage egress: the request has over {MAX_HEADERS} headers")));
            }
            Err(e) => return Err(Refusal::new(400, format!("pycage egress: not an HTTP request ({e})"))),
        }
    }
}

/// What the request asks for: the server, and for plain HTTP the
/// request's path (origin form).
struct Target {
    rule: NetRule,
    /// The URL's authority as written (the `Host` header sent on).
    authority: String,
    /// `None` for `CONNECT`.
    path: Option<String>,
}

fn target_of(head: &Head) -> Result<Target, Refusal> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let rule = NetRule::parse_authority(&head.target, None)
            .map_err(|e| Refusal::new(400, format!("pycage egress: CONNECT needs HOST:PORT ({e})")))?;
        return Ok(Target { rule, authority: head.target.clone(), path: None });
    }
    let rest = head
        .target
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .and_then(|_| head.target.get(7..))
        .ok_or_else(|| {
            Refusal::new(400, "pycage egress: this is an HTTP proxy; send CONNECT HOST:PORT or an absolute http:// URL")
        })?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(Refusal::new(400, "pycage egress: credentials in the URL are not sent on"));
    }
    let rule = NetRule::parse_authority(authority, Some(80))
        .map_err(|e| Refusal::new(400, format!("pycage egress: bad URL host ({e})")))?;
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.to_owned(),
        p => format!("/{p}"),
    };
    Ok(Target { rule, authority: authority.to_owned(), path: Some(path) })
}

/// Why `host:port` is not allowed, naming the rule the program missed.
fn refusal_for(rules: &[NetRule], host: &NetHost, port: u16) -> String {
    let ports: Vec<String> = rules.iter().filter(|r| r.host == *host).map(|r| r.port.to_string()).collect();
    if ports.is_empty() {
        format!("pycage egress: {host} is not on the allow-list")
    } else {
        format!("pycage egress: port {port} of {host} is not on the allow-list (allowed: {})", ports.join(", "))
    }
}

fn shorten(text: &str) -> String {
    let mut end = text.len().min(MAX_REPORTED_TARGET);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default().to_owned()
}

/// One connection from the program: read its request, decide, relay.
async fn serve(shared: Arc<Shared>, id: usize, mut client: TcpStream) {
    match relay(&shared, id, &mut client).await {
        Ok(reason) => shared.close(id, reason),
        Err(refusal) => {
            // Recorded first: the run may settle (and this task end) as
            // soon as the program has read the answer.
            let answer = response(refusal.status, &refusal.reason);
            shared.close(id, Some(refusal.reason));
            // Best effort: the program may be gone already.
            let _ = tokio::time::timeout(HEAD_TIMEOUT, client.write_all(answer.as_bytes())).await;
            let _ = client.shutdown().await;
        }
    }
}

/// `Ok(reason)`: the connection was relayed (the reason is set when it
/// ended early). `Err`: it was refused (the program gets the answer).
async fn relay(shared: &Shared, id: usize, client: &mut TcpStream) -> Result<Option<String>, Refusal> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(client)).await {
        Ok(head) => head?,
        Err(_) => {
            return Err(Refusal::new(
                408,
                format!("pycage egress: no complete request within {} s", HEAD_TIMEOUT.as_secs()),
            ))
        }
    };
    shared.update(id, |c| {
        c.method = shorten(&head.method);
        c.host = shorten(&head.target);
    });
    let target = target_of(&head)?;
    let host = target.rule.host.clone();
    let port = target.rule.port;
    shared.update(id, |c| {
        c.host = host.to_string();
        c.port = port;
    });
    if !shared.limits.rules.iter().any(|r| r.allows(&host, port)) {
        return Err(Refusal::new(403, refusal_for(&shared.limits.rules, &host, port)));
    }
    shared.update(id, |c| c.allowed = true);
    if shared.bytes_spent() {
        return Err(Refusal::new(
            429,
            format!(
                "pycage egress: the run's network byte budget (max_net_bytes = {}) is spent",
                shared.limits.max_bytes
            ),
        ));
    }
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, connect(&host, port)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(Refusal::new(502, format!("pycage egress: cannot connect to {host}:{port}: {e}"))),
        Err(_) => {
            return Err(Refusal::new(
                504,
                format!("pycage egress: {host}:{port} did not answer within {} s", CONNECT_TIMEOUT.as_secs()),
            ))
        }
    };
    let first = match &target.path {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| Refusal::new(500, format!("pycage egress: {e}")))?;
            Vec::new()
        }
        Some(path) => origin_head(&head, &target.authority, path),
    };
    let mut opening = first;
    opening.extend_from_slice(&head.rest);
    if !send_counted(shared, id, &mut upstream, &opening).await {
        return Ok(Some(shared.byte_budget_message()));
    }
    Ok(pump(shared, id, client, &mut upstream).await)
}

/// The request as sent on: origin form, hop-by-hop headers dropped, `Host`
/// from the URL, `Connection: close`.
fn origin_head(head: &Head, authority: &str, path: &str) -> Vec<u8> {
    let named_by_connection: Vec<String> = head
        .headers
        .iter()
        .filter(|(name, _)| name == "connection" || name == "proxy-connection")
        .flat_map(|(_, value)| {
            String::from_utf8_lossy(value).split(',').map(|t| t.trim().to_ascii_lowercase()).collect::<Vec<_>>()
        })
        .collect();
    let mut out =
        format!("{} {} HTTP/1.{}\r\nHost: {authority}\r\n", head.method, path, head.minor.min(1)).into_bytes();
    for (name, value) in &head.headers {
        if HOP_HEADERS.contains(&name.as_str()) || named_by_connection.contains(name) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Resolves (names, on the host) and connects: the first address that
/// answers.
async fn connect(host: &NetHost, port: u16) -> io::Result<TcpStream> {
    let addresses: Vec<std::net::SocketAddr> = match host {
        NetHost::V4(ip) => vec![(*ip, port).into()],
        NetHost::V6(ip) => vec![(*ip, port).into()],
        NetHost::Name(name) => tokio::net::lookup_host((name.as_str(), port)).await?.collect(),
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Sends `data` upstream within the byte budget; `false` if it was cut.
/// A failed write shows in the relay that follows.
async fn send_counted(shared: &Shared, id: usize, upstream: &mut TcpStream, data: &[u8]) -> bool {
    if data.is_empty() {
        return true;
    }
    let granted = shared.take(id, Direction::Up, data.len());
    let _ = upstream.write_all(data.get(..granted).unwrap_or_default()).await;
    granted == data.len()
}

/// How one direction of a relay ended.
enum Ended {
    /// End of stream from the sender (passed on as a half close).
    Eof,
    /// The byte budget ran out.
    Budget,
    /// A read or write failed.
    Failed(io::Error),
}

/// Relays both ways until the server has finished (the program's end of
/// stream is passed on as a half close, and its answer still relayed), or
/// the budget or an error ends it: the reason, if it ended early.
async fn pump(shared: &Shared, id: usize, client: &mut TcpStream, upstream: &mut TcpStream) -> Option<String> {
    let (mut client_read, mut client_write) = client.split();
    let (mut upstream_read, mut upstream_write) = upstream.split();
    let up = copy(shared, id, Direction::Up, &mut client_read, &mut upstream_write);
    let down = copy(shared, id, Direction::Down, &mut upstream_read, &mut client_write);
    tokio::pin!(up, down);
    let mut up_done = false;
    loop {
        let (ended, upward) = tokio::select! {
            ended = &mut up, if !up_done => (ended, true),
            ended = &mut down => (ended, false),
        };
        match ended {
            Ended::Eof if upward => up_done = true,
            // The server is done (plain HTTP is one request per
            // connection; a tunnel's server closed it): so is the relay.
            Ended::Eof => return None,
            Ended::Budget => return Some(shared.byte_budget_message()),
            Ended::Failed(e) if upward => return Some(format!("program side: {e}")),
            Ended::Failed(e) => return Some(format!("server side: {e}")),
        }
    }
}

async fn copy<R, W>(shared: &Shared, id: usize, direction: Direction, from: &mut R, to: &mut W) -> Ended
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                let _ = to.shutdown().await;
                return Ended::Eof;
            }
            Ok(n) => n,
            Err(e) => return Ended::Failed(e),
        };
        let granted = shared.take(id, direction, n);
        if let Err(e) = to.write_all(buf.get(..granted).unwrap_or_default()).await {
            return Ended::Failed(e);
        }
        if granted < n {
            return Ended::Budget;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, target: &str) -> Head {
        Head { method: method.into(), target: target.into(), minor: 1, headers: Vec::new(), rest: Vec::new() }
    }

    #[test]
    fn targets_are_read_strictly() {
        let t = target_of(&head("CONNECT", "API.example.com:443")).ok().unwrap();
        assert_eq!((t.rule.to_string(), t.path), ("api.example.com:443".to_owned(), None));
        assert!(target_of(&head("CONNECT", "example.com")).is_err(), "CONNECT needs a port");
        let t = target_of(&head("GET", "http://example.com")).ok().unwrap();
        assert_eq!((t.rule.to_string(), t.path.as_deref()), ("example.com:80".to_owned(), Some("/")));
        let t = target_of(&head("POST", "HTTP://127.0.0.1:8080/a?b=1")).ok().unwrap();
        assert_eq!((t.rule.to_string(), t.path.as_deref()), ("127.0.0.1:8080".to_owned(), Some("/a?b=1")));
        let t = target_of(&head("GET", "http://h.example?q")).ok().unwrap();
        assert_eq!(t.path.as_deref(), Some("/?q"));
        for bad in ["/index.html", "https://example.com/", "http://user:pw@example.com/", "http://a b/", "ftp://x/"] {
            assert!(target_of(&head("GET", bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_name_the_rule() {
        let rules: Vec<NetRule> = vec!["example.com".parse().unwrap(), "example.com:8443".parse().unwrap()];
        let host = NetHost::parse("example.com").unwrap();
        assert_eq!(
            refusal_for(&rules, &host, 80),
            "pycage egress: port 80 of example.com is not on the allow-list (allowed: 443, 8443)"
        );
        let other = NetHost::parse("evil.example").unwrap();
        assert_eq!(refusal_for(&rules, &other, 443), "pycage egress: evil.example is not on the allow-list");
        let answer = response(403, "a\r\nInjected: yes");
        assert!(answer.starts_with("HTTP/1.1 403 aInjected: yes\r\n"), "{answer}");
    }

    #[test]
    fn the_origin_head_drops_hop_headers() {
        let mut h = head("GET", "http://example.com:8080/x");
        h.headers = vec![
            ("host".into(), b"evil.example".to_vec()),
            ("proxy-connection".into(), b"keep-alive".to_vec()),
            ("connection".into(), b"keep-alive, x-secret".to_vec()),
            ("x-secret".into(), b"1".to_vec()),
            ("accept".into(), b"*/*".to_vec()),
            ("content-length".into(), b"3".to_vec()),
        ];
        let out = String::from_utf8(origin_head(&h, "example.com:8080", "/x")).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: example.com:8080\r\naccept: */*\r\ncontent-length: 3\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn the_byte_budget_is_exact() {
        let shared = Shared {
            limits: Limits { rules: Vec::new(), max_bytes: 10, max_connections: 2 },
            state: Mutex::new(State::default()),
        };
        let a = shared.admit().unwrap();
        let b = shared.admit().unwrap();
        assert_eq!(shared.admit(), None);
        assert_eq!(shared.take(a, Direction::Up, 4), 4);
        assert_eq!(shared.take(b, Direction::Down, 4), 4);
        assert!(!shared.bytes_spent());
        assert_eq!(shared.take(a, Direction::Down, 4), 2);
        assert!(shared.bytes_spent());
        assert_eq!(shared.take(b, Direction::Up, 1), 0);
        let state = lock(&shared.state);
        let r = &state.report;
        assert_eq!((r.bytes_up, r.bytes_down, r.refused_over_budget), (4, 6, 1));
        assert_eq!(r.budget_exceeded, Some(NetBudget::Connections), "the first budget crossed is kept");
        assert_eq!((r.connections[0].bytes_up, r.connections[0].bytes_down), (4, 2));
    }
}
