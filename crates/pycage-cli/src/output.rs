//! The only place the binary writes to the terminal.
//!
//! The workspace denies `print!`/`eprint!`: every write goes through a
//! locked handle here, so output is never interleaved mid-line and a closed
//! pipe is an `io::Error` the caller can decide about, not a panic.

use std::io::{self, BufWriter, StdoutLock, Write};

/// Writes one line to stdout.
pub fn stdout_line(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes several lines to stdout under one lock.
pub fn stdout_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
    let mut out = BufWriter::new(io::stdout().lock());
    for line in lines {
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Writes one line to stderr. Errors are ignored: stderr is the channel of
/// last resort and there is nowhere left to report them.
pub fn stderr_line(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// A misuse message: `pycage: error: <message>` on stderr.
pub fn misuse(message: &str) {
    stderr_line(&format!("pycage: error: {message}"));
}

/// A misuse message for `--json` callers: one line on stdout in the shape
/// of a run result, `{"logs":[],"error":{"kind":"misuse","message":...}}`.
/// Write errors are ignored, as for [`misuse`].
pub fn misuse_json(message: &str) {
    let mut b = pycage_protocol::JsonBuilder::new();
    let built = (|| -> Result<(), pycage_protocol::BuildError> {
        b.begin_object()?;
        b.key("logs")?;
        b.begin_array()?;
        b.end()?;
        b.key("error")?;
        b.begin_object()?;
        b.key("kind")?;
        b.string("misuse")?;
        b.key("message")?;
        b.string(message)?;
        b.end()?;
        b.end()
    })();
    match built.and_then(|()| b.finish()) {
        Ok(v) => {
            let _ = stdout_line(&v.to_canonical_string());
        }
        // Unreachable (each step is valid); fall back to the plain form.
        Err(_) => misuse(message),
    }
}

/// A buffered writer over locked stdout, for line-per-record output
/// (`frames validate`). The caller flushes.
pub fn stdout_buffered() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(64 * 1024, io::stdout().lock())
}

/// Whether an I/O error is stdout's reader going away (`| head`), which
/// ends output quietly rather than as an error.
pub fn is_broken_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}
