//! Command-binding slots, shared fairly between runs.
//!
//! Each command call is a host process outside the sandbox, so the number
//! running at once is capped ([`SlotLimits::total`]). A single cap shared
//! first-come-first-served lets one run's `asyncio.gather` over a thousand
//! calls hold every slot while another run's one call waits behind all of
//! them. So the slots are shared fairly:
//!
//! - a run holds at most [`SlotLimits::per_run`] slots at once;
//! - a freed slot goes to the waiting run that holds the fewest slots
//!   (first come among equals), so a run with none gets the next free slot
//!   whatever another run has queued.
//!
//! The slots belong to one [`crate::Bindings`] (one per loaded bindings
//! file), never to the process: two runtimes with their own bindings do not
//! share them. A call that is abandoned while it waits (its run settled and
//! its future was dropped) gives its turn up.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use pycage_runtime::RunId;
use tokio::sync::oneshot;

/// How many command calls run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    /// For every run together.
    pub total: usize,
    /// For one run.
    pub per_run: usize,
}

/// Default of [`SlotLimits::total`].
pub const DEFAULT_TOTAL: usize = 16;
/// Default of [`SlotLimits::per_run`]: half the slots, so one run alone
/// always leaves room for another.
pub const DEFAULT_PER_RUN: usize = 8;

impl Default for SlotLimits {
    fn default() -> Self {
        SlotLimits { total: DEFAULT_TOTAL, per_run: DEFAULT_PER_RUN }
    }
}

struct Waiter {
    run: RunId,
    grant: oneshot::Sender<()>,
}

struct State {
    free: usize,
    held: HashMap<RunId, usize>,
    waiting: VecDeque<Waiter>,
}

impl State {
    fn held_by(&self, run: RunId) -> usize {
        self.held.get(&run).copied().unwrap_or(0)
    }

    /// Hands free slots to waiters: the run holding the fewest first,
    /// first come among equals; waiters that gave up are dropped.
    fn grant(&mut self, per_run: usize) {
        self.waiting.retain(|w| !w.grant.is_closed());
        while self.free > 0 {
            let pick = self
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| self.held_by(w.run) < per_run)
                .min_by_key(|(i, w)| (self.held_by(w.run), *i))
                .map(|(i, _)| i);
            let Some(waiter) = pick.and_then(|i| self.waiting.remove(i)) else { return };
            // A waiter that gave up since the `retain` is skipped.
            if waiter.grant.send(()).is_ok() {
                self.free -= 1;
                *self.held.entry(waiter.run).or_insert(0) += 1;
            }
        }
    }
}

/// Fair command slots (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct CommandSlots {
    limits: SlotLimits,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for CommandSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandSlots").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// One slot, given back when dropped.
pub struct Slot {
    run: RunId,
    slots: CommandSlots,
    /// Set while the slot is awaited.
    waiting: Option<oneshot::Receiver<()>>,
    granted: bool,
}

impl CommandSlots {
    /// Slots with these limits (each at least 1; `per_run` at most `total`).
    pub fn new(limits: SlotLimits) -> Self {
        let total = limits.total.max(1);
        let limits = SlotLimits { total, per_run: limits.per_run.clamp(1, total) };
        CommandSlots {
            limits,
            state: Arc::new(Mutex::new(State { free: total, held: HashMap::new(), waiting: VecDeque::new() })),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> SlotLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent between statements: a panic elsewhere
        // must not stop every later command call.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot for `run`.
    pub async fn acquire(&self, run: RunId) -> Slot {
        let rx = {
            let mut state = self.lock();
            let (tx, rx) = oneshot::channel();
            state.waiting.push_back(Waiter { run, grant: tx });
            state.grant(self.limits.per_run);
            rx
        };
        // Dropped while it waits, the guard still gives back a slot that
        // was granted before it could see it.
        let mut slot = Slot { run, slots: self.clone(), waiting: Some(rx), granted: false };
        if let Some(rx) = slot.waiting.as_mut() {
            // The sender lives in the queue until it is granted or found
            // closed, so this resolves with the grant.
            slot.granted = rx.await.is_ok();
        }
        slot.waiting = None;
        slot
    }

    /// Slots held by `run` now (for tests and diagnostics).
    pub fn held_by(&self, run: RunId) -> usize {
        self.lock().held_by(run)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(mut rx) = self.waiting.take() {
            // No grant after this; one sent before is still there.
            rx.close();
            self.granted = rx.try_recv().is_ok();
        }
        if !self.granted {
            return;
        }
        let mut state = self.slots.lock();
        state.free += 1;
        if let Some(n) = state.held.get_mut(&self.run) {
            *n -= 1;
            if *n == 0 {
                state.held.remove(&self.run);
            }
        }
        state.grant(self.slots.limits.per_run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn granted(fut: impl std::future::Future<Output = Slot>) -> Option<Slot> {
        tokio::time::timeout(Duration::from_millis(50), fut).await.ok()
    }

    #[tokio::test]
    async fn a_run_never_holds_more_than_its_share() {
        let slots = CommandSlots::new(SlotLimits { total: 4, per_run: 2 });
        let (a, b) = (RunId::next(), RunId::next());
        let a1 = slots.acquire(a).await;
        let _a2 = slots.acquire(a).await;
        assert!(granted(slots.acquire(a)).await.is_none(), "a third for run a waits");
        let _b1 = granted(slots.acquire(b)).await.expect("run b gets a free slot");
        assert_eq!((slots.held_by(a), slots.held_by(b)), (2, 1));
        drop(a1);
        assert_eq!(slots.held_by(a), 1);
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_run_holding_fewest() {
        let slots = CommandSlots::new(SlotLimits { total: 2, per_run: 2 });
        let (a, b) = (RunId::next(), RunId::next());
        let a1 = slots.acquire(a).await;
        let _a2 = slots.acquire(a).await;
        // Run a queues many more, then run b queues one.
        let queued_a: Vec<_> = (0..5)
            .map(|_| {
                let s = slots.clone();
                tokio::spawn(async move { s.acquire(a).await })
            })
            .collect();
        tokio::task::yield_now().await;
        let s = slots.clone();
        let b_wait = tokio::spawn(async move { s.acquire(b).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a1);
        let b1 = tokio::time::timeout(Duration::from_secs(5), b_wait).await.expect("b is served first").unwrap();
        assert_eq!((slots.held_by(a), slots.held_by(b)), (1, 1));
        drop(b1);
        for q in queued_a {
            q.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_its_turn_only() {
        let slots = CommandSlots::new(SlotLimits { total: 1, per_run: 1 });
        let (a, b, c) = (RunId::next(), RunId::next(), RunId::next());
        let held = slots.acquire(a).await;
        assert!(granted(slots.acquire(b)).await.is_none(), "b waited, then gave up");
        let s = slots.clone();
        let c_wait = tokio::spawn(async move { s.acquire(c).await });
        tokio::task::yield_now().await;
        drop(held);
        let c1 = tokio::time::timeout(Duration::from_secs(5), c_wait).await.unwrap().unwrap();
        assert_eq!(slots.held_by(c), 1);
        assert_eq!(slots.held_by(b), 0);
        drop(c1);
        assert_eq!(slots.lock().free, 1);
    }
}
