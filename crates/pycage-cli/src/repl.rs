//! `pycage repl`: a session on a terminal, or driven through a pipe.
//!
//! Both modes run every cell in one session (`Runtime::session`): names,
//! imports and files of one cell are there in the next.
//!
//! - On a terminal: `>>> ` reads a cell with line editing and history
//!   (kept in the user's cache directory). A cell goes on (`... `) while
//!   its last line ends with `:` or `\`, a bracket or a triple quote is
//!   open, or a block has started; an empty line ends a block. Log lines
//!   print as the cell writes them, then its value as canonical JSON, or
//!   `error: <kind>: <message>` on stderr. Ctrl-C at the prompt drops the
//!   cell being typed; during a cell it aborts the cell, and the repl says
//!   that the session ended with it (see below) and gives a new prompt; a
//!   Ctrl-C is never held over to a later cell. Ctrl-D, `exit()` or
//!   `quit()` (or the bare word) leaves.
//! - `--json`: one request per line on stdin, `{"program": "..."}`, answered
//!   by one line on stdout in `pycage run --json`'s shape
//!   (`{"value"?, "logs", "error"?}`). A line that is not such a request
//!   (not JSON, not an object, no string `program`, or a field other than
//!   `program`: budgets are the repl's flags) is answered with
//!   `{"logs":[],"error":{"kind":"misuse","message":...}}` naming what is
//!   wrong, and the session goes on. Any language can drive a session this way.
//!
//! Displays (`display()`, matplotlib figures): on a terminal each is
//! written as a file, `display-<N>.<ext>` numbered across the repl, into
//! `--displays DIR` or else a directory made under the system temp dir at
//! the first display (and kept), and one line names it:
//! `[display 1] image/png 640x480, 21.3 KiB -> /tmp/pycage-displays-x/display-1.png: <Figure ...>`.
//! In `--json` mode a result carries its `displays` in full, as `pycage
//! run --json` does, and nothing is written.
//!
//! A cell that ends without finishing (a budget ran out, it was aborted,
//! its process died) ends the session, as sessions do. The next cell then
//! starts a new, empty session: a terminal prints a notice on stderr, and
//! in `--json` mode that cell's result carries `"restarted"` with the reason
//! the previous session ended. (The Python package's `Session` raises
//! `SessionEndedError` instead: a driver at the other end of a pipe has no
//! request that opens a session, while a Python caller holds the session
//! and opens the next one itself; README and docs/python.md say so too.)

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use pycage_bindings::Bindings;
use pycage_protocol::{JsonBuilder, JsonValue};
use pycage_runtime::{
    CancellationToken, FailureKind, RunEvent, RunResult, Runtime, Session, SessionError, SessionOptions, SessionRun,
};
use tokio::sync::mpsc;

use crate::common::RuntimeArgs;
use crate::{displays, output};

#[derive(Debug, Args)]
pub struct ReplArgs {
    /// JSON lines: one {"program": "..."} per line on stdin, one result per line on stdout.
    #[arg(long)]
    json: bool,

    /// TOML file declaring binding namespaces (commands, HTTP endpoints, MCP servers).
    #[arg(long, value_name = "FILE.toml")]
    bindings: Option<PathBuf>,

    /// Where a terminal repl writes displays (created if missing; default: a
    /// new directory under the system temp dir, made at the first display).
    #[arg(long, value_name = "DIR")]
    displays: Option<PathBuf>,

    /// The session ends after this many seconds without a cell.
    #[arg(long, value_name = "N", default_value_t = SessionOptions::default().idle_timeout.as_secs())]
    idle_seconds: u64,

    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl ReplArgs {
    pub fn json(&self) -> bool {
        self.json
    }
}

/// What the line editor hands the cell loop.
enum Input {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D, end of input, or the editor failed.
    End,
}

/// The session, reopened after it ends.
struct Repl {
    runtime: Runtime,
    options: SessionOptions,
    session: Session,
}

impl Repl {
    /// Runs a cell; when the session had ended, starts a new one for it and
    /// says why the old one ended.
    async fn cell(
        &mut self,
        program: String,
        cancel: CancellationToken,
        events: Option<mpsc::Sender<RunEvent>>,
    ) -> anyhow::Result<(RunResult, Option<String>)> {
        let request = SessionRun::new(program.clone()).with_cancel(cancel.clone());
        match self.session.run_with(request, events.clone()).await {
            Ok(r) => Ok((r, None)),
            Err(SessionError::Ended(reason)) => {
                self.session = self.runtime.session(self.options.clone())?;
                let request = SessionRun::new(program).with_cancel(cancel);
                let r = self.session.run_with(request, events).await?;
                Ok((r, Some(reason)))
            }
            Err(SessionError::Misuse(e)) => Err(e.into()),
        }
    }

    /// Replaces the session with a new, empty one.
    async fn restart(&mut self) -> anyhow::Result<()> {
        let new = self.runtime.session(self.options.clone())?;
        std::mem::replace(&mut self.session, new).close().await;
        Ok(())
    }
}

/// Where a terminal repl's displays go (see the module docs).
struct DisplaySink {
    /// `--displays`, or the directory made at the first display.
    dir: Option<PathBuf>,
    /// Displays so far, across cells.
    count: usize,
}

impl DisplaySink {
    fn dir(&mut self) -> Result<PathBuf, String> {
        if let Some(dir) = &self.dir {
            return Ok(dir.clone());
        }
        let dir = tempfile::Builder::new()
            .prefix("pycage-displays-")
            .tempdir()
            .map_err(|e| format!("cannot make a directory for displays: {e}"))?
            .keep();
        self.dir = Some(dir.clone());
        Ok(dir)
    }

    /// Writes display `d` and prints its line.
    fn show(&mut self, d: &pycage_runtime::Display) {
        self.count += 1;
        let n = self.count;
        let written = self.dir().and_then(|dir| displays::write_file(&dir, &format!("display-{n}"), d));
        let line = match written {
            Ok(path) => displays::summary_with_file(n, d, Some(&path)),
            Err(e) => format!("{} (not written: {e})", displays::summary(n, d)),
        };
        let _ = output::stdout_text(&line);
    }
}

/// Forgets interrupts delivered before now: a Ctrl-C that reached pycage
/// between cells (at the prompt of a terminal the editor does not hold in
/// raw mode, or a `kill -INT`) must not abort the next cell. `interrupted`
/// is set by the signal handler itself, so clearing it forgets every
/// SIGINT already handled, even one whose wake-up tokio's driver has not
/// passed on yet (that wake-up then finds the flag clear and is ignored).
fn forget_interrupts(interrupts: &mut tokio::signal::unix::Signal, interrupted: &AtomicBool) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while let std::task::Poll::Ready(Some(())) = interrupts.poll_recv(&mut cx) {}
    interrupted.store(false, Ordering::SeqCst);
}

pub fn main(args: ReplArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.runtime.config()?;
    if let Some(dir) = &args.displays {
        std::fs::create_dir_all(dir).with_context(|| format!("--displays {}: cannot create it", dir.display()))?;
    }
    // One long-lived session, and a fresh one at once when it ends.
    config.spawn = pycage_runtime::SpawnMode::Zygote;
    config.pool_size = 1;
    let rt = crate::common::tokio_runtime()?;
    let json = args.json;
    let terminal = !json && std::io::stdin().is_terminal();
    rt.block_on(async move {
        let bindings = match &args.bindings {
            Some(p) => Bindings::load_with(p, args.runtime.slot_limits()?).await?,
            None => Bindings::empty(),
        };
        let runtime = Runtime::new(config)?;
        let options = SessionOptions {
            bindings: bindings.namespaces.clone(),
            idle_timeout: std::time::Duration::from_secs(args.idle_seconds.max(1)),
            ..SessionOptions::default()
        };
        let session = runtime.session(options.clone())?;
        let mut repl = Repl { runtime: runtime.clone(), options, session };
        let sink = DisplaySink { dir: args.displays.clone(), count: 0 };
        let outcome = if json { json_loop(&mut repl).await } else { terminal_loop(&mut repl, terminal, sink).await };
        repl.session.close().await;
        runtime.shutdown().await;
        bindings.close().await;
        outcome
    })
}

/// Lines of stdin, read on a blocking thread.
fn stdin_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    rx
}

async fn json_loop(repl: &mut Repl) -> anyhow::Result<ExitCode> {
    let mut lines = stdin_lines();
    while let Some(line) = lines.recv().await {
        let line = line.context("cannot read stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let program = match request_program(&line) {
            Ok(p) => p,
            Err(message) => {
                output::misuse_json(&message);
                continue;
            }
        };
        let (result, restarted) = repl.cell(program, CancellationToken::new(), None).await?;
        let text = with_restarted(result.to_json(), restarted.as_deref());
        output::stdout_line(&text).context("cannot write a result")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The fields a request may have. Budgets are the session's, set by the
/// repl's flags, not per request.
const REQUEST_FIELDS: &[&str] = &["program"];

/// The `program` of a `{"program": "..."}` request line. A field it does not
/// know is refused, not ignored: a driver that sends `"wall_ms"` must learn
/// that it has no effect.
fn request_program(line: &str) -> Result<String, String> {
    let v =
        JsonValue::parse(line.as_bytes()).map_err(|e| format!("a request must be one JSON object per line: {e}"))?;
    let root = v.root();
    let Some(fields) = root.as_object() else {
        return Err("a request must be a JSON object such as {\"program\": \"return 1\"}".into());
    };
    if let Some((unknown, _)) = fields.into_iter().find(|(k, _)| !REQUEST_FIELDS.contains(k)) {
        let known = REQUEST_FIELDS.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(", ");
        // A name of any length came in: the message quotes 60 characters of it.
        let mut shown: String = unknown.chars().take(60).collect();
        if shown.len() < unknown.len() {
            shown.push('\u{2026}');
        }
        let shown = JsonValue::string(&shown).map(|v| v.to_canonical_string()).unwrap_or(shown);
        return Err(format!(
            "unknown field {shown} in the request: a request has only {known}; a session's budgets are \
             pycage repl's flags (--wall-ms, --cpu-seconds, ...), not request fields"
        ));
    }
    match root.get("program").map(|p| p.as_str()) {
        Some(Some(p)) => Ok(p.to_owned()),
        Some(None) => Err("\"program\" must be a string".into()),
        None => Err("the request has no \"program\"".into()),
    }
}

/// `result` with `"restarted": reason` added when a new session was started.
fn with_restarted(result: JsonValue, restarted: Option<&str>) -> String {
    let Some(reason) = restarted else { return result.to_canonical_string() };
    let mut b = JsonBuilder::new();
    let built = (|| -> Result<(), pycage_protocol::BuildError> {
        b.begin_object()?;
        if let Some(fields) = result.root().as_object() {
            for (k, v) in fields {
                b.key(k)?;
                b.value(v)?;
            }
        }
        b.key("restarted")?;
        b.string(reason)?;
        b.end()
    })();
    match built.and_then(|()| b.finish()) {
        Ok(v) => v.to_canonical_string(),
        Err(_) => result.to_canonical_string(),
    }
}

/// Whether `cell` (its lines so far) needs more lines before it runs.
/// Whether a typed cell is `exit`, `quit`, `exit()` or `quit()`: leave, as
/// Python's own prompt does (3.13's, for the bare words too). Sent to the
/// session they would end nothing: `exit()` raises `SystemExit`, which ends
/// a cell, and `quit` alone is a value that cannot cross.
fn leaves(cell: &str) -> bool {
    matches!(cell.trim(), "exit" | "quit" | "exit()" | "quit()")
}

fn needs_more(cell: &str) -> bool {
    let last = cell.lines().last().unwrap_or("").trim_end();
    if cell.matches("\"\"\"").count() % 2 == 1 || cell.matches("'''").count() % 2 == 1 {
        return true;
    }
    let mut depth = 0i64;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for line in cell.lines() {
        for ch in line.chars() {
            if let Some(q) = quote {
                if escaped {
                    escaped = false;
                } else if ch == '\\' {
                    escaped = true;
                } else if ch == q {
                    quote = None;
                }
                continue;
            }
            match ch {
                '#' => break,
                '\'' | '"' => quote = Some(ch),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
        }
        quote = None; // single-quoted strings end at the line's end
    }
    if depth > 0 || last.ends_with('\\') {
        return true;
    }
    // A block (a first line ending with ':') goes on until an empty line.
    let first_opens_block = cell.lines().any(|l| l.trim_end().ends_with(':'));
    first_opens_block && !cell.ends_with("\n\n")
}

async fn terminal_loop(repl: &mut Repl, terminal: bool, mut sink: DisplaySink) -> anyhow::Result<ExitCode> {
    let history = pycage_runtime::default_cache_dir().map(|d| d.join("repl-history"));
    let (line_tx, mut line_rx) = mpsc::channel::<Input>(1);
    let (prompt_tx, prompt_rx) = std::sync::mpsc::channel::<&'static str>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    // The editor blocks in `readline`; it lives on its own thread and reads
    // one line per prompt it is given. While it reads, the terminal is in raw
    // mode and Ctrl-C is a key; while a cell runs, the terminal is as the
    // user left it and Ctrl-C is a SIGINT to pycage (children run in process
    // groups of their own, so it reaches only pycage).
    let editor_thread = std::thread::spawn(move || {
        let editor = rustyline::DefaultEditor::new();
        let _ = ready_tx.send(());
        let Ok(mut editor) = editor else {
            let _ = line_tx.blocking_send(Input::End);
            return;
        };
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        while let Ok(prompt) = prompt_rx.recv() {
            let input = match editor.readline(if terminal { prompt } else { "" }) {
                Ok(l) => {
                    if !l.trim().is_empty() {
                        let _ = editor.add_history_entry(l.as_str());
                    }
                    Input::Line(l)
                }
                Err(rustyline::error::ReadlineError::Interrupted) => Input::Interrupted,
                Err(_) => Input::End,
            };
            let end = matches!(input, Input::End);
            if line_tx.blocking_send(input).is_err() || end {
                break;
            }
        }
        if let Some(h) = &history {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(h);
        }
    });
    // On a terminal, rustyline puts a SIGINT handler of its own in place for
    // the editor's lifetime; a SIGINT then only marks its next `readline` as
    // interrupted (a stale Ctrl-C that ate the next prompt's line), and a
    // running cell never heard of it. So, once the editor exists, SIGINT
    // goes back to its default and then to tokio's handler alone (which
    // chains only to a handler, never to the default).
    let _ = ready_rx.await;
    // SAFETY: restoring the default disposition of SIGINT. The handler it
    // replaces (rustyline's) only writes to a pipe the editor reads; nothing
    // relies on it, and the editor reads Ctrl-C as a key in raw mode.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot listen for SIGINT")?;
    let interrupted = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&interrupted))
        .context("cannot listen for SIGINT")?;
    if terminal {
        output::stderr_line(
            "pycage repl: each cell runs in one session; Ctrl-C aborts a running cell; Ctrl-D or exit() leaves.",
        );
    }
    'cells: loop {
        let mut cell = String::new();
        let mut prompt = ">>> ";
        loop {
            if prompt_tx.send(prompt).is_err() {
                break 'cells;
            }
            match line_rx.recv().await {
                Some(Input::Line(line)) => {
                    if cell.is_empty() && line.trim().is_empty() {
                        continue;
                    }
                    cell.push_str(&line);
                    cell.push('\n');
                    if !needs_more(&cell) {
                        break;
                    }
                    prompt = "... ";
                }
                // As Python's prompt does: the cell being typed is dropped.
                Some(Input::Interrupted) => {
                    cell.clear();
                    prompt = ">>> ";
                }
                Some(Input::End) | None => break 'cells,
            }
        }
        if leaves(&cell) {
            break 'cells;
        }
        forget_interrupts(&mut interrupts, &interrupted);
        let cancel = CancellationToken::new();
        let (tx, mut rx) = repl.runtime.event_channel();
        let outcome = {
            let run = repl.cell(cell, cancel.clone(), Some(tx));
            tokio::pin!(run);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    Some(ev) = rx.recv() => match ev {
                        RunEvent::Log(line) => { let _ = output::stdout_text(&line); }
                        RunEvent::Display(d) => sink.show(&d),
                        RunEvent::Call { .. } | RunEvent::CallFinished { .. } => {}
                    },
                    Some(()) = interrupts.recv(), if !cancel.is_cancelled() => {
                        if interrupted.swap(false, Ordering::SeqCst) {
                            cancel.cancel();
                        }
                    }
                }
            }
        };
        // Lines that arrived with the end of the run.
        while let Ok(ev) = rx.try_recv() {
            match ev {
                RunEvent::Log(line) => {
                    let _ = output::stdout_text(&line);
                }
                RunEvent::Display(d) => sink.show(&d),
                RunEvent::Call { .. } | RunEvent::CallFinished { .. } => {}
            }
        }
        let (result, restarted) = outcome?;
        if let Some(reason) = restarted {
            output::stderr_text(&format!("(the session had ended: {reason}; this cell ran in a new, empty one)"));
        }
        if let Some(v) = &result.value {
            let _ = output::stdout_text(&v.to_canonical_string());
        }
        for d in &result.diagnostics {
            output::stderr_text(&format!("type check: {d}"));
        }
        if let Some(e) = &result.error {
            output::stderr_text(&format!("error: {}: {}", e.kind, e.message));
        }
        if cancel.is_cancelled() && result.error.as_ref().is_some_and(|e| e.kind == FailureKind::Abort) {
            // Python cannot be stopped safely midway, so an aborted cell takes
            // its session's process with it (docs/semantics.md, Sessions).
            output::stderr_line(
                "KeyboardInterrupt: the cell was aborted, and its session ended with it; \
                 the next cell starts in a new, empty session",
            );
            repl.restart().await?;
        }
    }
    drop(prompt_tx);
    let _ = tokio::task::spawn_blocking(move || editor_thread.join()).await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_and_quit_leave() {
        for cell in ["exit\n", "quit\n", "exit()\n", "  quit()  \n"] {
            assert!(leaves(cell), "{cell:?}");
        }
        for cell in ["exit(1)\n", "x = exit\n", "print('quit')\n", "exit()\nexit()\n"] {
            assert!(!leaves(cell), "{cell:?}");
        }
    }

    #[test]
    fn cells_continue_while_open() {
        assert!(!needs_more("x = 1\n"));
        assert!(needs_more("def f():\n"));
        assert!(needs_more("def f():\n    return 1\n"));
        assert!(!needs_more("def f():\n    return 1\n\n"));
        assert!(needs_more("x = [1,\n"));
        assert!(!needs_more("x = [1,\n 2]\n"));
        assert!(needs_more("s = \"\"\"a\n"));
        assert!(!needs_more("s = '('\n"));
        assert!(!needs_more("x = 1  # (\n"));
        assert!(needs_more("x = 1 + \\\n"));
    }

    #[test]
    fn requests_are_checked() {
        assert_eq!(request_program(r#"{"program":"return 1"}"#).unwrap(), "return 1");
        assert!(request_program("return 1").unwrap_err().contains("one JSON object"));
        assert!(request_program("[1]").unwrap_err().contains("JSON object"));
        assert!(request_program(r#"{"program":1}"#).unwrap_err().contains("must be a string"));
        assert!(request_program(r#"{}"#).unwrap_err().contains("no \"program\""));
        assert_eq!(
            request_program(r#"{"program":"return 1","wall_ms":100}"#).unwrap_err(),
            "unknown field \"wall_ms\" in the request: a request has only \"program\"; a session's budgets are \
             pycage repl's flags (--wall-ms, --cpu-seconds, ...), not request fields"
        );
        let long = format!(r#"{{"program":"1","{}":1}}"#, "k".repeat(1000));
        assert!(request_program(&long)
            .unwrap_err()
            .starts_with(&format!("unknown field \"{}\u{2026}\" in", "k".repeat(60))));
    }

    #[test]
    fn restarted_is_added_to_the_result() {
        let r = JsonValue::parse(br#"{"value":1,"logs":[]}"#).unwrap();
        assert_eq!(with_restarted(r.clone(), None), r#"{"value":1,"logs":[]}"#);
        assert_eq!(with_restarted(r, Some("idle")), r#"{"value":1,"logs":[],"restarted":"idle"}"#);
    }
}
