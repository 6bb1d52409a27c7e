//! Hand-off measurement shared by the stores' benchmarks: how long from a release until
//! the next waiter holds the lock, with release notifications and with polling only.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, DynLockStore, LockError, LockInfo, LockManager, LockOptions, LockStore, StoreKey, Token, Ttl,
};

/// Hides a store's release notifications: `wait_for_release` just sleeps, so waiters
/// poll every retry interval. The baseline for notified hand-off.
#[derive(Debug)]
pub struct PollingOnly(pub Arc<DynLockStore>);

#[async_trait]
impl LockStore for PollingOnly {
    fn backend(&self) -> &'static str {
        self.0.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities().with_release_notifications(false)
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.0.try_acquire(key, token, ttl).await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        self.0.release(key, token).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.0.extend(key, token, ttl).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.0.inspect(key).await
    }

    async fn wait_for_release(&self, _key: &StoreKey, max: Duration) -> Result<(), LockError> {
        tokio::time::sleep(max).await;
        Ok(())
    }
}

/// What [`hot_key`] measured.
#[derive(Debug, Clone)]
pub struct HandOff {
    /// Median release → next holder latency.
    pub p50: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// Critical sections completed per second.
    pub sections_per_sec: f64,
    /// Times two holders were inside at once (must be 0).
    pub violations: u64,
}

impl std::fmt::Display for HandOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hand-off p50 {:>8.3} ms  p99 {:>8.3} ms  {:>8.0} sections/s  violations {}",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.sections_per_sec,
            self.violations
        )
    }
}

/// `waiters` tasks take turns on one key for `sections` critical sections in all (an equal
/// quota each), holding for no time, each waiting with `retry` as its retry interval.
/// Measures the time from a holder starting its release to the next holder — another
/// task — holding the lock.
///
/// # Panics
///
/// On any store error.
pub async fn hot_key(store: Arc<DynLockStore>, key: &str, waiters: usize, sections: usize, retry: Duration) -> HandOff {
    let locks = LockManager::new(store);
    let inside = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let last_release: Arc<Mutex<Option<(usize, Instant)>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let quota = sections.div_ceil(waiters);
    let started = Instant::now();
    let tasks: Vec<_> = (0..waiters)
        .map(|me| {
            let (locks, key) = (locks.clone(), key.to_owned());
            let (inside, violations, last_release, latencies) =
                (inside.clone(), violations.clone(), last_release.clone(), latencies.clone());
            tokio::spawn(async move {
                for _ in 0..quota {
                    let lock = locks
                        .lock_opts(
                            &key,
                            Duration::from_secs(30),
                            &LockOptions::new().wait(Duration::from_secs(120)).retry_interval(retry),
                        )
                        .await
                        .unwrap();
                    let acquired_at = Instant::now();
                    if inside.swap(true, Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    // Only a hand-off to another task counts: a task re-taking the lock it just
                    // released measures nothing about waking waiters.
                    if let Some((releaser, released_at)) = last_release.lock().unwrap().take() {
                        if releaser != me {
                            latencies.lock().unwrap().push(acquired_at - released_at);
                        }
                    }
                    // Hold for no time, but let the other tasks run and find the lock held.
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    *last_release.lock().unwrap() = Some((me, Instant::now()));
                    assert!(lock.release().await.unwrap());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
    latencies.sort();
    let pick =
        |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    HandOff {
        p50: pick(0.5),
        p99: pick(0.99),
        sections_per_sec: (quota * waiters) as f64 / elapsed.as_secs_f64(),
        violations: violations.load(Ordering::SeqCst),
    }
}
