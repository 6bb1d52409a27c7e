//! `MemoryIdempotencyStore`: records in sharded in-process maps, on tokio's clock.

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use distlock_api::idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use tokio::time::Instant;

const SHARDS: usize = 16;
/// The smallest number of records a shard holds before it sweeps expired ones.
const MIN_SWEEP_AT: usize = 64;

/// An in-process [`IdempotencyStore`]: for tests, and for a single process.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::sync::Arc;
/// use distlock::idempotency::Idempotency;
/// use distlock::memory::MemoryIdempotencyStore;
///
/// let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
/// # let _ = idem; Ok(()) }
/// ```
///
/// Time is tokio's clock (`tokio::time::Instant`), so tests can run the 24 h retention
/// in paused time (`#[tokio::test(start_paused = true)]` and `tokio::time::advance`).
/// Each operation is one critical section on one of 16 shards; a shard drops expired
/// records once it has doubled in size since its last sweep, so memory stays bounded by
/// about twice the live records while operations stay O(1) amortised.
///
/// Cloning is cheap; clones share the records.
#[derive(Clone, Default)]
pub struct MemoryIdempotencyStore {
    shards: Arc<[Mutex<Shard>; SHARDS]>,
}

#[derive(Default)]
struct Shard {
    records: HashMap<String, Record>,
    sweep_at: usize,
}

struct Record {
    fingerprint: Fingerprint,
    state: State,
    /// The end of the claim's lease while running, of the retention once completed.
    expires_at: Instant,
}

enum State {
    Running(Token),
    Completed(StoredResponse),
}

impl Shard {
    /// The unexpired, running claim of `token` on `key`.
    fn claim_of(&mut self, key: &IdempotencyKey, token: &Token, now: Instant) -> Option<&mut Record> {
        self.records
            .get_mut(key.as_str())
            .filter(|r| r.expires_at > now && matches!(&r.state, State::Running(t) if t == token))
    }

    fn maybe_sweep(&mut self, now: Instant) {
        if self.records.len() < self.sweep_at.max(MIN_SWEEP_AT) {
            return;
        }
        self.records.retain(|_, record| record.expires_at > now);
        self.sweep_at = self.records.len() * 2;
    }
}

impl MemoryIdempotencyStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records the store holds, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).records.len()).sum()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &IdempotencyKey) -> MutexGuard<'_, Shard> {
        let mut hasher = DefaultHasher::new();
        key.as_str().hash(&mut hasher);
        lock(&self.shards[(hasher.finish() as usize) % SHARDS])
    }
}

/// Every update is one map operation, so a shard poisoned by a panic is still consistent.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl fmt::Debug for MemoryIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryIdempotencyStore").field("shards", &SHARDS).finish_non_exhaustive()
    }
}

#[async_trait]
impl IdempotencyStore for MemoryIdempotencyStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        token: &Token,
        lease: Ttl,
    ) -> Result<StoreClaim, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        shard.maybe_sweep(now);
        let fresh = || Record {
            fingerprint: *fingerprint,
            state: State::Running(token.clone()),
            expires_at: now + lease.as_duration(),
        };
        Ok(match shard.records.entry(key.as_str().to_owned()) {
            Entry::Vacant(slot) => {
                slot.insert(fresh());
                StoreClaim::Started
            }
            Entry::Occupied(mut slot) => {
                let record = slot.get_mut();
                if record.expires_at <= now {
                    *record = fresh();
                    StoreClaim::Started
                } else if record.fingerprint != *fingerprint {
                    StoreClaim::Mismatch { stored: record.fingerprint }
                } else {
                    match &record.state {
                        State::Completed(response) => StoreClaim::Replay(response.clone()),
                        State::Running(holder) if holder == token => {
                            record.expires_at = now + lease.as_duration();
                            StoreClaim::Started
                        }
                        State::Running(_) => StoreClaim::InProgress { retry_after: record.expires_at - now },
                    }
                }
            }
        })
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        let now = Instant::now();
        Ok(self.shard(key).claim_of(key, token, now).map(|r| r.expires_at = now + lease.as_duration()).is_some())
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        let Some(record) = shard.claim_of(key, token, now) else { return Ok(false) };
        record.state = State::Completed(response.clone());
        record.expires_at = now + retention.as_duration();
        Ok(true)
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut shard = self.shard(key);
        if shard.claim_of(key, token, now).is_none() {
            return Ok(false);
        }
        shard.records.remove(key.as_str());
        Ok(true)
    }
}
