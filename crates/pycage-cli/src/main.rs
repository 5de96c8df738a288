//! `pycage`: run model-written Python in a fresh CPython child with host
//! bindings, and inspect the fd-3 wire protocol.
//!
//! Exit status: 0 success, 1 the run failed (its `error` is set), 2 misuse
//! (bad flags, unreadable program, bad bindings file, broken name rule, no
//! usable interpreter, an `--output` directory that cannot be made or
//! written), 3 (`run`) the run succeeded but its `out/` or its displays
//! were not delivered whole to `--output`, 4 (`run`, `resume`) the run is
//! suspended: its journal is in `--journal-out`. Clap's own usage errors
//! also exit 2.
//!
//! Misuse is reported in the user's terms: messages name the flags as typed
//! (`--memory-mb must be at least 64`), never a configuration field. When
//! the command line asks for `--json`, misuse is one JSON line on stdout in
//! the shape of a run result, `{"logs":[],"error":{"kind":"misuse","message":...}}`
//! (exit status 2), so a caller parsing JSON never has to scrape stderr.
//!
//! # Layers
//!
//! Each module uses only those listed before it (`tests/layers.rs`):
//!
//! 1. Leaves: `output` (the one place that prints), `chart`, `displays`
//!    (display files), `budget_flags` (flags from the budgets table);
//! 2. `common` (the runtime's flags, the async runtime, the shell helper),
//!    `journal` (durable runs' key and journal files);
//! 3. the commands: `frames`, `doctor`, `run`, `resume`, `repl`, `mcp`,
//!    `bench`.

mod bench;
mod budget_flags;
mod chart;
mod common;
mod displays;
mod doctor;
mod frames;
mod journal;
mod mcp;
mod output;
mod repl;
mod resume;
mod run;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use common::{RunArgs, SHELL_HELPER_ARG};

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
    /// to --output, 4 suspended (the journal is in --journal-out).
    Run(RunArgs),
    /// Resume a suspended run from its journal, answering its pending call.
    ///
    /// The program runs again in a fresh process; every call the journal
    /// records is answered from it, the pending call gets --reply or
    /// --deny, and the run goes on live. Needs PYCAGE_JOURNAL_KEY (the key
    /// that signed the journal) and the same bindings. Exit status as
    /// `run`: 0, 1, 2 (misuse, or a journal that is refused), 4 suspended
    /// again (the journal is rewritten).
    Resume(resume::ResumeArgs),
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
fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == SHELL_HELPER_ARG) {
        // The embedded helper program serves instead where it is installed
        // (`exec` returns only if it could not start): this binary's own
        // memory made every shell's forks dearer. Installed here, when a
        // runtime first wants a shell, not at every command's start.
        common::exec_bundled_helper();
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
    journal::take_env_key();
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
        Command::Resume(args) => args.json,
        Command::Doctor(args) => args.json(),
        Command::Bench(args) => args.json(),
        Command::Repl(args) => args.json(),
        Command::Frames(_) | Command::Mcp(_) | Command::Stubs(_) => false,
    };
    let result = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Resume(args) => resume::main(args),
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

/// `outer: cause: cause`, skipping a cause whose text the message already
/// carries (library errors often print their source themselves). A
/// runtime error names settings as flags.
fn error_chain(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in e.chain() {
        let text = match cause.downcast_ref::<pycage_runtime::RuntimeError>() {
            Some(e) => e.explain(&common::CliSpelling),
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
    use crate::common::*;
    use clap::CommandFactory;
    use pycage_runtime::{Isolation, RuntimeConfig};
    use std::path::PathBuf;

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
