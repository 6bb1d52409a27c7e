//! Many workers contend for a few locks on the in-memory store; the example counts what
//! happened and checks that no two workers were ever inside the same lock at once.
//!
//! ```text
//! cargo run -p distlock --example contention
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockError, LockManager, LockOptions};

const WORKERS: usize = 32;
const KEYS: usize = 4;
const ROUNDS: usize = 200;

struct Stats {
    inside: Vec<AtomicBool>,
    counters: Vec<AtomicU64>,
    acquired: AtomicU64,
    busy: AtomicU64,
    overlaps: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let locks = LockManager::new(distlock::connect("memory://").await?);
    let stats = Arc::new(Stats {
        inside: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        counters: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        acquired: AtomicU64::new(0),
        busy: AtomicU64::new(0),
        overlaps: AtomicU64::new(0),
    });
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (locks, stats) = (locks.clone(), stats.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let slot = (worker + round) % KEYS;
                // Half the workers give up at once when the key is busy; the others wait.
                let wait = if worker % 2 == 0 { Duration::ZERO } else { Duration::from_secs(10) };
                let key = format!("account:{slot}");
                let Some(lock) = locks
                    .try_lock_opts(
                        &key,
                        Duration::from_secs(5),
                        &LockOptions::new().wait(wait).retry_interval(Duration::from_millis(5)),
                    )
                    .await?
                else {
                    stats.busy.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if stats.inside[slot].swap(true, Ordering::SeqCst) {
                    stats.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // A non-atomic read-modify-write: only mutual exclusion keeps it exact.
                let balance = stats.counters[slot].load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                stats.counters[slot].store(balance + 1, Ordering::SeqCst);
                stats.inside[slot].store(false, Ordering::SeqCst);
                stats.acquired.fetch_add(1, Ordering::Relaxed);
                lock.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }
    let acquired = stats.acquired.load(Ordering::Relaxed);
    let counted: u64 = stats.counters.iter().map(|c| c.load(Ordering::SeqCst)).sum();
    let overlaps = stats.overlaps.load(Ordering::SeqCst);
    println!("{WORKERS} workers × {ROUNDS} rounds on {KEYS} keys in {:?}", started.elapsed());
    println!("  critical sections run : {acquired}");
    println!("  gave up (key busy)    : {}", stats.busy.load(Ordering::Relaxed));
    println!("  counter total         : {counted} (must equal sections run)");
    println!("  overlapping holders   : {overlaps} (must be 0)");
    if overlaps != 0 || counted != acquired {
        eprintln!("mutual exclusion violated");
        std::process::exit(1);
    }
    println!("mutual exclusion held: ok");
    Ok(())
}
