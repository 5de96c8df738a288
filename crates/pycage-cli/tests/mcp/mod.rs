//! The real MCP parts the MCP tests drive, installed by `.ci/mcp-deps.sh`:
//! the official Python SDK in a venv (for `client.py` and `upstream.py`
//! beside this file) and `@modelcontextprotocol/server-everything`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where `.ci/mcp-deps.sh` installed things.
pub struct Deps {
    /// The venv's python, which has the `mcp` package.
    pub python: PathBuf,
    /// `mcp-server-everything` (speaks stdio with the argument `stdio`).
    pub everything: PathBuf,
}

impl Deps {
    /// `$PYCAGE_MCP_DEPS`, default `<workspace>/target/mcp-deps`. Missing:
    /// panics when `PYCAGE_REQUIRE_ALL_TESTS=1`, else prints why and gives `None`.
    pub fn find() -> Option<Deps> {
        let root = match std::env::var_os("PYCAGE_MCP_DEPS") {
            Some(d) => PathBuf::from(d),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-deps"),
        };
        let deps = Deps {
            python: root.join("venv/bin/python"),
            everything: root.join("npm/node_modules/.bin/mcp-server-everything"),
        };
        if deps.python.exists() && deps.everything.exists() {
            return Some(deps);
        }
        let why = format!("the MCP test dependencies are not installed in {} (run .ci/mcp-deps.sh)", root.display());
        if std::env::var("PYCAGE_REQUIRE_ALL_TESTS").as_deref() == Ok("1") {
            panic!("PYCAGE_REQUIRE_ALL_TESTS=1 and {why}");
        }
        #[allow(clippy::print_stderr)] // the test harness shows it: why this test did nothing
        {
            eprintln!("skipped: {why}");
        }
        None
    }

    /// A file beside this one.
    pub fn script(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp").join(name)
    }

    /// The argv of the Python test upstream (stdio), logging events to `events`.
    pub fn upstream_argv(&self, events: &Path) -> Vec<String> {
        vec![
            self.python.display().to_string(),
            Self::script("upstream.py").display().to_string(),
            "--events".into(),
            events.display().to_string(),
        ]
    }

    /// Runs `client.py` with `plan`; one JSON value per step.
    pub fn drive(&self, plan: &serde_json::Value, envs: &[(&str, &str)]) -> Vec<serde_json::Value> {
        let mut cmd = Command::new(&self.python);
        cmd.arg(Self::script("client.py")).arg(plan.to_string()).stdin(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "client.py failed ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

/// A child process killed (and reaped) on drop.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `argv` and reads its stdout until a line starting with `prefix`;
/// returns the child and the rest of that line.
pub fn spawn_announcing(mut cmd: Command, prefix: &str, on_stderr: bool) -> (Child, String) {
    use std::io::{BufRead, BufReader};
    if on_stderr {
        cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    }
    let mut child = Child(cmd.stdin(Stdio::null()).spawn().unwrap());
    let stream: Box<dyn std::io::Read + Send> =
        if on_stderr { Box::new(child.0.stderr.take().unwrap()) } else { Box::new(child.0.stdout.take().unwrap()) };
    let mut lines = BufReader::new(stream).lines();
    loop {
        let line = lines.next().unwrap_or_else(|| panic!("exited before printing {prefix:?}")).unwrap();
        if let Some(rest) = line.strip_prefix(prefix) {
            let rest = rest.trim().to_string();
            // Keep draining so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return (child, rest);
        }
    }
}
