//! What `run` and `resume` share about durable runs: the key
//! (`PYCAGE_JOURNAL_KEY`), whether a bindings file needs approval, writing
//! a suspended run's journal, and the exit status of a suspension.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use pycage_bindings::file::BindingsFile;
use pycage_runtime::journal::{JournalKey, KEY_ENV};
use pycage_runtime::Suspension;

use crate::output;

/// Exit status of a run that suspended (its journal was written).
pub(crate) const EXIT_SUSPENDED: u8 = 4;

/// `PYCAGE_JOURNAL_KEY`, read once at start ([`take_env_key`]).
static KEY: std::sync::OnceLock<Option<Result<JournalKey, pycage_runtime::journal::KeyError>>> =
    std::sync::OnceLock::new();

/// Reads `PYCAGE_JOURNAL_KEY` and drops it from this process's
/// environment, so that no command binding (which inherits pycage's
/// environment) or other child sees it. Called first thing in `main`,
/// before any thread exists (changing the environment is not safe once
/// another thread may read it).
pub(crate) fn take_env_key() {
    let key = JournalKey::from_env();
    if key.is_some() {
        std::env::remove_var(KEY_ENV);
    }
    let _ = KEY.set(key);
}

/// The key `PYCAGE_JOURNAL_KEY` held, which `flag` needs.
pub(crate) fn journal_key(flag: &str) -> anyhow::Result<JournalKey> {
    let key = KEY.get().cloned().flatten();
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
