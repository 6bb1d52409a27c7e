//! What a benchmark drives: the manager, a store without the manager, or a store's raw
//! commands, all behind one [`Locker`] trait.
//!
//! The scenarios are generic over [`Locker`] (no boxing, no dynamic dispatch of their
//! own), so distlock and its raw baseline pay the same harness costs and the ratio between
//! them is distlock's own overhead.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DistributedLock, DynLockStore, LockError, LockKey, LockManager, LockOptions, StoreKey, Token, Ttl};
use tokio::time::Instant;

/// Takes and frees locks, one way or another.
pub trait Locker: Send + Sync + 'static {
    /// A key as this implementation sends it (prepared once per worker).
    type Key: Send + Sync + 'static;
    /// Proof of a held lock, consumed by `release`.
    type Guard: Send + 'static;

    /// Prepares the lock named `name` (an application key) for one worker.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] for a name that is not a valid key.
    fn key(&self, name: &str) -> Result<Self::Key, LockError>;

    /// Takes `key`, trying for up to `wait` (once when zero); `None` when it stayed held.
    fn acquire(
        &self,
        key: &Self::Key,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send;

    /// Frees `key`; `false` when the guard no longer held it.
    fn release(&self, key: &Self::Key, guard: Self::Guard) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// Polls `attempt` until it succeeds or `wait` ran out, pausing `retry` in between: how
/// a hand-written lock waits.
pub(crate) async fn poll<F, Fut>(wait: Duration, retry: Duration, mut attempt: F) -> Result<Option<()>, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, LockError>>,
{
    let deadline = Instant::now() + wait;
    loop {
        if attempt().await? {
            return Ok(Some(()));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(retry.min(deadline - now)).await;
    }
}

/// distlock itself: `LockManager::try_lock` (or `try_lock_opts` when waiting) +
/// `DistributedLock::release` — key validation, a fresh token per acquisition, waiting,
/// the handle.
#[derive(Debug, Clone)]
pub struct Library {
    locks: LockManager,
    ttl: Duration,
    retry: Duration,
}

impl Library {
    /// Locks through `locks` for `ttl`, waiting workers retrying every `retry` (or sooner,
    /// when the store signals releases).
    pub fn new(locks: LockManager, ttl: Duration, retry: Duration) -> Self {
        Self { locks, ttl, retry }
    }
}

impl Locker for Library {
    type Key = String;
    type Guard = DistributedLock;

    fn key(&self, name: &str) -> Result<String, LockError> {
        Ok(name.to_owned())
    }

    async fn acquire(&self, key: &String, wait: Duration) -> Result<Option<DistributedLock>, LockError> {
        if wait.is_zero() {
            return self.locks.try_lock(key, self.ttl).await;
        }
        self.locks.try_lock_opts(key, self.ttl, &LockOptions::new().wait(wait).retry_interval(self.retry)).await
    }

    async fn release(&self, _key: &String, guard: DistributedLock) -> Result<bool, LockError> {
        guard.release().await
    }
}

/// A store without the manager: `try_acquire` + `release` with one fixed token per
/// worker, polling when it waits.
#[derive(Debug, Clone)]
pub struct StoreDirect {
    store: Arc<DynLockStore>,
    ttl: Ttl,
    retry: Duration,
}

impl StoreDirect {
    /// Drives `store` with leases of `ttl`; waiting workers poll every `retry`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a TTL the stores do not accept.
    pub fn new(store: Arc<DynLockStore>, ttl: Duration, retry: Duration) -> Result<Self, LockError> {
        Ok(Self { store, ttl: Ttl::new(ttl)?, retry })
    }
}

impl Locker for StoreDirect {
    type Key = (StoreKey, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<(StoreKey, Token), LockError> {
        Ok((LockKey::new(name)?.to_store_key(), Token::generate()))
    }

    async fn acquire(&self, (key, token): &(StoreKey, Token), wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async { Ok(self.store.try_acquire(key, token, self.ttl).await?.is_acquired()) }).await
    }

    async fn release(&self, (key, token): &(StoreKey, Token), (): ()) -> Result<bool, LockError> {
        self.store.release(key, token).await
    }
}

/// The memory baseline: a `tokio::sync::Mutex<HashMap>` of key → (owner, expiry),
/// insert if free or expired, remove if still ours; waiting polls.
#[derive(Debug)]
pub struct RawMemory {
    held: tokio::sync::Mutex<HashMap<String, (u64, Instant)>>,
    next_owner: AtomicU64,
    ttl: Duration,
    retry: Duration,
}

impl RawMemory {
    /// An empty map; entries live for `ttl`, waiting workers poll every `retry`.
    pub fn new(ttl: Duration, retry: Duration) -> Self {
        Self { held: tokio::sync::Mutex::default(), next_owner: AtomicU64::new(0), ttl, retry }
    }
}

impl Locker for RawMemory {
    /// (the key, this worker's owner id)
    type Key = (String, u64);
    type Guard = ();

    fn key(&self, name: &str) -> Result<(String, u64), LockError> {
        Ok((name.to_owned(), self.next_owner.fetch_add(1, Ordering::Relaxed)))
    }

    async fn acquire(&self, key: &(String, u64), wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let now = Instant::now();
            let mut held = self.held.lock().await;
            match held.get(&key.0) {
                Some(&(_, expires)) if expires > now => Ok(false),
                _ => {
                    held.insert(key.0.clone(), (key.1, now + self.ttl));
                    Ok(true)
                }
            }
        })
        .await
    }

    async fn release(&self, key: &(String, u64), (): ()) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut held = self.held.lock().await;
        match held.get(&key.0) {
            Some(&(owner, expires)) if owner == key.1 && expires > now => {
                held.remove(&key.0);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
