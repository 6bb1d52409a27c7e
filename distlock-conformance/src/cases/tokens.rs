use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockOptions};

use super::{manager, Keys, LONG_TTL, RETRY};

/// `inspect` reports the holder's token and fence and a time left no longer than the TTL;
/// a free key reports `None`.
pub async fn inspect_reports_the_holder(store: Arc<DynLockStore>) {
    let keys = Keys::new("inspect");
    let locks = manager(&store);
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none());
    let ttl = Duration::from_secs(20);
    let held = locks.lock(&keys.key("a"), ttl).await.unwrap();
    let info = store.inspect(held.store_key()).await.unwrap().expect("a held key is reported");
    assert_eq!(&info.token, held.token());
    assert_eq!(info.fence, held.fence());
    assert!(info.ttl_left <= ttl, "{:?} left of a {ttl:?} lease", info.ttl_left);
    assert!(info.ttl_left > ttl - Duration::from_secs(10), "{:?} left of a {ttl:?} lease", info.ttl_left);
    assert!(held.release().await.unwrap());
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none(), "a released key is reported");
}

/// With fencing, every acquisition of a key gets a strictly greater number — across
/// release and expiry take-over. Without it, `fence()` is `None`.
pub async fn fences_strictly_increase(store: Arc<DynLockStore>) {
    let keys = Keys::new("fence");
    let locks = manager(&store);
    let key = keys.key("a");
    if !store.capabilities().fencing {
        let lock = locks.lock(&key, LONG_TTL).await.unwrap();
        assert_eq!(lock.fence(), None, "a store without fencing reported a fence");
        assert!(lock.release().await.unwrap());
        return;
    }
    let mut last = 0;
    for _ in 0..5 {
        let lock = locks.lock(&key, LONG_TTL).await.unwrap();
        let fence = lock.fence().expect("a fencing store returns a fence");
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        assert!(lock.release().await.unwrap());
    }
    let expiring = locks.lock(&key, Duration::from_millis(200)).await.unwrap();
    let expired_fence = expiring.fence().expect("a fencing store returns a fence");
    assert!(expired_fence > last, "fence {expired_fence} after {last}");
    let _ = expiring.leak();
    let taken_over = locks
        .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(10)).retry_interval(RETRY))
        .await
        .unwrap();
    let fence = taken_over.fence().expect("a fencing store returns a fence");
    assert!(fence > expired_fence, "fence {fence} after taking over the expired lease's {expired_fence}");
    // Another key's acquisitions never make this key's numbers go backwards.
    let other = locks.lock(&keys.key("b"), LONG_TTL).await.unwrap();
    assert!(taken_over.release().await.unwrap());
    let next = locks.lock(&key, LONG_TTL).await.unwrap();
    assert!(next.fence().expect("fence") > fence);
    assert!(next.release().await.unwrap());
    assert!(other.release().await.unwrap());
}
