//! What the commands that make runs share: the runtime's flags (budgets,
//! interpreter, isolation, environment, network) and how a configuration
//! error names the flag, how settings are spelled on the command line, the
//! async runtime, and this program as its own sandbox shell helper.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use pycage_runtime::{Isolation, RuntimeConfig};

use crate::budget_flags;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum IsolationArg {
    /// A fresh process with rlimits, its own process group and a scrubbed environment.
    Process,
    /// `process` plus Linux namespaces, Landlock and seccomp.
    Sandbox,
}

impl From<Isolation> for IsolationArg {
    fn from(i: Isolation) -> Self {
        match i {
            Isolation::Process => IsolationArg::Process,
            Isolation::Sandbox => IsolationArg::Sandbox,
        }
    }
}

impl From<IsolationArg> for Isolation {
    fn from(i: IsolationArg) -> Self {
        match i {
            IsolationArg::Process => Isolation::Process,
            IsolationArg::Sandbox => Isolation::Sandbox,
        }
    }
}

pub(crate) const MIB: u64 = 1024 * 1024;

// Flag defaults are read from `RuntimeConfig::default()`, the one place
// defaults live, so `--help` always shows what a run would get.
pub(crate) fn default_isolation() -> IsolationArg {
    RuntimeConfig::default().isolation.into()
}

/// Budgets, interpreter and isolation of runs: shared by `run` and `mcp`.
#[derive(Debug, Args)]
pub(crate) struct RuntimeArgs {
    /// Every budget flag, from the runtime's budgets table.
    #[command(flatten)]
    pub(crate) budgets: budget_flags::BudgetArgs,

    /// Python interpreter (CPython >= 3.10); default: `python3` on PATH.
    /// A virtual environment's `bin/python` means that environment.
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<PathBuf>,

    /// Run programs in this virtual environment: its interpreter, its
    /// packages (read-only in the sandbox, at their own path). Not with --python.
    #[arg(long, value_name = "PATH", conflicts_with = "python")]
    pub(crate) venv: Option<PathBuf>,

    /// Import MODULE before each program (repeatable, or comma-separated):
    /// a pooled run (repl, mcp) then starts with it imported at fork cost;
    /// `pycage run` only adds its import time (it warns). Checked when the
    /// runtime starts; BLAS/OpenMP pools start with one thread.
    #[arg(long, value_name = "MODULE", value_delimiter = ',')]
    pub(crate) preload: Vec<String>,

    /// Install REQ (a PEP 508 requirement: `tabulate`, `rich>=13`) for
    /// every run, with what a program declares in a PEP 723
    /// `# /// script` block (repeatable). Installed by pycage on the host
    /// (uv, else pip) into its package cache; runs never get network.
    #[arg(long = "with", value_name = "REQ")]
    pub(crate) with_packages: Vec<String>,

    /// Let programs declare NAME in their PEP 723 block (repeatable, or
    /// comma-separated). By default a program may declare none: its
    /// declarations fail with `dependencies` before it starts. What an
    /// allowed package brings must be allowed too. Packages are installed
    /// as wheels only: nothing is built on the host.
    #[arg(long = "allow-package", value_name = "NAME", value_delimiter = ',')]
    pub(crate) allow_packages: Vec<String>,

    /// Let programs declare any package, and whatever it brings (a
    /// runtime then stops asking the index after 16 failed names).
    #[arg(long = "allow-any-package", conflicts_with = "allow_packages")]
    pub(crate) allow_any_package: bool,

    /// Let a package with no wheel for this platform be built from source.
    /// The whole install then runs pip in a sandbox of its own (the
    /// package index its only network, through the egress proxy; the
    /// run's budgets), never on the host. Needs the sandbox on this
    /// machine, whatever --isolation says.
    #[arg(long = "allow-builds")]
    pub(crate) allow_builds: bool,

    /// Containment level.
    #[arg(long, value_enum, default_value_t = default_isolation())]
    pub(crate) isolation: IsolationArg,

    /// Extra read-only path for sandboxed runs (repeatable), e.g. a
    /// virtualenv; relative paths are taken from the current directory.
    #[arg(long, value_name = "PATH")]
    pub(crate) allow_read: Vec<PathBuf>,

    /// Let sandboxed runs reach HOST:PORT through pycage's HTTP proxy on
    /// the host, and nothing else (repeatable). Without a port, 443. The
    /// program sees HTTP_PROXY/HTTPS_PROXY; names resolve on the host and
    /// match exactly (a name is not its address). Off by default: no network.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(crate) allow_net: Vec<pycage_runtime::NetRule>,

    /// Type-check each program with ty before it runs: a program with type
    /// errors (a wrong argument name or type, `int + str`) fails as
    /// `type-error` listing them, without starting; warnings come with the
    /// result. Checked against the bindings' stubs and the interpreter's
    /// packages. Needs ty (`pip install ty`).
    #[arg(long)]
    type_check: bool,

    /// The ty binary for --type-check; default: `ty` beside the
    /// interpreter, else on PATH.
    #[arg(long, value_name = "PATH")]
    ty: Option<PathBuf>,

    /// Command bindings running at once, for every run together.
    #[arg(long, value_name = "N", default_value_t = pycage_bindings::slots::DEFAULT_TOTAL)]
    pub(crate) command_slots: usize,

    /// Command bindings running at once for one run (a freed slot goes to
    /// the run holding the fewest).
    #[arg(long, value_name = "N", default_value_t = pycage_bindings::slots::DEFAULT_PER_RUN)]
    pub(crate) command_slots_per_run: usize,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("program").required(true).multiple(false).args(["file", "code"]))]
pub(crate) struct RunArgs {
    /// Print the result as one line of canonical JSON: {"value"?, "logs", "error"?}.
    #[arg(long)]
    pub(crate) json: bool,

    /// TOML file declaring binding namespaces (commands, HTTP endpoints, MCP servers).
    #[arg(long, value_name = "FILE.toml")]
    pub(crate) bindings: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,

    /// A file or directory the program reads (repeatable): read-only in its
    /// working directory, under its base name.
    #[arg(long = "input", value_name = "PATH")]
    pub(crate) inputs: Vec<PathBuf>,

    /// Copy what the program leaves in `out/` (in its working directory) to
    /// DIR when the run settles, and write each display there as `<run
    /// id>-display-<N>.<ext>`. Nothing in DIR is overwritten; symlinks and
    /// special files are never followed or copied.
    #[arg(long, value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,

    /// Write everything the child sends on its protocol channel (fd 3), as
    /// received, to FILE: a transcript `pycage frames validate` checks.
    #[arg(long, value_name = "FILE")]
    pub(crate) transcript: Option<PathBuf>,

    /// Let the run suspend at a call that needs approval (`approval` in the
    /// bindings file): its journal, signed with PYCAGE_JOURNAL_KEY, is
    /// written to FILE, the pending call is printed, and pycage exits 4.
    /// `pycage resume FILE` goes on.
    #[arg(long, value_name = "FILE")]
    pub(crate) journal_out: Option<PathBuf>,

    /// Program text to run instead of a file.
    #[arg(short = 'c', value_name = "CODE")]
    pub(crate) code: Option<String>,

    /// Program file, or `-` to read the program from stdin.
    #[arg(value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
}

impl RunArgs {
    /// The runtime configuration these flags describe.
    pub(crate) fn config(&self) -> anyhow::Result<RuntimeConfig> {
        self.runtime.config()
    }
}

impl RuntimeArgs {
    /// How many command bindings run at once.
    pub(crate) fn slot_limits(&self) -> anyhow::Result<pycage_bindings::slots::SlotLimits> {
        if self.command_slots == 0 || self.command_slots_per_run == 0 {
            anyhow::bail!("--command-slots and --command-slots-per-run must be at least 1");
        }
        if self.command_slots_per_run > self.command_slots {
            anyhow::bail!("--command-slots-per-run must be at most --command-slots ({})", self.command_slots);
        }
        Ok(pycage_bindings::slots::SlotLimits { total: self.command_slots, per_run: self.command_slots_per_run })
    }

    /// The runtime configuration these flags describe, validated here so a
    /// bad value is reported by the flag that set it.
    pub(crate) fn config(&self) -> anyhow::Result<RuntimeConfig> {
        let allow_read = self
            .allow_read
            .iter()
            .map(|p| std::path::absolute(p).map_err(|e| anyhow::anyhow!("--allow-read {}: {e}", p.display())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut config = RuntimeConfig {
            python: self.python.clone(),
            venv: self.venv.clone(),
            preload: self.preload.clone(),
            with_packages: self.with_packages.clone(),
            allow_packages: self.allow_packages.clone(),
            allow_any_package: self.allow_any_package,
            allow_builds: self.allow_builds,
            isolation: self.isolation.into(),
            allow_read,
            allow_net: self.allow_net.clone(),
            // One run per process: a new interpreter is cheaper than a
            // zygote plus a pool; the probe is cached across invocations.
            spawn: pycage_runtime::SpawnMode::Exec,
            cache_dir: pycage_runtime::default_cache_dir(),
            shell_helper: shell_helper(),
            type_check: self.type_check,
            ty: self.ty.clone(),
            ..RuntimeConfig::default()
        };
        self.budgets.apply(&mut config)?;
        config.validate().map_err(|e| anyhow::anyhow!(flag_message(&e)))?;
        Ok(config)
    }
}

/// A configuration error in the words of the flag that set the field:
/// budgets from the budgets table, the rest here.
pub(crate) fn flag_message(e: &pycage_runtime::ConfigError) -> String {
    match e.field {
        "allow_net" => "--allow-net cannot be enforced with --isolation process (its runs share the host's \
                        network, so they could connect anywhere): use --isolation sandbox"
            .to_owned(),
        "venv" => "--venv cannot be given together with --python: a venv's interpreter is its bin/python".to_owned(),
        "preload" => format!("--preload: {}", e.problem),
        "with_packages" => format!("--with: {}", e.problem),
        "allow_packages" => format!("--allow-package: {}", e.problem),
        _ => budget_flags::flag_message(e),
    }
}

/// The async runtime of every command that makes runs. Its threads are
/// background threads for the scheduler ([`pycage_runtime::run_in_background`]):
/// waking one never preempts a run's program, nor the thread that waits
/// for a run's result.
pub(crate) fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(pycage_runtime::run_in_background)
        .build()
        .context("cannot start the async runtime")
}

/// This program as a runtime's sandbox shell helper: sandboxed runs' shells
/// are forked from a small process, not from a CLI that may have grown
/// (`RuntimeConfig::shell_helper`). Started so, it becomes the embedded
/// helper program where it can ([`exec_bundled_helper`]).
pub(crate) fn shell_helper() -> Option<Vec<OsString>> {
    Some(vec!["/proc/self/exe".into(), SHELL_HELPER_ARG.into()])
}

#[cfg(feature = "bundled-shell-helper")]
static BUNDLED_HELPER: Option<&[u8]> = Some(include_bytes!(env!("PYCAGE_BUNDLED_SHELL_HELPER")));
#[cfg(not(feature = "bundled-shell-helper"))]
static BUNDLED_HELPER: Option<&[u8]> = None;

/// In a process started as the shell helper, before anything else: execs
/// the embedded `pycage-shell-helper` program (feature
/// `bundled-shell-helper`, `build.rs`), installed into the user's pycage
/// cache on first use, keeping this process (its pid, fd 3, death signal).
/// Every shell is two forks and two exits of the helper, and this binary
/// holds four times the program's anonymous memory (0.84 against 0.19
/// MiB). Returns only when there is no such program or it could not
/// start; this binary then serves.
pub(crate) fn exec_bundled_helper() {
    use std::os::unix::process::CommandExt;
    if let Some(program) = BUNDLED_HELPER.and_then(pycage_runtime::installed_shell_helper) {
        let _ = std::process::Command::new(program).exec();
    }
}

/// The hidden first argument that makes this program a shell helper.
pub(crate) const SHELL_HELPER_ARG: &str = "__shell-helper";

/// How the CLI spells a setting in messages.
pub(crate) struct CliSpelling;

impl pycage_runtime::Spelling for CliSpelling {
    fn setting(&self, setting: pycage_runtime::Setting) -> &'static str {
        match setting {
            pycage_runtime::Setting::Python => "--python",
            pycage_runtime::Setting::ProcessIsolation => "--isolation process",
            pycage_runtime::Setting::AllowRead => "--allow-read",
            pycage_runtime::Setting::Venv => "--venv",
            pycage_runtime::Setting::Preload => "--preload",
            pycage_runtime::Setting::WithPackages => "--with",
            pycage_runtime::Setting::Ty => "--ty",
        }
    }
}
