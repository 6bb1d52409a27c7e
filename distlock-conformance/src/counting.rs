//! Store wrappers for tests: one that counts calls, one that loses answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, DynLockStore, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace,
};
use tokio::sync::watch;

/// Counts the calls made to the store it wraps, per operation.
///
/// Used to prove that bad input never reaches the store and that waiting is not a busy
/// loop. [`CountingStore::wait_for_acquires`] lets a test wait (without sleeping) until
/// a waiter has made its first attempt.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<DynLockStore>,
    acquires: AtomicUsize,
    releases: AtomicUsize,
    extends: AtomicUsize,
    inspects: AtomicUsize,
    waits: AtomicUsize,
    acquire_count: watch::Sender<usize>,
    calls: watch::Sender<()>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<DynLockStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            acquires: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            extends: AtomicUsize::new(0),
            inspects: AtomicUsize::new(0),
            waits: AtomicUsize::new(0),
            acquire_count: watch::channel(0).0,
            calls: watch::channel(()).0,
        })
    }

    /// `try_acquire` calls so far.
    pub fn acquires(&self) -> usize {
        self.acquires.load(Ordering::SeqCst)
    }

    /// `release` calls so far.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// `extend` calls so far.
    pub fn extends(&self) -> usize {
        self.extends.load(Ordering::SeqCst)
    }

    /// `wait_for_release` calls so far.
    pub fn waits(&self) -> usize {
        self.waits.load(Ordering::SeqCst)
    }

    /// Every call so far, whatever the operation.
    pub fn total(&self) -> usize {
        self.acquires() + self.releases() + self.extends() + self.inspects.load(Ordering::SeqCst) + self.waits()
    }

    /// Waits until `condition` holds, checking after every call to the store.
    ///
    /// # Panics
    ///
    /// After 30 s.
    pub async fn wait_until(&self, condition: impl Fn(&Self) -> bool) {
        let mut calls = self.calls.subscribe();
        tokio::time::timeout(Duration::from_secs(30), calls.wait_for(|()| condition(self)))
            .await
            .expect("timed out waiting for store calls")
            .expect("the sender lives as long as the store");
    }

    /// Waits until at least `n` `try_acquire` calls have completed.
    ///
    /// # Panics
    ///
    /// After 30 s.
    pub async fn wait_for_acquires(&self, n: usize) {
        let mut seen = self.acquire_count.subscribe();
        tokio::time::timeout(Duration::from_secs(30), seen.wait_for(|count| *count >= n))
            .await
            .expect("timed out waiting for try_acquire calls")
            .expect("the sender lives as long as the store");
    }
}

impl CountingStore {
    /// Counts one acquisition attempt and wakes whoever waits for calls.
    fn count_acquire(&self) {
        let n = self.acquires.fetch_add(1, Ordering::SeqCst) + 1;
        self.acquire_count.send_replace(n);
        self.calls.send_replace(());
    }
}

#[async_trait]
impl LockStore for CountingStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let outcome = self.inner.try_acquire(key, token, ttl).await;
        self.count_acquire();
        outcome
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, token).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        self.inner.extend(key, token, ttl).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.inspects.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect(key).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.waits.fetch_add(1, Ordering::SeqCst);
        self.calls.send_replace(());
        self.inner.wait_for_release(key, max).await
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.inner.queue()?;
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        self.inner.groups()
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        self.inner.values()
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.inner.list(pattern, cursor, limit).await
    }
}

/// A store whose `try_acquire` runs on the real store and then never answers, like a
/// connection that dies after the command reached the server. Everything else forwards.
#[derive(Debug)]
pub struct LostAnswerStore {
    inner: Arc<DynLockStore>,
}

impl LostAnswerStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<DynLockStore>) -> Arc<Self> {
        Arc::new(Self { inner })
    }
}

#[async_trait]
impl LockStore for LostAnswerStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let _ = self.inner.try_acquire(key, token, ttl).await;
        std::future::pending().await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.inner.release(key, token).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.inner.extend(key, token, ttl).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(key).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.inner.wait_for_release(key, max).await
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.inner.queue()?;
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        self.inner.groups()
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        self.inner.values()
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.inner.list(pattern, cursor, limit).await
    }
}

/// The fair queue of the store a wrapper forwards to; the wrappers hand themselves out as
/// a queue only when it exists.
pub(crate) fn inner_queue(inner: &DynLockStore) -> Result<&dyn QueueStore, LockError> {
    inner.queue().ok_or(LockError::Unsupported { backend: inner.backend(), operation: "try_acquire_queued" })
}

#[async_trait]
impl QueueStore for CountingStore {
    /// Counted as an acquisition attempt.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let outcome = inner_queue(&*self.inner)?.try_acquire_queued(attempt).await;
        self.count_acquire();
        outcome
    }

    fn queues_in_first_attempt(&self) -> bool {
        self.inner.queue().is_some_and(QueueStore::queues_in_first_attempt)
    }

    /// Counted as a wait.
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.waits.fetch_add(1, Ordering::SeqCst);
        self.calls.send_replace(());
        inner_queue(&*self.inner)?.wait_for_turn(key, token, max).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        inner_queue(&*self.inner)?.queue_len(key).await
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        inner_queue(&*self.inner)?.queue_places(key).await
    }
}

#[async_trait]
impl QueueStore for LostAnswerStore {
    /// Like `try_acquire`: runs on the real store, then never answers.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let _ = inner_queue(&*self.inner)?.try_acquire_queued(attempt).await;
        std::future::pending().await
    }

    fn queues_in_first_attempt(&self) -> bool {
        self.inner.queue().is_some_and(QueueStore::queues_in_first_attempt)
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        inner_queue(&*self.inner)?.wait_for_turn(key, token, max).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        inner_queue(&*self.inner)?.queue_len(key).await
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        inner_queue(&*self.inner)?.queue_places(key).await
    }
}
