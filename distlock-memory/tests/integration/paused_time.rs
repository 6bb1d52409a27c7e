//! How an application tests its own TTL logic against `MemoryLockStore` in paused time:
//! minutes of lock time pass in microseconds of real time, deterministically.
//!
//! The application below runs a nightly job under a lock and renews the lease while the
//! job runs; if a renewal fails it must stop. Both behaviours are tested without a
//! server and without waiting.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockManager};
use distlock_memory::MemoryLockStore;

/// The application's code under test: run `steps` one-minute steps under `job`'s lock,
/// renewing a 5-minute lease after each step; stop early if the lease was lost.
async fn run_job(locks: &LockManager, steps: u32) -> Result<u32, LockError> {
    let ttl = Duration::from_secs(5 * 60);
    let lock = locks.lock("job:nightly", ttl).await?;
    let mut done = 0;
    while done < steps {
        tokio::time::sleep(Duration::from_secs(60)).await; // one step of work
        done += 1;
        if !lock.extend(ttl).await? {
            return Ok(done); // lost the lease: stop before doing unprotected work
        }
    }
    lock.release().await?;
    Ok(done)
}

#[tokio::test(start_paused = true)]
async fn a_long_job_keeps_its_lock_by_renewing() {
    let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
    let started = tokio::time::Instant::now();
    let job = tokio::spawn({
        let locks = locks.clone();
        async move { run_job(&locks, 30).await }
    });
    // Half an hour into the job (far past the 5-minute TTL) the lock is still held.
    tokio::time::sleep(Duration::from_secs(30 * 60 - 30)).await;
    assert!(locks.try_lock("job:nightly", Duration::from_secs(1)).await.unwrap().is_none());
    assert_eq!(job.await.unwrap().unwrap(), 30);
    assert_eq!(started.elapsed(), Duration::from_secs(30 * 60));
    assert!(locks.try_lock("job:nightly", Duration::from_secs(1)).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_job_stops_when_its_lease_is_taken_over() {
    let store = MemoryLockStore::new();
    let locks = LockManager::new(Arc::new(store.clone()));
    let job = tokio::spawn({
        let locks = locks.clone();
        async move { run_job(&locks, 30).await }
    });
    tokio::time::sleep(Duration::from_secs(150)).await; // mid-way through step 3
                                                        // An operator force-releases the lock (e.g. `distlock release`) and someone else takes it.
    let key = distlock_api::LockKey::new("job:nightly").unwrap().to_store_key();
    let holder = distlock_api::LockStore::inspect(&store, &key).await.unwrap().expect("held");
    assert!(distlock_api::LockStore::release(&store, &key, &holder.token).await.unwrap());
    let _intruder = locks.lock("job:nightly", Duration::from_secs(3600)).await.unwrap();
    assert_eq!(job.await.unwrap().unwrap(), 3, "the job noticed at its next renewal and stopped");
}
