//! `pycage doctor`: what this machine supports, and what the configuration uses.
//!
//! It probes the interpreter the way a run would and every sandbox layer
//! (`pycage_sandbox::probe`: a missing layer comes with the reason and
//! what to do), says which mechanism enforces each budget (memory, CPU,
//! processes, disk) with its exact bound, prints one line per item (or one
//! JSON object with `--json`), and exits 1 when the chosen configuration
//! cannot run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use pycage_runtime::{Isolation, Runtime, RuntimeConfig};

use crate::common::IsolationArg;
use crate::output;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The interpreter to check (default: `python3` on PATH).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// The virtual environment to check: what a run in it sees.
    #[arg(long, value_name = "PATH", conflicts_with = "python")]
    venv: Option<PathBuf>,
    /// Modules to preload, checked as the runtime would (repeatable).
    #[arg(long, value_name = "MODULE", value_delimiter = ',')]
    preload: Vec<String>,
    /// The isolation to check (default: the runtime's default).
    #[arg(long, value_enum)]
    isolation: Option<IsolationArg>,
    /// The ty binary to check for `--type-check` (default: beside the
    /// interpreter, else on PATH).
    #[arg(long, value_name = "PATH")]
    ty: Option<PathBuf>,
    /// The budgets to show (as `run` takes them; default: `run`'s defaults).
    #[command(flatten)]
    budgets: crate::budget_flags::BudgetArgs,
}

impl DoctorArgs {
    /// Whether output (misuse included) is JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

pub fn main(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut config = RuntimeConfig {
        python: args.python.clone(),
        venv: args.venv.clone(),
        preload: args.preload.clone(),
        cache_dir: pycage_runtime::default_cache_dir(),
        // No zygote: the doctor runs nothing.
        spawn: pycage_runtime::SpawnMode::Exec,
        ..RuntimeConfig::default()
    };
    if let Some(i) = args.isolation {
        config.isolation = i.into();
    }
    args.budgets.apply(&mut config)?;
    let avail = pycage_sandbox::probe();
    let uses_sandbox = config.isolation == Isolation::Sandbox;
    // The real test: can a runtime with this configuration be built?
    let runtime = Runtime::new(config.clone());
    let ok = runtime.is_ok();
    let interpreter = match &runtime {
        Ok(rt) => Ok(rt.interpreter().clone()),
        Err(_) => {
            let python = match &config.venv {
                Some(venv) => Some(venv.join("bin/python")),
                None => config.python.clone(),
            };
            pycage_runtime::interpreter::probe(python.as_deref())
        }
    };

    let mut json = pycage_protocol::JsonBuilder::new();
    let mut lines = Vec::new();
    let build = (|| -> Result<(), pycage_protocol::BuildError> {
        json.begin_object()?;
        json.key("isolation")?;
        json.string(config.isolation.as_str())?;
        lines.push(format!("isolation: {}", config.isolation.as_str()));
        if config.isolation == Isolation::Process && rustix::process::geteuid().is_root() {
            // Process isolation keeps the caller's uid: as root, a program
            // can read and write whatever root can.
            lines.push(
                "warning: programs run as root (uid 0) with process isolation: they can read and change what root \
                 can; use the sandbox, or run pycage as another user"
                    .into(),
            );
        }
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
                if let Some(venv) = &i.venv {
                    json.key("venv")?;
                    json.string(&venv.to_string_lossy())?;
                    lines.push(format!("venv: {}", venv.display()));
                }
                json.key("sys_path")?;
                json.begin_array()?;
                for p in &i.sys_path {
                    json.string(&p.to_string_lossy())?;
                    lines.push(format!("sys.path: {}", p.display()));
                }
                json.end()?;
            }
            Err(e) => {
                // In the CLI's words (`--python`), not the library's.
                let e = e.explain(&crate::common::CliSpelling);
                json.key("ok")?;
                json.bool(false)?;
                json.key("error")?;
                json.string(&e)?;
                lines.push(format!("interpreter: MISSING  {e}"));
            }
        }
        json.end()?;
        // The type checker `--type-check` would use; missing is no fault
        // unless checks are wanted.
        json.key("type_checker")?;
        json.begin_object()?;
        let python = interpreter.as_ref().map(|i| i.executable.clone()).unwrap_or_default();
        match pycage_runtime::typecheck::locate::find(args.ty.as_deref(), &python) {
            Ok(ty) => {
                json.key("ok")?;
                json.bool(true)?;
                json.key("path")?;
                json.string(&ty.to_string_lossy())?;
                let tested = pycage_runtime::typecheck::TESTED_TY_VERSION;
                match pycage_runtime::typecheck::locate::version(&ty) {
                    Ok(v) => {
                        json.key("version")?;
                        json.string(&v)?;
                        lines.push(format!(
                            "type checker: ok  {v} at {} (pycage is tested with ty {tested})",
                            ty.display()
                        ));
                    }
                    Err(e) => {
                        json.key("error")?;
                        json.string(&e)?;
                        lines.push(format!("type checker: BROKEN  {e}"));
                    }
                }
            }
            Err(e) => {
                // In the CLI's words (`--ty`), not the library's.
                let e = match e {
                    pycage_runtime::typecheck::LocateError::Configured(path) => {
                        format!("--ty {} is not an executable file", path.display())
                    }
                    pycage_runtime::typecheck::LocateError::NotFound(dir) => {
                        format!("no ty beside the interpreter ({}) nor on PATH", dir.display())
                    }
                };
                let e = format!(
                    "{e}; --type-check needs it: `pip install ty=={}` into the interpreter's venv, or --ty PATH",
                    pycage_runtime::typecheck::TESTED_TY_VERSION
                );
                json.key("ok")?;
                json.bool(false)?;
                json.key("error")?;
                json.string(&e)?;
                lines.push(format!("type checker: not found  {e}"));
            }
        }
        json.end()?;
        if let Some(view) = runtime.as_ref().ok().and_then(Runtime::sandbox_view) {
            json.key("sandbox_sees")?;
            json.begin_object()?;
            json.key("python")?;
            json.string(&view.python.to_string_lossy())?;
            lines.push(format!("sandbox runs: {}", view.python.display()));
            json.key("read_only")?;
            json.begin_array()?;
            for p in &view.read_only {
                json.string(&p.to_string_lossy())?;
                lines.push(format!("sandbox sees: {} (read-only)", p.display()));
            }
            json.end()?;
            json.key("remapped")?;
            json.begin_array()?;
            for (host, inside) in &view.remapped {
                json.begin_object()?;
                json.key("host")?;
                json.string(&host.to_string_lossy())?;
                json.key("inside")?;
                json.string(&inside.to_string_lossy())?;
                json.end()?;
                lines.push(format!("sandbox sees: {} at {} (read-only)", host.display(), inside.display()));
            }
            json.end()?;
            json.key("env")?;
            json.begin_object()?;
            for (k, v) in &view.env {
                json.key(k)?;
                json.string(v)?;
                lines.push(format!("sandbox env: {k}={v}"));
            }
            json.end()?;
            json.end()?;
        }
        json.key("layers")?;
        json.begin_array()?;
        for (name, layer) in avail.layers() {
            json.begin_object()?;
            json.key("name")?;
            json.string(name)?;
            json.key("supported")?;
            json.bool(layer.supported)?;
            json.key("used")?;
            json.bool(used(uses_sandbox, layer))?;
            json.key("reason")?;
            json.string(&layer.reason)?;
            json.end()?;
        }
        json.end()?;
        json.key("budgets")?;
        json.begin_array()?;
        for (name, enforcers) in budgets(&config, &avail) {
            json.begin_object()?;
            json.key("name")?;
            json.string(name)?;
            json.key("enforced_by")?;
            json.begin_array()?;
            for e in &enforcers {
                json.string(e)?;
            }
            json.end()?;
            json.end()?;
        }
        json.end()?;
        lines.extend(probe_lines(&config, &avail));
        json.key("ok")?;
        json.bool(ok)?;
        if let Err(e) = &runtime {
            json.key("error")?;
            json.string(&e.explain(&crate::common::CliSpelling))?;
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
            Err(e) => lines.push(format!("NOT OK: {}", e.explain(&crate::common::CliSpelling))),
        }
        output::stdout_texts(lines.iter().map(String::as_str))?;
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// "Used" means a run with this configuration applies the layer: only a
/// supported layer can be (a delegated cgroup v2 included).
fn used(uses_sandbox: bool, layer: &pycage_sandbox::Layer) -> bool {
    uses_sandbox && layer.supported
}

/// The text lines of the probe's part of the report: one per layer, then
/// one per budget with what enforces it.
fn probe_lines(config: &RuntimeConfig, avail: &pycage_sandbox::Availability) -> Vec<String> {
    let uses_sandbox = config.isolation == Isolation::Sandbox;
    let mut lines = Vec::new();
    for (name, layer) in avail.layers() {
        lines.push(format!(
            "{name:<22} {:<13} {:<7} {}",
            if layer.supported { "supported" } else { "not supported" },
            if used(uses_sandbox, layer) { "used" } else { "unused" },
            layer.reason
        ));
    }
    for (name, enforcers) in budgets(config, avail) {
        lines.push(format!("budget {name:<15} {}", enforcers.join("; ")));
    }
    lines
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(crate::common::MIB) {
        format!("{} MiB", bytes / crate::common::MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// What the watchdog counts of a run's kernel objects, over `whom`.
fn kernel_objects(whom: &str) -> Vec<String> {
    use pycage_runtime::watchdog::{MAX_RUN_DESCRIPTORS, MAX_RUN_EPOLL_WATCHES};
    vec![format!(
        "watchdog: {MAX_RUN_DESCRIPTORS} descriptors, {MAX_RUN_EPOLL_WATCHES} epoll registrations and a quarter of \
         fs.pipe-user-pages-soft in pipes over {whom}, ends the run (worker-exit)"
    )]
}

/// Which mechanism bounds each budget of a run here, with its exact bound.
fn budgets(config: &RuntimeConfig, avail: &pycage_sandbox::Availability) -> Vec<(&'static str, Vec<String>)> {
    let period = pycage_runtime::watchdog::PERIOD.as_millis();
    let memory = mib(config.address_space_bytes);
    let backstop = mib(config.address_space_limit());
    let cgroup = |what: String| match &avail.cgroup {
        Some(found) => format!("cgroup v2 under {}: {what}", found.path.display()),
        None => "no delegated cgroup v2 (see cgroup-v2 above)".to_string(),
    };
    match config.isolation {
        Isolation::Sandbox => {
            let processes = config.max_processes;
            vec![
                (
                    "memory",
                    vec![
                        format!("RLIMIT_AS {backstop} per process (a backstop: address space, not memory)"),
                        format!("watchdog: {memory} of PSS and kernel buffers (the socket buffers of the run's network namespace, its pipes and epoll registrations) over the run's PID namespace, sampled every {period} ms, ends the run (worker-exit)"),
                        "socket and pipe buffers cannot grow (seccomp); inotify denied".to_string(),
                        format!(
                            "outside any process: the run's tmpfs ({}) and SysV shared memory ({}, IPC namespace); memfd_create denied",
                            mib(config.disk_bytes),
                            mib(config.sysv_shm_bytes)
                        ),
                        format!("hard ceiling without the watchdog: {processes} processes x {backstop}"),
                        cgroup(format!(
                            "memory.max {} (the budget plus the tmpfs), memory.swap.max 0",
                            mib(config.address_space_bytes.saturating_add(config.disk_bytes))
                        )),
                    ],
                ),
                ("kernel objects", kernel_objects("the run's PID namespace")),
                (
                    "cpu",
                    vec![
                        format!("RLIMIT_CPU {} s per process", config.cpu_seconds),
                        format!(
                            "watchdog: {} s over the run's PID namespace, sampled every {period} ms, ends the run (timeout)",
                            config.cpu_seconds
                        ),
                        format!("wall clock {} ms", config.wall_time.as_millis()),
                    ],
                ),
                (
                    "processes",
                    vec![
                        format!("RLIMIT_NPROC {processes} processes and threads, counted in the run's own user namespace"),
                        cgroup(format!("pids.max {}", processes.saturating_add(2))),
                    ],
                ),
                (
                    "disk",
                    vec![
                        format!(
                            "tmpfs of {} and {} inodes for /work, /tmp and /dev/shm together",
                            mib(config.disk_bytes),
                            pycage_sandbox::disk_inodes(config.disk_bytes)
                        ),
                        format!("RLIMIT_FSIZE {} per file", mib(config.max_file_bytes)),
                        "nothing of a run is written to the host's disk".to_string(),
                    ],
                ),
            ]
        }
        Isolation::Process => vec![
            (
                "memory",
                vec![
                    format!("RLIMIT_AS {backstop} per process (a backstop: address space, not memory)"),
                    format!(
                        "watchdog: {memory} of PSS and the kernel buffers it can see (Unix socket buffers, pipes, epoll registrations) over the run's descendants (not orphans), sampled every {period} ms"
                    ),
                ],
            ),
            ("kernel objects", kernel_objects("the run's descendants (not orphans)")),
            (
                "cpu",
                vec![
                    format!("RLIMIT_CPU {} s per process", config.cpu_seconds),
                    format!("watchdog: {} s over the run's descendants (not orphans)", config.cpu_seconds),
                    format!("wall clock {} ms", config.wall_time.as_millis()),
                ],
            ),
            ("processes", vec!["not bounded in process isolation".to_string()]),
            ("disk", vec!["not bounded in process isolation: files go to the host's temp directory".to_string()]),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pycage_sandbox::cgroup::Cgroup;
    use pycage_sandbox::{Availability, Layer};

    /// A machine where everything but Landlock works, with a delegated
    /// cgroup or without one.
    fn fake_probe(cgroup: bool) -> Availability {
        let yes = |why: &str| Layer { supported: true, reason: why.to_owned() };
        Availability {
            identity: yes("per-run uid leased from 200000 (root host)"),
            user_namespace: yes("unprivileged user namespaces are allowed"),
            pid_namespace: yes("ok"),
            net_namespace: yes("ok"),
            mount_namespace: yes("ok (mount_setattr)"),
            ipc_namespace: yes("ok"),
            uts_namespace: yes("ok"),
            proc: yes("a procfs of the run's PID namespace mounts"),
            nested_user_namespace: yes("ok"),
            landlock: Layer {
                supported: false,
                reason: "the kernel has no Landlock (boot with lsm=...,landlock)".to_owned(),
            },
            landlock_abi: None,
            seccomp: yes("ok"),
            no_new_privs: yes("ok"),
            cgroup_v2: if cgroup {
                yes("delegated: memory, pids, cpu")
            } else {
                Layer { supported: false, reason: "no cgroup v2 controller is delegated".to_owned() }
            },
            cgroup: cgroup.then(|| Cgroup { path: "/sys/fs/cgroup/user.slice/pycage".into() }),
        }
    }

    #[test]
    fn the_probe_report_on_a_fixed_fake_probe() {
        for (name, isolation, cgroup) in [
            ("doctor-sandbox-no-cgroup", Isolation::Sandbox, false),
            ("doctor-sandbox-cgroup", Isolation::Sandbox, true),
            ("doctor-process", Isolation::Process, false),
        ] {
            let config = RuntimeConfig { isolation, ..RuntimeConfig::default() };
            insta::assert_snapshot!(name, probe_lines(&config, &fake_probe(cgroup)).join("\n"));
        }
    }
}
