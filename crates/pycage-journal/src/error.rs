//! Why a key or a journal is refused. Every refusal happens before any
//! program runs, and its message says what to do.

use crate::digest::Digest;

/// A journal key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a journal key must be at least {min} bytes, this one has {bytes} (make one with `openssl rand -hex 32`)")]
    TooShort { bytes: usize, min: usize },
}

/// A journal that is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// The bytes do not start with a journal's header.
    #[error("these bytes are not a pycage journal (they do not start with its header)")]
    NotAJournal,
    /// Another version of the format (an older or newer pycage made it).
    #[error(
        "the journal is in format version {found}; this pycage reads version {reads} only: resume it with the \
         pycage version that made it"
    )]
    Version { found: u32, reads: u32 },
    /// Over the runtime's `max_journal_bytes`.
    #[error("the journal is {bytes} bytes, over the {max}-byte journal budget (max_journal_bytes)")]
    TooLarge { bytes: u64, max: u64 },
    /// The signature does not match: altered bytes, or another key.
    #[error(
        "the journal's signature does not match: it was altered, or signed with another journal key (each \
         journal resumes only under the key that signed it)"
    )]
    Signature,
    /// Signed, yet not what this version writes (a bug, or a leaked key).
    #[error("the journal is signed but malformed: {0}")]
    Malformed(String),
    /// The caller named a program, and the journal is of another.
    #[error("the journal is of another program than the one given: resume it without a program, or with its own")]
    OtherProgram,
    /// A session cell's journal given to a run's resume.
    #[error(
        "the journal is of a session's cell, not of a one-shot run: resume it as a session (Runtime::resume_session, \
         pycage.Runtime.resume_session), which replays the session's earlier cells first"
    )]
    SessionJournal,
    /// A one-shot run's journal given to a session's resume.
    #[error(
        "the journal is of a one-shot run, not of a session's cell: resume it as a run (RunRequest::resuming, \
         pycage.Runtime.resume, pycage resume)"
    )]
    RunJournal,
    /// The bindings given are not the ones the journal was made with.
    #[error("the bindings differ from those the journal was made with: {detail}; give the same bindings to resume")]
    Bindings { recorded: Digest, given: Digest, detail: String },
}
