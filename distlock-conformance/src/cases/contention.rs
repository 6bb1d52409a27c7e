use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockOptions};

use super::{manager, Keys, LONG_TTL};

const TASKS: u64 = 16;
const SECTIONS: u64 = 50;

/// 16 tasks × 50 critical sections on one key, each a non-atomic read → yield → write of
/// a shared counter: the count is exact and no two holders ever overlap.
pub async fn contended_counter_is_exact(store: Arc<DynLockStore>) {
    let keys = Keys::new("contention");
    let locks = manager(&store);
    let key = keys.key("counter");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locks, key, counter, inside) = (locks.clone(), key.clone(), counter.clone(), inside.clone());
            tokio::spawn(async move {
                for _ in 0..SECTIONS {
                    let lock = locks
                        .lock_opts(
                            &key,
                            LONG_TTL,
                            &LockOptions::new().wait(Duration::from_secs(120)).retry_interval(Duration::from_millis(5)),
                        )
                        .await?;
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders inside the critical section");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    assert!(lock.release().await?, "the holder's release failed");
                }
                Ok::<_, distlock_api::LockError>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap().unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), TASKS * SECTIONS, "lost updates: mutual exclusion broke");
}
