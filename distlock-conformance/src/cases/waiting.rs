use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockManager, LockOptions};
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL};
use crate::counting::CountingStore;

/// A waiter gets the lock soon after the holder releases it.
pub async fn waiter_acquires_after_release(store: Arc<DynLockStore>) {
    let keys = Keys::new("waiter");
    let counting = CountingStore::new(store);
    let locks = LockManager::new(counting.clone());
    let key = keys.key("a");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let waiter = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            let lock = locks
                .lock_opts(
                    &key,
                    LONG_TTL,
                    &LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_millis(50)),
                )
                .await?;
            let acquired_at = Instant::now();
            lock.release().await?;
            Ok::<_, LockError>(acquired_at)
        }
    });
    counting.wait_for_acquires(2).await; // the waiter has tried once and is waiting
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = waiter.await.unwrap().expect("the waiter gets the lock");
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_secs(2), "hand-off took {hand_off:?} with a 50 ms retry interval");
}

/// A waiter whose wait runs out gets `NotAcquired` — at the deadline, not much later.
pub async fn waiter_gives_up_at_deadline(store: Arc<DynLockStore>) {
    let keys = Keys::new("deadline");
    let locks = manager(&store);
    let key = keys.key("a");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let wait = Duration::from_millis(400);
    let started = Instant::now();
    let err = locks
        .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(wait).retry_interval(Duration::from_millis(50)))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(&err, LockError::NotAcquired { key: k } if *k == key), "{err}");
    assert!(waited >= wait, "gave up after {waited:?}, before the {wait:?} wait");
    assert!(waited < wait + Duration::from_secs(2), "gave up after {waited:?}, long after the {wait:?} wait");
    assert!(held.release().await.unwrap());
}

/// Waiting retries about once per retry interval, never in a busy loop.
pub async fn waiting_is_not_a_busy_loop(store: Arc<DynLockStore>) {
    let keys = Keys::new("busy");
    let counting = CountingStore::new(store);
    let locks = LockManager::new(counting.clone());
    let key = keys.key("a");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let before = counting.acquires();
    let (wait, retry) = (Duration::from_millis(600), Duration::from_millis(50));
    assert!(locks
        .try_lock_opts(&key, LONG_TTL, &LockOptions::new().wait(wait).retry_interval(retry))
        .await
        .unwrap()
        .is_none());
    let attempts = counting.acquires() - before;
    // 600 ms / 50 ms = 12 pauses, so 13 attempts at most, plus slack for early wake-ups.
    assert!((3..=20).contains(&attempts), "{attempts} attempts in a 600 ms wait with a 50 ms retry interval");
    assert!(held.release().await.unwrap());
}

/// A waiter is woken by the release itself: with a 2 s retry interval it still holds the
/// lock well under 500 ms after the release (polling alone would average 1 s). A store
/// without release notifications must still hand off within the retry interval.
pub async fn waiter_wakes_on_release_not_by_polling(store: Arc<DynLockStore>) {
    let notified = store.capabilities().release_notifications;
    let bound = if notified { Duration::from_millis(500) } else { Duration::from_secs(3) };
    let keys = Keys::new("wake");
    let counting = CountingStore::new(store);
    let locks = LockManager::new(counting.clone());
    let key = keys.key("a");
    let retry = Duration::from_secs(2);
    for round in 0..3 {
        let held = locks.lock(&key, LONG_TTL).await.unwrap();
        let (acquires, waits) = (counting.acquires(), counting.waits());
        let waiter = tokio::spawn({
            let (locks, key) = (locks.clone(), key.clone());
            async move {
                let lock = locks
                    .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(20)).retry_interval(retry))
                    .await?;
                let acquired_at = Instant::now();
                lock.release().await?;
                Ok::<_, LockError>(acquired_at)
            }
        });
        // The waiter has tried once, found the lock held and is now waiting.
        counting.wait_for_acquires(acquires + 1).await;
        counting.wait_until(|c| c.waits() > waits).await;
        let released_at = Instant::now();
        assert!(held.release().await.unwrap());
        let acquired_at = waiter.await.unwrap().expect("the waiter gets the lock");
        let hand_off = acquired_at - released_at;
        assert!(hand_off < bound, "round {round}: hand-off took {hand_off:?} (retry 2 s, notified: {notified})");
    }
}

/// Waiting for the release of a key that is free returns at once on a store with release
/// notifications (a waiter must never sleep through a release that already happened), and
/// after about `max` without them.
pub async fn wait_on_a_free_key_returns_at_once(store: Arc<DynLockStore>) {
    let keys = Keys::new("free-wait");
    let locks = manager(&store);
    let key = keys.store_key("a");
    // A store without notifications waits it out: a short `max` keeps the case short.
    let max = if store.capabilities().release_notifications { Duration::from_secs(5) } else { Duration::from_secs(1) };
    // Never held, then released: both are free.
    let held = locks.lock(&keys.key("b"), LONG_TTL).await.unwrap();
    let released = held.store_key().clone();
    assert!(held.release().await.unwrap());
    for free in [&key, &released] {
        let started = Instant::now();
        store.wait_for_release(free, max).await.unwrap();
        let waited = started.elapsed();
        if store.capabilities().release_notifications {
            assert!(waited < Duration::from_secs(2), "waited {waited:?} for the release of a free key");
        } else {
            assert!(waited >= max - Duration::from_millis(50), "a store without notifications returned early");
        }
    }
}
