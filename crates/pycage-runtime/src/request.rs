//! What a caller asks of one run: [`RunRequest`], the budgets that
//! override the runtime's for it ([`RunLimits`]), and the journal a
//! resumed run replays ([`Resume`]).

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::bindings::Namespace;
use crate::config::{ConfigError, RuntimeConfig};

/// One program and its bindings.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub program: String,
    pub bindings: Vec<Namespace>,
    /// Cancelling it settles the run as `abort`, keeping logs so far.
    pub cancel: Option<CancellationToken>,
    /// Host files or directories the program reads: each appears read-only
    /// in its working directory under its base name (relative paths are
    /// taken from the current directory).
    pub inputs: Vec<PathBuf>,
    /// Where to copy what the program leaves in its `out/` directory when
    /// the run settles (created if missing; at most
    /// `RuntimeConfig::max_output_bytes`; symlinks and special files are
    /// never followed or copied). The report is `RunResult::output`.
    pub output_dir: Option<PathBuf>,
    /// This run's own budgets, where they differ from the runtime's.
    pub limits: RunLimits,
    /// A file to copy everything the child writes on its protocol channel
    /// (fd 3) into, as received: a transcript `pycage frames validate`
    /// checks. Created (truncated) when the run starts.
    pub transcript: Option<PathBuf>,
    /// Type-check the program first (`Some(true)`), or not (`Some(false)`);
    /// `None` follows `RuntimeConfig::type_check`.
    pub type_check: Option<bool>,
    /// Resume a suspended run from its journal instead of starting one
    /// (`docs/durable.md`): `program` may then be empty (the journal's is
    /// run) or must be the journal's, `bindings` must be the ones the run
    /// had (their names, error classes and docs), and `limits` are the
    /// journal's (these are ignored).
    pub resume: Option<Resume>,
}

/// A suspended run's journal and the answer to its pending call.
#[derive(Debug, Clone)]
pub struct Resume {
    /// [`crate::Suspension::journal`]'s bytes.
    pub journal: Vec<u8>,
    pub answer: Answer,
}

/// What the pending call of a resumed run returns in the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The call returns this value.
    Reply(pycage_protocol::JsonValue),
    /// The call raises the namespace's error class with this message
    /// (the program may catch it).
    Deny(String),
}

/// Budgets of one run that override the runtime's (`None` keeps the
/// runtime's). Checked like the configuration: a value the runtime would
/// refuse is a [`crate::MisuseError::Limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// [`RuntimeConfig::wall_time`].
    pub wall_time: Option<std::time::Duration>,
    /// [`RuntimeConfig::cpu_seconds`].
    pub cpu_seconds: Option<u64>,
    /// [`RuntimeConfig::address_space_bytes`]: the run's memory budget.
    pub memory_bytes: Option<u64>,
}

impl RunLimits {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == RunLimits::default()
    }

    /// `config` with these overrides, checked.
    pub(crate) fn apply(&self, config: &Arc<RuntimeConfig>) -> Result<Arc<RuntimeConfig>, ConfigError> {
        if self.is_empty() {
            return Ok(Arc::clone(config));
        }
        let mut c = RuntimeConfig::clone(config);
        if let Some(wall) = self.wall_time {
            c.wall_time = wall;
        }
        if let Some(cpu) = self.cpu_seconds {
            c.cpu_seconds = cpu;
        }
        if let Some(memory) = self.memory_bytes {
            c.address_space_bytes = memory;
        }
        c.validate()?;
        Ok(Arc::new(c))
    }
}

impl RunRequest {
    /// A request with no bindings.
    pub fn new(program: impl Into<String>) -> Self {
        RunRequest { program: program.into(), ..RunRequest::default() }
    }

    /// Adds an input file or directory.
    pub fn with_input(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(path.into());
        self
    }

    /// Sets the output directory.
    pub fn with_output_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.output_dir = Some(path.into());
        self
    }

    /// Adds a namespace.
    pub fn with_namespace(mut self, ns: Namespace) -> Self {
        self.bindings.push(ns);
        self
    }

    /// Sets the cancel token.
    pub fn with_cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Sets this run's own budgets.
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Type-checks the program first, or not ([`RunRequest::type_check`]).
    pub fn with_type_check(mut self, on: bool) -> Self {
        self.type_check = Some(on);
        self
    }

    /// Makes this request the resume of a suspended run.
    pub fn resuming(mut self, journal: impl Into<Vec<u8>>, answer: Answer) -> Self {
        self.resume = Some(Resume { journal: journal.into(), answer });
        self
    }
}
