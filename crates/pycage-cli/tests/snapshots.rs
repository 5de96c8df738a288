//! What users read, as reviewed snapshots (`insta`): `pycage --help` and
//! every subcommand's help, the stubs of a fixed bindings file, and the
//! `run_python` description a client of `pycage mcp` gets. A change in
//! user-visible text fails here until its new snapshot is accepted
//! (`cargo insta review`, or `INSTA_UPDATE=always` and a look at the diff).
//! `pycage doctor`'s probe-dependent text is snapshotted beside its code
//! (`src/doctor.rs`), on a fixed fake probe.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use support::{assert_exit, pycage, stdout};

/// Every subcommand, and the nested ones, by the words a user types.
const COMMANDS: &[&[&str]] = &[
    &[],
    &["run"],
    &["resume"],
    &["repl"],
    &["mcp"],
    &["stubs"],
    &["doctor"],
    &["bench"],
    &["frames"],
    &["frames", "validate"],
];

#[test]
fn help_of_every_command() {
    let dir = tempfile::tempdir().unwrap();
    // The subcommands `pycage --help` lists are the ones snapshotted here.
    let top = stdout(&pycage(dir.path()).arg("--help").output().unwrap());
    let listed: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    let snapshotted: Vec<&str> = COMMANDS.iter().filter(|c| c.len() == 1).map(|c| c[0]).collect();
    let mut a = listed.clone();
    let mut b = snapshotted.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "a subcommand without a help snapshot (or one that is gone)");
    for words in COMMANDS {
        let o = pycage(dir.path()).args(*words).arg("--help").output().unwrap();
        assert_exit(&o, 0);
        let name = if words.is_empty() { "help".to_owned() } else { format!("help-{}", words.join("-")) };
        insta::assert_snapshot!(name, stdout(&o));
    }
}

/// Bindings of every kind whose stubs need no upstream server: commands
/// with docs, schemas and an error class, and an HTTP endpoint.
const BINDINGS: &str = r#"
[[namespace]]
global = "tools"
doc = "Warehouse tools."
error_class = { name = "ToolError", member_name_property = "tool" }

[namespace.functions]
list_warehouses = { command = ["python3", "list.py"], description = "Every warehouse's code." }
stock = { command = ["python3", "stock.py"], timeout_ms = 5000, description = "Units of one SKU in a warehouse.", input_schema = { type = "object", properties = { warehouse = { type = "string" }, sku = { type = "string" }, at_least = { type = "integer", minimum = 0 } }, required = ["warehouse", "sku"] }, output_schema = { type = "object", properties = { units = { type = "integer" } } } }

[[namespace]]
global = "web"

[namespace.functions]
weather = { http = "http://127.0.0.1:9/weather", description = "Weather now.", input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] } }
"#;

#[test]
fn stubs_of_a_fixed_bindings_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bindings.toml"), BINDINGS).unwrap();
    let o = pycage(dir.path()).args(["stubs", "--bindings", "bindings.toml"]).output().unwrap();
    assert_exit(&o, 0);
    insta::assert_snapshot!("stubs", stdout(&o));
}

/// The `run_python` tool as `tools/list` gives it to a client of `pycage mcp`
/// over stdio (process isolation: the text is the same for both).
#[test]
fn mcp_tool_description() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bindings.toml"), BINDINGS).unwrap();
    let mut child = pycage(dir.path())
        .args(["mcp", "--isolation", "process", "--bindings", "bindings.toml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = |body: &str| {
        writeln!(stdin, "{body}").unwrap();
        stdin.flush().unwrap();
    };
    ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"snapshot","version":"0"}}}"#,
    );
    let init: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 1, "{init}");
    ask(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    ask(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let list: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    drop(stdin);
    let _ = child.wait();
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}"));
    assert_eq!(tools.len(), 1, "{list}");
    assert_eq!(tools[0]["name"], "run_python");
    let description = tools[0]["description"].as_str().unwrap();
    // The interpreter's version is the machine's, not the text's.
    let description = regex_free_version(description);
    insta::assert_snapshot!("mcp-run-python-description", description);
    insta::assert_snapshot!(
        "mcp-run-python-input-schema",
        serde_json::to_string_pretty(&tools[0]["inputSchema"]).unwrap()
    );
}

/// "Run a Python 3.11 program" → "Run a Python 3.X program".
fn regex_free_version(text: &str) -> String {
    let marker = "Run a Python 3.";
    match text.find(marker) {
        Some(at) => {
            let rest = &text[at + marker.len()..];
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            format!("{}{marker}X{}", &text[..at], &rest[digits..])
        }
        None => text.to_owned(),
    }
}
