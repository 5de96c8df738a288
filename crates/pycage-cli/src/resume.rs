//! `pycage resume`: a suspended run, answered and resumed from its journal.
//!
//! A resume is a run ([`crate::run::execute`]) whose request carries the
//! journal and the answer: the program is the journal's, the budgets are
//! the journal's, the bindings file must give the same bindings. A journal
//! the runtime refuses (altered, another key, another format, other
//! bindings) is misuse, exit 2, before any program runs. A run that
//! suspends again rewrites the journal (or writes `--journal-out`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pycage_runtime::{Answer, JsonValue, Resume};

use crate::common::{RunArgs, RuntimeArgs};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("answer").required(true).multiple(false).args(["reply", "deny"]))]
pub(crate) struct ResumeArgs {
    /// The journal `pycage run --journal-out` wrote.
    #[arg(value_name = "JOURNAL")]
    journal: PathBuf,

    /// Approve the pending call: it returns this JSON value in the program.
    #[arg(long, value_name = "JSON")]
    reply: Option<String>,

    /// Refuse the pending call: it raises the namespace's error class with
    /// MESSAGE in the program (which may catch it).
    #[arg(long, value_name = "MESSAGE")]
    deny: Option<String>,

    /// Where the journal goes if the run suspends again (default: JOURNAL,
    /// replaced).
    #[arg(long, value_name = "FILE")]
    journal_out: Option<PathBuf>,

    /// Print the result as one line of canonical JSON, as `run --json` does.
    #[arg(long)]
    pub(crate) json: bool,

    /// The bindings file the run had (the same names, error classes and docs).
    #[arg(long, value_name = "FILE.toml")]
    bindings: Option<PathBuf>,

    #[command(flatten)]
    runtime: RuntimeArgs,

    /// A file or directory the program reads (repeatable), as for `run`.
    #[arg(long = "input", value_name = "PATH")]
    inputs: Vec<PathBuf>,

    /// As for `run`.
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,

    /// As for `run`.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
}

pub(crate) fn main(args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let max = args.runtime.config()?.max_journal_bytes;
    let journal = read_bounded(&args.journal, max)?;
    let answer = match (args.reply, args.deny) {
        (Some(reply), None) => Answer::Reply(
            JsonValue::parse(reply.as_bytes()).map_err(|e| anyhow::anyhow!("--reply is not one JSON value: {e}"))?,
        ),
        (None, Some(message)) => Answer::Deny(message),
        _ => anyhow::bail!("give --reply JSON or --deny MESSAGE"),
    };
    let run = RunArgs {
        json: args.json,
        bindings: args.bindings,
        runtime: args.runtime,
        inputs: args.inputs,
        output: args.output,
        transcript: args.transcript,
        journal_out: Some(args.journal_out.unwrap_or(args.journal)),
        code: None,
        file: None,
    };
    crate::run::execute(run, String::new(), Some(Resume { journal, answer }))
}

/// The file's bytes, refusing one over `max` without reading it whole.
fn read_bounded(path: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot read the journal {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read the journal {}", path.display()))?;
    if bytes.len() as u64 > max {
        anyhow::bail!("the journal {} is over --max-journal-bytes ({max})", path.display());
    }
    Ok(bytes)
}
