//! The `run_python` server: its description, its handler, its transports.

use std::collections::BTreeMap;
use std::sync::Arc;

use pycage_bindings::Bindings;
use pycage_runtime::{RunEvent, RunRequest, RunResult, Runtime, Session, SessionError, SessionOptions, SessionRun};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{json, Value};

/// The code-mode tool's name.
pub const RUN_PYTHON: &str = "run_python";

/// How the server describes and serves `run_python`.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Largest `run_python` description; over it, stubs become one-line
    /// summaries (the program reads the rest with `help()`).
    pub max_description_bytes: usize,
    /// Also list and forward every upstream MCP tool unchanged.
    pub expose_tools: bool,
    /// Named sessions open at once (`run_python`'s `session` argument).
    pub max_sessions: usize,
    /// A session ends after this long without a run.
    pub session_idle: std::time::Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_description_bytes: 16 * 1024,
            expose_tools: false,
            max_sessions: 16,
            session_idle: std::time::Duration::from_secs(600),
        }
    }
}

/// Longest session name.
pub const MAX_SESSION_NAME: usize = 64;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--expose-tools: the tool name {name:?} is served twice ({first} and {second})")]
    DuplicateTool { name: String, first: String, second: String },
    #[error("the MCP session failed to start: {0}")]
    Start(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("the HTTP server failed: {0}")]
    Http(std::io::Error),
}

/// A tool forwarded unchanged to its server.
#[derive(Debug, Clone)]
struct Exposed {
    tool: Tool,
    upstream: Arc<pycage_bindings::Upstream>,
}

struct Inner {
    runtime: Runtime,
    bindings: Bindings,
    run_python: Tool,
    exposed: BTreeMap<String, Exposed>,
    sessions: tokio::sync::Mutex<BTreeMap<String, Session>>,
    max_sessions: usize,
    session_idle: std::time::Duration,
}

/// The MCP handler: cheap to clone (one per HTTP session).
#[derive(Clone)]
pub struct CodeModeServer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CodeModeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeServer").field("exposed", &self.inner.exposed.keys()).finish_non_exhaustive()
    }
}

impl CodeModeServer {
    /// A server running programs in `runtime` against `bindings`.
    pub fn new(runtime: Runtime, bindings: Bindings, options: &ServerOptions) -> Result<Self, ServeError> {
        let description = description(&runtime, &bindings, options.max_description_bytes, options.session_idle);
        let run_python = Tool::new(RUN_PYTHON, description, Arc::new(object(input_schema())))
            .with_raw_output_schema(Arc::new(object(output_schema())));
        let mut exposed: BTreeMap<String, Exposed> = BTreeMap::new();
        if options.expose_tools {
            for server in &bindings.servers {
                for tool in &server.tools {
                    let name = tool.name.to_string();
                    let here = format!("the MCP server `{}`", server.upstream.spec().label());
                    if name == RUN_PYTHON {
                        return Err(ServeError::DuplicateTool { name, first: "pycage".into(), second: here });
                    }
                    if let Some(prev) = exposed.get(&name) {
                        return Err(ServeError::DuplicateTool {
                            name,
                            first: format!("the MCP server `{}`", prev.upstream.spec().label()),
                            second: here,
                        });
                    }
                    exposed.insert(name, Exposed { tool: tool.clone(), upstream: Arc::clone(&server.upstream) });
                }
            }
        }
        Ok(CodeModeServer {
            inner: Arc::new(Inner {
                runtime,
                bindings,
                run_python,
                exposed,
                sessions: tokio::sync::Mutex::new(BTreeMap::new()),
                max_sessions: options.max_sessions,
                session_idle: options.session_idle,
            }),
        })
    }

    /// The `run_python` tool as listed.
    pub fn run_python_tool(&self) -> &Tool {
        &self.inner.run_python
    }

    async fn run_python(
        &self,
        args: Option<JsonObject>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let args = args.unwrap_or_default();
        let code = match args.get("code") {
            Some(Value::String(code)) => code.clone(),
            _ => return Err(McpError::invalid_params("run_python needs `code`: the program text, a string", None)),
        };
        if let Some(extra) = args.keys().find(|k| k.as_str() != "code" && k.as_str() != "session") {
            return Err(McpError::invalid_params(
                format!("run_python takes `code` and optionally `session`, not `{extra}`"),
                None,
            ));
        }
        let session = match args.get("session") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) if !name.is_empty() && name.len() <= MAX_SESSION_NAME => Some(name.clone()),
            Some(_) => {
                return Err(McpError::invalid_params(
                    format!("`session` must be a name of 1 to {MAX_SESSION_NAME} bytes"),
                    None,
                ))
            }
        };
        let session = match session {
            None => None,
            Some(name) => match self.session(&name).await {
                Ok(s) => Some((name, s)),
                Err(message) => return Ok(CallToolResult::error(vec![ContentBlock::text(message)])),
            },
        };
        // Cancelled when the client sends notifications/cancelled.
        let cancel = context.ct.child_token();
        let (tx, mut rx) = self.inner.runtime.event_channel();
        let progress = context.meta.get_progress_token();
        let peer = context.peer.clone();
        let forward = tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(event) = rx.recv().await {
                let RunEvent::Log(line) = event else { continue };
                n += 1;
                if let Some(token) = &progress {
                    let mut p = ProgressNotificationParam::new(token.clone(), n as f64);
                    p.message = Some(line);
                    // A client that went away is not the run's problem.
                    let _ = peer.notify_progress(p).await;
                }
            }
        });
        let result = match session {
            None => {
                let request = RunRequest {
                    program: code,
                    bindings: self.inner.bindings.namespaces.clone(),
                    cancel: Some(cancel),
                    ..RunRequest::default()
                };
                self.inner.runtime.run_with_events(request, tx).await.map_err(|e| e.to_string())
            }
            Some((name, s)) => match s.run_with(SessionRun::new(code).with_cancel(cancel), Some(tx)).await {
                Ok(r) => Ok(r),
                Err(SessionError::Ended(why)) => {
                    self.inner.sessions.lock().await.remove(&name);
                    Err(ended_message(&name, &why))
                }
                Err(SessionError::Misuse(e)) => Err(e.to_string()),
            },
        };
        // The sender went with the run; wait so every line precedes the result.
        let _ = forward.await;
        match result {
            Ok(result) => Ok(tool_result(&result)),
            Err(message) => Ok(CallToolResult::error(vec![ContentBlock::text(message)])),
        }
    }

    /// The open session called `name`, or a new one. A session that has
    /// ended (a failed run, idle, too old) is reported once, so the model
    /// knows its state is gone, and forgotten: the next call starts afresh.
    async fn session(&self, name: &str) -> Result<Session, String> {
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.get(name) {
            match s.ended() {
                None => return Ok(s.clone()),
                Some(why) => {
                    sessions.remove(name);
                    return Err(ended_message(name, &why));
                }
            }
        }
        // Other ended sessions free their slots silently.
        sessions.retain(|_, s| s.ended().is_none());
        if sessions.len() >= self.inner.max_sessions {
            return Err(format!(
                "{} sessions are open, the most this server keeps; reuse one of their names ({}) or wait for one to \
                 expire ({} s without a run)",
                sessions.len(),
                sessions.keys().cloned().collect::<Vec<_>>().join(", "),
                self.inner.session_idle.as_secs()
            ));
        }
        let options = SessionOptions {
            bindings: self.inner.bindings.namespaces.clone(),
            idle_timeout: self.inner.session_idle,
            ..SessionOptions::default()
        };
        let s = self.inner.runtime.session(options).map_err(|e| format!("cannot open a session: {e}"))?;
        sessions.insert(name.to_string(), s.clone());
        Ok(s)
    }

    async fn forward(&self, exposed: Exposed, request: CallToolRequestParams) -> Result<CallToolResult, McpError> {
        let peer = exposed.upstream.peer().await.map_err(|e| McpError::internal_error(e, None))?;
        match peer.call_tool(request).await {
            Ok(mut result) => {
                // A result from an older-protocol server has no resultType,
                // which a 2026-07-28 client requires; the SDK drops it again
                // for older clients.
                result.result_type.get_or_insert(rmcp::model::ResultType::COMPLETE);
                Ok(result)
            }
            Err(rmcp::ServiceError::McpError(e)) => Err(e),
            Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "MCP server `{}`: {e}",
                exposed.upstream.display_name()
            ))])),
        }
    }
}

fn ended_message(name: &str, why: &str) -> String {
    format!("the session `{name}` has ended ({why}); the next call naming it starts a new, empty one")
}

/// A run's outcome as a tool result: `{value?, logs, error?}` as
/// structured content and as its JSON text; `isError` when the run failed.
fn tool_result(result: &RunResult) -> CallToolResult {
    let json = result.to_json();
    let text = json.to_canonical_string();
    // The structured copy goes through serde_json; its depth limit is far
    // below ours, so a very deep value travels as text only.
    let structured = json.to_serde().ok();
    let mut r = match structured {
        Some(v) => {
            let mut r = CallToolResult::structured(v);
            r.content = vec![ContentBlock::text(text)];
            r
        }
        None => CallToolResult::success(vec![ContentBlock::text(text)]),
    };
    r.is_error = Some(result.error.is_some());
    r
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The Python program to run (see the tool description for the rules)."},
            "session": {"type": "string", "description": "Optional: run in this named session, whose globals survive to the next call naming it."}
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "value": {"description": "The program's return value (or last expression); absent when it has none or failed."},
            "logs": {"type": "array", "items": {"type": "string"}, "description": "Lines the program printed, in order."},
            "error": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["exception", "timeout", "abort", "worker-exit", "invalid-output", "output-limit"]},
                    "message": {"type": "string"}
                },
                "required": ["kind", "message"]
            }
        },
        "required": ["logs"]
    })
}

/// What the description says of the network: none, or the allow-list.
fn network_rule(c: &pycage_runtime::RuntimeConfig) -> String {
    if c.allow_net.is_empty() {
        return "the network is not (use the functions).".to_owned();
    }
    let hosts: Vec<String> = c.allow_net.iter().map(ToString::to_string).collect();
    format!(
        "the network is reachable only at {} through the HTTP proxy in HTTPS_PROXY/HTTP_PROXY \
         (urllib.request uses it as is; other hosts and ports are refused with HTTP 403; there is no DNS in the program).",
        hosts.join(", ")
    )
}

/// The `run_python` description: rules, budgets and the stubs (or one-line
/// summaries when the stubs would take it over `max_bytes`).
pub fn description(
    runtime: &Runtime,
    bindings: &Bindings,
    max_bytes: usize,
    session_idle: std::time::Duration,
) -> String {
    let c = runtime.config();
    let mut d = format!(
        "Run a Python {}.{} program and get back only its result. Use it to call the functions below: \
         one program can make many calls, loop, filter and combine their results, so you do not need one tool call per step.\n\
         \n\
         Rules:\n\
         - The program runs as a script in a fresh process; nothing survives between calls, \
         unless you pass `session`: calls naming the same session share one process and its globals \
         (a run that times out, is cancelled or crashes ends the session, an exception does not; it also ends after {} s without a call). \
         Top-level `await` works: `r = await ns.function(name=value)`. \
         Run independent calls concurrently with `asyncio.gather(...)`.\n\
         - The result's value is the program's top-level `return` value, else the value of its last expression statement. \
         It must be JSON: dict with str keys, list, str, int, float, bool or None.\n\
         - print() output is returned in `logs` (up to {} bytes); the value may be up to {} bytes. Return only what you need.\n\
         - Budgets: {} s wall clock, {} s CPU, {} MiB memory.\n\
         - A failed function call raises an exception (the namespace's error class below); catch it to go on.\n\
         - The standard library is available; {}\n\
         \n\
         Result: {{\"value\": ..., \"logs\": [...], \"error\": {{\"kind\": ..., \"message\": ...}}}} (error only when the run failed).\n",
        runtime.interpreter().version.0,
        runtime.interpreter().version.1,
        session_idle.as_secs(),
        c.max_log_bytes,
        c.max_value_bytes,
        c.wall_time.as_secs_f64(),
        c.cpu_seconds,
        c.address_space_bytes / (1024 * 1024),
        network_rule(c),
    );
    if bindings.stubs.is_empty() {
        d.push_str("\nNo functions are configured: the program can only compute.\n");
        return d;
    }
    let stubs = bindings.stubs_text();
    if d.len() + stubs.len() + 32 <= max_bytes {
        d.push_str("\nFunctions (Python stubs; `help(ns.function)` in a program prints one of them):\n```python\n");
        d.push_str(&stubs);
        d.push_str("```\n");
        return d;
    }
    d.push_str(
        "\nFunctions, one line each. In a program, `help(ns.function)` prints a function's full signature, \
         argument and result types and docs; `help(ns)` lists a namespace.\n",
    );
    for ns in &bindings.stubs {
        if let Some(ec) = &ns.error_class {
            let first = ec.lines().next().unwrap_or_default().trim_end_matches(':');
            d.push_str(&format!("\n{}: calls raise {}\n", ns.global, first.trim_start_matches("class ")));
        } else {
            d.push_str(&format!("\n{}:\n", ns.global));
        }
        d.push_str(&ns.summaries());
    }
    d
}

impl ServerHandler for CodeModeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pycage", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Call run_python with a Python program that uses the functions in its description; \
                 one program replaces many tool calls.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = vec![self.inner.run_python.clone()];
        tools.extend(self.inner.exposed.values().map(|e| e.tool.clone()));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name == RUN_PYTHON {
            return self.run_python(request.arguments, context).await.map(CallToolResponse::Complete);
        }
        let Some(exposed) = self.inner.exposed.get(request.name.as_ref()).cloned() else {
            return Err(McpError::invalid_params(format!("no tool named {:?}", request.name), None));
        };
        // Dropped (and cancelled upstream) when the client cancels.
        let ct = context.ct.clone();
        tokio::select! {
            r = self.forward(exposed, request) => r.map(CallToolResponse::Complete),
            _ = ct.cancelled() => Err(McpError::internal_error("cancelled by the client", None)),
        }
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn serve_stdio(server: CodeModeServer) -> Result<(), ServeError> {
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| ServeError::Start(e.to_string()))?;
    let _ = running.waiting().await;
    Ok(())
}

/// Serves streamable HTTP at `http://<listener>/mcp` until `shutdown` is cancelled.
pub async fn serve_http(
    server: CodeModeServer,
    listener: tokio::net::TcpListener,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = shutdown.child_token();
    let service = StreamableHttpService::new(move || Ok(server.clone()), LocalSessionManager::default().into(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(ServeError::Http)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_states_the_allow_list() {
        let mut c = pycage_runtime::RuntimeConfig::default();
        assert_eq!(network_rule(&c), "the network is not (use the functions).");
        c.allow_net = vec!["api.example.com".parse().unwrap(), "10.0.0.5:8080".parse().unwrap()];
        let rule = network_rule(&c);
        assert!(
            rule.starts_with("the network is reachable only at api.example.com:443, 10.0.0.5:8080 through"),
            "{rule}"
        );
    }
}
