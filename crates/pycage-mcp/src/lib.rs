//! `pycage mcp`: code mode for any MCP client.
//!
//! An MCP server with one tool, `run_python`, that runs a program against
//! the configured bindings (commands, HTTP endpoints, other MCP servers) and
//! returns only its result. The tool's description carries the rules of a
//! program (top-level `await`, `return` or a last expression, budgets) and
//! the typed Python stubs of every binding, so the model reads one
//! description and writes one program instead of making twenty tool calls.
//! When the stubs do not fit [`ServerOptions::max_description_bytes`], the
//! description lists each function on one line and the program reads the
//! rest with `help(ns.function)`.
//!
//! A call's result is `{value?, logs, output?, session?, error?}` (the run's
//! outcome, as in `pycage run --json`), both as `structuredContent` and as
//! its JSON text; a failed run also sets `isError`. While the program runs,
//! each log line goes to the client as a progress notification (when the
//! request carries a progress token). A `notifications/cancelled` from the
//! client aborts the run (which cancels the program's own in-flight upstream
//! calls in turn); so does the client going away (see `clients`). Runs from
//! concurrent calls run concurrently.
//!
//! A call naming a `session` runs in that named runtime session (globals
//! kept across calls). Sessions belong to the client that opened them, with
//! slots per client and in total, idle expiry, and an ended session reported
//! once to its owner, then started afresh (`clients`).
//!
//! A run's displays (`display()`, matplotlib figures) come back as content
//! blocks after the result's text: images as MCP image content, markdown
//! and HTML as text (`displays`). A call may carry small input files, and
//! gets back what the program left in `out/` (`files`). Over HTTP, requests
//! pass a gate first: `Host` and `Origin` validation, optional bearer
//! tokens, connections per client and the body's time (`gate`), behind
//! bounds on connections, header time and MCP sessions (`transport`).
//! Runs are admitted in turn across clients (`admission`).
//!
//! With [`ServerOptions::expose_tools`], every upstream MCP tool is also
//! listed and forwarded unchanged under its own name, so a client keeps
//! direct calls too.
//!
//! Why its own crate: it is the one place that serves MCP (the bindings crate
//! is a client), and the CLI only parses flags and picks a transport.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//! `displays`, `files`, [`options`] (HTTP options, tokens, bounds),
//! `clients` (who a request is, sessions and run slots per client),
//! `approvals` (calls that need approval: elicitation, or runs suspended
//! for `resume_python`), `admission` (fair turns across clients), `gate` (the HTTP gate:
//! Host, Origin, tokens, bodies, connections), `tool` (what a client sees
//! of `run_python`: options, description, schemas, results), `server` (the
//! `run_python` handler), then `transport` (stdio and streamable HTTP).

mod admission;
mod approvals;
mod clients;
mod displays;
mod files;
mod gate;
pub mod options;
mod server;
mod tool;
mod transport;

pub use approvals::{MAX_PARKED, MAX_PARKED_PER_CLIENT, PARKED_TTL, RESUME_PYTHON};
pub use clients::MAX_SESSION_NAME;
pub use files::InputLimits;
pub use options::{
    BearerToken, HttpOptions, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_MAX_MCP_SESSIONS, DEFAULT_MIN_BODY_RATE, MIN_TOKEN_BYTES,
};
pub use server::{CodeModeServer, ServeError};
pub use tool::{description, description_with, ServerOptions, RUN_PYTHON};
pub use transport::{serve_http, serve_stdio};
