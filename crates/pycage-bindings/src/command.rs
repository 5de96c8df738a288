//! Command bindings: one external process per call.
//!
//! The call's arguments go to the command's stdin as one canonical JSON
//! document; its stdout must be one JSON document (surrounding whitespace
//! allowed), which is the call's result. The command runs without a shell,
//! in the bindings file's directory, with pycage's environment, in its own
//! process group (so the terminal's Ctrl-C reaches pycage, which then ends
//! the run, rather than every tool at once).
//!
//! Everything read from the command is capped: stdout at
//! [`MAX_STDOUT_BYTES`] (over it rejects the call at once), stderr to its
//! last [`MAX_STDERR_BYTES`] (the rest is drained and discarded so the
//! command never blocks on a full pipe). A non-zero exit, a timeout, a
//! failed spawn or output that is not JSON rejects the call with a message
//! built from the function as the program called it (`tools.stock`), the
//! exit status and the last non-empty line of stderr (at most
//! [`MAX_STDERR_LINE_BYTES`]); the program sees it as a raised exception. Only that line: a traceback's frames name host paths and
//! source lines the program has no business reading, and its last line is
//! the exception (`ValueError: unknown warehouse 'atlantis'`), which is
//! what a model needs to correct its call.
//!
//! Commands run at most a few at a time ([`crate::slots`]: 16 for every run
//! of one [`crate::Bindings`], 8 for one run, handed out fairly): the
//! program decides how many calls it makes, and each one is a host process
//! outside the sandbox, so `asyncio.gather` over thousands of calls must
//! queue rather than fork-bomb the host, and must not starve another run's
//! calls. Queued time counts towards the run's wall clock, not the call's
//! timeout. A call still queued when its run settles never starts.
//!
//! When a call is abandoned (timeout, over-cap output, the run ending), the
//! command's whole process group is killed, so a script's own children (a
//! `sleep`, a pipeline) do not outlive an abandoned call. Children a
//! command leaves behind after it succeeded, or that call `setsid`, are not
//! tracked: commands are the host's own trusted tools.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use pycage_runtime::{BindingError, CallContext, JsonValue};

use crate::slots::CommandSlots;
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Per-call timeout when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest stdout a command may print (16 MiB); more rejects the call.
/// With [`crate::slots::DEFAULT_TOTAL`] slots this bounds buffered output at 256 MiB.
pub const MAX_STDOUT_BYTES: usize = 16 * 1024 * 1024;
/// Stderr kept to find its last line (the last 2 KiB); the rest is discarded.
pub const MAX_STDERR_BYTES: usize = 2 * 1024;
/// Longest stderr line a rejection message carries; a longer one is cut
/// (on a character boundary) and marked.
pub const MAX_STDERR_LINE_BYTES: usize = 512;

/// One function of a bindings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// `command[0]` as written, for messages.
    pub argv0: String,
    /// What is executed: `argv0` resolved against `cwd` if it is a relative path.
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub timeout: Duration,
}

/// Kills a command's process group when dropped, unless disarmed after
/// the leader was reaped. While the leader is unreaped its pid (= the pgid)
/// cannot be reused, so the kill cannot reach a stranger.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

/// Runs the command once for a call of run `cx.run`, in one of `slots`.
/// `label` is how the program called it (`tools.stock`): rejections name
/// it, not the host command (which the program did not call, and whose
/// path is the host's business), except when the command cannot start.
pub async fn call(
    spec: &CommandSpec,
    label: &str,
    args: JsonValue,
    cx: CallContext,
    slots: &CommandSlots,
) -> Result<JsonValue, BindingError> {
    let mut input = Vec::new();
    args.write_canonical(&mut input);
    drop(args);

    let _slot = tokio::select! {
        slot = slots.acquire(cx.run) => slot,
        // Nobody will read the reply: the command never starts.
        _ = cx.settled.cancelled() => return Err(BindingError::new("the run has ended")),
    };
    if cx.settled.is_cancelled() {
        return Err(BindingError::new("the run has ended"));
    }
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child =
        cmd.spawn().map_err(|e| BindingError::new(format!("{label}: could not start {}: {e}", spec.argv0)))?;
    let mut guard = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw));
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());

    let work = async {
        let write = async {
            if let Some(mut stdin) = stdin {
                // A command that exits without reading its input makes this
                // fail with EPIPE; its exit status is what counts.
                let _ = stdin.write_all(&input).await;
            }
            Ok::<(), Rejection>(())
        };
        let (_, out, err) = tokio::try_join!(write, read_stdout(stdout), read_stderr(stderr))?;
        let status = child.wait().await.map_err(|e| Rejection::Io(e.to_string()))?;
        Ok::<_, Rejection>((status, out, err))
    };
    let outcome = tokio::time::timeout(spec.timeout, work).await;
    let (status, out, err) = match outcome {
        Err(_) => return Err(BindingError::new(format!("{label} timed out after {} ms", spec.timeout.as_millis()))),
        Ok(Err(r)) => return Err(BindingError::new(r.message(label))),
        Ok(Ok(done)) => done,
    };
    // The leader is reaped: its pgid may be reused from here on.
    guard.0 = None;
    let stderr_note = err.note();
    if !status.success() {
        return Err(BindingError::new(format!("{label} failed ({status}){stderr_note}")));
    }
    JsonValue::parse(&out)
        .map_err(|e| BindingError::new(format!("{label} did not print one JSON document on stdout ({e}){stderr_note}")))
}

/// Why a call was abandoned before the command finished.
enum Rejection {
    StdoutOverCap,
    Io(String),
}

impl Rejection {
    fn message(&self, label: &str) -> String {
        match self {
            Rejection::StdoutOverCap => {
                format!("{label} printed more than {MAX_STDOUT_BYTES} bytes on stdout")
            }
            Rejection::Io(e) => format!("{label}: {e}"),
        }
    }
}

async fn read_stdout<R: AsyncRead + Unpin>(r: Option<R>) -> Result<Vec<u8>, Rejection> {
    let Some(r) = r else { return Ok(Vec::new()) };
    // Read one byte past the cap to tell "exactly at" from "over".
    let mut out = Vec::new();
    r.take(MAX_STDOUT_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .await
        .map_err(|e| Rejection::Io(format!("reading stdout: {e}")))?;
    if out.len() > MAX_STDOUT_BYTES {
        return Err(Rejection::StdoutOverCap);
    }
    Ok(out)
}

/// The tail of a command's stderr.
struct StderrTail {
    bytes: std::collections::VecDeque<u8>,
    /// Bytes before the tail were dropped.
    cut: bool,
}

impl StderrTail {
    /// `": <last line>"` for a message, or nothing when stderr had no
    /// non-empty line.
    fn note(&self) -> String {
        let bytes: Vec<u8> = self.bytes.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let Some(last) = lines.next_back() else { return String::new() };
        // The tail began inside this line: say that its start is missing.
        let whole = lines.next().is_some() || !self.cut;
        let mut line = if whole { last.to_owned() } else { format!("…{last}") };
        if line.len() > MAX_STDERR_LINE_BYTES {
            let mut end = MAX_STDERR_LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
            line.push_str(" [cut]");
        }
        format!(": {line}")
    }
}

async fn read_stderr<R: AsyncRead + Unpin>(r: Option<R>) -> Result<StderrTail, Rejection> {
    let mut tail = StderrTail { bytes: std::collections::VecDeque::with_capacity(MAX_STDERR_BYTES), cut: false };
    let Some(mut r) = r else { return Ok(tail) };
    let mut buf = [0u8; 4096];
    loop {
        // Read errors end the capture; stderr only decorates the message.
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(tail),
            Ok(n) => n,
        };
        tail.bytes.extend(buf.get(..n).unwrap_or_default());
        let over = tail.bytes.len().saturating_sub(MAX_STDERR_BYTES);
        if over > 0 {
            tail.bytes.drain(..over);
            tail.cut = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> CommandSpec {
        CommandSpec {
            argv0: "sh".into(),
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// How the program called the command in these tests.
    const LABEL: &str = "tools.t";

    fn slots() -> CommandSlots {
        CommandSlots::new(crate::slots::SlotLimits::default())
    }

    async fn run(script: &str, args: &str) -> Result<String, String> {
        call(&sh(script, 10_000), LABEL, JsonValue::parse(args.as_bytes()).unwrap(), CallContext::detached(), &slots())
            .await
            .map(|v| v.to_canonical_string())
            .map_err(|e| e.message)
    }

    #[tokio::test]
    async fn echoes_exactly() {
        let args = r#"{"a":[1,2.50,1267650600228229401496703205376],"s":"é\n"}"#;
        assert_eq!(run("cat", args).await.unwrap(), args);
        assert_eq!(run("printf '  [1, 2]\\n\\n'", "null").await.unwrap(), "[1,2]");
    }

    #[tokio::test]
    async fn rejections() {
        assert_eq!(run("echo oops >&2; exit 3", "{}").await.unwrap_err(), "tools.t failed (exit status: 3): oops");
        assert_eq!(run("exit 4", "{}").await.unwrap_err(), "tools.t failed (exit status: 4)");
        let e = run("echo not json; echo why >&2", "{}").await.unwrap_err();
        assert!(e.starts_with("tools.t did not print one JSON document on stdout (") && e.ends_with("): why"), "{e}");
        let e = run("kill -9 $$", "{}").await.unwrap_err();
        assert!(e.starts_with("tools.t failed (signal: 9"), "{e}");
    }

    #[tokio::test]
    async fn only_the_last_line_of_stderr_reaches_the_program() {
        // A Python tool's traceback: its frames name host paths.
        let tb = r#"printf 'Traceback (most recent call last):\n  File "/home/me/tools/stock.py", line 9, in <module>\n    raise ValueError(w)\nValueError: unknown warehouse atlantis\n\n' >&2; exit 1"#;
        let e = run(tb, "{}").await.unwrap_err();
        assert_eq!(e, "tools.t failed (exit status: 1): ValueError: unknown warehouse atlantis");
        // The last line survives any amount of stderr before it.
        let e = run("head -c 100000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'the end' >&2; exit 1", "{}")
            .await
            .unwrap_err();
        assert_eq!(e, "tools.t failed (exit status: 1): the end");
    }

    #[tokio::test]
    async fn a_long_last_line_is_cut() {
        let e = run("head -c 100000 /dev/zero | tr '\\0' x >&2; exit 1", "{}").await.unwrap_err();
        let want = format!("tools.t failed (exit status: 1): …{} [cut]", "x".repeat(MAX_STDERR_LINE_BYTES - "…".len()));
        assert_eq!(e, want);
        let e = run("printf 'é%.0s' $(seq 400) >&2; exit 1", "{}").await.unwrap_err();
        assert!(e.ends_with(" [cut]") && e.len() < MAX_STDERR_LINE_BYTES + 64, "{e}");
    }

    #[tokio::test]
    async fn timeout_kills_the_group() {
        let start = std::time::Instant::now();
        let spec = sh("sleep 30 & sleep 30; echo 1", 200);
        let e = call(&spec, LABEL, JsonValue::null(), CallContext::detached(), &slots()).await.unwrap_err().message;
        assert_eq!(e, "tools.t timed out after 200 ms");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn spawn_failure() {
        let mut spec = sh("", 1000);
        spec.program = "/nonexistent/pycage-tool".into();
        spec.argv0 = "pycage-tool".into();
        let e = call(&spec, LABEL, JsonValue::null(), CallContext::detached(), &slots()).await.unwrap_err().message;
        assert!(e.starts_with("tools.t: could not start pycage-tool: "), "{e}");
    }

    #[tokio::test]
    async fn a_call_queued_when_its_run_settles_never_starts() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("started");
        let slots = CommandSlots::new(crate::slots::SlotLimits { total: 1, per_run: 1 });
        let holder = CallContext::detached();
        // One call holds the only slot; the second queues behind it.
        let busy = sh("sleep 1; echo 1", 10_000);
        let s = slots.clone();
        let first = tokio::spawn(async move { call(&busy, LABEL, JsonValue::null(), holder, &s).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let queued = CallContext::detached();
        let settled = queued.settled.clone();
        let spec = sh(&format!("touch {}; echo 1", marker.display()), 10_000);
        let s = slots.clone();
        let second = tokio::spawn(async move { call(&spec, LABEL, JsonValue::null(), queued, &s).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        settled.cancel();
        let e = second.await.unwrap().unwrap_err().message;
        assert_eq!(e, "the run has ended");
        assert!(first.await.unwrap().is_ok());
        assert!(!marker.exists(), "the queued command never ran");
    }
}
