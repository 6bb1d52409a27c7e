//! One entry point for every Redis topology, chosen by the URL's scheme.

use std::sync::Arc;

use distlock_api::{DynLockStore, LockError};

use crate::cluster::RedisClusterStore;
use crate::redlock::RedlockStore;
use crate::sentinel::RedisSentinelStore;
use crate::single::RedisLockStore;

/// The URL schemes of the Redis topologies, besides a single node's
/// (`redis://`, `rediss://`, `redis+unix://`, `unix://` and the `valkey` forms).
pub const TOPOLOGY_SCHEMES: [&str; 3] = ["redlock", "redis+cluster", "redis+sentinel"];

/// Connects to the Redis store a URL names, by its scheme:
///
/// | scheme | store |
/// |---|---|
/// | `redis://`, `rediss://`, `redis+unix://`, `unix://`, `valkey…://` | one server: [`RedisLockStore::connect`] |
/// | `redlock://host1,host2,host3` | N independent masters: [`RedlockStore::connect`] |
/// | `redis+cluster://host1,host2,host3` | Redis Cluster (any reachable nodes): [`RedisClusterStore::connect`] |
/// | `redis+sentinel://sentinel1,sentinel2/<master name>` | the master Sentinel names, followed across failovers: [`RedisSentinelStore::connect`] |
///
/// Every scheme takes the same layout parameters (`?prefix=`, `?fencing=`,
/// `?notifications=`, `?fences=`).
///
/// # Errors
///
/// As the store's own `connect`: [`LockError::Config`] before any I/O for a bad URL,
/// [`LockError::Store`] when connecting fails.
pub async fn connect_any(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redlock") => Ok(Arc::new(RedlockStore::connect(url).await?)),
        Some("redis+cluster") => Ok(Arc::new(RedisClusterStore::connect(url).await?)),
        Some("redis+sentinel") => Ok(Arc::new(RedisSentinelStore::connect(url).await?)),
        _ => Ok(Arc::new(RedisLockStore::connect(url).await?)),
    }
}
