//! The transports: stdio, and streamable HTTP behind its gate.
//!
//! Stdio has one client; end of file on stdin is that client gone (its runs
//! abort at once, before the SDK's drain of in-flight responses).
//!
//! Streamable HTTP: every request first passes the gate. A request whose
//! `Origin` header is present and neither loopback nor allowed
//! ([`HttpOptions::allowed_origins`]) is refused with 403, as the transport
//! specification asks (a browser page of another origin must not reach a
//! local server). With bearer tokens configured, a request without a valid
//! `Authorization: Bearer` is refused with 401; the token that passed names
//! the request's principal. Tokens are compared in constant time (the time
//! depends on the lengths only). An MCP session is bound to the token that
//! opened it; a request of another token carrying its `Mcp-Session-Id` is
//! refused with 403.
//!
//! The SDK's session manager is wrapped so the [`Registry`] learns when an
//! MCP session opens and closes (DELETE, or its keep-alive) and how many
//! response streams each holds open (see `clients`), and so that at most
//! [`HttpOptions::max_mcp_sessions`] live at once: an `initialize` beyond
//! them is refused with 503 (each holds memory until its keep-alive).
//!
//! Before any of that, the HTTP server bounds what a peer can hold without
//! authenticating: at most [`HttpOptions::max_connections`] TCP connections
//! are served at once (one more is answered 503 and closed at once), and a
//! connection must send a request's headers within
//! [`HttpOptions::header_timeout`] of opening or of its previous response
//! ending, or it is closed. A response in flight (an SSE stream of a long
//! run) is never cut by that timeout.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};
use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clients::{Owner, Registry};
use crate::{CodeModeServer, ServeError};

/// The header carrying a legacy MCP session's id.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve_stdio(server: CodeModeServer) -> Result<(), ServeError> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let registry = server.registry();
    let stdin = EofWatch { inner: stdin, registry: Some(registry) };
    let running = server.serve((stdin, stdout)).await.map_err(|e| ServeError::Start(e.to_string()))?;
    let _ = running.waiting().await;
    Ok(())
}

/// Stdin that reports the stdio client gone at end of file (or a read error).
struct EofWatch<R> {
    inner: R,
    registry: Option<Arc<Registry>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            if let Some(registry) = self.registry.take() {
                registry.gone(&Owner::Stdio);
            }
        }
        polled
    }
}

/// One bearer token and the name of the principal it authenticates.
#[derive(Clone)]
pub struct BearerToken {
    /// Shown in logs and used as the principal (for example the
    /// environment variable the token came from); never the token.
    pub name: String,
    pub token: String,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Shortest token accepted: guessing must be hopeless.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Default of [`HttpOptions::max_connections`]: half the usual soft limit
/// of 1,024 open files, leaving the rest to the runs' processes and pipes.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Default of [`HttpOptions::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of [`HttpOptions::max_mcp_sessions`] (each holds tens of KB).
pub const DEFAULT_MAX_MCP_SESSIONS: usize = 1024;

/// What the HTTP gate admits, and how much the HTTP server holds at once.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Origins allowed besides loopback ones: `scheme://host[:port]`, with
    /// `:*` for any port, or `null`.
    pub allowed_origins: Vec<String>,
    /// When not empty, every request needs one of these.
    pub tokens: Vec<BearerToken>,
    /// TCP connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from its opening or from the end of its previous response (so it is
    /// also how long an idle keep-alive connection stays open).
    pub header_timeout: Duration,
    /// MCP sessions (legacy `Mcp-Session-Id` ones) alive at once; an
    /// `initialize` beyond them is refused with 503.
    pub max_mcp_sessions: usize,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            allowed_origins: Vec::new(),
            tokens: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_mcp_sessions: DEFAULT_MAX_MCP_SESSIONS,
        }
    }
}

impl HttpOptions {
    /// Checks the options; the message names the bad entry.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("the HTTP connection limit must be at least 1".into());
        }
        if self.max_mcp_sessions == 0 {
            return Err("the MCP session limit must be at least 1".into());
        }
        if self.header_timeout.is_zero() {
            return Err("the HTTP header timeout must be longer than 0".into());
        }
        for o in &self.allowed_origins {
            AllowedOrigin::parse(o)?;
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
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            (format!("[{}]", host.to_ascii_lowercase()), after.strip_prefix(':'))
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
                None => (authority.to_ascii_lowercase(), None),
            }
        };
        if host.is_empty() {
            return None;
        }
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
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        self.host == "localhost" || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
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

/// The request's principal, put in its extensions by the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal(pub String);

struct Gate {
    origins: Vec<AllowedOrigin>,
    tokens: Vec<BearerToken>,
    registry: Arc<Registry>,
    /// How long an MCP session lives without a request (for refusals).
    session_keep_alive: Duration,
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
}

/// A refusal with a JSON-RPC error (no id) as its body, which the
/// transport specification allows and SDK clients show to their user.
fn refuse(status: StatusCode, message: impl Into<String>) -> axum::response::Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message.into()}});
    let mut response = axum::response::Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

async fn gate(
    axum::extract::State(gate): axum::extract::State<Arc<Gate>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        if !gate.origin_allowed(origin) {
            return refuse(StatusCode::FORBIDDEN, "Forbidden: this Origin is not allowed");
        }
    }
    let principal = if gate.tokens.is_empty() {
        None
    } else {
        match gate.principal(request.headers()) {
            Some(p) => Some(p),
            None => return refuse(StatusCode::UNAUTHORIZED, "Unauthorized: a valid bearer token is required"),
        }
    };
    let session = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(id) = &session {
        if !gate.registry.bind_principal(id, principal.as_deref()) {
            return refuse(StatusCode::FORBIDDEN, "Forbidden: this MCP session belongs to another client");
        }
    }
    if let Some(p) = &principal {
        request.extensions_mut().insert(Principal(p.clone()));
    }
    let full = Arc::new(OnceLock::new());
    let response = SESSIONS_FULL.scope(Arc::clone(&full), next.run(request)).await;
    if let Some(held) = full.get() {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, sessions_full_message(*held, gate.session_keep_alive));
    }
    if session.is_none() {
        // An `initialize` answered with a new MCP session: it belongs to this token.
        if let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            gate.registry.bind_principal(id, principal.as_deref());
        }
    }
    response
}

tokio::task_local! {
    /// Set by the gate around a request: where `create_session` leaves the
    /// number of MCP sessions held when it refuses one, so the gate answers
    /// 503 with its own message (the SDK would answer 500).
    static SESSIONS_FULL: Arc<OnceLock<usize>>;
}

fn sessions_full_message(held: usize, keep_alive: Duration) -> String {
    let s = if held == 1 { "" } else { "s" };
    format!(
        "Service Unavailable: the server holds {held} MCP session{s}, the most it keeps at once; a client frees its \
         session by closing it (HTTP DELETE with its Mcp-Session-Id), or one expires after {} s without a request",
        keep_alive.as_secs()
    )
}

/// Why the session manager failed.
#[derive(Debug, thiserror::Error)]
enum SessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("the server holds {0} MCP sessions, the most it keeps at once")]
    Full(usize),
}

/// The MCP sessions alive, and those being created (counted so that
/// concurrent `initialize`s cannot pass the limit together).
#[derive(Debug, Default)]
struct Live {
    ids: HashSet<SessionId>,
    creating: usize,
}

/// The SDK's in-memory session manager, reporting to the registry and
/// holding at most `max` sessions.
struct Tracked {
    inner: LocalSessionManager,
    registry: Arc<Registry>,
    live: Arc<Mutex<Live>>,
    max: usize,
}

/// One session being created; dropped (even by a cancelled request) it
/// gives its place back.
struct Creating(Arc<Mutex<Live>>);

impl Drop for Creating {
    fn drop(&mut self) {
        let mut live = lock(&self.0);
        live.creating = live.creating.saturating_sub(1);
    }
}

fn lock(live: &Mutex<Live>) -> MutexGuard<'_, Live> {
    // A panic while holding the lock leaves plain counts behind: go on.
    live.lock().unwrap_or_else(|e| e.into_inner())
}

impl SessionManager for Tracked {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let creating = {
            let mut live = lock(&self.live);
            let held = live.ids.len() + live.creating;
            if held >= self.max {
                let _ = SESSIONS_FULL.try_with(|full| full.set(held));
                return Err(SessionsError::Full(held));
            }
            live.creating += 1;
            Creating(Arc::clone(&self.live))
        };
        let (id, transport) = self.inner.create_session().await?;
        lock(&self.live).ids.insert(id.clone());
        drop(creating);
        self.registry.opened(Owner::McpSession(id.to_string()));
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    fn close_session(&self, id: &SessionId) -> impl Future<Output = Result<(), Self::Error>> + Send {
        // Both DELETE and the session's worker ending close it: a set, not a count.
        lock(&self.live).ids.remove(id);
        self.registry.gone(&Owner::McpSession(id.to_string()));
        async move { Ok(self.inner.close_session(id).await?) }
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>> + Send
    {
        // Counted before the request reaches the handler.
        let guard = self.registry.stream(id);
        async move {
            let stream = self.inner.create_stream(id, message).await.map_err(SessionsError::Local)?;
            Ok(stream.map(move |m| {
                let _held = &guard;
                m
            }))
        }
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>> + Send
    {
        let guard = self.registry.stream(id);
        async move {
            let stream = self.inner.create_standalone_stream(id).await.map_err(SessionsError::Local)?;
            Ok(stream.map(move |m| {
                let _held = &guard;
                m
            }))
        }
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>> + Send
    {
        let guard = self.registry.stream(id);
        async move {
            let stream = self.inner.resume(id, last_event_id).await.map_err(SessionsError::Local)?;
            Ok(stream.map(move |m| {
                let _held = &guard;
                m
            }))
        }
    }
}

/// Serves streamable HTTP at `http://<listener>/mcp` until `shutdown` is
/// cancelled; then stops accepting, lets the responses in flight end (the
/// SDK ends its streams on the same token) and returns.
pub async fn serve_http(
    server: CodeModeServer,
    listener: tokio::net::TcpListener,
    http: &HttpOptions,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    http.validate().map_err(ServeError::Options)?;
    let registry = server.registry();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = shutdown.child_token();
    // Room for the largest `files` argument in base64, and the program.
    let inputs = server.options().input_limits.max_total_bytes;
    config.max_request_body_bytes = usize::try_from(inputs.saturating_mul(4) / 3 + (4 << 20)).unwrap_or(usize::MAX);
    let mut sessions = LocalSessionManager::default();
    // An MCP session outlives a pause as long as its named sessions do.
    let keep = server.options().session_idle.max(sessions.session_config.keep_alive.unwrap_or_default());
    sessions.session_config.keep_alive = Some(keep);
    let manager = Arc::new(Tracked {
        inner: sessions,
        registry: Arc::clone(&registry),
        live: Arc::default(),
        max: http.max_mcp_sessions,
    });
    let service = StreamableHttpService::new(move || Ok(server.clone()), manager, config);
    let gate_state = Arc::new(Gate {
        origins: http.allowed_origins.iter().filter_map(|o| AllowedOrigin::parse(o).ok()).collect(),
        tokens: http.tokens.clone(),
        registry,
        session_keep_alive: keep,
    });
    let router =
        axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn_with_state(gate_state, gate));
    serve_connections(listener, router, http, shutdown).await;
    Ok(())
}

/// The accept loop: each connection takes a permit of `max_connections`
/// before hyper reads a byte of it, so no peer, authenticated or not, can
/// hold more descriptors than that.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    http: &HttpOptions,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(http.max_connections));
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper starts this timer whenever it waits for a request's head (a
    // new connection, or an idle keep-alive one), never while a response
    // is being written: it bounds idle connections and slow headers alike.
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(http.header_timeout).keep_alive(true);
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                accept_failed(&e, &shutdown).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refuse_connection(&stream, http.max_connections);
            continue;
        };
        let io = hyper_util::rt::TokioIo::new(Held { permit: Some(permit), stream });
        let conn = builder.serve_connection(io, hyper_util::service::TowerToHyperService::new(router.clone()));
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            tokio::select! {
                // A failed connection (a header timeout, a reset) concerns
                // that peer alone.
                _ = conn.as_mut() => {}
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// After a failed `accept`. Out of descriptors (or memory), accepting at
/// once would fail again at once: wait a second for some to close, as
/// hyper's and axum's servers do. A peer that gave up first costs nothing.
async fn accept_failed(e: &std::io::Error, shutdown: &tokio_util::sync::CancellationToken) {
    use std::io::ErrorKind;
    if matches!(e.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused) {
        return;
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
        () = shutdown.cancelled() => {}
    }
}

/// Answers a connection beyond the limit with 503 and closes it, without
/// reading its request: a client learns why rather than waiting in the
/// listen queue. The write never waits (a new socket's send buffer is
/// empty); should it fail, the connection is just closed.
fn refuse_connection(stream: &tokio::net::TcpStream, max: usize) {
    let message = format!(
        "Service Unavailable: the server has {max} HTTP connections open, the most it serves at once; try again \
         shortly"
    );
    let body =
        serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}}).to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

/// A connection's socket with its permit. The permit goes back before the
/// socket closes (at shutdown, or first in field order on drop), so a peer
/// that sees the close can connect again at once.
struct Held {
    permit: Option<OwnedSemaphorePermit>,
    stream: tokio::net::TcpStream,
}

impl AsyncRead for Held {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.permit = None;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(origins: &[&str], tokens: &[(&str, &str)]) -> Gate {
        Gate {
            origins: origins.iter().map(|o| AllowedOrigin::parse(o).unwrap()).collect(),
            tokens: tokens.iter().map(|(n, t)| BearerToken { name: (*n).into(), token: (*t).into() }).collect(),
            registry: Arc::new(Registry::new(
                crate::clients::Limits { per_client: 1, total: 1 },
                std::time::Duration::from_secs(1),
            )),
            session_keep_alive: std::time::Duration::from_secs(600),
        }
    }

    #[test]
    fn origins_loopback_and_allowed_only() {
        let g = gate(&["https://app.example.com", "http://tool.example:*"], &[]);
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
        assert!(gate(&["null"], &[]).origin_allowed(&HeaderValue::from_static("null")));
        for bad in ["example.com", "https://", "https://a/b", "https://a:x", "*"] {
            assert!(AllowedOrigin::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn tokens_name_their_principal() {
        let g = gate(&[], &[("A_TOKEN", "0123456789abcdef-a"), ("B_TOKEN", "0123456789abcdef-b")]);
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
        let short =
            HttpOptions { tokens: vec![BearerToken { name: "T".into(), token: "short".into() }], ..Default::default() };
        assert!(short.validate().unwrap_err().contains("shorter than 16"));
    }

    #[test]
    fn http_limits_are_at_least_one() {
        assert!(HttpOptions::default().validate().is_ok());
        for bad in [
            HttpOptions { max_connections: 0, ..Default::default() },
            HttpOptions { max_mcp_sessions: 0, ..Default::default() },
            HttpOptions { header_timeout: Duration::ZERO, ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
