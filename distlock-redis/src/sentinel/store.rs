//! `RedisSentinelStore`: every operation the single-node store's on the current master,
//! followed by a new question to the sentinels when it fails.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, GroupAcquire, GroupLockStore, GroupRequest, KeyPattern, LeaseValue, LeaseValueStore,
    ListCursor, ListPage, LockError, LockInfo, LockMode, LockStore, OwnerId, QueueStore, QueuedAttempt, StoreKey,
    Token, Ttl, ValuedHolder, WaitingPlace,
};
use tokio::time::Instant;

use super::master::{wait_for_replicas, MasterSource, BACKEND};
use crate::single::RedisLockStore;
use crate::single::RedisLockStoreBuilder;

/// A [`LockStore`] on a Redis master found through **Sentinel**: the single-node store
/// (same layout, same scripts, lock groups, fair queue) on the address the sentinels
/// report for the master's name, re-resolved whenever an operation fails (connection
/// lost, `READONLY` from a demoted master, a timeout): after a failover the store moves
/// to the promoted replica by itself.
///
/// ```text
/// redis+sentinel://[[user]:password@]sentinel1:26379,sentinel2:26379,…/<master name>[/<db>][?prefix=…&fencing=…&fences=…&notifications=…&wait_replicas=N&wait_timeout_ms=T]
/// ```
///
/// The credentials and database are the master's; the sentinels are asked without
/// authentication. The layout parameters are a single node's
/// ([`RedisUrl`](crate::RedisUrl)); fencing numbers default to clock fences here
/// (`?fences=clock`), so they keep increasing across a failover even when the promoted
/// replica had not received the last counter values.
///
/// # What a failover costs
///
/// Replication is asynchronous: a lease granted by the old master and not yet copied to
/// the replica is **lost** when the replica is promoted, and another client can then be
/// granted the same lock while the first still believes it holds it. `wait_replicas=N`
/// narrows that window: after every acquisition the store sends `WAIT N wait_timeout_ms`
/// (default 100 ms) and, when fewer than N replicas acknowledged the write in time,
/// releases the lease and fails the acquisition with [`LockError::Store`]. It cannot
/// close the window (Redis can still lose an acknowledged write in some failovers), and
/// it costs a round trip to the replicas. **Fencing** numbers checked by the protected
/// resource are the protection: with clock fences the promoted master's numbers stay
/// above the old master's, so a write of the holder whose lease was lost is refused
/// once the new holder has written.
#[derive(Clone)]
pub struct RedisSentinelStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the master's address comes from: the URL's sentinels, or the application's
    /// `SentinelClient`.
    source: MasterSource,
    /// The settings of the store on each master (clock fences unless told otherwise).
    builder: RedisLockStoreBuilder,
    current: RwLock<(String, Arc<RedisLockStore>)>,
    refreshing: tokio::sync::Mutex<Instant>,
}

impl fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSentinelStore")
            .field("source", &self.inner.source)
            .field("master", &self.master_address())
            .finish()
    }
}

/// At most one re-resolution this often.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

impl RedisSentinelStore {
    /// The name reported by [`LockStore::backend`].
    pub const BACKEND: &'static str = BACKEND;

    /// The store on the master at `address`, following the master `source` names.
    pub(super) fn new(
        source: MasterSource,
        builder: RedisLockStoreBuilder,
        address: String,
        store: RedisLockStore,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                builder,
                current: RwLock::new((address, Arc::new(store))),
                refreshing: tokio::sync::Mutex::new(Instant::now()),
            }),
        }
    }

    /// The master's address (`host:port`) the store uses now.
    pub fn master_address(&self) -> String {
        self.inner.current.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// The single-node store on the current master.
    pub fn current(&self) -> Arc<RedisLockStore> {
        Arc::clone(&self.inner.current.read().unwrap_or_else(|e| e.into_inner()).1)
    }

    /// Asks the sentinels for the master again and moves to it if it changed (at most
    /// once per 100 ms; errors are ignored: the next failure asks again).
    async fn refresh(&self) {
        let mut last = self.inner.refreshing.lock().await;
        if last.elapsed() < REFRESH_EVERY {
            return;
        }
        *last = Instant::now();
        let current = self.master_address();
        match self.inner.source.connect_if_moved(&self.inner.builder, &current).await {
            None => {}
            Some(Ok((address, store))) => {
                tracing::info!(master = %address, "Sentinel: following the master to its new address");
                *self.inner.current.write().unwrap_or_else(|e| e.into_inner()) = (address, Arc::new(store));
            }
            Some(Err(err)) => tracing::debug!(error = %err, "Sentinel: the new master is not reachable yet"),
        }
    }

    /// `result`, after asking the sentinels again when it is a store failure.
    async fn follow<T>(&self, result: Result<T, LockError>) -> Result<T, LockError> {
        if matches!(result, Err(LockError::Store { .. })) {
            self.refresh().await;
        }
        result
    }
}

#[async_trait]
impl LockStore for RedisSentinelStore {
    fn backend(&self) -> &'static str {
        Self::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.current().capabilities()
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.capabilities().fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    /// Values attached to leases: the single-node store's, on the current master.
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    /// The single-node acquire on the current master, then (with `wait_replicas`) `WAIT`.
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let store = self.current();
        let result = match store.try_acquire(key, token, ttl).await {
            Ok(acquired) => wait_for_replicas(&store, self.inner.source.wait_replicas(), key, token, acquired).await,
            Err(err) => Err(err),
        };
        self.follow(result).await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let result = self.current().release(key, token).await;
        self.follow(result).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let result = self.current().extend(key, token, ttl).await;
        self.follow(result).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let result = self.current().inspect(key).await;
        self.follow(result).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_release(key, max).await;
        self.follow(result).await
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let result = self.current().list(pattern, cursor, limit).await;
        self.follow(result).await
    }
}

#[async_trait]
impl QueueStore for RedisSentinelStore {
    /// As the current master's store.
    fn queues_in_first_attempt(&self) -> bool {
        QueueStore::queues_in_first_attempt(&*self.current())
    }

    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let (key, token) = (attempt.key, attempt.token);
        let store = self.current();
        let result = match store.try_acquire_queued(attempt).await {
            Ok(acquired) => wait_for_replicas(&store, self.inner.source.wait_replicas(), key, token, acquired).await,
            Err(err) => Err(err),
        };
        self.follow(result).await
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_turn(key, token, max).await;
        self.follow(result).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let result = self.current().queue_len(key).await;
        self.follow(result).await
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let result = self.current().queue_places(key).await;
        self.follow(result).await
    }
}

/// Values attached to leases: the single-node store's, on the current master. A value is
/// replicated like the lease, asynchronously: a failover can lose a value just set, and
/// readers then see the holder's previous value or none.
#[async_trait]
impl LeaseValueStore for RedisSentinelStore {
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let result = self.current().set_value(key, token, value).await;
        self.follow(result).await
    }

    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let result = self.current().inspect_value(key).await;
        self.follow(result).await
    }
}

/// Lock groups: the single-node store's, on the current master.
#[async_trait]
impl GroupLockStore for RedisSentinelStore {
    fn max_group(&self) -> usize {
        self.current().max_group()
    }

    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let result = self.current().try_acquire_group(request).await;
        self.follow(result).await
    }

    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let result = self.current().extend_group(keys, token, ttl).await;
        self.follow(result).await
    }

    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let result = self.current().release_group(keys, token).await;
        self.follow(result).await
    }

    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let result = self.current().withdraw_intents(keys, token).await;
        self.follow(result).await
    }

    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let result = self.current().release_owner(owner).await;
        self.follow(result).await
    }

    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let result = self.current().set_permits(key, mode, permits).await;
        self.follow(result).await
    }

    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let result = self.current().permits(key, mode).await;
        self.follow(result).await
    }

    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let result = self.current().holders(key).await;
        self.follow(result).await
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let result = self.current().waiting(key).await;
        self.follow(result).await
    }

    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let result = self.current().places(key).await;
        self.follow(result).await
    }

    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let result = self.current().list_groups(pattern, cursor, limit).await;
        self.follow(result).await
    }

    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_change(request, max).await;
        self.follow(result).await
    }
}
