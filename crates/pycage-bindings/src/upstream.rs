//! MCP servers as bindings: one client connection per configured server.
//!
//! A connection is opened when the bindings are loaded (its tool list makes
//! the namespace and the stubs) and then shared: every call from every run
//! goes through the same [`Upstream`], concurrently (MCP multiplexes requests
//! by id). When the server dies (a crashed stdio child, a dropped HTTP
//! session), the next call finds the connection closed and opens a new one;
//! calls that were in flight when it died are rejected, not retried, since
//! the server may have acted on them. [`Upstream::close`] ends it for good.
//!
//! A call is abandoned when its own `timeout_ms` passes or when the run that
//! made it settles (timeout, cancel, the program finishing without awaiting
//! it): the runtime drops the call's future, and the SDK then tells the
//! server with `notifications/cancelled`.
//!
//! A stdio server starts with a scrubbed environment: [`BASE_ENV`] taken
//! from pycage's own, plus exactly the `env` entries of its `[[mcp]]` table.
//! Its stderr is read into a bounded tail that a failed start quotes.
//!
//! Results map to values by [`result_value`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use pycage_runtime::{BindingError, JsonValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ContentBlock, Implementation, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::ServiceExt;
use tokio::io::AsyncReadExt;

use crate::secret::Secret;

/// Per-call timeout when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Time to start a server and list its tools.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Variables a stdio server inherits from pycage's environment when set
/// there; everything else must be listed in its `env`.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];
/// Tail of a stdio server's stderr kept for error messages (2 KiB).
pub const MAX_STDERR_TAIL: usize = 2 * 1024;
/// Longest rejection message built from a tool's error text (8 KiB).
pub const MAX_ERROR_TEXT: usize = 8 * 1024;
/// HTTP requests in flight at once per server (the SDK's default is 16).
pub const MAX_HTTP_REQUESTS: usize = 64;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio { argv0: String, program: PathBuf, args: Vec<String>, cwd: PathBuf, env: Vec<(String, Secret)> },
    /// Streamable HTTP.
    Http { url: reqwest::Url, headers: Vec<(reqwest::header::HeaderName, Secret)> },
}

/// One `[[mcp]]` table, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub global: String,
    pub transport: UpstreamTransport,
    pub timeout: Duration,
}

impl UpstreamSpec {
    /// How messages name the server: its command line or its endpoint.
    pub fn label(&self) -> String {
        match &self.transport {
            UpstreamTransport::Stdio { argv0, args, .. } => {
                std::iter::once(argv0.as_str()).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
            }
            UpstreamTransport::Http { url, .. } => crate::http::endpoint_label(url),
        }
    }
}

/// Why a server could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("MCP server `{label}` ({global}): {message}")]
pub struct ConnectError {
    pub global: String,
    pub label: String,
    pub message: String,
}

type Conn = RunningService<RoleClient, ClientConfig>;

/// A shared connection to one server, reopened when it dies.
pub struct Upstream {
    spec: UpstreamSpec,
    /// The command line or endpoint: for the operator's messages only.
    label: String,
    /// The server's own name (from `initialize`): what programs and models see.
    name: std::sync::OnceLock<String>,
    conn: tokio::sync::Mutex<Option<Conn>>,
    stderr_tail: Arc<StdMutex<Vec<u8>>>,
    closed: std::sync::atomic::AtomicBool,
    connects: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl Upstream {
    /// Connects and returns the server's tools.
    pub async fn connect(spec: UpstreamSpec) -> Result<(Arc<Self>, Vec<Tool>), ConnectError> {
        let up = Arc::new(Upstream {
            label: spec.label(),
            name: std::sync::OnceLock::new(),
            spec,
            conn: tokio::sync::Mutex::new(None),
            stderr_tail: Arc::new(StdMutex::new(Vec::new())),
            closed: std::sync::atomic::AtomicBool::new(false),
            connects: std::sync::atomic::AtomicU64::new(0),
        });
        let peer = up.peer().await.map_err(|e| up.connect_error(e))?;
        // A 2026-era server may not name itself; then the namespace stands in.
        if let Some(name) = peer.peer_info().and_then(|i| i.server_info.as_ref().map(|s| s.name.clone())) {
            let _ = up.name.set(name);
        }
        let tools = tokio::time::timeout(CONNECT_TIMEOUT, peer.list_all_tools())
            .await
            .map_err(|_| up.connect_error(format!("listing tools timed out after {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| up.connect_error(format!("listing tools failed: {e}")))?;
        Ok((up, tools))
    }

    fn connect_error(&self, message: impl Into<String>) -> ConnectError {
        ConnectError { global: self.spec.global.clone(), label: self.label.clone(), message: message.into() }
    }

    /// The configuration this connection was made from.
    pub fn spec(&self) -> &UpstreamSpec {
        &self.spec
    }

    /// How programs and models see the server: its own name from
    /// `initialize`, never its command line or URL (either may hold a
    /// secret the operator put there).
    pub fn display_name(&self) -> &str {
        self.name.get().map(String::as_str).unwrap_or(self.spec.global.as_str())
    }

    /// How many times a connection was opened (1 after [`Upstream::connect`]).
    pub fn connects(&self) -> u64 {
        self.connects.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A live peer: the current connection, or a new one if it died.
    pub async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut conn = self.conn.lock().await;
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err("the connection was closed (pycage is shutting down)".into());
        }
        if let Some(c) = conn.as_ref() {
            if !c.is_closed() && !c.peer().is_transport_closed() {
                return Ok(c.peer().clone());
            }
        }
        // Dropping the dead service kills a stdio child that is still there.
        *conn = None;
        let fresh = tokio::time::timeout(CONNECT_TIMEOUT, self.open())
            .await
            .map_err(|_| format!("starting the server timed out after {} s", CONNECT_TIMEOUT.as_secs()))??;
        self.connects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let peer = fresh.peer().clone();
        *conn = Some(fresh);
        Ok(peer)
    }

    async fn open(&self) -> Result<Conn, String> {
        let info = ClientConfig::new(Default::default(), Implementation::new("pycage", env!("CARGO_PKG_VERSION")));
        match &self.spec.transport {
            UpstreamTransport::Stdio { program, args, cwd, env, argv0 } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args).current_dir(cwd).env_clear().kill_on_drop(true);
                // Its own process group: a terminal's Ctrl-C reaches pycage,
                // which then shuts the server down, not the server directly.
                cmd.process_group(0);
                for key in BASE_ENV {
                    if let Some(v) = std::env::var_os(key) {
                        cmd.env(key, v);
                    }
                }
                for (k, v) in env {
                    cmd.env(k, v.expose());
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("could not start {argv0}: {e}"))?;
                if let Ok(mut t) = self.stderr_tail.lock() {
                    t.clear();
                }
                if let Some(stderr) = stderr {
                    let tail = Arc::clone(&self.stderr_tail);
                    tokio::spawn(keep_tail(stderr, tail));
                }
                info.serve(transport).await.map_err(|e| format!("{e}{}", self.stderr_note()))
            }
            UpstreamTransport::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let mut v = reqwest::header::HeaderValue::from_str(value.expose())
                        .map_err(|_| format!("header {name} is not a valid header value"))?;
                    v.set_sensitive(true);
                    custom.insert(name.clone(), v);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .max_concurrent_requests(MAX_HTTP_REQUESTS);
                let transport = StreamableHttpClientTransport::from_config(config);
                info.serve(transport).await.map_err(|e| e.to_string())
            }
        }
    }

    /// `: <stderr tail>` when the server printed something, else nothing.
    fn stderr_note(&self) -> String {
        let tail = self.stderr_tail.lock().map(|t| String::from_utf8_lossy(&t).trim().to_string()).unwrap_or_default();
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends with: {tail}")
        }
    }

    /// Calls one tool. `args` must be an object (or null: no arguments).
    pub async fn call(&self, tool: &str, args: JsonValue) -> Result<JsonValue, BindingError> {
        let arguments = match args.root().as_object() {
            Some(_) => match args.to_serde() {
                Ok(serde_json::Value::Object(m)) => Some(m),
                Ok(_) => None,
                Err(e) => return Err(BindingError::new(format!("{tool}: the arguments cannot be sent: {e}"))),
            },
            None if args.root().is_null() => None,
            None => {
                return Err(BindingError::new(format!(
                    "{tool} takes keyword arguments (a JSON object), not {}",
                    kind_name(&args)
                )))
            }
        };
        let timeout = self.spec.timeout;
        let work = async {
            let peer = self
                .peer()
                .await
                .map_err(|e| BindingError::new(format!("MCP server `{}`: {e}", self.display_name())))?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Some(m) = arguments {
                params = params.with_arguments(m);
            }
            // Dropping this future (timeout, run settled) sends notifications/cancelled.
            match peer.call_tool(params).await {
                Ok(result) => result_value(tool, result),
                Err(e) => Err(BindingError::new(format!("{tool}: MCP server `{}`: {e}", self.display_name()))),
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(BindingError::new(format!("{tool} timed out after {} ms", timeout.as_millis()))),
        }
    }

    /// Closes the connection for good; later calls are rejected.
    pub async fn close(&self) {
        let mut conn = self.conn.lock().await;
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        if let Some(c) = conn.take() {
            let _ = c.cancel().await;
        }
    }
}

fn kind_name(v: &JsonValue) -> &'static str {
    match v.kind() {
        pycage_protocol::Kind::Null => "null",
        pycage_protocol::Kind::Bool(_) => "a boolean",
        pycage_protocol::Kind::Number(_) => "a number",
        pycage_protocol::Kind::String(_) => "a string",
        pycage_protocol::Kind::Array(_) => "an array",
        pycage_protocol::Kind::Object(_) => "an object",
    }
}

async fn keep_tail(mut r: tokio::process::ChildStderr, tail: Arc<StdMutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Ok(mut t) = tail.lock() {
            t.extend_from_slice(buf.get(..n).unwrap_or_default());
            if t.len() > MAX_STDERR_TAIL {
                let cut = t.len() - MAX_STDERR_TAIL;
                t.drain(..cut);
            }
        }
    }
}

/// A tool result as the call's value:
/// - `isError: true` rejects with the result's text (capped at [`MAX_ERROR_TEXT`]);
/// - `structuredContent`, when present (even `null`), is the value;
/// - else, when every content block is text, their text joined by `\n`:
///   parsed when it is one JSON document, the string itself otherwise;
/// - else (images, audio, resources, links) the content blocks as their MCP
///   JSON objects, a list;
/// - no content at all is `null`.
pub fn result_value(tool: &str, result: CallToolResult) -> Result<JsonValue, BindingError> {
    let text = all_text(&result.content);
    if result.is_error == Some(true) {
        let message = match text {
            Some(t) if !t.trim().is_empty() => t,
            _ => match &result.structured_content {
                Some(v) => v.to_string(),
                None => format!("{tool} failed without a message"),
            },
        };
        return Err(BindingError::new(cap(message, MAX_ERROR_TEXT)));
    }
    let convert = |v: &serde_json::Value| {
        JsonValue::from_serde(v).map_err(|e| BindingError::new(format!("{tool}: the result cannot be carried: {e}")))
    };
    if let Some(v) = &result.structured_content {
        return convert(v);
    }
    if result.content.is_empty() {
        return Ok(JsonValue::null());
    }
    match text {
        Some(t) => Ok(JsonValue::parse(t.as_bytes()).or_else(|_| JsonValue::string(&t)).unwrap_or_default()),
        None => {
            let blocks = serde_json::to_value(&result.content)
                .map_err(|e| BindingError::new(format!("{tool}: the result cannot be carried: {e}")))?;
            convert(&blocks)
        }
    }
}

/// The text of `content` when every block is text.
fn all_text(content: &[ContentBlock]) -> Option<String> {
    let mut parts = Vec::with_capacity(content.len());
    for c in content {
        parts.push(c.as_text()?.text.as_str());
    }
    Some(parts.join("\n"))
}

fn cap(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(" [truncated]");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;

    fn value(r: CallToolResult) -> Result<String, String> {
        result_value("t", r).map(|v| v.to_canonical_string()).map_err(|e| e.message)
    }

    #[test]
    fn results_map_to_values() {
        let structured = CallToolResult::structured(serde_json::json!({"a": 1}));
        assert_eq!(value(structured), Ok(r#"{"a":1}"#.into()));
        assert_eq!(value(CallToolResult::success(vec![Content::text("[1, 2.50]")])), Ok("[1,2.50]".into()));
        assert_eq!(value(CallToolResult::success(vec![Content::text("Echo: hi")])), Ok(r#""Echo: hi""#.into()));
        assert_eq!(
            value(CallToolResult::success(vec![Content::text("a"), Content::text("b")])),
            Ok(r#""a\nb""#.into())
        );
        assert_eq!(value(CallToolResult::success(vec![])), Ok("null".into()));
        let img = value(CallToolResult::success(vec![Content::image("AAAA", "image/png")])).unwrap();
        assert_eq!(img, r#"[{"type":"image","data":"AAAA","mimeType":"image/png"}]"#);
    }

    #[test]
    fn errors_reject_with_their_text() {
        assert_eq!(value(CallToolResult::error(vec![Content::text("no such repo")])), Err("no such repo".into()));
        assert_eq!(value(CallToolResult::error(vec![])), Err("t failed without a message".into()));
        let long = "é".repeat(MAX_ERROR_TEXT);
        let e = value(CallToolResult::error(vec![Content::text(long)])).unwrap_err();
        assert!(e.len() <= MAX_ERROR_TEXT + 12 && e.ends_with(" [truncated]"), "{}", e.len());
    }
}
