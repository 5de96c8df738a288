//! The bindings file: binding namespaces declared in TOML.
//!
//! ```toml
//! [[namespace]]
//! global = "tools"
//! error_class = { name = "ToolError", member_name_property = "tool" }   # optional; the property defaults to "tool"
//! doc = "Warehouse tools."                                                # optional
//!
//! [namespace.functions]
//! echo = { command = ["cat"] }                                   # an external command per call
//! "my-tool" = { command = ["./my_tool.sh"], timeout_ms = 5000 }
//! weather = { http = "http://127.0.0.1:8080/weather", headers = { Authorization = { env = "API_TOKEN" } },
//!             description = "Weather now.", input_schema = { type = "object", properties = { city = { type = "string" } } } }
//! pay = { command = ["./pay.sh"], approval = true }               # a call suspends the run until it is approved
//!
//! [[mcp]]                                                        # every tool of an MCP server
//! global = "gh"
//! command = ["npx", "-y", "some-mcp-server"]                     # stdio; or url = "http://127.0.0.1:3000/mcp"
//! env = { GITHUB_TOKEN = { env = "GITHUB_TOKEN" } }              # the server's environment: a scrubbed base plus these
//! timeout_ms = 30000
//! include = ["search_issues"]                                    # or exclude = [...]
//! approval = ["delete_branch"]                                   # tools whose calls suspend the run until approved
//! error_class = { name = "GhError", member_name_property = "tool" }
//! ```
//!
//! A call that needs approval is not run: it suspends the run, which
//! settles as `suspended` with a journal; `pycage resume` answers it
//! (`docs/durable.md`).
//!
//! A function is a `command` ([`crate::command`]) or an `http` endpoint
//! ([`crate::http`]), optionally with `description`, `input_schema` and
//! `output_schema` (JSON Schema, as a TOML table or as a string of JSON) for
//! its stub. A call's arguments are checked against `input_schema` before
//! the command or endpoint runs ([`crate::schema`]). A value under `headers` or `env` is a literal string or
//! `{ env = "NAME" }`, read from pycage's environment when the file is loaded
//! (unset is an error).
//!
//! Loading is strict: unknown keys, wrong types, an empty command, both or
//! neither of `command`/`http` (`command`/`url`), a bad URL or header, and
//! broken name rules are all errors naming the entry, e.g.
//! `bindings.toml: namespace[0] (tools): function "echo": command must be a non-empty array of strings`.
//! Parsing ([`parse`]) is pure: it reads the environment through the lookup
//! it is given and connects to nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pycage_runtime::names::check_bindings;
use pycage_runtime::{ErrorClass, Namespace};
use serde::Deserialize;
use serde_json::Value;

use crate::command::{self, CommandSpec};
use crate::http::{self, HttpSpec};
use crate::secret::Secret;
use crate::upstream::{self, UpstreamSpec, UpstreamTransport};

/// A bindings file that does not load; the message names the entry.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

macro_rules! bail {
    ($($t:tt)*) => { return Err(FileError(format!($($t)*))) };
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    namespace: Vec<NamespaceToml>,
    #[serde(default)]
    mcp: Vec<McpToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceToml {
    global: String,
    error_class: Option<ErrorClassToml>,
    doc: Option<String>,
    #[serde(default)]
    functions: BTreeMap<String, FunctionToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorClassToml {
    name: String,
    /// `tool` unless told: the one name the CLI, the Python package and
    /// the stubs use.
    #[serde(default = "default_member_name_property")]
    member_name_property: String,
}

fn default_member_name_property() -> String {
    "tool".to_owned()
}

// Loose types (`toml::Value`) where a wrong shape should get our message,
// which names the entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionToml {
    command: Option<toml::Value>,
    http: Option<String>,
    headers: Option<BTreeMap<String, toml::Value>>,
    timeout_ms: Option<u64>,
    description: Option<String>,
    input_schema: Option<toml::Value>,
    output_schema: Option<toml::Value>,
    #[serde(default)]
    approval: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToml {
    global: String,
    command: Option<toml::Value>,
    url: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, toml::Value>,
    headers: Option<BTreeMap<String, toml::Value>>,
    timeout_ms: Option<u64>,
    include: Option<Vec<String>>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    approval: Vec<String>,
    error_class: Option<ErrorClassToml>,
    doc: Option<String>,
}

/// What a function does when called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionKind {
    Command(CommandSpec),
    Http(HttpSpec),
}

/// One function of a `[[namespace]]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDecl {
    pub kind: FunctionKind,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
    /// A call suspends the run until it is answered (`approval = true`).
    pub approval: bool,
}

/// One `[[namespace]]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceDecl {
    pub global: String,
    pub error_class: Option<ErrorClass>,
    pub doc: Option<String>,
    pub functions: BTreeMap<String, FunctionDecl>,
}

/// One `[[mcp]]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpDecl {
    pub spec: UpstreamSpec,
    pub error_class: Option<ErrorClass>,
    pub doc: Option<String>,
    /// Only these tools, when set (each must exist).
    pub include: Option<BTreeSet<String>>,
    /// Not these tools (each must exist).
    pub exclude: BTreeSet<String>,
    /// Tools whose calls suspend the run until answered (each must exist).
    pub approval: BTreeSet<String>,
}

/// A whole checked file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BindingsFile {
    pub namespaces: Vec<NamespaceDecl>,
    pub mcp: Vec<McpDecl>,
}

/// Reads and checks a bindings file against pycage's own environment.
/// Relative command paths resolve against the file's directory, which is
/// also each command's (and stdio server's) working directory.
pub fn read(path: &Path) -> Result<BindingsFile, FileError> {
    let label = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| FileError(format!("cannot read bindings file {label}: {e}")))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let base_dir =
        std::path::absolute(parent).map_err(|e| FileError(format!("{label}: cannot resolve its directory: {e}")))?;
    parse(&text, &label, &base_dir, &|k| std::env::var(k).ok())
}

/// Parses and checks the file's text. `label` prefixes every message;
/// `env` looks up `{ env = "NAME" }` values.
pub fn parse(
    text: &str,
    label: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BindingsFile, FileError> {
    let file: FileToml =
        toml::from_str(text).map_err(|e| FileError(format!("{label}: {}", e.to_string().trim_end())))?;
    let mut out = BindingsFile::default();
    for (i, ns) in file.namespace.into_iter().enumerate() {
        let at = format!("{label}: namespace[{i}] ({})", ns.global);
        let error_class = error_class(ns.error_class);
        check_one(&ns.global, &error_class).map_err(|e| FileError(format!("{at}: {e}")))?;
        let mut functions = BTreeMap::new();
        for (name, f) in ns.functions {
            let decl =
                function(f, base_dir, env).map_err(|e| FileError(format!("{at}: function {name:?}: {}", e.0)))?;
            functions.insert(name, decl);
        }
        out.namespaces.push(NamespaceDecl { global: ns.global, error_class, doc: ns.doc, functions });
    }
    for (i, mut m) in file.mcp.into_iter().enumerate() {
        let at = format!("{label}: mcp[{i}] ({})", m.global);
        let error_class = error_class(m.error_class.take());
        check_one(&m.global, &error_class).map_err(|e| FileError(format!("{at}: {e}")))?;
        let decl = mcp(m, error_class, base_dir, env).map_err(|e| FileError(format!("{at}: {}", e.0)))?;
        out.mcp.push(decl);
    }
    // Rules that span namespaces (distinct injected globals).
    let all: Vec<Namespace> = out
        .namespaces
        .iter()
        .map(|d| probe(&d.global, &d.error_class))
        .chain(out.mcp.iter().map(|d| probe(&d.spec.global, &d.error_class)))
        .collect();
    check_bindings(&all).map_err(|e| FileError(format!("{label}: {e}")))?;
    Ok(out)
}

fn error_class(ec: Option<ErrorClassToml>) -> Option<ErrorClass> {
    ec.map(|ec| ErrorClass { name: ec.name, member_name_property: ec.member_name_property })
}

fn probe(global: &str, error_class: &Option<ErrorClass>) -> Namespace {
    let mut n = Namespace::new(global);
    n.error_class = error_class.clone();
    n
}

fn check_one(global: &str, error_class: &Option<ErrorClass>) -> Result<(), pycage_runtime::NameError> {
    check_bindings(std::slice::from_ref(&probe(global, error_class)))
}

fn function(f: FunctionToml, base_dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<FunctionDecl, FileError> {
    let kind = match (f.command, f.http) {
        (Some(cmd), None) => {
            if f.headers.is_some() {
                bail!("headers are for http functions");
            }
            let (argv0, program, args) = argv(cmd, base_dir)?;
            let timeout = timeout(f.timeout_ms, command::DEFAULT_TIMEOUT)?;
            FunctionKind::Command(CommandSpec { program, argv0, args, cwd: base_dir.to_path_buf(), timeout })
        }
        (None, Some(url)) => FunctionKind::Http(HttpSpec {
            url: http_url(&url)?,
            timeout: timeout(f.timeout_ms, http::DEFAULT_TIMEOUT)?,
            headers: headers(f.headers.unwrap_or_default(), env)?,
        }),
        (Some(_), Some(_)) => bail!("give either command or http, not both"),
        (None, None) => bail!("needs command = [...] or http = \"http://...\""),
    };
    Ok(FunctionDecl {
        kind,
        description: f.description,
        input_schema: f
            .input_schema
            .map(|s| {
                let s = schema("input_schema", s)?;
                crate::schema::check_schema(&s).map_err(|e| FileError(format!("input_schema: {e}")))?;
                Ok::<_, FileError>(s)
            })
            .transpose()?,
        output_schema: f.output_schema.map(|s| schema("output_schema", s)).transpose()?,
        approval: f.approval,
    })
}

fn mcp(
    m: McpToml,
    error_class: Option<ErrorClass>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<McpDecl, FileError> {
    let transport = match (m.command, m.url) {
        (Some(cmd), None) => {
            if m.headers.is_some() {
                bail!("headers are for url servers; a command server gets env");
            }
            let (argv0, program, args) = argv(cmd, base_dir)?;
            let mut vars = Vec::with_capacity(m.env.len());
            for (k, v) in m.env {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    bail!("env name {k:?} is not a valid variable name");
                }
                let v = secret(&format!("env {k}"), v, env)?;
                if v.expose().contains('\0') {
                    bail!("env {k} contains a NUL byte");
                }
                vars.push((k, v));
            }
            UpstreamTransport::Stdio { argv0, program, args, cwd: base_dir.to_path_buf(), env: vars }
        }
        (None, Some(url)) => {
            if !m.env.is_empty() {
                bail!("env is for command servers; a url server gets headers");
            }
            UpstreamTransport::Http { url: http_url(&url)?, headers: headers(m.headers.unwrap_or_default(), env)? }
        }
        (Some(_), Some(_)) => bail!("give either command or url, not both"),
        (None, None) => bail!("needs command = [...] (stdio) or url = \"http://...\" (streamable HTTP)"),
    };
    let include = m.include.map(|v| v.into_iter().collect::<BTreeSet<_>>());
    if include.is_some() && !m.exclude.is_empty() {
        bail!("give include or exclude, not both");
    }
    Ok(McpDecl {
        spec: UpstreamSpec { global: m.global, transport, timeout: timeout(m.timeout_ms, upstream::DEFAULT_TIMEOUT)? },
        error_class,
        doc: m.doc,
        include,
        exclude: m.exclude.into_iter().collect(),
        approval: m.approval.into_iter().collect(),
    })
}

fn argv(cmd: toml::Value, base_dir: &Path) -> Result<(String, PathBuf, Vec<String>), FileError> {
    const SHAPE: &str = "command must be a non-empty array of strings";
    let toml::Value::Array(items) = cmd else { bail!("{SHAPE}") };
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
    Ok((argv0.clone(), resolve_program(&argv0, base_dir), argv.collect()))
}

fn timeout(ms: Option<u64>, default: Duration) -> Result<Duration, FileError> {
    match ms {
        None => Ok(default),
        Some(0) => bail!("timeout_ms must be at least 1"),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
}

fn http_url(url: &str) -> Result<reqwest::Url, FileError> {
    let u = reqwest::Url::parse(url).map_err(|e| FileError(format!("{url:?} is not a URL: {e}")))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        bail!("{url:?} is not an http:// or https:// URL");
    }
    Ok(u)
}

fn headers(
    h: BTreeMap<String, toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(reqwest::header::HeaderName, Secret)>, FileError> {
    let mut out = Vec::with_capacity(h.len());
    for (k, v) in h {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| FileError(format!("header name {k:?} is not valid")))?;
        let v = secret(&format!("header {k}"), v, env)?;
        if reqwest::header::HeaderValue::from_str(v.expose()).is_err() {
            // Never quote the value: it may be a secret.
            bail!("header {k}: the value is not a valid header value");
        }
        out.push((name, v));
    }
    Ok(out)
}

/// A literal string or `{ env = "NAME" }`.
fn secret(what: &str, v: toml::Value, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, FileError> {
    match v {
        toml::Value::String(s) => Ok(Secret::new(s)),
        toml::Value::Table(t) if t.len() == 1 => match t.get("env") {
            Some(toml::Value::String(name)) => match env(name) {
                Some(value) => Ok(Secret::new(value)),
                None => bail!("{what}: the environment variable {name} is not set"),
            },
            _ => bail!("{what} must be a string or {{ env = \"NAME\" }}"),
        },
        _ => bail!("{what} must be a string or {{ env = \"NAME\" }}"),
    }
}

/// A JSON Schema given as a TOML table or as a string of JSON.
fn schema(what: &str, v: toml::Value) -> Result<Value, FileError> {
    let json = match v {
        toml::Value::String(s) => {
            serde_json::from_str(&s).map_err(|e| FileError(format!("{what} is not JSON: {e}")))?
        }
        other => serde_json::to_value(other).map_err(|e| FileError(format!("{what}: {e}")))?,
    };
    if !json.is_object() {
        bail!("{what} must be a JSON Schema object");
    }
    Ok(json)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "API_TOKEN" => Some("Bearer s3cret".into()),
            "BAD" => Some("a\nb".into()),
            _ => None,
        }
    }

    fn ok(text: &str) -> BindingsFile {
        parse(text, "b.toml", Path::new("/base"), &env).unwrap()
    }

    fn err(text: &str) -> String {
        parse(text, "b.toml", Path::new("/base"), &env).unwrap_err().0
    }

    fn cmd(argv0: &str, program: &str, args: &[&str], timeout_ms: u64) -> FunctionDecl {
        FunctionDecl {
            kind: FunctionKind::Command(CommandSpec {
                argv0: argv0.into(),
                program: program.into(),
                args: args.iter().map(|s| s.to_string()).collect(),
                cwd: "/base".into(),
                timeout: Duration::from_millis(timeout_ms),
            }),
            description: None,
            input_schema: None,
            output_schema: None,
            approval: false,
        }
    }

    #[test]
    fn full_file() {
        let file = ok(r#"
            [[namespace]]
            global = "tools"
            error_class = { name = "ToolError", member_name_property = "tool" }
            doc = "Tools."

            [namespace.functions]
            echo = { command = ["cat"] }
            "my-tool" = { command = ["./bin/my_tool.sh", "--x", "y"], timeout_ms = 5000, approval = true }
            "" = { command = ["/usr/bin/env", "true"], approval = false }
            weather = { http = "http://127.0.0.1:9/w?k=1", timeout_ms = 700, headers = { Authorization = { env = "API_TOKEN" }, X-Mode = "fast" }, description = "Weather.", input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }, output_schema = '{"type": "object"}' }

            [[namespace]]
            global = "db"

            [[mcp]]
            global = "gh"
            command = ["npx", "server"]
            env = { TOKEN = { env = "API_TOKEN" }, MODE = "ro" }
            timeout_ms = 1234
            include = ["a", "b"]
            approval = ["b"]
            error_class = { name = "GhError", member_name_property = "tool" }

            [[mcp]]
            global = "remote"
            url = "http://127.0.0.1:3000/mcp"
            headers = { Authorization = { env = "API_TOKEN" } }
            exclude = ["x"]
        "#);
        let want_fns = BTreeMap::from([
            (String::new(), cmd("/usr/bin/env", "/usr/bin/env", &["true"], 30_000)),
            ("echo".to_string(), cmd("cat", "cat", &[], 30_000)),
            (
                "my-tool".to_string(),
                FunctionDecl {
                    approval: true,
                    ..cmd("./bin/my_tool.sh", "/base/./bin/my_tool.sh", &["--x", "y"], 5000)
                },
            ),
            (
                "weather".to_string(),
                FunctionDecl {
                    kind: FunctionKind::Http(HttpSpec {
                        url: reqwest::Url::parse("http://127.0.0.1:9/w?k=1").unwrap(),
                        timeout: Duration::from_millis(700),
                        headers: vec![
                            ("authorization".parse().unwrap(), Secret::new("Bearer s3cret")),
                            ("x-mode".parse().unwrap(), Secret::new("fast")),
                        ],
                    }),
                    description: Some("Weather.".into()),
                    input_schema: Some(serde_json::json!({
                        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]
                    })),
                    output_schema: Some(serde_json::json!({"type": "object"})),
                    approval: false,
                },
            ),
        ]);
        assert_eq!(
            file.namespaces,
            vec![
                NamespaceDecl {
                    global: "tools".into(),
                    error_class: Some(ErrorClass { name: "ToolError".into(), member_name_property: "tool".into() }),
                    doc: Some("Tools.".into()),
                    functions: want_fns,
                },
                NamespaceDecl { global: "db".into(), error_class: None, doc: None, functions: BTreeMap::new() },
            ]
        );
        assert_eq!(
            file.mcp,
            vec![
                McpDecl {
                    spec: UpstreamSpec {
                        global: "gh".into(),
                        transport: UpstreamTransport::Stdio {
                            argv0: "npx".into(),
                            program: "npx".into(),
                            args: vec!["server".into()],
                            cwd: "/base".into(),
                            env: vec![
                                ("MODE".into(), Secret::new("ro")),
                                ("TOKEN".into(), Secret::new("Bearer s3cret"))
                            ],
                        },
                        timeout: Duration::from_millis(1234),
                    },
                    error_class: Some(ErrorClass { name: "GhError".into(), member_name_property: "tool".into() }),
                    doc: None,
                    include: Some(["a".to_string(), "b".to_string()].into()),
                    exclude: BTreeSet::new(),
                    approval: ["b".to_string()].into(),
                },
                McpDecl {
                    spec: UpstreamSpec {
                        global: "remote".into(),
                        transport: UpstreamTransport::Http {
                            url: reqwest::Url::parse("http://127.0.0.1:3000/mcp").unwrap(),
                            headers: vec![("authorization".parse().unwrap(), Secret::new("Bearer s3cret"))],
                        },
                        timeout: upstream::DEFAULT_TIMEOUT,
                    },
                    error_class: None,
                    doc: None,
                    include: None,
                    exclude: ["x".to_string()].into(),
                    approval: BTreeSet::new(),
                },
            ]
        );
    }

    #[test]
    fn empty_file_has_no_namespaces() {
        assert_eq!(ok(""), BindingsFile::default());
    }

    #[test]
    fn bad_commands_name_the_entry() {
        let base = "[[namespace]]\nglobal = \"tools\"\n[namespace.functions]\n";
        let shape = "b.toml: namespace[0] (tools): function \"echo\": command must be a non-empty array of strings";
        for c in ["[]", "\"cat\"", "[1]", "[\"cat\", 2]", "{ a = 1 }"] {
            assert_eq!(err(&format!("{base}echo = {{ command = {c} }}")), shape, "{c}");
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
    fn bad_http_and_mcp_entries_name_the_entry() {
        let f = "[[namespace]]\nglobal = \"t\"\n[namespace.functions]\n";
        let at = "b.toml: namespace[0] (t): function \"w\": ";
        let cases = [
            ("w = { timeout_ms = 5 }", "needs command = [...] or http = \"http://...\""),
            ("w = { command = [\"x\"], http = \"http://a\" }", "give either command or http, not both"),
            ("w = { http = \"ftp://a\" }", "\"ftp://a\" is not an http:// or https:// URL"),
            (
                "w = { http = \"http://a\", headers = { A = { env = \"NOPE\" } } }",
                "header A: the environment variable NOPE is not set",
            ),
            (
                "w = { http = \"http://a\", headers = { A = { env = \"BAD\" } } }",
                "header A: the value is not a valid header value",
            ),
            ("w = { http = \"http://a\", headers = { A = 1 } }", "header A must be a string or { env = \"NAME\" }"),
            ("w = { http = \"http://a\", headers = { \"a b\" = \"x\" } }", "header name \"a b\" is not valid"),
            ("w = { command = [\"x\"], headers = { A = \"x\" } }", "headers are for http functions"),
            (
                "w = { command = [\"x\"], input_schema = \"[1\" }",
                "input_schema is not JSON: EOF while parsing a list at line 1 column 2",
            ),
            ("w = { command = [\"x\"], output_schema = [1] }", "output_schema must be a JSON Schema object"),
        ];
        for (entry, want) in cases {
            assert_eq!(err(&format!("{f}{entry}")), format!("{at}{want}"), "{entry}");
        }
        let m = "[[mcp]]\nglobal = \"gh\"\n";
        let at = "b.toml: mcp[0] (gh): ";
        let cases = [
            ("", "needs command = [...] (stdio) or url = \"http://...\" (streamable HTTP)"),
            ("command = [\"x\"]\nurl = \"http://a\"", "give either command or url, not both"),
            ("command = [\"x\"]\nheaders = { A = \"b\" }", "headers are for url servers; a command server gets env"),
            ("url = \"http://a\"\nenv = { A = \"b\" }", "env is for command servers; a url server gets headers"),
            ("command = [\"x\"]\nenv = { A = { env = \"NOPE\" } }", "env A: the environment variable NOPE is not set"),
            ("command = [\"x\"]\ninclude = [\"a\"]\nexclude = [\"b\"]", "give include or exclude, not both"),
            ("command = [\"x\"]\ntimeout_ms = 0", "timeout_ms must be at least 1"),
        ];
        for (entry, want) in cases {
            assert_eq!(err(&format!("{m}{entry}\n")), format!("{at}{want}"), "{entry}");
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors() {
        let e = err("[[namespace]]\nglobal = \"t\"\n[namespace.functions]\necho = { comand = [\"cat\"] }\n");
        assert!(e.starts_with("b.toml: ") && e.contains("unknown field `comand`") && e.contains("line 4"), "{e}");
        let e = err("[[namespace]]\nglobal = \"t\"\nextra = 1\n");
        assert!(e.contains("unknown field `extra`"), "{e}");
        let e = err("[[namespaces]]\nglobal = \"t\"\n");
        assert!(e.contains("unknown field `namespaces`"), "{e}");
        let e = err("[[mcp]]\nglobal = \"t\"\ncommand = [\"x\"]\nenviron = {}\n");
        assert!(e.contains("unknown field `environ`"), "{e}");
        let e =
            err("[[namespace]]\nglobal = \"t\"\nerror_class = { name = \"E\", member_name_property = \"p\", x = 1 }\n");
        assert!(e.contains("unknown field `x`"), "{e}");
        let e = err(
            "[[namespace]]\nglobal = \"t\"\n[namespace.functions]\necho = { command = [\"cat\"], timeout_ms = -1 }\n",
        );
        assert!(e.contains("line 4"), "{e}");
        let e = err("[[namespace]]\n[namespace.functions]\n");
        assert!(e.contains("missing field `global`"), "{e}");
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
        assert!(err("[[mcp]]\nglobal = \"class\"\ncommand = [\"x\"]\n").starts_with("b.toml: mcp[0] (class): "));
        let e =
            err("[[namespace]]\nglobal = \"t\"\nerror_class = { name = \"E\", member_name_property = \"message\" }\n");
        assert!(e.starts_with("b.toml: namespace[0] (t): member_name_property \"message\""), "{e}");
        let e = err("[[namespace]]\nglobal = \"t\"\n[[mcp]]\nglobal = \"t\"\ncommand = [\"x\"]\n");
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
