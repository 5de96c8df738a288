//! The transports: stdio, and streamable HTTP behind its gate.
//!
//! Stdio has one client; end of file on stdin is that client gone (its runs
//! abort at once, before the SDK's drain of in-flight responses).
//!
//! Streamable HTTP: every request first passes the gate (`gate`: Host,
//! Origin, bearer tokens, connections per client, the body's time).
//!
//! The SDK's session manager is wrapped so the [`Registry`] learns when an
//! MCP session opens and closes (DELETE, or its keep-alive) and which
//! response streams each request of a session has open: the POST that
//! carried it, and any GET resuming that stream with `Last-Event-ID` (see
//! `clients`). At most [`HttpOptions::max_mcp_sessions`] live at once: an
//! `initialize` beyond them is refused with 503 (each holds memory until
//! its keep-alive).
//!
//! Before any of that, the HTTP server bounds what a peer can hold without
//! authenticating: at most [`HttpOptions::max_connections`] TCP connections
//! are served at once (one more is answered 503 and closed at once); without
//! tokens, at most [`HttpOptions::max_connections_per_client`] of them from
//! one source (`gate::Source`), checked the same way; and a connection must
//! send a request's headers within [`HttpOptions::header_timeout`] of
//! opening or of its previous response ending, or it is closed. A response
//! in flight (an SSE stream of a long run) is never cut by that timeout.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};
use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clients::{request_key, Owner, Registry, Source};
use crate::gate::{ClientId, Conn, Connections, Gate};
use crate::options::{HttpOptions, SESSIONS_FULL};
use crate::server::{CodeModeServer, ServeError};

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
        // Counted before the request reaches the handler, so that its run
        // finds the stream; the stream's number comes with its first event.
        let mut guard = match &message {
            ClientJsonRpcMessage::Request(r) => Some(self.registry.request_stream(id, &request_key(&r.id))),
            _ => None,
        };
        async move {
            let stream = self.inner.create_stream(id, message).await.map_err(SessionsError::Local)?;
            Ok(stream.map(move |m| {
                if let Some(guard) = &mut guard {
                    guard.saw_event(m.event_id.as_deref());
                }
                m
            }))
        }
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>> + Send
    {
        // A GET resuming a request's stream keeps that request's run.
        let guard = self.registry.resumed_stream(id, &last_event_id);
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
    // The gate checks Host itself (the SDK's check knows loopback names
    // only, takes the first of two Host lines, and ignores an absolute
    // target's authority).
    config.allowed_hosts = Vec::new();
    let max_body = config.max_request_body_bytes;
    let service = StreamableHttpService::new(move || Ok(server.clone()), manager, config);
    let connections = Connections::new(http.max_connections_per_client);
    let gate_state = Arc::new(Gate::new(http, registry, keep, Arc::clone(&connections), max_body));
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate_state, crate::gate::gate));
    serve_connections(listener, router, http, connections, shutdown).await;
    Ok(())
}

/// The router with the connection in every request's extensions.
#[derive(Clone)]
struct WithConn {
    inner: hyper_util::service::TowerToHyperService<axum::Router>,
    conn: Arc<Conn>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for WithConn {
    type Response = <hyper_util::service::TowerToHyperService<axum::Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Response;
    type Error = <hyper_util::service::TowerToHyperService<axum::Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Error;
    type Future = <hyper_util::service::TowerToHyperService<axum::Router> as hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
    >>::Future;

    fn call(&self, mut request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        request.extensions_mut().insert(Arc::clone(&self.conn));
        self.inner.call(request)
    }
}

/// The accept loop: each connection takes a permit of `max_connections`
/// before hyper reads a byte of it, so no peer, authenticated or not, can
/// hold more descriptors than that.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    http: &HttpOptions,
    per_client: Arc<Connections>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    // Without tokens a connection's client is its source, known now.
    let by_source = http.tokens.is_empty();
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
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(&e, &shutdown).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refuse_connection(
                &stream,
                &format!(
                "Service Unavailable: the server has {} HTTP connections open, the most it serves at once; try again \
                 shortly",
                http.max_connections
            ),
            );
            continue;
        };
        let local = match stream.local_addr() {
            Ok(local) => local,
            // The socket is already gone.
            Err(_) => continue,
        };
        let source = Source::of(peer.ip());
        let claim = match by_source {
            false => None,
            true => match per_client.claim(ClientId::Source(source)) {
                Ok(claim) => Some(claim),
                Err(message) => {
                    refuse_connection(&stream, &message);
                    continue;
                }
            },
        };
        let conn = Arc::new(Conn { local, source, claim: Mutex::new(claim) });
        let io = hyper_util::rt::TokioIo::new(Held { permit: Some(permit), stream });
        let service =
            WithConn { inner: hyper_util::service::TowerToHyperService::new(router.clone()), conn: Arc::clone(&conn) };
        let served = builder.serve_connection(io, service);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            tokio::pin!(served);
            tokio::select! {
                // A failed connection (a header timeout, a reset) concerns
                // that peer alone.
                _ = served.as_mut() => {}
                () = shutdown.cancelled() => {
                    served.as_mut().graceful_shutdown();
                    let _ = served.await;
                }
            }
            // Requests still running hold the `Conn`; the connection no
            // longer counts against its client.
            conn.release();
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

/// Answers a connection beyond a limit with 503 and closes it, without
/// reading its request: a client learns why rather than waiting in the
/// listen queue. The write never waits (a new socket's send buffer is
/// empty); should it fail, the connection is just closed.
fn refuse_connection(stream: &tokio::net::TcpStream, message: &str) {
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
    use crate::options::BearerToken;

    #[test]
    fn short_tokens_are_refused() {
        let short =
            HttpOptions { tokens: vec![BearerToken { name: "T".into(), token: "short".into() }], ..Default::default() };
        assert!(short.validate().unwrap_err().contains("shorter than 16"));
    }

    #[test]
    fn http_limits_are_at_least_one() {
        assert!(HttpOptions::default().validate().is_ok());
        for bad in [
            HttpOptions { max_connections: 0, ..Default::default() },
            HttpOptions { max_connections_per_client: 0, ..Default::default() },
            HttpOptions { max_mcp_sessions: 0, ..Default::default() },
            HttpOptions { header_timeout: Duration::ZERO, ..Default::default() },
            HttpOptions { body_timeout: Duration::ZERO, ..Default::default() },
            HttpOptions { min_body_rate: 0, ..Default::default() },
            HttpOptions { allowed_hosts: vec!["a/b".into()], ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
