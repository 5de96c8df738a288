//! What `pycage run --output DIR` leaves in DIR: the program's `out/` and its
//! display files only ever make new names there. Nothing that exists in DIR
//! is overwritten or merged into (a sandboxed program must not plant a git
//! hook in a repository or replace the caller's files), and the display
//! files are capped like the `out/` copy.

mod support;

use std::path::Path;

use support::{assert_exit, pycage, stderr, stdout};

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
    assert_eq!(output["files"], serde_json::json!([{"path": "second.txt", "bytes": 6}]), "{output}");
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
    // The first run's display file stays too.
    assert_eq!(read("display-1.txt"), "'first'");
    assert!(stderr(&o).contains("pycage: warning: display 1 not written: cannot create"), "{}", stderr(&o));
}

#[test]
fn display_files_are_capped_like_the_out_copy() {
    const CAP: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let program = format!("for i in range({}):\n    display('x')\nreturn 1", CAP + 5);
    let o = run_in(dir.path(), "process", &["--output", "got", "-c", &program]);
    assert_exit(&o, 0);
    assert!(stdout(&o).ends_with(&format!("[display {}] text/plain, 3 bytes: 'x'\n1\n", CAP + 5)));
    let got = dir.path().join("got");
    assert_eq!(std::fs::read_dir(&got).unwrap().count(), CAP);
    assert!(got.join(format!("display-{CAP}.txt")).exists());
    let err = stderr(&o);
    assert_eq!(err.lines().filter(|l| l.starts_with("pycage: display ")).count(), CAP);
    assert!(
        err.ends_with(&format!(
            "pycage: warning: 5 display file(s) not written to got (displays {} to {}): over the limit of {CAP} \
             display files per run (--json carries every display)\n",
            CAP + 1,
            CAP + 5
        )),
        "{}",
        err.lines().last().unwrap_or_default()
    );
}
