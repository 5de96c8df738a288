//! The options of `pycage mcp --http` and what the gate, the session
//! manager and the server share of HTTP: bearer tokens, the defaults of
//! every bound, and the MCP session header.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The header carrying a legacy MCP session's id.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

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

/// Default of [`HttpOptions::max_connections_per_client`]: room for a
/// client's 16 runs in flight (one connection each), its standalone
/// stream and its other requests, several times over; an eighth of
/// [`DEFAULT_MAX_CONNECTIONS`].
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

/// Default of [`HttpOptions::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of [`HttpOptions::min_body_rate`]: 16 KiB/s (128 kbit/s), a
/// poor mobile link's pace; the largest body the default limits allow
/// (about 9.4 MB) has 10 minutes at it.
pub const DEFAULT_MIN_BODY_RATE: u64 = 16 * 1024;

/// What the HTTP gate admits, and how much the HTTP server holds at once.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Origins allowed besides loopback ones: `scheme://host[:port]`, with
    /// `:*` for any port, or `null`.
    pub allowed_origins: Vec<String>,
    /// Names (`NAME` for any port, or `NAME:PORT`) a request's `Host` may
    /// give besides loopback ones and the address its connection reached.
    pub allowed_hosts: Vec<String>,
    /// When not empty, every request needs one of these.
    pub tokens: Vec<BearerToken>,
    /// TCP connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// TCP connections of one client at once: one token (counted from a
    /// connection's first authenticated request), or without tokens one
    /// source (counted when accepted). Beyond it: 503, and closed.
    pub max_connections_per_client: usize,
    /// How long a request's body may take, plus one second per
    /// [`HttpOptions::min_body_rate`] bytes received; then 408, and the
    /// connection is closed.
    pub body_timeout: Duration,
    /// Bytes per second a body must keep up, on average, after
    /// [`HttpOptions::body_timeout`] (see there).
    pub min_body_rate: u64,
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
            allowed_hosts: Vec::new(),
            tokens: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            min_body_rate: DEFAULT_MIN_BODY_RATE,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_mcp_sessions: DEFAULT_MAX_MCP_SESSIONS,
        }
    }
}

tokio::task_local! {
    /// Set by the gate around a request: where `create_session` leaves the
    /// number of MCP sessions held when it refuses one, so the gate answers
    /// 503 with its own message (the SDK would answer 500).
    pub(crate) static SESSIONS_FULL: Arc<OnceLock<usize>>;
}

pub(crate) fn sessions_full_message(held: usize, keep_alive: Duration) -> String {
    let s = if held == 1 { "" } else { "s" };
    format!(
        "Service Unavailable: the server holds {held} MCP session{s}, the most it keeps at once; a client frees its \
         session by closing it (HTTP DELETE with its Mcp-Session-Id), or one expires after {} s without a request",
        keep_alive.as_secs()
    )
}
