//! `wait_for_release(key, Duration::MAX)`: no deadline overflow; it returns when the key
//! is released, and at once for a free key.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockKey, LockStore, StoreKey, Token, Ttl};
use distlock_memory::MemoryLockStore;
use tokio::time::Instant;

fn key(name: &str) -> StoreKey {
    LockKey::new(name).unwrap().to_store_key()
}

#[tokio::test(start_paused = true)]
async fn a_wait_of_duration_max_ends_at_the_release() {
    let store = Arc::new(MemoryLockStore::new());
    let (k, holder) = (key("max"), Token::generate());
    let ttl = Ttl::new(Duration::from_secs(3_600)).unwrap();
    assert!(store.try_acquire(&k, &holder, ttl).await.unwrap().is_acquired());
    let waiter = tokio::spawn({
        let (store, k) = (Arc::clone(&store), k.clone());
        async move { store.wait_for_release(&k, Duration::MAX).await }
    });
    // Paused time only moves on once the waiter is parked.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiter.is_finished(), "returned while the key was held");
    assert!(store.release(&k, &holder).await.unwrap());
    let released = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken by the release").unwrap().unwrap();
    assert_eq!(released.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_wait_of_duration_max_on_a_free_key_returns_at_once() {
    let store = MemoryLockStore::new();
    let started = Instant::now();
    store.wait_for_release(&key("free"), Duration::MAX).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
}
