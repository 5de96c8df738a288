//! The pool's decisions, without I/O: what the driver sees of its zygotes
//! and children in; which zygote to start, which children to drop, how
//! many to spawn and whether the pool is full out.
//!
//! The driver (`super::pool`) owns the processes, the threads that make a
//! child's host side and the clock; this machine owns the rules of the
//! module docs there:
//!
//! - a zygote is due once it has forked `max_runs` children or is
//!   `max_age` old: a successor is started (one at a time) and the old one
//!   keeps serving until the successor is ready; at the switch the old
//!   one's idle children are dropped, and its children that are still
//!   being forked are dropped when they arrive;
//! - a dead zygote is replaced at once (by its successor when there is
//!   one, ready or not) and its idle children dropped; a dead successor is
//!   dropped, and started again if the zygote is still due;
//! - a run takes the oldest idle child that is still usable (its zygote,
//!   itself and its shell alive); the ones it skips are dropped;
//! - a refill asks for the pool's free places ([`PoolMachine::refill`]),
//!   but never more spawns in flight than [`Limits::in_flight`] (one fewer
//!   than the cores: a run that finds the pool empty forks a child of its
//!   own, and that child must not queue behind, and share every core
//!   with, a batch of replacements); what the cap held back is asked for
//!   when a spawn's child arrives. Nothing once the pool is closed.
//!
//! Zygotes and children are the driver's types, seen through
//! [`ZygoteView`] and [`PooledChild`]; the machine never starts, signals
//! or drops a process itself: what it no longer wants it hands back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Whether a child warms up before it waits for its run (see the module
/// docs of `super::pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warmth {
    Warm,
    Cold,
}

impl Warmth {
    /// Warm while the host's runs in flight leave a core free for the
    /// warm-up: a warm-up competing with runs for cores is CPU taken from
    /// them (each run occupies about one core while it runs).
    pub(crate) fn for_load(runs_in_flight: usize, cores: usize) -> Warmth {
        if runs_in_flight < cores {
            Warmth::Warm
        } else {
            Warmth::Cold
        }
    }

    /// Whether `runs_in_flight` runs back to back keep all `cores` busy
    /// by themselves: while in flight, a trivial run takes about two cores'
    /// worth of CPU (its own process, and the host, the zygote and its
    /// replacement's fork beside it).
    pub(crate) fn loop_fills(runs_in_flight: usize, cores: usize) -> bool {
        runs_in_flight.saturating_mul(2) >= cores
    }
}

/// How long after a run found the pool empty the pool's replacements are
/// forked cold: runs are coming faster than children are made, so each
/// replacement is taken soon after its fork, and its warm-up would only
/// compete for the cores with the run waiting for a fork of its own.
/// Runs spaced further apart than a refill takes find children warm.
pub(crate) const DRY_SPELL: Duration = Duration::from_millis(50);

/// A run that starts within this long of the previous run's settling came
/// back to back with it (a loop): for [`DRY_SPELL`] after it, the pool's
/// replacements are forked cold when such a loop leaves no core for a
/// warm-up ([`Warmth::loop_fills`]): a warm-up right after each fork would
/// only take CPU from the next run. Runs with a gap between them find
/// children that warmed up in it.
pub(crate) const BACK_TO_BACK: Duration = Duration::from_millis(2);

/// What the machine reads of a zygote: the driver's handle answers from
/// what its supervisor last saw.
pub(crate) trait ZygoteView {
    /// Whether both name the same zygote.
    fn same(&self, other: &Self) -> bool;
    fn is_dead(&self) -> bool;
    /// Whether it said it has imported everything.
    fn is_ready(&self) -> bool;
    /// Children asked of it so far.
    fn spawns(&self) -> u64;
    fn started(&self) -> Instant;
    /// Whether every reap asked of it was answered.
    fn reaped_all(&self) -> bool;
}

/// What the machine reads of an idle child.
pub(crate) trait PooledChild {
    type Zygote;
    /// The zygote that forked it.
    fn zygote(&self) -> Option<&Self::Zygote>;
    /// Whether a run can still use it (it, its zygote and its shell live).
    fn usable(&self) -> bool;
}

/// The pool's bounds (from the runtime's configuration).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Idle children kept ready.
    pub size: usize,
    /// Children a zygote forks before it is due for replacement.
    pub max_runs: u64,
    /// Age at which a zygote is due for replacement.
    pub max_age: Duration,
    /// Spawns a refill keeps in flight at most (at least one).
    pub in_flight: usize,
}

impl Limits {
    /// The cap on a refill's spawns in flight on a machine with `cores`
    /// cores: all but one, so that a run waiting for a fork of its own
    /// always has a core that no replacement holds.
    pub(crate) fn in_flight_for(cores: usize) -> usize {
        cores.saturating_sub(1).max(1)
    }
}

/// A zygote the driver must start, and where it goes once started
/// ([`PoolMachine::started`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// In place of a dead (or missing) zygote: runs wait for it.
    Current,
    /// Beside a due zygote, which serves until it is ready.
    Successor,
}

/// See the module docs.
pub(crate) struct PoolMachine<Z, C> {
    limits: Limits,
    current: Option<Z>,
    successor: Option<Z>,
    /// Children ready for a run, oldest first.
    idle: VecDeque<C>,
    /// Spawns asked for the pool and not settled yet.
    filling: usize,
    /// When a run last found no idle child.
    dry_at: Option<Instant>,
    /// When a run last settled with a load that runs back to back would
    /// keep the cores busy with ([`Warmth::loop_fills`]), and when one
    /// last started within [`BACK_TO_BACK`] of that.
    settled_at: Option<Instant>,
    back_to_back_at: Option<Instant>,
    /// Runs waiting for a spawn in flight instead of forking their own.
    waiters: usize,
    closed: bool,
}

impl<Z: ZygoteView + Clone, C: PooledChild<Zygote = Z>> PoolMachine<Z, C> {
    /// An empty pool with no zygote: the first [`PoolMachine::maintain`]
    /// asks for one.
    pub(crate) fn new(limits: Limits) -> Self {
        PoolMachine {
            limits,
            current: None,
            successor: None,
            idle: VecDeque::new(),
            filling: 0,
            dry_at: None,
            settled_at: None,
            back_to_back_at: None,
            waiters: 0,
            closed: false,
        }
    }

    /// Looks at the zygotes at `now`: switches to a ready successor,
    /// replaces a dead zygote, notices a due one. Children no longer wanted
    /// go to `unwanted`; the zygote to start, if any, is returned (then
    /// [`PoolMachine::started`]; if it cannot start, the next call asks
    /// again).
    pub(crate) fn maintain(&mut self, now: Instant, unwanted: &mut Vec<C>) -> Option<Start> {
        if let Some(successor) = &self.successor {
            if successor.is_dead() {
                self.successor = None;
            } else if successor.is_ready() {
                self.current = self.successor.take();
                // The old zygote's idle children have its layout.
                for child in std::mem::take(&mut self.idle) {
                    if of(&child, self.current.as_ref()) {
                        self.idle.push_back(child);
                    } else {
                        unwanted.push(child);
                    }
                }
            }
        }
        if self.current.as_ref().is_none_or(Z::is_dead) {
            unwanted.extend(self.idle.drain(..));
            self.current = self.successor.take();
            return self.current.is_none().then_some(Start::Current);
        }
        let due = self.current.as_ref().is_some_and(|z| {
            z.spawns() >= self.limits.max_runs || now.saturating_duration_since(z.started()) >= self.limits.max_age
        });
        (due && self.successor.is_none()).then_some(Start::Successor)
    }

    /// The zygote [`PoolMachine::maintain`] asked for has started.
    pub(crate) fn started(&mut self, start: Start, zygote: Z) {
        match start {
            Start::Current => self.current = Some(zygote),
            Start::Successor => self.successor = Some(zygote),
        }
    }

    /// The zygote serving runs (call [`PoolMachine::maintain`] first).
    pub(crate) fn current(&self) -> Option<&Z> {
        self.current.as_ref()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// The oldest usable idle child; the unusable ones before it go to
    /// `unwanted`.
    pub(crate) fn take(&mut self, unwanted: &mut Vec<C>) -> Option<C> {
        while let Some(child) = self.idle.pop_front() {
            if child.usable() {
                return Some(child);
            }
            unwanted.push(child);
        }
        None
    }

    /// A run found no idle child at `now`: whether it waits for a spawn
    /// already in flight (counted as awaited until
    /// [`PoolMachine::stop_waiting`]) instead of forking its own. It waits
    /// when the pool was already dry ([`DRY_SPELL`]: the spawns in flight
    /// are cold, and ahead of a fork of its own in every queue: the shell
    /// builder's, the zygote's, the cores) and an earlier run does not
    /// await every one of them; never when not `may_wait` (a run that
    /// already waited once).
    pub(crate) fn ran_dry(&mut self, now: Instant, may_wait: bool) -> bool {
        let spell = self.warmth(Warmth::Warm, now) == Warmth::Cold;
        self.dry_at = Some(now);
        let wait = may_wait && spell && !self.closed && self.filling > self.waiters;
        if wait {
            self.waiters += 1;
        }
        wait
    }

    /// A run settled at `now` (its replacement is asked for); `fills`:
    /// whether runs back to back at the load it settled in keep the cores
    /// busy ([`Warmth::loop_fills`]).
    pub(crate) fn run_settled(&mut self, now: Instant, fills: bool) {
        self.settled_at = fills.then_some(now);
    }

    /// A run asks for a child at `now`: back to back with the previous
    /// run when that settled less than [`BACK_TO_BACK`] before.
    pub(crate) fn run_started(&mut self, now: Instant) {
        if self.settled_at.is_some_and(|at| now.saturating_duration_since(at) < BACK_TO_BACK) {
            self.back_to_back_at = Some(now);
        }
    }

    /// Whether a run waits for a spawn in flight.
    pub(crate) fn awaited(&self) -> bool {
        self.waiters > 0
    }

    /// A run that waited for a spawn in flight has stopped waiting.
    pub(crate) fn stop_waiting(&mut self) {
        self.waiters = self.waiters.saturating_sub(1);
    }

    /// The warmth of a refill's children asked for at `now` with `asked`:
    /// cold within [`DRY_SPELL`] of a run that found the pool empty or
    /// came [`BACK_TO_BACK`] with the one before.
    pub(crate) fn warmth(&self, asked: Warmth, now: Instant) -> Warmth {
        let within = |at: Option<Instant>| at.is_some_and(|at| now.saturating_duration_since(at) < DRY_SPELL);
        if within(self.dry_at) || within(self.back_to_back_at) {
            Warmth::Cold
        } else {
            asked
        }
    }

    /// Spawns a refill asks for now: the free places (the pool's size
    /// less its idle children and the spawns in flight), up to the cap on
    /// spawns in flight. The driver refills again when a spawn's child is
    /// ready ([`PoolMachine::child_ready`]), which asks for what the cap
    /// held back; after a failed spawn, the next run's refill does.
    fn wanted(&self) -> usize {
        let free = self.limits.size.saturating_sub(self.idle.len() + self.filling);
        free.min(self.limits.in_flight.max(1).saturating_sub(self.filling))
    }

    /// A refill (call [`PoolMachine::maintain`] first): the zygote to ask
    /// and how many children, counted as in flight from now; `None` when
    /// none is wanted, the pool is closed or has no zygote.
    pub(crate) fn refill(&mut self) -> Option<(Z, usize)> {
        if self.closed {
            return None;
        }
        let zygote = self.current.clone()?;
        let wanted = self.wanted();
        self.filling += wanted;
        (wanted > 0).then_some((zygote, wanted))
    }

    /// A spawn of a refill has its child: kept, or handed back when it is
    /// no longer wanted (the pool closed, or its zygote was replaced).
    pub(crate) fn child_ready(&mut self, child: C) -> Option<C> {
        self.filling = self.filling.saturating_sub(1);
        if !self.closed && of(&child, self.current.as_ref()) {
            self.idle.push_back(child);
            return None;
        }
        Some(child)
    }

    /// A spawn of a refill failed (or was never sent).
    pub(crate) fn child_failed(&mut self) {
        self.filling = self.filling.saturating_sub(1);
    }

    /// Whether the pool holds its full size of idle children of a ready
    /// zygote with no spawn or reap pending and no successor coming (or is
    /// closed).
    pub(crate) fn is_full(&self) -> bool {
        self.closed
            || (self.filling == 0
                && self.idle.len() >= self.limits.size
                && self.successor.is_none()
                && self.current.as_ref().is_some_and(|z| z.is_ready() && z.reaped_all()))
    }

    /// Closes the pool: its idle children and zygotes, for the driver to
    /// drop or wait for. Nothing is refilled or kept from now on.
    pub(crate) fn close(&mut self) -> (Vec<C>, Vec<Z>) {
        self.closed = true;
        let idle = self.idle.drain(..).collect();
        (idle, self.current.take().into_iter().chain(self.successor.take()).collect())
    }
}

/// Whether `child` was forked by `zygote`.
fn of<Z: ZygoteView, C: PooledChild<Zygote = Z>>(child: &C, zygote: Option<&Z>) -> bool {
    match (child.zygote(), zygote) {
        (Some(z), Some(zygote)) => z.same(zygote),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A zygote as its supervisor would report it.
    #[derive(Default)]
    struct Seen {
        dead: Cell<bool>,
        ready: Cell<bool>,
        spawns: Cell<u64>,
        reaping: Cell<u64>,
    }

    #[derive(Clone)]
    struct Z {
        name: &'static str,
        started: Instant,
        seen: Rc<Seen>,
    }

    impl Z {
        fn new(name: &'static str, started: Instant) -> Z {
            Z { name, started, seen: Rc::default() }
        }
        fn ready(self) -> Z {
            self.seen.ready.set(true);
            self
        }
    }

    impl ZygoteView for Z {
        fn same(&self, other: &Z) -> bool {
            Rc::ptr_eq(&self.seen, &other.seen)
        }
        fn is_dead(&self) -> bool {
            self.seen.dead.get()
        }
        fn is_ready(&self) -> bool {
            self.seen.ready.get()
        }
        fn spawns(&self) -> u64 {
            self.seen.spawns.get()
        }
        fn started(&self) -> Instant {
            self.started
        }
        fn reaped_all(&self) -> bool {
            self.seen.reaping.get() == 0
        }
    }

    struct Child {
        zygote: Z,
        n: u32,
        alive: Rc<Cell<bool>>,
    }

    impl PooledChild for Child {
        type Zygote = Z;
        fn zygote(&self) -> Option<&Z> {
            Some(&self.zygote)
        }
        fn usable(&self) -> bool {
            self.alive.get() && !self.zygote.is_dead()
        }
    }

    type Pool = PoolMachine<Z, Child>;

    fn child(zygote: &Z, n: u32) -> Child {
        zygote.seen.spawns.set(zygote.seen.spawns.get() + 1);
        Child { zygote: zygote.clone(), n, alive: Rc::new(Cell::new(true)) }
    }

    fn names(children: &[Child]) -> Vec<u32> {
        children.iter().map(|c| c.n).collect()
    }

    const LIMITS: Limits = Limits { size: 2, max_runs: 5, max_age: Duration::from_secs(600), in_flight: 4 };

    /// A pool of `LIMITS` on ready zygote "a", filled with children 1 and 2.
    fn full(t0: Instant) -> (Pool, Z) {
        let mut p = Pool::new(LIMITS);
        let mut unwanted = Vec::new();
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Current));
        let a = Z::new("a", t0).ready();
        p.started(Start::Current, a.clone());
        let (z, n) = p.refill().unwrap();
        assert_eq!((z.name, n), ("a", 2));
        assert!(p.child_ready(child(&a, 1)).is_none());
        assert!(p.child_ready(child(&a, 2)).is_none());
        assert!(p.is_full());
        assert!(unwanted.is_empty());
        (p, a)
    }

    #[test]
    fn a_refill_asks_only_for_the_free_places() {
        let t0 = Instant::now();
        let mut p = Pool::new(Limits { size: 3, ..LIMITS });
        // No zygote yet: nothing to ask.
        assert!(p.refill().is_none());
        assert_eq!(p.maintain(t0, &mut Vec::new()), Some(Start::Current));
        let a = Z::new("a", t0);
        p.started(Start::Current, a.clone());
        assert_eq!(p.refill().map(|(_, n)| n), Some(3));
        // Spawns in flight count as filled.
        assert!(p.refill().is_none());
        assert!(p.child_ready(child(&a, 1)).is_none());
        p.child_failed();
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.child_ready(child(&a, 2)).is_none());
        assert!(p.child_ready(child(&a, 3)).is_none());
        // Full only once the zygote said it is ready and no reap is pending.
        assert!(!p.is_full());
        a.seen.ready.set(true);
        a.seen.reaping.set(1);
        assert!(!p.is_full());
        a.seen.reaping.set(0);
        assert!(p.is_full());
        // A run takes the oldest; one place is free again.
        assert_eq!(p.take(&mut Vec::new()).map(|c| c.n), Some(1));
        assert!(!p.is_full());
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
    }

    #[test]
    fn a_refill_keeps_at_most_its_cap_in_flight() {
        let t0 = Instant::now();
        let mut p = Pool::new(Limits { size: 4, in_flight: 1, ..LIMITS });
        assert_eq!(p.maintain(t0, &mut Vec::new()), Some(Start::Current));
        let a = Z::new("a", t0).ready();
        p.started(Start::Current, a.clone());
        // Four free places, one spawn at a time.
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.refill().is_none(), "the cap holds the rest back");
        // Each settled spawn lets the next refill ask for one more.
        assert!(p.child_ready(child(&a, 1)).is_none());
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        p.child_failed();
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.child_ready(child(&a, 2)).is_none());
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.child_ready(child(&a, 3)).is_none());
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.child_ready(child(&a, 4)).is_none());
        assert!(p.refill().is_none(), "full");
        assert!(p.is_full());
        // A run takes two: still one at a time.
        assert_eq!(p.take(&mut Vec::new()).map(|c| c.n), Some(1));
        assert_eq!(p.take(&mut Vec::new()).map(|c| c.n), Some(2));
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        assert!(p.refill().is_none());
        // A cap of zero still refills, one at a time.
        let mut q = Pool::new(Limits { size: 2, in_flight: 0, ..LIMITS });
        q.maintain(t0, &mut Vec::new());
        q.started(Start::Current, a.clone());
        assert_eq!(q.refill().map(|(_, n)| n), Some(1));
    }

    #[test]
    fn replacements_are_cold_for_a_while_after_a_run_found_the_pool_empty() {
        let t0 = Instant::now();
        let mut p = Pool::new(LIMITS);
        assert_eq!(p.warmth(Warmth::Warm, t0), Warmth::Warm);
        assert_eq!(p.warmth(Warmth::Cold, t0), Warmth::Cold);
        p.ran_dry(t0, true);
        assert_eq!(p.warmth(Warmth::Warm, t0 + DRY_SPELL / 2), Warmth::Cold);
        assert_eq!(p.warmth(Warmth::Warm, t0 + DRY_SPELL), Warmth::Warm);
        // A clock read before the run's still counts as within the spell.
        p.ran_dry(t0 + DRY_SPELL, true);
        assert_eq!(p.warmth(Warmth::Warm, t0), Warmth::Cold);
    }

    #[test]
    fn a_run_in_a_dry_spell_waits_for_a_spawn_no_one_else_awaits() {
        let t0 = Instant::now();
        let mut p = Pool::new(Limits { size: 4, in_flight: 2, ..LIMITS });
        p.maintain(t0, &mut Vec::new());
        let a = Z::new("a", t0).ready();
        p.started(Start::Current, a.clone());
        // Nothing in flight: the first dry run forks its own.
        assert!(!p.ran_dry(t0, true));
        assert_eq!(p.refill().map(|(_, n)| n), Some(2));
        // The spell's refills are cold and on their way: two runs wait,
        // the third forks its own.
        assert!(!p.awaited());
        assert!(p.ran_dry(t0, true));
        assert!(p.ran_dry(t0, true));
        assert!(!p.ran_dry(t0, true));
        assert!(p.awaited());
        p.stop_waiting();
        assert!(p.child_ready(child(&a, 1)).is_none());
        // One in flight, one run still waiting for it.
        assert!(!p.ran_dry(t0, true));
        p.stop_waiting();
        // A run that already waited once forks its own, and is not counted.
        assert!(!p.ran_dry(t0, false));
        assert!(!p.awaited());
        assert!(p.ran_dry(t0, true));
        p.stop_waiting();
        // Outside a spell, the spawns in flight may be warm: fork.
        assert!(!p.ran_dry(t0 + DRY_SPELL * 3, true));
        // A closed pool has nothing to wait for.
        let _ = p.close();
        assert!(!p.ran_dry(t0 + DRY_SPELL * 3, true));
    }

    #[test]
    fn replacements_are_cold_for_a_while_after_runs_back_to_back_that_fill_the_cores() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pool::new(LIMITS);
        // The first run: nothing settled before it.
        p.run_started(t0);
        assert_eq!(p.warmth(Warmth::Warm, t0), Warmth::Warm);
        // The next one starts right after it settled: a loop.
        p.run_settled(t0 + ms(1), true);
        p.run_started(t0 + ms(2));
        assert_eq!(p.warmth(Warmth::Warm, t0 + ms(2)), Warmth::Cold);
        assert_eq!(p.warmth(Warmth::Warm, t0 + ms(2) + DRY_SPELL / 2), Warmth::Cold);
        assert_eq!(p.warmth(Warmth::Warm, t0 + ms(2) + DRY_SPELL), Warmth::Warm);
        // A run after a gap is not back to back.
        let t1 = t0 + DRY_SPELL * 2;
        p.run_settled(t1, true);
        p.run_started(t1 + BACK_TO_BACK);
        assert_eq!(p.warmth(Warmth::Warm, t1 + BACK_TO_BACK), Warmth::Warm);
        // Nor is one whose loop leaves a core for the warm-ups.
        p.run_settled(t1 + ms(10), false);
        p.run_started(t1 + ms(10));
        assert_eq!(p.warmth(Warmth::Warm, t1 + ms(10)), Warmth::Warm);
        // What the load asked for stands.
        assert_eq!(p.warmth(Warmth::Cold, t1 + ms(10)), Warmth::Cold);
    }

    #[test]
    fn a_loop_fills_the_cores_at_half_as_many_runs() {
        assert!(Warmth::loop_fills(1, 1));
        assert!(Warmth::loop_fills(1, 2));
        assert!(!Warmth::loop_fills(1, 4));
        assert!(Warmth::loop_fills(2, 4));
        assert!(!Warmth::loop_fills(3, 8));
        assert!(Warmth::loop_fills(4, 8));
        assert!(Warmth::loop_fills(usize::MAX, 8));
    }

    #[test]
    fn the_cap_leaves_one_core_to_the_runs() {
        assert_eq!(Limits::in_flight_for(0), 1);
        assert_eq!(Limits::in_flight_for(1), 1);
        assert_eq!(Limits::in_flight_for(2), 1);
        assert_eq!(Limits::in_flight_for(8), 7);
    }

    #[test]
    fn a_due_zygote_serves_until_its_successor_is_ready() {
        let t0 = Instant::now();
        let (mut p, a) = full(t0);
        let mut unwanted = Vec::new();
        a.seen.spawns.set(LIMITS.max_runs);
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Successor));
        let b = Z::new("b", t0);
        p.started(Start::Successor, b.clone());
        assert!(!p.is_full(), "a successor is coming");
        // One successor at a time; the old zygote still serves.
        assert_eq!(p.maintain(t0, &mut unwanted), None);
        assert_eq!(p.take(&mut unwanted).map(|c| c.n), Some(1));
        let (z, n) = p.refill().unwrap();
        assert_eq!((z.name, n), ("a", 1));
        // The switch: the old zygote's idle child is dropped, and so is the
        // one it was still forking when it arrives.
        b.seen.ready.set(true);
        assert_eq!(p.maintain(t0, &mut unwanted), None);
        assert_eq!(p.current().map(|z| z.name), Some("b"));
        assert_eq!(names(&unwanted), [2]);
        assert_eq!(p.child_ready(child(&a, 3)).map(|c| c.n), Some(3));
        let (z, n) = p.refill().unwrap();
        assert_eq!((z.name, n), ("b", 2));
        assert!(p.child_ready(child(&b, 4)).is_none());
        assert!(p.child_ready(child(&b, 5)).is_none());
        assert!(p.is_full());
    }

    #[test]
    fn a_zygote_is_due_at_its_age() {
        let t0 = Instant::now();
        let (mut p, _) = full(t0);
        assert_eq!(p.maintain(t0 + LIMITS.max_age - Duration::from_millis(1), &mut Vec::new()), None);
        assert_eq!(p.maintain(t0 + LIMITS.max_age, &mut Vec::new()), Some(Start::Successor));
    }

    #[test]
    fn a_dead_zygote_is_replaced_and_its_children_dropped() {
        let t0 = Instant::now();
        let (mut p, a) = full(t0);
        let mut unwanted = Vec::new();
        a.seen.dead.set(true);
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Current));
        assert_eq!(names(&unwanted), [1, 2]);
        // Until one starts, there is no zygote to refill from...
        assert!(p.current().is_none() && p.refill().is_none());
        // ...and if it cannot start, the next look asks again.
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Current));
        let c = Z::new("c", t0);
        p.started(Start::Current, c);
        assert_eq!(p.maintain(t0, &mut unwanted), None);
        assert_eq!(p.refill().map(|(z, n)| (z.name, n)), Some(("c", 2)));
    }

    #[test]
    fn a_dead_zygote_with_a_successor_is_replaced_by_it_ready_or_not() {
        let t0 = Instant::now();
        let (mut p, a) = full(t0);
        let mut unwanted = Vec::new();
        a.seen.spawns.set(LIMITS.max_runs);
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Successor));
        p.started(Start::Successor, Z::new("b", t0));
        a.seen.dead.set(true);
        assert_eq!(p.maintain(t0, &mut unwanted), None);
        assert_eq!(p.current().map(|z| z.name), Some("b"));
        assert_eq!(names(&unwanted), [1, 2]);
    }

    #[test]
    fn a_dead_successor_is_started_again_while_the_zygote_is_due() {
        let t0 = Instant::now();
        let (mut p, a) = full(t0);
        let mut unwanted = Vec::new();
        a.seen.spawns.set(LIMITS.max_runs);
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Successor));
        let b = Z::new("b", t0);
        p.started(Start::Successor, b.clone());
        b.seen.dead.set(true);
        assert_eq!(p.maintain(t0, &mut unwanted), Some(Start::Successor));
        assert_eq!(p.current().map(|z| z.name), Some("a"));
        assert!(unwanted.is_empty(), "the current zygote's children still serve");
    }

    #[test]
    fn a_run_skips_and_drops_children_that_died_while_idle() {
        let t0 = Instant::now();
        let (mut p, _) = full(t0);
        let mut unwanted = Vec::new();
        // Child 1 died (a kill, its shell gone): the run gets child 2.
        p.idle[0].alive.set(false);
        assert_eq!(p.take(&mut unwanted).map(|c| c.n), Some(2));
        assert_eq!(names(&unwanted), [1]);
        assert!(p.take(&mut unwanted).is_none());
        assert_eq!(p.refill().map(|(_, n)| n), Some(2));
    }

    #[test]
    fn a_closed_pool_keeps_and_refills_nothing() {
        let t0 = Instant::now();
        let (mut p, a) = full(t0);
        assert!(p.take(&mut Vec::new()).is_some());
        assert_eq!(p.refill().map(|(_, n)| n), Some(1));
        let (idle, zygotes) = p.close();
        assert_eq!(names(&idle), [2]);
        assert_eq!(zygotes.iter().map(|z| z.name).collect::<Vec<_>>(), ["a"]);
        assert!(p.is_closed() && p.is_full());
        assert!(p.refill().is_none());
        // The spawn in flight lands after the close: handed back.
        assert_eq!(p.child_ready(child(&a, 3)).map(|c| c.n), Some(3));
    }

    #[test]
    fn children_warm_up_only_while_a_core_is_free_of_runs() {
        assert_eq!(Warmth::for_load(0, 2), Warmth::Warm);
        assert_eq!(Warmth::for_load(1, 2), Warmth::Warm);
        assert_eq!(Warmth::for_load(2, 2), Warmth::Cold);
        assert_eq!(Warmth::for_load(4, 2), Warmth::Cold);
        // One core: the run that asks for the refill takes it.
        assert_eq!(Warmth::for_load(1, 1), Warmth::Cold);
        assert_eq!(Warmth::for_load(7, 64), Warmth::Warm);
    }
}
