//! `pycage repl --json` sessions keep the run-wide budgets: a cell whose
//! children hold more than the memory budget together is ended, and the
//! next cell runs in a new session that says why the old one ended.
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use support::*;

#[test]
fn a_cell_is_bounded_across_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["repl", "--json", "--isolation", "process", "--memory-mb", "256"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |program: &str| {
        let request = format!("{{\"program\": {}}}", serde_json_string(program));
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        stdout.read_line(&mut answer).unwrap();
        answer
    };
    let hold = "import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        b = bytearray(100 << 20)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n        time.sleep(60)\n        os._exit(0)\ntime.sleep(10)\n'held'";
    let answer = ask(hold);
    assert!(answer.contains(r#""kind":"worker-exit""#), "{answer}");
    assert!(answer.contains("memory budget"), "{answer}");
    let answer = ask("1 + 1");
    assert!(answer.contains(r#""value":2"#), "{answer}");
    assert!(answer.contains("restarted"), "{answer}");
    drop(stdin);
    child.wait().unwrap();
}

/// A JSON string literal (the test has no JSON dependency).
fn serde_json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
