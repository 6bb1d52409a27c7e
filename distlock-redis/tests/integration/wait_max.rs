//! `wait_for_release(key, Duration::MAX)`: no deadline overflow; it returns when the key
//! is released, and at once for a free key.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{cleanup, shared_store, store_key};
use distlock_api::{LockStore, Token, Ttl};
use distlock_redis::RedisLockStore;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_of_duration_max_ends_at_the_release() {
    let Some(store) = shared_store("wait_max", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    let store = Arc::new(store);
    let (k, holder) = (store_key("max"), Token::generate());
    assert!(store.try_acquire(&k, &holder, Ttl::new(Duration::from_secs(60)).unwrap()).await.unwrap().is_acquired());
    let waiter = tokio::spawn({
        let (store, k) = (Arc::clone(&store), k.clone());
        async move { store.wait_for_release(&k, Duration::MAX).await }
    });
    // Not a synchronisation: a waiter not yet parked sees the key free and returns too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "returned while the key was held");
    assert!(store.release(&k, &holder).await.unwrap());
    let released = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken by the release").unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_secs(5), "{:?}", released.elapsed());
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_of_duration_max_on_a_free_key_returns_at_once() {
    let Some(store) = shared_store("wait_max_free", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    let started = Instant::now();
    let free = store_key("free");
    let wait = store.wait_for_release(&free, Duration::MAX);
    tokio::time::timeout(Duration::from_secs(10), wait).await.expect("a free key ends the wait").unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
