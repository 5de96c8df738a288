//! `pycage repl`, driven through a pipe: JSON lines, and cells on stdin.
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use support::*;

/// A `pycage repl --json` child and its line reader.
struct Driver {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    _dir: tempfile::TempDir,
}

impl Driver {
    fn start(extra: &[&str]) -> Driver {
        let dir = tempfile::tempdir().unwrap();
        let mut child = pycage(dir.path())
            .args(["repl", "--json", "--isolation", "process"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Driver { child, stdin, stdout, _dir: dir }
    }

    /// Sends one raw line and reads one answer line.
    fn line(&mut self, request: &str) -> String {
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer.trim_end().to_owned()
    }

    fn program(&mut self, program: &str) -> String {
        let mut quoted = Vec::new();
        pycage_protocol::write_json_string(&mut quoted, program);
        self.line(&format!("{{\"program\":{}}}", String::from_utf8(quoted).unwrap()))
    }

    fn finish(self) -> std::process::Output {
        drop(self.stdin);
        self.child.wait_with_output().unwrap()
    }
}

#[test]
fn json_lines_drive_one_session() {
    let mut d = Driver::start(&[]);
    assert_eq!(d.program("x = 1\nimport math"), r#"{"logs":[]}"#);
    assert_eq!(d.program("x += 41\nprint('kept', x)\nx"), r#"{"value":42,"logs":["kept 42"]}"#);
    assert_eq!(d.program("math.floor(2.5) + x"), r#"{"value":44,"logs":[]}"#);
    // A bad request line is misuse, and the session goes on.
    let misuse = d.line("return 1");
    assert!(misuse.starts_with(r#"{"logs":[],"error":{"kind":"misuse","message":"a request must be"#), "{misuse}");
    assert!(d.line(r#"{"code":"x"}"#).contains(r#"has no \"program\""#));
    // An exception is an outcome; the state survives it.
    assert!(d.program("1/0").contains(r#""kind":"exception""#));
    assert_eq!(d.program("x"), r#"{"value":42,"logs":[]}"#);
    // A crash ends the session; the next cell starts a new one and says why.
    assert!(d.program("import os\nos._exit(3)").contains(r#""kind":"worker-exit""#));
    let after = d.program("'x' in globals()");
    assert!(after.starts_with(r#"{"value":false,"logs":[],"restarted":"its last run ended as worker-exit"#), "{after}");
    assert_eq!(d.program("x = 7\nx"), r#"{"value":7,"logs":[]}"#);
    let out = d.finish();
    assert_exit(&out, 0);
}

#[test]
fn json_repl_has_the_bindings_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("b.toml"),
        "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\necho = { command = [\"cat\"] }\n",
    )
    .unwrap();
    let file = dir.path().join("b.toml");
    let mut d = Driver::start(&["--bindings", file.to_str().unwrap()]);
    assert_eq!(d.program("r = await tools.echo(q=1)"), r#"{"logs":[]}"#);
    assert_eq!(d.program("r"), r#"{"value":{"q":1},"logs":[]}"#);
    assert_exit(&d.finish(), 0);
}

/// `pycage repl` (process isolation) with `input` piped to its stdin, to the end.
fn cells_on_stdin(input: &[u8]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["repl", "--isolation", "process"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn cells_on_stdin_run_in_one_session() {
    let out = cells_on_stdin(b"x = 1\ndef f(a):\n    return a * 2\n\nf(x) + 1\nprint('log')\n1/0\nx\n");
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "3\nlog\n1\n");
    assert!(stderr(&out).contains("error: exception: Traceback"), "{}", stderr(&out));
}

/// Cells' logs, values and errors are for a person: escape sequences are
/// shown, never sent to the terminal (an OSC 52 clipboard write, a screen
/// clear, a bidi override).
#[test]
fn cell_output_is_escaped_for_the_terminal() {
    let out =
        cells_on_stdin(b"print('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J')\n'\\u202e'\nraise ValueError('\\x1b[31mred')\n");
    assert_exit(&out, 0);
    for stream in [&out.stdout, &out.stderr] {
        assert!(!stream.contains(&0x1b), "{}", String::from_utf8_lossy(stream));
        assert!(!String::from_utf8_lossy(stream).contains('\u{202e}'));
    }
    assert_eq!(stdout(&out), "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\n\"\\u202e\"\n");
    assert!(stderr(&out).contains("ValueError: \\x1b[31mred"), "{}", stderr(&out));
}
