//! Behaviour specific to the in-memory store: tokio's clock, wake-on-release, bounded memory.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockManager, LockOptions, LockStore};
use distlock_memory::MemoryLockStore;
use tokio::time::Instant;

const RETRY: Duration = Duration::from_millis(50);

fn manager() -> (MemoryLockStore, LockManager) {
    let store = MemoryLockStore::new();
    (store.clone(), LockManager::new(Arc::new(store)))
}

#[tokio::test(start_paused = true)]
async fn leases_expire_on_tokios_clock() {
    let (_, locks) = manager();
    let ttl = Duration::from_secs(60);
    let _token = locks.lock("job", ttl).await.unwrap().leak();
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(locks.try_lock("job", ttl).await.unwrap().is_none(), "expired early");
    tokio::time::advance(Duration::from_millis(1_001)).await;
    assert!(locks.try_lock("job", ttl).await.unwrap().is_some(), "did not expire");
}

#[tokio::test(start_paused = true)]
async fn sub_millisecond_ttl_rounds_up_to_one_millisecond() {
    let (store, locks) = manager();
    let lock = locks.lock("tiny", Duration::from_nanos(1)).await.unwrap();
    let left = store.inspect(lock.store_key()).await.unwrap().expect("held").ttl_left;
    assert_eq!(left, Duration::from_millis(1));
    let _token = lock.leak();
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(locks.try_lock("tiny", Duration::from_secs(1)).await.unwrap().is_some());
}

/// With a 10 s retry interval, a waiter still gets the lock at the moment of release: it
/// is woken by the release, not by its next poll. (Paused time jumps straight to the
/// next timer when every task is idle, so a polling waiter would show up 10 s later.)
#[tokio::test(start_paused = true)]
async fn waiters_wake_on_release_not_by_polling() {
    let (_, locks) = manager();
    let held = locks.lock("hot", Duration::from_secs(60)).await.unwrap();
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let lock = locks
                .lock_opts(
                    "hot",
                    Duration::from_secs(60),
                    &LockOptions::new().wait(Duration::from_secs(120)).retry_interval(Duration::from_secs(10)),
                )
                .await;
            (Instant::now(), lock)
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await; // the waiter is parked mid-interval
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let (acquired_at, lock) = waiter.await.unwrap();
    assert!(lock.is_ok());
    assert!(
        acquired_at - released_at < Duration::from_millis(1),
        "woken {:?} after release",
        acquired_at - released_at
    );
}

/// A waiter also wakes when the holder's lease expires, not a retry interval later.
#[tokio::test(start_paused = true)]
async fn waiters_wake_on_expiry() {
    let (_, locks) = manager();
    let _token = locks.lock("exp", Duration::from_secs(5)).await.unwrap().leak();
    let started = Instant::now();
    let lock = locks
        .lock_opts(
            "exp",
            Duration::from_secs(5),
            &LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(30)),
        )
        .await;
    assert!(lock.is_ok());
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

/// The last attempt happens at the deadline, even when it falls mid-interval.
#[tokio::test(start_paused = true)]
async fn last_attempt_is_at_the_deadline() {
    let (_, locks) = manager();
    let _token = locks.lock("late", Duration::from_millis(2_500)).await.unwrap().leak();
    let started = Instant::now();
    // Retry every 2 s, wait 3 s: attempts at 0, 2 s and 3 s; the lease ends at 2.5 s.
    let lock = locks
        .lock_opts(
            "late",
            Duration::from_secs(5),
            &LockOptions::new().wait(Duration::from_secs(3)).retry_interval(Duration::from_secs(2)),
        )
        .await;
    assert!(lock.is_ok(), "the attempt at the deadline should win");
    assert!(started.elapsed() <= Duration::from_secs(3));
}

/// Key churn with leases that are never released: expired entries are reclaimed, so the
/// store holds about as many entries as live leases, not every key ever used.
#[tokio::test(start_paused = true)]
async fn memory_stays_bounded_under_key_churn() {
    let (store, locks) = manager();
    let mut peak = 0;
    for round in 0..100 {
        for i in 0..1_000 {
            let key = format!("churn:{round}:{i}");
            let _token = locks.lock(&key, Duration::from_millis(10)).await.unwrap().leak();
        }
        tokio::time::advance(Duration::from_millis(20)).await;
        peak = peak.max(store.stored_leases());
    }
    // 100,000 keys were used; at most ~2 rounds' worth (plus per-shard slack) remain.
    assert!(peak <= 4_000, "{peak} leases stored at peak");
}

/// A handle dropped after its runtime is gone does not panic; its lease then expires.
#[test]
fn drop_without_a_runtime_does_not_panic() {
    let store = MemoryLockStore::new();
    let locks = LockManager::new(Arc::new(store.clone()));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let lock = runtime.block_on(locks.lock("orphan", Duration::from_millis(50))).unwrap();
    drop(runtime);
    drop(lock); // logs a warning; no runtime to release it
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    runtime.block_on(async {
        let again = locks
            .lock_opts(
                "orphan",
                Duration::from_secs(1),
                &LockOptions::new().wait(Duration::from_secs(5)).retry_interval(RETRY),
            )
            .await;
        assert!(again.is_ok(), "the lease should expire after its TTL");
    });
}

/// Futures and handles can cross threads.
#[test]
fn futures_and_handles_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_sync<T: Sync>(_: &T) {}
    let (_, locks) = manager();
    assert_send(&locks.try_lock("k", Duration::from_secs(1)));
    assert_send(&locks.with_lock("k", Duration::from_secs(1), || async { Ok::<_, distlock_api::LockError>(()) }));
    assert_send(&locks);
    assert_sync(&locks);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let lock = runtime.block_on(locks.lock("k", Duration::from_secs(1))).unwrap();
    assert_send(&lock);
    assert_sync(&lock);
    assert_send(&lock.release());
}

/// A waiter whose retry interval is long wakes when the holder's lease runs out, not a
/// whole retry interval later.
#[tokio::test(start_paused = true)]
async fn a_waiter_retries_when_the_holders_lease_ends() {
    let (_, locks) = manager();
    let _token = locks.lock("expiring", Duration::from_millis(300)).await.unwrap().leak();
    let started = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(600)).retry_interval(Duration::from_secs(120));
    let lock = locks.lock_opts("expiring", Duration::from_secs(5), &options).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "acquired after {waited:?}, before the lease ended");
    assert!(waited < Duration::from_secs(1), "waited {waited:?}: slept the 120 s retry interval");
    assert!(lock.release().await.unwrap());
}

/// Locks taken on different worker threads keep their manager's engine alive after every
/// clone of the manager is gone: they extend and release, and a dropped one is still
/// released in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_outlive_their_manager_on_every_thread() {
    let (store, locks) = manager();
    let ttl = Duration::from_secs(60);
    let mut held = Vec::new();
    for name in ["outlive:a", "outlive:b", "outlive:c", "outlive:d"] {
        let locks = locks.clone();
        held.push(tokio::spawn(async move { locks.try_lock(name, ttl).await.unwrap().expect("free") }).await.unwrap());
    }
    let dropped = locks.try_lock("outlive:dropped", ttl).await.unwrap().expect("free");
    drop(locks);
    for lock in held {
        let key = lock.key().clone();
        assert!(lock.extend(ttl).await.unwrap(), "{key} not extended");
        assert!(lock.release().await.unwrap(), "{key} not released");
    }
    drop(dropped);
    // The background release frees it: a new manager's wait for it ends well before the TTL.
    let again = LockManager::new(Arc::new(store));
    let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
    assert!(again.try_lock_opts("outlive:dropped", ttl, &options).await.unwrap().is_some());
}
