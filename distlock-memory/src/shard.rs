//! One shard of the memory store: a map of leases behind its own mutex.

use std::collections::VecDeque;
use std::sync::Arc;

use distlock_api::{LeaseValue, Token};
use foldhash::HashMap;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The smallest number of entries a shard holds before it sweeps expired ones.
const MIN_SWEEP_AT: usize = 64;

pub(crate) struct Lease {
    pub(crate) token: Token,
    pub(crate) fence: u64,
    pub(crate) expires_at: Instant,
    /// The value the holder attached to this lease.
    pub(crate) value: Option<LeaseValue>,
    /// Waiters of this key; created by the first waiter, notified on release.
    pub(crate) released: Option<Arc<Notify>>,
}

impl Lease {
    pub(crate) fn is_live(&self, now: Instant) -> bool {
        self.expires_at > now
    }
}

/// A waiter's place in a key's queue: a lease of its own, refreshed by each attempt.
pub(crate) struct Place {
    pub(crate) token: Token,
    /// When the waiter first took the place.
    pub(crate) since: Instant,
    pub(crate) expires_at: Instant,
}

#[derive(Default)]
pub(crate) struct Shard {
    pub(crate) leases: HashMap<String, Lease>,
    /// The waiters of each key in arrival order (only keys someone waits for).
    pub(crate) queues: HashMap<String, VecDeque<Place>>,
    sweep_at: usize,
}

impl Shard {
    /// The live lease of `key`, if any.
    pub(crate) fn live(&mut self, key: &str, now: Instant) -> Option<&mut Lease> {
        self.leases.get_mut(key).filter(|lease| lease.is_live(now))
    }

    /// Drops expired leases once the shard has doubled since the last sweep, so memory
    /// stays bounded by about twice the live leases while each operation stays O(1)
    /// amortised.
    pub(crate) fn maybe_sweep(&mut self, now: Instant) {
        if self.leases.len() + self.queues.len() < self.sweep_at.max(MIN_SWEEP_AT) {
            return;
        }
        self.queues.retain(|_, queue| {
            queue.retain(|place| place.expires_at > now);
            !queue.is_empty()
        });
        self.leases.retain(|_, lease| {
            let live = lease.is_live(now);
            if !live {
                if let Some(waiters) = &lease.released {
                    waiters.notify_waiters();
                }
            }
            live
        });
        self.sweep_at = (self.leases.len() + self.queues.len()) * 2;
    }

    /// The live places of `key`'s queue (expired ones are dropped; an empty queue goes).
    pub(crate) fn live_queue(&mut self, key: &str, now: Instant) -> Option<&mut VecDeque<Place>> {
        let queue = self.queues.get_mut(key)?;
        queue.retain(|place| place.expires_at > now);
        if queue.is_empty() {
            self.queues.remove(key);
            return None;
        }
        self.queues.get_mut(key)
    }

    /// Removes `token`'s place from `key`'s queue, if it has one.
    pub(crate) fn leave(&mut self, key: &str, token: &Token) {
        if let Some(queue) = self.queues.get_mut(key) {
            queue.retain(|place| place.token != *token);
            if queue.is_empty() {
                self.queues.remove(key);
            }
        }
    }

    /// Takes (at `now`) or refreshes `token`'s place at the back of `key`'s queue, until
    /// `expires_at`.
    pub(crate) fn queue(&mut self, key: &str, token: &Token, now: Instant, expires_at: Instant) {
        let queue = self.queues.entry(key.to_owned()).or_default();
        match queue.iter_mut().find(|place| place.token == *token) {
            Some(place) => place.expires_at = expires_at,
            None => queue.push_back(Place { token: token.clone(), since: now, expires_at }),
        }
    }

    /// When `key` is free and has live waiters: hands it to the oldest one (held by its
    /// token until its place expires, with `fence`) and wakes the key's waiters. Returns
    /// whether it did.
    pub(crate) fn hand_over(&mut self, key: &str, now: Instant, fence: impl FnOnce() -> u64) -> bool {
        if self.live(key, now).is_some() {
            return false;
        }
        let Some(head) = self.live_queue(key, now).and_then(|queue| queue.front()) else { return false };
        let (token, expires_at) = (head.token.clone(), head.expires_at);
        let released = self.leases.remove(key).and_then(|lease| lease.released);
        self.leases.insert(
            key.to_owned(),
            Lease { token, fence: fence(), expires_at, value: None, released: released.clone() },
        );
        if let Some(waiters) = released {
            waiters.notify_waiters();
        }
        true
    }
}
