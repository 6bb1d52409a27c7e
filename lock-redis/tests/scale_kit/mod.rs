//! Private servers for the scale-out stores' tests: N independent masters for Redlock.
//! The store under test is wrapped with the servers it runs on, so that they live as long
//! as the store (each test process starts and stops its own).
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{
    async_trait, Acquire, Capabilities, DynLockStore, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockStore,
    StoreKey, Token, Ttl,
};
use distlock_conformance::kit::redis_cluster::RedisCluster;
use distlock_conformance::kit::redis_sentinel::RedisSentinels;
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_conformance::kit::shared::shared_or_own;
use distlock_redis::{RedisClusterStore, RedisSentinelStore, RedlockStore};

/// `n` private masters (no persistence).
pub fn masters(n: usize, test: &str) -> Option<Vec<RedisServer>> {
    let first = RedisServer::start_or_skip(test)?;
    let mut servers = vec![first];
    servers.extend((1..n).map(|_| RedisServer::start()));
    Some(servers)
}

/// `redlock://127.0.0.1:p1,127.0.0.1:p2,…` with `query` appended.
pub fn redlock_url(servers: &[RedisServer], query: &str) -> String {
    let hosts: Vec<String> = servers.iter().map(|server| format!("127.0.0.1:{}", server.port())).collect();
    format!("redlock://{}{query}", hosts.join(","))
}

/// A store that owns the servers it runs on.
#[derive(Debug)]
pub struct Kept<S> {
    pub store: S,
    pub servers: Vec<RedisServer>,
    pub cluster: Option<RedisCluster>,
    pub sentinels: Option<RedisSentinels>,
}

/// A Redlock store over `n` masters for the conformance suite: the run's shared ones
/// under `scripts/test.sh` (see `distlock_conformance::kit::shared`), fresh ones otherwise.
pub async fn redlock_store(n: usize, query: &str) -> Option<Arc<DynLockStore>> {
    let (servers, url) = tokio::task::block_in_place(|| {
        shared_or_own(&format!("redlock-{n}"), || masters(n, "redlock conformance"), |servers| redlock_url(servers, ""))
    })?;
    let store = RedlockStore::connect(&format!("{url}{query}")).await.expect("connect");
    Some(Arc::new(Kept { store, servers: servers.unwrap_or_default(), cluster: None, sentinels: None }))
}

/// A store on a three-master cluster for the conformance suite (shared or fresh, as
/// for [`redlock_store`]).
pub async fn cluster_store(query: &str) -> Option<Arc<DynLockStore>> {
    let (cluster, url) = tokio::task::block_in_place(|| {
        shared_or_own("redis-cluster", || RedisCluster::start_or_skip("redis cluster conformance"), RedisCluster::url)
    })?;
    let store = RedisClusterStore::connect(&format!("{url}{query}")).await.expect("connect");
    Some(Arc::new(Kept { store, servers: Vec::new(), cluster, sentinels: None }))
}

/// A store on a Sentinel deployment (master, replica, three sentinels) for the
/// conformance suite (shared or fresh, as for [`redlock_store`]).
pub async fn sentinel_store(query: &str) -> Option<Arc<DynLockStore>> {
    let (sentinels, url) = tokio::task::block_in_place(|| {
        shared_or_own(
            "redis-sentinel",
            || RedisSentinels::start_or_skip("redis sentinel conformance"),
            RedisSentinels::url,
        )
    })?;
    let store = RedisSentinelStore::connect(&format!("{url}{query}")).await.expect("connect");
    Some(Arc::new(Kept { store, servers: Vec::new(), cluster: None, sentinels }))
}

#[async_trait]
impl<S: LockStore> LockStore for Kept<S> {
    fn backend(&self) -> &'static str {
        self.store.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.store.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.store.release(key, token).await
    }
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.store.extend(key, token, ttl).await
    }
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.store.inspect(key).await
    }
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.store.wait_for_release(key, max).await
    }
    async fn try_acquire_queued(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<Acquire, LockError> {
        self.store.try_acquire_queued(key, token, ttl, place).await
    }
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.store.wait_for_turn(key, token, max).await
    }
    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.store.queue_len(key).await
    }
    fn groups(&self) -> Option<&dyn distlock_api::GroupLockStore> {
        self.store.groups()
    }
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.store.list(pattern, cursor, limit).await
    }
}

/// Every conformance case a store without lock groups and without a fair queue runs:
/// the whole suite but the `group_*` and fair-queue cases.
#[macro_export]
macro_rules! suite_without_groups_and_queue {
    ($factory:path) => {
        distlock_conformance::__conformance_tests!($factory;
            acquire_conflict_release_reacquire,
            not_reentrant,
            distinct_keys_are_independent,
            keys_are_case_sensitive,
            odd_keys_round_trip,
            foreign_token_cannot_release,
            foreign_token_cannot_extend,
            second_release_returns_false,
            expired_lease_can_be_taken_over,
            extend_keeps_the_lock_past_its_ttl,
            waiter_acquires_after_release,
            waiter_gives_up_at_deadline,
            waiting_is_not_a_busy_loop,
            waiter_wakes_on_release_not_by_polling,
            wait_on_a_free_key_returns_at_once,
            with_lock_releases_on_ok,
            with_lock_releases_on_err,
            with_lock_releases_on_panic,
            with_lock_not_acquired_when_busy,
            contended_counter_is_exact,
            dropped_handle_is_freed_promptly,
            cancelled_acquire_leaves_nothing,
            bad_input_is_rejected_before_any_store_call,
            tokens_are_unique,
            inspect_reports_the_holder,
            fences_strictly_increase,
            many_keys_held_at_once,
            renewal_keeps_a_short_lease_alive,
            stolen_lease_fires_lost,
            lost_fires_at_the_deadline_without_renewal,
            dropping_a_renewing_handle_is_safe,
            with_lock_stops_the_block_when_the_lease_is_lost,
            reentrant_scope_nests_and_counts,
            reentrant_scope_is_not_shared_with_spawned_tasks,
            reentrant_scope_survives_any_drop_order,
            reentrant_scope_and_panics,
            reentrant_scope_shares_renewal_and_loss,
            list_reports_held_locks,
            list_filters_by_pattern,
            list_skips_released_and_expired_leases,
            list_pages_through_many_keys,
        );
    };
}
