//! End-to-end tests of the `pycage` binary with a real python3 (helpers in
//! `support/`: every run passes `--isolation process` and works in its own
//! temporary directory). Program semantics are tested in `semantics.rs`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{assert_exit, pycage, run, run_in, stderr, stdout, write_script};

// ---- run: output forms and exit codes ----

/// Issue 41: the installer never reads what a run may have left where
/// pycage was started (`--output .`): a `pip/__main__.py` that would run
/// as `python -m pip`, a `uv.toml` that would send the install to another
/// index. Both are planted in the working directory of `pycage run`; the
/// install still comes from the real index and nothing planted runs.
#[test]
fn the_installer_ignores_what_a_run_left_in_the_working_directory() {
    let Some(venv) = support::datasci_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("planted-pip-ran");
    std::fs::create_dir(dir.path().join("pip")).unwrap();
    std::fs::write(
        dir.path().join("pip/__main__.py"),
        format!("open({:?}, 'w').close()\nraise SystemExit(1)\n", marker.display().to_string()),
    )
    .unwrap();
    std::fs::write(dir.path().join("pip/__init__.py"), "").unwrap();
    std::fs::write(dir.path().join("uv.toml"), "index-url = \"http://127.0.0.1:9/simple\"\n").unwrap();
    std::fs::write(
        dir.path().join("pyproject.toml"),
        "[tool.uv]\nindex-url = \"http://127.0.0.1:9/simple\"\n[tool.uv.pip]\nindex-url = \"http://127.0.0.1:9/simple\"\n",
    )
    .unwrap();
    let program =
        "# /// script\n# dependencies = [\"tabulate==0.9.0\"]\n# ///\nimport tabulate\nreturn tabulate.__version__";
    let venv = venv.to_str().unwrap();
    let cache = dir.path().join("cache");
    for installer_path in [format!("{venv}/bin"), "/usr/bin:/bin".to_owned()] {
        // uv beside the venv's interpreter, then (uv not beside a plain
        // interpreter nor on PATH) pip.
        let python =
            if installer_path.starts_with(venv) { vec!["--venv", venv] } else { vec!["--python", "/usr/bin/python3"] };
        let o = pycage(dir.path())
            .env("XDG_CACHE_HOME", &cache)
            .env("PATH", &installer_path)
            .args(["run", "--isolation", "process", "--allow-package", "tabulate", "--json"])
            .args(&python)
            .args(["-c", program])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), "{\"value\":\"0.9.0\",\"logs\":[]}\n");
        assert!(!marker.exists(), "the planted pip/__main__.py ran");
        std::fs::remove_dir_all(&cache).unwrap();
    }
}

/// `pycage run --type-check`: a program with a type error settles as
/// `type-error` at its own line, exit status 1, and nothing of it runs;
/// a correct one runs as without the check.
#[test]
fn type_check_stops_a_wrong_program_before_it_runs() {
    let Some(ty) = support::ty_binary() else { return };
    let ty = ty.to_str().unwrap();
    let o = run(&["--type-check", "--ty", ty, "--json", "-c", "print('ran')\nn: int = 'one'\nreturn n"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.starts_with(r#"{"logs":[],"error":{"kind":"type-error","message":"the type check (ty) found 1 error"#),
        "{out}"
    );
    assert!(out.contains("<program>:2:"), "{out}");
    let o = run(&["--type-check", "--ty", ty, "--json", "-c", "n: int = 1\nreturn n + 1"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":2,\"logs\":[]}\n");
}

#[test]
fn json_success_is_one_exact_line() {
    let o = run(&["--json", "-c", "return 1"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":1,\"logs\":[]}\n");
    assert_eq!(stderr(&o), "");
}

#[test]
fn json_keeps_exact_numbers_and_logs() {
    let o = run(&["--json", "-c", "print('hi')\nprint('é\\tx')\nreturn {'n': 2**100, 'f': 0.1, 'z': None}"]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":{\"n\":1267650600228229401496703205376,\"f\":0.1,\"z\":null},\"logs\":[\"hi\",\"é\\tx\"]}\n"
    );
}

#[test]
fn json_without_value_or_with_error() {
    let o = run(&["--json", "-c", "print('x')"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"logs\":[\"x\"]}\n");

    let o = run(&["--json", "-c", "print('before')\nraise ValueError('boom')"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.starts_with("{\"logs\":[\"before\"],\"error\":{\"kind\":\"exception\",\"message\":\"Traceback")
            && out.ends_with("ValueError: boom\"}}\n"),
        "{out}"
    );
    assert_eq!(stderr(&o), "");
}

#[test]
fn readable_output() {
    let o = run(&["-c", "print('a')\nprint('b')\nreturn [1, 'x', 2**64]"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "a\nb\n[1,\"x\",18446744073709551616]\n");
    assert_eq!(stderr(&o), "");

    let o = run(&["-c", "print('only logs')"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "only logs\n");
}

#[test]
fn readable_failure_goes_to_stderr_with_exit_1() {
    let o = run(&["-c", "print('a')\nraise ValueError('boom')"]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "a\n");
    let err = stderr(&o);
    assert!(err.starts_with("error: exception: Traceback") && err.ends_with("ValueError: boom\n"), "{err}");
}

#[test]
fn wall_clock_timeout_exits_1() {
    let start = Instant::now();
    let o = run(&["--json", "--wall-ms", "500", "-c", "while True: pass"]);
    assert_exit(&o, 1);
    assert_eq!(
        stdout(&o),
        "{\"logs\":[],\"error\":{\"kind\":\"timeout\",\"message\":\"the wall-clock budget of 500 ms was exceeded\"}}\n"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn program_file_and_double_dash() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prog.py"), "x = 20\nreturn x + 1\n").unwrap();
    std::fs::write(dir.path().join("-c"), "return 'dash'\n").unwrap();
    let o = run_in(dir.path(), &["--json", "prog.py"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":21,\"logs\":[]}\n");
    let o = run_in(dir.path(), &["--json", "--", "-c"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":\"dash\",\"logs\":[]}\n");
}

#[test]
fn program_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["run", "--isolation", "process", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"import math\nreturn math.factorial(25)\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":15511210043330985984000000,\"logs\":[]}\n");
}

#[test]
fn misuse_exits_2_with_a_message() {
    // clap's usage errors
    for args in [&["--no-such-flag", "-c", "return 1"][..], &[][..], &["-c", "return 1", "prog.py"][..]] {
        let o = run(args);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains("Usage: pycage run"), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), "");
    }
    let o = run(&["--isolation", "chroot", "-c", "return 1"]);
    assert_exit(&o, 2);

    let o = run(&["missing.py"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: cannot read program file missing.py: No such file or directory (os error 2)\n"
    );

    let o = run(&["--python", "/nonexistent/python3", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).starts_with("pycage: error: could not run /nonexistent/python3"), "{}", stderr(&o));

    let o = run(&["--memory-mb", "1", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(stderr(&o), "pycage: error: --memory-mb must be at least 64 MiB\n");

    let o = run(&["--wall-ms", "0", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(stderr(&o), "pycage: error: --wall-ms must be at least 1 ms\n");

    for (flag, value, unit) in [("--cpu-seconds", "0", " s"), ("--max-value-bytes", "0", " bytes")] {
        let o = run(&[flag, value, "-c", "return 1"]);
        assert_exit(&o, 2);
        assert_eq!(stderr(&o), format!("pycage: error: {flag} must be at least 1{unit}\n"));
    }
}

#[test]
fn sigint_aborts_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["run", "--isolation", "process", "--wall-ms", "30000", "-c", "print('started')\nwhile True: pass"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "started\n", "log lines stream while the program runs");
    let start = Instant::now();
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {err}");
    assert_eq!(rest, "");
    assert_eq!(err, "error: abort: the run was cancelled by the caller\n");
    assert!(start.elapsed() < Duration::from_secs(10));
}

// ---- bindings files ----

const TOOLS: &str = r#"
[[namespace]]
global = "tools"

[namespace.functions]
echo = { command = ["cat"] }
"my-tool" = { command = ["./bin/fail.sh", "an arg"] }
slow = { command = ["./slow.sh"], timeout_ms = 300 }
"#;

const TOOLS_WITH_CLASS: &str = r#"
[[namespace]]
global = "tools"
error_class = { name = "ToolError", member_name_property = "tool" }

[namespace.functions]
fail = { command = ["./bin/fail.sh", "x"] }
"#;

/// A tempdir with a bindings file and its scripts.
fn bindings_dir(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    write_script(dir.path(), "bin/fail.sh", "#!/bin/sh\ncat >/dev/null\necho \"no such user: $1\" >&2\nexit 3\n");
    write_script(dir.path(), "slow.sh", "#!/bin/sh\nexec sleep 20\n");
    std::fs::write(dir.path().join("bindings.toml"), toml).unwrap();
    dir
}

#[test]
fn command_binding_echoes_exactly() {
    let dir = bindings_dir(TOOLS);
    let program = "a = await tools.echo({'n': [1, 2.5, 2**70], 's': 'é\\n\"', 'e': {}})\n\
                   b = await tools.echo(None)\n\
                   return [a, b]";
    // Run from elsewhere: relative commands resolve against the file's directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let bindings = dir.path().join("bindings.toml");
    let o = run_in(elsewhere.path(), &["--json", "--bindings", bindings.to_str().unwrap(), "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":[{\"n\":[1,2.5,1180591620717411303424],\"s\":\"é\\n\\\"\",\"e\":{}},null],\"logs\":[]}\n"
    );
}

#[test]
fn failing_command_raises_unless_caught() {
    let dir = bindings_dir(TOOLS);
    let o = run_in(dir.path(), &["--bindings", "bindings.toml", "-c", "await getattr(tools, 'my-tool')({})"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.starts_with("error: exception: "), "{err}");
    assert!(err.contains("getattr(tools, \"my-tool\") failed (exit status: 3): no such user: an arg"), "{err}");

    let program = "try:\n    await getattr(tools, 'my-tool')({})\nexcept Exception as e:\n    return str(e)";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":\"getattr(tools, \\\"my-tool\\\") failed (exit status: 3): no such user: an arg\",\"logs\":[]}\n"
    );
}

#[test]
fn error_class_carries_the_member_name() {
    let dir = bindings_dir(TOOLS_WITH_CLASS);
    let program = "try:\n    await tools.fail({'q': 1})\nexcept ToolError as e:\n    return [e.tool, str(e), isinstance(e, Exception)]";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":[\"fail\",\"tools.fail failed (exit status: 3): no such user: x\",true],\"logs\":[]}\n"
    );
}

/// Without `member_name_property`, the member's name is on `.tool`: the
/// one name the CLI, the Python package and the stubs use.
#[test]
fn error_class_member_name_property_defaults_to_tool() {
    let dir = bindings_dir(&TOOLS_WITH_CLASS.replace(", member_name_property = \"tool\"", ""));
    let program = "try:\n    await tools.fail({'q': 1})\nexcept ToolError as e:\n    return e.tool";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":\"fail\",\"logs\":[]}\n");
    let o = pycage(dir.path()).args(["stubs", "--bindings", "bindings.toml"]).output().unwrap();
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("`.tool` names the function"), "{}", stdout(&o));
}

/// A failing command's traceback stays on the host: the program reads its
/// last line (the exception), never its frames and their host paths.
#[test]
fn a_commands_traceback_does_not_reach_the_program() {
    let dir = bindings_dir(
        "[[namespace]]\nglobal = \"tools\"\nerror_class = { name = \"ToolError\" }\n\
         [namespace.functions]\nstock = { command = [\"python3\", \"stock.py\"] }\n",
    );
    std::fs::write(
        dir.path().join("stock.py"),
        "import json, sys\ndef lookup(w):\n    raise ValueError(f'unknown warehouse {w!r}')\nlookup(json.load(sys.stdin)['w'])\n",
    )
    .unwrap();
    let program = "try:\n    await tools.stock(w='atlantis')\nexcept ToolError as e:\n    return str(e)";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(
        stdout(&o),
        "{\"value\":\"tools.stock failed (exit status: 1): ValueError: unknown warehouse 'atlantis'\",\"logs\":[]}\n"
    );
}

/// A function's `input_schema` is checked before its command runs: a bad
/// call is rejected with the field named, and the command never starts.
#[test]
fn input_schema_is_checked_before_the_command_runs() {
    let dir = bindings_dir(
        r#"
[[namespace]]
global = "tools"
error_class = { name = "ToolError" }

[namespace.functions]
weather = { command = ["./weather.sh"], input_schema = { type = "object", properties = { city = { type = "string" }, days = { type = "integer", minimum = 1 } }, required = ["city"], additionalProperties = false } }
"#,
    );
    write_script(dir.path(), "weather.sh", "#!/bin/sh\ntouch ran\ncat\n");
    let call = |args: &str| {
        let program = format!(
            "try:\n    return await tools.weather({args})\nexcept ToolError as e:\n    return [e.tool, str(e)]"
        );
        let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", &program]);
        assert_exit(&o, 0);
        stdout(&o)
    };
    assert_eq!(
        call("cty='Lyon'"),
        "{\"value\":[\"weather\",\"invalid arguments: missing required argument \\\"city\\\"; \
         unexpected argument \\\"cty\\\" (expected: city, days)\"],\"logs\":[]}\n"
    );
    assert_eq!(
        call("city='Lyon', cty='x'"),
        "{\"value\":[\"weather\",\"invalid arguments: unexpected argument \\\"cty\\\" (expected: city, days)\"],\"logs\":[]}\n"
    );
    assert_eq!(
        call("city='Lyon', days='3'"),
        "{\"value\":[\"weather\",\"invalid arguments: \\\"days\\\" must be an integer, got string \\\"3\\\"\"],\"logs\":[]}\n"
    );
    assert!(!dir.path().join("ran").exists(), "the command ran with arguments its schema refuses");
    assert_eq!(call("city='Lyon', days=3"), "{\"value\":{\"city\":\"Lyon\",\"days\":3},\"logs\":[]}\n");
    assert!(dir.path().join("ran").exists());

    // A schema this checker cannot read is refused when the file loads.
    std::fs::write(
        dir.path().join("bad.toml"),
        "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\nw = { command = [\"cat\"], input_schema = { type = \"text\" } }\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &["--bindings", "bad.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("function \"w\": input_schema: $.type: unknown type \"text\""), "{}", stderr(&o));
}

#[test]
fn command_timeout_rejects_the_call() {
    let dir = bindings_dir(TOOLS);
    let start = Instant::now();
    let program = "try:\n    await tools.slow([])\nexcept Exception as e:\n    return str(e)";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":\"tools.slow timed out after 300 ms\",\"logs\":[]}\n");
    assert!(start.elapsed() < Duration::from_secs(10), "the sleeping command was not waited for");
}

#[test]
fn bad_bindings_file_exits_2_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bindings.toml"),
        "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\necho = { command = [] }\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &["--bindings", "bindings.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: bindings.toml: namespace[0] (tools): function \"echo\": command must be a non-empty array of strings\n"
    );

    std::fs::write(
        dir.path().join("bindings.toml"),
        "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\necho = { command = [\"cat\"], timeout = 5 }\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &["--bindings", "bindings.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.starts_with("pycage: error: bindings.toml: TOML parse error at line 4"), "{err}");
    assert!(err.contains("unknown field `timeout`"), "{err}");

    let o = run_in(dir.path(), &["--bindings", "nope.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: cannot read bindings file nope.toml: No such file or directory (os error 2)\n"
    );
}

#[test]
fn name_rule_violation_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bindings.toml"), "[[namespace]]\nglobal = \"my-tools\"\n").unwrap();
    let o = run_in(dir.path(), &["--bindings", "bindings.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: bindings.toml: namespace[0] (my-tools): namespace global \"my-tools\" is not an identifier: it must match [A-Za-z_][A-Za-z0-9_]*\n"
    );

    std::fs::write(
        dir.path().join("bindings.toml"),
        "[[namespace]]\nglobal = \"tools\"\nerror_class = { name = \"console\", member_name_property = \"tool\" }\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &["--bindings", "bindings.toml", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: bindings.toml: namespace[0] (tools): error class name \"console\" is a global the runtime owns\n"
    );
}

// ---- frames validate ----

#[test]
fn frames_validate_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("{{\"type\":\"log\",\"text\":\"{}\"}}", "x".repeat(2000));
    let transcript = [
        r#"{"type":"boot-ack","extra":1}"#,
        r#"{"type":"call","id":7,"global":"tools","name":"my-tool","args":{"n":1.50,"big":123456789012345678901234567890},"x":null}"#,
        r#"{"type":"log","text":"hi\u00e9","truncated":true}"#,
        r#"{"type":"log","text":"hi","truncated":1}"#,
        "garbage",
        r#"{"type":"call","id":-1,"global":"t","name":"n","args":null}"#,
        &long,
        r#"{"type":"done","value":{"a":[1,2,3]}}"#,
        r#"{"type":"done","value":"abcdefghijklmnopqr"}"#,
        r#"{"type":"done","value":"a string that is too long"}"#,
        r#"{"type":"done","error":{"kind":"exception","message":"boom"}}"#,
        r#"{"type":"done","value":NaN}"#,
    ]
    .join("\n");
    std::fs::write(dir.path().join("fd3.jsonl"), transcript).unwrap();
    let o = pycage(dir.path())
        .args(["frames", "validate", "fd3.jsonl", "--max-line-bytes", "1024", "--max-value-bytes", "20"])
        .output()
        .unwrap();
    let want = [
        r#"{"type":"boot-ack"}"#,
        r#"{"type":"call","id":7,"global":"tools","name":"my-tool","args":{"n":1.50,"big":123456789012345678901234567890}}"#,
        r#"{"type":"log","text":"hié","truncated":true}"#,
        r#"{"type":"log","text":"hi"}"#,
        "drop",
        "drop",
        "oversized",
        "{\"type\":\"done\",\"value\":{\"a\":[1,2,3]}}\tvalue-bytes=13",
        // The budget is inclusive: exactly 20 bytes fits.
        "{\"type\":\"done\",\"value\":\"abcdefghijklmnopqr\"}\tvalue-bytes=20",
        "{\"type\":\"done\",\"value\":\"a string that is too long\"}\tvalue-over-budget",
        r#"{"type":"done","error":{"kind":"exception","message":"boom"}}"#,
        "drop",
    ];
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), want.map(|l| format!("{l}\n")).concat());
    assert_eq!(stderr(&o), "frames validate: 12 lines: 8 kept, 0 forged, 3 dropped, 1 oversized\n");

    // --explain, from stdin.
    let mut child = pycage(dir.path())
        .args(["frames", "validate", "--explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"[]\n{\"type\":\"reply\"}\n{\"type\":\"done\"}\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "drop\tnot a JSON object\ndrop\tunknown frame type\n{\"type\":\"done\"}\n");

    // A clean transcript exits 0; a forged done (value and error) does not.
    let clean = "{\"type\":\"boot-ack\"}\n{\"type\":\"done\",\"value\":1}\n";
    std::fs::write(dir.path().join("clean.jsonl"), clean).unwrap();
    let o = pycage(dir.path()).args(["frames", "validate", "clean.jsonl"]).output().unwrap();
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), clean);
    assert_eq!(stderr(&o), "frames validate: 2 lines: 2 kept, 0 forged, 0 dropped, 0 oversized\n");
    let forged = "{\"type\":\"done\",\"value\":1,\"error\":{\"kind\":\"exception\",\"message\":\"m\"}}\n";
    std::fs::write(dir.path().join("forged.jsonl"), forged).unwrap();
    let o = pycage(dir.path()).args(["frames", "validate", "forged.jsonl"]).output().unwrap();
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), format!("forged\t{forged}"));
    assert_eq!(stderr(&o), "frames validate: 1 lines: 0 kept, 1 forged, 0 dropped, 0 oversized\n");
}

/// Peak resident memory of a live process, from /proc (Linux).
fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn frames_validate_huge_line_without_newline() {
    const SIZE: usize = 20 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let mut child = pycage(dir.path())
        .args(["frames", "validate", "--max-line-bytes", "1024"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunk = vec![b'x'; 1024 * 1024];
    for _ in 0..SIZE / chunk.len() {
        stdin.write_all(&chunk).unwrap();
    }
    // Nearly all 20 MB went through (a pipe holds at most a few pages), and
    // the process is still alive waiting for more: memory stays near the cap.
    if let Some(peak) = peak_rss_bytes(child.id()) {
        assert!(peak < 16 * 1024 * 1024, "peak RSS {peak} bytes: the line was buffered");
    }
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "oversized\n");
}

#[test]
fn doctor_reports_layers_and_exit_status() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage")).args(["doctor", "--json"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v = pycage_protocol::JsonValue::parse(text.trim().as_bytes()).unwrap();
    let layers: Vec<String> = v
        .root()
        .get("layers")
        .unwrap()
        .as_array()
        .unwrap()
        .map(|l| l.get("name").unwrap().as_str().unwrap().to_string())
        .collect();
    for name in ["user-namespace", "pid-namespace", "net-namespace", "proc", "landlock", "seccomp", "cgroup-v2"] {
        assert!(layers.iter().any(|l| l == name), "{name} missing in {layers:?}");
    }
    let budgets: Vec<(String, String)> = v
        .root()
        .get("budgets")
        .unwrap()
        .as_array()
        .unwrap()
        .map(|b| {
            let enforcers: Vec<String> =
                b.get("enforced_by").unwrap().as_array().unwrap().map(|e| e.as_str().unwrap().to_string()).collect();
            (b.get("name").unwrap().as_str().unwrap().to_string(), enforcers.join("; "))
        })
        .collect();
    let names: Vec<&str> = budgets.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["memory", "kernel objects", "cpu", "processes", "disk"]);
    assert!(
        budgets[0].1.contains("watchdog: 512 MiB of PSS") && budgets[0].1.contains("RLIMIT_AS 4608 MiB per process"),
        "{budgets:?}"
    );
    assert!(budgets[1].1.contains("4096 descriptors"), "{budgets:?}");
    assert!(budgets[4].1.starts_with("tmpfs of 256 MiB and 32768 inodes"), "{budgets:?}");
    let ok = v.root().get("ok").unwrap().as_bool().unwrap();
    assert_eq!(out.status.success(), ok, "exit status must say whether the default configuration can run");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage"))
        .args(["doctor", "--python", "/nonexistent/python3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("interpreter: MISSING"), "{text}");
    // As root, process isolation runs programs as root: the doctor says so.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage"))
        .args(["doctor", "--isolation", "process"])
        .output()
        .unwrap();
    let process = String::from_utf8_lossy(&out.stdout);
    let root = rustix::process::geteuid().is_root();
    assert_eq!(process.contains("warning: programs run as root (uid 0) with process isolation"), root, "{process}");
    // Budgets as `run` takes them: the doctor shows those, not the defaults;
    // a bad one is refused in the flag's words.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pycage"))
        .args(["doctor", "--memory-mb", "128", "--cpu-seconds", "7"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("watchdog: 128 MiB of PSS"), "{shown}");
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_pycage")).args(["doctor", "--memory-mb", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--memory-mb"), "{out:?}");
    // Said in the CLI's terms: the flag to change, not the library's setting.
    assert!(text.contains("give another interpreter (--python)"), "{text}");
    assert!(!text.contains("RuntimeConfig"), "{text}");
}

/// Processes whose command line contains `marker`.
fn marked(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.starts_with("sleep") && cmd.contains(marker) {
                out.push(cmd);
            }
        }
    }
    out
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A sandboxed program dies with the host, even though the sandbox changes
/// credentials (which clears the parent-death signal) on its way in.
#[test]
fn sandboxed_program_dies_when_the_host_is_killed() {
    // The sleep duration is the marker (sleep takes no other argument);
    // this test process's pid makes it unique to this run.
    let marker = format!("3600.{}", std::process::id());
    let marker = marker.as_str();
    let program = format!("import os\nos.execvp('sleep', ['sleep', '{marker}'])");
    let mut host = Command::new(env!("CARGO_BIN_EXE_pycage"))
        .args(["run", "--isolation", "sandbox", "-c", &program])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || !marked(marker).is_empty()), "the program never started");
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || marked(marker).is_empty()),
        "survived the host: {:?}",
        marked(marker)
    );
}

/// Gathering many command calls queues them: at most 16 host processes run
/// at once (the program, not the host, chooses how many calls it makes).
#[test]
fn command_calls_are_limited_in_concurrency() {
    let dir = bindings_dir(
        "[[namespace]]\nglobal = \"tools\"\n\n[namespace.functions]\ntick = { command = [\"./tick.sh\"] }\n",
    );
    // Each call logs "+" when it starts and "-" when it ends.
    write_script(dir.path(), "tick.sh", "#!/bin/sh\ncat >/dev/null\necho + >> log\nsleep 0.2\necho - >> log\necho 1\n");
    let program = "import asyncio\nr = await asyncio.gather(*[tools.tick() for _ in range(40)])\nreturn sum(r)";
    let o = run_in(dir.path(), &["--json", "--bindings", "bindings.toml", "-c", program]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "{\"value\":40,\"logs\":[]}\n");
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let (mut now, mut max) = (0i32, 0i32);
    for line in log.lines() {
        now += if line == "+" { 1 } else { -1 };
        max = max.max(now);
    }
    assert_eq!(log.lines().count(), 80);
    assert!((2..=16).contains(&max), "max concurrent commands {max}");
}

// ---- bench ----

/// Runs that fail are counted per case and said in words, and the figures
/// of what succeeded are still printed (it stopped at the first failure
/// with a `Debug` dump). A 1 ms wall clock fails every exec'd run (an
/// interpreter cannot start in 1 ms) and most others.
#[test]
fn bench_reports_failed_runs_and_still_prints_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let o = pycage(dir.path())
        .args(["bench", "--iterations", "3", "--wall-ms", "1"])
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .unwrap();
    assert_exit(&o, 1);
    let (out, err) = (stdout(&o), stderr(&o));
    for debug in ["RunFailure", "Some(", "kind:"] {
        assert!(!out.contains(debug) && !err.contains(debug), "{out}\n{err}");
    }
    // The floors do not depend on pycage's budgets: measured and printed.
    let floor = out.lines().find(|l| l.starts_with("  python -I -c pass")).unwrap();
    assert!(floor.ends_with(" ms") && !floor.contains("no run succeeded"), "{out}");
    // So are the CPU floors: the namespace set, the same with the program's
    // confinement, CPython's fork (a dash when one could not be measured).
    let cpu_floors = out.lines().find(|l| l.starts_with("  floors: the namespace set ")).unwrap();
    let figures: Vec<&str> = cpu_floors.split(", ").map(|part| part.rsplit(' ').nth(1).unwrap_or("")).collect();
    assert_eq!(figures.len(), 3, "{cpu_floors}");
    for figure in figures {
        assert!(figure.parse::<f64>().is_ok_and(|ms| ms > 0.0), "{cpu_floors}");
    }
    assert!(out.contains("\n  exec / process         no run succeeded\n"), "{out}");
    assert!(out.contains("\nfailed runs (left out of the figures above)\n"), "{out}");
    assert!(
        out.contains(
            "\n  trivial run, exec / process: 3 of 3 failed; first: timeout: the wall-clock budget of 1 ms was exceeded\n"
        ),
        "{out}"
    );
    assert!(out.contains("\nhost RSS: "), "{out}");
    assert!(err.starts_with("pycage bench: runs failed in "), "{err}");
}

// ---- terminal-safe readable output ----

#[test]
fn readable_output_escapes_control_and_bidi_characters() {
    let code = "print('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J')\nprint('abc\\u202edcba\\ttab')\nraise ValueError('bad \\x1b[31mred\\u2066')";
    let o = run(&["-c", code]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\nabc\\u202edcba\ttab\n");
    let err = stderr(&o);
    assert!(err.ends_with("ValueError: bad \\x1b[31mred\\u2066\n"), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\u{2066}'), "{err}");
    // A value is canonical JSON, escaped the same way; --json stays exact.
    let o = run(&["-c", "return 'x\\u202e\\x1b'"]);
    assert_eq!(stdout(&o), "\"x\\u202e\\u001b\"\n");
    let o = run(&["--json", "-c", "print('\\x1b[2J\\u202e')\nreturn '\\x07'"]);
    assert_eq!(stdout(&o), "{\"value\":\"\\u0007\",\"logs\":[\"\\u001b[2J\u{202e}\"]}\n");
}

// ---- files in and out ----

#[test]
fn inputs_and_output_with_relative_paths_in_both_isolations() {
    for isolation in ["process", "sandbox"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.txt"), "hello").unwrap();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("docs/a.md"), "# a").unwrap();
        let program = "import os\nopen('out/copy.txt', 'w').write(open('in.txt').read().upper())\nos.symlink('/etc/passwd', 'out/link')\nreturn sorted(os.listdir('docs'))";
        let o = pycage(dir.path())
            .args(["run", "--isolation", isolation, "--input", "in.txt", "--input", "docs", "--output", "results"])
            .args(["--allow-read", "docs", "-c", program])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), "[\"a.md\"]\n", "{isolation}");
        assert_eq!(
            stderr(&o),
            "pycage: warning: out/link not copied: a symlink: never followed or copied\n\
             pycage: copied 1 file(s), 5 bytes, from out/ to results\n",
            "{isolation}"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("results/copy.txt")).unwrap(), "HELLO");
        assert!(!dir.path().join("results/link").exists());
        let o = pycage(dir.path())
            .args([
                "run",
                "--isolation",
                isolation,
                "--json",
                "--output",
                "results2",
                "-c",
                "_ = open('out/x', 'w').write('y')",
            ])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert_eq!(
            stdout(&o),
            "{\"logs\":[],\"output\":{\"files\":[{\"path\":\"x\",\"bytes\":1}],\"skipped\":[],\"bytes\":1,\"truncated\":false,\"complete\":true}}\n"
        );
    }
    let o = run(&["--input", "no-such-file", "-c", "return 1"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).starts_with("pycage: error: invalid input: input no-such-file:"), "{}", stderr(&o));
}

/// An output that cannot be delivered whole is never a success: a
/// directory that cannot be made is misuse before the program runs; an
/// entry that cannot be written, or that a limit leaves out, exits 3 (1
/// when the run failed anyway), names the entry and where it was to go,
/// and what was copied stays.
#[test]
fn output_that_cannot_be_delivered_is_not_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let program = format!(
        "open({:?}, 'w').close()\nopen('out/a.txt', 'w').write('a')\nopen('out/b.txt', 'w').write('bb')\nreturn 1",
        ran.to_str().unwrap()
    );
    // A file where the directory should be.
    std::fs::write(dir.path().join("blocked"), "").unwrap();
    let o = run_in(dir.path(), &["--output", "blocked/results", "-c", &program]);
    assert_exit(&o, 2);
    assert!(stderr(&o).starts_with("pycage: error: --output blocked/results: cannot create it: "), "{}", stderr(&o));
    assert!(!ran.exists(), "the program must not run when its output has nowhere to go");
    let o = run_in(dir.path(), &["--json", "--output", "blocked/results", "-c", &program]);
    assert_exit(&o, 2);
    assert!(stdout(&o).starts_with("{\"logs\":[],\"error\":{\"kind\":\"misuse\""), "{}", stdout(&o));

    // `b.txt` cannot be written: a directory has its name.
    std::fs::create_dir_all(dir.path().join("results/b.txt")).unwrap();
    let o = run_in(dir.path(), &["--output", "results", "-c", &program]);
    assert_exit(&o, 3);
    assert_eq!(stdout(&o), "1\n");
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "pycage: warning: out/b.txt not copied to results/b.txt: exists in the output directory; not overwritten"
        ),
        "{err}"
    );
    assert!(err.contains("pycage: copied 1 file(s), 1 bytes, from out/ to results\n"), "{err}");
    assert!(
        err.ends_with("pycage: error: the output was not delivered whole to results (what was copied stays there)\n")
    );
    assert!(!err.contains("out/out"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.path().join("results/a.txt")).unwrap(), "a", "what was copied stays");
    // The same again, in JSON (the first run's a.txt would be skipped too:
    // nothing is overwritten).
    std::fs::remove_file(dir.path().join("results/a.txt")).unwrap();
    let o = run_in(dir.path(), &["--json", "--output", "results", "-c", &program]);
    assert_exit(&o, 3);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["value"], 1);
    assert_eq!(v["output"]["complete"], false);
    assert_eq!(v["output"]["skipped"][0]["path"], "b.txt");
    assert_eq!(v["output"]["skipped"][0]["kind"], "failed");
    // A run that failed says so first: 1.
    let failing = format!("{program}\nraise SystemExit(4)").replace("return 1\n", "");
    assert_exit(&run_in(dir.path(), &["--output", "results", "-c", &failing]), 1);

    // A limit that leaves a file out is no complete delivery either.
    let o = run_in(dir.path(), &["--json", "--output", "limited", "--max-output-bytes", "2", "-c", &program]);
    assert_exit(&o, 3);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["output"]["skipped"][0]["kind"].as_str(), v["output"]["complete"].as_bool()),
        (Some("limit"), Some(false))
    );
    // Symlinks are never copied, by rule: not a failed delivery.
    let o = run_in(dir.path(), &["--output", "links", "-c", "import os\nos.symlink('/etc/passwd', 'out/l')"]);
    assert_exit(&o, 0);
}

/// For an unprivileged user, an `--output` directory they cannot write
/// into is misuse before the program runs (it exited 0, every output lost,
/// with `out/out not copied`).
#[test]
fn an_unwritable_output_directory_is_misuse_for_an_unprivileged_user() {
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let dir = shared_dir();
    std::fs::create_dir(dir.path().join("root-only")).unwrap(); // 0755, root's
    let program = "open('out/a.txt', 'w').write('a')\nreturn 1";
    let o = as_nobody(
        dir.path(),
        &["run", "--isolation", "process", "--python", "/usr/bin/python3", "--output", "root-only", "-c", program],
    );
    assert_exit(&o, 2);
    assert_eq!(
        stderr(&o),
        "pycage: error: --output root-only: cannot write into it: Permission denied (os error 13)\n"
    );
    let o = as_nobody(
        dir.path(),
        &["run", "--isolation", "process", "--python", "/usr/bin/python3", "--output", "root-only/sub", "-c", program],
    );
    assert_exit(&o, 2);
    assert!(stderr(&o).starts_with("pycage: error: --output root-only/sub: cannot create it: "), "{}", stderr(&o));
}

// ---- any user ----

/// A directory the unprivileged user can work in.
fn shared_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("pycage-cli-nobody-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

fn as_nobody(dir: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_pycage"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", dir)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv (util-linux)")
}

/// As root, the CLI again as `nobody`: the default (sandbox) isolation
/// works without privileges, with inputs and outputs, and so does doctor.
#[test]
fn the_sandbox_works_for_an_unprivileged_user() {
    if !rustix::process::geteuid().is_root() {
        // Re-running as `nobody` needs root; CI runs as root and requires it.
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    let dir = shared_dir();
    let input = dir.path().join("data.txt");
    std::fs::write(&input, "42").unwrap();
    rustix::fs::chown(&input, Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534))).unwrap();
    let program = "import os, socket\nopen('out/r.txt', 'w').write(str(int(open('data.txt').read()) + 1))\nreturn [os.getuid(), os.getcwd(), socket.gethostname(), sorted(os.listdir('/'))[:3]]";
    let o = as_nobody(
        dir.path(),
        &["run", "--json", "--python", "/usr/bin/python3", "--input", "data.txt", "--output", "res", "-c", program],
    );
    assert_exit(&o, 0);
    assert!(
        stdout(&o).starts_with("{\"value\":[1000,\"/work\",\"pycage\",[\"bin\",\"dev\",\"etc\"]],\"logs\":[],\"output\":{\"files\":[{\"path\":\"r.txt\",\"bytes\":2}]"),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("res/r.txt")).unwrap(), "43");
    let o = as_nobody(
        dir.path(),
        &["run", "--isolation", "process", "--python", "/usr/bin/python3", "-c", "import os\nreturn os.getuid()"],
    );
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "65534\n");
    let o = as_nobody(dir.path(), &["doctor", "--python", "/usr/bin/python3"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("identity               supported     used    uid 65534"), "{}", stdout(&o));
    // A service user whose HOME is `/` (a pod without a home): no cache
    // directory can be made, and runs still work (the caches fall back to
    // temporary ones).
    let o = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_pycage"))
        .args(["run", "--python", "/usr/bin/python3", "-c", "return 1"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", dir.path())
        .env("HOME", "/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "1\n");
    // Nothing is left in its temp directory but what the test made (and
    // the probe cache in its home).
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".cache", "data.txt", "res"]);
}

// ---- what a killed pycage leaves behind ----

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A pycage killed with SIGKILL runs no destructor: its owner lock and
/// (process isolation) run directory stay. The next pycage sweeps
/// them, and never a live pycage's.
#[test]
fn a_killed_pycage_leaves_what_the_next_one_sweeps() {
    for isolation in ["process", "sandbox"] {
        let temp = tempfile::tempdir().unwrap();
        let spawn_sleeper = || {
            Command::new(env!("CARGO_BIN_EXE_pycage"))
                .args([
                    "run",
                    "--isolation",
                    isolation,
                    "-c",
                    "print('started', flush=True)\nimport time\ntime.sleep(300)",
                ])
                .env("TMPDIR", temp.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let wait_started = |child: &mut std::process::Child| {
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line, "started\n");
        };
        let mut killed = spawn_sleeper();
        wait_started(&mut killed);
        killed.kill().unwrap();
        killed.wait().unwrap();
        let left = entries(temp.path());
        assert!(left.iter().any(|n| n.starts_with("pycage-") && n.ends_with(".lock")), "{isolation}: {left:?}");
        assert_eq!(left.iter().any(|n| n.starts_with("pycage-run-")), isolation == "process", "{left:?}");

        // A live pycage meanwhile: its directories must survive the sweep.
        let mut live = spawn_sleeper();
        wait_started(&mut live);
        let live_entries: Vec<String> = entries(temp.path()).into_iter().filter(|n| !left.contains(n)).collect();
        assert!(!live_entries.is_empty());

        let o = Command::new(env!("CARGO_BIN_EXE_pycage"))
            .args(["run", "--isolation", isolation, "-c", "return 1"])
            .env("TMPDIR", temp.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert_eq!(entries(temp.path()), live_entries, "{isolation}: the dead one's are swept, the live one's kept");
        // SAFETY: SIGTERM to the live pycage we started: it cancels its run and cleans up.
        assert_eq!(unsafe { libc::kill(live.id() as i32, libc::SIGTERM) }, 0);
        live.wait().unwrap();
        assert_eq!(entries(temp.path()), Vec::<String>::new(), "{isolation}");
    }
}

/// A host started with stdin and fds 3-4 closed runs in both isolations:
/// the descriptors made for a run must not land on 0-3, where the child's
/// stdio and fd 3 are installed (the sandbox crate's
/// `a_host_without_fd_3_still_spawns` shows the failure this prevents).
#[test]
fn runs_work_when_the_host_has_low_descriptors_closed() {
    for isolation in ["sandbox", "process"] {
        let o = Command::new("sh")
            .args(["-c", "exec 0<&- 3<&- 4<&-; exec \"$0\" run --json --isolation \"$1\" -c 'return 1'"])
            .arg(env!("CARGO_BIN_EXE_pycage"))
            .arg(isolation)
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), "{\"value\":1,\"logs\":[]}\n", "{isolation}");
    }
}

// ---- messages that misled (issue 47) ----

/// `--preload` on a one-shot run was accepted silently, and added its
/// modules' import time to the run: it warns, naming what it helps.
#[test]
fn preload_on_a_one_shot_run_warns_that_it_helps_pooled_runs() {
    let o = run(&["--preload", "json,decimal", "-c", "import decimal\nreturn str(decimal.Decimal(1))"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "\"1\"\n");
    let err = stderr(&o);
    assert!(err.starts_with("pycage: warning: --preload does not make `pycage run` faster:"), "{err}");
    assert!(err.contains("It helps pooled runs") && err.contains("pycage repl, pycage mcp"), "{err}");
    // Without it, nothing is said.
    let o = run(&["-c", "return 1"]);
    assert_eq!(stderr(&o), "");
}

/// As an unprivileged user, a venv whose base interpreter that user cannot
/// reach said `it has no bin/python`; it says which path, and why.
#[test]
fn a_venv_whose_interpreter_cannot_be_reached_says_which_and_why() {
    if !rustix::process::geteuid().is_root() {
        assert!(std::env::var_os("PYCAGE_REQUIRE_ALL_TESTS").is_none(), "needs root, and CI requires it");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = shared_dir();
    // A base installation in a directory only root may enter (as a pyenv
    // under /root is), and a venv that links to it.
    let base = dir.path().join("private");
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", base.join("python3")).unwrap();
    let venv = dir.path().join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), format!("home = {}\n", base.display())).unwrap();
    std::os::unix::fs::symlink(base.join("python3"), venv.join("bin/python")).unwrap();
    let o = as_nobody(dir.path(), &["run", "--venv", "venv", "-c", "return 1"]);
    assert_exit(&o, 2);
    let python = venv.join("bin/python");
    assert_eq!(
        stderr(&o),
        format!(
            "pycage: error: --venv venv: cannot run {} (a link to {}): Permission denied (os error 13); \
             a venv's base interpreter must be one this user can run\n",
            python.display(),
            base.join("python3").display()
        )
    );
    // A link to nothing says so too (for any user).
    let gone = dir.path().join("gone");
    std::fs::create_dir_all(gone.join("bin")).unwrap();
    std::fs::write(gone.join("pyvenv.cfg"), "home = /nonexistent\n").unwrap();
    std::os::unix::fs::symlink("/nonexistent/python3", gone.join("bin/python")).unwrap();
    let o = pycage(dir.path()).args(["run", "--venv", "gone", "-c", "return 1"]).output().unwrap();
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("(a link to /nonexistent/python3): No such file or directory (os error 2)"),
        "{}",
        stderr(&o)
    );
}

/// A sandboxed `urlopen` failed with a DNS error; the message says the run
/// has no network and how to allow a host.
#[test]
fn a_sandboxed_run_without_network_says_how_to_allow_a_host() {
    let dir = tempfile::tempdir().unwrap();
    let program = "import socket, urllib.request\nout = []\n\
                   for f in (lambda: urllib.request.urlopen('http://example.com/', timeout=5),\n\
                             lambda: socket.create_connection(('127.0.0.1', 80), timeout=2)):\n\
                   \x20   try:\n        f()\n    except OSError as e:\n        out.append(str(e))\n\
                   return out";
    let o = pycage(dir.path()).args(["run", "--json", "-c", program]).output().unwrap();
    assert_exit(&o, 0);
    let hint = "this run has no network: allow a host with --allow-net HOST[:PORT] for pycage run, repl and mcp, \
                or allow_net=[...] for pycage.Runtime";
    let out = stdout(&o);
    assert!(out.starts_with(r#"{"value":["<urlopen error [Errno -"#), "{out}");
    assert_eq!(out.matches(hint).count(), 2, "{out}");
    assert!(out.contains(&format!("[Errno 1] Operation not permitted ({hint})")), "{out}");
}
