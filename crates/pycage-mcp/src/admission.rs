//! Fair admission of runs across clients.
//!
//! The runtime admits at most `max_concurrent_runs` runs at once and queues
//! the rest in arrival order, so one client with a backlog would delay
//! every other client's runs behind all of its own. The server therefore
//! admits runs itself, with the same capacity, before they reach the
//! runtime (whose own queue then stays empty): a run takes a place at once
//! when one is free and nobody waits; otherwise it waits in its client's
//! queue, and each freed place goes to the next client in turn
//! (round-robin over the clients that have runs waiting, oldest run first
//! within a client). A client that starts waiting joins the end of the
//! round, so another client's backlog delays its first run by at most one
//! admission per client ahead of it in the round.
//!
//! A waiting run that is given up (its call cancelled, its client gone)
//! leaves its queue; a place handed to a waiter that is gone at that moment
//! goes to the next one.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// What tells clients apart.
pub(crate) trait Key: Eq + Hash + Clone + std::fmt::Debug {}

impl<K: Eq + Hash + Clone + std::fmt::Debug> Key for K {}

/// Places for runs in flight, handed out round-robin by client `K`.
#[derive(Debug)]
pub(crate) struct Fair<K: Key> {
    capacity: usize,
    state: Mutex<State<K>>,
}

#[derive(Debug)]
struct State<K: Key> {
    in_flight: usize,
    /// Clients with runs waiting, in the order they are served; a client
    /// is here exactly when `waiting` has a non-empty queue for it.
    round: VecDeque<K>,
    waiting: HashMap<K, VecDeque<oneshot::Sender<Place<K>>>>,
}

/// One place among the runs in flight, given back on drop.
#[derive(Debug)]
pub(crate) struct Place<K: Key> {
    fair: Option<Arc<Fair<K>>>,
}

impl<K: Key> Drop for Place<K> {
    fn drop(&mut self) {
        if let Some(fair) = self.fair.take() {
            let mut state = fair.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
            fair.dispatch(&mut state);
        }
    }
}

/// What [`Fair::enter`] gives: a place now, or a turn to wait for.
#[derive(Debug)]
pub(crate) enum Entry<K: Key> {
    Now(Place<K>),
    Queued(Waiting<K>),
}

/// A run waiting for its place; dropping it leaves the queue (a place
/// already handed to it goes back, through the place's own drop).
#[derive(Debug)]
pub(crate) struct Waiting<K: Key> {
    rx: oneshot::Receiver<Place<K>>,
    /// Places in flight when it started waiting (the capacity): for the
    /// message telling the client why it waits.
    pub(crate) capacity: usize,
}

impl<K: Key> Waiting<K> {
    /// Waits for the place; `None` only if the admission itself is gone.
    pub(crate) async fn place(self) -> Option<Place<K>> {
        self.rx.await.ok()
    }
}

impl<K: Key> Fair<K> {
    pub(crate) fn new(capacity: usize) -> Arc<Fair<K>> {
        Arc::new(Fair {
            capacity: capacity.max(1),
            state: Mutex::new(State { in_flight: 0, round: VecDeque::new(), waiting: HashMap::new() }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // A panic while holding the lock leaves plain counts behind: go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one run of `client`: at once when one is free and no run
    /// waits, else a turn in `client`'s queue.
    pub(crate) fn enter(self: &Arc<Self>, client: &K) -> Entry<K> {
        let mut state = self.lock();
        if state.in_flight < self.capacity && state.round.is_empty() {
            state.in_flight += 1;
            return Entry::Now(Place { fair: Some(Arc::clone(self)) });
        }
        let (tx, rx) = oneshot::channel();
        let queue = state.waiting.entry(client.clone()).or_default();
        let joins = queue.is_empty();
        queue.push_back(tx);
        if joins {
            state.round.push_back(client.clone());
        }
        Entry::Queued(Waiting { rx, capacity: self.capacity })
    }

    /// Hands free places to waiting runs, one client at a time in turn.
    fn dispatch(self: &Arc<Self>, state: &mut State<K>) {
        while state.in_flight < self.capacity {
            let Some(client) = state.round.pop_front() else { return };
            let Some(queue) = state.waiting.get_mut(&client) else { continue };
            while let Some(tx) = queue.pop_front() {
                match tx.send(Place { fair: Some(Arc::clone(self)) }) {
                    Ok(()) => {
                        state.in_flight += 1;
                        break;
                    }
                    // Its run was given up: the place was never taken
                    // (disarmed, so that its drop does not give it back).
                    Err(mut unused) => unused.fair = None,
                }
            }
            if queue.is_empty() {
                state.waiting.remove(&client);
            } else {
                state.round.push_back(client);
            }
        }
    }

    /// Runs holding a place, and runs waiting (for tests and messages).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.in_flight, state.waiting.values().map(VecDeque::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(e: Entry<&'static str>) -> Place<&'static str> {
        match e {
            Entry::Now(p) => p,
            Entry::Queued(_) => panic!("queued"),
        }
    }

    fn queued(e: Entry<&'static str>) -> Waiting<&'static str> {
        match e {
            Entry::Queued(w) => w,
            Entry::Now(_) => panic!("admitted at once"),
        }
    }

    #[tokio::test]
    async fn a_backlog_delays_another_clients_first_run_by_one_admission() {
        let fair = Fair::new(1);
        let running = now(fair.enter(&"A"));
        // A's backlog of five, then B's one run.
        let mut a: Vec<_> = (0..5).map(|_| queued(fair.enter(&"A"))).collect();
        let b = queued(fair.enter(&"B"));
        assert_eq!(fair.counts(), (1, 6));
        // The order places are handed out in, one at a time.
        let mut order = Vec::new();
        drop(running);
        let mut waiting: Vec<(&str, Waiting<&str>)> = a.drain(..).map(|w| ("A", w)).collect();
        waiting.insert(1, ("B", b));
        // Exactly one waiter holds a place after each release: find it.
        let mut pending = waiting;
        while !pending.is_empty() {
            let mut rest = Vec::new();
            let mut got = None;
            for (who, mut w) in pending {
                match w.rx.try_recv() {
                    Ok(place) => got = Some((who, place)),
                    Err(_) => rest.push((who, w)),
                }
            }
            let (who, place) = got.expect("a place was handed out");
            order.push(who);
            drop(place);
            pending = rest;
        }
        assert_eq!(order, ["A", "B", "A", "A", "A", "A"]);
    }

    #[tokio::test]
    async fn a_given_up_waiter_passes_its_turn_on() {
        let fair = Fair::new(1);
        let running = now(fair.enter(&"A"));
        let gone = queued(fair.enter(&"B"));
        let c = queued(fair.enter(&"C"));
        drop(gone);
        drop(running);
        let place = c.place().await.expect("C is next");
        assert_eq!(fair.counts(), (1, 0));
        drop(place);
        assert_eq!(fair.counts(), (0, 0));
        // Free again: the next run is admitted at once.
        drop(now(fair.enter(&"A")));
    }

    #[tokio::test]
    async fn a_place_handed_to_a_dropped_receiver_comes_back() {
        let fair = Fair::new(1);
        let running = now(fair.enter(&"A"));
        let w = queued(fair.enter(&"B"));
        drop(running);
        // B holds the place in its channel; dropping the wait gives it back.
        assert_eq!(fair.counts(), (1, 0));
        drop(w);
        assert_eq!(fair.counts(), (0, 0));
    }
}
