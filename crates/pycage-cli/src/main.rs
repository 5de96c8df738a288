//! `pycage`: run model-written Python in a fresh CPython child with host
//! bindings, and inspect the fd-3 wire protocol.
//!
//! Exit status: 0 success, 1 the run failed (its `error` is set), 2 misuse
//! (bad flags, unreadable program, bad bindings file, broken name rule, no
//! usable interpreter, an `--output` directory that cannot be made or
//! written), 3 (`run`) the run succeeded but its `out/` or its displays
//! were not delivered whole to `--output`. Clap's own usage errors also exit 2.
//!
//! Misuse is reported in the user's terms: messages name the flags as typed
//! (`--memory-mb must be at least 64`), never a configuration field. When
//! the command line asks for `--json`, misuse is one JSON line on stdout in
//! the shape of a run result, `{"logs":[],"error":{"kind":"misuse","message":...}}`
//! (exit status 2), so a caller parsing JSON never has to scrape stderr.

mod bench;
mod budget_flags;
mod chart;
mod displays;
mod doctor;
mod frames;
mod mcp;
mod output;
mod repl;
mod run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use pycage_runtime::{Isolation, RuntimeConfig};

/// Exit status of a misuse error.
const EXIT_MISUSE: u8 = 2;

/// The Python distribution that ships this command (`pip install
/// pycage-run`; `pycage` on the package index is an unrelated project).
/// `--version` prints it with the version (`pycage-run 0.1.0`), the name
/// to upgrade by. It is pyproject.toml's `[project] name`: a test keeps the
/// two equal.
const DISTRIBUTION: &str = "pycage-run";

#[derive(Debug, Parser)]
#[command(
    name = "pycage",
    display_name = DISTRIBUTION,
    version,
    about = "Run model-written Python in a fresh CPython process with host bindings"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one program and print its result.
    ///
    /// The program runs as a script (the module `__main__`), with top-level
    /// `await` and `return` allowed; without a `return`, the value of a final
    /// expression statement is its value. Exit status: 0 success, 1 the run
    /// failed, 2 misuse, 3 its `out/` or displays were not delivered whole
    /// to --output.
    Run(RunArgs),
    /// Tools for the fd-3 wire protocol.
    #[command(subcommand)]
    Frames(FramesCommand),
    /// Measure whole runs on this machine, each figure beside its floor.
    ///
    /// Trivial-run latency for every spawn mode and isolation, runs per
    /// second, a binding call's round trip, memory. Takes about a minute.
    Bench(bench::BenchArgs),
    /// Show the interpreter and each isolation layer: supported here? used?
    ///
    /// Exits 1 when the configuration given (by default, the default one) cannot run.
    Doctor(doctor::DoctorArgs),
    /// Serve code mode over MCP: one tool, `run_python`, whose description
    /// carries typed stubs of the bindings (stdio, or --http ADDR).
    Mcp(mcp::McpArgs),
    /// Print the typed Python stubs of a bindings file (connects to its MCP servers).
    Stubs(mcp::StubsArgs),
    /// A session that keeps its globals across cells: on a terminal, or
    /// one JSON request per line with --json.
    Repl(repl::ReplArgs),
}

#[derive(Debug, Subcommand)]
enum FramesCommand {
    /// Validate a captured child→host transcript, one output line per input line.
    ///
    /// Each line becomes the rebuilt frame as compact JSON, `forged<TAB>frame`
    /// (a `done` with both value and error), `drop` (not a valid frame) or
    /// `oversized` (over --max-line-bytes). A summary line goes to stderr.
    /// Exit status: 0 every line kept, 1 some line forged, dropped or
    /// oversized, 2 misuse.
    Validate(frames::ValidateArgs),
}

/// Containment level (see the README's "Isolation and threat model").
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IsolationArg {
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

const MIB: u64 = 1024 * 1024;

// Flag defaults are read from `RuntimeConfig::default()`, the one place
// defaults live, so `--help` always shows what a run would get.
fn default_isolation() -> IsolationArg {
    RuntimeConfig::default().isolation.into()
}

/// Budgets, interpreter and isolation of runs: shared by `run` and `mcp`.
#[derive(Debug, Args)]
struct RuntimeArgs {
    /// Every budget flag, from the runtime's budgets table.
    #[command(flatten)]
    budgets: budget_flags::BudgetArgs,

    /// Python interpreter (CPython >= 3.10); default: `python3` on PATH.
    /// A virtual environment's `bin/python` means that environment.
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,

    /// Run programs in this virtual environment: its interpreter, its
    /// packages (read-only in the sandbox, at their own path). Not with --python.
    #[arg(long, value_name = "PATH", conflicts_with = "python")]
    venv: Option<PathBuf>,

    /// Import MODULE before each program (repeatable, or comma-separated):
    /// a pooled run (repl, mcp) then starts with it imported at fork cost;
    /// `pycage run` only adds its import time (it warns). Checked when the
    /// runtime starts; BLAS/OpenMP pools start with one thread.
    #[arg(long, value_name = "MODULE", value_delimiter = ',')]
    preload: Vec<String>,

    /// Install REQ (a PEP 508 requirement: `tabulate`, `rich>=13`) for
    /// every run, with what a program declares in a PEP 723
    /// `# /// script` block (repeatable). Installed by pycage on the host
    /// (uv, else pip) into its package cache; runs never get network.
    #[arg(long = "with", value_name = "REQ")]
    with_packages: Vec<String>,

    /// Let programs declare NAME in their PEP 723 block (repeatable, or
    /// comma-separated). By default a program may declare none: its
    /// declarations fail with `dependencies` before it starts. What an
    /// allowed package brings must be allowed too. Packages are installed
    /// as wheels only: nothing is built on the host.
    #[arg(long = "allow-package", value_name = "NAME", value_delimiter = ',')]
    allow_packages: Vec<String>,

    /// Let programs declare any package, and whatever it brings (a
    /// runtime then stops asking the index after 16 failed names).
    #[arg(long = "allow-any-package", conflicts_with = "allow_packages")]
    allow_any_package: bool,

    /// Containment level.
    #[arg(long, value_enum, default_value_t = default_isolation())]
    isolation: IsolationArg,

    /// Extra read-only path for sandboxed runs (repeatable), e.g. a
    /// virtualenv; relative paths are taken from the current directory.
    #[arg(long, value_name = "PATH")]
    allow_read: Vec<PathBuf>,

    /// Let sandboxed runs reach HOST:PORT through pycage's HTTP proxy on
    /// the host, and nothing else (repeatable). Without a port, 443. The
    /// program sees HTTP_PROXY/HTTPS_PROXY; names resolve on the host and
    /// match exactly (a name is not its address). Off by default: no network.
    #[arg(long, value_name = "HOST[:PORT]")]
    allow_net: Vec<pycage_runtime::NetRule>,

    /// Command bindings running at once, for every run together.
    #[arg(long, value_name = "N", default_value_t = pycage_bindings::slots::DEFAULT_TOTAL)]
    command_slots: usize,

    /// Command bindings running at once for one run (a freed slot goes to
    /// the run holding the fewest).
    #[arg(long, value_name = "N", default_value_t = pycage_bindings::slots::DEFAULT_PER_RUN)]
    command_slots_per_run: usize,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("program").required(true).multiple(false).args(["file", "code"]))]
struct RunArgs {
    /// Print the result as one line of canonical JSON: {"value"?, "logs", "error"?}.
    #[arg(long)]
    json: bool,

    /// TOML file declaring binding namespaces (commands, HTTP endpoints, MCP servers).
    #[arg(long, value_name = "FILE.toml")]
    bindings: Option<PathBuf>,

    #[command(flatten)]
    runtime: RuntimeArgs,

    /// A file or directory the program reads (repeatable): read-only in its
    /// working directory, under its base name.
    #[arg(long = "input", value_name = "PATH")]
    inputs: Vec<PathBuf>,

    /// Copy what the program leaves in `out/` (in its working directory) to
    /// DIR when the run settles, and write each display there as `<run
    /// id>-display-<N>.<ext>`. Nothing in DIR is overwritten; symlinks and
    /// special files are never followed or copied.
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,

    /// Write everything the child sends on its protocol channel (fd 3), as
    /// received, to FILE: a transcript `pycage frames validate` checks.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,

    /// Program text to run instead of a file.
    #[arg(short = 'c', value_name = "CODE")]
    code: Option<String>,

    /// Program file, or `-` to read the program from stdin.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

impl RunArgs {
    /// The runtime configuration these flags describe.
    fn config(&self) -> anyhow::Result<RuntimeConfig> {
        self.runtime.config()
    }
}

impl RuntimeArgs {
    /// How many command bindings run at once.
    fn slot_limits(&self) -> anyhow::Result<pycage_bindings::slots::SlotLimits> {
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
    fn config(&self) -> anyhow::Result<RuntimeConfig> {
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
            isolation: self.isolation.into(),
            allow_read,
            allow_net: self.allow_net.clone(),
            // One run per process: a new interpreter is cheaper than a
            // zygote plus a pool; the probe is cached across invocations.
            spawn: pycage_runtime::SpawnMode::Exec,
            cache_dir: pycage_runtime::default_cache_dir(),
            shell_helper: shell_helper(),
            ..RuntimeConfig::default()
        };
        self.budgets.apply(&mut config)?;
        config.validate().map_err(|e| anyhow::anyhow!(flag_message(&e)))?;
        Ok(config)
    }
}

/// A configuration error in the words of the flag that set the field:
/// budgets from the budgets table, the rest here.
fn flag_message(e: &pycage_runtime::ConfigError) -> String {
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
/// (`RuntimeConfig::shell_helper`).
pub(crate) fn shell_helper() -> Option<Vec<OsString>> {
    Some(vec!["/proc/self/exe".into(), SHELL_HELPER_ARG.into()])
}

/// The hidden first argument that makes this program a shell helper.
const SHELL_HELPER_ARG: &str = "__shell-helper";

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == SHELL_HELPER_ARG) {
        // Before anything starts a thread: the helper forks.
        return match pycage_runtime::serve_shell_helper() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                output::stderr_line(&format!("pycage {SHELL_HELPER_ARG}: {e}"));
                ExitCode::FAILURE
            }
        };
    }
    if argv.get(1).is_some_and(|a| a == bench::NS_FLOOR_ARG) {
        // Before anything starts a thread: the floor forks.
        return bench::serve_ns_floor(&argv[2..]);
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        // `--help` and `--version` are "errors" that print to stdout.
        Err(e) if e.use_stderr() && asks_for_json(&argv) => {
            output::misuse_json(&clap_message(&e));
            return ExitCode::from(EXIT_MISUSE);
        }
        Err(e) => e.exit(),
    };
    let json = match &cli.command {
        Command::Run(args) => args.json,
        Command::Doctor(args) => args.json(),
        Command::Bench(args) => args.json(),
        Command::Repl(args) => args.json(),
        Command::Frames(_) | Command::Mcp(_) | Command::Stubs(_) => false,
    };
    let result = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Frames(FramesCommand::Validate(args)) => frames::validate(&args),
        Command::Doctor(args) => doctor::main(args),
        Command::Mcp(args) => mcp::serve(args),
        Command::Repl(args) => repl::main(args),
        Command::Stubs(args) => mcp::stubs(args),
        Command::Bench(args) => bench::main(args),
    };
    match result {
        Ok(code) => code,
        Err(e) if json => {
            output::misuse_json(&error_chain(&e));
            ExitCode::from(EXIT_MISUSE)
        }
        Err(e) => {
            output::misuse(&error_chain(&e));
            ExitCode::from(EXIT_MISUSE)
        }
    }
}

/// Whether a command line that clap rejected asked for JSON output: a
/// `--json` before any `--` (after it, words are the program's).
fn asks_for_json(argv: &[OsString]) -> bool {
    argv.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "--json")
}

/// Clap's message without its `error: ` prefix, usage block and tip: the
/// first line says what was wrong.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).trim().to_owned()
}

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
        }
    }
}

/// `outer: cause: cause`, skipping a cause whose text the message already
/// carries (library errors often print their source themselves). A
/// runtime error names settings as flags.
fn error_chain(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in e.chain() {
        let text = match cause.downcast_ref::<pycage_runtime::RuntimeError>() {
            Some(e) => e.explain(&CliSpelling),
            None => cause.to_string(),
        };
        if message.is_empty() {
            message = text;
        } else if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn error_chain_skips_repeated_causes() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(io()).context("cannot read x");
        assert_eq!(error_chain(&e), "cannot read x: gone");
        let e = anyhow::Error::new(io()).context("could not run p: gone; try again");
        assert_eq!(error_chain(&e), "could not run p: gone; try again");
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_map_onto_config() {
        let cli = Cli::try_parse_from([
            "pycage",
            "run",
            "--wall-ms",
            "1500",
            "--cpu-seconds",
            "3",
            "--memory-mb",
            "256",
            "--max-log-bytes",
            "10",
            "--max-value-bytes",
            "20",
            "--isolation",
            "process",
            "--allow-read",
            "/a",
            "--allow-read",
            "/b",
            "-c",
            "return 1",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else { panic!("not run") };
        let c = args.config().unwrap();
        assert_eq!(c.wall_time, std::time::Duration::from_millis(1500));
        assert_eq!(c.cpu_seconds, 3);
        assert_eq!(c.address_space_bytes, 256 * MIB);
        assert_eq!((c.max_log_bytes, c.max_value_bytes), (10, 20));
        assert_eq!(c.isolation, Isolation::Process);
        assert_eq!(c.allow_read, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        let more = Cli::try_parse_from([
            "pycage",
            "run",
            "--allow-read",
            "rel",
            "--input",
            "data.csv",
            "--input",
            "dir",
            "--output",
            "o",
            "--max-output-bytes",
            "99",
            "--disk-mb",
            "3",
            "-c",
            "1",
        ])
        .unwrap();
        let Command::Run(more) = more.command else { panic!("not run") };
        let c = more.config().unwrap();
        assert_eq!(c.allow_read, vec![std::env::current_dir().unwrap().join("rel")]);
        assert_eq!((c.max_output_bytes, c.disk_bytes), (99, 3 * MIB));
        assert_eq!(more.inputs, vec![PathBuf::from("data.csv"), PathBuf::from("dir")]);
        assert_eq!(more.output, Some(PathBuf::from("o")));
        assert_eq!(args.code.as_deref(), Some("return 1"));
    }

    #[test]
    fn defaults_come_from_runtime_config() {
        let cli = Cli::try_parse_from(["pycage", "run", "prog.py"]).unwrap();
        let Command::Run(args) = cli.command else { panic!("not run") };
        let (c, d) = (args.config().unwrap(), RuntimeConfig::default());
        assert_eq!(
            (c.wall_time, c.cpu_seconds, c.address_space_bytes, c.max_log_bytes, c.max_value_bytes, c.isolation),
            (d.wall_time, d.cpu_seconds, d.address_space_bytes, d.max_log_bytes, d.max_value_bytes, d.isolation)
        );
    }

    fn run_config(args: &[&str]) -> anyhow::Result<RuntimeConfig> {
        let argv = ["pycage", "run"].iter().chain(args).chain(&["-c", "return 1"]);
        let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else { panic!("not run") };
        args.config()
    }

    /// Each budget flag accepts its bounds and refuses a value past each,
    /// with a message naming the flag and the real bound in its unit.
    #[test]
    fn flag_messages_match_validate() {
        use pycage_runtime::budgets::{bound, BUDGETS};
        let mut checked = 0;
        for row in BUDGETS {
            let Some((flag, unit)) = row.flag else { continue };
            let flag = format!("--{flag}");
            let (min, max) = bound(row, unit);
            let want = format!("{flag} {}", row.bound_text(unit));
            run_config(&[&flag, &min.to_string()]).unwrap();
            if min > 0 {
                let e = run_config(&[&flag, &(min - 1).to_string()]).unwrap_err().to_string();
                assert_eq!(e, want);
            }
            if max < u64::MAX {
                run_config(&[&flag, &max.to_string()]).unwrap();
                let e = run_config(&[&flag, &(max + 1).to_string()]).unwrap_err().to_string();
                assert_eq!(e, want);
            }
            checked += 1;
        }
        assert!(checked >= 10);
        assert_eq!(run_config(&["--memory-mb", "63"]).unwrap_err().to_string(), "--memory-mb must be at least 64 MiB");
    }

    #[test]
    fn allow_net_is_checked_by_its_flag() {
        run_config(&["--allow-net", "api.example.com", "--allow-net", "10.0.0.5:8080"]).unwrap();
        assert_eq!(
            run_config(&["--max-net-bytes", "0"]).unwrap_err().to_string(),
            "--max-net-bytes must be at least 1 bytes"
        );
        let message = run_config(&["--isolation", "process", "--allow-net", "example.com"]).unwrap_err().to_string();
        assert!(message.starts_with("--allow-net cannot be enforced with --isolation process"), "{message}");
        let e = Cli::try_parse_from(["pycage", "run", "--allow-net", "https://a.com", "-c", "1"]).unwrap_err();
        assert!(clap_message(&e).contains("is a URL; write HOST or HOST:PORT"), "{}", clap_message(&e));
        let e = Cli::try_parse_from(["pycage", "run", "--allow-net", "a.com:0", "-c", "1"]).unwrap_err();
        assert!(clap_message(&e).contains("invalid port"), "{}", clap_message(&e));
    }

    #[test]
    fn environment_flags_map_onto_config() {
        let c = run_config(&[
            "--venv",
            "/v",
            "--preload",
            "numpy,pandas",
            "--preload",
            "json",
            "--with",
            "rich>=13,<14",
            "--with",
            "tabulate",
            "--allow-package",
            "tabulate,rich",
        ])
        .unwrap();
        assert_eq!(c.venv, Some(PathBuf::from("/v")));
        assert_eq!(c.preload, ["numpy", "pandas", "json"]);
        assert_eq!(c.with_packages, ["rich>=13,<14", "tabulate"]);
        assert_eq!(c.allow_packages, vec!["tabulate".to_owned(), "rich".to_owned()]);
        assert!(run_config(&[]).unwrap().allow_packages.is_empty());
        assert!(!run_config(&[]).unwrap().allow_any_package);
        assert!(run_config(&["--allow-any-package"]).unwrap().allow_any_package);
        assert!(Cli::try_parse_from(["pycage", "run", "--venv", "/v", "--python", "/p", "-c", "1"]).is_err());
        assert_eq!(
            run_config(&["--preload", "os;x"]).unwrap_err().to_string(),
            "--preload: \"os;x\" is not a module name (dotted Python identifiers, e.g. numpy.linalg)"
        );
        let e = run_config(&["--with", "x @ https://h/x.whl"]).unwrap_err().to_string();
        assert!(e.starts_with("--with: ") && e.contains("direct references"), "{e}");
    }

    #[test]
    fn json_is_detected_before_the_program_words() {
        let argv = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(asks_for_json(&argv(&["pycage", "run", "--json", "--nope"])));
        assert!(!asks_for_json(&argv(&["pycage", "run", "--nope", "--", "--json"])));
        assert!(!asks_for_json(&argv(&["pycage", "run", "--nope"])));
        let e = Cli::try_parse_from(["pycage", "run", "--json", "--nope", "-c", "1"]).unwrap_err();
        assert_eq!(clap_message(&e), "unexpected argument '--nope' found");
    }

    #[test]
    fn program_source_is_exactly_one_of_file_and_code() {
        assert!(Cli::try_parse_from(["pycage", "run"]).is_err());
        assert!(Cli::try_parse_from(["pycage", "run", "-c", "x", "f.py"]).is_err());
        assert!(Cli::try_parse_from(["pycage", "run", "-"]).is_ok());
        assert!(Cli::try_parse_from(["pycage", "run", "--", "-c"]).is_ok());
    }
}
