//! The only place the binary writes to the terminal.
//!
//! The workspace denies `print!`/`eprint!`: every write goes through a
//! locked handle here, so output is never interleaved mid-line and a closed
//! pipe is an `io::Error` the caller can decide about, not a panic.
//!
//! Text meant for a person passes through [`for_terminal`] first: a
//! program's logs, values and error messages are the program's, and a
//! terminal executes control sequences (OSC 52 writes the clipboard, CSI
//! clears the screen, bidi overrides reorder what the reader sees). Every
//! control character but tab, and every invisible formatting character
//! that can reorder or hide text, is shown escaped instead (`\x1b`,
//! `\u202e`). Output meant for programs (`--json`, `frames validate`) is
//! written exact.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, BufWriter, StdoutLock, Write};

/// Whether `c` must not reach a terminal as it is.
fn needs_escape(c: char) -> bool {
    match c {
        '\t' => false,
        // C0 controls (newline included: a line is written with its own),
        // DEL, C1 controls (0x9b is CSI on some terminals).
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Soft hyphen, Arabic letter mark, Mongolian vowel separator.
        '\u{ad}' | '\u{61c}' | '\u{180e}' => true,
        // Zero-width space/joiners, LRM/RLM, line/paragraph separators,
        // bidi embeddings and overrides (U+202A-U+202E).
        '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' => true,
        // Word joiner, invisible operators, bidi isolates (U+2066-U+2069),
        // deprecated format characters.
        '\u{2060}'..='\u{206f}' => true,
        // Byte order mark, interlinear annotation, tag characters.
        '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e007f}' => true,
        _ => false,
    }
}

/// `text` with every character a terminal would act on or hide shown as
/// an escape: `\xHH` below U+0100, `\uHHHH` in the BMP, `\UHHHHHHHH`
/// beyond. Borrowed when nothing needs escaping.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
            continue;
        }
        let code = u32::from(c);
        let _ = match code {
            0..=0xff => write!(out, "\\x{code:02x}"),
            0x100..=0xffff => write!(out, "\\u{code:04x}"),
            _ => write!(out, "\\U{code:08x}"),
        };
    }
    Cow::Owned(out)
}

/// Writes one line for a person to stdout (escaped, see [`for_terminal`]).
pub fn stdout_text(line: &str) -> io::Result<()> {
    stdout_line(&for_terminal(line))
}

/// Writes several lines for a person to stdout under one lock (escaped).
pub fn stdout_texts<'a>(lines: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
    let mut out = BufWriter::new(io::stdout().lock());
    for line in lines {
        out.write_all(for_terminal(line).as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Writes text for a person to stderr, each of its lines escaped.
pub fn stderr_text(text: &str) {
    let escaped: Vec<Cow<'_, str>> = text.split('\n').map(for_terminal).collect();
    stderr_line(&escaped.join("\n"));
}

/// Writes one line to stdout.
pub fn stdout_line(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes several lines to stdout under one lock, as they are (pycage's
/// own text, such as a benchmark report).
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
    stderr_text(&format!("pycage: error: {message}"));
}

/// A warning: `pycage: warning: <message>` on stderr.
pub fn warning(message: &str) {
    stderr_text(&format!("pycage: warning: {message}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_act_on() {
        assert!(matches!(for_terminal("plain text\twith tab, é, 漢字, emoji 🎉"), Cow::Borrowed(_)));
        assert_eq!(for_terminal("\x1b]52;c;cHduZWQ=\x07\x1b[2J"), "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J");
        assert_eq!(for_terminal("a\rb\u{7f}\u{9b}c"), "a\\x0db\\x7f\\x9bc");
        assert_eq!(for_terminal("abc\u{202e}fed\u{2066}x\u{2069}"), "abc\\u202efed\\u2066x\\u2069");
        assert_eq!(for_terminal("zero\u{200b}width\u{feff}"), "zero\\u200bwidth\\ufeff");
        assert_eq!(for_terminal("tag\u{e0041}"), "tag\\U000e0041");
        assert_eq!(for_terminal("\0\n"), "\\x00\\x0a");
    }
}
