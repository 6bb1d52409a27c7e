//! `MemoryLockStore`: leases in sharded in-process maps, on tokio's clock.

use std::collections::hash_map::Entry;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, GroupLockStore, HeldLock, KeyPattern, LeaseValue, LeaseValueStore, ListCursor, ListPage,
    LockError, LockInfo, LockKey, LockMode, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, ValuedHolder,
    WaitingPlace, LOCK_NAMESPACE,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::group_state::Groups;
use crate::shard::{Lease, Shard};

const SHARDS: usize = 32;

/// An in-process [`LockStore`]: locks shared by the tasks of one process.
///
/// Leases expire on **tokio's clock** ([`tokio::time::Instant`]), so tests can run TTL
/// logic instantly and deterministically with `#[tokio::test(start_paused = true)]` and
/// `tokio::time::advance`. Keys are spread over 32 mutex-protected shards, every
/// operation is O(1) (amortised), expired leases are reclaimed as the store is used,
/// fencing numbers come from one store-wide counter (so they strictly increase per key),
/// and waiters are woken on release.
///
/// Cloning is cheap and clones share the locks.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock::LockManager;
/// use distlock::memory::MemoryLockStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
/// let ttl = Duration::from_secs(10);
/// let lock = locks.lock("job:nightly", ttl).await?;
/// assert!(locks.try_lock("job:nightly", ttl).await?.is_none());
/// assert!(lock.release().await?);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLockStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    shards: [Padded; SHARDS],
    fences: AtomicU64,
    groups: Groups,
}

impl MemoryLockStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of leases currently stored, live or expired-but-not-yet-reclaimed.
    /// Useful to check that memory stays bounded.
    pub fn stored_leases(&self) -> usize {
        self.inner.shards.iter().map(|shard| lock_shard(&shard.0).leases.len()).sum()
    }

    /// The next fencing number: one store-wide counter for single locks and groups.
    pub(crate) fn next_fence(&self) -> u64 {
        self.inner.fences.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn groups_state(&self) -> &Groups {
        &self.inner.groups
    }

    fn shard(&self, key: &StoreKey) -> MutexGuard<'_, Shard> {
        lock_shard(&self.inner.shards[shard_index(key.as_str())].0)
    }
}

/// A shard on cache lines of its own: tasks on other cores that use neighbouring shards
/// do not invalidate each other's copies.
#[derive(Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// The shard index of `key`: FNV-1a over its bytes. A shard is only a mutex and a map
/// of its own, so the spread needs no keyed hash; the maps inside have randomly seeded
/// ones (foldhash).
fn shard_index(key: &str) -> usize {
    let hash = key
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    // Folding the high bits in spreads keys that differ only in their last bytes; the
    // modulo keeps the index below SHARDS, so the truncation is lossless.
    ((hash ^ (hash >> 32)) % SHARDS as u64) as usize
}

/// A panic while a shard was locked cannot leave a lease half-written (every update is a
/// single map operation), so a poisoned shard is still consistent.
fn lock_shard(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl LeaseValueStore for MemoryLockStore {
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.live(key.as_str(), now) {
            Some(lease) if lease.token == *token => {
                lease.value = Some(value.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        Ok(shard.live(key.as_str(), now).map(|lease| {
            let holder = LockInfo::new(lease.token.clone(), Some(lease.fence), lease.expires_at - now);
            ValuedHolder::new(holder, lease.value.clone())
        }))
    }
}

impl fmt::Debug for MemoryLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLockStore").field("shards", &SHARDS).finish_non_exhaustive()
    }
}

#[async_trait]
impl LockStore for MemoryLockStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE.with_fencing(true).with_release_notifications(true).with_fair_queue(true)
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let now = Instant::now();
        let expires_at = now + ttl.as_duration();
        let mut shard = self.shard(key);
        shard.maybe_sweep(now);
        let acquired = match shard.leases.entry(key.as_str().to_owned()) {
            Entry::Occupied(mut entry) => {
                let lease = entry.get_mut();
                if lease.is_live(now) {
                    return Ok(Acquire::Held { ttl_left: Some(lease.expires_at - now) });
                }
                lease.token = token.clone();
                lease.value = None;
                lease.fence = self.inner.fences.fetch_add(1, Ordering::Relaxed) + 1;
                lease.expires_at = expires_at;
                lease.fence
            }
            Entry::Vacant(entry) => {
                let fence = self.inner.fences.fetch_add(1, Ordering::Relaxed) + 1;
                entry.insert(Lease { token: token.clone(), fence, expires_at, value: None, released: None });
                fence
            }
        };
        Ok(Acquire::Acquired { fence: Some(acquired) })
    }

    /// Frees the key if `token` holds it, removes `token`'s place in the key's queue, and
    /// hands a key left free to the oldest live waiter.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        // One lookup: the lease is taken out, and put back unless `token` holds it.
        let held = match shard.leases.remove_entry(key.as_str()) {
            Some((_, lease)) if lease.is_live(now) && lease.token == *token => {
                if let Some(waiters) = lease.released {
                    waiters.notify_waiters();
                }
                true
            }
            Some((name, lease)) => {
                shard.leases.insert(name, lease);
                false
            }
            None => false,
        };
        if shard.queues.contains_key(key.as_str()) {
            shard.leave(key.as_str(), token);
            shard.hand_over(key.as_str(), now, || self.next_fence());
        }
        Ok(held)
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.live(key.as_str(), now) {
            Some(lease) if lease.token == *token => {
                lease.expires_at = now + ttl.as_duration();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        Ok(shard
            .live(key.as_str(), now)
            .map(|lease| LockInfo::new(lease.token.clone(), Some(lease.fence), lease.expires_at - now)))
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait(key, None, max).await
    }

    /// Pages through the live leases in key order; the cursor is the last key listed.
    /// Each page locks one shard at a time, never the whole store.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let now = Instant::now();
        let after = cursor.map(ListCursor::as_str);
        let mut found: Vec<(String, LockInfo)> = Vec::new();
        for shard in &self.inner.shards {
            let shard = lock_shard(&shard.0);
            for (store_key, lease) in &shard.leases {
                let Some(key) = store_key.strip_prefix(LOCK_NAMESPACE) else { continue };
                if !lease.is_live(now) || after.is_some_and(|after| key <= after) || !pattern.matches(key) {
                    continue;
                }
                found.push((
                    key.to_owned(),
                    LockInfo::new(lease.token.clone(), Some(lease.fence), lease.expires_at - now),
                ));
            }
        }
        let (page, next) = sorted_page(found, limit);
        let locks = page
            .into_iter()
            .filter_map(|(key, info)| Some(HeldLock::new(LockKey::new(key).ok()?, vec![info])))
            .collect();
        Ok(ListPage::new(locks, next))
    }
}

#[async_trait]
impl QueueStore for MemoryLockStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    /// One critical section: a key handed to `token` (or free with `token` first in line,
    /// or nobody waiting) is taken for `ttl` with a new fence; otherwise `token`'s place
    /// is taken or refreshed.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        let now = Instant::now();
        let mut shard = self.shard(key);
        shard.maybe_sweep(now);
        let name = key.as_str();
        let held_by = shard.live(name, now).map(|lease| lease.token == *token);
        let acquired = match held_by {
            Some(true) => shard.live(name, now).map(|lease| {
                lease.expires_at = now + ttl.as_duration();
                lease.fence
            }),
            Some(false) => None,
            None => {
                let first =
                    shard.live_queue(name, now).and_then(|queue| queue.front().map(|head| head.token == *token));
                if first.unwrap_or(true) {
                    let fence = self.next_fence();
                    let released = shard.leases.remove(name).and_then(|lease| lease.released);
                    let lease = Lease {
                        token: token.clone(),
                        fence,
                        expires_at: now + ttl.as_duration(),
                        value: None,
                        released,
                    };
                    shard.leases.insert(name.to_owned(), lease);
                    Some(fence)
                } else {
                    // Free, but another waiter comes first: its turn.
                    shard.hand_over(name, now, || self.next_fence());
                    None
                }
            }
        };
        if let Some(fence) = acquired {
            shard.leave(name, token);
            return Ok(Acquire::Acquired { fence: Some(fence) });
        }
        shard.queue(name, token, now, now + place.as_duration());
        let ttl_left = shard.live(name, now).map(|lease| lease.expires_at - now);
        Ok(Acquire::Held { ttl_left })
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait(key, Some(token), max).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let now = Instant::now();
        Ok(self.shard(key).live_queue(key.as_str(), now).map_or(0, |queue| queue.len()))
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        let Some(queue) = shard.live_queue(key.as_str(), now) else { return Ok(Vec::new()) };
        Ok(queue
            .iter()
            .map(|place| {
                let waited = Some(now - place.since);
                WaitingPlace::new(place.token.clone(), LockMode::Exclusive, waited, place.expires_at - now)
            })
            .collect())
    }
}

impl MemoryLockStore {
    /// Whether `key` is held by someone other than `me`.
    fn is_held(&self, key: &StoreKey, me: Option<&Token>) -> bool {
        self.shard(key).live(key.as_str(), Instant::now()).is_some_and(|lease| Some(&lease.token) != me)
    }

    /// Waits at most `max` until `key` is released or expires; at once when it is free or
    /// held by `me` (a key handed to a queued waiter).
    async fn wait(&self, key: &StoreKey, me: Option<&Token>, max: Duration) -> Result<(), LockError> {
        let now = Instant::now();
        let (waiters, wake_at) = {
            let mut shard = self.shard(key);
            let Some(lease) = shard.live(key.as_str(), now) else { return Ok(()) };
            if Some(&lease.token) == me {
                return Ok(());
            }
            // A `max` too large to add (say `Duration::MAX`) leaves the lease's end as the bound.
            let wake_at = now.checked_add(max).map_or(lease.expires_at, |end| end.min(lease.expires_at));
            (Arc::clone(lease.released.get_or_insert_with(|| Arc::new(Notify::new()))), wake_at)
        };
        // `notify_waiters` only wakes waiters already registered: register first, then look
        // again, so a release between the two shard locks is not missed.
        let released = waiters.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        if !self.is_held(key, me) {
            return Ok(());
        }
        let _ = tokio::time::timeout_at(wake_at, released).await;
        Ok(())
    }
}

/// The first `limit` (clamped to 1..=[`ListPage::MAX_LIMIT`]) of `found` in key order, and
/// the cursor after them when more remain: one page of a listing in key order.
pub(crate) fn sorted_page<T>(mut found: Vec<(String, T)>, limit: usize) -> (Vec<(String, T)>, Option<ListCursor>) {
    let limit = limit.clamp(1, ListPage::MAX_LIMIT);
    let more = found.len() > limit;
    if more {
        found.select_nth_unstable_by(limit, |a, b| a.0.cmp(&b.0));
        found.truncate(limit);
    }
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let next = if more { found.last().map(|(key, _)| ListCursor::new(key.clone())) } else { None };
    (found, next)
}
