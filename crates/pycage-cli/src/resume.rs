//! `pycage resume`, and what `run` and `resume` share about journals: the
//! key (`PYCAGE_JOURNAL_KEY`), writing a suspended run's journal, and the
//! exit status of a suspension.
//!
//! A resume is a run ([`crate::run::execute`]) whose request carries the
//! journal and the answer: the program is the journal's, the budgets are
//! the journal's, the bindings file must give the same bindings. A journal
//! the runtime refuses (altered, another key, another format, other
//! bindings) is misuse, exit 2, before any program runs. A run that
//! suspends again rewrites the journal (or writes `--journal-out`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pycage_bindings::file::BindingsFile;
use pycage_runtime::journal::{JournalKey, KEY_ENV};
use pycage_runtime::{Answer, JsonValue, Resume, Suspension};

use crate::{output, RunArgs, RuntimeArgs};

/// Exit status of a run that suspended (its journal was written).
pub(crate) const EXIT_SUSPENDED: u8 = 4;

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

/// The key in `PYCAGE_JOURNAL_KEY`, which `flag` needs. The variable is
/// then dropped from this process's environment, so that no command
/// binding (which inherits pycage's environment) sees it. Called before the
/// async runtime starts any thread.
pub(crate) fn journal_key(flag: &str) -> anyhow::Result<JournalKey> {
    let key = JournalKey::from_env();
    std::env::remove_var(KEY_ENV);
    match key {
        Some(Ok(key)) => Ok(key),
        Some(Err(e)) => anyhow::bail!("{KEY_ENV}: {e}"),
        None => anyhow::bail!(
            "{flag} needs a journal key: set {KEY_ENV} (at least 16 bytes, e.g. `export {KEY_ENV}=$(openssl rand \
             -hex 32)`) and keep it, since a journal resumes only under the key that signed it"
        ),
    }
}

/// Whether the file marks any call as needing approval.
pub(crate) fn needs_approval(file: &BindingsFile) -> bool {
    file.namespaces.iter().any(|n| n.functions.values().any(|f| f.approval))
        || file.mcp.iter().any(|m| !m.approval.is_empty())
}

/// Checks, before the run, that a journal can be written at `path`: its
/// directory exists and is writable.
pub(crate) fn check_journal_out(path: &Path) -> anyhow::Result<()> {
    let dir = dir_of(path);
    rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK)
        .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
        .with_context(|| format!("--journal-out {}: cannot write into {}", path.display(), dir.display()))
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes a suspended run's journal to `path` (a new file of mode 0600,
/// renamed over whatever was there, so a reader never sees half of it),
/// and says on stderr which call waits and how to resume.
pub(crate) fn write_journal(path: &Path, s: &Suspension, bindings: Option<&Path>) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dir_of(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(&s.journal)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write the journal to {}", path.display()));
    }
    let call = format!("{}.{}({})", s.call.global, s.call.name, s.call.args);
    output::stderr_text(&format!("pycage: suspended at {call}: {}", s.reason));
    let bindings = bindings.map(|b| format!(" --bindings {}", b.display())).unwrap_or_default();
    output::stderr_text(&format!(
        "pycage: journal written to {p}; resume with `pycage resume {p}{bindings} --reply JSON` (or --deny MESSAGE)",
        p = path.display()
    ));
    Ok(())
}
