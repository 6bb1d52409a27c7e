//! The scenarios, run by worker tasks against a [`Locker`]: a cycle loop on one key, N
//! workers on distinct keys, and N workers handing one hot key to each other.
//!
//! The hot-key scenario checks mutual exclusion inside the process: a holder counter
//! goes up right after an acquisition returns and down right before the release is sent;
//! finding it non-zero on the way up is a violation.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_api::LockError;
use tokio::sync::watch;

use super::locker::Locker;

/// Cycle workers yield to the runtime this often, so that a store whose operations never
/// suspend (memory) cannot starve the other workers.
const YIELD_EVERY: u64 = 256;

/// How long a hot-key worker of a counted run waits for its turn before giving up.
const COUNTED_WAIT: Duration = Duration::from_secs(120);

/// Why a run stopped short.
#[derive(Debug)]
pub enum BenchError {
    /// The locker failed.
    Lock(LockError),
    /// A key that only this run uses was held by someone else, or a counted hot-key
    /// worker waited in vain.
    Held(String),
    /// A worker task panicked or was cancelled.
    Worker(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lock(error) => error.fmt(f),
            Self::Held(message) => f.write_str(message),
            Self::Worker(error) => write!(f, "a benchmark worker failed: {error}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<LockError> for BenchError {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}

/// When the workers of a run stop.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After this many acquisitions per worker; the run is timed as a whole (benchmark
    /// rounds), so no clock is read per cycle.
    Cycles(u64),
    /// At this instant; every cycle's latency is recorded (the loop reads the clock
    /// anyway).
    At(Instant),
}

/// A scenario and its workers.
#[derive(Debug, Clone, Copy)]
pub enum Scenario {
    /// One worker: acquire + release of `{prefix}uncontended`, in a loop.
    Uncontended,
    /// `workers` workers, each cycling its own key `{prefix}distinct:{n}`.
    Distinct {
        /// Worker tasks.
        workers: usize,
    },
    /// `workers` workers take turns on `{prefix}hot`, holding it across one scheduling
    /// point; release → next holder (another worker) is the latency measured.
    HotKey {
        /// Worker tasks.
        workers: usize,
        /// After its release, a worker waits up to this long for another to take the lock
        /// before trying again, so that the lock is handed off rather than re-taken at
        /// once; `None` lets it try again at once.
        hand_over: Option<Duration>,
    },
}

/// What one run of a scenario measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// Acquisitions.
    pub ops: u64,
    /// From the start of the workers to the end of the last one.
    pub elapsed: Duration,
    /// Latencies in ns, sorted: acquire + release cycles (runs until [`Stop::At`]), or
    /// hand-offs (hot key).
    pub latencies: Vec<u64>,
    /// Times a holder found another holder of its key.
    pub violations: u64,
    /// Releases that found the lease no longer held (expired: a TTL too short for the run).
    pub lost: u64,
}

impl Measured {
    fn merge(&mut self, other: Self) {
        self.ops += other.ops;
        self.latencies.extend(other.latencies);
        self.violations += other.violations;
        self.lost += other.lost;
    }

    /// The `q` quantile of the latencies (0 ≤ q ≤ 1), when there are any.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let last = self.latencies.len().checked_sub(1)?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let index = ((self.latencies.len() as f64 * q) as usize).min(last);
        Some(Duration::from_nanos(self.latencies[index]))
    }

    /// Acquisitions per second.
    pub fn ops_per_sec(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let ops = self.ops as f64;
        ops / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `scenario` against `locker` on keys named `{prefix}…` until `stop`.
///
/// # Errors
///
/// When the locker fails, a key turns out to be held by someone else, or a worker panics.
pub async fn run<L: Locker>(
    locker: &Arc<L>,
    scenario: Scenario,
    prefix: &str,
    stop: Stop,
) -> Result<Measured, BenchError> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match scenario {
        Scenario::Uncontended => {
            tasks.spawn(cycle(Arc::clone(locker), format!("{prefix}uncontended"), stop));
        }
        Scenario::Distinct { workers } => {
            for worker in 0..workers {
                tasks.spawn(cycle(Arc::clone(locker), format!("{prefix}distinct:{worker}"), stop));
            }
        }
        Scenario::HotKey { workers, hand_over } => {
            let shared = Arc::new(HotKey {
                name: format!("{prefix}hot"),
                holders: AtomicU32::new(0),
                last_release: Mutex::new(None),
                acquisitions: watch::Sender::new(0),
                hand_over: hand_over.filter(|_| workers > 1),
            });
            for worker in 0..workers {
                tasks.spawn(hot_key(Arc::clone(locker), Arc::clone(&shared), worker, stop));
            }
        }
    }
    let mut measured = Measured::default();
    while let Some(joined) = tasks.join_next().await {
        measured.merge(joined.map_err(|error| BenchError::Worker(error.to_string()))??);
    }
    measured.elapsed = started.elapsed();
    measured.latencies.sort_unstable();
    Ok(measured)
}

/// Acquire + release of a key nobody else uses, until `stop`.
async fn cycle<L: Locker>(locker: Arc<L>, name: String, stop: Stop) -> Result<Measured, BenchError> {
    let key = locker.key(&name)?;
    let mut measured = Measured::default();
    loop {
        let started = match stop {
            Stop::Cycles(cycles) if measured.ops >= cycles => return Ok(measured),
            Stop::Cycles(_) => None,
            Stop::At(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(measured);
                }
                Some(now)
            }
        };
        if !one_cycle(&*locker, &key, &name).await? {
            measured.lost += 1;
        }
        if let Some(started) = started {
            measured.latencies.push(nanos(started.elapsed()));
        }
        measured.ops += 1;
        if measured.ops % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// Acquires `key` (named `name`) once, without waiting, and releases it, in the calling
/// task; whether the release found it still held.
///
/// # Errors
///
/// [`BenchError::Held`] when the key was held by someone else; the locker's errors.
pub async fn one_cycle<L: Locker>(locker: &L, key: &L::Key, name: &str) -> Result<bool, BenchError> {
    let Some(guard) = locker.acquire(key, Duration::ZERO).await? else {
        return Err(BenchError::Held(format!("benchmark key `{name}` was held by someone else")));
    };
    Ok(locker.release(key, guard).await?)
}

/// The state the hot-key workers share.
struct HotKey {
    name: String,
    holders: AtomicU32,
    /// When the last holder sent its release, and which worker it was.
    last_release: Mutex<Option<(Instant, usize)>>,
    /// Counts acquisitions; with `hand_over`, a worker that released waits for the next.
    acquisitions: watch::Sender<u64>,
    hand_over: Option<Duration>,
}

/// Waits for the hot key, holds it across one scheduling point, releases it; records
/// release → next acquisition by another worker as the hand-off latency.
async fn hot_key<L: Locker>(
    locker: Arc<L>,
    shared: Arc<HotKey>,
    me: usize,
    stop: Stop,
) -> Result<Measured, BenchError> {
    let key = locker.key(&shared.name)?;
    let mut seen = shared.acquisitions.subscribe();
    let mut measured = Measured::default();
    loop {
        let wait = match stop {
            Stop::Cycles(cycles) if measured.ops >= cycles => return Ok(measured),
            Stop::Cycles(_) => COUNTED_WAIT,
            Stop::At(deadline) => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => return Ok(measured),
            },
        };
        let Some(guard) = locker.acquire(&key, wait).await? else {
            if let Stop::Cycles(_) = stop {
                return Err(BenchError::Held(format!("waited {wait:?} in vain for hot key `{}`", shared.name)));
            }
            return Ok(measured);
        };
        let acquired_at = Instant::now();
        if shared.holders.fetch_add(1, Ordering::SeqCst) != 0 {
            measured.violations += 1;
        }
        // Only a hand-off to another worker counts: re-taking the lock one just released
        // measures nothing about waking waiters.
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
        if let Some(patience) = shared.hand_over {
            let patience = match stop {
                Stop::At(deadline) => patience.min(deadline.saturating_duration_since(Instant::now())),
                Stop::Cycles(_) => patience,
            };
            let _ = tokio::time::timeout(patience, seen.changed()).await;
        }
    }
}
