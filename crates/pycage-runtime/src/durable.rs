//! The runtime's side of durable runs (`docs/durable.md`): what a run
//! needs to record or replay, checked before anything is spawned. The
//! journal itself (format, signature, recording, replay) is the
//! `pycage-journal` crate's; the run machine drives its [`Tape`].

use pycage_journal::{BindingsDigest, Budgets, Digest, Given, Journal, JournalKey, Meta, Reply, Seeds, Tape};

use crate::bindings::Namespace;
use crate::config::RuntimeConfig;
use crate::error::MisuseError;
use crate::request::{Answer, Resume, RunLimits};

/// How a run takes part in durability.
pub(crate) enum Durable {
    /// A new run on a runtime with a key: it records, and may suspend.
    Live { key: JournalKey, bindings: (Digest, Vec<String>) },
    /// A resumed run: it replays its journal first.
    Resumed { key: JournalKey, tape: Box<Tape> },
}

/// A run's tape and the key its journal is sealed with, for the machine.
pub(crate) struct Recording {
    pub tape: Tape,
    pub key: JournalKey,
    pub max_bytes: u64,
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
            Some(key) => Ok(Some(Durable::Live { key: key.clone(), bindings: bindings_digest(bindings) })),
            None if approval => Err(MisuseError::NoJournalKey("a run whose bindings need approval")),
            None => Ok(None),
        };
    };
    let key = config.journal_key.clone().ok_or(MisuseError::NoJournalKey("resuming a run"))?;
    let journal = Journal::open(&journal, &key, config.max_journal_bytes)?;
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
    Ok(Some(Durable::Resumed { key, tape: Box::new(tape) }))
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
            Durable::Live { key, bindings: (digest, names) } => {
                let meta = Meta {
                    program: program.to_owned(),
                    bindings: digest,
                    binding_names: names,
                    budgets: Budgets {
                        wall_ms: u64::try_from(config.wall_time.as_millis()).unwrap_or(u64::MAX),
                        cpu_seconds: config.cpu_seconds,
                        memory_bytes: config.address_space_bytes,
                    },
                    seeds: Seeds { hash: hash_seed, random: pycage_process::random_u64() },
                };
                Recording { tape: Tape::new(meta, max_bytes), key, max_bytes }
            }
            Durable::Resumed { key, tape } => Recording { tape: *tape, key, max_bytes },
        }
    }
}
