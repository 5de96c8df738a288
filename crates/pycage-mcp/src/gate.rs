//! The HTTP gate: what every request to `pycage mcp --http` passes before
//! the MCP transport sees it, in this order.
//!
//! 1. **Host** (RFC 9112 section 3.2): a request with no `Host`, more than
//!    one `Host` line or an invalid one is refused with 400. The authority
//!    it names (that of an absolute-form target such as
//!    `POST http://h/mcp`, which replaces `Host`, else `Host`'s) must be a
//!    loopback name or address, the address the connection reached this
//!    server at (for a server bound to `0.0.0.0` or `::`, whichever of the
//!    machine's addresses the client dialed), or a name allowed with
//!    [`HttpOptions::allowed_hosts`]; anything else is refused with 403,
//!    whose message names the header and the flag that allows the name.
//!    This keeps a web page that rebinds its own DNS name to this machine
//!    out, with or without tokens.
//! 2. **Origin**: present and neither loopback nor allowed
//!    ([`HttpOptions::allowed_origins`]): 403, as the transport
//!    specification asks (a browser page of another origin must not reach
//!    a local server).
//! 3. **Bearer tokens**: with tokens configured, a request without a valid
//!    `Authorization: Bearer` is refused with 401; the token that passed
//!    names the request's principal. Tokens are compared in constant time
//!    (the time depends on the lengths only). An MCP session is bound to
//!    the token that opened it; a request of another token carrying its
//!    `Mcp-Session-Id` is refused with 403.
//! 4. **Connections per client**: a connection counts against its client's
//!    [`HttpOptions::max_connections_per_client`]: its token's, from its
//!    first authenticated request; without tokens, its source's (see
//!    [`Source`]), from the moment it is accepted (`transport`). Over the
//!    bound: 503, and the connection is closed.
//! 5. **The body**: read here, whole, before the transport sees the
//!    request: it must arrive within [`HttpOptions::body_timeout`] plus one
//!    second per [`HttpOptions::min_body_rate`] bytes received (a client
//!    sending at that rate or faster is never cut; one trickling bytes is
//!    answered 408 after the timeout and its connection closed), and hold
//!    at most the transport's body limit (413).
//!
//! A refusal carries a JSON-RPC error (no id) as its body, which the
//! transport specification allows and SDK clients show to their user.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use futures::StreamExt;

use crate::clients::{Registry, Source};
use crate::options::{sessions_full_message, HttpOptions, MIN_TOKEN_BYTES, SESSIONS_FULL, SESSION_HEADER};

/// Whom a connection counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ClientId {
    /// A bearer token, by the name of the variable it came from.
    Token(String),
    /// A source, when the server has no tokens.
    Source(Source),
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientId::Token(name) => write!(f, "the token in {name}"),
            ClientId::Source(s) => write!(f, "{s}"),
        }
    }
}

/// Connections held per client, bounded.
#[derive(Debug)]
pub(crate) struct Connections {
    max: usize,
    held: Mutex<HashMap<ClientId, usize>>,
}

/// One connection counted against its client until dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    table: Arc<Connections>,
    id: ClientId,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = self.table.lock();
        if let Some(n) = held.get_mut(&self.id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.id);
            }
        }
    }
}

impl Connections {
    pub(crate) fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections { max, held: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientId, usize>> {
        // A panic while holding the lock leaves plain counts behind: go on.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more connection of `id`, or says why not.
    pub(crate) fn claim(self: &Arc<Self>, id: ClientId) -> Result<Claim, String> {
        let mut held = self.lock();
        let n = held.entry(id.clone()).or_insert(0);
        if *n >= self.max {
            let s = if self.max == 1 { "" } else { "s" };
            return Err(format!(
                "Service Unavailable: {id} already has {} HTTP connection{s} open, the most one client may have \
                 (the server's --max-http-connections-per-client); reuse an open connection, close one, or try \
                 again when one has closed",
                self.max
            ));
        }
        *n += 1;
        Ok(Claim { table: Arc::clone(self), id })
    }
}

/// One accepted connection, as requests on it see it (in their
/// extensions).
#[derive(Debug)]
pub(crate) struct Conn {
    /// The address the client dialed: the server's, as reached.
    pub local: SocketAddr,
    pub source: Source,
    /// The client it counts against, once known; released by the accept
    /// loop when the connection ends (requests still running hold the
    /// `Conn`, not the connection).
    pub claim: Mutex<Option<Claim>>,
}

impl Conn {
    pub(crate) fn release(&self) {
        self.claim.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// The request's principal, put in its extensions by the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal(pub String);

/// A parsed `Origin` value (RFC 6454 serialization).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    /// Explicit, or the scheme's default.
    port: Option<u16>,
}

impl Origin {
    fn parse(s: &str) -> Option<(Origin, bool)> {
        let (scheme, authority) = s.split_once("://")?;
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
            return None;
        }
        if authority.is_empty() || authority.bytes().any(|b| b"/?#@ \\".contains(&b)) {
            return None;
        }
        let scheme = scheme.to_ascii_lowercase();
        let (host, port) = split_authority(authority)?;
        let default = match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        };
        match port {
            None => Some((Origin { scheme, host, port: default }, false)),
            Some("*") => Some((Origin { scheme, host, port: None }, true)),
            Some(p) => Some((Origin { scheme, host, port: Some(p.parse().ok()?) }, false)),
        }
    }

    fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }
}

/// `host[:port]` (an IPv6 host in brackets) as the host, lower-cased with
/// its brackets, and the port text if any.
fn split_authority(authority: &str) -> Option<(String, Option<&str>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.starts_with(':') {
            return None;
        }
        (format!("[{}]", host.to_ascii_lowercase()), after.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (authority.to_ascii_lowercase(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return None;
    }
    Some((host, port))
}

/// A host's address when it is an IP literal (IPv6 in brackets).
fn host_ip(host: &str) -> Option<IpAddr> {
    match host.strip_prefix('[') {
        Some(rest) => rest.strip_suffix(']')?.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost" || host_ip(host).is_some_and(|ip| ip.to_canonical().is_loopback())
}

/// One `--allow-origin` entry.
#[derive(Debug, Clone)]
enum AllowedOrigin {
    Null,
    Tuple { origin: Origin, any_port: bool },
}

impl AllowedOrigin {
    fn parse(s: &str) -> Result<AllowedOrigin, String> {
        if s == "null" {
            return Ok(AllowedOrigin::Null);
        }
        match Origin::parse(s) {
            Some((origin, any_port)) => Ok(AllowedOrigin::Tuple { origin, any_port }),
            None => Err(format!("{s:?} is not an origin: scheme://host, scheme://host:port, scheme://host:* or null")),
        }
    }

    fn matches(&self, value: &str, origin: Option<&Origin>) -> bool {
        match (self, origin) {
            (AllowedOrigin::Null, _) => value.eq_ignore_ascii_case("null"),
            (AllowedOrigin::Tuple { origin: a, any_port }, Some(o)) => {
                a.scheme == o.scheme && a.host == o.host && (*any_port || a.port == o.port)
            }
            (AllowedOrigin::Tuple { .. }, None) => false,
        }
    }
}

/// One `--allow-host` entry: a name (any port) or `name:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedHost {
    host: String,
    port: Option<u16>,
}

impl AllowedHost {
    pub(crate) fn parse(s: &str) -> Result<AllowedHost, String> {
        let bad = || format!("{s:?} is not a host name: NAME, NAME:PORT, an IP address or [IPv6]:PORT");
        if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| b.is_ascii_graphic()) || s.contains(['/', '@', '*']) {
            return Err(bad());
        }
        let (host, port) = split_authority(s).ok_or_else(bad)?;
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().map_err(|_| bad())?),
        };
        if host.starts_with('[') && host_ip(&host).is_none() {
            return Err(bad());
        }
        Ok(AllowedHost { host, port })
    }
}

/// Longest request-header value echoed back in a refusal.
const MAX_ECHO: usize = 200;

fn echo(value: &str) -> String {
    match value.char_indices().nth(MAX_ECHO) {
        Some((i, _)) => format!("{}...", &value[..i]),
        None => value.to_owned(),
    }
}

pub(crate) struct Gate {
    origins: Vec<AllowedOrigin>,
    hosts: Vec<AllowedHost>,
    tokens: Vec<crate::options::BearerToken>,
    pub(crate) registry: Arc<Registry>,
    /// How long an MCP session lives without a request (for refusals).
    pub(crate) session_keep_alive: Duration,
    connections: Arc<Connections>,
    body_timeout: Duration,
    min_body_rate: u64,
    max_body_bytes: usize,
}

/// Equal bytes, in a time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        let y = b.get(i % b.len().max(1)).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

impl Gate {
    pub(crate) fn new(
        http: &HttpOptions,
        registry: Arc<Registry>,
        session_keep_alive: Duration,
        connections: Arc<Connections>,
        max_body_bytes: usize,
    ) -> Gate {
        Gate {
            origins: http.allowed_origins.iter().filter_map(|o| AllowedOrigin::parse(o).ok()).collect(),
            hosts: http.allowed_hosts.iter().filter_map(|h| AllowedHost::parse(h).ok()).collect(),
            tokens: http.tokens.clone(),
            registry,
            session_keep_alive,
            connections,
            body_timeout: http.body_timeout,
            min_body_rate: http.min_body_rate,
            max_body_bytes,
        }
    }

    pub(crate) fn validate_origin(s: &str) -> Result<(), String> {
        AllowedOrigin::parse(s).map(|_| ())
    }

    fn origin_allowed(&self, value: &HeaderValue) -> bool {
        let Ok(value) = value.to_str() else { return false };
        let value = value.trim();
        let origin = match Origin::parse(value) {
            Some((o, false)) => Some(o),
            // `:*` is for the allow-list, never a real origin.
            Some((_, true)) => return false,
            None => None,
        };
        if origin.as_ref().is_some_and(Origin::is_loopback) {
            return true;
        }
        self.origins.iter().any(|a| a.matches(value, origin.as_ref()))
    }

    /// Checks the request's authority (see the module docs); `local` is
    /// the address the connection reached.
    fn check_host(&self, uri: &axum::http::Uri, headers: &HeaderMap, local: Option<IpAddr>) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next();
        if hosts.next().is_some() {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "Bad Request: the request has more than one Host header line (RFC 9112 section 3.2 asks for exactly \
                 one)",
            ));
        }
        // An absolute-form target's authority replaces Host (RFC 9112 3.2.2).
        let (named, what) = match (uri.authority(), host) {
            (Some(authority), _) => (authority.as_str().to_owned(), "request target's authority"),
            (None, Some(value)) => match value.to_str() {
                Ok(v) if !v.trim().is_empty() => (v.trim().to_owned(), "Host header"),
                _ => return Err(Refusal::new(StatusCode::BAD_REQUEST, "Bad Request: the Host header is not valid")),
            },
            (None, None) => {
                return Err(Refusal::new(StatusCode::BAD_REQUEST, "Bad Request: the request has no Host header"))
            }
        };
        let Some((name, port)) = split_authority(&named) else {
            return Err(Refusal::new(StatusCode::BAD_REQUEST, format!("Bad Request: the {what} is not valid")));
        };
        let port = match port.map(str::parse::<u16>) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(_)) => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("Bad Request: the {what}'s port is not valid"),
                ))
            }
        };
        if is_loopback_host(&name) {
            return Ok(());
        }
        let ip = host_ip(&name).map(|ip| ip.to_canonical());
        if ip.is_some() && ip == local.map(|l| l.to_canonical()) {
            return Ok(());
        }
        if self.hosts.iter().any(|a| a.host == name && a.port.is_none_or(|p| Some(p) == port)) {
            return Ok(());
        }
        let shown = echo(&named);
        let bare = echo(&name);
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden: the {what} names {shown}, which is not a name this server answers to (loopback, the \
                 address a client connected to, or one allowed with --allow-host). If clients reach this server by \
                 that name, start it with --allow-host {bare}; otherwise connect by its address, or have the proxy \
                 in front send one of those as Host. (This protects the server from web pages that rebind their \
                 DNS name to it.)"
            ),
        ))
    }

    /// The principal whose token the request carries. Every token is
    /// compared, so the time does not tell which one matched.
    fn principal(&self, headers: &HeaderMap) -> Option<String> {
        let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim().as_bytes();
        let mut found = None;
        for t in &self.tokens {
            if constant_time_eq(token, t.token.as_bytes()) {
                found = Some(t.name.clone());
            }
        }
        found
    }

    /// Reads the whole body within its time (see the module docs).
    async fn read_body(&self, body: axum::body::Body) -> Result<axum::body::Bytes, Refusal> {
        let started = tokio::time::Instant::now();
        let mut stream = body.into_data_stream();
        let mut got: Vec<u8> = Vec::new();
        loop {
            // One more second for every `min_body_rate` bytes received.
            let earned = Duration::from_secs_f64(got.len() as f64 / self.min_body_rate.max(1) as f64);
            let deadline = started + self.body_timeout + earned;
            let next = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    return Err(Refusal::new(
                        StatusCode::REQUEST_TIMEOUT,
                        format!(
                            "Request Timeout: the request body was not complete after {} s ({} bytes received); a \
                             body must arrive within {} s plus 1 s per {} bytes (the server's \
                             --http-body-timeout-seconds and --http-min-body-rate)",
                            started.elapsed().as_secs(),
                            got.len(),
                            self.body_timeout.as_secs(),
                            self.min_body_rate
                        ),
                    )
                    .closing())
                }
            };
            match next {
                None => return Ok(got.into()),
                Some(Ok(chunk)) => {
                    if got.len().saturating_add(chunk.len()) > self.max_body_bytes {
                        return Err(Refusal::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!(
                                "Payload Too Large: the request body is over {} bytes, the most this server takes \
                                 (input files count in base64: see --max-input-bytes)",
                                self.max_body_bytes
                            ),
                        )
                        .closing());
                    }
                    got.extend_from_slice(&chunk);
                }
                Some(Err(_)) => {
                    return Err(Refusal::new(
                        StatusCode::BAD_REQUEST,
                        "Bad Request: the request body could not be read",
                    )
                    .closing())
                }
            }
        }
    }
}

/// A refusal: its status, message, and whether the connection closes.
#[derive(Debug)]
pub(crate) struct Refusal {
    status: StatusCode,
    message: String,
    close: bool,
}

impl Refusal {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into(), close: false }
    }

    /// Closes the connection after the answer (the peer's remaining bytes
    /// are not read).
    pub(crate) fn closing(mut self) -> Refusal {
        self.close = true;
        self
    }

    pub(crate) fn response(self) -> axum::response::Response {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": self.message}});
        let mut response = axum::response::Response::new(axum::body::Body::from(body.to_string()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The gate as an axum middleware (see the module docs).
pub(crate) async fn gate(
    axum::extract::State(gate): axum::extract::State<Arc<Gate>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match pass(&gate, request, next).await {
        Ok(response) => response,
        Err(refusal) => refusal.response(),
    }
}

async fn pass(
    gate: &Gate,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, Refusal> {
    let conn = request.extensions().get::<Arc<Conn>>().cloned();
    gate.check_host(request.uri(), request.headers(), conn.as_ref().map(|c| c.local.ip()))?;
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        if !gate.origin_allowed(origin) {
            return Err(Refusal::new(StatusCode::FORBIDDEN, "Forbidden: this Origin is not allowed"));
        }
    }
    let principal = if gate.tokens.is_empty() {
        None
    } else {
        match gate.principal(request.headers()) {
            Some(p) => Some(p),
            None => {
                return Err(Refusal::new(StatusCode::UNAUTHORIZED, "Unauthorized: a valid bearer token is required"))
            }
        }
    };
    // With tokens, a connection counts against its token from its first
    // authenticated request (without, it was counted when accepted).
    if let (Some(p), Some(conn)) = (&principal, &conn) {
        let mut claim = conn.claim.lock().unwrap_or_else(|e| e.into_inner());
        if claim.is_none() {
            let claimed = gate
                .connections
                .claim(ClientId::Token(p.clone()))
                .map_err(|m| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, m).closing())?;
            *claim = Some(claimed);
        }
    }
    let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(id) = &session {
        if !gate.registry.bind_principal(id, principal.as_deref()) {
            return Err(Refusal::new(StatusCode::FORBIDDEN, "Forbidden: this MCP session belongs to another client"));
        }
    }
    let (mut parts, body) = request.into_parts();
    let body = gate.read_body(body).await?;
    if let Some(p) = &principal {
        parts.extensions.insert(Principal(p.clone()));
    }
    let is_delete = parts.method == Method::DELETE;
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
    let full = Arc::new(OnceLock::new());
    let mut response = SESSIONS_FULL.scope(Arc::clone(&full), next.run(request)).await;
    if let Some(held) = full.get() {
        return Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            sessions_full_message(*held, gate.session_keep_alive),
        ));
    }
    if session.is_none() {
        // An `initialize` answered with a new MCP session: it belongs to this token.
        if let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            gate.registry.bind_principal(id, principal.as_deref());
        }
    }
    // The SDK answers a session's DELETE with 202; clients (the official
    // SDKs) expect 200 or 204 and log anything else as a failure.
    if is_delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    Ok(response)
}

/// The options' checks that need the gate's parsers.
impl HttpOptions {
    /// Checks the options; the message names the bad entry.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections_per_client == 0 {
            return Err("the HTTP connection limits must be at least 1".into());
        }
        if self.body_timeout.is_zero() || self.min_body_rate == 0 {
            return Err("the HTTP body timeout and minimum body rate must be more than 0".into());
        }
        if self.max_mcp_sessions == 0 {
            return Err("the MCP session limit must be at least 1".into());
        }
        if self.header_timeout.is_zero() {
            return Err("the HTTP header timeout must be longer than 0".into());
        }
        for o in &self.allowed_origins {
            Gate::validate_origin(o)?;
        }
        for h in &self.allowed_hosts {
            AllowedHost::parse(h)?;
        }
        for t in &self.tokens {
            if t.token.len() < MIN_TOKEN_BYTES {
                return Err(format!("the token in {} is shorter than {MIN_TOKEN_BYTES} bytes", t.name));
            }
            if !t.token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("the token in {} has bytes other than visible ASCII", t.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::BearerToken;

    fn gate(origins: &[&str], tokens: &[(&str, &str)], hosts: &[&str]) -> Gate {
        let http = HttpOptions {
            allowed_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            tokens: tokens.iter().map(|(n, t)| BearerToken { name: (*n).into(), token: (*t).into() }).collect(),
            ..HttpOptions::default()
        };
        let registry = Arc::new(Registry::new(
            crate::clients::Limits { per_client: 1, total: 1 },
            std::time::Duration::from_secs(1),
        ));
        Gate::new(&http, registry, Duration::from_secs(600), Connections::new(4), 1 << 20)
    }

    #[test]
    fn origins_loopback_and_allowed_only() {
        let g = gate(&["https://app.example.com", "http://tool.example:*"], &[], &[]);
        let ok = |o: &str| g.origin_allowed(&HeaderValue::from_str(o).unwrap());
        for yes in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://127.0.0.9:8443",
            "http://[::1]:1234",
            "HTTP://LOCALHOST",
            "https://app.example.com",
            "https://app.example.com:443",
            "http://tool.example:9999",
        ] {
            assert!(ok(yes), "{yes} refused");
        }
        for no in [
            "https://evil.example",
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://app.example.com.evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1@evil.example",
            "http://localhost:*",
            "null",
            "",
            "garbage",
            "https://tool.example:1",
        ] {
            assert!(!ok(no), "{no} allowed");
        }
        assert!(gate(&["null"], &[], &[]).origin_allowed(&HeaderValue::from_static("null")));
        for bad in ["example.com", "https://", "https://a/b", "https://a:x", "*"] {
            assert!(AllowedOrigin::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn tokens_name_their_principal() {
        let g = gate(&[], &[("A_TOKEN", "0123456789abcdef-a"), ("B_TOKEN", "0123456789abcdef-b")], &[]);
        let who = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            g.principal(&h)
        };
        assert_eq!(who("Bearer 0123456789abcdef-a").as_deref(), Some("A_TOKEN"));
        assert_eq!(who("bearer  0123456789abcdef-b ").as_deref(), Some("B_TOKEN"));
        for no in ["Bearer 0123456789abcdef-", "Bearer 0123456789abcdef-ab", "Basic 0123456789abcdef-a", "Bearer", ""] {
            assert_eq!(who(no), None, "{no:?}");
        }
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"ab", b"abc") && !constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    fn host_check(g: &Gate, target: &str, hosts: &[&str], local: &str) -> Result<(), Refusal> {
        let uri: axum::http::Uri = target.parse().unwrap();
        let mut h = HeaderMap::new();
        for v in hosts {
            h.append(header::HOST, HeaderValue::from_str(v).unwrap());
        }
        g.check_host(&uri, &h, Some(local.parse().unwrap()))
    }

    #[test]
    fn hosts_loopback_the_address_reached_and_allowed_names() {
        let g = gate(&[], &[], &["mcp.example", "proxy.example:8443", "10.9.9.9"]);
        let local = "192.0.2.2";
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.1.2.3",
            "192.0.2.2:9999",
            "192.0.2.2",
            "mcp.example",
            "MCP.example:1234",
            "proxy.example:8443",
            "10.9.9.9:1",
        ] {
            assert!(host_check(&g, "/mcp", &[ok], local).is_ok(), "{ok} refused");
        }
        for (no, status) in [
            ("evil.example", 403),
            ("192.0.2.3:80", 403),
            ("proxy.example:8444", 403),
            ("proxy.example", 403),
            ("localhost.evil.example", 403),
            ("mcp.example.evil", 403),
            ("[::ffff:192.0.2.3]", 403),
            ("127.0.0.1:notaport", 400),
            ("[::1", 400),
        ] {
            let r = host_check(&g, "/mcp", &[no], local).expect_err(no);
            assert_eq!(r.status.as_u16(), status, "{no}: {}", r.message);
        }
        // An IPv4-mapped address of the one reached is that address.
        assert!(host_check(&g, "/mcp", &["[::ffff:192.0.2.2]"], local).is_ok());
        let r = host_check(&g, "/mcp", &["evil.example:8080"], local).unwrap_err();
        assert!(r.message.contains("Host header names evil.example:8080"), "{}", r.message);
        assert!(r.message.contains("--allow-host evil.example;"), "{}", r.message);
    }

    #[test]
    fn two_host_lines_are_a_bad_request_and_an_absolute_target_replaces_host() {
        let g = gate(&[], &[], &[]);
        let r = host_check(&g, "/mcp", &["127.0.0.1:80", "evil.example"], "127.0.0.1").unwrap_err();
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.message);
        assert!(r.message.contains("more than one Host header"), "{}", r.message);
        let r = host_check(&g, "/mcp", &[], "127.0.0.1").unwrap_err();
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = host_check(&g, "http://evil.example/mcp", &["127.0.0.1:80"], "127.0.0.1").unwrap_err();
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.message);
        assert!(r.message.contains("request target's authority names evil.example"), "{}", r.message);
        assert!(host_check(&g, "http://127.0.0.1:80/mcp", &["evil.example"], "127.0.0.1").is_ok());
    }

    #[test]
    fn allowed_hosts_parse() {
        assert_eq!(AllowedHost::parse("A.example:80"), Ok(AllowedHost { host: "a.example".into(), port: Some(80) }));
        assert_eq!(AllowedHost::parse("[fe80::1]"), Ok(AllowedHost { host: "[fe80::1]".into(), port: None }));
        for bad in ["", "a/b", "http://a", "a:x", "a:99999", "*", "[zz]", "a b", "user@a"] {
            assert!(AllowedHost::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn sources_group_loopback_and_ipv6_prefixes() {
        let s = |ip: &str| Source::of(ip.parse().unwrap());
        assert_eq!(s("127.0.0.1"), s("127.0.0.2"));
        assert_eq!(s("::1"), Source::Loopback);
        assert_eq!(s("::ffff:127.0.0.1"), Source::Loopback);
        assert_eq!(s("::ffff:192.0.2.2"), s("192.0.2.2"));
        assert_ne!(s("192.0.2.2"), s("192.0.2.3"));
        assert_eq!(s("2001:db8:1:2::5"), s("2001:db8:1:2:ffff::9"));
        assert_ne!(s("2001:db8:1:2::5"), s("2001:db8:1:3::5"));
        assert_eq!(s("2001:db8:1:2::5").to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn connections_are_bounded_per_client() {
        let table = Connections::new(2);
        let a = || ClientId::Token("A".into());
        let first = table.claim(a()).unwrap();
        let _second = table.claim(a()).unwrap();
        let refused = table.claim(a()).unwrap_err();
        assert!(refused.contains("the token in A already has 2 HTTP connections open"), "{refused}");
        let _b = table.claim(ClientId::Source(Source::Loopback)).unwrap();
        drop(first);
        let _again = table.claim(a()).unwrap();
    }
}
