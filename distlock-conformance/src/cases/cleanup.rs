use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockManager, LockOptions};
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL, RETRY};
use crate::counting::LostAnswerStore;

/// A handle dropped without `release` is freed in the background, long before its TTL.
pub async fn dropped_handle_is_freed_promptly(store: Arc<DynLockStore>) {
    let keys = Keys::new("drop");
    let locks = manager(&store);
    let key = keys.key("a");
    let ttl = Duration::from_secs(60);
    let held = locks.lock(&key, ttl).await.unwrap();
    let dropped_at = Instant::now();
    drop(held);
    let again = locks
        .lock_opts(&key, ttl, &LockOptions::new().wait(Duration::from_secs(10)).retry_interval(RETRY))
        .await
        .expect("the dropped lock is freed");
    let freed_after = dropped_at.elapsed();
    assert!(freed_after < Duration::from_secs(5), "freed {freed_after:?} after the drop (TTL 60 s)");
    assert!(again.release().await.unwrap());
}

/// An acquisition cancelled after the store took the lease but before the answer came
/// back (a `timeout` around `try_lock`) leaves no lock behind.
pub async fn cancelled_acquire_leaves_nothing(store: Arc<DynLockStore>) {
    let keys = Keys::new("cancel");
    let key = keys.key("a");
    let lost = LockManager::new(LostAnswerStore::new(Arc::clone(&store)));
    let attempt = lost.try_lock(&key, LONG_TTL);
    assert!(tokio::time::timeout(Duration::from_millis(300), attempt).await.is_err(), "the answer was lost");
    lost.flush_releases().await;
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none(), "the cancelled acquisition left a lock");

    // Cancelling at random points of real acquisitions leaves nothing either.
    let locks = manager(&store);
    for i in 0..40u64 {
        let attempt = locks.try_lock(&key, LONG_TTL);
        if let Ok(Ok(Some(lock))) = tokio::time::timeout(Duration::from_micros(i * 50), attempt).await {
            assert!(lock.release().await.unwrap());
        }
    }
    locks.flush_releases().await;
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none(), "a cancelled acquisition left a lock");
}
