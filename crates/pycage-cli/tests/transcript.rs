//! `pycage run --transcript FILE` captures what the child sent on fd 3, as
//! received, and `pycage frames validate` checks that file.

mod support;
use support::{assert_exit, pycage, run_in, stdout};

#[test]
fn a_run_leaves_a_transcript_that_validates() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["--transcript", "fd3.jsonl", "-c", "print('hi')\nreturn [1, 2.50]"]);
    assert_exit(&o, 0);
    let transcript = std::fs::read_to_string(dir.path().join("fd3.jsonl")).unwrap();
    let lines: Vec<&str> = transcript.lines().collect();
    assert_eq!(lines.first().copied(), Some(r#"{"type":"boot-ack"}"#), "{transcript}");
    assert!(lines.iter().any(|l| l.contains(r#""type":"log""#) && l.contains("hi")), "{transcript}");
    assert_eq!(lines.last().copied(), Some(r#"{"type":"done","value":[1,2.5]}"#), "{transcript}");
    let o = pycage(dir.path()).args(["frames", "validate", "fd3.jsonl"]).output().unwrap();
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), transcript);
}

#[test]
fn a_transcript_that_cannot_be_written_fails_the_run_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["--transcript", "missing/fd3.jsonl", "-c", "return 1"]);
    assert_exit(&o, 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("could not create the transcript file"), "{o:?}");
}
