//! The budgets table: every numeric budget of a runtime, in one place.
//!
//! A row says what a budget is called in each interface and what it may
//! be: its [`RuntimeConfig`] field and unit, its `pycage` flag, its
//! `pycage.Runtime` keyword (each with the unit that interface speaks),
//! its key on the wire when the child is told it, whether one run may
//! override it, its default (read from [`RuntimeConfig::default`]), its
//! bounds, and the line the docs show. From it:
//!
//! - [`RuntimeConfig::validate`] checks every bound, and its message states
//!   the real bound in the field's unit ([`BudgetRow::check`]);
//! - the CLI builds its budget flags and their messages (in the flag's
//!   unit: `--memory-mb must be at least 64`);
//! - the Python package's keywords and their checks are generated from it
//!   ([`python_module`], checked in as `pycage/_budgets.py`; a test fails
//!   when the file is out of date);
//! - the budgets table of `docs/semantics.md` is generated from it
//!   ([`markdown_table`], checked the same way).
//!
//! Adding a budget is one row here, its field in [`RuntimeConfig`] and its
//! enforcement; the generated files follow (`PYCAGE_BLESS=1 cargo test -p
//! pycage-runtime --test generated` rewrites them).

use std::time::Duration;

use crate::config::{ConfigError, RuntimeConfig};

impl RuntimeConfig {
    /// Checks every field; the runtime refuses to start with a bad one.
    /// Every numeric budget's bounds live in [`BUDGETS`]; the other
    /// settings are checked beside their fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for row in BUDGETS {
            row.check(self)?;
        }
        self.validate_settings()
    }
}

/// The unit a value is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    /// Mebibytes (2^20 bytes).
    Mib,
    Millis,
    Seconds,
    /// A plain number (processes, calls, events).
    Count,
}

impl Unit {
    /// How many of the base unit (bytes, milliseconds, one) one of this is.
    pub fn scale(self) -> u64 {
        match self {
            Unit::Bytes | Unit::Millis | Unit::Count => 1,
            Unit::Mib => 1 << 20,
            Unit::Seconds => 1000,
        }
    }

    /// The name of the base unit this one scales: values in units of the
    /// same base convert into each other.
    fn base(self) -> &'static str {
        match self {
            Unit::Bytes | Unit::Mib => "bytes",
            Unit::Millis | Unit::Seconds => "milliseconds",
            Unit::Count => "count",
        }
    }

    /// The suffix of a value in messages and docs.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Bytes => " bytes",
            Unit::Mib => " MiB",
            Unit::Millis => " ms",
            Unit::Seconds => " s",
            Unit::Count => "",
        }
    }

    /// The Python name of the unit (`_budgets.py`).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Mib => "MiB",
            Unit::Millis => "ms",
            Unit::Seconds => "s",
            Unit::Count => "count",
        }
    }
}

/// One budget (see the module docs).
pub struct BudgetRow {
    /// The [`RuntimeConfig`] field.
    pub field: &'static str,
    /// The unit of the field's value (a `Duration` field is in `Millis` or
    /// `Seconds`).
    pub unit: Unit,
    /// The `pycage` flag (without `--`) and the unit of its value.
    pub flag: Option<(&'static str, Unit)>,
    /// The `pycage.Runtime` keyword and the unit of its value (seconds
    /// accept fractions).
    pub python: Option<(&'static str, Unit)>,
    /// The key of the `boot` frame (and a session's `run` frame) that tells
    /// the child, if the child is told.
    pub wire: Option<&'static str>,
    /// Whether one run may override it (`RunRequest::limits`, a `run`
    /// keyword in Python).
    pub per_run: bool,
    /// Smallest value, in `unit`.
    pub min: u64,
    /// Largest value, in `unit`.
    pub max: u64,
    /// What it bounds and how it is enforced (the docs' line).
    pub doc: &'static str,
    get: fn(&RuntimeConfig) -> u64,
    set: fn(&mut RuntimeConfig, u64),
}

impl std::fmt::Debug for BudgetRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetRow").field("field", &self.field).finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn clamp_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Every budget (see the module docs).
pub const BUDGETS: &[BudgetRow] = &[
    BudgetRow {
        field: "wall_time",
        unit: Unit::Millis,
        flag: Some(("wall-ms", Unit::Millis)),
        python: Some(("wall_seconds", Unit::Seconds)),
        wire: None,
        per_run: true,
        min: 1,
        max: u64::MAX,
        doc: "wall clock, from leaving the queue to settlement → `timeout`",
        get: |c| millis(c.wall_time),
        set: |c, v| c.wall_time = Duration::from_millis(v),
    },
    BudgetRow {
        field: "cpu_seconds",
        unit: Unit::Seconds,
        flag: Some(("cpu-seconds", Unit::Seconds)),
        python: Some(("cpu_seconds", Unit::Seconds)),
        wire: Some("cpuSeconds"),
        per_run: true,
        min: 1,
        max: u64::MAX,
        doc: "CPU time of the run's processes together (watchdog) and of each (`RLIMIT_CPU`) → `timeout`",
        get: |c| c.cpu_seconds,
        set: |c, v| c.cpu_seconds = v,
    },
    BudgetRow {
        field: "address_space_bytes",
        unit: Unit::Bytes,
        flag: Some(("memory-mb", Unit::Mib)),
        python: Some(("address_space_bytes", Unit::Bytes)),
        wire: Some("addressSpaceBytes"),
        per_run: true,
        min: crate::config::MIN_ADDRESS_SPACE_BYTES,
        max: u64::MAX,
        doc: "memory: the PSS of the run's processes together (watchdog; `memory.max` with a delegated cgroup) → \
              `worker-exit`; a generous `RLIMIT_AS` backstop per process → `MemoryError`",
        get: |c| c.address_space_bytes,
        set: |c, v| c.address_space_bytes = v,
    },
    BudgetRow {
        field: "max_log_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-log-bytes", Unit::Bytes)),
        python: Some(("max_log_bytes", Unit::Bytes)),
        wire: Some("maxLogBytes"),
        per_run: false,
        min: 0,
        max: u64::MAX,
        doc: "log bytes (both sides keep a ledger) → cut with one marker line",
        get: |c| c.max_log_bytes,
        set: |c, v| c.max_log_bytes = v,
    },
    BudgetRow {
        field: "max_value_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-value-bytes", Unit::Bytes)),
        python: Some(("max_value_bytes", Unit::Bytes)),
        wire: Some("maxValueBytes"),
        per_run: false,
        min: 1,
        max: u64::MAX,
        doc: "canonical JSON size of the value → `output-limit`",
        get: |c| c.max_value_bytes,
        set: |c, v| c.max_value_bytes = v,
    },
    BudgetRow {
        field: "max_display_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-display-bytes", Unit::Bytes)),
        python: Some(("max_display_bytes", Unit::Bytes)),
        wire: Some("maxDisplayBytes"),
        per_run: false,
        min: 0,
        max: u64::MAX,
        doc: "rich output: the encoded `display` frames of a run (both sides keep a ledger; capped at \
              `max_line_bytes`) → later displays dropped, one marker display",
        get: |c| c.max_display_bytes,
        set: |c, v| c.max_display_bytes = v,
    },
    BudgetRow {
        field: "max_line_bytes",
        unit: Unit::Bytes,
        flag: None,
        python: Some(("max_line_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 1024,
        max: 1 << 40,
        doc: "one protocol line from the child → `output-limit`, the child is killed",
        get: |c| c.max_line_bytes as u64,
        set: |c, v| c.max_line_bytes = clamp_usize(v),
    },
    BudgetRow {
        field: "max_control_bytes",
        unit: Unit::Bytes,
        flag: None,
        python: Some(("max_control_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 1024,
        max: u64::MAX,
        doc: "all protocol bytes from the child in a run (at least `max_line_bytes`) → `output-limit`, the child is killed",
        get: |c| c.max_control_bytes,
        set: |c, v| c.max_control_bytes = v,
    },
    BudgetRow {
        field: "grace",
        unit: Unit::Millis,
        flag: None,
        python: Some(("grace_seconds", Unit::Seconds)),
        wire: None,
        per_run: false,
        min: 0,
        max: 60_000,
        doc: "between SIGTERM and SIGKILL when a run's process must be stopped",
        get: |c| millis(c.grace),
        set: |c, v| c.grace = Duration::from_millis(v),
    },
    BudgetRow {
        field: "max_processes",
        unit: Unit::Count,
        flag: None,
        python: Some(("max_processes", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: 1 << 22,
        doc: "processes and threads of a sandboxed run (`RLIMIT_NPROC` in its user namespace)",
        get: |c| c.max_processes,
        set: |c, v| c.max_processes = v,
    },
    BudgetRow {
        field: "max_file_bytes",
        unit: Unit::Bytes,
        flag: None,
        python: Some(("max_file_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 0,
        max: u64::MAX,
        doc: "one file of a sandboxed run (`RLIMIT_FSIZE`)",
        get: |c| c.max_file_bytes,
        set: |c, v| c.max_file_bytes = v,
    },
    BudgetRow {
        field: "max_open_files",
        unit: Unit::Count,
        flag: None,
        python: Some(("max_open_files", Unit::Count)),
        wire: None,
        per_run: false,
        min: 16,
        max: 1 << 20,
        doc: "open files of each process of a sandboxed run (`RLIMIT_NOFILE`)",
        get: |c| c.max_open_files,
        set: |c, v| c.max_open_files = v,
    },
    BudgetRow {
        field: "disk_bytes",
        unit: Unit::Bytes,
        flag: Some(("disk-mb", Unit::Mib)),
        python: Some(("disk_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: crate::config::MIN_DISK_BYTES,
        max: u64::MAX,
        doc: "`/work`, `/tmp` and `/dev/shm` of a sandboxed run together: a size- and inode-capped tmpfs → `ENOSPC`",
        get: |c| c.disk_bytes,
        set: |c, v| c.disk_bytes = v,
    },
    BudgetRow {
        field: "sysv_shm_bytes",
        unit: Unit::Bytes,
        flag: None,
        python: None,
        wire: None,
        per_run: false,
        min: 0,
        max: u64::MAX,
        doc: "SysV shared memory of a sandboxed run (its IPC namespace's `kernel.shmall`, `shmmax`)",
        get: |c| c.sysv_shm_bytes,
        set: |c, v| c.sysv_shm_bytes = v,
    },
    BudgetRow {
        field: "max_output_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-output-bytes", Unit::Bytes)),
        python: Some(("max_output_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 0,
        max: u64::MAX,
        doc: "bytes copied from `out/` to an output directory: files past it are skipped whole and named (the \
              copy also stops at 10,000 entries, and never overwrites or enters what already exists in the output \
              directory)",
        get: |c| c.max_output_bytes,
        set: |c, v| c.max_output_bytes = v,
    },
    BudgetRow {
        field: "max_journal_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-journal-bytes", Unit::Bytes)),
        python: Some(("max_journal_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 4096,
        max: u64::MAX,
        doc: "a durable run's journal (its program, calls and replies; `docs/durable.md`): a run over it cannot \
              suspend (a call that would suspend it ends it as `output-limit`), and a resume refuses a bigger journal",
        get: |c| c.max_journal_bytes,
        set: |c, v| c.max_journal_bytes = v,
    },
    BudgetRow {
        field: "max_calls_in_flight",
        unit: Unit::Count,
        flag: Some(("max-calls-in-flight", Unit::Count)),
        python: Some(("max_calls_in_flight", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: 65_536,
        doc: "binding calls made and not yet read back by the program: no binding starts beyond it",
        get: |c| c.max_calls_in_flight as u64,
        set: |c, v| c.max_calls_in_flight = clamp_usize(v),
    },
    BudgetRow {
        field: "max_unread_reply_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-unread-reply-bytes", Unit::Bytes)),
        python: Some(("max_unread_reply_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: crate::config::MIN_UNREAD_REPLY_BYTES,
        max: u64::MAX,
        doc: "reply bytes the program has not read: no new call starts until it has",
        get: |c| c.max_unread_reply_bytes,
        set: |c, v| c.max_unread_reply_bytes = v,
    },
    BudgetRow {
        field: "max_buffered_events",
        unit: Unit::Count,
        flag: Some(("max-buffered-events", Unit::Count)),
        python: Some(("max_buffered_events", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: 1 << 20,
        doc: "events (logs, calls) buffered for a streaming consumer: a slow one slows the run, nothing is lost",
        get: |c| c.max_buffered_events as u64,
        set: |c, v| c.max_buffered_events = clamp_usize(v),
    },
    BudgetRow {
        field: "max_net_bytes",
        unit: Unit::Bytes,
        flag: Some(("max-net-bytes", Unit::Bytes)),
        python: Some(("max_net_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 1,
        max: u64::MAX,
        doc: "bytes through the egress proxy (`--allow-net`), both ways, all connections: the crossing transfer is cut",
        get: |c| c.max_net_bytes,
        set: |c, v| c.max_net_bytes = v,
    },
    BudgetRow {
        field: "max_net_connections",
        unit: Unit::Count,
        flag: Some(("max-net-connections", Unit::Count)),
        python: Some(("max_net_connections", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: crate::config::MAX_NET_CONNECTIONS,
        doc: "connections to the egress proxy, refused ones included: more are answered `429`",
        get: |c| c.max_net_connections,
        set: |c, v| c.max_net_connections = v,
    },
    BudgetRow {
        field: "install_timeout",
        unit: Unit::Millis,
        flag: Some(("install-seconds", Unit::Seconds)),
        python: Some(("install_seconds", Unit::Seconds)),
        wire: None,
        per_run: false,
        min: 1000,
        max: u64::MAX,
        doc: "installing a run's declared packages (resolving and downloading included), before it starts → `dependencies`",
        get: |c| millis(c.install_timeout),
        set: |c, v| c.install_timeout = Duration::from_millis(v),
    },
    BudgetRow {
        field: "package_cache_bytes",
        unit: Unit::Bytes,
        flag: Some(("package-cache-mb", Unit::Mib)),
        python: Some(("package_cache_bytes", Unit::Bytes)),
        wire: None,
        per_run: false,
        min: 1 << 20,
        max: u64::MAX,
        doc: "installed package sets kept in the cache: past it, the least recently used sets no run holds are removed",
        get: |c| c.package_cache_bytes,
        set: |c, v| c.package_cache_bytes = v,
    },
    BudgetRow {
        field: "max_concurrent_runs",
        unit: Unit::Count,
        flag: None,
        python: Some(("max_concurrent_runs", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: 1 << 20,
        doc: "runs in flight at once: more wait in FIFO order (their wall clock starts when they leave the queue)",
        get: |c| c.max_concurrent_runs as u64,
        set: |c, v| c.max_concurrent_runs = clamp_usize(v),
    },
    BudgetRow {
        field: "pool_size",
        unit: Unit::Count,
        flag: None,
        python: Some(("pool_size", Unit::Count)),
        wire: None,
        per_run: false,
        min: 0,
        max: 1024,
        doc: "children forked ahead of demand by the zygote",
        get: |c| c.pool_size as u64,
        set: |c, v| c.pool_size = clamp_usize(v),
    },
    BudgetRow {
        field: "zygote_max_runs",
        unit: Unit::Count,
        flag: None,
        python: Some(("zygote_max_runs", Unit::Count)),
        wire: None,
        per_run: false,
        min: 1,
        max: u64::MAX,
        doc: "children one zygote forks before it is replaced (they share its hash seed and layout)",
        get: |c| c.zygote_max_runs,
        set: |c, v| c.zygote_max_runs = v,
    },
    BudgetRow {
        field: "zygote_max_age",
        unit: Unit::Millis,
        flag: None,
        python: Some(("zygote_max_age_seconds", Unit::Seconds)),
        wire: None,
        per_run: false,
        min: 1,
        max: u64::MAX,
        doc: "age at which a zygote is replaced",
        get: |c| millis(c.zygote_max_age),
        set: |c, v| c.zygote_max_age = Duration::from_millis(v),
    },
];

/// `value` (in `from`) in `to`, rounded up when it does not divide; `None`
/// when the units measure different things.
pub fn convert(value: u64, from: Unit, to: Unit) -> Option<u64> {
    if from.base() != to.base() {
        return None;
    }
    let base = u128::from(value) * u128::from(from.scale());
    let out = base.div_ceil(u128::from(to.scale()));
    Some(u64::try_from(out).unwrap_or(u64::MAX))
}

/// A row's bounds in `unit` (rounded inward; `u64::MAX`: no maximum).
pub fn bound(row: &BudgetRow, unit: Unit) -> (u64, u64) {
    let min = convert(row.min, row.unit, unit).unwrap_or(row.min);
    let max = if row.max == u64::MAX {
        u64::MAX
    } else {
        let base = u128::from(row.max) * u128::from(row.unit.scale());
        u64::try_from(base / u128::from(unit.scale())).unwrap_or(u64::MAX)
    };
    (min, max)
}

impl BudgetRow {
    /// The value in `config`, in [`BudgetRow::unit`].
    pub fn get(&self, config: &RuntimeConfig) -> u64 {
        (self.get)(config)
    }

    /// Sets the value, given in [`BudgetRow::unit`] (unchecked: see
    /// [`RuntimeConfig::validate`]).
    pub fn set(&self, config: &mut RuntimeConfig, value: u64) {
        (self.set)(config, value)
    }

    /// The default, in [`BudgetRow::unit`].
    pub fn default_value(&self) -> u64 {
        self.get(&RuntimeConfig::default())
    }

    /// The bound a value breaks, as "must be at least 64" / "must be
    /// between 1 and 65536", in `unit` (bounds rounded inward).
    pub fn bound_text(&self, unit: Unit) -> String {
        let (min, max) = bound(self, unit);
        let suffix = unit.suffix();
        match (min, max) {
            (0, u64::MAX) => "must be a number".to_owned(),
            (min, u64::MAX) => format!("must be at least {min}{suffix}"),
            (0, max) => format!("must be at most {max}{suffix}"),
            (min, max) => format!("must be between {min} and {max}{suffix}"),
        }
    }

    /// The bounds in `unit` for a table: ` (≥ 64)`, ` (1–65536)`, or nothing.
    fn bound_short(&self, unit: Unit) -> String {
        let (min, max) = bound(self, unit);
        match (min, max) {
            (0, u64::MAX) => String::new(),
            (min, u64::MAX) => format!(" (≥ {min})"),
            (0, max) => format!(" (≤ {max})"),
            (min, max) => format!(" ({min}–{max})"),
        }
    }

    /// Whether `value` (in [`BudgetRow::unit`]) is within the bounds.
    pub fn contains(&self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// Checks the value in `config`.
    pub fn check(&self, config: &RuntimeConfig) -> Result<(), ConfigError> {
        if self.contains(self.get(config)) {
            Ok(())
        } else {
            Err(ConfigError { field: self.field, problem: self.bound_text(self.unit) })
        }
    }
}

/// The row of a [`RuntimeConfig`] field.
pub fn row(field: &str) -> Option<&'static BudgetRow> {
    BUDGETS.iter().find(|r| r.field == field)
}

/// A value in a table's cell: `60000 ms`, `512 MiB`, `256`.
fn shown(value: u64, unit: Unit) -> String {
    let (value, unit) = match unit {
        Unit::Bytes if value >= 1 << 20 && value.is_multiple_of(1 << 20) => (value >> 20, Unit::Mib),
        Unit::Bytes if value >= 1 << 10 && value.is_multiple_of(1 << 10) => return format!("{} KiB", value >> 10),
        Unit::Millis if value >= 1000 && value.is_multiple_of(1000) => (value / 1000, Unit::Seconds),
        other => (value, other),
    };
    format!("{value}{}", unit.suffix())
}

/// The budgets table of `docs/semantics.md`.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| budget (`RuntimeConfig`) | default | `pycage` flag | `pycage.Runtime` keyword | per run | what it bounds |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in BUDGETS {
        let flag = r.flag.map_or_else(|| "—".to_owned(), |(f, u)| format!("`--{f}`{}", r.bound_short(u)));
        let python = r.python.map_or_else(|| "—".to_owned(), |(p, _)| format!("`{p}`"));
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            r.field,
            shown(r.default_value(), r.unit),
            flag,
            python,
            if r.per_run { "yes" } else { "—" },
            r.doc
        ));
    }
    out
}

/// The Python package's `pycage/_budgets.py`.
pub fn python_module() -> String {
    let mut out = String::from(
        "\"\"\"The budgets `pycage.Runtime` takes, generated from pycage-runtime's\n\
         budgets table (crates/pycage-runtime/src/budgets.rs). Do not edit: run\n\
         `PYCAGE_BLESS=1 cargo test -p pycage-runtime --test generated`.\n\n\
         Each entry: keyword -> (config field, keyword unit, field unit, size of\n\
         one keyword unit and of one field unit in their base unit (bytes,\n\
         milliseconds, one), minimum and maximum (None: none) in the field's\n\
         unit, default in the field's unit, whether one run may override it).\n\"\"\"\n\n\
         BUDGETS = {\n",
    );
    for r in BUDGETS {
        let Some((keyword, unit)) = r.python else { continue };
        let max = if r.max == u64::MAX { "None".to_owned() } else { r.max.to_string() };
        out.push_str(&format!(
            "    \"{keyword}\": (\"{}\", \"{}\", \"{}\", {}, {}, {}, {max}, {}, {}),\n",
            r.field,
            unit.name(),
            r.unit.name(),
            unit.scale(),
            r.unit.scale(),
            r.min,
            r.default_value(),
            if r.per_run { "True" } else { "False" },
        ));
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_names_a_field_once_and_its_default_is_valid() {
        let c = RuntimeConfig::default();
        for (i, r) in BUDGETS.iter().enumerate() {
            assert!(BUDGETS.iter().skip(i + 1).all(|o| o.field != r.field), "{} twice", r.field);
            assert!(r.check(&c).is_ok(), "{}: the default breaks its own bound", r.field);
            assert!(r.min <= r.max, "{}", r.field);
            // set(get()) is the identity.
            let mut d = c.clone();
            r.set(&mut d, r.get(&c));
            assert_eq!(r.get(&d), r.get(&c), "{}", r.field);
        }
    }

    #[test]
    fn bounds_are_stated_in_each_interfaces_unit() {
        let memory = row("address_space_bytes").unwrap();
        assert_eq!(memory.bound_text(Unit::Mib), "must be at least 64 MiB");
        assert_eq!(memory.bound_text(Unit::Bytes), "must be at least 67108864 bytes");
        let calls = row("max_calls_in_flight").unwrap();
        assert_eq!(calls.bound_text(Unit::Count), "must be between 1 and 65536");
        let grace = row("grace").unwrap();
        assert_eq!(grace.bound_text(Unit::Seconds), "must be at most 60 s");
        assert_eq!(convert(1, Unit::Mib, Unit::Bytes), Some(1 << 20));
        assert_eq!(convert(1500, Unit::Millis, Unit::Seconds), Some(2));
        assert_eq!(convert(1, Unit::Mib, Unit::Seconds), None);
    }

    #[test]
    fn validate_reports_each_rows_bound() {
        for r in BUDGETS {
            if r.min == 0 {
                continue;
            }
            let mut c = RuntimeConfig::default();
            r.set(&mut c, r.min - 1);
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, r.field);
            assert_eq!(e.problem, r.bound_text(r.unit), "{}", r.field);
        }
    }
}
