//! One shard of the memory store: a map of leases behind its own mutex.

use std::collections::HashMap;
use std::sync::Arc;

use distlock_api::Token;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The smallest number of entries a shard holds before it sweeps expired ones.
const MIN_SWEEP_AT: usize = 64;

pub(crate) struct Lease {
    pub(crate) token: Token,
    pub(crate) fence: u64,
    pub(crate) expires_at: Instant,
    /// Waiters of this key; created by the first waiter, notified on release.
    pub(crate) released: Option<Arc<Notify>>,
}

impl Lease {
    pub(crate) fn is_live(&self, now: Instant) -> bool {
        self.expires_at > now
    }
}

#[derive(Default)]
pub(crate) struct Shard {
    pub(crate) leases: HashMap<String, Lease>,
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
        if self.leases.len() < self.sweep_at.max(MIN_SWEEP_AT) {
            return;
        }
        self.leases.retain(|_, lease| {
            let live = lease.is_live(now);
            if !live {
                if let Some(waiters) = &lease.released {
                    waiters.notify_waiters();
                }
            }
            live
        });
        self.sweep_at = self.leases.len() * 2;
    }
}
