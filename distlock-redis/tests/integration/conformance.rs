//! The shared conformance suite against the real Redis at `DISTLOCK_REDIS_URL`, in the
//! default mode (the plain single-node wire), with fair waiting and notifications, in
//! fencing mode and with a non-default key prefix. Every case uses its
//! own random keys, so this runs in parallel with other tests on the same server.

use std::sync::Arc;

use distlock_api::DynLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::redis_url("redis conformance")?;
    Some(Arc::new(distlock_redis::RedisLockStore::connect(&url).await.expect("connect")))
}

distlock_conformance::conformance_suite!(store);

mod fencing {
    use super::*;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::redis_url("redis conformance, fencing")?;
        // The store's one fencing counter is never deleted: a prefix of its own keeps it apart.
        let store = distlock_redis::RedisLockStore::builder()
            .key_prefix("distlock-conformance-fencing")
            .fencing(true)
            .connect(&url)
            .await
            .expect("connect");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}

mod fair {
    use super::*;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::redis_url("redis conformance, fair waiting")?;
        let separator = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{separator}prefix=distlock-conformance-fair&fair=true&notifications=true");
        Some(Arc::new(distlock_redis::RedisLockStore::connect(&url).await.expect("connect")))
    }

    distlock_conformance::conformance_suite!(store);
}

mod custom_prefix {
    use super::*;

    async fn store() -> Option<Arc<DynLockStore>> {
        let url = distlock_conformance::kit::redis_url("redis conformance, custom prefix")?;
        let store = distlock_redis::RedisLockStore::builder()
            .key_prefix("distlock-conformance:neton")
            .connect(&url)
            .await
            .expect("connect");
        Some(Arc::new(store))
    }

    distlock_conformance::conformance_suite!(store);
}
