//! Place slots: the names a store gives its waiters' places, used again wait after wait.
//!
//! A place named after its waiter's token would leave a deleted key under the queue's
//! prefix at every wait, and etcd keeps deleted keys in its index until a compaction:
//! every read of the queue (the first attempt's "nobody waits" compare, a waiter's look
//! at the place ahead) walks them, and a busy queue gets slower until the next compaction.
//! A store instead names its places in a queue `{store id}.{n}`, `n` the lowest number
//! none of its other waiters of that queue uses: the keys under a queue stay as many as
//! the waiters each store has had at once.
//!
//! A number is free again only when its place is known gone (its waiter took the lock, or
//! a release or withdrawal with its token was answered) and every put of it was answered:
//! a put whose answer never came may still land, and must not land on a place another
//! waiter took meanwhile. Such a number is retired for the life of the store.

use std::collections::{BTreeSet, HashMap};

/// The slots of one store, by queue.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// (etcd lock key, token) → the token's slot in that key's queue.
    assigned: HashMap<(String, String), Assigned>,
    /// etcd lock key → the numbers in use in its queue: assigned or retired.
    taken: HashMap<String, BTreeSet<u32>>,
}

#[derive(Debug, Clone, Copy)]
struct Assigned {
    slot: u32,
    /// Puts of the place sent and not (yet) answered.
    unanswered: u32,
}

impl Slots {
    /// The slot of `token`'s place in the queue of `etcd_key`: the one it has, else the
    /// lowest free number, now the token's until [`gone`](Self::gone).
    pub(crate) fn assign(&mut self, etcd_key: &str, token: &str) -> u32 {
        let id = (etcd_key.to_owned(), token.to_owned());
        if let Some(assigned) = self.assigned.get(&id) {
            return assigned.slot;
        }
        let taken = self.taken.entry(id.0.clone()).or_default();
        // `len` numbers are taken, so one of the `len + 1` numbers 0..=len is free.
        let last = u32::try_from(taken.len()).unwrap_or(u32::MAX);
        let slot = (0..=last).find(|n| !taken.contains(n)).unwrap_or(u32::MAX);
        taken.insert(slot);
        self.assigned.insert(id, Assigned { slot, unanswered: 0 });
        slot
    }

    /// A put of `token`'s place in the queue of `etcd_key` is being sent.
    pub(crate) fn put_sending(&mut self, etcd_key: &str, token: &str) {
        if let Some(assigned) = self.assigned.get_mut(&(etcd_key.to_owned(), token.to_owned())) {
            assigned.unanswered += 1;
        }
    }

    /// `puts` puts of `token`'s place in the queue of `etcd_key` were answered: each
    /// happened, or surely not.
    pub(crate) fn puts_answered(&mut self, etcd_key: &str, token: &str, puts: u32) {
        if let Some(assigned) = self.assigned.get_mut(&(etcd_key.to_owned(), token.to_owned())) {
            assigned.unanswered = assigned.unanswered.saturating_sub(puts);
        }
    }

    /// The slot of `token`'s place in the queue of `etcd_key`, if it has one.
    pub(crate) fn of(&self, etcd_key: &str, token: &str) -> Option<u32> {
        self.assigned.get(&(etcd_key.to_owned(), token.to_owned())).map(|assigned| assigned.slot)
    }

    /// `token`'s place in the queue of `etcd_key` is known gone: its number is free again,
    /// unless a put of it was never answered (then it is retired).
    pub(crate) fn gone(&mut self, etcd_key: &str, token: &str) {
        let Some(assigned) = self.assigned.remove(&(etcd_key.to_owned(), token.to_owned())) else { return };
        if assigned.unanswered > 0 {
            return;
        }
        if let Some(taken) = self.taken.get_mut(etcd_key) {
            taken.remove(&assigned.slot);
            if taken.is_empty() {
                self.taken.remove(etcd_key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_take_the_lowest_free_numbers() {
        let mut slots = Slots::default();
        assert_eq!(slots.assign("k", "a"), 0);
        assert_eq!(slots.assign("k", "b"), 1);
        assert_eq!(slots.assign("other", "c"), 0, "each queue counts apart");
        assert_eq!(slots.assign("k", "a"), 0, "a token keeps its slot");
        for _ in 0..2 {
            slots.put_sending("k", "a");
        }
        slots.puts_answered("k", "a", 2);
        slots.gone("k", "a");
        assert_eq!(slots.of("k", "a"), None);
        assert_eq!(slots.of("k", "b"), Some(1));
        assert_eq!(slots.assign("k", "d"), 0, "a place known gone frees its number");
        assert_eq!(slots.assign("k", "e"), 2);
    }

    #[test]
    fn a_number_whose_put_went_unanswered_is_retired() {
        let mut slots = Slots::default();
        assert_eq!(slots.assign("k", "a"), 0);
        slots.put_sending("k", "a");
        // No answer (an error, a cancelled attempt): the put may still land.
        slots.gone("k", "a");
        assert_eq!(slots.assign("k", "b"), 1);
        slots.put_sending("k", "b");
        slots.puts_answered("k", "b", 1);
        slots.gone("k", "b");
        assert_eq!(slots.assign("k", "c"), 1, "only the doubtful number is retired");
    }

    #[test]
    fn an_empty_queue_is_forgotten() {
        let mut slots = Slots::default();
        slots.assign("k", "a");
        slots.put_sending("k", "a");
        slots.puts_answered("k", "a", 1);
        slots.gone("k", "a");
        assert!(slots.taken.is_empty() && slots.assigned.is_empty());
    }
}
