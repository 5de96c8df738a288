//! Binding namespaces declared in a TOML file.
//!
//! ```toml
//! [[namespace]]
//! global = "tools"
//! error_class = { name = "ToolError", member_name_property = "tool" }   # optional
//!
//! [namespace.functions]
//! echo = { command = ["cat"] }
//! "my-tool" = { command = ["./my_tool.sh"], timeout_ms = 5000 }
//! ```
//!
//! Every function is an external command run once per call (see
//! [`crate::command`]). Loading is strict: unknown keys, wrong types, an
//! empty command and broken name rules (`docs/semantics.md`) are all errors, and
//! each names the offending entry, e.g.
//! `bindings.toml: namespace[0] (tools): function "echo": command must be a non-empty array of strings`.
//! Parsing and checking ([`parse`]) are pure; [`into_namespaces`] turns the
//! result into runtime bindings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use pycage_runtime::names::check_bindings;
use pycage_runtime::{Binding, ErrorClass, Namespace};
use serde::Deserialize;

use crate::command::{self, CommandSpec};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    namespace: Vec<NamespaceToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceToml {
    global: String,
    error_class: Option<ErrorClassToml>,
    #[serde(default)]
    functions: BTreeMap<String, FunctionToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorClassToml {
    name: String,
    member_name_property: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionToml {
    /// Kept loose so a wrong shape gets our message, which names the entry.
    command: toml::Value,
    timeout_ms: Option<u64>,
}

/// One checked namespace: its name, error class and commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceDecl {
    pub global: String,
    pub error_class: Option<ErrorClass>,
    pub functions: BTreeMap<String, CommandSpec>,
}

/// Reads and checks a bindings file. Relative command paths resolve against
/// the file's directory, which is also each command's working directory.
pub fn load(path: &Path) -> anyhow::Result<Vec<Namespace>> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read bindings file {label}"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let base_dir = std::path::absolute(parent).with_context(|| format!("{label}: cannot resolve its directory"))?;
    Ok(into_namespaces(parse(&text, &label, &base_dir)?))
}

/// Parses and checks the file's text. `label` prefixes every message.
pub fn parse(text: &str, label: &str, base_dir: &Path) -> anyhow::Result<Vec<NamespaceDecl>> {
    let file: FileToml = toml::from_str(text).map_err(|e| anyhow::anyhow!("{label}: {}", e.to_string().trim_end()))?;
    let mut decls = Vec::with_capacity(file.namespace.len());
    for (i, ns) in file.namespace.into_iter().enumerate() {
        let at = format!("{label}: namespace[{i}] ({})", ns.global);
        let error_class =
            ns.error_class.map(|ec| ErrorClass { name: ec.name, member_name_property: ec.member_name_property });
        let mut probe = Namespace::new(ns.global.clone());
        probe.error_class = error_class.clone();
        check_bindings(std::slice::from_ref(&probe)).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        let mut functions = BTreeMap::new();
        for (name, f) in ns.functions {
            let spec = function(f, base_dir).map_err(|e| anyhow::anyhow!("{at}: function {name:?}: {e}"))?;
            functions.insert(name, spec);
        }
        decls.push(NamespaceDecl { global: ns.global, error_class, functions });
    }
    // Rules that span namespaces (distinct injected globals).
    let all: Vec<Namespace> = decls
        .iter()
        .map(|d| {
            let mut n = Namespace::new(d.global.clone());
            n.error_class = d.error_class.clone();
            n
        })
        .collect();
    check_bindings(&all).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    Ok(decls)
}

fn function(f: FunctionToml, base_dir: &Path) -> anyhow::Result<CommandSpec> {
    const SHAPE: &str = "command must be a non-empty array of strings";
    let toml::Value::Array(items) = f.command else { bail!("{SHAPE}") };
    let mut argv = Vec::with_capacity(items.len());
    for item in items {
        let toml::Value::String(s) = item else { bail!("{SHAPE}") };
        argv.push(s);
    }
    let mut argv = argv.into_iter();
    let Some(argv0) = argv.next() else { bail!("{SHAPE}") };
    if argv0.is_empty() {
        bail!("command[0] (the program) must not be empty");
    }
    let timeout = match f.timeout_ms {
        None => command::DEFAULT_TIMEOUT,
        Some(0) => bail!("timeout_ms must be at least 1"),
        Some(ms) => Duration::from_millis(ms),
    };
    Ok(CommandSpec {
        program: resolve_program(&argv0, base_dir),
        argv0,
        args: argv.collect(),
        cwd: base_dir.to_path_buf(),
        timeout,
    })
}

/// A program with a `/` in it is a path: relative ones are taken from the
/// bindings file's directory, explicitly rather than relying on how exec
/// treats a relative path after a `chdir`. A bare name is looked up on PATH.
fn resolve_program(argv0: &str, base_dir: &Path) -> PathBuf {
    let p = Path::new(argv0);
    if argv0.contains('/') && p.is_relative() {
        base_dir.join(p)
    } else {
        p.to_path_buf()
    }
}

/// Turns checked declarations into runtime namespaces of command bindings.
pub fn into_namespaces(decls: Vec<NamespaceDecl>) -> Vec<Namespace> {
    decls
        .into_iter()
        .map(|d| {
            let mut ns = Namespace::new(d.global);
            ns.error_class = d.error_class;
            for (name, spec) in d.functions {
                let spec = Arc::new(spec);
                ns.functions.insert(
                    name,
                    Binding::new(move |args| {
                        let spec = Arc::clone(&spec);
                        async move { command::call(&spec, args).await }
                    }),
                );
            }
            ns
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<NamespaceDecl> {
        parse(text, "b.toml", Path::new("/base")).unwrap()
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, "b.toml", Path::new("/base")).unwrap_err())
    }

    fn spec(argv0: &str, program: &str, args: &[&str], timeout_ms: u64) -> CommandSpec {
        CommandSpec {
            argv0: argv0.into(),
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            cwd: "/base".into(),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[test]
    fn full_file() {
        let decls = ok(r#"
            [[namespace]]
            global = "tools"
            error_class = { name = "ToolError", member_name_property = "tool" }

            [namespace.functions]
            echo = { command = ["cat"] }
            "my-tool" = { command = ["./bin/my_tool.sh", "--x", "y"], timeout_ms = 5000 }
            "" = { command = ["/usr/bin/env", "true"] }

            [[namespace]]
            global = "db"
        "#);
        let want_fns = BTreeMap::from([
            (String::new(), spec("/usr/bin/env", "/usr/bin/env", &["true"], 30_000)),
            ("echo".to_string(), spec("cat", "cat", &[], 30_000)),
            ("my-tool".to_string(), spec("./bin/my_tool.sh", "/base/./bin/my_tool.sh", &["--x", "y"], 5000)),
        ]);
        assert_eq!(
            decls,
            vec![
                NamespaceDecl {
                    global: "tools".into(),
                    error_class: Some(ErrorClass { name: "ToolError".into(), member_name_property: "tool".into() }),
                    functions: want_fns,
                },
                NamespaceDecl { global: "db".into(), error_class: None, functions: BTreeMap::new() },
            ]
        );
    }

    #[test]
    fn empty_file_has_no_namespaces() {
        assert_eq!(ok(""), vec![]);
    }

    #[test]
    fn bad_commands_name_the_entry() {
        let base = "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\n";
        let shape = "b.toml: namespace[0] (tools): function \"echo\": command must be a non-empty array of strings";
        for cmd in ["[]", "\"cat\"", "[1]", "[\"cat\", 2]", "{ a = 1 }"] {
            assert_eq!(err(&format!("{base}echo = {{ command = {cmd} }}")), shape, "{cmd}");
        }
        assert_eq!(
            err(&format!("{base}echo = {{ command = [\"\"] }}")),
            "b.toml: namespace[0] (tools): function \"echo\": command[0] (the program) must not be empty"
        );
        assert_eq!(
            err(&format!("{base}\"a b\" = {{ command = [\"x\"], timeout_ms = 0 }}")),
            "b.toml: namespace[0] (tools): function \"a b\": timeout_ms must be at least 1"
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors() {
        let e = err("[[namespace]]\nglobal = \"t\"\n[namespace.functions]\necho = { comand = [\"cat\"] }\n");
        assert!(e.starts_with("b.toml: ") && e.contains("unknown field `comand`") && e.contains("line 4"), "{e}");
        let e = err("[[namespace]]\nglobal = \"t\"\nextra = 1\n");
        assert!(e.contains("unknown field `extra`"), "{e}");
        let e = err("[[namespaces]]\nglobal = \"t\"\n");
        assert!(e.contains("unknown field `namespaces`"), "{e}");
        let e =
            err("[[namespace]]\nglobal = \"t\"\nerror_class = { name = \"E\", member_name_property = \"p\", x = 1 }\n");
        assert!(e.contains("unknown field `x`"), "{e}");
        let e = err(
            "[[namespace]]\nglobal = \"t\"\n[namespace.functions]\necho = { command = [\"cat\"], timeout_ms = -1 }\n",
        );
        assert!(e.contains("line 4"), "{e}");
        let e = err("[[namespace]]\n[namespace.functions]\n");
        assert!(e.contains("missing field `global`"), "{e}");
        let e = err("[[namespace]]\nglobal = \"t\"\n[namespace.functions]\necho = {}\n");
        assert!(e.contains("missing field `command`"), "{e}");
        let e = err("not toml at all");
        assert!(e.starts_with("b.toml: TOML parse error"), "{e}");
    }

    #[test]
    fn name_rules_name_the_entry() {
        assert_eq!(
            err("[[namespace]]\nglobal = \"ok\"\n[[namespace]]\nglobal = \"my-tools\"\n"),
            "b.toml: namespace[1] (my-tools): namespace global \"my-tools\" is not an identifier: it must match [A-Za-z_][A-Za-z0-9_]*"
        );
        assert!(err("[[namespace]]\nglobal = \"class\"\n").starts_with("b.toml: namespace[0] (class): "));
        let e =
            err("[[namespace]]\nglobal = \"t\"\nerror_class = { name = \"E\", member_name_property = \"message\" }\n");
        assert!(e.starts_with("b.toml: namespace[0] (t): member_name_property \"message\""), "{e}");
        let e = err("[[namespace]]\nglobal = \"t\"\n[[namespace]]\nglobal = \"t\"\n");
        assert!(e.starts_with("b.toml: the global \"t\" is injected twice"), "{e}");
    }

    #[test]
    fn program_resolution() {
        let b = Path::new("/base");
        assert_eq!(resolve_program("cat", b), PathBuf::from("cat"));
        assert_eq!(resolve_program("/bin/cat", b), PathBuf::from("/bin/cat"));
        assert_eq!(resolve_program("./t.sh", b), PathBuf::from("/base/./t.sh"));
        assert_eq!(resolve_program("sub/t.sh", b), PathBuf::from("/base/sub/t.sh"));
    }
}
