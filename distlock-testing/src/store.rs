//! `FaultyStore`: a `LockStore` that forwards to another one, with faults injected.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, DynLockStore, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockStore, QueueStore, StoreKey, Token, Ttl,
};

use crate::faults::Faults;
use crate::faulty::Faulty;
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
/// notifications are reported as absent. Every optional ability of the wrapped store is
/// forwarded: its [fair queue](LockStore::queue), its listing, and its [lock groups](LockStore::groups)
/// (read/write locks, semaphores), whose operations take faults as the others do
/// ([`Op::AcquireGroup`], [`Op::ReleaseGroup`]…). A store without groups stays without:
/// `groups()` is `None`, and the manager's group calls fail with
/// [`LockError::Unsupported`] as they would on the wrapped store.
///
/// ```
/// use std::sync::Arc;
/// use distlock::{DynLockStore, LockManager};
/// use distlock::memory::MemoryLockStore;
/// use distlock::testing::FaultyStore;
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
pub struct FaultyStore<S> {
    faulty: Faulty<S>,
}

impl<S: LockStore> FaultyStore<S> {
    /// Wraps `inner`, with no fault set.
    pub fn new(inner: S) -> Self {
        let inner = Arc::new(inner);
        let erased: Arc<DynLockStore> = inner.clone();
        Self { faulty: Faulty { inner, faults: Faults::new(erased) } }
    }

    /// The handle that sets this store's faults and counts its calls; clones control the
    /// same store.
    pub fn faults(&self) -> Faults {
        self.faulty.faults.clone()
    }

    /// The wrapped store, e.g. for store-specific calls in a test.
    pub fn inner(&self) -> &S {
        &self.faulty.inner
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore").field("inner", &self.faulty.inner).field("faults", &self.faulty.faults).finish()
    }
}

// Every method of `LockStore` and of the capability traits it hands out (`queue()`,
// `groups()`, `values()`) is forwarded with faults; `tests/integration/forwarding.rs` fails when a trait has a
// method the wrappers do not write out.
#[async_trait]
impl<S: LockStore> LockStore for FaultyStore<S> {
    fn backend(&self) -> &'static str {
        self.faulty.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = self.faulty.inner.capabilities();
        if self.faulty.faults.notifications_dropped() {
            capabilities.with_release_notifications(false)
        } else {
            capabilities
        }
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.faulty.call(Op::Acquire, Some(key), self.faulty.inner.try_acquire(key, token, ttl)).await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.faulty.call(Op::Release, Some(key), self.faulty.inner.release(key, token)).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.faulty.call(Op::Extend, Some(key), self.faulty.inner.extend(key, token, ttl)).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.faulty.call(Op::Inspect, Some(key), self.faulty.inner.inspect(key)).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        let wait = self.faulty.inner.wait_for_release(key, max);
        self.faulty.wait(Op::WaitForRelease, Some(key), max, wait).await
    }

    /// The wrapped store's fair queue, with faults (`None` when it has none).
    fn queue(&self) -> Option<&dyn QueueStore> {
        self.faulty.inner.queue()?;
        Some(&self.faulty)
    }

    /// The wrapped store's lease values, with faults (`None` when it has none).
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        self.faulty.inner.values()?;
        Some(&self.faulty)
    }

    /// The wrapped store's groups, with faults (`None` when it has none).
    fn groups(&self) -> Option<&dyn GroupLockStore> {
        self.faulty.inner.groups()?;
        Some(&self.faulty)
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.faulty.call(Op::List, None, self.faulty.inner.list(pattern, cursor, limit)).await
    }
}
