//! `pycage run`: one program, one result.
//!
//! Misuse (unreadable program, bad bindings file, broken name rule, a
//! runtime that cannot be built, an `--output` directory that cannot be
//! created or written) is an `Err` and exits 2; every program outcome is
//! printed and exits 0 (success) or 1 (the run failed).
//!
//! `--output`: a run that succeeded but whose `out/` could not be delivered
//! whole (an entry failed to copy, or a limit left some out; symlinks and
//! special files are never copied and do not count) exits 3, and `--json`
//! says `"complete": false` in its `output`. Whatever was copied stays.
//! Nothing that exists in the output directory is overwritten or merged
//! into (`pycage_runtime::files`): such an entry is named as not copied,
//! which also makes the delivery incomplete.
//!
//! Readable output streams log lines as the program writes them, and one
//! line per display (`[display 1] image/png 640x480, 21.3 KiB: <Figure ...>`)
//! in their place among them, then the value as canonical JSON on stdout,
//! then `error: <kind>: <message>` on stderr, all escaped for the terminal
//! (`output::for_terminal`). `--json` prints `RunResult::to_json()` as one
//! line at the end, exact (displays in full, base64 images included).
//!
//! With `--output DIR`, after the run, each display is also written there
//! as `<run id>-display-<N>.<ext>` of its richest type (`crate::displays`:
//! the run id is the UTC second and random bits, so a rerun into DIR makes
//! new names and a program cannot take them in `out/` beforehand). At most
//! `MAX_OUTPUT_ENTRIES` display files are written, the cap of the `out/`
//! copy: tiny displays are cheap to emit, and each is a file. A display
//! not written (the cap, or a name that exists after all) makes the
//! delivery incomplete as an `out/` entry does: exit 3, and `--json`'s
//! `output` lists it under `skipped`; the files written are in its `files`.
//!
//! `--preload` is accepted (the run is the same with it), with a warning
//! that it only adds its modules' import time to a one-shot run: it pays
//! off where runs fork from a zygote that imported them once.
//!
//! `--journal-out FILE` (with `PYCAGE_JOURNAL_KEY`): a run that suspends at
//! a call that needs approval writes its journal to FILE (mode 0600,
//! replaced whole), says on stderr which call waits and how to resume, and
//! exits 4; `--json` carries the pending call under `suspended`
//! (`crate::resume` makes `pycage resume` from the same code).
//!
//! SIGINT and SIGTERM cancel the run (it settles as `abort`, keeping its
//! logs); the runtime is always shut down, so no child outlives the command.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use pycage_runtime::files::MAX_OUTPUT_ENTRIES;
use pycage_runtime::{CancellationToken, Resume, RunEvent, RunRequest, RunResult, Runtime};
use tokio::signal::unix::{signal, SignalKind};

use pycage_bindings::Bindings;

use crate::common::RunArgs;
use crate::{displays, journal, output};

/// Why `--preload` does not make a one-shot run faster: there is no
/// zygote to import the modules once for many runs, so the run's own
/// interpreter imports them before the program, whether it uses them or not.
const PRELOAD_ONE_SHOT: &str = "--preload does not make `pycage run` faster: its one run's interpreter imports \
     the modules before the program, whether the program uses them or not (0.25-0.55 s for numpy and pandas). \
     It helps pooled runs, which fork from a process that imported them once: pycage repl, pycage mcp, \
     and pycage.Runtime(preload=[...]) in Python";

/// Exit status of a run that settled with an error.
const EXIT_RUN_FAILED: u8 = 1;
/// Exit status of a run that succeeded while its `out/` could not be
/// delivered whole to `--output`.
const EXIT_OUTPUT_INCOMPLETE: u8 = 3;

pub fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    let program = read_program(&args)?;
    execute(args, program, None)
}

/// Runs `program`, or resumes the run `resume` names (`pycage resume`).
pub(crate) fn execute(args: RunArgs, program: String, resume: Option<Resume>) -> anyhow::Result<ExitCode> {
    // Checked before anything starts, so a bad file is misuse at once.
    let file = match &args.bindings {
        Some(path) => Some((pycage_bindings::file::read(path)?, path.display().to_string())),
        None => None,
    };
    let mut config = args.config()?;
    if !config.preload.is_empty() {
        output::warning(PRELOAD_ONE_SHOT);
    }
    if let Some(dir) = &args.output {
        check_output_dir(dir)?;
    }
    if let Some(out) = &args.journal_out {
        journal::check_journal_out(out)?;
        config.journal_key = Some(journal::journal_key("--journal-out")?);
    }
    let approval = file.as_ref().is_some_and(|(f, _)| journal::needs_approval(f));
    if approval && args.journal_out.is_none() {
        anyhow::bail!(
            "the bindings file marks calls as needing approval, so the run may suspend: give --journal-out FILE \
             (and PYCAGE_JOURNAL_KEY) to keep its journal"
        );
    }
    let rt = crate::common::tokio_runtime()?;
    rt.block_on(async move {
        // Listen for signals before anything slow, so an early Ctrl-C
        // cancels the run instead of killing pycage mid-construction.
        let cancel = CancellationToken::new();
        let watcher = watch_signals(cancel.clone())?;
        let runtime = Runtime::new(config)?;
        let bindings = match file {
            Some((file, label)) => match Bindings::from_file_with(file, &label, args.runtime.slot_limits()?).await {
                Ok(b) => b,
                Err(e) => {
                    runtime.shutdown().await;
                    return Err(e.into());
                }
            },
            None => Bindings::empty(),
        };
        let request = RunRequest {
            program,
            bindings: bindings.namespaces.clone(),
            cancel: Some(cancel),
            inputs: args.inputs.clone(),
            output_dir: args.output.clone(),
            transcript: args.transcript.clone(),
            resume,
            ..RunRequest::default()
        };
        let outcome = if args.json {
            runtime.run(request).await.map(|r| (r, Printed::default()))
        } else {
            run_streaming(&runtime, request).await
        };
        runtime.shutdown().await;
        bindings.close().await;
        watcher.abort();
        let (mut result, printed) = outcome?;
        // Delivered before the result is printed: `--json`'s `output` says
        // whether the display files were written too.
        let mut incomplete = false;
        if let Some(dir) = &args.output {
            let mut delivered = result.output.take().unwrap_or_default();
            report_output(&delivered, dir);
            write_displays(&result, dir, &displays::run_id(), &mut delivered);
            incomplete = delivered.incomplete();
            if incomplete {
                output::stderr_text(&format!(
                    "pycage: error: the output was not delivered whole to {} (what was copied stays there)",
                    dir.display()
                ));
            }
            result.output = Some(delivered);
        }
        report(&result, args.json, printed)?;
        for failure in runtime.cleanup_failures() {
            output::warning(&failure.to_string());
        }
        if let (Some(s), Some(out)) = (&result.suspension, &args.journal_out) {
            journal::write_journal(out, s, args.bindings.as_deref())?;
            return Ok(ExitCode::from(journal::EXIT_SUSPENDED));
        }
        Ok(if result.error.is_some() {
            ExitCode::from(EXIT_RUN_FAILED)
        } else if incomplete {
            ExitCode::from(EXIT_OUTPUT_INCOMPLETE)
        } else {
            ExitCode::SUCCESS
        })
    })
}

fn read_program(args: &RunArgs) -> anyhow::Result<String> {
    if let Some(code) = &args.code {
        return Ok(code.clone());
    }
    let Some(file) = &args.file else { anyhow::bail!("no program: pass FILE, -c CODE or - (stdin)") };
    if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().lock().read_to_string(&mut text).context("cannot read the program from stdin")?;
        return Ok(text);
    }
    std::fs::read_to_string(file).with_context(|| format!("cannot read program file {}", file.display()))
}

fn watch_signals(cancel: CancellationToken) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        cancel.cancel();
    }))
}

/// How much of a result readable output already printed as it streamed.
#[derive(Debug, Clone, Copy, Default)]
struct Printed {
    logs: usize,
    displays: usize,
}

/// Runs and prints log lines and display summaries as they arrive.
/// Returns the result and how much of it was already printed.
async fn run_streaming(
    runtime: &Runtime,
    request: RunRequest,
) -> Result<(RunResult, Printed), pycage_runtime::MisuseError> {
    let (tx, mut rx) = runtime.event_channel();
    // Printing blocks when stdout stalls (a full pipe, Ctrl-S): do it on a
    // blocking thread, so the run's own loop keeps serving its deadline and
    // cancellation meanwhile.
    let printer = tokio::task::spawn_blocking(move || {
        let mut printed = Printed::default();
        while let Some(event) = rx.blocking_recv() {
            match event {
                RunEvent::Log(line) => {
                    // A closed stdout must not stop the run: keep counting
                    // so the final report does not print these again.
                    let _ = output::stdout_text(&line);
                    printed.logs += 1;
                }
                RunEvent::Display(d) => {
                    printed.displays += 1;
                    let _ = output::stdout_text(&displays::summary(printed.displays, &d));
                }
                RunEvent::Call { .. } | RunEvent::CallFinished { .. } => {}
            }
        }
        printed
    });
    // The sender lives in the run; the printer ends when the run does.
    let result = runtime.run_with_events(request, tx).await;
    // A printer that panicked printed nothing we can count on.
    let printed = printer.await.unwrap_or_default();
    result.map(|r| (r, printed))
}

fn report(result: &RunResult, json: bool, printed: Printed) -> anyhow::Result<()> {
    if json {
        output::stdout_line(&result.to_json().to_canonical_string()).context("cannot write the result")?;
        return Ok(());
    }
    // What the event stream did not deliver (nothing, normally).
    let rest = result.logs.get(printed.logs..).unwrap_or_default();
    let summaries: Vec<String> =
        result.displays.iter().enumerate().skip(printed.displays).map(|(i, d)| displays::summary(i + 1, d)).collect();
    let value = result.value.as_ref().map(|v| v.to_canonical_string());
    output::stdout_texts(
        rest.iter().map(String::as_str).chain(summaries.iter().map(String::as_str)).chain(value.as_deref()),
    )
    .context("cannot write the result")?;
    for d in &result.diagnostics {
        output::stderr_text(&format!("type check: {d}"));
    }
    // A suspension is said with its journal (`journal::write_journal`).
    if let Some(e) = result.error.as_ref().filter(|_| result.suspension.is_none()) {
        output::stderr_text(&format!("error: {}: {}", e.kind, e.message));
    }
    Ok(())
}

/// Writes each display to `dir` as `<run_id>-display-<N>.<ext>`, one
/// stderr line each, up to the output's entry cap; one line says how many
/// were over it. Each file is added to `delivered`, and each display not
/// written too, which makes the delivery incomplete as an `out/` entry
/// does: the caller asked for the run's output in `dir`.
fn write_displays(result: &RunResult, dir: &Path, run_id: &str, delivered: &mut pycage_runtime::CopyReport) {
    use pycage_runtime::{CopiedFile, SkipKind, Skipped};
    let cap = usize::try_from(MAX_OUTPUT_ENTRIES).unwrap_or(usize::MAX);
    for (i, d) in result.displays.iter().enumerate().take(cap) {
        let stem = displays::file_stem(run_id, i + 1);
        match displays::write_file_sized(dir, &stem, d) {
            Ok((path, bytes)) => {
                output::stderr_text(&format!("pycage: display {} written to {}", i + 1, path.display()));
                let name = path.file_name().map(PathBuf::from).unwrap_or_default();
                delivered.files.push(CopiedFile { path: name, bytes });
                delivered.bytes += bytes;
            }
            Err(e) => {
                output::warning(&format!("display {} not written: {e}", i + 1));
                let ext = d.primary_mime().map(displays::extension).unwrap_or("bin");
                delivered.skipped.push(Skipped {
                    path: PathBuf::from(format!("{stem}.{ext}")),
                    reason: format!("display {} not written: {e}", i + 1),
                    kind: SkipKind::Failed,
                });
            }
        }
    }
    let over = result.displays.len().saturating_sub(cap);
    if over > 0 {
        let reason = format!(
            "{over} display file(s) not written to {} (displays {} to {}): over the limit of {cap} display files \
             per run (--json carries every display)",
            dir.display(),
            cap + 1,
            result.displays.len()
        );
        output::warning(&reason);
        delivered.truncated = true;
        delivered.skipped.push(Skipped {
            path: PathBuf::from(displays::file_stem(run_id, cap + 1)),
            reason,
            kind: SkipKind::Limit,
        });
    }
}

/// Creates the `--output` directory and checks that pycage may write into
/// it, before the program runs: a run whose output has nowhere to go is
/// not started.
fn check_output_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--output {}: cannot create it", dir.display()))?;
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK)
        .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
        .with_context(|| format!("--output {}: cannot write into it", dir.display()))
}

/// What `--output` got, on stderr: every entry not copied (by the path the
/// program wrote, and where it would have gone), then a summary.
fn report_output(report: &pycage_runtime::CopyReport, dir: &Path) {
    use pycage_runtime::SkipKind;
    for skipped in &report.skipped {
        let message = if skipped.path.as_os_str().is_empty() {
            format!("nothing of out/ copied to {}: {}", dir.display(), skipped.reason)
        } else if skipped.kind == SkipKind::Excluded {
            format!("out/{} not copied: {}", skipped.path.display(), skipped.reason)
        } else {
            let dest = dir.join(&skipped.path);
            format!("out/{} not copied to {}: {}", skipped.path.display(), dest.display(), skipped.reason)
        };
        output::warning(&message);
    }
    if report.truncated {
        output::warning("the output limit stopped the copy (--max-output-bytes)");
    }
    output::stderr_text(&format!(
        "pycage: copied {} file(s), {} bytes, from out/ to {}",
        report.files.len(),
        report.bytes,
        dir.display()
    ));
}
