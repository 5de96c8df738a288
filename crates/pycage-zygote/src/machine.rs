//! The zygote supervisor's decisions, without I/O: requests and answers
//! in; request ids, whom each answer goes to, when to look at the zygote
//! and when to give up on it out.
//!
//! The supervisor thread (`crate::supervisor`) owns the control socket, the
//! zygote's pidfd, its stderr and the clock; this machine owns every rule
//! about what the zygote may say and how long it may take:
//!
//! - each request gets the next id; an answer is routed to the waiter of
//!   its id exactly once, and an answer for an id nobody waits for (or a
//!   `spawned` without its pidfd, or a zygote with threads) means the
//!   zygote is broken: the driver kills it;
//! - a zygote gets [`START_TIMEOUT`] to import everything and say it is
//!   ready, then each request [`ANSWER_TIMEOUT`] for its answer (counted
//!   from when it was asked, or from readiness when it was asked before);
//!   after [`STATE_CHECK_AFTER`] of either, the driver looks whether it
//!   was stopped (`SIGSTOP`, a tracer), which also means replacing it;
//! - once the zygote is gone, every spawn waiter is handed back to be
//!   failed; reap waiters are dropped (the child died with the zygote, its
//!   status is unknown).
//!
//! The waiters are the driver's types (`S` for spawns, `R` for reaps): the
//! machine stores and returns them, and never looks inside.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pycage_protocol::zygote::ZygoteAnswer;

/// How long a request may wait for its answer once the zygote is ready.
/// A zygote answers within milliseconds (a fork; a `waitpid` of a child
/// that has exited); one that does not is treated as dead and replaced,
/// and runs waiting on it are served by its successor.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request waits before the supervisor looks at the zygote's
/// state: a stopped zygote (`SIGSTOP`, a tracer) is replaced at once.
pub const STATE_CHECK_AFTER: Duration = Duration::from_millis(200);

/// How long a zygote may take to import everything and say it is ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Shortest wait between two looks, so that a deadline just passed does
/// not spin the supervisor.
const MIN_CHECK: Duration = Duration::from_millis(10);

/// Why a zygote is replaced when the driver finds it stopped.
pub const STOPPED: &str = "it was stopped (a signal or a tracer) while a request waited";

/// What an answer asks of the driver.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered<S, R> {
    /// The zygote has imported everything.
    Ready,
    /// Child `id` was forked as `pid` (its pidfd came with the answer):
    /// hand it to `waiter`.
    Spawned { waiter: S, id: u64, pid: i32 },
    /// Child `id` could not be forked: fail `waiter` with `message`.
    Refused { waiter: S, message: String },
    /// Child `id` was reaped; `waiter` (if anyone waits) gets its wait
    /// status and CPU time.
    Reaped { waiter: Option<R>, status: i32, cpu_ns: u64 },
}

/// What the driver does about the clock now (see [`ZygoteMachine::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Nothing is late.
    Fine,
    /// Something has waited [`STATE_CHECK_AFTER`]: give up with [`STOPPED`]
    /// if the process is stopped.
    LookIfStopped,
    /// A deadline passed: give up, for this reason.
    GiveUp(String),
}

/// The state of one zygote's supervision (see the module docs).
pub struct ZygoteMachine<S, R> {
    started: Instant,
    /// When the zygote said it was ready.
    ready_at: Option<Instant>,
    next_id: u64,
    /// Spawns asked for and not answered: when, and who waits.
    spawns: HashMap<u64, (Instant, S)>,
    /// Reaps asked for and not answered: when, and who waits (if anyone).
    reaps: HashMap<u64, (Instant, Option<R>)>,
    quit_sent: bool,
}

impl<S, R> ZygoteMachine<S, R> {
    /// A zygote started at `started`, not ready yet.
    pub fn new(started: Instant) -> Self {
        ZygoteMachine {
            started,
            ready_at: None,
            next_id: 0,
            spawns: HashMap::new(),
            reaps: HashMap::new(),
            quit_sent: false,
        }
    }

    /// A spawn for `waiter`, asked at `now`: the id to send it under.
    pub fn spawn(&mut self, now: Instant, waiter: S) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.spawns.insert(id, (now, waiter));
        id
    }

    /// A reap of child `id`, asked at `now`.
    pub fn reap(&mut self, now: Instant, id: u64, waiter: Option<R>) {
        self.reaps.insert(id, (now, waiter));
    }

    /// Whether a `quit` is to be sent: the first time only.
    pub fn quit(&mut self) -> bool {
        !std::mem::replace(&mut self.quit_sent, true)
    }

    /// Routes one answer that arrived at `now` (`with_pidfd`: a descriptor
    /// came with it); `Err` when it cannot be one of ours.
    pub fn answer(&mut self, now: Instant, answer: ZygoteAnswer, with_pidfd: bool) -> Result<Answered<S, R>, String> {
        match answer {
            ZygoteAnswer::Ready { threads, .. } => {
                if threads != 1 {
                    return Err(format!("it has {threads} threads (a zygote must have one)"));
                }
                self.ready_at = Some(now);
                Ok(Answered::Ready)
            }
            ZygoteAnswer::Spawned { id, pid } => {
                if !with_pidfd {
                    return Err(format!("it answered spawn {id} without a pidfd"));
                }
                let Some((_, waiter)) = self.spawns.remove(&id) else {
                    return Err(format!("it answered spawn {id}, which nobody asked for"));
                };
                Ok(Answered::Spawned { waiter, id, pid })
            }
            ZygoteAnswer::SpawnFailed { id, message } => {
                let Some((_, waiter)) = self.spawns.remove(&id) else {
                    return Err(format!("it refused spawn {id}, which nobody asked for"));
                };
                Ok(Answered::Refused { waiter, message })
            }
            ZygoteAnswer::Reaped { id, status, cpu_ns } => {
                let Some((_, waiter)) = self.reaps.remove(&id) else {
                    return Err(format!("it reaped child {id}, which nobody asked for"));
                };
                Ok(Answered::Reaped { waiter, status, cpu_ns })
            }
        }
    }

    /// Since when, and against which deadline, the zygote has owed an
    /// answer; `None` when it is ready and nothing waits.
    fn owed(&self) -> Option<(Instant, Duration, &'static str)> {
        match self.ready_at {
            None => Some((self.started, START_TIMEOUT, "to start")),
            Some(ready) => {
                let asked = self.spawns.values().map(|(t, _)| *t).chain(self.reaps.values().map(|(t, _)| *t));
                let oldest = asked.map(|t| t.max(ready)).min()?;
                Some((oldest, ANSWER_TIMEOUT, "to answer"))
            }
        }
    }

    /// How long the driver may wait at `now` before it calls
    /// [`ZygoteMachine::check`] again; `None`: until something happens.
    /// Never more than [`STATE_CHECK_AFTER`] while an answer is owed.
    pub fn next_check(&self, now: Instant) -> Option<Duration> {
        let (since, limit, _) = self.owed()?;
        let waited = now.saturating_duration_since(since);
        let next = if waited < STATE_CHECK_AFTER { STATE_CHECK_AFTER } else { limit };
        Some(next.saturating_sub(waited).clamp(MIN_CHECK, STATE_CHECK_AFTER))
    }

    /// Whether the zygote is late at `now` (see [`Check`]).
    pub fn check(&self, now: Instant) -> Check {
        let Some((since, limit, what)) = self.owed() else { return Check::Fine };
        let waited = now.saturating_duration_since(since);
        if waited >= limit {
            Check::GiveUp(format!("it took more than {} s {what}", limit.as_secs()))
        } else if waited >= STATE_CHECK_AFTER {
            Check::LookIfStopped
        } else {
            Check::Fine
        }
    }

    /// The zygote is gone: every spawn waiter, to be failed. Reap waiters
    /// are dropped (their child died with the zygote).
    pub fn gone(&mut self) -> Vec<S> {
        self.reaps.clear();
        let mut ids: Vec<u64> = self.spawns.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.spawns.remove(&id)).map(|(_, waiter)| waiter).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Machine = ZygoteMachine<&'static str, &'static str>;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A machine whose zygote started at `t0` and was ready 1 s later.
    fn ready(t0: Instant) -> Machine {
        let mut m = Machine::new(t0);
        assert_eq!(m.answer(t0 + ms(1000), ZygoteAnswer::Ready { pid: 7, threads: 1 }, false), Ok(Answered::Ready));
        m
    }

    #[test]
    fn answers_go_to_their_own_waiters_in_any_order() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        let a = m.spawn(t0, "a");
        let b = m.spawn(t0, "b");
        assert_eq!((a, b), (0, 1));
        m.reap(t0, 9, Some("reap 9"));
        m.reap(t0, 8, None);
        assert_eq!(
            m.answer(t0, ZygoteAnswer::SpawnFailed { id: b, message: "EAGAIN".into() }, false),
            Ok(Answered::Refused { waiter: "b", message: "EAGAIN".into() })
        );
        assert_eq!(
            m.answer(t0, ZygoteAnswer::Spawned { id: a, pid: 100 }, true),
            Ok(Answered::Spawned { waiter: "a", id: a, pid: 100 })
        );
        assert_eq!(
            m.answer(t0, ZygoteAnswer::Reaped { id: 8, status: 9, cpu_ns: 5 }, false),
            Ok(Answered::Reaped { waiter: None, status: 9, cpu_ns: 5 })
        );
        assert_eq!(
            m.answer(t0, ZygoteAnswer::Reaped { id: 9, status: 0, cpu_ns: 1 }, false),
            Ok(Answered::Reaped { waiter: Some("reap 9"), status: 0, cpu_ns: 1 })
        );
        // Ids are never reused.
        assert_eq!(m.spawn(t0, "c"), 2);
    }

    #[test]
    fn an_answer_nobody_asked_for_is_a_broken_zygote() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        let id = m.spawn(t0, "a");
        let err = |m: &mut Machine, answer| m.answer(t0, answer, true).unwrap_err();
        assert!(err(&mut m, ZygoteAnswer::Spawned { id: 5, pid: 1 }).contains("nobody asked for"));
        assert!(err(&mut m, ZygoteAnswer::SpawnFailed { id: 5, message: String::new() }).contains("nobody"));
        assert!(err(&mut m, ZygoteAnswer::Reaped { id, status: 0, cpu_ns: 0 }).contains("reaped child 0"));
        // A spawn answered once cannot be answered again.
        assert!(m.answer(t0, ZygoteAnswer::Spawned { id, pid: 1 }, true).is_ok());
        assert!(err(&mut m, ZygoteAnswer::Spawned { id, pid: 1 }).contains("nobody asked for"));
        // A child without its pidfd could be neither signalled nor reaped.
        let id = m.spawn(t0, "b");
        let e = m.answer(t0, ZygoteAnswer::Spawned { id, pid: 1 }, false).unwrap_err();
        assert!(e.contains("without a pidfd"), "{e}");
        // A zygote with threads cannot fork safely.
        let e = m.answer(t0, ZygoteAnswer::Ready { pid: 1, threads: 2 }, false).unwrap_err();
        assert!(e.contains("2 threads"), "{e}");
    }

    #[test]
    fn a_zygote_gets_its_start_timeout_and_is_looked_at_while_it_starts() {
        let t0 = Instant::now();
        let m = Machine::new(t0);
        assert_eq!(m.check(t0 + ms(199)), Check::Fine);
        assert_eq!(m.next_check(t0), Some(STATE_CHECK_AFTER));
        assert_eq!(m.next_check(t0 + ms(150)), Some(ms(50)));
        assert_eq!(m.check(t0 + ms(200)), Check::LookIfStopped);
        // Past the first look it is looked at every STATE_CHECK_AFTER.
        assert_eq!(m.next_check(t0 + ms(5000)), Some(STATE_CHECK_AFTER));
        assert_eq!(m.next_check(t0 + START_TIMEOUT - ms(30)), Some(ms(30)));
        assert_eq!(m.next_check(t0 + START_TIMEOUT - ms(1)), Some(MIN_CHECK));
        assert_eq!(m.check(t0 + START_TIMEOUT - ms(1)), Check::LookIfStopped);
        assert_eq!(m.check(t0 + START_TIMEOUT), Check::GiveUp("it took more than 60 s to start".into()));
    }

    #[test]
    fn a_ready_zygote_with_nothing_owed_is_never_timed() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        assert_eq!(m.next_check(t0 + ms(1000)), None);
        assert_eq!(m.check(t0 + Duration::from_secs(3600)), Check::Fine);
        let id = m.spawn(t0 + ms(2000), "a");
        assert_eq!(m.next_check(t0 + ms(2000)), Some(STATE_CHECK_AFTER));
        m.answer(t0 + ms(2001), ZygoteAnswer::Spawned { id, pid: 3 }, true).unwrap();
        assert_eq!(m.next_check(t0 + ms(2001)), None);
    }

    #[test]
    fn the_oldest_request_times_the_answer_and_counts_from_readiness() {
        let t0 = Instant::now();
        let mut m = Machine::new(t0);
        // Asked while the zygote started: counted from its readiness at 1 s.
        let early = m.spawn(t0 + ms(10), "early");
        m.answer(t0 + ms(1000), ZygoteAnswer::Ready { pid: 7, threads: 1 }, false).unwrap();
        m.reap(t0 + ms(4000), 3, None);
        assert_eq!(m.check(t0 + ms(1100)), Check::Fine);
        assert_eq!(m.check(t0 + ms(1200)), Check::LookIfStopped);
        let late = t0 + ms(1000) + ANSWER_TIMEOUT;
        assert_eq!(m.check(late), Check::GiveUp("it took more than 10 s to answer".into()));
        // Once the early one is answered, the reap asked at 4 s times it.
        m.answer(late, ZygoteAnswer::Spawned { id: early, pid: 3 }, true).unwrap();
        assert_eq!(m.check(late), Check::LookIfStopped);
        assert_eq!(m.next_check(t0 + ms(4000) + ANSWER_TIMEOUT - ms(100)), Some(ms(100)));
        assert!(matches!(m.check(t0 + ms(4000) + ANSWER_TIMEOUT), Check::GiveUp(_)));
    }

    #[test]
    fn a_gone_zygote_hands_back_every_spawn_waiter_and_drops_reaps() {
        let t0 = Instant::now();
        let mut m = ready(t0);
        for w in ["a", "b", "c"] {
            m.spawn(t0, w);
        }
        m.reap(t0, 1, Some("r"));
        m.answer(t0, ZygoteAnswer::SpawnFailed { id: 1, message: String::new() }, false).unwrap();
        assert_eq!(m.gone(), ["a", "c"]);
        assert!(m.gone().is_empty());
        // Nothing is owed any more, and a late answer is not ours.
        assert_eq!(m.next_check(t0 + ms(1)), None);
        assert!(m.answer(t0, ZygoteAnswer::Reaped { id: 1, status: 0, cpu_ns: 0 }, false).is_err());
    }

    #[test]
    fn quit_is_sent_once() {
        let mut m = Machine::new(Instant::now());
        assert!(m.quit());
        assert!(!m.quit());
    }
}
