//! What `pycage run --output DIR` leaves in DIR: the program's `out/` and its
//! display files only ever make new names there. Nothing that exists in DIR
//! is overwritten or merged into (a sandboxed program must not plant a git
//! hook in a repository or replace the caller's files); display files are
//! named after their run, so a rerun writes its own beside the earlier
//! run's; a display not written makes the delivery incomplete (exit 3) as
//! an `out/` entry does; and the display files are capped like the `out/`
//! copy.

mod support;

use std::path::Path;

use support::{assert_exit, pycage, stderr, stdout};

/// Whether `name` is display `n`'s file name with extension `ext`:
/// `<YYYYMMDD>T<HHMMSS>Z-<6 hex digits>-display-<n>.<ext>`.
fn is_display_file(name: &str, n: usize, ext: &str) -> bool {
    let Some(run_id) = name.strip_suffix(&format!("-display-{n}.{ext}")) else { return false };
    let b = run_id.as_bytes();
    b.len() == 23
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && &b[15..17] == b"Z-"
        && b[17..].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The names in `dir` that are display `n`'s files with extension `ext`, sorted.
fn display_files(dir: &Path, n: usize, ext: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| is_display_file(name, n, ext))
        .collect();
    names.sort();
    names
}

/// `pycage run --isolation <isolation> <args>` in `dir`.
fn run_in(dir: &Path, isolation: &str, args: &[&str]) -> std::process::Output {
    pycage(dir).args(["run", "--isolation", isolation]).args(args).output().unwrap()
}

/// Plants an executable git hook, overwrites `notes.txt`, and makes a new file.
const PLANT_HOOK: &str = "import os
os.makedirs('out/.git/hooks', exist_ok=True)
with open('out/.git/hooks/pre-commit', 'w') as f:
    f.write('#!/bin/sh\\necho pwned\\n')
os.chmod('out/.git/hooks/pre-commit', 0o755)
open('out/notes.txt', 'w').write('overwritten')
open('out/new.txt', 'w').write('new')
";

#[test]
fn a_program_cannot_plant_a_git_hook_or_overwrite_files_in_the_output_directory() {
    for isolation in ["process", "sandbox"] {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
        std::fs::write(repo.join("notes.txt"), "user data\n").unwrap();
        std::fs::write(dir.path().join("prog.py"), PLANT_HOOK).unwrap();

        let o = run_in(dir.path(), isolation, &["--output", "repo", "prog.py"]);
        // Not delivered whole: 3, as for any entry that could not be written.
        assert_exit(&o, 3);
        let err = stderr(&o);
        assert!(
            err.contains(
                "pycage: warning: out/.git not copied to repo/.git: a directory that exists in the output \
                 directory; not merged into (nothing below it copied)\n"
            ),
            "{isolation}: {err}"
        );
        assert!(
            err.contains(
                "pycage: warning: out/notes.txt not copied to repo/notes.txt: exists in the output directory; \
                 not overwritten\n"
            ),
            "{isolation}: {err}"
        );
        assert!(err.contains("pycage: copied 1 file(s), 3 bytes, from out/ to repo\n"), "{isolation}: {err}");
        assert!(
            err.ends_with("pycage: error: the output was not delivered whole to repo (what was copied stays there)\n"),
            "{isolation}: {err}"
        );
        assert_eq!(std::fs::read_dir(repo.join(".git/hooks")).unwrap().count(), 0, "{isolation}: a hook was planted");
        assert_eq!(std::fs::read_to_string(repo.join("notes.txt")).unwrap(), "user data\n", "{isolation}");
        assert_eq!(std::fs::read_to_string(repo.join("new.txt")).unwrap(), "new", "{isolation}");
    }
}

#[test]
fn a_rerun_into_the_same_output_directory_overwrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let program = |tag: &str| {
        format!(
            "import os\nos.mkdir('out/sub')\nopen('out/a.txt', 'w').write('{tag}')\n\
             open('out/sub/b.txt', 'w').write('{tag}')\nopen('out/{tag}.txt', 'w').write('{tag}')\n\
             display('{tag}')\nreturn 1"
        )
    };
    let o = run_in(dir.path(), "process", &["--output", "got", "-c", &program("first")]);
    assert_exit(&o, 0);
    let o = run_in(dir.path(), "process", &["--json", "--output", "got", "-c", &program("second")]);
    assert_exit(&o, 3);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["value"], 1);
    let output = &v["output"];
    // out/'s new file, then the display's file: a new name, beside the
    // first run's.
    let files = output["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{output}");
    assert_eq!(files[0], serde_json::json!({"path": "second.txt", "bytes": 6}), "{output}");
    assert!(is_display_file(files[1]["path"].as_str().unwrap(), 1, "txt"), "{output}");
    assert_eq!(files[1]["bytes"], 8, "{output}");
    let mut skipped: Vec<(String, String, String)> = output["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let field = |k: &str| s[k].as_str().unwrap().to_string();
            (field("path"), field("kind"), field("reason"))
        })
        .collect();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            ("a.txt".into(), "failed".into(), "exists in the output directory; not overwritten".into()),
            (
                "sub".into(),
                "failed".into(),
                "a directory that exists in the output directory; not merged into (nothing below it copied)".into()
            ),
        ]
    );
    assert_eq!(output["complete"], false);
    let got = dir.path().join("got");
    let read = |p: &str| std::fs::read_to_string(got.join(p)).unwrap();
    assert_eq!((read("a.txt"), read("sub/b.txt"), read("first.txt")), ("first".into(), "first".into(), "first".into()));
    assert_eq!(read("second.txt"), "second");
    // Both runs' display files, each its own.
    // Sorted: two runs in the same second are ordered by their random part.
    let mut shown: Vec<String> = display_files(&got, 1, "txt").iter().map(|name| read(name)).collect();
    shown.sort();
    assert_eq!(shown, ["'first'", "'second'"]);
    assert!(!stderr(&o).contains("not written"), "{}", stderr(&o));
}

/// A rerun's displays are delivered beside the earlier run's (before, the
/// second run's chart was not written, yet it exited 0 and said
/// `"complete": true`); a display that cannot be written makes the
/// delivery incomplete, as an `out/` entry does.
#[test]
fn a_rerun_delivers_its_displays_and_a_display_not_written_is_an_incomplete_delivery() {
    for isolation in ["process", "sandbox"] {
        let dir = tempfile::tempdir().unwrap();
        let got = dir.path().join("got");
        for (n, tag) in ["first", "second"].into_iter().enumerate() {
            let program = format!("display('{tag}')\nreturn 1");
            let o = run_in(dir.path(), isolation, &["--json", "--output", "got", "-c", &program]);
            assert_exit(&o, 0);
            let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
            let output = &v["output"];
            assert_eq!(output["complete"], true, "{isolation}: {output}");
            assert_eq!(output["skipped"], serde_json::json!([]), "{isolation}: {output}");
            let name = output["files"][0]["path"].as_str().unwrap();
            assert!(is_display_file(name, 1, "txt"), "{isolation}: {output}");
            assert_eq!(std::fs::read_to_string(got.join(name)).unwrap(), format!("'{tag}'"));
            assert!(stderr(&o).contains(&format!("pycage: display 1 written to got/{name}\n")), "{}", stderr(&o));
            assert_eq!(display_files(&got, 1, "txt").len(), n + 1, "{isolation}");
        }

        // An image whose data is not base64 cannot become a file.
        let program = "display({'image/png': 'not base64!'}, raw=True)\ndisplay('fine')\nreturn 1";
        let o = run_in(dir.path(), isolation, &["--json", "--output", "got", "-c", program]);
        assert_exit(&o, 3);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["value"], 1);
        let output = &v["output"];
        assert_eq!(output["complete"], false, "{isolation}: {output}");
        let skipped = output["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), 1, "{isolation}: {output}");
        assert!(is_display_file(skipped[0]["path"].as_str().unwrap(), 1, "png"), "{isolation}: {output}");
        assert_eq!(skipped[0]["kind"], "failed");
        let reason = skipped[0]["reason"].as_str().unwrap();
        assert!(reason.starts_with("display 1 not written: its image/png is not base64"), "{isolation}: {reason}");
        // The other display is delivered all the same.
        assert!(is_display_file(output["files"][0]["path"].as_str().unwrap(), 2, "txt"), "{isolation}: {output}");
        let err = stderr(&o);
        assert!(err.contains("pycage: warning: display 1 not written: its image/png is not base64"), "{err}");
        assert!(
            err.ends_with("pycage: error: the output was not delivered whole to got (what was copied stays there)\n"),
            "{isolation}: {err}"
        );
        assert!(display_files(&got, 1, "png").is_empty(), "{isolation}");
    }
}

#[test]
fn display_files_are_capped_like_the_out_copy() {
    const CAP: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let program = format!("for i in range({}):\n    display('x')\nreturn 1", CAP + 5);
    let o = run_in(dir.path(), "process", &["--output", "got", "-c", &program]);
    // Five displays were not delivered to got: incomplete.
    assert_exit(&o, 3);
    assert!(stdout(&o).ends_with(&format!("[display {}] text/plain, 3 bytes: 'x'\n1\n", CAP + 5)));
    let got = dir.path().join("got");
    assert_eq!(std::fs::read_dir(&got).unwrap().count(), CAP);
    assert_eq!(display_files(&got, CAP, "txt").len(), 1);
    let err = stderr(&o);
    assert_eq!(err.lines().filter(|l| l.starts_with("pycage: display ")).count(), CAP);
    assert!(
        err.ends_with(&format!(
            "pycage: warning: 5 display file(s) not written to got (displays {} to {}): over the limit of {CAP} \
             display files per run (--json carries every display)\n\
             pycage: error: the output was not delivered whole to got (what was copied stays there)\n",
            CAP + 1,
            CAP + 5
        )),
        "{}",
        err.lines().last().unwrap_or_default()
    );
}
