//! Runtime configuration: every budget is a named, validated field.
//!
//! Defaults (listed in `docs/semantics.md`, "Budgets") live here and in
//! [`pycage_protocol::limits`], in one place, and [`RuntimeConfig::validate`]
//! runs when the runtime is built, so `run()` never invents a limit of its own.

use std::path::PathBuf;
use std::time::Duration;

use pycage_protocol::limits;

use pycage_egress::NetRule;

/// How a run is contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// A fresh process with rlimits, its own process group, a scrubbed
    /// environment and a private temporary directory. Contains accidents,
    /// not attacks.
    Process,
    /// `Process` plus Linux namespaces, a private filesystem view, Landlock,
    /// seccomp and an unprivileged uid (see the README's threat model).
    #[default]
    Sandbox,
}

impl Isolation {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Process => "process",
            Isolation::Sandbox => "sandbox",
        }
    }
}

/// How a run's fresh process comes to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpawnMode {
    /// Forked from a zygote: a trusted Python process that has imported
    /// everything a run needs; a small pool of children is forked ahead of
    /// demand. About a millisecond per run instead of an interpreter start.
    #[default]
    Zygote,
    /// A new interpreter per run (`python3 -I`, then the bootstrap). For a
    /// single run (starting a zygote and a pool costs more than one start)
    /// and for interpreters the zygote cannot use (no `ctypes`).
    Exec,
}

impl SpawnMode {
    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnMode::Zygote => "zygote",
            SpawnMode::Exec => "exec",
        }
    }
}

/// Everything a [`crate::Runtime`] needs to know before its first run.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The interpreter: `None` searches `PATH` for `python3`. Resolved once
    /// to the real executable (`sys.executable`), so a pyenv shim is paid at
    /// construction only. A virtual environment's `bin/python` means that
    /// environment (its `sys.prefix` and site-packages), symlink or not.
    pub python: Option<PathBuf>,
    /// A virtual environment to run programs in: its `bin/python` is the
    /// interpreter, and the environment (with its base installation) is
    /// readable, and only readable, in the sandbox at its host path. The
    /// same as `python = VENV/bin/python`, checked to be a venv. Not
    /// together with `python`.
    pub venv: Option<PathBuf>,
    /// Modules imported before each program: by the zygote before it forks
    /// (every run then starts with them at fork cost), or by an exec'd
    /// child before its run. Numeric libraries' thread pools start with one
    /// thread (see `python/pycage/preload.py`). Checked at construction: a
    /// module that does not import, or that leaves a thread running, is a
    /// [`crate::RuntimeError::Preload`] naming it.
    pub preload: Vec<String>,
    /// Requirements (PEP 508: `tabulate`, `rich>=13`) installed for every
    /// run, together with what a program declares in its PEP 723
    /// `# /// script` block; installed by the host (uv, else pip) into the
    /// package cache before the program starts (see `crate::packages`).
    /// Installed once at construction, so a bad one fails there.
    pub with_packages: Vec<String>,
    /// The package names programs may declare (PEP 503-normalized when
    /// compared). Empty (the default) allows none: a program's declarations
    /// are refused unless the caller allows them, here or with
    /// [`RuntimeConfig::allow_any_package`]. A program that declares
    /// another fails with `dependencies` before it starts, and so does one
    /// whose packages bring one that is not allowed (unless the caller's
    /// own `with_packages` bring it: those are trusted).
    pub allow_packages: Vec<String>,
    /// Programs may declare any package, and whatever it brings. A runtime
    /// then allows `pycage_packages::MAX_FAILED_RESOLUTIONS` failed
    /// installs of declared names (each asked the index for names of the
    /// program's choosing) and asks for no new name after that.
    pub allow_any_package: bool,
    /// A package with no wheel for this platform may be built from source:
    /// the whole install then runs pip in a sandboxed run of its own (this
    /// runtime's interpreter, budgets and disk; the package index as its
    /// only network, through the egress proxy; `out/` its only output),
    /// never on the host. Off (the default): such a package fails with
    /// `dependencies`. Needs sandbox isolation on this machine, whatever
    /// the runtime's own isolation.
    pub allow_builds: bool,
    /// Bytes of installed package sets the cache keeps; past them the
    /// least recently used sets that no run holds are removed.
    pub package_cache_bytes: u64,
    /// Longest time installing one run's packages may take (resolving and
    /// downloading included); past it the run fails with `dependencies`.
    pub install_timeout: Duration,
    /// Where the probe's answer and the compiled bootstrap are kept between
    /// processes (see `probe_cache`); `None` probes at every construction.
    /// [`crate::default_cache_dir`] is the user's cache directory.
    pub cache_dir: Option<PathBuf>,
    /// Wall-clock budget of one run, spawn to settlement.
    pub wall_time: Duration,
    /// `RLIMIT_CPU` of the child, in seconds (reported as `timeout`).
    pub cpu_seconds: u64,
    /// The run's memory budget, in bytes: the memory all its processes
    /// hold together (their PSS, summed by the watchdog; `memory.max` of a
    /// delegated cgroup). Each process also gets an address-space backstop,
    /// `RLIMIT_AS` = [`RuntimeConfig::address_space_limit`]: address space
    /// is not memory (a thread reserves an 8 MiB stack, an allocator maps
    /// arenas it never touches), so the backstop is generous and the budget
    /// is what the run may really hold.
    pub address_space_bytes: u64,
    /// Log ledger size in bytes, on both sides.
    pub max_log_bytes: u64,
    /// Budget for the canonical size of the return value.
    pub max_value_bytes: u64,
    /// Display ledger of a run, on both sides: the bytes of its `display`
    /// frames together (base64 images count as sent). Past it, one marker
    /// display and nothing more; the run goes on. Capped at
    /// [`RuntimeConfig::max_line_bytes`] ([`RuntimeConfig::display_budget`]),
    /// so a display that fits is never a line over the cap.
    pub max_display_bytes: u64,
    /// Longest child→host frame line.
    pub max_line_bytes: usize,
    /// Total child→host protocol bytes per run.
    pub max_control_bytes: u64,
    /// Time between SIGTERM and SIGKILL when a child must be stopped.
    pub grace: Duration,
    /// Where pycage creates its directories: process isolation's run
    /// directories and the owner lock (default: the system temp dir; the
    /// bootstrap goes to the cache directory). Sandboxed runs create
    /// nothing there.
    pub run_dir_parent: Option<PathBuf>,
    /// Containment level.
    pub isolation: Isolation,
    /// Extra read-only paths for sandboxed runs (e.g. a virtualenv).
    pub allow_read: Vec<PathBuf>,
    /// `RLIMIT_NPROC` for sandboxed runs: processes *and threads* of the
    /// run (counted in its own user namespace).
    pub max_processes: u64,
    /// `RLIMIT_FSIZE` for sandboxed runs.
    pub max_file_bytes: u64,
    /// `RLIMIT_NOFILE` for sandboxed runs.
    pub max_open_files: u64,
    /// First host uid/gid of the range sandboxed runs are mapped to on a
    /// root host (each run leases its own, unique across pycage processes).
    pub sandbox_uid_base: u32,
    /// How many uids the range has. Each running sandboxed run holds one,
    /// and so does each pooled child waiting for a run and, with a pool,
    /// the one shell kept built for the next spawn a run waits for: a
    /// runtime holds `pool_size + 1` while idle.
    pub sandbox_uid_count: u32,
    /// How run processes are made.
    pub spawn: SpawnMode,
    /// Children forked ahead of demand (zygote spawn). 0 forks on demand,
    /// and builds nothing ahead (in sandbox isolation a pool also keeps
    /// one sandbox shell built ahead of the next spawn).
    pub pool_size: usize,
    /// A zygote is replaced after forking this many children: all its
    /// children share its hash seed and address-space layout.
    pub zygote_max_runs: u64,
    /// ... or after this long, whichever comes first.
    pub zygote_max_age: Duration,
    /// Runs in flight at once; more wait in FIFO order. Their wall clock
    /// starts when they leave the queue.
    pub max_concurrent_runs: usize,
    /// Where root-host uid leases are kept (default
    /// `lease::DEFAULT_LEASE_DIR`); must be root's, writable by no
    /// one else.
    pub uid_lease_dir: Option<PathBuf>,
    /// Size of a sandboxed run's tmpfs: its working directory, `/tmp` and
    /// `/dev/shm` together (and at most one inode per 8 KiB of it).
    pub disk_bytes: u64,
    /// SysV shared memory a sandboxed run may hold (its IPC namespace's
    /// `kernel.shmall`/`shmmax`).
    pub sysv_shm_bytes: u64,
    /// Most bytes copied from `out/` to a request's output directory.
    pub max_output_bytes: u64,
    /// Binding calls of one run whose reply the program has not read yet
    /// (running, or answered and waiting in the channel). The child keeps
    /// its own calls under it (more wait, in order, inside the program);
    /// a child that does not is not read from until it has read replies,
    /// so no binding starts beyond this many.
    pub max_calls_in_flight: usize,
    /// Bytes of replies written for a run and not yet read by its program.
    /// Over it, the host reads nothing more from the child (no new call
    /// starts) until the program has read them; a reply is never split.
    pub max_unread_reply_bytes: u64,
    /// Events (logs, calls) buffered for a streaming consumer. A consumer
    /// that falls this far behind slows the run down (the host stops
    /// reading the child until there is room), and never loses an event;
    /// the run's wall clock keeps running meanwhile.
    pub max_buffered_events: usize,
    /// The egress allow-list (sandbox isolation only): the hosts and ports
    /// a run may reach through the host's HTTP proxy (`HTTP_PROXY` and
    /// `HTTPS_PROXY` in the run's environment). Empty (the default): the
    /// run has no network at all. See `docs/sandbox.md`, "Egress".
    pub allow_net: Vec<NetRule>,
    /// Bytes a run may send and receive through the egress proxy, all
    /// connections together; the connection that would cross it is cut
    /// there, and later ones are refused.
    pub max_net_bytes: u64,
    /// Connections a run may make to the egress proxy, refused ones
    /// included; more are refused.
    pub max_net_connections: u64,
    /// The command (program and arguments) of a process that builds
    /// sandbox shells for zygote-spawned sandboxed runs, exec'd once per
    /// runtime, when the first is wanted. `None` (the default): the host
    /// forks each shell itself, which costs in proportion to the host's
    /// memory (a 370 MiB host makes sandboxed runs about three times
    /// slower). The process must call [`crate::serve_shell_helper`]: the
    /// `pycage` CLI runs itself as `pycage __shell-helper`, the Python
    /// package its extension module; a Rust host can do the same from its
    /// own `main` (see the function), or name the `pycage-shell-helper`
    /// binary of this crate. A helper that fails before its first shell
    /// is given up with a warning: the host forks the shells then.
    pub shell_helper: Option<Vec<std::ffi::OsString>>,
    /// The key that signs and verifies durable runs' journals
    /// (`docs/durable.md`). Without one no run can suspend: a run whose
    /// bindings need approval is refused, and a binding that asks to
    /// suspend fails its call. With one, every run records its binding
    /// calls (within `max_journal_bytes`), and its processes get known
    /// hash seeds, so that a resume can take the same path.
    pub journal_key: Option<pycage_journal::JournalKey>,
    /// Bytes of journal a run may record (its calls, the replies it was
    /// given, its program); a run over it cannot suspend. Also the largest
    /// journal a resume reads.
    pub max_journal_bytes: u64,
    /// Type-check every program with ty before it runs (`docs/semantics.md`,
    /// "Type checking"): a program with type errors settles as
    /// `type-error` without starting. A run (`RunRequest::type_check`) or a
    /// session's run (`SessionRun::type_check`) can turn it on or off for
    /// itself. Off by default.
    pub type_check: bool,
    /// The ty binary. `None` takes `ty` beside the interpreter (`pip
    /// install ty` into the venv puts it there), else on `PATH`.
    pub ty: Option<PathBuf>,
    /// Address-space limit (`RLIMIT_AS`) of the type checker's process,
    /// started at the first checked run and kept for the runtime's life.
    pub type_check_memory_bytes: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            python: None,
            venv: None,
            preload: Vec::new(),
            with_packages: Vec::new(),
            allow_packages: Vec::new(),
            allow_any_package: false,
            allow_builds: false,
            package_cache_bytes: 2 << 30,
            install_timeout: Duration::from_secs(300),
            cache_dir: None,
            wall_time: Duration::from_secs(60),
            cpu_seconds: 30,
            address_space_bytes: 512 * 1024 * 1024,
            max_log_bytes: limits::DEFAULT_MAX_LOG_BYTES,
            max_value_bytes: limits::DEFAULT_MAX_VALUE_BYTES,
            max_display_bytes: limits::DEFAULT_MAX_DISPLAY_BYTES,
            max_line_bytes: limits::DEFAULT_MAX_LINE_BYTES,
            max_control_bytes: limits::DEFAULT_MAX_CONTROL_BYTES,
            grace: Duration::from_millis(250),
            run_dir_parent: None,
            isolation: Isolation::default(),
            allow_read: Vec::new(),
            max_processes: 256,
            max_file_bytes: 64 * 1024 * 1024,
            max_open_files: 256,
            sandbox_uid_base: 1_500_000,
            sandbox_uid_count: 65_536,
            spawn: SpawnMode::Zygote,
            pool_size: 4,
            zygote_max_runs: 1000,
            zygote_max_age: Duration::from_secs(300),
            max_concurrent_runs: 64,
            uid_lease_dir: None,
            disk_bytes: 256 * 1024 * 1024,
            sysv_shm_bytes: 16 * 1024 * 1024,
            max_output_bytes: 64 * 1024 * 1024,
            max_calls_in_flight: DEFAULT_MAX_CALLS_IN_FLIGHT,
            max_unread_reply_bytes: 16 * 1024 * 1024,
            max_buffered_events: 1024,
            allow_net: Vec::new(),
            max_net_bytes: 64 * 1024 * 1024,
            max_net_connections: 64,
            shell_helper: None,
            journal_key: None,
            max_journal_bytes: pycage_journal::DEFAULT_MAX_JOURNAL_BYTES,
            type_check: false,
            ty: None,
            type_check_memory_bytes: pycage_typecheck::DEFAULT_MEMORY_BYTES,
        }
    }
}

/// A configuration value that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid runtime configuration: {field} {problem}")]
pub struct ConfigError {
    pub field: &'static str,
    pub problem: String,
}

/// Default of [`RuntimeConfig::max_calls_in_flight`].
pub const DEFAULT_MAX_CALLS_IN_FLIGHT: usize = 256;

/// Smallest [`RuntimeConfig::max_unread_reply_bytes`]: a little more than
/// the kernel buffers of one socket, so the budget is about memory the
/// host holds, not about the channel's own buffer.
pub const MIN_UNREAD_REPLY_BYTES: u64 = 256 * 1024;

/// Most connections [`RuntimeConfig::max_net_connections`] may allow.
pub const MAX_NET_CONNECTIONS: u64 = 4096;

/// Smallest [`RuntimeConfig::type_check_memory_bytes`].
pub const MIN_TYPE_CHECK_MEMORY_BYTES: u64 = 256 * 1024 * 1024;

/// Smallest run tmpfs.
pub const MIN_DISK_BYTES: u64 = 1024 * 1024;

/// Smallest address space CPython with asyncio can start in.
pub const MIN_ADDRESS_SPACE_BYTES: u64 = 64 * 1024 * 1024;

/// What `RLIMIT_AS` adds to the memory budget: room for reservations that
/// hold no memory (200 threads take 2.6 GiB of address space: their stacks
/// and malloc arenas).
pub const ADDRESS_SPACE_HEADROOM: u64 = 4 * 1024 * 1024 * 1024;

impl RuntimeConfig {
    /// `RLIMIT_AS` of each process of a run: four times the memory budget,
    /// and at least the budget plus [`ADDRESS_SPACE_HEADROOM`]. It stops a
    /// runaway allocation faster than a watchdog period; the budget itself
    /// is enforced on memory held ([`RuntimeConfig::address_space_bytes`]).
    pub fn address_space_limit(&self) -> u64 {
        self.address_space_bytes.saturating_mul(4).max(self.address_space_bytes.saturating_add(ADDRESS_SPACE_HEADROOM))
    }

    /// The display budget a run gets: `max_display_bytes`, capped at
    /// `max_line_bytes` (a display that fits is then never a line over the
    /// cap, which would end the run).
    pub fn display_budget(&self) -> u64 {
        self.max_display_bytes.min(self.max_line_bytes as u64)
    }

    /// Checks every field but the numeric budgets, whose bounds live in
    /// the budgets table (`RuntimeConfig::validate`, in `budgets`, checks
    /// both).
    pub(crate) fn validate_settings(&self) -> Result<(), ConfigError> {
        let err = |field, problem: &str| Err(ConfigError { field, problem: problem.to_owned() });
        if (self.max_control_bytes as u128) < self.max_line_bytes as u128 {
            return err("max_control_bytes", "must be at least max_line_bytes");
        }
        if self.sandbox_uid_count == 0
            || self.sandbox_uid_base == 0
            || self.sandbox_uid_base.checked_add(self.sandbox_uid_count).is_none()
        {
            return err("sandbox_uid_base", "the uid range must be non-empty, not include 0, and fit in u32");
        }
        if self.python.is_some() && self.venv.is_some() {
            return err("venv", "cannot be given together with python: a venv's interpreter is its bin/python");
        }
        for module in &self.preload {
            if !is_module_name(module) {
                return Err(ConfigError {
                    field: "preload",
                    problem: format!("{module:?} is not a module name (dotted Python identifiers, e.g. numpy.linalg)"),
                });
            }
        }
        for req in &self.with_packages {
            pycage_packages::Requirement::parse(req)
                .map_err(|problem| ConfigError { field: "with_packages", problem })?;
        }
        if self.allow_any_package && !self.allow_packages.is_empty() {
            return err("allow_packages", "cannot be given together with allow_any_package, which allows every name");
        }
        for name in &self.allow_packages {
            if !pycage_packages::is_project_name(name) {
                return Err(ConfigError {
                    field: "allow_packages",
                    problem: format!("{name:?} is not a package name (letters, digits, '.', '_', '-')"),
                });
            }
        }
        if self.type_check_memory_bytes < MIN_TYPE_CHECK_MEMORY_BYTES {
            return err("type_check_memory_bytes", "must be at least 256 MiB (ty maps its typeshed and caches)");
        }
        if !self.allow_net.is_empty() && self.isolation == Isolation::Process {
            return err(
                "allow_net",
                "cannot be enforced under process isolation: its runs share the host's network, so they could \
                 connect anywhere; use sandbox isolation, or leave allow_net empty",
            );
        }
        Ok(())
    }
}

/// Whether `name` is a dotted module name of ASCII identifiers.
pub(crate) fn is_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name.split('.').all(|part| {
            let mut chars = part.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let c = RuntimeConfig::default();
        c.validate().unwrap();
        assert_eq!(c.wall_time, Duration::from_secs(60));
        assert_eq!(c.cpu_seconds, 30);
        assert_eq!(c.address_space_bytes, 512 << 20);
        assert_eq!(c.max_log_bytes, 64 << 10);
        assert_eq!(c.max_value_bytes, 1 << 20);
        assert_eq!(c.max_display_bytes, 8 << 20);
        let small_lines = RuntimeConfig { max_line_bytes: 1024, ..RuntimeConfig::default() };
        small_lines.validate().unwrap();
        assert_eq!(small_lines.display_budget(), 1024);
        assert_eq!(c.isolation, Isolation::Sandbox);
    }

    #[test]
    fn rejects_bad_values() {
        let bad = |f: fn(&mut RuntimeConfig)| {
            let mut c = RuntimeConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(|c| c.wall_time = Duration::ZERO).field, "wall_time");
        assert_eq!(bad(|c| c.cpu_seconds = 0).field, "cpu_seconds");
        assert_eq!(bad(|c| c.address_space_bytes = 1).field, "address_space_bytes");
        assert_eq!(bad(|c| c.max_line_bytes = 10).field, "max_line_bytes");
        assert_eq!(bad(|c| c.max_control_bytes = 2000).field, "max_control_bytes");
        assert_eq!(bad(|c| c.max_value_bytes = 0).field, "max_value_bytes");
        assert_eq!(bad(|c| c.sandbox_uid_base = 0).field, "sandbox_uid_base");
        assert_eq!(bad(|c| c.disk_bytes = 1000).field, "disk_bytes");
        assert_eq!(bad(|c| c.max_calls_in_flight = 0).field, "max_calls_in_flight");
        assert_eq!(bad(|c| c.max_unread_reply_bytes = 1024).field, "max_unread_reply_bytes");
        assert_eq!(bad(|c| c.max_buffered_events = 0).field, "max_buffered_events");
        assert_eq!(bad(|c| c.max_net_bytes = 0).field, "max_net_bytes");
        assert_eq!(bad(|c| c.max_net_connections = 0).field, "max_net_connections");
        assert_eq!(bad(|c| c.max_net_connections = MAX_NET_CONNECTIONS + 1).field, "max_net_connections");
        let process_with_net = bad(|c| {
            c.isolation = Isolation::Process;
            c.allow_net = vec!["example.com".parse().unwrap()];
        });
        assert_eq!(process_with_net.field, "allow_net");
        assert!(process_with_net.problem.contains("process isolation"), "{}", process_with_net.problem);
        assert_eq!(
            bad(|c| {
                c.python = Some("/usr/bin/python3".into());
                c.venv = Some("/venv".into());
            })
            .field,
            "venv"
        );
        for module in ["", "numpy.", ".x", "a b", "1x", "x,y", "os;rm"] {
            let c = RuntimeConfig { preload: vec![module.to_owned()], ..RuntimeConfig::default() };
            assert_eq!(c.validate().unwrap_err().field, "preload", "{module:?}");
        }
        assert_eq!(bad(|c| c.with_packages = vec!["--index-url=http://x".into()]).field, "with_packages");
        assert_eq!(bad(|c| c.allow_packages = vec!["a b".into()]).field, "allow_packages");
        let ok = RuntimeConfig {
            preload: vec!["numpy".into(), "os.path".into(), "_x1".into()],
            with_packages: vec!["tabulate==0.9.0".into()],
            allow_packages: vec!["Tabulate".into()],
            ..RuntimeConfig::default()
        };
        ok.validate().unwrap();
    }
}
