use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockOptions};
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL, RETRY};

/// Once a lease expires another owner can take the key; the old handle's release and
/// extend then return `false` and leave the new holder alone.
pub async fn expired_lease_can_be_taken_over(store: Arc<DynLockStore>) {
    let keys = Keys::new("expiry");
    let locks = manager(&store);
    let key = keys.key("a");
    let ttl = Duration::from_millis(300);
    let started = Instant::now();
    let old = locks.lock(&key, ttl).await.unwrap();
    let new = locks
        .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(10)).retry_interval(RETRY))
        .await
        .expect("the expired lease is taken over");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200), "taken over after {waited:?}, before the 300 ms lease ran out");
    assert!(!old.extend(LONG_TTL).await.unwrap(), "an expired handle extended the new holder's lease");
    assert!(!old.release().await.unwrap(), "an expired handle released the new holder's lease");
    let info = store.inspect(new.store_key()).await.unwrap().expect("the new holder is intact");
    assert_eq!(&info.token, new.token());
    assert!(new.release().await.unwrap());
}

/// A holder that extends keeps the lock past its original TTL.
pub async fn extend_keeps_the_lock_past_its_ttl(store: Arc<DynLockStore>) {
    let keys = Keys::new("extend");
    let locks = manager(&store);
    let key = keys.key("a");
    let short = Duration::from_millis(400);
    let held = locks.lock(&key, short).await.unwrap();
    assert!(held.extend(Duration::from_secs(20)).await.unwrap(), "the holder's extend failed");
    // Waiting out the original lease is the point of this case; there is no signal for it.
    // A store with coarse TTLs (etcd: whole seconds) granted a longer one: wait that out.
    let granted = store.capabilities().granted_ttl(short);
    tokio::time::sleep(granted * 2 + Duration::from_millis(100)).await;
    assert!(locks.try_lock(&key, LONG_TTL).await.unwrap().is_none(), "lost after extend");
    let info = store.inspect(held.store_key()).await.unwrap().expect("still held");
    assert!(info.ttl_left > Duration::from_secs(10) && info.ttl_left <= Duration::from_secs(20), "{:?}", info.ttl_left);
    assert!(held.release().await.unwrap());
}
