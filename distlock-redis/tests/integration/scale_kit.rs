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
    fn queue(&self) -> Option<&dyn distlock_api::QueueStore> {
        self.store.queue()
    }
    fn groups(&self) -> Option<&dyn distlock_api::GroupLockStore> {
        self.store.groups()
    }

    fn values(&self) -> Option<&dyn distlock_api::LeaseValueStore> {
        self.store.values()
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
