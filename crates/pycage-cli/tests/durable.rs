//! `pycage run --journal-out` and `pycage resume`: an approval gate across
//! two processes of the real binary, with a command binding that counts
//! its calls on disk.
mod support;

use std::path::Path;

use support::*;

const KEY: &str = "a cli test key, not a secret!";

const BINDINGS: &str = r#"
[[namespace]]
global = "tools"
error_class = { name = "ToolError" }

[namespace.functions]
lookup = { command = ["./lookup.sh"] }
pay = { command = ["./pay.sh"], approval = true }
"#;

const PROGRAM: &str = r#"
inv = await tools.lookup({"invoice": 7})
print("amount", inv["amount"])
try:
    receipt = await tools.pay({"to": "ACME", "amount": inv["amount"] + 2})
except ToolError as e:
    receipt = "denied: " + str(e)
print("receipt", receipt)
return {"amount": inv["amount"], "receipt": receipt}
"#;

fn setup(dir: &Path) {
    std::fs::write(dir.join("bindings.toml"), BINDINGS).unwrap();
    std::fs::write(dir.join("prog.py"), PROGRAM).unwrap();
    write_script(dir, "lookup.sh", "#!/bin/sh\necho lookup >> calls.log\necho '{\"amount\": 40}'\n");
    write_script(dir, "pay.sh", "#!/bin/sh\necho pay >> calls.log\necho '\"paid by the command\"'\n");
}

fn calls(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("calls.log")).unwrap_or_default()
}

#[test]
fn an_approval_gate_suspends_in_one_process_and_resumes_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    let o = pycage(d)
        .args(["run", "--isolation", "process", "--bindings", "bindings.toml", "--journal-out", "pay.journal"])
        .arg("prog.py")
        .env("PYCAGE_JOURNAL_KEY", KEY)
        .output()
        .unwrap();
    assert_exit(&o, 4);
    assert_eq!(stdout(&o), "amount 40\n");
    let err = stderr(&o);
    assert!(err.contains(r#"pycage: suspended at tools.pay({"to":"ACME","amount":42}): approval required"#), "{err}");
    assert!(err.contains("resume with `pycage resume pay.journal --bindings bindings.toml --reply JSON`"), "{err}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.join("pay.journal")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(calls(d), "lookup\n");
    std::fs::copy(d.join("pay.journal"), d.join("copy.journal")).unwrap();

    let o = pycage(d)
        .args(["resume", "pay.journal", "--isolation", "process", "--bindings", "bindings.toml", "--reply", r#""r-1""#])
        .env("PYCAGE_JOURNAL_KEY", KEY)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "receipt r-1\n{\"amount\":40,\"receipt\":\"r-1\"}\n");
    assert_eq!(calls(d), "lookup\n", "lookup ran once in all, pay never");

    let o = pycage(d)
        .args(["resume", "copy.journal", "--json", "--isolation", "process", "--bindings", "bindings.toml"])
        .args(["--deny", "over budget"])
        .env("PYCAGE_JOURNAL_KEY", KEY)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":{\"amount\":40,\"receipt\":\"denied: over budget\"},\"logs\":[\"receipt denied: over budget\"]}\n"
    );
}

#[test]
fn journals_need_the_key_and_the_flag_and_bad_ones_are_misuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    // Approval in the bindings without --journal-out: refused up front.
    let o =
        pycage(d).args(["run", "--isolation", "process", "--bindings", "bindings.toml", "prog.py"]).output().unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("give --journal-out FILE"), "{}", stderr(&o));
    // --journal-out without a key.
    let o = pycage(d)
        .args(["run", "--isolation", "process", "--bindings", "bindings.toml", "--journal-out", "j", "prog.py"])
        .env_remove("PYCAGE_JOURNAL_KEY")
        .output()
        .unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--journal-out needs a journal key: set PYCAGE_JOURNAL_KEY"), "{}", stderr(&o));
    assert_eq!(calls(d), "", "nothing ran");
    // --json: the pending call is in the result.
    let o = pycage(d)
        .args(["run", "--json", "--isolation", "process", "--bindings", "bindings.toml", "--journal-out", "j"])
        .arg("prog.py")
        .env("PYCAGE_JOURNAL_KEY", KEY)
        .output()
        .unwrap();
    assert_exit(&o, 4);
    let out = stdout(&o);
    assert!(out.contains(r#""error":{"kind":"suspended","#), "{out}");
    assert!(out.contains(r#""suspended":{"call":{"global":"tools","name":"pay","args":{"to":"ACME","amount":42}},"reason":"approval required"}"#), "{out}");
    // Another key, a flipped byte, a reply that is not JSON: misuse, exit 2.
    let resume = |journal: &str, key: &str, reply: &str| {
        pycage(d)
            .args(["resume", journal, "--isolation", "process", "--bindings", "bindings.toml", "--reply", reply])
            .env("PYCAGE_JOURNAL_KEY", key)
            .output()
            .unwrap()
    };
    let o = resume("j", "another key of enough bytes", "1");
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("signed with another journal key"), "{}", stderr(&o));
    let mut bytes = std::fs::read(d.join("j")).unwrap();
    let at = bytes.len() - 40;
    bytes[at] ^= 4;
    std::fs::write(d.join("flipped"), bytes).unwrap();
    let o = resume("flipped", KEY, "1");
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("it was altered"), "{}", stderr(&o));
    let o = resume("j", KEY, "{nope");
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--reply is not one JSON value"), "{}", stderr(&o));
    assert_eq!(calls(d), "lookup\n");
}

/// The README's approval-gate block, as written, on a copy of
/// examples/approval: each command prints what the README shows.
#[test]
fn the_readme_approval_example_prints_what_it_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme.split("### Approval gates").nth(1).expect("the README's approval section");
    let block = section.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("examples/approval")).unwrap();
    for name in ["bindings.toml", "billing_tool.py", "pay_invoice.py"] {
        std::fs::copy(root.join("examples/approval").join(name), d.join("examples/approval").join(name)).unwrap();
    }
    // Each command line, and the comment lines after it: what it prints,
    // `(exit status N)`, or a note ending in `:`.
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("pycage ") {
            steps.push((command.to_owned(), Vec::new()));
        } else if let (Some(shown), Some((_, lines))) = (line.strip_prefix("# "), steps.last_mut()) {
            if !shown.ends_with(':') {
                lines.push(shown.to_owned());
            }
        }
    }
    assert_eq!(steps.len(), 3, "{block}");
    for (command, shown) in &steps {
        // The answer is the last argument, in single quotes (or double, for --deny).
        let (words, answer) = match command.split_once(" --reply ").or_else(|| command.split_once(" --deny ")) {
            Some((words, answer)) => {
                let flag = if command.contains(" --reply ") { "--reply" } else { "--deny" };
                (format!("{words} {flag}"), Some(answer.trim_matches(|c| c == '\'' || c == '"').to_owned()))
            }
            None => (command.clone(), None),
        };
        let o = pycage(d)
            .args(words.split_whitespace())
            .args(answer)
            .args(["--isolation", "process"])
            .env("PYCAGE_JOURNAL_KEY", KEY)
            .output()
            .unwrap();
        let printed: Vec<String> = stdout(&o).lines().chain(stderr(&o).lines()).map(str::to_owned).collect();
        let expected: Vec<String> = shown
            .iter()
            .filter(|l| !l.starts_with("(exit status"))
            .map(|l| l.split("    (").next().unwrap_or(l).to_owned())
            .collect();
        assert_eq!(printed, expected, "`pycage {command}`");
        assert_exit(&o, if shown.iter().any(|l| l == "(exit status 4)") { 4 } else { 0 });
    }
    assert_eq!(
        std::fs::read_to_string(d.join("examples/approval/calls.log")).unwrap(),
        "lookup {\"invoice\": \"INV-7\"}\n"
    );
}
