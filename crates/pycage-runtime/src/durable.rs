//! The runtime's side of durable runs (`docs/durable.md`): what a run
//! needs to record or replay, checked before anything is spawned. The
//! journal itself (format, signature, recording, replay) is the
//! `pycage-journal` crate's; the run machine drives its [`Tape`].
//!
//! A session on a runtime with a key records each cell that ran to its
//! end ([`SessionCells`]); a cell that suspends seals them into its
//! journal, and [`prepare_session`] opens such a journal for
//! `crate::Session`'s resume, which replays them closed, in order.

use std::sync::Arc;

use pycage_journal::{
    BindingsDigest, Budgets, Cell, Digest, Given, Journal, JournalError, JournalKey, Meta, Reply, Seeds, Tape,
};

use crate::bindings::Namespace;
use crate::config::RuntimeConfig;
use crate::error::MisuseError;
use crate::request::{Answer, Resume, RunLimits};

/// How a run takes part in durability.
pub(crate) enum Durable {
    /// A new run on a runtime with a key: it records, and may suspend. A
    /// session's cell carries the session's earlier cells.
    Live { key: JournalKey, bindings: (Digest, Vec<String>), session: Option<SessionCells> },
    /// A resumed run (or a session's earlier cell, replayed closed): it
    /// replays its journal first.
    Resumed { key: JournalKey, tape: Box<Tape>, session: Option<SessionCells> },
}

/// A run's tape and the key its journal is sealed with, for the machine.
pub(crate) struct Recording {
    pub tape: Tape,
    pub key: JournalKey,
    pub max_bytes: u64,
    /// A session cell's: the cells before it, sealed into its journal.
    pub session: Option<Arc<Vec<Cell>>>,
}

/// The cells a session ran to their end, in order, while they fit the
/// journal budget: what a suspended cell's journal holds before it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionCells {
    pub cells: Arc<Vec<Cell>>,
    /// Their size in a journal (within a few bytes).
    pub bytes: u64,
}

impl SessionCells {
    /// Adds a cell that ran to its end; `false` (and nothing kept) when
    /// the cells are over `max_bytes` together: the session can no longer
    /// suspend.
    pub(crate) fn push(&mut self, cell: Cell, max_bytes: u64) -> bool {
        self.bytes = self.bytes.saturating_add(cell.payload_len() as u64);
        Arc::make_mut(&mut self.cells).push(cell);
        self.bytes <= max_bytes
    }
}

/// A session cell's journal, opened and checked, ready to resume: the
/// earlier cells, replayed closed, then the suspended cell's tape.
pub(crate) struct SessionResume {
    pub key: JournalKey,
    pub cells: Vec<Cell>,
    /// The session's string-hash seed.
    pub hash: Option<u32>,
    pub bindings: (Digest, Vec<String>),
    /// The suspended cell, its pending call answered.
    pub last: Tape,
    /// The suspended cell's wall-clock and CPU budgets.
    pub limits: RunLimits,
}

/// The digest of `bindings` (see `pycage_journal::BindingsDigest`).
pub(crate) fn bindings_digest(bindings: &[Namespace]) -> (Digest, Vec<String>) {
    let mut d = BindingsDigest::new();
    for ns in bindings {
        let class = ns.error_class.as_ref().map(|c| (c.name.as_str(), c.member_name_property.as_str()));
        d.namespace(&ns.global, class, ns.doc.as_deref());
        for name in ns.functions.keys() {
            d.member(&ns.global, name, ns.member_docs.get(name).map(String::as_str));
        }
    }
    d.finish()
}

/// What `program` with `bindings` needs of durability on a runtime of
/// `config`, refusing misuse: a run whose bindings need approval without
/// a key, a resume without a key, a journal that does not open or match.
/// A resume's program and limits come from its journal.
pub(crate) fn prepare(
    config: &RuntimeConfig,
    program: &mut String,
    bindings: &[Namespace],
    limits: &mut RunLimits,
    resume: Option<Resume>,
) -> Result<Option<Durable>, MisuseError> {
    let Some(Resume { journal, answer }) = resume else {
        let approval = bindings.iter().any(|ns| ns.functions.keys().any(|name| ns.needs_approval(name)));
        return match &config.journal_key {
            Some(key) => {
                Ok(Some(Durable::Live { key: key.clone(), bindings: bindings_digest(bindings), session: None }))
            }
            None if approval => Err(MisuseError::NoJournalKey("a run whose bindings need approval")),
            None => Ok(None),
        };
    };
    let key = config.journal_key.clone().ok_or(MisuseError::NoJournalKey("resuming a run"))?;
    let journal = Journal::open(&journal, &key, config.max_journal_bytes)?;
    if journal.session.is_some() {
        return Err(JournalError::SessionJournal.into());
    }
    let (digest, names) = bindings_digest(bindings);
    let given =
        Given { program: Some(program.as_str()).filter(|p| !p.is_empty()), bindings: digest, binding_names: &names };
    let answer = match answer {
        Answer::Reply(value) => Reply::Ok(value),
        Answer::Deny(message) => Reply::Err(message),
    };
    let tape = Tape::resume(journal, given, answer, config.max_journal_bytes)?;
    let meta = tape.meta();
    program.clone_from(&meta.program);
    let spent_cpu = tape.spent_before().cpu_ms.div_ceil(1000);
    *limits = RunLimits {
        wall_time: Some(std::time::Duration::from_millis(meta.budgets.wall_ms)),
        // The child's own `RLIMIT_CPU` is a backstop only: the replay
        // spends again what the journal's CPU figure counts, and the
        // watchdog holds the run to its budget from the replay's end.
        cpu_seconds: Some(meta.budgets.cpu_seconds.saturating_add(spent_cpu).saturating_add(1)),
        memory_bytes: Some(meta.budgets.memory_bytes),
    };
    Ok(Some(Durable::Resumed { key, tape: Box::new(tape), session: None }))
}

/// Opens a session cell's journal for a resume with `bindings`, refusing
/// misuse before anything runs: no key, a journal that does not open, a
/// one-shot run's journal, other bindings.
pub(crate) fn prepare_session(
    config: &RuntimeConfig,
    bindings: &[Namespace],
    journal: &[u8],
    answer: Answer,
) -> Result<SessionResume, MisuseError> {
    let key = config.journal_key.clone().ok_or(MisuseError::NoJournalKey("resuming a session"))?;
    let mut journal = Journal::open(journal, &key, config.max_journal_bytes)?;
    let cells = journal.session.take().ok_or(JournalError::RunJournal)?;
    let earlier: u64 = cells.iter().map(|c| c.payload_len() as u64).sum();
    let hash = journal.seeds.hash;
    let (digest, names) = bindings_digest(bindings);
    let given = Given { program: None, bindings: digest, binding_names: &names };
    let answer = match answer {
        Answer::Reply(value) => Reply::Ok(value),
        Answer::Deny(message) => Reply::Err(message),
    };
    let last = Tape::resume(journal, given, answer, config.max_journal_bytes.saturating_sub(earlier))?;
    let budgets = last.meta().budgets;
    let limits = RunLimits {
        wall_time: Some(std::time::Duration::from_millis(budgets.wall_ms)),
        cpu_seconds: Some(budgets.cpu_seconds),
        memory_bytes: None,
    };
    Ok(SessionResume { key, cells, hash, bindings: (digest, names), last, limits })
}

impl SessionResume {
    /// The closed replay of earlier cell `cell`, under `config`'s budgets.
    pub(crate) fn replay(&self, config: &RuntimeConfig, cell: &Cell) -> Durable {
        let meta = Meta {
            program: cell.program.clone(),
            bindings: self.bindings.0,
            binding_names: self.bindings.1.clone(),
            budgets: budgets_of(config),
            seeds: Seeds { hash: self.hash, random: cell.random },
        };
        let tape = Tape::replay_cell(meta, cell.events.clone(), config.max_journal_bytes);
        Durable::Resumed { key: self.key.clone(), tape: Box::new(tape), session: None }
    }
}

fn budgets_of(config: &RuntimeConfig) -> Budgets {
    Budgets {
        wall_ms: u64::try_from(config.wall_time.as_millis()).unwrap_or(u64::MAX),
        cpu_seconds: config.cpu_seconds,
        memory_bytes: config.address_space_bytes,
    }
}

impl Durable {
    /// The hash seed the run's interpreter must have (a resumed run's).
    pub(crate) fn hash_seed(&self) -> Option<u32> {
        match self {
            Durable::Live { .. } => None,
            Durable::Resumed { tape, .. } => tape.meta().seeds.hash,
        }
    }

    /// The CPU budget the watchdog holds the run to.
    pub(crate) fn cpu_budget(&self, config: &RuntimeConfig) -> u64 {
        match self {
            Durable::Live { .. } => config.cpu_seconds,
            Durable::Resumed { tape, .. } => tape.meta().budgets.cpu_seconds,
        }
    }

    /// The machine's recording, once the run's interpreter (and its hash
    /// seed) is known.
    pub(crate) fn start(self, config: &RuntimeConfig, program: &str, hash_seed: Option<u32>) -> Recording {
        let max_bytes = config.max_journal_bytes;
        match self {
            Durable::Live { key, bindings: (digest, names), session } => {
                let meta = Meta {
                    program: program.to_owned(),
                    bindings: digest,
                    binding_names: names,
                    budgets: budgets_of(config),
                    seeds: Seeds { hash: hash_seed, random: pycage_process::random_u64() },
                };
                // A session cell's journal holds the cells before it too.
                let room = max_bytes.saturating_sub(session.as_ref().map_or(0, |s| s.bytes));
                let session = session.map(|s| s.cells);
                Recording { tape: Tape::new(meta, room), key, max_bytes, session }
            }
            Durable::Resumed { key, tape, session } => {
                Recording { tape: *tape, key, max_bytes, session: session.map(|s| s.cells) }
            }
        }
    }
}
