//! Packages without a wheel, built where their code may run: a sandboxed
//! run (`RuntimeConfig::allow_builds`).
//!
//! A build runs the package's own code (`setup.py`, a PEP 517 backend), so
//! it never runs on the host. [`SandboxBuilder`] runs pip instead in a run
//! of a `Core` of its own, made for the build and shut down after it:
//!
//! - sandbox isolation, whatever the runtime's own, exec'd (no zygote, no
//!   preload, no packages of its own, no builds of its own);
//! - the runtime's interpreter (the set must suit it) and budgets, with the
//!   install timeout as the wall clock and the disk budget as what `out/`
//!   may bring back;
//! - network only to the package index, through the egress proxy: the
//!   index named by `PIP_INDEX_URL` or `UV_INDEX_URL` in the host's
//!   environment, else PyPI (`pypi.org` and `files.pythonhosted.org`);
//! - the requirements as data: a JSON list in the program, each after
//!   `--` on pip's command line;
//! - its only output the run's `out/site`, copied by the host as any
//!   run's `out/` is (regular files and directories only, bounded), then
//!   checked by `pycage_packages` like any install before it enters the
//!   cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pycage_egress::NetRule;
use pycage_packages::{Builder, Requirement};
use tokio_util::sync::CancellationToken;

use crate::config::{Isolation, RuntimeConfig, SpawnMode};
use crate::lifecycle::{self, Core, Keep, Plan};

/// The index a build installs from when the host names none.
const PYPI: &str = "https://pypi.org/simple";

/// How much of pip's output a failed build reports.
const OUTPUT_TAIL_BYTES: usize = 3000;

/// Builds packages in a sandboxed run (see the module docs).
pub(crate) struct SandboxBuilder {
    config: RuntimeConfig,
    index: String,
    /// The certificate bundle pip verifies the index with, if the host's
    /// user named one (`PIP_CERT`, `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`):
    /// shown read-only in the build's sandbox at its own path.
    cert: Option<PathBuf>,
}

impl SandboxBuilder {
    /// The builder of a runtime made with `config`, if it allows builds.
    pub(crate) fn for_runtime(config: &RuntimeConfig) -> Option<Arc<dyn Builder>> {
        if !config.allow_builds {
            return None;
        }
        let index = ["PIP_INDEX_URL", "UV_INDEX_URL"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| PYPI.to_owned());
        let cert = ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"]
            .iter()
            .filter_map(std::env::var_os)
            .map(PathBuf::from)
            .find(|p| p.is_absolute() && p.is_file());
        let mut build = build_config(config, &index);
        build.allow_read.extend(cert.iter().cloned());
        Some(Arc::new(SandboxBuilder { config: build, index, cert }))
    }

    /// Runs the build and moves what it made to `site`.
    async fn run(
        &self,
        requirements: &[Requirement],
        site: &Path,
        deadline: Instant,
        cancel: CancellationToken,
    ) -> Result<(), String> {
        let wall = deadline.saturating_duration_since(Instant::now());
        if wall.is_zero() {
            return Err("no time was left for the build".to_owned());
        }
        let mut config = self.config.clone();
        config.wall_time = wall;
        let core = Core::new(config, None).map_err(|e| format!("the build's sandbox could not be made: {e}"))?;
        let staging = site.with_extension("built");
        let outcome = run_pip(&core, &self.index, self.cert.as_deref(), requirements, &staging, cancel).await;
        core.shutdown().await;
        let built = outcome?;
        std::fs::rename(&built, site).map_err(|e| format!("moving what the build made: {e}"))
    }
}

impl Builder for SandboxBuilder {
    fn install(
        &self,
        requirements: &[Requirement],
        site: &Path,
        deadline: (Instant, Duration),
        cancel: &AtomicBool,
    ) -> Result<(), String> {
        // Called from blocking code, inside or outside a tokio runtime: the
        // build gets a runtime of its own on a thread of its own.
        std::thread::scope(|scope| {
            let build = scope.spawn(|| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .map_err(|e| format!("the build's async runtime could not start: {e}"))?;
                rt.block_on(async {
                    // A cancel aborts the build's run, which then settles
                    // and is reaped like any run before its runtime shuts
                    // down: nothing of it is left behind.
                    let token = CancellationToken::new();
                    let build = self.run(requirements, site, deadline.0, token.clone());
                    tokio::pin!(build);
                    tokio::select! {
                        r = &mut build => r,
                        () = cancelled(cancel) => {
                            token.cancel();
                            let _ = build.await;
                            Err("cancelled".to_owned())
                        }
                    }
                })
            });
            build.join().unwrap_or_else(|_| Err("the build's thread panicked".to_owned()))
        })
    }
}

/// Returns once `cancel` is set.
async fn cancelled(cancel: &AtomicBool) {
    while !cancel.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The build's run: pip, in the sandbox, into `out/site`; `out/` is
/// copied to `staging`. The installed tree, or why there is none.
async fn run_pip(
    core: &Core,
    index: &str,
    cert: Option<&Path>,
    requirements: &[Requirement],
    staging: &Path,
    cancel: CancellationToken,
) -> Result<PathBuf, String> {
    std::fs::create_dir(staging).map_err(|e| format!("the build's output directory: {e}"))?;
    let plan = Plan {
        program: pip_program(index, cert, requirements),
        bindings: Vec::new(),
        cancel,
        stop: core.shutdown_token(),
        events: None,
        inputs: Vec::new(),
        output_dir: Some(staging.to_path_buf()),
        transcript: None,
        config: Arc::clone(&core.config),
        type_check: false,
        history: None,
        durable: None,
    };
    let result = lifecycle::run(core, plan, Keep::OneShot).await.result;
    if let Some(e) = &result.error {
        return Err(format!("the build's run ended as {}: {}", e.kind.as_str(), e.message));
    }
    let answer = result.value.as_ref().map(|v| v.root());
    let field = |key: &str| answer.and_then(|a| a.get(key));
    let status = field("status").and_then(|s| s.as_number()).and_then(|n| n.as_i64());
    let output = field("output").and_then(|o| o.as_str()).unwrap_or("").to_owned();
    if status != Some(0) {
        return Err(format!("pip exited with status {}: {output}", status.map_or("?".into(), |s| s.to_string())));
    }
    if result.output.as_ref().is_some_and(|o| o.incomplete()) {
        return Err("what the build made did not fit its output budget (the disk budget, 10,000 entries)".into());
    }
    let site = staging.join("site");
    if site.is_dir() {
        Ok(site)
    } else {
        // Every requirement's marker was false: nothing to install.
        std::fs::create_dir(&site).map_err(|e| format!("the build's site directory: {e}"))?;
        Ok(site)
    }
}

/// The build's program: the requirements as a JSON list (data), pip run
/// as a child so that its exit status and output come back as the value.
fn pip_program(index: &str, cert: Option<&Path>, requirements: &[Requirement]) -> String {
    let quote = |s: &str| {
        let mut out = Vec::new();
        pycage_protocol::write_json_string(&mut out, s);
        String::from_utf8(out).unwrap_or_default()
    };
    let list: Vec<String> = requirements.iter().map(|r| quote(&r.text)).collect();
    // In the environment, not on the command line: pip's own children
    // (the build dependencies' install) read it too.
    let cert = cert.map_or(String::new(), |c| {
        let c = quote(&c.to_string_lossy());
        format!("env['PIP_CERT'] = env['SSL_CERT_FILE'] = {c}\n")
    });
    format!(
        "import os, subprocess, sys\n\
         try:\n\
         \x20   import pip\n\
         except ImportError:\n\
         \x20   return {{'status': -1, 'output': 'building needs pip in the interpreter or venv (python -m ensurepip)'}}\n\
         requirements = [{}]\n\
         env = dict(os.environ)\n\
         {cert}\
         command = [sys.executable, '-m', 'pip', 'install', '--no-input', '--disable-pip-version-check',\n\
         \x20          '--no-cache-dir', '--progress-bar', 'off', '--index-url', {}, '--target', 'out/site',\n\
         \x20          '--', *requirements]\n\
         done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,\n\
         \x20                     stderr=subprocess.STDOUT, text=True, errors='replace')\n\
         return {{'status': done.returncode, 'output': done.stdout[-{OUTPUT_TAIL_BYTES}:]}}\n",
        list.join(", "),
        quote(index),
    )
}

/// The build's runtime: see the module docs.
fn build_config(outer: &RuntimeConfig, index: &str) -> RuntimeConfig {
    let mut allow_net: Vec<NetRule> = Vec::new();
    if let Some(rule) = index_rule(index) {
        let pypi = rule.to_string() == "pypi.org:443";
        allow_net.push(rule);
        if pypi {
            allow_net.extend("files.pythonhosted.org:443".parse::<NetRule>().ok());
        }
    }
    RuntimeConfig {
        isolation: Isolation::Sandbox,
        spawn: SpawnMode::Exec,
        preload: Vec::new(),
        with_packages: Vec::new(),
        allow_packages: Vec::new(),
        allow_any_package: false,
        allow_builds: false,
        allow_net,
        max_output_bytes: outer.disk_bytes,
        // A build's compiler and pip's own children.
        max_processes: outer.max_processes.max(64),
        wall_time: outer.install_timeout,
        shell_helper: None,
        type_check: false,
        journal_key: None,
        pool_size: 0,
        ..outer.clone()
    }
}

/// The allow-list rule of an index URL's host and port.
fn index_rule(url: &str) -> Option<NetRule> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let port = match scheme {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    NetRule::parse_authority(authority, Some(port)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_is_sandboxed_exec_d_and_reaches_only_the_index() {
        let outer = RuntimeConfig {
            isolation: Isolation::Process,
            allow_builds: true,
            allow_any_package: true,
            with_packages: vec!["tabulate".into()],
            preload: vec!["json".into()],
            ..RuntimeConfig::default()
        };
        let c = build_config(&outer, PYPI);
        assert_eq!((c.isolation, c.spawn), (Isolation::Sandbox, SpawnMode::Exec));
        assert!(!c.allow_builds && !c.allow_any_package && c.with_packages.is_empty() && c.preload.is_empty());
        let rules: Vec<String> = c.allow_net.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["pypi.org:443", "files.pythonhosted.org:443"]);
        let mirror = build_config(&outer, "http://user:secret@mirror.internal:8080/simple/");
        let rules: Vec<String> = mirror.allow_net.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["mirror.internal:8080"]);
        assert!(build_config(&outer, "file:///srv/wheels").allow_net.is_empty());
    }

    #[test]
    fn requirements_are_data_in_the_program() {
        let reqs = [Requirement::parse("docopt==0.6.2").unwrap()];
        let program = pip_program(PYPI, Some(Path::new("/etc/ca.pem")), &reqs);
        assert!(program.contains("env['PIP_CERT'] = env['SSL_CERT_FILE'] = \"/etc/ca.pem\"\n"), "{program}");
        assert!(program.contains("requirements = [\"docopt==0.6.2\"]"), "{program}");
        assert!(program.contains("'--', *requirements]"), "{program}");
    }
}
