//! The `metrics` feature: counters and histograms recorded through the facade, checked
//! with `metrics-util`'s debugging recorder installed for this thread only — on the memory
//! store, and through `distlock::connect` on every store (Redis, PostgreSQL and etcd
//! against the servers named by `DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL` and
//! `DISTLOCK_ETCD_URL`, set by `scripts/test.sh`).
#![cfg(all(feature = "metrics", feature = "memory"))]

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockError, LockManager, LockOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

/// Runs `test` on a current-thread runtime with a local debugging recorder (background
/// tasks run on this thread too, so they record into it).
fn with_recorder<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    snapshotter
}

fn labels(key: &CompositeKey) -> Vec<(String, String)> {
    let mut labels: Vec<_> = key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
    labels.sort();
    labels
}

fn counter(
    snapshot: &[(CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)],
    name: &str,
    want: &[(&str, &str)],
) -> u64 {
    let mut want: Vec<(String, String)> = want.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    want.sort();
    snapshot
        .iter()
        .filter(|(key, ..)| key.kind() == MetricKind::Counter && key.key().name() == name && labels(key) == want)
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

fn histogram(
    snapshot: &[(CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)],
    name: &str,
) -> Vec<f64> {
    histogram_of(snapshot, name, "memory")
}

/// The values of histogram `name`, every one of which must be labelled `backend`.
fn histogram_of(
    snapshot: &[(CompositeKey, Option<metrics::Unit>, Option<metrics::SharedString>, DebugValue)],
    name: &str,
    backend: &str,
) -> Vec<f64> {
    snapshot
        .iter()
        .filter(|(key, ..)| key.kind() == MetricKind::Histogram && key.key().name() == name)
        .inspect(|(key, ..)| assert_eq!(labels(key), [("backend".to_owned(), backend.to_owned())]))
        .flat_map(|(.., value)| match value {
            DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()).collect::<Vec<_>>(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .collect()
}

fn manager() -> LockManager {
    LockManager::new(Arc::new(distlock::memory::MemoryLockStore::new()))
}

#[test]
fn acquire_contention_release_wait_and_hold_are_recorded() {
    let snapshotter = with_recorder(|| async {
        let locks = manager();
        let ttl = Duration::from_secs(10);
        let held = locks.lock("m:a", ttl).await.unwrap();
        // Contended twice: once giving up at once, once after waiting 60 ms.
        assert!(locks.try_lock("m:a", ttl).await.unwrap().is_none());
        assert!(locks
            .try_lock_opts(
                "m:a",
                ttl,
                &LockOptions::new().wait(Duration::from_millis(60)).retry_interval(Duration::from_millis(20))
            )
            .await
            .unwrap()
            .is_none());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(held.release().await.unwrap());
        // A dropped handle is released in the background.
        drop(locks.lock("m:b", ttl).await.unwrap());
        locks.flush_releases().await;
        // Releasing an expired lease: not held.
        let short = locks.lock("m:c", Duration::from_millis(20)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(!short.release().await.unwrap());
        // A leaked lock records no hold time.
        let _token = locks.lock("m:d", ttl).await.unwrap().leak();
        // Bad input never reaches the store and is not counted.
        assert!(locks.try_lock("", ttl).await.is_err());
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let memory = ("backend", "memory");
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[memory, ("outcome", "acquired")]), 4);
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[memory, ("outcome", "contended")]), 2);
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[memory, ("outcome", "error")]), 0);
    assert_eq!(counter(&snapshot, "distlock_contention_total", &[memory]), 2);
    assert_eq!(counter(&snapshot, "distlock_release_total", &[memory, ("outcome", "released")]), 2);
    assert_eq!(counter(&snapshot, "distlock_release_total", &[memory, ("outcome", "not_held")]), 1);
    let waits = histogram(&snapshot, "distlock_wait_seconds");
    assert_eq!(waits.len(), 6, "{waits:?}");
    assert!(waits.iter().any(|&w| w >= 0.06), "the waiting attempt took ≥ 60 ms: {waits:?}");
    let holds = histogram(&snapshot, "distlock_hold_seconds");
    assert_eq!(holds.len(), 3, "m:a, m:b and m:c (not the leaked m:d): {holds:?}");
    assert!(holds.iter().any(|&h| h >= 0.09), "m:a was held ≥ 90 ms: {holds:?}");
}

#[test]
fn renewal_failures_and_lost_leases_are_counted() {
    let snapshotter = with_recorder(|| async {
        let locks = manager();
        let options = LockOptions::new().renew_every(Duration::from_millis(50));
        let lock = locks.lock_opts("m:renew", Duration::from_millis(300), &options).await.unwrap();
        // An administrator frees the lock: the next renewal finds it not held.
        let store_key = lock.store_key().clone();
        assert!(locks.store().release(&store_key, lock.token()).await.unwrap());
        let reason = tokio::time::timeout(Duration::from_secs(5), lock.lost()).await.unwrap();
        assert_eq!(reason, distlock::LossReason::NotHeld);
        drop(lock);
        locks.flush_releases().await;
        // with_lock with renewal reports the loss as LeaseLost.
        let err = locks
            .with_lock_opts("m:renew2", Duration::from_millis(300), &options, || async {
                let key = distlock::LockKey::new("m:renew2")?.to_store_key();
                let holder = locks.store().inspect(&key).await?.map(|info| info.token);
                if let Some(token) = holder {
                    locks.store().release(&key, &token).await?;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<(), LockError>(())
            })
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
        locks.flush_releases().await;
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let memory = ("backend", "memory");
    assert_eq!(counter(&snapshot, "distlock_renew_failure_total", &[memory]), 2);
    assert_eq!(counter(&snapshot, "distlock_lease_lost_total", &[memory]), 2);
    assert_eq!(
        counter(&snapshot, "distlock_release_total", &[memory, ("outcome", "not_held")]),
        2,
        "both background releases after the loss"
    );
}

#[test]
fn describe_metrics_registers_units() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        distlock::describe_metrics();
        metrics::counter!(distlock::metric_names::ACQUIRE_TOTAL).increment(0);
        metrics::histogram!(distlock::metric_names::WAIT_SECONDS).record(0.0);
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let wait = snapshot.iter().find(|(key, ..)| key.key().name() == "distlock_wait_seconds").unwrap();
    assert_eq!(wait.1, Some(metrics::Unit::Seconds));
}

#[test]
fn lock_groups_are_counted_as_single_locks_are() {
    let snapshotter = with_recorder(|| async {
        let locks = manager();
        let ttl = Duration::from_secs(10);
        let write = distlock::LockGroup::single(distlock::GroupMember::exclusive("g:a").unwrap()).unwrap();
        let held = locks.try_lock_group(&write, ttl).await.unwrap().unwrap();
        // Contended once, with a 40 ms wait.
        let waiting = LockOptions::new().wait(Duration::from_millis(40)).retry_interval(Duration::from_millis(10));
        assert!(locks.try_lock_group_opts(&write, ttl, &waiting).await.unwrap().is_none());
        held.release().await.unwrap();
        // A reader, released by dropping its handle.
        drop(locks.lock_read("g:a", ttl).await.unwrap());
        locks.flush_releases().await;
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let memory = ("backend", "memory");
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[memory, ("outcome", "acquired")]), 2);
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[memory, ("outcome", "contended")]), 1);
    assert_eq!(counter(&snapshot, "distlock_contention_total", &[memory]), 1);
    assert_eq!(counter(&snapshot, "distlock_release_total", &[memory, ("outcome", "released")]), 2);
    let waits = histogram(&snapshot, "distlock_wait_seconds");
    assert!(waits.iter().any(|&w| w >= 0.04), "the waiting group took ≥ 40 ms: {waits:?}");
    assert_eq!(histogram(&snapshot, "distlock_hold_seconds").len(), 2);
}

// ---------------------------------------------------------------------------------------
// Every store, through `distlock::connect`.
// ---------------------------------------------------------------------------------------

/// A lock cycle, a contended attempt (once at once, once after a wait), a release, a
/// dropped handle and the release of a lease that was no longer held, on the store at
/// `url`; then checks what each recorded, all labelled with the store's `backend`.
fn lock_cycle_is_recorded(url: &str, backend: &str) {
    let snapshotter = with_recorder(|| async {
        let store = distlock::connect(url).await.unwrap_or_else(|err| panic!("connect {backend}: {err}"));
        assert_eq!(store.backend(), backend);
        let locks = LockManager::new(store);
        let ttl = Duration::from_secs(30);
        let key = format!("metrics:{}", distlock::Token::generate().as_str());

        let held = locks.lock(&key, ttl).await.unwrap();
        assert!(locks.try_lock(&key, ttl).await.unwrap().is_none());
        let waiting = LockOptions::new().wait(Duration::from_millis(50)).retry_interval(Duration::from_millis(10));
        assert!(locks.try_lock_opts(&key, ttl, &waiting).await.unwrap().is_none());
        // A waiter that gave up leaves the key's queue (on stores with fair waiting) in
        // the background; no release is counted for it.
        locks.flush_releases().await;
        assert!(held.release().await.unwrap());

        // A dropped handle is released in the background.
        drop(locks.try_lock(&key, ttl).await.unwrap().expect("free after the release"));
        locks.flush_releases().await;

        // A lease freed behind its holder's back: its release finds it not held.
        let lost = locks.try_lock(&key, ttl).await.unwrap().expect("free after the background release");
        assert!(locks.store().release(lost.store_key(), lost.token()).await.unwrap());
        assert!(!lost.release().await.unwrap());
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let this = ("backend", backend);
    let acquired = counter(&snapshot, "distlock_acquire_total", &[this, ("outcome", "acquired")]);
    assert_eq!(acquired, 3, "{backend}: the cycle, the dropped handle and the lost lease");
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[this, ("outcome", "contended")]), 2, "{backend}");
    assert_eq!(counter(&snapshot, "distlock_acquire_total", &[this, ("outcome", "error")]), 0, "{backend}");
    assert_eq!(counter(&snapshot, "distlock_contention_total", &[this]), 2, "{backend}");
    let released = counter(&snapshot, "distlock_release_total", &[this, ("outcome", "released")]);
    assert_eq!(released, 2, "{backend}: release() and the dropped handle's background release");
    assert_eq!(counter(&snapshot, "distlock_release_total", &[this, ("outcome", "not_held")]), 1, "{backend}");
    assert_eq!(counter(&snapshot, "distlock_release_total", &[this, ("outcome", "error")]), 0, "{backend}");

    let waits = histogram_of(&snapshot, "distlock_wait_seconds", backend);
    assert_eq!(waits.len(), 5, "{backend}: one per acquisition call: {waits:?}");
    assert!(waits.iter().any(|&w| w >= 0.05), "{backend}: the waiting attempt took ≥ 50 ms: {waits:?}");
    let holds = histogram_of(&snapshot, "distlock_hold_seconds", backend);
    assert_eq!(holds.len(), 3, "{backend}: one per released handle: {holds:?}");

    // Nothing this store did is labelled as another backend's.
    for (key, ..) in &snapshot {
        let labels = labels(key);
        if let Some((_, label)) = labels.iter().find(|(name, _)| name == "backend") {
            assert_eq!(label, backend, "{}: {labels:?}", key.key().name());
        }
    }
}

#[test]
fn lock_cycle_is_recorded_on_memory() {
    lock_cycle_is_recorded("memory://", "memory");
}

#[cfg(feature = "redis")]
#[test]
fn lock_cycle_is_recorded_on_redis() {
    let Some(url) = distlock_conformance::kit::redis_url("metrics on redis") else { return };
    lock_cycle_is_recorded(&url, "redis");
}

#[cfg(feature = "postgres")]
#[test]
fn lock_cycle_is_recorded_on_postgres() {
    let Some(url) = distlock_conformance::kit::postgres_url("metrics on postgres") else { return };
    lock_cycle_is_recorded(&url, "postgres");
}

#[cfg(feature = "etcd")]
#[test]
fn lock_cycle_is_recorded_on_etcd() {
    let Some(url) = distlock_conformance::kit::etcd_url("metrics on etcd") else { return };
    lock_cycle_is_recorded(&url, "etcd");
}
