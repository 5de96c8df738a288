//! pycage's type check before a run: Astral's `ty` checks the program as
//! pycage runs it, against the run's globals and its environment, and the
//! errors come back in the program's own lines, ready for a model to fix.
//!
//! A [`Checker`] belongs to one runtime. It starts nothing until its first
//! check; then it keeps one `ty server` (the language server) warm in a
//! workspace of its own (a private temporary directory): `ty.toml` names
//! the run's interpreter or venv, its Python version and the packages every
//! run gets, `stubs/` holds the generated globals modules, `docs/` the
//! documents checked. A check sends the text, asks for its diagnostics
//! (and, when the program uses top-level `await` or `return`, for its
//! functions and classes, to tell pycage's script forms from real
//! mistakes), and maps them back ([`Report`]). A session is one document
//! that grows by each cell that ran ([`History`]). A run with packages of
//! its own (PEP 723) is checked by a server started for it, whose
//! `extra-paths` include them.
//!
//! Bounds: the server's address space ([`CheckerConfig::memory_bytes`]);
//! the caller's deadline around every check (past it the server is killed
//! and the check is [`CheckError::Timeout`]); a server that dies is
//! replaced once within the same check. ty reads only the workspace, the
//! environment named in `ty.toml` and its own bundled typeshed: it runs no
//! Python, the program's relative imports resolve nowhere, documents are not
//! on a search path (so one session cannot import another's cells), and it
//! gets a clear environment (no user configuration).
//!
//! Why its own crate: the runtime needs only "check this program"; the
//! process, the protocol and the text mapping stay here. Crates:
//! typecheck ← runtime.
//!
//! # Layers
//!
//! Each module uses only those listed before it:
//!
//! 1. Leaves: [`lsp`] (framing), [`locate`] (finding ty), [`stubs`] (the
//!    globals module), [`document`] (the checked text, a session's
//!    history);
//! 2. [`report`] (ty's diagnostics in the program's terms);
//! 3. `server` (one `ty server` process).

pub mod document;
pub mod locate;
pub mod lsp;
pub mod report;
mod server;
pub mod stubs;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::json;

pub use document::{Cell, History};
pub use locate::{LocateError, INSTALL_HINT, TESTED_TY_VERSION};
pub use report::{Diagnostic, Report, Severity};
pub use server::ServerError;
pub use stubs::NamespaceDecl;

use document::HistoryState;
use report::{Allowed, Raw};
use server::{file_uri, Server};

/// Default of [`CheckerConfig::memory_bytes`].
pub const DEFAULT_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What a checker checks against.
#[derive(Debug, Clone)]
pub struct CheckerConfig {
    /// The ty binary ([`locate::find`]).
    pub ty: PathBuf,
    /// The run's interpreter (a venv's `bin/python` means that venv).
    pub python: PathBuf,
    /// Its `(major, minor)`.
    pub python_version: (u64, u64),
    /// Directories of packages every run gets (the caller's own).
    pub extra_paths: Vec<PathBuf>,
    /// `RLIMIT_AS` of the server.
    pub memory_bytes: u64,
    /// Where the workspace is made (default: the system temp dir).
    pub work_dir_parent: Option<PathBuf>,
}

/// What to check.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    pub program: &'a str,
    pub namespaces: &'a [NamespaceDecl],
    /// The run's own packages (a PEP 723 block), beyond every run's.
    pub own_packages: Option<&'a Path>,
    /// A session's cells so far.
    pub history: Option<&'a History>,
}

/// A finished check: what it found, and the program as the session's
/// history keeps it should it run.
#[derive(Debug, Clone)]
pub struct Checked {
    pub report: Report,
    pub cell: Cell,
}

/// Why a check has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The deadline passed (the server was killed; the next check starts
    /// another).
    #[error("the type check did not finish in time")]
    Timeout,
    /// The checker could not work (it could not start, or died twice).
    #[error("{0}")]
    Checker(String),
}

/// One runtime's checker. Cheap to clone: clones share the server.
#[derive(Clone)]
pub struct Checker {
    inner: Arc<Inner>,
}

struct Inner {
    config: CheckerConfig,
    workspace: Mutex<Option<Arc<Workspace>>>,
    server: tokio::sync::Mutex<Option<Arc<Server>>>,
    generation: AtomicU64,
    /// Sessions' documents open on a server: closed once their history is
    /// dropped.
    sessions: Mutex<Vec<OpenSession>>,
}

struct OpenSession {
    history: Weak<Mutex<HistoryState>>,
    uri: String,
    generation: u64,
}

/// A workspace directory and the stub modules written into it.
struct Workspace {
    /// Removed when the workspace is dropped.
    _dir: tempfile::TempDir,
    /// Its path, canonical (as the server names files).
    root: PathBuf,
    /// Stub modules on disk, and those each server was told of.
    written: Mutex<(HashSet<String>, u64, HashSet<String>)>,
}

static DOCUMENTS: AtomicU64 = AtomicU64::new(1);

impl Checker {
    /// A checker; nothing starts until the first check.
    pub fn new(config: CheckerConfig) -> Checker {
        Checker {
            inner: Arc::new(Inner {
                config,
                workspace: Mutex::new(None),
                server: tokio::sync::Mutex::new(None),
                generation: AtomicU64::new(0),
                sessions: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CheckerConfig {
        &self.inner.config
    }

    /// The pid of the warm server, while one runs.
    pub fn server_pid(&self) -> Option<u32> {
        let guard = self.inner.server.try_lock().ok()?;
        guard.as_ref().filter(|s| !s.is_gone()).and_then(|s| s.pid())
    }

    /// Checks `request` before `deadline`.
    pub async fn check(
        &self,
        request: CheckRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Checked, CheckError> {
        let module = stubs::module(request.namespaces);
        if let Some(own) = request.own_packages {
            return self.check_alone(request, &module, own, deadline).await;
        }
        let used: Mutex<Option<Arc<Server>>> = Mutex::new(None);
        let work = async {
            let mut last = String::new();
            for _ in 0..2 {
                let server = self.server().await?;
                *lock(&used) = Some(Arc::clone(&server));
                let ws = self.workspace()?;
                match check_on(&server, &ws, &request, &module, &self.inner.sessions).await {
                    Ok(checked) => return Ok(checked),
                    Err(e @ ServerError::Gone(_)) => {
                        tracing::warn!("{e}; starting it again");
                        last = e.to_string();
                        self.forget_server(&server).await;
                    }
                    Err(e) => return Err(CheckError::Checker(e.to_string())),
                }
            }
            Err(CheckError::Checker(last))
        };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(result) => result,
            Err(_) => {
                // The server may be stuck on this program: nothing but a
                // kill stops it. Other checks on it start a new one.
                if let Some(server) = lock(&used).take() {
                    server.kill();
                }
                Err(CheckError::Timeout)
            }
        }
    }

    /// A run with packages of its own: a server of its own whose
    /// `extra-paths` include them, stopped after the check.
    async fn check_alone(
        &self,
        request: CheckRequest<'_>,
        module: &stubs::Module,
        own: &Path,
        deadline: tokio::time::Instant,
    ) -> Result<Checked, CheckError> {
        let mut extra = self.inner.config.extra_paths.clone();
        extra.insert(0, own.to_path_buf());
        let ws = Arc::new(make_workspace(&self.inner.config, &extra).map_err(CheckError::Checker)?);
        let config = &self.inner.config;
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let work = async {
            let server = Server::start(&config.ty, ws.root.as_path(), config.memory_bytes, generation)
                .await
                .map_err(|e| CheckError::Checker(e.to_string()))?;
            let sessions = Mutex::new(Vec::new());
            let checked = check_on(&server, &ws, &request, module, &sessions).await;
            // A session's document on this server goes with it.
            if let Some(h) = request.history {
                h.lock().open = None;
            }
            server.shutdown().await;
            checked.map_err(|e| CheckError::Checker(e.to_string()))
        };
        tokio::time::timeout_at(deadline, work).await.unwrap_or(Err(CheckError::Timeout))
    }

    /// Stops the server, if one runs.
    pub async fn close(&self) {
        if let Some(server) = self.inner.server.lock().await.take() {
            server.shutdown().await;
        }
    }

    async fn server(&self) -> Result<Arc<Server>, CheckError> {
        let mut slot = self.inner.server.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_gone()) {
            return Ok(Arc::clone(s));
        }
        let ws = self.workspace()?;
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let config = &self.inner.config;
        let server = Server::start(&config.ty, ws.root.as_path(), config.memory_bytes, generation)
            .await
            .map_err(|e| CheckError::Checker(e.to_string()))?;
        let server = Arc::new(server);
        *slot = Some(Arc::clone(&server));
        Ok(server)
    }

    async fn forget_server(&self, server: &Arc<Server>) {
        server.kill();
        let mut slot = self.inner.server.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, server)) {
            *slot = None;
        }
    }

    fn workspace(&self) -> Result<Arc<Workspace>, CheckError> {
        let mut slot = lock(&self.inner.workspace);
        if let Some(ws) = slot.as_ref() {
            return Ok(Arc::clone(ws));
        }
        let ws =
            Arc::new(make_workspace(&self.inner.config, &self.inner.config.extra_paths).map_err(CheckError::Checker)?);
        *slot = Some(Arc::clone(&ws));
        Ok(ws)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.server.try_lock() {
            if let Some(s) = slot.take() {
                s.kill();
            }
        }
    }
}

/// Writes what a check of `request` gives ty, as files under `dir` (its
/// `ty.toml`, stub module and checked text), and returns the checked
/// text's path: `ty check` on it in `dir` is the cold command-line check
/// of the same program (for benchmarks, beside [`Checker::check`]).
pub fn write_cli_workspace(config: &CheckerConfig, request: &CheckRequest<'_>, dir: &Path) -> std::io::Result<PathBuf> {
    let module = stubs::module(request.namespaces);
    std::fs::create_dir_all(dir.join("stubs"))?;
    std::fs::create_dir_all(dir.join("docs"))?;
    std::fs::write(dir.join("ty.toml"), ty_toml(config, dir, &config.extra_paths))?;
    std::fs::write(dir.join("stubs").join(format!("{}.pyi", module.name)), &module.text)?;
    let mut text = document::import_line(&module.name, &module.names);
    text.push_str(&document::blank_script_block(request.program));
    let path = dir.join("docs").join("program.py");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A private directory with `ty.toml`, `stubs/` and `docs/`.
fn make_workspace(config: &CheckerConfig, extra_paths: &[PathBuf]) -> Result<Workspace, String> {
    let parent = config.work_dir_parent.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("pycage-ty-")
        .tempdir_in(&parent)
        .map_err(|e| format!("could not make the type checker's workspace in {}: {e}", parent.display()))?;
    let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|_| dir.path().to_path_buf());
    let root = root.as_path();
    let made = std::fs::create_dir(root.join("stubs"))
        .and_then(|()| std::fs::create_dir(root.join("docs")))
        .and_then(|()| std::fs::write(root.join("ty.toml"), ty_toml(config, root, extra_paths)));
    made.map_err(|e| format!("could not write the type checker's workspace {}: {e}", root.display()))?;
    Ok(Workspace { root: root.to_path_buf(), _dir: dir, written: Mutex::new((HashSet::new(), 0, HashSet::new())) })
}

/// The workspace's configuration: the environment, first-party code only
/// from `stubs/`, and pycage's changes to ty's rules (see [`report`]).
fn ty_toml(config: &CheckerConfig, root: &Path, extra_paths: &[PathBuf]) -> String {
    let mut out = String::from("[environment]\n");
    let _ = writeln!(out, "python = {}", toml_str(&config.python.to_string_lossy()));
    let (major, minor) = config.python_version;
    let _ = writeln!(out, "python-version = \"{major}.{minor}\"");
    out.push_str("python-platform = \"linux\"\n");
    let _ = writeln!(out, "root = [{}]", toml_str(&root.join("stubs").to_string_lossy()));
    let extra: Vec<String> = extra_paths.iter().map(|p| toml_str(&p.to_string_lossy())).collect();
    let _ = writeln!(out, "extra-paths = [{}]", extra.join(", "));
    out.push_str("\n[src]\nrespect-ignore-files = false\n");
    out.push_str("\n[rules]\nimport-not-found = \"warn\"\nunused-awaitable = \"error\"\n");
    out
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes `module` into the workspace (once) and tells `server` of it.
fn publish(server: &Server, ws: &Workspace, module: &stubs::Module) -> Result<(), ServerError> {
    let path = ws.root.as_path().join("stubs").join(format!("{}.pyi", module.name));
    let mut w = lock(&ws.written);
    if !w.0.contains(&module.name) {
        std::fs::write(&path, &module.text)
            .map_err(|e| ServerError::Gone(format!("could not write its stubs: {e}")))?;
        w.0.insert(module.name.clone());
    }
    if w.1 != server.generation {
        w.1 = server.generation;
        w.2.clear();
    }
    if w.2.insert(module.name.clone()) {
        server.notify("workspace/didChangeWatchedFiles", json!({"changes": [{"uri": file_uri(&path), "type": 1}]}));
    }
    Ok(())
}

/// One check on `server`.
async fn check_on(
    server: &Server,
    ws: &Workspace,
    request: &CheckRequest<'_>,
    module: &stubs::Module,
    sessions: &Mutex<Vec<OpenSession>>,
) -> Result<Checked, ServerError> {
    publish(server, ws, module)?;
    close_dropped_sessions(server, sessions);
    let head = document::import_line(&module.name, &module.names);
    if let Some(history) = request.history {
        analyse_history(server, ws, history, &head).await?;
    }
    let program = document::blank_script_block(request.program);
    let (history_text, forgot) = match request.history {
        Some(h) => {
            let s = h.lock();
            (s.text(), s.forgot)
        }
        None => (String::new(), false),
    };
    let first_line = 1 + document::line_breaks(&history_text);
    let mut text = String::with_capacity(head.len() + history_text.len() + program.len());
    text.push_str(&head);
    text.push_str(&history_text);
    text.push_str(&program);
    let uri = match request.history {
        Some(h) => open_session(server, ws, h, text, sessions),
        None => {
            let uri = doc_uri(ws, "run");
            open(server, &uri, 1, text);
            uri
        }
    };
    let answer = server.request("textDocument/diagnostic", json!({"textDocument": {"uri": uri}})).await;
    let ws_uri = file_uri(ws.root.as_path());
    let raws = answer.map(|a| report::parse_diagnostics(&a, &ws_uri));
    let raws = match raws {
        Ok(r) => r,
        Err(e) => {
            if request.history.is_none() {
                close(server, &uri);
            }
            return Err(e);
        }
    };
    let mine: Vec<&Raw> = raws.iter().filter(|r| r.start.0 >= first_line).collect();
    let scopes = if mine.iter().any(|r| report::allowed(r) != Allowed::No) {
        let answer = server.request("textDocument/documentSymbol", json!({"textDocument": {"uri": uri}})).await?;
        report::parse_scopes(&answer)
    } else {
        report::Scopes::default()
    };
    if request.history.is_none() {
        close(server, &uri);
    }
    let mut report = Report::default();
    let mut returns = Vec::new();
    let module_uri = file_uri(&ws.root.join("stubs").join(format!("{}.pyi", module.name)));
    for raw in mine {
        let line = raw.start.0 - first_line;
        let source = report::program_line(&program, line);
        let column = report::to_chars(source, raw.start.1, server.utf16);
        match report::allowed(raw) {
            Allowed::No => {}
            Allowed::Await if !report::inside(raw.start, &scopes.functions) => continue,
            Allowed::Return if !report::inside(raw.start, &scopes.classes) => {
                let end =
                    if raw.end.0 == raw.start.0 { report::to_chars(source, raw.end.1, server.utf16) } else { u32::MAX };
                returns.push((line, column, end.saturating_sub(column) <= 6));
                continue;
            }
            Allowed::Future => continue,
            Allowed::Await | Allowed::Return => {}
        }
        let severity = match raw.severity {
            1 if forgot && raw.code == "unresolved-reference" => Severity::Warning,
            1 if raw.inline_library => Severity::Warning,
            1 => Severity::Error,
            2 => Severity::Warning,
            _ => continue,
        };
        let width = if raw.end.0 == raw.start.0 {
            report::to_chars(source, raw.end.1, server.utf16).saturating_sub(column)
        } else {
            u32::try_from(source.chars().count()).unwrap_or(u32::MAX).saturating_sub(column)
        };
        let d = Diagnostic {
            severity,
            rule: raw.code.clone(),
            message: report::compose(raw, &uri, &program, first_line, (&module_uri, &module.text), server.utf16),
            line: line.saturating_add(1),
            column: column.saturating_add(1),
            width: width.max(1),
            source: source.to_owned(),
        };
        match severity {
            Severity::Error => report.errors.push(d),
            Severity::Warning => report.warnings.push(d),
        }
    }
    report.errors.sort_by_key(|d| (d.line, d.column));
    report.warnings.sort_by_key(|d| (d.line, d.column));
    let cell = Cell { text: document::rewrite_returns(&program, &returns), analysed: true };
    Ok(Checked { report, cell })
}

/// Cells of `history` that ran unchecked: each is checked alone once, to
/// learn its top-level `return`s; one that does not parse (it failed to
/// compile, so it defined nothing) leaves the history.
async fn analyse_history(server: &Server, ws: &Workspace, history: &History, head: &str) -> Result<(), ServerError> {
    let pending: Vec<(usize, String)> = {
        let s = history.lock();
        s.cells.iter().enumerate().filter(|(_, c)| !c.analysed).map(|(i, c)| (i, c.text.clone())).collect()
    };
    let mut done = Vec::new();
    for (i, text) in pending {
        let uri = doc_uri(ws, "cell");
        open(server, &uri, 1, format!("{head}{text}"));
        let answer = server.request("textDocument/diagnostic", json!({"textDocument": {"uri": uri}})).await;
        let raws = match answer {
            Ok(a) => report::parse_diagnostics(&a, &file_uri(ws.root.as_path())),
            Err(e) => {
                close(server, &uri);
                return Err(e);
            }
        };
        let broken = raws.iter().any(|r| r.code == "invalid-syntax" && report::allowed(r) == Allowed::No);
        let mut returns = Vec::new();
        if !broken && raws.iter().any(|r| report::allowed(r) == Allowed::Return) {
            let answer = server.request("textDocument/documentSymbol", json!({"textDocument": {"uri": uri}})).await;
            let scopes = answer.map(|a| report::parse_scopes(&a)).unwrap_or_default();
            for r in raws.iter().filter(|r| report::allowed(r) == Allowed::Return && r.start.0 >= 1) {
                if report::inside(r.start, &scopes.classes) {
                    continue;
                }
                let line = r.start.0 - 1;
                let source = report::program_line(&text, line);
                let column = report::to_chars(source, r.start.1, server.utf16);
                let end = if r.end.0 == r.start.0 { report::to_chars(source, r.end.1, server.utf16) } else { u32::MAX };
                returns.push((line, column, end.saturating_sub(column) <= 6));
            }
        }
        close(server, &uri);
        done.push((i, (!broken).then(|| document::rewrite_returns(&text, &returns))));
    }
    if done.is_empty() {
        return Ok(());
    }
    let mut s = history.lock();
    for (i, rewritten) in done.into_iter().rev() {
        match rewritten {
            Some(text) => {
                let new_len = text.len();
                if let Some(c) = s.cells.get_mut(i) {
                    let old_len = std::mem::replace(&mut c.text, text).len();
                    c.analysed = true;
                    s.bytes = s.bytes - old_len + new_len;
                }
            }
            None if i < s.cells.len() => {
                let gone = s.cells.remove(i);
                s.bytes -= gone.text.len();
            }
            None => {}
        }
    }
    Ok(())
}

/// Opens (or updates) a session's document with `text`.
fn open_session(
    server: &Server,
    ws: &Workspace,
    history: &History,
    text: String,
    sessions: &Mutex<Vec<OpenSession>>,
) -> String {
    let mut s = history.lock();
    let uri = doc_uri_for(ws, &format!("session-{}", s.id));
    match s.open {
        Some((generation, version)) if generation == server.generation => {
            let version = version.saturating_add(1);
            server.notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
            );
            s.open = Some((generation, version));
        }
        _ => {
            open(server, &uri, 1, text);
            s.open = Some((server.generation, 1));
            lock(sessions).push(OpenSession {
                history: Arc::downgrade(&history.inner),
                uri: uri.clone(),
                generation: server.generation,
            });
        }
    }
    uri
}

/// Closes the documents of sessions that are gone.
fn close_dropped_sessions(server: &Server, sessions: &Mutex<Vec<OpenSession>>) {
    lock(sessions).retain(|s| {
        if s.generation != server.generation {
            return false;
        }
        if s.history.strong_count() == 0 {
            close(server, &s.uri);
            return false;
        }
        true
    });
}

fn open(server: &Server, uri: &str, version: i32, text: String) {
    server.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}}),
    );
}

fn close(server: &Server, uri: &str) {
    server.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}));
}

fn doc_uri(ws: &Workspace, kind: &str) -> String {
    doc_uri_for(ws, &format!("{kind}-{}", DOCUMENTS.fetch_add(1, Ordering::Relaxed)))
}

fn doc_uri_for(ws: &Workspace, name: &str) -> String {
    file_uri(&ws.root.as_path().join("docs").join(format!("{name}.py")))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
