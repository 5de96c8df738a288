//! What a client sees of `run_python`: the tool's name, the options that
//! shape it, its description (the rules and the functions a program may
//! call), its input and output schemas, and a run's result as a tool
//! result. No state and no I/O: `server` serves it.

use std::path::PathBuf;
use std::time::Duration;

use pycage_bindings::Bindings;
use pycage_runtime::{RunResult, Runtime};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{json, Value};

use crate::approvals::{self, RESUME_PYTHON};
use crate::files::InputLimits;

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
    /// Named sessions open at once, all clients together.
    pub max_sessions: usize,
    /// Named sessions one client may hold open.
    pub max_sessions_per_client: usize,
    /// `run_python` calls one client may have in flight (every client of
    /// one bearer token together; without tokens, every client from one
    /// source); more are refused at once, so one client cannot take every
    /// run slot of the runtime and queue the others.
    pub max_runs_per_client: usize,
    /// A session ends after this long without a run (at least a second).
    pub session_idle: Duration,
    /// How long a run of an MCP session over HTTP keeps going once its
    /// request has no response stream open (its POST's connection dropped)
    /// before it is aborted, unless the client resumes the stream (a GET
    /// with `Last-Event-ID`) within it. Stateless requests have none: their
    /// runs end with their connection.
    pub resume_grace: Duration,
    /// Limits of `run_python`'s `files` argument.
    pub input_limits: InputLimits,
    /// Most bytes of `out/` returned embedded in one result.
    pub max_embedded_bytes: u64,
    /// When set, each run's `out/` is copied to a fresh subdirectory of this
    /// directory and returned as resource links instead of embedded.
    pub output_dir: Option<PathBuf>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_description_bytes: 16 * 1024,
            expose_tools: false,
            max_sessions: 16,
            max_sessions_per_client: 4,
            max_runs_per_client: 16,
            session_idle: Duration::from_secs(600),
            resume_grace: Duration::from_secs(30),
            input_limits: InputLimits { max_files: 16, max_file_bytes: 1 << 20, max_total_bytes: 4 << 20 },
            max_embedded_bytes: 1 << 20,
            output_dir: None,
        }
    }
}

impl ServerOptions {
    /// Checks the options; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.session_idle < Duration::from_secs(1) {
            return Err("session_idle must be at least 1 s (0 would end every session before its first run)".into());
        }
        if self.max_sessions == 0 || self.max_sessions_per_client == 0 || self.max_runs_per_client == 0 {
            return Err("max_sessions, max_sessions_per_client and max_runs_per_client must be at least 1".into());
        }
        if let Some(dir) = &self.output_dir {
            if !dir.is_absolute() {
                return Err(format!("output_dir {} must be an absolute path", dir.display()));
            }
        }
        Ok(())
    }
}

/// A run's outcome as a tool result: `{value?, logs, output?, error?}` (plus
/// `displays`, their description without their data, when the run made
/// any, and `session` when it ran in one) as structured content and as its
/// JSON text; `isError` when the run failed. `result.displays` is empty
/// here: their data goes in content blocks of their own.
pub(crate) fn tool_result(
    result: &RunResult,
    session: Option<&str>,
    displays: pycage_protocol::JsonValue,
    resume_token: Option<&str>,
) -> CallToolResult {
    let json = result.to_json();
    let mut text = json.to_canonical_string();
    // The structured copy goes through serde_json; its depth limit is far
    // below ours, so a very deep value travels as text only.
    let mut structured = json.to_serde().ok();
    if displays.root().as_array().is_some_and(|mut a| a.next().is_some()) {
        // The canonical object ends with `}` and has at least `logs`.
        text.pop();
        text.push_str(",\"displays\":");
        text.push_str(&displays.to_canonical_string());
        text.push('}');
        if let (Some(Value::Object(o)), Ok(v)) = (&mut structured, displays.to_serde()) {
            o.insert("displays".into(), v);
        }
    }
    for (key, extra) in [("session", session), ("resume_token", resume_token)] {
        let Some(extra) = extra else { continue };
        // The canonical object ends with `}` and has at least `logs`.
        text.pop();
        text.push_str(&format!(",\"{key}\":"));
        text.push_str(&Value::String(extra.to_owned()).to_string());
        text.push('}');
        if let Some(Value::Object(o)) = &mut structured {
            o.insert(key.into(), Value::String(extra.to_owned()));
        }
    }
    let mut r = match structured {
        Some(v) => {
            let mut r = CallToolResult::structured(v);
            r.content = vec![ContentBlock::text(text)];
            r
        }
        None => CallToolResult::success(vec![ContentBlock::text(text)]),
    };
    // A run waiting for approval has not failed.
    r.is_error = Some(result.error.is_some() && resume_token.is_none());
    r
}

pub(crate) fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

pub(crate) fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The Python program to run (see the tool description for the rules)."},
            "session": {"type": "string", "description": "Optional: run in this named session, whose globals survive to the next call naming it."},
            "return_files": {"type": "boolean", "description": "Optional: return the files the program writes under out/ (out/ exists only then)."},
            "type_check": {"type": "boolean", "description": "Optional: type-check the program before it runs; a `type-error` result lists what to fix, and nothing ran."},
            "files": {
                "type": "object",
                "description": "Optional input files, by name: text, or {\"base64\": data} for bytes. The program reads them in its working directory.",
                "additionalProperties": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "object", "properties": {"base64": {"type": "string"}}, "required": ["base64"], "additionalProperties": false}
                    ]
                }
            }
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "value": {"description": "The program's return value (or last expression); absent when it has none or failed."},
            "logs": {"type": "array", "items": {"type": "string"}, "description": "Lines the program printed, in order."},
            "output": {
                "type": "object",
                "description": "What the program left in out/: the files returned (as resources), and those that were not, with why.",
                "properties": {
                    "files": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "bytes": {"type": "integer"}}}},
                    "skipped": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "reason": {"type": "string"}}}},
                    "bytes": {"type": "integer"},
                    "truncated": {"type": "boolean"}
                }
            },
            "displays": {
                "type": "array",
                "description": "What the program displayed (display(), plt.show()), in order; each display's content is a block after this result (an image, or text).",
                "items": {
                    "type": "object",
                    "properties": {
                        "types": {"type": "array", "items": {"type": "string"}, "description": "The MIME types the display had."},
                        "shown_as": {"type": "string", "description": "The MIME type of its content block; absent when it has none."},
                        "metadata": {"type": "object"}
                    }
                }
            },
            "session": {"type": "string", "description": "The session the program ran in (pass it as `session` to use it again)."},
            "diagnostics": {"type": "array", "items": {"type": "string"}, "description": "The type check's warnings, when the program was checked: each at its line."},
            "suspended": {
                "type": "object",
                "description": "The program stopped at a call that needs a person's approval: the call, and why.",
                "properties": {
                    "call": {"type": "object", "properties": {"global": {"type": "string"}, "name": {"type": "string"}, "args": {}}},
                    "reason": {"type": "string"}
                }
            },
            "resume_token": {"type": "string", "description": "With `suspended`: ask the user, then pass it to resume_python."},
            "error": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["exception", "timeout", "abort", "worker-exit", "invalid-output", "output-limit", "dependencies", "type-error", "suspended", "diverged"]},
                    "message": {"type": "string"}
                },
                "required": ["kind", "message"]
            }
        },
        "required": ["logs"]
    })
}

/// `n` bytes for a reader: `1 MiB`, `64 KiB`, `1000 bytes`.
pub(crate) fn size(n: u64) -> String {
    const KIB: u64 = 1024;
    match n {
        0 => "0 bytes".into(),
        n if n % (KIB * KIB) == 0 => format!("{} MiB", n / (KIB * KIB)),
        n if n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

/// The `run_python` description with the default options but these two.
pub fn description(runtime: &Runtime, bindings: &Bindings, max_bytes: usize, session_idle: Duration) -> String {
    let options = ServerOptions { max_description_bytes: max_bytes, session_idle, ..ServerOptions::default() };
    description_with(runtime, bindings, &options)
}

/// The description's rule for functions that need approval (none: empty).
fn approval_rule(bindings: &Bindings) -> String {
    let names = approvals::approval_names(&bindings.namespaces);
    if names.is_empty() {
        return String::new();
    }
    format!(
        "- These functions need a person's approval: {}. A call to one waits for it: the user is asked right away \
         when this client can be asked; otherwise the run stops, and its result has `suspended` and a \
         `resume_token`: ask the user, then call {RESUME_PYTHON} with the token. The program then goes on from \
         where it stopped (the calls it made before are not made again).\n",
        names.join(", ")
    )
}

/// What the description says of the network: none, or the allow-list.
pub(crate) fn network_rule(c: &pycage_runtime::RuntimeConfig) -> String {
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

/// What the description says of the type check: always on, or asked for.
/// (Without `--type-check` the input schema's `type_check` says it: the
/// description, which every client reads, stays as short as it was.)
fn type_check_rule(c: &pycage_runtime::RuntimeConfig) -> &'static str {
    if c.type_check {
        "- Every program is type-checked (ty) against the stubs below first: a `type-error` result lists what to \
         fix, each at `<program>:LINE:COL`; nothing ran and no function was called. Warnings come in `diagnostics`.\n"
    } else {
        ""
    }
}

/// The `run_python` description: rules, budgets and the stubs (or one-line
/// summaries when the stubs would take it over `max_description_bytes`).
pub fn description_with(runtime: &Runtime, bindings: &Bindings, options: &ServerOptions) -> String {
    let c = runtime.config();
    let max_bytes = options.max_description_bytes;
    let files = &options.input_limits;
    let returned = match &options.output_dir {
        Some(_) => "as links to files on the server".to_owned(),
        None => format!("embedded, at most {} in all", size(options.max_embedded_bytes)),
    };
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
         - A failed function call raises an exception (the namespace's error class below); catch it to go on.\n{}\
         - display(obj) shows rich output: a matplotlib figure (plt.show()), a DataFrame, an image. \
         Each display comes back after the result as an image or text (up to {} in all); the value stays JSON.\n\
         - The standard library is available; {}\n\
         {}\
         - Files (not with `session`): `files` {{\"name\": \"text\" or {{\"base64\": \"...\"}}}} (at most {} files, {} each, {} in all) \
         appear read-only in the working directory; with `\"return_files\": true`, what the program writes under `out/` comes back ({}).\n\
         \n\
         Result: {{\"value\": ..., \"logs\": [...], \"error\": {{\"kind\": ..., \"message\": ...}}}} (error only when the run failed), \
         then a block per display.\n",
        runtime.interpreter().version.0,
        runtime.interpreter().version.1,
        options.session_idle.as_secs(),
        c.max_log_bytes,
        c.max_value_bytes,
        c.wall_time.as_secs_f64(),
        c.cpu_seconds,
        c.address_space_bytes / (1024 * 1024),
        approval_rule(bindings),
        size(c.max_display_bytes),
        network_rule(c),
        type_check_rule(c),
        files.max_files,
        size(files.max_file_bytes),
        size(files.max_total_bytes),
        returned,
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
