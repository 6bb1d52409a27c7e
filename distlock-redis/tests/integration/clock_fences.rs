//! The whole conformance suite on the single-node store with restart-safe fences and
//! fair waiting (`?fencing=true&fences=clock&fair=true&notifications=true`): the plain,
//! queued and group acquire scripts all draw their numbers from the server's clock and
//! the counter.

use std::sync::Arc;

use distlock_api::DynLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::redis_url("redis conformance, clock fences")?;
    let store = distlock_redis::RedisLockStore::builder()
        .key_prefix("distlock-conformance-clock-fences")
        .fencing(true)
        .clock_fences(true)
        .fair_queue(true)
        .release_notifications(true)
        .connect(&url)
        .await
        .expect("connect");
    Some(Arc::new(store))
}

distlock_conformance::conformance_suite!(store);
