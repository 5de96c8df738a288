//! The host↔zygote control protocol: typed messages, their encoders, and a
//! validator for what the zygote answers.
//!
//! The zygote (`python/pycage/zygote.py`) is a trusted fork server, but
//! its answers are still read like everything else from a process: bounded
//! ([`MAX_ZYGOTE_PACKET`]), parsed without recursion into a [`JsonValue`],
//! and checked key-exactly ([`parse_zygote_answer`]), so a malformed answer
//! is an [`AnswerError`] with a message, never a silent drop. The host
//! treats a zygote that answers malformed as dead (see the runtime's
//! `zygote` module).
//!
//! Messages are JSON objects, one per `SOCK_SEQPACKET` packet; descriptors
//! travel beside them (`SCM_RIGHTS`). Host to zygote ([`ZygoteRequest`]):
//!
//! | `type` | fields | descriptors |
//! |---|---|---|
//! | `spawn` | `id`, `cwd`, `env` {name: value}, `rlimits` {name: [soft, hard]}, optional `join`, optional `cold` (`true`) | fd 3, fd 1/2 (+ 8 join fds) |
//! | `reap` | `id` | |
//! | `quit` | | |
//!
//! `join` is `{hostIds: [uid, gid] or null, plan: n, env: {name: value},
//! remaps: [[host, inside], ...], confine: [step, ...]}`; each step is
//! `{op, ...}` ([`ConfineStep`]). `env`, `remaps` and `confine` are the
//! join's plan, the same for every run of a runtime: they are sent with
//! the first spawn that uses plan `n`, and a later spawn of the same plan
//! sends `{hostIds, plan: n}` only ([`JoinRequest::plan`]). The zygote
//! keeps the last plan it was sent (it sets the plan's `env` in its own
//! environment, which every child inherits), and refuses a spawn that
//! names another.
//! `cold: true` asks the child to skip its warm-up ([`SpawnRequest::cold`]).
//!
//! Zygote to host ([`ZygoteAnswer`]):
//!
//! | `type` | fields | descriptors |
//! |---|---|---|
//! | `ready` | `pid`, `threads` | |
//! | `spawned` | `id`, `pid` | the child's pidfd |
//! | `spawn-failed` | `id`, `message` | |
//! | `reaped` | `id`, `status`, `cpuNs` | |

use crate::encode::write_json_string;
use crate::frames::Obj;
use crate::json::{JsonValue, ValueRef};

/// Largest control packet either side accepts.
pub const MAX_ZYGOTE_PACKET: usize = 64 * 1024;

/// Longest `spawn-failed` message kept.
pub const MAX_ZYGOTE_MESSAGE: usize = 4096;

/// Every message's keys, by `type`: `(type, required, optional)`. The
/// zygote's side is checked against this table by the mirror test.
pub const ZYGOTE_FIELDS: &[(&str, &[&str], &[&str])] = &[
    ("spawn", &["type", "id", "cwd", "env", "rlimits"], &["join", "cold"]),
    ("reap", &["type", "id"], &[]),
    ("quit", &["type"], &[]),
    ("ready", &["type", "pid", "threads"], &[]),
    ("spawned", &["type", "id", "pid"], &[]),
    ("spawn-failed", &["type", "id", "message"], &[]),
    ("reaped", &["type", "id", "status", "cpuNs"], &[]),
];

/// Keys of `spawn.join`.
pub const JOIN_FIELDS: &[&str] = &["hostIds", "plan", "env", "remaps", "confine"];

/// A resource limit a confinement step sets, by its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rlimit {
    Nproc,
    Fsize,
    Nofile,
    Core,
    /// Queued signals (per user namespace and uid, so per run when set
    /// before the nested user namespace).
    Sigpending,
    /// POSIX message queue bytes.
    Msgqueue,
    /// Locked memory.
    Memlock,
}

impl Rlimit {
    /// The wire name (`resource` of a `limit` step).
    pub fn as_str(self) -> &'static str {
        match self {
            Rlimit::Nproc => "nproc",
            Rlimit::Fsize => "fsize",
            Rlimit::Nofile => "nofile",
            Rlimit::Core => "core",
            Rlimit::Sigpending => "sigpending",
            Rlimit::Msgqueue => "msgqueue",
            Rlimit::Memlock => "memlock",
        }
    }
}

/// One of the sandbox's final steps, taken by the program's own process
/// before it reads anything of its run. The sandbox builds the ordered
/// list once (policy and order live in Rust only); the exec path runs it
/// in Rust after fork, and a zygote's child runs the same list through a
/// table of one-operation functions that refuses anything it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfineStep {
    /// `PR_SET_PDEATHSIG(SIGKILL)` (re-armed after credential changes).
    DeathSignal,
    /// The limit, soft = hard (never above the current hard limit).
    Limit { resource: Rlimit, value: u64 },
    /// `unshare(CLONE_NEWCGROUP)`: a cgroup namespace rooted at the
    /// process's cgroup, so `/proc/self/cgroup` shows no host path.
    UnshareCgroup,
    /// `unshare(CLONE_NEWUSER)`: a nested user namespace.
    UnshareUser,
    /// `PR_SET_DUMPABLE(1)`: a credential change made the process
    /// non-dumpable, which makes its own `/proc/self` map files root's.
    Dumpable,
    /// `setgroups` `deny`, then these `uid_map` and `gid_map` lines.
    IdMaps { uid_map: String, gid_map: String },
    /// No descriptor above fd 3 survives into the program (the Landlock
    /// ruleset only until [`ConfineStep::Landlock`] has used it).
    CloseFds,
    /// Empty bounding, ambient, permitted, effective and inheritable sets.
    DropCaps,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// `landlock_restrict_self` with the run's ruleset (whose full
    /// enforcement was checked when it was built), then it is closed.
    Landlock,
    /// One seccomp filter (`sock_filter` array), installed with
    /// `PR_SET_SECCOMP`; filters go in list order.
    Seccomp { filter: Vec<u8> },
}

impl ConfineStep {
    /// The wire name (`op`).
    pub fn op(&self) -> &'static str {
        match self {
            ConfineStep::DeathSignal => "death-signal",
            ConfineStep::Limit { .. } => "limit",
            ConfineStep::UnshareCgroup => "unshare-cgroup",
            ConfineStep::UnshareUser => "unshare-user",
            ConfineStep::Dumpable => "dumpable",
            ConfineStep::IdMaps { .. } => "id-maps",
            ConfineStep::CloseFds => "close-fds",
            ConfineStep::DropCaps => "drop-caps",
            ConfineStep::NoNewPrivs => "no-new-privs",
            ConfineStep::Landlock => "landlock",
            ConfineStep::Seccomp { .. } => "seccomp",
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut o = Obj::new(out);
        o.str("op", self.op());
        match self {
            ConfineStep::Limit { resource, value } => {
                o.str("resource", resource.as_str());
                o.u64("value", *value);
            }
            ConfineStep::IdMaps { uid_map, gid_map } => {
                o.str("uidMap", uid_map);
                o.str("gidMap", gid_map);
            }
            ConfineStep::Seccomp { filter } => o.str("filter", &hex(filter)),
            ConfineStep::DeathSignal
            | ConfineStep::UnshareCgroup
            | ConfineStep::UnshareUser
            | ConfineStep::Dumpable
            | ConfineStep::CloseFds
            | ConfineStep::DropCaps
            | ConfineStep::NoNewPrivs
            | ConfineStep::Landlock => {}
        }
        o.end();
    }
}

/// Every confinement step's keys besides `op`, for the mirror test.
pub const CONFINE_FIELDS: &[(&str, &[&str])] = &[
    ("death-signal", &[]),
    ("limit", &["resource", "value"]),
    ("unshare-cgroup", &[]),
    ("unshare-user", &[]),
    ("dumpable", &[]),
    ("id-maps", &["uidMap", "gidMap"]),
    ("close-fds", &[]),
    ("drop-caps", &[]),
    ("no-new-privs", &[]),
    ("landlock", &[]),
    ("seccomp", &["filter"]),
];

/// How a zygote's child joins a sandbox shell and confines itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// On a root host, the run's leased host uid and gid: the zygote's
    /// child drops to them before it joins (the run's user namespace maps
    /// only them).
    pub host_ids: Option<(u32, u32)>,
    /// The plan's number on this zygote: `body` is sent with the first
    /// spawn of a plan and left out of the next ones. A 3 KB plan decoded,
    /// checked and looked up in every spawn cost the zygote about 0.07 ms
    /// of CPU per sandboxed child; `docs/perf-log.md`, "A join plan sent
    /// once".
    pub plan: u64,
    pub body: Option<JoinPlanBody>,
}

/// What a join plan holds: the same for every run of a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinPlanBody {
    /// The environment every child of the plan gets (on top of the
    /// zygote's; a spawn's own `env` comes after it). Set by the zygote in
    /// itself: four variables set in each child cost it about 40
    /// copy-on-write faults (`os.environ`, the C library's `setenv`).
    pub env: Vec<(String, String)>,
    /// Host path prefixes and where the sandbox shows them.
    pub remaps: Vec<(String, String)>,
    /// The program's own final steps, in order.
    pub confine: Vec<ConfineStep>,
}

/// `spawn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub id: u64,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// `(name, soft, hard)`; names as in [`Rlimit`] plus `cpu` and `as`.
    pub rlimits: Vec<(String, u64, u64)>,
    pub join: Option<JoinRequest>,
    /// The child serves its run without warming up first: a warm-up moves
    /// copy-on-write faults off a later run's critical path, and is wasted
    /// CPU when a run is already waiting for this child or the host's runs
    /// already keep every core busy. Sent only when `true`.
    pub cold: bool,
}

/// What the host asks of the zygote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZygoteRequest {
    Spawn(SpawnRequest),
    Reap { id: u64 },
    Quit,
}

/// `{name: value, ...}`.
fn encode_env(out: &mut Vec<u8>, env: &[(String, String)]) {
    let mut e = Obj::new(out);
    for (k, v) in env {
        e.str(k, v);
    }
    e.end();
}

impl ZygoteRequest {
    /// The message, as one packet's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut o = Obj::new(&mut out);
        match self {
            ZygoteRequest::Quit => o.str("type", "quit"),
            ZygoteRequest::Reap { id } => {
                o.str("type", "reap");
                o.u64("id", *id);
            }
            ZygoteRequest::Spawn(s) => {
                o.str("type", "spawn");
                o.u64("id", s.id);
                o.str("cwd", &s.cwd);
                encode_env(o.key("env"), &s.env);
                let rl = o.key("rlimits");
                let mut r = Obj::new(rl);
                for (name, soft, hard) in &s.rlimits {
                    let pair = r.key(name);
                    pair.extend_from_slice(format!("[{soft},{hard}]").as_bytes());
                }
                r.end();
                if let Some(join) = &s.join {
                    let j = o.key("join");
                    let mut jo = Obj::new(j);
                    let ids = jo.key("hostIds");
                    match join.host_ids {
                        Some((uid, gid)) => ids.extend_from_slice(format!("[{uid},{gid}]").as_bytes()),
                        None => ids.extend_from_slice(b"null"),
                    }
                    jo.u64("plan", join.plan);
                    if let Some(body) = &join.body {
                        encode_env(jo.key("env"), &body.env);
                        let remaps = jo.key("remaps");
                        remaps.push(b'[');
                        for (i, (host, inside)) in body.remaps.iter().enumerate() {
                            if i > 0 {
                                remaps.push(b',');
                            }
                            remaps.push(b'[');
                            write_json_string(remaps, host);
                            remaps.push(b',');
                            write_json_string(remaps, inside);
                            remaps.push(b']');
                        }
                        remaps.push(b']');
                        let steps = jo.key("confine");
                        steps.push(b'[');
                        for (i, step) in body.confine.iter().enumerate() {
                            if i > 0 {
                                steps.push(b',');
                            }
                            step.encode(steps);
                        }
                        steps.push(b']');
                    }
                    jo.end();
                }
                if s.cold {
                    o.bool("cold", true);
                }
            }
        }
        o.end();
        out
    }
}

/// What the zygote says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZygoteAnswer {
    /// Everything is imported; requests are served from now on.
    Ready { pid: i32, threads: u64 },
    /// Child `id` was forked as `pid` (its pidfd is attached).
    Spawned { id: u64, pid: i32 },
    /// Child `id` could not be forked.
    SpawnFailed { id: u64, message: String },
    /// Child `id` was reaped: its wait status and CPU time (with its reaped
    /// descendants').
    Reaped { id: u64, status: i32, cpu_ns: u64 },
}

/// Why an answer from the zygote was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("a packet of {0} bytes is over the {MAX_ZYGOTE_PACKET}-byte cap")]
    TooLarge(usize),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not an object with a string `type`")]
    NoType,
    #[error("unknown message type {0:?}")]
    UnknownType(String),
    #[error("`{kind}` lacks `{field}`")]
    Missing { kind: &'static str, field: &'static str },
    #[error("`{kind}` has an unexpected key {field:?}")]
    Unexpected { kind: &'static str, field: String },
    #[error("`{kind}.{field}` {problem}")]
    Invalid { kind: &'static str, field: &'static str, problem: &'static str },
    #[error("`{0}` is a host-to-zygote message")]
    WrongDirection(&'static str),
}

/// Validates one packet from the zygote: key-exact, typed, bounded.
pub fn parse_zygote_answer(packet: &[u8]) -> Result<ZygoteAnswer, AnswerError> {
    if packet.len() > MAX_ZYGOTE_PACKET {
        return Err(AnswerError::TooLarge(packet.len()));
    }
    let value = JsonValue::parse(packet).map_err(|e| AnswerError::NotJson(e.to_string()))?;
    let root = value.root();
    let kind = root.get("type").and_then(|t| t.as_str()).ok_or(AnswerError::NoType)?;
    let (kind, required, optional) = ZYGOTE_FIELDS
        .iter()
        .find(|(k, _, _)| *k == kind)
        .copied()
        .ok_or_else(|| AnswerError::UnknownType(kind.chars().take(64).collect()))?;
    if matches!(kind, "spawn" | "reap" | "quit") {
        return Err(AnswerError::WrongDirection(kind));
    }
    check_keys(root, kind, required, optional)?;
    let u64_of = |field: &'static str| {
        root.get(field).and_then(|v| v.as_number()).and_then(|n| n.as_u64()).ok_or(AnswerError::Invalid {
            kind,
            field,
            problem: "is not a non-negative integer",
        })
    };
    let i32_of = |field: &'static str| {
        root.get(field)
            .and_then(|v| v.as_number())
            .and_then(|n| n.as_i64())
            .and_then(|n| i32::try_from(n).ok())
            .ok_or(AnswerError::Invalid { kind, field, problem: "is not a 32-bit integer" })
    };
    let pid_of = |field: &'static str| match i32_of(field)? {
        p if p > 0 => Ok(p),
        _ => Err(AnswerError::Invalid { kind, field, problem: "is not a process id" }),
    };
    Ok(match kind {
        "ready" => ZygoteAnswer::Ready { pid: pid_of("pid")?, threads: u64_of("threads")? },
        "spawned" => ZygoteAnswer::Spawned { id: u64_of("id")?, pid: pid_of("pid")? },
        "spawn-failed" => {
            let message = root.get("message").and_then(|m| m.as_str()).ok_or(AnswerError::Invalid {
                kind,
                field: "message",
                problem: "is not a string",
            })?;
            let message: String = message.chars().take(MAX_ZYGOTE_MESSAGE).collect();
            ZygoteAnswer::SpawnFailed { id: u64_of("id")?, message }
        }
        _ => ZygoteAnswer::Reaped { id: u64_of("id")?, status: i32_of("status")?, cpu_ns: u64_of("cpuNs")? },
    })
}

/// Every key is known and none is repeated; every required one is there.
fn check_keys(
    root: ValueRef<'_>,
    kind: &'static str,
    required: &'static [&'static str],
    optional: &'static [&'static str],
) -> Result<(), AnswerError> {
    let entries = root.as_object().ok_or(AnswerError::NoType)?;
    let mut seen = Vec::with_capacity(required.len() + optional.len());
    for (key, _) in entries {
        let Some(known) = required.iter().chain(optional).find(|k| **k == key) else {
            return Err(AnswerError::Unexpected { kind, field: key.chars().take(64).collect() });
        };
        if seen.contains(known) {
            return Err(AnswerError::Unexpected { kind, field: key.to_owned() });
        }
        seen.push(*known);
    }
    if let Some(missing) = required.iter().find(|k| !seen.contains(k)) {
        return Err(AnswerError::Missing { kind, field: missing });
    }
    Ok(())
}

/// Lowercase hex, as Python's `bytes.fromhex` reads it. A sandboxed spawn
/// carries its seccomp filter (kilobytes) this way: a `write!` per byte
/// was 10 % of the host's CPU in a closed loop of sandboxed runs.
fn hex(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.extend_from_slice(&[crate::encode::hex(b >> 4), crate::encode::hex(b)]);
    }
    // Only ASCII digits were written.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_the_documented_shape() {
        assert_eq!(ZygoteRequest::Reap { id: 3 }.encode(), br#"{"type":"reap","id":3}"#);
        assert_eq!(ZygoteRequest::Quit.encode(), br#"{"type":"quit"}"#);
        let spawn = SpawnRequest {
            id: 7,
            cwd: "/tmp/run \"x\"".into(),
            env: vec![("HOME".into(), "/tmp/run".into())],
            rlimits: vec![("nproc".into(), 64, 64)],
            join: None,
            cold: false,
        };
        assert_eq!(
            String::from_utf8(ZygoteRequest::Spawn(spawn.clone()).encode()).unwrap(),
            r#"{"type":"spawn","id":7,"cwd":"/tmp/run \"x\"","env":{"HOME":"/tmp/run"},"rlimits":{"nproc":[64,64]}}"#
        );
        let join = JoinRequest {
            host_ids: Some((1_500_001, 1_500_001)),
            plan: 3,
            body: Some(JoinPlanBody {
                env: vec![("HOME".into(), "/work".into())],
                remaps: vec![("/root/py".into(), "/opt/python".into())],
                confine: vec![
                    ConfineStep::DeathSignal,
                    ConfineStep::Limit { resource: Rlimit::Nproc, value: 66 },
                    ConfineStep::IdMaps { uid_map: "1000 0 1\n".into(), gid_map: "1000 0 1\n".into() },
                    ConfineStep::Seccomp { filter: vec![0x20, 0, 0xff] },
                ],
            }),
        };
        let named = JoinRequest { host_ids: None, plan: 3, body: None };
        let cold = SpawnRequest { cold: true, ..spawn.clone() };
        assert_eq!(
            String::from_utf8(ZygoteRequest::Spawn(cold).encode()).unwrap(),
            r#"{"type":"spawn","id":7,"cwd":"/tmp/run \"x\"","env":{"HOME":"/tmp/run"},"rlimits":{"nproc":[64,64]},"cold":true}"#
        );
        let spawn = SpawnRequest { join: Some(join), env: Vec::new(), rlimits: Vec::new(), ..spawn };
        assert_eq!(
            String::from_utf8(ZygoteRequest::Spawn(spawn.clone()).encode()).unwrap(),
            concat!(
                r#"{"type":"spawn","id":7,"cwd":"/tmp/run \"x\"","env":{},"rlimits":{},"join":{"hostIds":[1500001,1500001],"plan":3,"env":{"HOME":"/work"},"#,
                r#""remaps":[["/root/py","/opt/python"]],"confine":[{"op":"death-signal"},{"op":"limit","resource":"nproc","value":66},"#,
                r#"{"op":"id-maps","uidMap":"1000 0 1\n","gidMap":"1000 0 1\n"},{"op":"seccomp","filter":"2000ff"}]}}"#
            )
        );
        let spawn = SpawnRequest { join: Some(named), ..spawn };
        assert_eq!(
            String::from_utf8(ZygoteRequest::Spawn(spawn).encode()).unwrap(),
            r#"{"type":"spawn","id":7,"cwd":"/tmp/run \"x\"","env":{},"rlimits":{},"join":{"hostIds":null,"plan":3}}"#
        );
    }

    #[test]
    fn answers_parse_key_exactly() {
        let ok = |s: &str| parse_zygote_answer(s.as_bytes()).unwrap();
        assert_eq!(ok(r#"{"type":"ready","pid":12,"threads":1}"#), ZygoteAnswer::Ready { pid: 12, threads: 1 });
        assert_eq!(ok(r#"{"type":"spawned","id":1,"pid":99}"#), ZygoteAnswer::Spawned { id: 1, pid: 99 });
        assert_eq!(
            ok(r#"{"type":"reaped","id":1,"status":9,"cpuNs":1500}"#),
            ZygoteAnswer::Reaped { id: 1, status: 9, cpu_ns: 1500 }
        );
        assert_eq!(
            ok(r#"{"type":"spawn-failed","id":2,"message":"fork failed"}"#),
            ZygoteAnswer::SpawnFailed { id: 2, message: "fork failed".into() }
        );
    }

    #[test]
    fn malformed_answers_say_why() {
        let err = |s: &[u8]| parse_zygote_answer(s).unwrap_err().to_string();
        assert_eq!(err(b"[1]"), "not an object with a string `type`");
        assert!(err(b"{").starts_with("not JSON"));
        assert_eq!(err(br#"{"type":"hello"}"#), r#"unknown message type "hello""#);
        assert_eq!(err(br#"{"type":"spawned","id":1}"#), "`spawned` lacks `pid`");
        assert_eq!(err(br#"{"type":"spawned","id":1,"pid":2,"x":0}"#), r#"`spawned` has an unexpected key "x""#);
        assert_eq!(err(br#"{"type":"spawned","id":1,"id":1,"pid":2}"#), r#"`spawned` has an unexpected key "id""#);
        assert_eq!(err(br#"{"type":"spawned","id":-1,"pid":2}"#), "`spawned.id` is not a non-negative integer");
        assert_eq!(err(br#"{"type":"spawned","id":1,"pid":0}"#), "`spawned.pid` is not a process id");
        assert_eq!(
            err(br#"{"type":"reaped","id":1,"status":2.5,"cpuNs":0}"#),
            "`reaped.status` is not a 32-bit integer"
        );
        assert_eq!(err(br#"{"type":"reap","id":1}"#), "`reap` is a host-to-zygote message");
        let big = vec![b' '; MAX_ZYGOTE_PACKET + 1];
        assert_eq!(err(&big), format!("a packet of {} bytes is over the {MAX_ZYGOTE_PACKET}-byte cap", big.len()));
    }

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), expected);
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn every_step_has_a_field_row() {
        let steps = [
            ConfineStep::DeathSignal,
            ConfineStep::Limit { resource: Rlimit::Core, value: 0 },
            ConfineStep::UnshareCgroup,
            ConfineStep::UnshareUser,
            ConfineStep::Dumpable,
            ConfineStep::IdMaps { uid_map: String::new(), gid_map: String::new() },
            ConfineStep::CloseFds,
            ConfineStep::DropCaps,
            ConfineStep::NoNewPrivs,
            ConfineStep::Landlock,
            ConfineStep::Seccomp { filter: Vec::new() },
        ];
        assert_eq!(steps.len(), CONFINE_FIELDS.len());
        for step in steps {
            let mut out = Vec::new();
            step.encode(&mut out);
            let v = JsonValue::parse(&out).unwrap();
            let (_, fields) = CONFINE_FIELDS.iter().find(|(op, _)| *op == step.op()).unwrap();
            let keys: Vec<&str> = v.root().as_object().unwrap().map(|(k, _)| k).filter(|k| *k != "op").collect();
            assert_eq!(&keys, fields, "{}", step.op());
        }
    }
}
