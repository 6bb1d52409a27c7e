//! Memory store benchmark, each scenario beside a raw baseline in the same run.
//!
//! ```text
//! cargo bench -p distlock-memory
//! ```
//!
//! - uncontended: one acquire + release cycle through `LockManager` (key validation,
//!   token generation, the store) vs a raw `tokio::sync::Mutex<HashMap<String, …>>`
//!   insert + remove;
//! - distinct: 8 tasks, each cycling its own key;
//! - hot key: 8 tasks on one key (waiting with a 1 ms retry interval, woken on release)
//!   vs the same 8 tasks on one `tokio::sync::Mutex`;
//! - hand-off: 8 waiters on one key, hold 0, retry interval 50 ms: latency from release
//!   to the next holder (p50/p99) and sections/s, with release notifications vs polling.
//!
//! Rounds alternate library and baseline; the median round is reported.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{LockManager, LockOptions};
use distlock_conformance::kit::handoff::{hot_key, PollingOnly};
use distlock_memory::MemoryLockStore;
use tokio::sync::Mutex;

const ROUNDS: usize = 7;
const CYCLES: usize = 50_000;
const TASKS: usize = 8;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(1);

type RawMap = Arc<Mutex<HashMap<String, u64>>>;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn library_uncontended(locks: &LockManager, keys: &[String]) -> Duration {
    let started = Instant::now();
    for key in keys {
        let lock = locks.try_lock(key, TTL).await.unwrap().unwrap();
        assert!(lock.release().await.unwrap());
    }
    started.elapsed()
}

async fn raw_uncontended(map: &RawMap, keys: &[String]) -> Duration {
    let started = Instant::now();
    for (i, key) in keys.iter().enumerate() {
        {
            let mut held = map.lock().await;
            if held.contains_key(key) {
                panic!("raw baseline: key already held");
            }
            held.insert(key.clone(), i as u64);
        }
        assert!(map.lock().await.remove(key).is_some());
    }
    started.elapsed()
}

async fn library_distinct(locks: &LockManager) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let key = format!("distinct:{t}");
                for _ in 0..CYCLES / TASKS {
                    let lock = locks.try_lock(&key, TTL).await.unwrap().unwrap();
                    assert!(lock.release().await.unwrap());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

async fn raw_distinct(map: &RawMap) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let map = Arc::clone(map);
            tokio::spawn(async move {
                let key = format!("distinct:{t}");
                for i in 0..CYCLES / TASKS {
                    assert!(map.lock().await.insert(key.clone(), i as u64).is_none());
                    assert!(map.lock().await.remove(&key).is_some());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

async fn library_hot(locks: &LockManager, sections: usize) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                for _ in 0..sections / TASKS {
                    let lock = locks
                        .lock_opts("hot", TTL, &LockOptions::new().wait(Duration::from_secs(60)).retry_interval(RETRY))
                        .await
                        .unwrap();
                    assert!(lock.release().await.unwrap());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

async fn raw_hot(mutex: &Arc<Mutex<u64>>, sections: usize) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mutex = Arc::clone(mutex);
            tokio::spawn(async move {
                for _ in 0..sections / TASKS {
                    *mutex.lock().await += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

fn report(name: &str, ops: usize, library: Vec<Duration>, raw: Vec<Duration>, target: Option<f64>) {
    let per_op = |d: &Duration| d.as_nanos() as f64 / ops as f64;
    let lib = median(library.iter().map(per_op).collect());
    let base = median(raw.iter().map(per_op).collect());
    let target =
        target.map(|t| format!("  (target ≤ {t} µs/cycle: {})", if lib / 1e3 <= t { "met" } else { "MISSED" }));
    println!(
        "{name:<28} library {:>8.3} µs/op  raw {:>8.3} µs/op  ratio {:>5.2}×  library {:>10.0} ops/s{}",
        lib / 1e3,
        base / 1e3,
        lib / base,
        1e9 / lib,
        target.unwrap_or_default()
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
        let map: RawMap = Arc::default();
        let keys: Vec<String> = (0..CYCLES).map(|i| format!("uncontended:{}", i % 1024)).collect();
        // Warm-up.
        library_uncontended(&locks, &keys).await;
        raw_uncontended(&map, &keys).await;

        let (mut lib, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            lib.push(library_uncontended(&locks, &keys).await);
            raw.push(raw_uncontended(&map, &keys).await);
        }
        report("uncontended cycle", CYCLES, lib, raw, Some(2.0));

        let (mut lib, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            lib.push(library_distinct(&locks).await);
            raw.push(raw_distinct(&map).await);
        }
        report("8 tasks, distinct keys", CYCLES, lib, raw, None);

        let sections = 8_000;
        let mutex = Arc::new(Mutex::new(0));
        let (mut lib, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            lib.push(library_hot(&locks, sections).await);
            raw.push(raw_hot(&mutex, sections).await);
        }
        report("8 tasks, one hot key", sections, lib, raw, None);

        // Hand-off: release → next holder, 8 waiters, retry interval 50 ms, notified vs polling.
        let store: Arc<distlock_api::DynLockStore> = Arc::new(MemoryLockStore::new());
        let notified = hot_key(Arc::clone(&store), "handoff", TASKS, 2_000, Duration::from_millis(50)).await;
        let polling = hot_key(Arc::new(PollingOnly(store)), "handoff", TASKS, 100, Duration::from_millis(50)).await;
        println!("hand-off, 8 waiters, notified       {notified}");
        println!("hand-off, 8 waiters, polling 50 ms  {polling}");
        println!(
            "  notified vs polling: p50 {:.0}× faster, {:.0}× the sections/s",
            polling.p50.as_secs_f64() / notified.p50.as_secs_f64().max(1e-9),
            notified.sections_per_sec / polling.sections_per_sec
        );
    });
}
