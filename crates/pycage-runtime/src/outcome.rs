//! What a run comes to: [`RunResult`] (value, logs, failure), the failure
//! kinds, and the [`RunEvent`]s a run streams while in flight.

use pycage_protocol::JsonValue;

use crate::display::Display;
use pycage_egress::NetworkReport;
use pycage_files::copy::CopyReport;

/// Why a run failed. The kinds are orthogonal (`docs/semantics.md`, "Outcomes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The program raised, or failed to compile.
    Exception,
    /// A wall-clock or CPU budget expired (the message says which).
    Timeout,
    /// The caller cancelled, or the runtime shut down.
    Abort,
    /// The process died without settling.
    WorkerExit,
    /// The return value is not JSON that can cross losslessly.
    InvalidOutput,
    /// A value, line or control-traffic budget was exceeded.
    OutputLimit,
    /// The packages the run declares (PEP 723) could not be provided: not
    /// allowed, malformed, not found, not installable, or past
    /// `RuntimeConfig::install_timeout`. The program did not start.
    Dependencies,
    /// A binding call suspended the run (it needs approval, or its binding
    /// asked to): [`RunResult::suspension`] holds the pending call and the
    /// journal that resumes it (`docs/durable.md`).
    Suspended,
    /// A resumed run took another path than its journal records (another
    /// call, other arguments, another order, or an end before the
    /// recorded calls): the message names the call. Nothing live was
    /// called after the divergence.
    Diverged,
    /// The type check (`RuntimeConfig::type_check`) found errors: the
    /// message lists them in the program's own lines. The program did not
    /// start and no binding was called.
    TypeError,
}

impl FailureKind {
    /// The wire / JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Exception => "exception",
            FailureKind::Timeout => "timeout",
            FailureKind::Abort => "abort",
            FailureKind::WorkerExit => "worker-exit",
            FailureKind::InvalidOutput => "invalid-output",
            FailureKind::OutputLimit => "output-limit",
            FailureKind::Dependencies => "dependencies",
            FailureKind::Suspended => "suspended",
            FailureKind::Diverged => "diverged",
            FailureKind::TypeError => "type-error",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed run's kind and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// The binding call a suspended run waits at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCall {
    /// The namespace (`tools`).
    pub global: String,
    /// The member (`pay`).
    pub name: String,
    pub args: JsonValue,
}

/// A suspended run: what it waits for, and the journal that resumes it
/// ([`crate::RunRequest::resume`]), in this process or another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspension {
    pub call: PendingCall,
    /// `approval required`, or what the binding said.
    pub reason: String,
    /// Opaque bytes, signed with the runtime's journal key.
    pub journal: Vec<u8>,
}

/// Every outcome of a run. When `error` is set, `value` is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunResult {
    /// The program's value: its top-level `return`, or else its final
    /// expression statement unless that is `None`; `None` when it has none.
    pub value: Option<JsonValue>,
    /// Output lines, without trailing newlines: Python-level output (sent as
    /// `log` frames) in the order written, raw fd 1/fd 2 output in the order
    /// written, and the two channels interleaved in arrival order.
    pub logs: Vec<String>,
    /// Rich output, in the order the program made it (`display()`,
    /// matplotlib figures): each a MIME bundle and its metadata, within
    /// `RuntimeConfig::max_display_bytes` (past it, one marker display
    /// ends the list; see `docs/semantics.md`, "Rich output").
    pub displays: Vec<Display>,
    pub error: Option<RunFailure>,
    /// Frames from the child that failed validation and were dropped.
    pub dropped_frames: u64,
    /// Binding calls the program made that were still running (or waiting
    /// to start) when the run settled: their futures were dropped and
    /// nothing of theirs starts afterwards, but work a binding had already
    /// begun outside its future (a thread, a request sent) may finish.
    pub abandoned_calls: u64,
    /// What was copied from the run's `out/` directory, when the request
    /// named an output directory ([`crate::RunRequest::output_dir`]).
    pub output: Option<CopyReport>,
    /// What the run did through the egress proxy, when the runtime has an
    /// allow-list (`RuntimeConfig::allow_net`): every connection, allowed
    /// or refused, with its bytes.
    pub network: Option<NetworkReport>,
    /// Set when the run is suspended (`error` is then of kind `suspended`).
    pub suspension: Option<Suspension>,
    /// The type check's warnings, when the run was checked: each ty's
    /// concise line with the source line under it (see
    /// `docs/semantics.md`, "Type checking"). Errors are never here: they
    /// fail the run as `type-error`.
    pub diagnostics: Vec<String>,
}

impl RunResult {
    pub(crate) fn failed(kind: FailureKind, message: String, logs: Vec<String>) -> Self {
        RunResult { logs, error: Some(RunFailure { kind, message }), ..RunResult::default() }
    }

    /// The result as one JSON object: `value` (absent when none), `logs`,
    /// `displays` (only when the run displayed something: `[{data: {mime:
    /// text}, metadata}]`, see [`Display::write_json`]),
    /// `output` (only when an output directory was requested: `files`
    /// `[{path, bytes}]`, `skipped` `[{path, reason, kind}]` (`kind`:
    /// `excluded`, `limit` or `failed`, see [`crate::SkipKind`]), `bytes`,
    /// `truncated`, `complete`: nothing but excluded entries was skipped),
    /// `network` (only with an egress allow-list: `connections` `[{method,
    /// host, port, allowed, bytes_up, bytes_down, reason?}]`, `bytes_up`,
    /// `bytes_down`, `refused_over_budget`, `budget_exceeded?`),
    /// `diagnostics` (only when a type check warned: strings), `error`
    /// `{kind, message}` (absent on success), `suspended` (only when
    /// suspended: `{call: {global, name, args}, reason}`; the journal is
    /// bytes, left to the caller to store).
    pub fn to_json(&self) -> JsonValue {
        let mut b = pycage_protocol::JsonBuilder::new();
        // Each step is valid by construction; errors are impossible here.
        let _ = (|| -> Result<(), pycage_protocol::BuildError> {
            b.begin_object()?;
            if let Some(v) = &self.value {
                b.key("value")?;
                b.value(v.root())?;
            }
            b.key("logs")?;
            b.begin_array()?;
            for l in &self.logs {
                b.string(l)?;
            }
            b.end()?;
            if !self.displays.is_empty() {
                b.key("displays")?;
                b.begin_array()?;
                for d in &self.displays {
                    d.write_json(&mut b)?;
                }
                b.end()?;
            }
            if let Some(output) = &self.output {
                b.key("output")?;
                output.write_json(&mut b)?;
            }
            if let Some(network) = &self.network {
                b.key("network")?;
                network.write_json(&mut b)?;
            }
            if !self.diagnostics.is_empty() {
                b.key("diagnostics")?;
                b.begin_array()?;
                for d in &self.diagnostics {
                    b.string(d)?;
                }
                b.end()?;
            }
            if let Some(e) = &self.error {
                b.key("error")?;
                b.begin_object()?;
                b.key("kind")?;
                b.string(e.kind.as_str())?;
                b.key("message")?;
                b.string(&e.message)?;
                b.end()?;
            }
            if let Some(s) = &self.suspension {
                b.key("suspended")?;
                b.begin_object()?;
                b.key("call")?;
                b.begin_object()?;
                b.key("global")?;
                b.string(&s.call.global)?;
                b.key("name")?;
                b.string(&s.call.name)?;
                b.key("args")?;
                b.value(s.call.args.root())?;
                b.end()?;
                b.key("reason")?;
                b.string(&s.reason)?;
                b.end()?;
            }
            b.end()
        })();
        b.finish().unwrap_or_else(|_| JsonValue::null())
    }
}

/// What a run reports while it is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    /// One complete log line.
    Log(String),
    /// A display the run kept (the host's truncation marker included).
    Display(Display),
    /// The program called a binding.
    Call { id: u64, global: String, name: String, args: JsonValue },
    /// A call finished: `error` is the rejection message, if any.
    CallFinished { id: u64, error: Option<String> },
}
