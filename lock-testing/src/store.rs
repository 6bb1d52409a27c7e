//! `FaultyStore`: a `LockStore` that forwards to another one, with faults injected.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, DynLockStore, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockStore, StoreKey,
    Token, Ttl,
};

use crate::faults::{Failure, Faults, Plan};
use crate::op::Op;

/// Wraps any [`LockStore`] and injects the faults set through its [`Faults`] handle;
/// without faults it forwards every call unchanged.
///
/// It is itself a `LockStore`, so it goes wherever a store goes:
/// `LockManager::new(Arc::new(faulty))`, or an `Arc<dyn LockStore>`. Wrap the store your
/// tests already use — the in-memory store in paused time, or a real Redis or
/// PostgreSQL store — and keep the [`faults`](Self::faults) handle to break it while the
/// code under test runs.
///
/// Its [`backend`](LockStore::backend) is the wrapped store's (`"memory"`, `"redis"`…),
/// so injected errors, logs and metrics read exactly as the real store's would; its
/// [`capabilities`](LockStore::capabilities) too, except that dropped release
/// notifications are reported as absent.
///
/// ```
/// use std::sync::Arc;
/// use distlock_api::{DynLockStore, LockManager};
/// use distlock_memory::MemoryLockStore;
/// use distlock_testing::FaultyStore;
///
/// // A concrete store…
/// let store = FaultyStore::new(MemoryLockStore::new());
/// let faults = store.faults();
/// let locks = LockManager::new(Arc::new(store));
///
/// // …or one already type-erased, as `distlock::connect` returns it.
/// let erased: Arc<DynLockStore> = Arc::new(MemoryLockStore::new());
/// let store: Arc<DynLockStore> = Arc::new(FaultyStore::new(erased));
/// # let _ = (faults, locks, store);
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: Arc<S>,
    faults: Faults,
}

impl<S: LockStore> FaultyStore<S> {
    /// Wraps `inner`, with no fault set.
    pub fn new(inner: S) -> Self {
        let inner = Arc::new(inner);
        let erased: Arc<DynLockStore> = inner.clone();
        Self { inner, faults: Faults::new(erased) }
    }

    /// The handle that sets this store's faults and counts its calls; clones control the
    /// same store.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The wrapped store, e.g. for store-specific calls in a test.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Runs one call of `op` on `key` (`forward` is the wrapped store's call) with the
    /// faults set now.
    async fn call<T, Fut>(&self, op: Op, key: Option<&StoreKey>, forward: Fut) -> Result<T, LockError>
    where
        Fut: Future<Output = Result<T, LockError>>,
    {
        self.run(op, key, self.faults.plan(op), forward).await
    }

    /// Runs one call of `op` according to `plan`: delay, then fail without calling the
    /// wrapped store, or call it (and fail after). Counted when it returns.
    async fn run<T, Fut>(&self, op: Op, key: Option<&StoreKey>, plan: Plan, forward: Fut) -> Result<T, LockError>
    where
        Fut: Future<Output = Result<T, LockError>>,
    {
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        let result = match plan.failure {
            Some(Failure::Before) => Err(Plan::error(self.inner.backend(), op, key, Failure::Before)),
            Some(Failure::After) => {
                // The outcome is discarded: the caller only learns that the reply was lost.
                let _ = forward.await;
                Err(Plan::error(self.inner.backend(), op, key, Failure::After))
            }
            None => forward.await,
        };
        self.faults.returned(op);
        result
    }
}

impl<S: LockStore> FaultyStore<S> {
    /// An [`Op::WaitForRelease`]: `wait` (the inner store's wait), or, when the plan drops
    /// the notification, a plain sleep of `max`.
    async fn wait(
        &self,
        key: &StoreKey,
        max: Duration,
        wait: impl std::future::Future<Output = Result<(), LockError>> + Send,
    ) -> Result<(), LockError> {
        let plan = self.faults.plan(Op::WaitForRelease);
        let wait = async {
            if plan.drop_notification {
                tokio::time::sleep(max).await;
                Ok(())
            } else {
                wait.await
            }
        };
        self.run(Op::WaitForRelease, Some(key), plan, wait).await
    }
}

#[async_trait]
impl<S: LockStore> LockStore for FaultyStore<S> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = self.inner.capabilities();
        if self.faults.notifications_dropped() {
            capabilities.with_release_notifications(false)
        } else {
            capabilities
        }
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.call(Op::Acquire, Some(key), self.inner.try_acquire(key, token, ttl)).await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.call(Op::Release, Some(key), self.inner.release(key, token)).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.call(Op::Extend, Some(key), self.inner.extend(key, token, ttl)).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.call(Op::Inspect, Some(key), self.inner.inspect(key)).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait(key, max, self.inner.wait_for_release(key, max)).await
    }

    /// A queued attempt is an [`Op::Acquire`].
    async fn try_acquire_queued(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<Acquire, LockError> {
        self.call(Op::Acquire, Some(key), self.inner.try_acquire_queued(key, token, ttl, place)).await
    }

    /// A queued waiter's wait is an [`Op::WaitForRelease`].
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait(key, max, self.inner.wait_for_turn(key, token, max)).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.inner.queue_len(key).await
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.call(Op::List, None, self.inner.list(pattern, cursor, limit)).await
    }
}
