//! The `run_python` server: its options, description and handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use pycage_bindings::Bindings;
use pycage_runtime::{RunEvent, RunRequest, Runtime, SessionError, SessionOptions, SessionRun};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;

use crate::admission::{Entry, Fair};
use crate::approvals::{self, Approvals, RESUME_PYTHON};
use crate::clients::{
    ended_message, request_key, Lease, Limits, Owner, Refusal, Registry, RunKey, MAX_LOOKUP_NAME, MAX_SESSION_NAME,
};
use crate::displays;
use crate::files::{self, OutputDir};
use crate::gate::{Conn, Principal};
use crate::options::SESSION_HEADER;
use crate::tool::{description_with, input_schema, object, output_schema, tool_result, ServerOptions, RUN_PYTHON};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--expose-tools: the tool name {name:?} is served twice ({first} and {second})")]
    DuplicateTool { name: String, first: String, second: String },
    #[error("{0}")]
    Options(String),
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
    /// Runs admitted in turn across clients, as many at once as the
    /// runtime runs (`admission`).
    admission: Arc<Fair<RunKey>>,
    bindings: Bindings,
    run_python: Tool,
    exposed: BTreeMap<String, Exposed>,
    registry: Arc<Registry>,
    options: ServerOptions,
    /// Suspended runs, when some binding needs approval (`approvals`).
    approvals: Option<Approvals>,
    resume_python: Tool,
}

/// What one `run_python` (or `resume_python`) call runs.
struct Job {
    code: String,
    session: Option<String>,
    files: Option<Value>,
    return_files: bool,
    /// `Some(true)` checks this program; `None` leaves it to the server.
    type_check: Option<bool>,
    /// A suspended run's journal and answer, and its kept input files.
    resume: Option<(pycage_runtime::Resume, Option<files::Inputs>)>,
}

/// Whether the client can be asked for an approval inside the call: it
/// declared form elicitation, on a protocol that lets a server ask.
fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    let old_enough = context.protocol_version().is_some_and(|v| v < rmcp::model::ProtocolVersion::V_2026_07_28);
    old_enough && context.peer.supported_elicitation_modes().contains(&rmcp::service::ElicitationMode::Form)
}

/// The MCP handler: cheap to clone (one per HTTP session or request).
#[derive(Clone)]
pub struct CodeModeServer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CodeModeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeServer").field("exposed", &self.inner.exposed.keys()).finish_non_exhaustive()
    }
}

/// Whose call this is (see `clients`): the MCP session it came in, else
/// the bearer token it carries, else nobody; stdio (no HTTP request) has
/// one client.
fn owner(context: &RequestContext<RoleServer>) -> Owner {
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else { return Owner::Stdio };
    if let Some(id) = parts.headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        return Owner::McpSession(id.to_owned());
    }
    match parts.extensions.get::<Principal>() {
        Some(Principal(name)) => Owner::Principal(name.clone()),
        None => Owner::Anonymous,
    }
}

/// Whose runs count together (see [`RunKey`]): the request's token, else
/// over HTTP its source, else the stdio client.
fn run_key(context: &RequestContext<RoleServer>, owner: &Owner) -> RunKey {
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
        return RunKey::Owner(owner.clone());
    };
    if let Some(Principal(name)) = parts.extensions.get::<Principal>() {
        return RunKey::Principal(name.clone());
    }
    match parts.extensions.get::<Arc<Conn>>() {
        Some(conn) => RunKey::Source(conn.source),
        None => RunKey::Owner(owner.clone()),
    }
}

fn refused(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl CodeModeServer {
    /// A server running programs in `runtime` against `bindings`.
    pub fn new(runtime: Runtime, bindings: Bindings, options: &ServerOptions) -> Result<Self, ServeError> {
        options.validate().map_err(ServeError::Options)?;
        let description = description_with(&runtime, &bindings, options);
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
        let limits = Limits { per_client: options.max_sessions_per_client, total: options.max_sessions };
        let approvals = approvals::needs_approval(&bindings.namespaces).then(Approvals::default);
        if approvals.is_some() && runtime.config().journal_key.is_none() {
            return Err(ServeError::Options(
                "the bindings need approval, and the runtime has no journal key to keep suspended runs with".into(),
            ));
        }
        Ok(CodeModeServer {
            inner: Arc::new(Inner {
                approvals,
                resume_python: approvals::resume_tool(),
                admission: Fair::new(runtime.config().max_concurrent_runs),
                runtime,
                bindings,
                run_python,
                exposed,
                registry: Arc::new(Registry::new(limits, options.session_idle)),
                options: options.clone(),
            }),
        })
    }

    /// The `run_python` tool as listed.
    pub fn run_python_tool(&self) -> &Tool {
        &self.inner.run_python
    }

    pub(crate) fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.inner.registry)
    }

    pub(crate) fn options(&self) -> &ServerOptions {
        &self.inner.options
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
        const ARGS: [&str; 5] = ["code", "session", "files", "return_files", "type_check"];
        if let Some(extra) = args.keys().find(|k| !ARGS.contains(&k.as_str())) {
            return Err(McpError::invalid_params(
                format!(
                    "run_python takes `code` and optionally `session`, `files`, `return_files` or `type_check`, not \
                     `{extra}`"
                ),
                None,
            ));
        }
        // `true` checks this program; `false` or nothing leaves it to the
        // server (`pycage mcp --type-check` checks every program).
        let type_check = match args.get("type_check") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(true),
            Some(_) => return Err(McpError::invalid_params("`type_check` is true or false", None)),
        };
        let session = match args.get("session") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) if !name.is_empty() && name.len() <= MAX_LOOKUP_NAME => Some(name.clone()),
            Some(_) => {
                return Err(McpError::invalid_params(
                    format!("`session` must be a name of 1 to {MAX_SESSION_NAME} bytes"),
                    None,
                ))
            }
        };
        let files = args.get("files").filter(|v| !v.is_null());
        let return_files = match args.get("return_files") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(McpError::invalid_params("`return_files` is true or false", None)),
        };
        if (files.is_some() || return_files) && session.is_some() {
            return Ok(refused(
                "`files` and `return_files` work only in calls without `session`: run the step that needs files on \
                 its own, or pass the data in the code",
            ));
        }
        let job = Job { code, session, files: files.cloned(), return_files, type_check, resume: None };
        self.execute(job, context).await
    }

    /// `resume_python`: answers a suspended run of this client and resumes
    /// it (see `approvals`).
    async fn resume_python(
        &self,
        args: Option<JsonObject>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(approvals) = &self.inner.approvals else {
            return Err(McpError::invalid_params(format!("no tool named {RESUME_PYTHON:?}"), None));
        };
        let args = args.unwrap_or_default();
        let usage = "resume_python takes `token` (a string), `approve` (true or false) and optionally `message`";
        if args.keys().any(|k| !["token", "approve", "message"].contains(&k.as_str())) {
            return Err(McpError::invalid_params(usage, None));
        }
        let (Some(Value::String(token)), Some(Value::Bool(approve))) = (args.get("token"), args.get("approve")) else {
            return Err(McpError::invalid_params(usage, None));
        };
        let message = match args.get("message") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(_) => return Err(McpError::invalid_params(usage, None)),
        };
        let parked = match approvals.take(&owner(&context), token) {
            Ok(parked) => parked,
            Err(Refusal(message)) => return Ok(refused(message)),
        };
        let call = &parked.call;
        let answer = match (approve, approvals::binding_of(&self.inner.bindings.namespaces, call)) {
            // Approved: the function runs now, once; its result is the call's.
            (true, Some(binding)) => {
                match binding.call(call.args.clone(), pycage_runtime::CallContext::detached()).await {
                    Ok(value) => pycage_runtime::Answer::Reply(value),
                    Err(e) => pycage_runtime::Answer::Deny(e.message),
                }
            }
            (true, None) => {
                pycage_runtime::Answer::Deny(format!("{}.{} is not a binding any more", call.global, call.name))
            }
            (false, _) => pycage_runtime::Answer::Deny(
                message.unwrap_or_else(|| format!("the user refused {}.{}", call.global, call.name)),
            ),
        };
        let resume = pycage_runtime::Resume { journal: parked.journal, answer };
        let job = Job {
            code: String::new(),
            session: None,
            files: None,
            return_files: false,
            // The program was checked (or not) when it first ran.
            type_check: None,
            resume: Some((resume, parked.inputs)),
        };
        self.execute(job, context).await
    }

    /// Runs a job: admission, inputs, a session or a one-shot run, and the
    /// result (a suspended run parked for its client).
    async fn execute(&self, job: Job, context: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let Job { code, session, files, return_files, type_check, resume } = job;
        let (resume, kept_inputs) = match resume {
            Some((resume, inputs)) => (Some(resume), inputs),
            None => (None, None),
        };
        let owner = owner(&context);
        let Some(life) = self.inner.registry.life(&owner) else {
            return Ok(refused("this MCP session has closed"));
        };
        let key = run_key(&context, &owner);
        // Held until the call returns; taken before any input is written.
        let _run_slot = match self.inner.registry.run_slot(&key, self.inner.options.max_runs_per_client) {
            Ok(slot) => slot,
            Err(Refusal(message)) => return Ok(refused(message)),
        };
        // Over HTTP in an MCP session, the run follows its request's
        // streams (resumable for `resume_grace`).
        let watch = self.inner.registry.request_watch(&owner, &request_key(&context.id));
        let grace = self.inner.options.resume_grace;
        let abandoned = async {
            let lost = async {
                match &watch {
                    Some(w) => w.lost(grace).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = life.gone() => {}
                () = lost => {}
            }
        };
        tokio::pin!(abandoned);
        let inputs = match files.map(|f| files::write_inputs(&f, self.inner.options.input_limits)) {
            Some(Ok(inputs)) => inputs,
            Some(Err(message)) => return Ok(refused(format!("files: {message}"))),
            None => kept_inputs,
        };
        let lease = match session {
            None => None,
            Some(name) => match self.inner.registry.session(&owner, &name, &self.inner.runtime, || SessionOptions {
                bindings: self.inner.bindings.namespaces.clone(),
                idle_timeout: self.inner.options.session_idle,
                // A suspended session would need resume_python to resume
                // a session; it resumes runs only: in a session a call
                // that needs approval fails, saying so (docs/mcp.md).
                durable: false,
                ..SessionOptions::default()
            }) {
                Ok(lease) => Some(lease),
                Err(Refusal(message)) => return Ok(refused(message)),
            },
        };
        // Collected only on request: copying out/ waits for the run's
        // process to be gone, which costs every call several milliseconds.
        let output = match return_files {
            false => None,
            true => match OutputDir::new(self.inner.options.output_dir.as_deref()) {
                Ok(dir) => Some(dir),
                Err(message) => return Ok(refused(message)),
            },
        };
        // Cancelled when the client sends notifications/cancelled, or its
        // connection (stateless requests) closes; aborted below when the
        // client is gone (see `abandoned`).
        let cancel = context.ct.child_token();
        let progress = context.meta.get_progress_token();
        // A place among the runs in flight, in turn across clients.
        let _place = match self.inner.admission.enter(&key) {
            Entry::Now(place) => place,
            Entry::Queued(waiting) => {
                if let Some(token) = &progress {
                    let mut p = ProgressNotificationParam::new(token.clone(), 0.0);
                    let s = if waiting.capacity == 1 { "" } else { "s" };
                    p.message = Some(format!(
                        "queued: the server runs at most {} program{s} at once and all are busy; this one starts \
                         when one ends (clients take turns)",
                        waiting.capacity
                    ));
                    let _ = context.peer.notify_progress(p).await;
                }
                tokio::select! {
                    place = waiting.place() => match place {
                        Some(place) => place,
                        None => return Ok(refused("the server is shutting down")),
                    },
                    _ = cancel.cancelled() => return Ok(refused("the run was cancelled before it started")),
                    () = &mut abandoned => return Ok(refused("the client went away before the run started")),
                }
            }
        };
        let (tx, mut rx) = self.inner.runtime.event_channel();
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
        let input_paths = inputs.as_ref().map(|i| i.paths.clone()).unwrap_or_default();
        // A client that can be asked is asked inside the call; otherwise a
        // call that needs approval suspends the run.
        let namespaces = match &self.inner.approvals {
            Some(_) if can_elicit(&context) => approvals::asking(&self.inner.bindings.namespaces, &context.peer),
            _ => self.inner.bindings.namespaces.clone(),
        };
        let run = async {
            match &lease {
                None => {
                    let request = RunRequest {
                        program: code,
                        bindings: namespaces,
                        cancel: Some(cancel.clone()),
                        inputs: input_paths,
                        output_dir: output.as_ref().map(|o| o.path().to_path_buf()),
                        type_check,
                        resume,
                        ..RunRequest::default()
                    };
                    self.inner.runtime.run_with_events(request, tx).await.map_err(|e| e.to_string())
                }
                Some(Lease { name, entry, .. }) => {
                    let mut request = SessionRun::new(code).with_cancel(cancel.clone());
                    request.type_check = type_check;
                    match entry.session.run_with(request, Some(tx)).await {
                        Ok(r) => Ok(r),
                        Err(SessionError::Ended(why)) => {
                            self.inner.registry.forget(&owner, name, entry.id);
                            Err(ended_message(name, &why))
                        }
                        Err(SessionError::Misuse(e)) => Err(e.to_string()),
                    }
                }
            }
        };
        tokio::pin!(run);
        let result = tokio::select! {
            r = &mut run => r,
            () = &mut abandoned => {
                cancel.cancel();
                run.await
            }
        };
        // The sender went with the run; wait so every line precedes the result.
        let _ = forward.await;
        match result {
            Ok(mut result) => {
                let mut blocks = Vec::new();
                if let (Some(dir), Some(report)) = (&output, result.output.take()) {
                    let (b, report) = files::output_blocks(dir, report, self.inner.options.max_embedded_bytes);
                    blocks = b;
                    if !report.files.is_empty() || !report.skipped.is_empty() {
                        result.output = Some(report);
                    }
                }
                let (display_blocks, displays) = displays::display_blocks(&std::mem::take(&mut result.displays));
                // A suspended run waits here for its client's answer.
                let token = match (result.suspension.clone(), &self.inner.approvals) {
                    (Some(s), Some(approvals)) => match approvals.park(&owner, s.clone(), inputs) {
                        Ok(token) => Some((token, s)),
                        Err(Refusal(message)) => return Ok(refused(message)),
                    },
                    _ => None,
                };
                let mut r = tool_result(
                    &result,
                    lease.as_ref().map(|l| l.name.as_str()),
                    displays,
                    token.as_ref().map(|(t, _)| t.as_str()),
                );
                if let Some((token, s)) = &token {
                    r.content.push(ContentBlock::text(format!(
                        "The program is waiting for a person's approval of {}.{}({}): {}. Ask the user, then call \
                         {RESUME_PYTHON} with token \"{token}\" and approve true or false (with a message when \
                         refusing). The program then goes on from where it stopped.",
                        s.call.global, s.call.name, s.call.args, s.reason
                    )));
                }
                if let Some(lease) = lease.as_ref().filter(|l| l.minted) {
                    r.content.push(ContentBlock::text(format!(
                        "This call opened the session `{}`. Pass exactly that name as `session` to use it again: \
                         this connection has no client identity, so the server made the name unguessable, and it is \
                         the only way to reach the session.",
                        lease.name
                    )));
                }
                r.content.extend(display_blocks);
                r.content.extend(blocks);
                Ok(r)
            }
            Err(message) => Ok(refused(message)),
        }
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
        if self.inner.approvals.is_some() {
            tools.push(self.inner.resume_python.clone());
        }
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
        if request.name == RESUME_PYTHON && self.inner.approvals.is_some() {
            return self.resume_python(request.arguments, context).await.map(CallToolResponse::Complete);
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

#[cfg(test)]
mod tests {
    use crate::tool::network_rule;

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
