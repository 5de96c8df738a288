//! `pycage doctor`: what this machine supports, and what the configuration uses.
//!
//! It probes the interpreter the way a run would and every sandbox layer
//! (`pycage_sandbox::probe`), prints one line per item (or one JSON object
//! with `--json`), and exits 1 when the chosen configuration cannot run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use pycage_runtime::{Isolation, Runtime, RuntimeConfig};

use crate::{output, IsolationArg};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The interpreter to check (default: `python3` on PATH).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// The isolation to check (default: the runtime's default).
    #[arg(long, value_enum)]
    isolation: Option<IsolationArg>,
}

impl DoctorArgs {
    /// Whether output (misuse included) is JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

pub fn main(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut config = RuntimeConfig { python: args.python.clone(), ..RuntimeConfig::default() };
    if let Some(i) = args.isolation {
        config.isolation = i.into();
    }
    let interpreter = pycage_runtime::interpreter::probe(config.python.as_deref());
    let avail = pycage_sandbox::probe();
    let uses_sandbox = config.isolation == Isolation::Sandbox;
    // The real test: can a runtime with this configuration be built?
    let runtime = Runtime::new(config.clone());
    let ok = runtime.is_ok();

    let mut json = pycage_protocol::JsonBuilder::new();
    let mut lines = Vec::new();
    let build = (|| -> Result<(), pycage_protocol::BuildError> {
        json.begin_object()?;
        json.key("isolation")?;
        json.string(config.isolation.as_str())?;
        lines.push(format!("isolation: {}", config.isolation.as_str()));
        json.key("interpreter")?;
        json.begin_object()?;
        match &interpreter {
            Ok(i) => {
                let v = format!("{}.{}.{}", i.version.0, i.version.1, i.version.2);
                json.key("ok")?;
                json.bool(true)?;
                json.key("executable")?;
                json.string(&i.executable.to_string_lossy())?;
                json.key("version")?;
                json.string(&v)?;
                lines.push(format!("interpreter: ok  CPython {v} at {}", i.executable.display()));
            }
            Err(e) => {
                json.key("ok")?;
                json.bool(false)?;
                json.key("error")?;
                json.string(&e.to_string())?;
                lines.push(format!("interpreter: MISSING  {e}"));
            }
        }
        json.end()?;
        json.key("layers")?;
        json.begin_array()?;
        for (name, layer) in avail.layers() {
            // "Used" means a run with this configuration applies it: only a
            // supported layer can be, and cgroup v2 limits never are.
            let used = uses_sandbox && layer.supported && name != "cgroup-v2";
            json.begin_object()?;
            json.key("name")?;
            json.string(name)?;
            json.key("supported")?;
            json.bool(layer.supported)?;
            json.key("used")?;
            json.bool(used)?;
            json.key("reason")?;
            json.string(&layer.reason)?;
            json.end()?;
            lines.push(format!(
                "{name:<16} {:<13} {:<7} {}",
                if layer.supported { "supported" } else { "not supported" },
                if used { "used" } else { "unused" },
                layer.reason
            ));
        }
        json.end()?;
        json.key("ok")?;
        json.bool(ok)?;
        if let Err(e) = &runtime {
            json.key("error")?;
            json.string(&e.to_string())?;
        }
        json.end()
    })();
    build.map_err(|e| anyhow::anyhow!("building the report: {e}"))?;
    if args.json {
        let v = json.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
        output::stdout_line(&v.to_canonical_string())?;
    } else {
        match &runtime {
            Ok(_) => lines.push("ok: this configuration can run programs".into()),
            Err(e) => lines.push(format!("NOT OK: {e}")),
        }
        output::stdout_lines(lines.iter().map(String::as_str))?;
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
