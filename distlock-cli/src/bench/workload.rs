//! The three scenarios, run by N worker tasks against a [`Locker`] for a fixed time.
//!
//! Every scenario checks mutual exclusion inside the process: a holder counter per key
//! goes up right after an acquisition returns and down right before the release is
//! sent; finding it non-zero on the way up is a violation.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::locker::Locker;
use crate::cli::Scenario;
use crate::exit::{Failure, SOFTWARE};

/// Cycle workers yield to the runtime this often, so that a store whose operations never
/// suspend (memory) cannot starve the other workers.
const YIELD_EVERY: u64 = 256;

/// What one run of a scenario measured.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    /// Acquisitions.
    pub(crate) ops: u64,
    /// From the start of the workers to the end of the last one.
    pub(crate) elapsed: Duration,
    /// Latencies in ns, sorted: acquire + release cycles, or hand-offs (hot key).
    pub(crate) latencies: Vec<u64>,
    /// Times a holder found another holder of its key.
    pub(crate) violations: u64,
    /// Releases that found the lease no longer held (expired: TTL too short for the run).
    pub(crate) lost: u64,
}

impl Measured {
    fn merge(&mut self, other: Self) {
        self.ops += other.ops;
        self.latencies.extend(other.latencies);
        self.violations += other.violations;
        self.lost += other.lost;
    }

    /// The `q` quantile of the latencies (0 < q < 1), when there are any.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let last = self.latencies.len().checked_sub(1)?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let index = ((self.latencies.len() as f64 * q) as usize).min(last);
        Some(Duration::from_nanos(self.latencies[index]))
    }

    /// Acquisitions per second.
    pub(crate) fn ops_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let ops = self.ops as f64;
        ops / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `scenario` with `workers` tasks (1 for uncontended) on keys under `prefix`.
pub(crate) async fn run<L: Locker>(
    locker: &Arc<L>,
    scenario: Scenario,
    prefix: &str,
    workers: usize,
    duration: Duration,
    patience: Duration,
) -> Result<Measured, Failure> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    match scenario {
        Scenario::Uncontended => {
            tasks.spawn(cycle(Arc::clone(locker), format!("{prefix}uncontended"), deadline));
        }
        Scenario::Distinct => {
            for worker in 0..workers {
                tasks.spawn(cycle(Arc::clone(locker), format!("{prefix}distinct:{worker}"), deadline));
            }
        }
        Scenario::HotKey => {
            let shared = Arc::new(HotKey {
                name: format!("{prefix}hot"),
                holders: AtomicU32::new(0),
                last_release: Mutex::new(None),
                acquisitions: watch::Sender::new(0),
                workers,
            });
            for worker in 0..workers {
                tasks.spawn(hand_off(Arc::clone(locker), Arc::clone(&shared), worker, deadline, patience));
            }
        }
    }
    let mut measured = Measured::default();
    while let Some(joined) = tasks.join_next().await {
        let worker = joined.map_err(|error| Failure::new(SOFTWARE, format!("a benchmark worker failed: {error}")))?;
        measured.merge(worker?);
    }
    measured.elapsed = started.elapsed();
    measured.latencies.sort_unstable();
    Ok(measured)
}

/// Acquire + release of a key nobody else uses, until the deadline.
async fn cycle<L: Locker>(locker: Arc<L>, name: String, deadline: Instant) -> Result<Measured, Failure> {
    let key = locker.key(&name);
    let holders = AtomicU32::new(0);
    let mut measured = Measured::default();
    loop {
        let started = Instant::now();
        if started >= deadline {
            return Ok(measured);
        }
        let Some(guard) = locker.acquire(&key, Duration::ZERO).await? else {
            return Err(Failure::new(SOFTWARE, format!("benchmark key `{name}` was held by someone else")));
        };
        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
            measured.violations += 1;
        }
        holders.fetch_sub(1, Ordering::SeqCst);
        if !locker.release(&key, guard).await? {
            measured.lost += 1;
        }
        measured.latencies.push(nanos(started.elapsed()));
        measured.ops += 1;
        if measured.ops % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// The state the hot-key workers share.
struct HotKey {
    name: String,
    holders: AtomicU32,
    /// When the last holder sent its release, and which worker it was.
    last_release: Mutex<Option<(Instant, usize)>>,
    /// Counts acquisitions; a worker that released waits for the next one, so that the
    /// lock is handed off rather than re-taken at once by the same worker.
    acquisitions: watch::Sender<u64>,
    workers: usize,
}

/// Waits for the hot key, holds it across one scheduling point, releases it, and lets
/// another worker have it; records release → next acquisition as the hand-off latency.
async fn hand_off<L: Locker>(
    locker: Arc<L>,
    shared: Arc<HotKey>,
    me: usize,
    deadline: Instant,
    patience: Duration,
) -> Result<Measured, Failure> {
    let key = locker.key(&shared.name);
    let mut seen = shared.acquisitions.subscribe();
    let mut measured = Measured::default();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(measured);
        }
        let Some(guard) = locker.acquire(&key, deadline - now).await? else {
            return Ok(measured);
        };
        let acquired_at = Instant::now();
        if shared.holders.fetch_add(1, Ordering::SeqCst) != 0 {
            measured.violations += 1;
        }
        let previous = shared.last_release.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((released_at, by)) = previous {
            if by != me {
                measured.latencies.push(nanos(acquired_at.saturating_duration_since(released_at)));
            }
        }
        shared.acquisitions.send_modify(|count| *count += 1);
        measured.ops += 1;
        // A second holder, if the lock let one in, gets to run here.
        tokio::task::yield_now().await;
        shared.holders.fetch_sub(1, Ordering::SeqCst);
        seen.borrow_and_update();
        *shared.last_release.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), me));
        if !locker.release(&key, guard).await? {
            measured.lost += 1;
        }
        if shared.workers > 1 {
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = tokio::time::timeout(patience.min(left), seen.changed()).await;
        }
    }
}
