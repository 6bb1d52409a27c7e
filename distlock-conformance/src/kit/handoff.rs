//! Hand-off, measured the same way for every store: how long from a release until the
//! next waiter holds the lock, with release notifications and with polling only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, DynLockStore, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockKey, LockManager, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace,
};

use distlock_bench::record::{self, Ratios, Record};

use super::bench::{run, scaled, Library, Measured, Scenario, Stop};

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

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.0.queue()?;
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        self.0.groups()
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        self.0.values()
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.0.list(pattern, cursor, limit).await
    }
}

#[async_trait]
impl QueueStore for PollingOnly {
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        crate::counting::inner_queue(&*self.0)?.try_acquire_queued(attempt).await
    }

    fn queues_in_first_attempt(&self) -> bool {
        self.0.queue().is_some_and(QueueStore::queues_in_first_attempt)
    }

    async fn wait_for_turn(&self, _key: &StoreKey, _token: &Token, max: Duration) -> Result<(), LockError> {
        tokio::time::sleep(max).await;
        Ok(())
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        crate::counting::inner_queue(&*self.0)?.queue_len(key).await
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        crate::counting::inner_queue(&*self.0)?.queue_places(key).await
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

impl From<&Measured> for HandOff {
    fn from(measured: &Measured) -> Self {
        Self {
            p50: measured.quantile(0.5).unwrap_or_default(),
            p99: measured.quantile(0.99).unwrap_or_default(),
            sections_per_sec: measured.ops_per_sec(),
            violations: measured.violations,
        }
    }
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

/// `waiters` tasks take turns on the key `{prefix}hot` through a manager on `store`, for
/// `sections` critical sections in all (an equal quota each), holding for no time, each
/// waiting with `retry` as its retry interval. Measures the time from a holder starting
/// its release to the next holder — another task — holding the lock.
///
/// # Panics
///
/// On any store error.
pub async fn hot_key(
    store: Arc<DynLockStore>,
    prefix: &str,
    waiters: usize,
    sections: usize,
    retry: Duration,
) -> HandOff {
    let library = Arc::new(Library::new(LockManager::new(store), Duration::from_secs(30), retry));
    let scenario = Scenario::HotKey { workers: waiters, hand_over: None };
    let quota = Stop::Cycles(sections.div_ceil(waiters) as u64);
    let measured = run(&library, scenario, prefix, quota).await.unwrap_or_else(|error| panic!("hand-off: {error}"));
    HandOff::from(&measured)
}

/// The plan of a [`compare`]: `rounds` alternating rounds of `notified_sections` with
/// release notifications and `polling_sections` with polling only, `waiters` waiters
/// retrying every `retry`.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Waiting tasks.
    pub waiters: usize,
    /// Their retry interval.
    pub retry: Duration,
    /// Critical sections per notified round.
    pub notified_sections: usize,
    /// Critical sections per polling round (each hand-off takes up to `retry`).
    pub polling_sections: usize,
    /// Rounds of each; the round with the median p50 is reported.
    pub rounds: usize,
    /// Whether to measure one round trip of the store in each round (the median of
    /// [`ROUND_TRIP_SAMPLES`] `inspect` calls of an absent key, one at a time) and report
    /// the notified hand-off in round trips: a hand-off takes at least two, the release
    /// and the next waiter's attempt. `false` for a store in this process, which has none.
    pub round_trips: bool,
}

/// `inspect` calls per round whose median is one round trip of the store.
pub const ROUND_TRIP_SAMPLES: usize = 200;

/// The median time of [`ROUND_TRIP_SAMPLES`] `inspect` calls of `key` (absent: one read,
/// one round trip on every store with a server), one at a time.
///
/// # Panics
///
/// On any store error.
pub async fn round_trip(store: &DynLockStore, key: &StoreKey) -> Duration {
    let mut samples = Vec::with_capacity(ROUND_TRIP_SAMPLES);
    for _ in 0..ROUND_TRIP_SAMPLES {
        let started = Instant::now();
        store.inspect(key).await.unwrap_or_else(|error| panic!("round trip: {error}"));
        samples.push(started.elapsed());
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// The round with the median p50 hand-off.
fn median_round(mut rounds: Vec<HandOff>) -> HandOff {
    rounds.sort_by_key(|round| round.p50);
    rounds.swap_remove(rounds.len() / 2)
}

/// Hand-off on one hot key `{prefix}hot` of `store`, woken by its release notifications vs
/// polling only ([`PollingOnly`]), after a warm-up; prints both under `label` and their
/// ratios (p50, sections/s) and whether notified p50 met 2 ms. Returns (notified, polling).
///
/// # Panics
///
/// On any store error, or when two holders were inside at once.
pub async fn compare(store: Arc<DynLockStore>, label: &str, prefix: &str, plan: Plan) -> (HandOff, HandOff) {
    let Plan { waiters, retry, notified_sections, polling_sections, rounds, round_trips } = plan;
    let (notified_sections, polling_sections) = (scaled(notified_sections), scaled(polling_sections));
    let polling: Arc<DynLockStore> = Arc::new(PollingOnly(Arc::clone(&store)));
    // Warm-up: connections, listeners, scripts, the row.
    hot_key(Arc::clone(&store), prefix, waiters, 200, retry).await;
    let absent: StoreKey = (&LockKey::new(format!("{prefix}round-trip")).expect("a valid key")).into();
    let (mut notified, mut polled, mut trips) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        notified.push(hot_key(Arc::clone(&store), prefix, waiters, notified_sections, retry).await);
        if round_trips {
            trips.push(round_trip(&*store, &absent).await);
        }
        polled.push(hot_key(Arc::clone(&polling), prefix, waiters, polling_sections, retry).await);
    }
    for round in notified.iter().chain(&polled) {
        assert_eq!(round.violations, 0, "{label}: two holders at once");
    }
    let all = |rounds: &[HandOff]| {
        rounds.iter().map(|r| format!("{:.2}", r.p50.as_secs_f64() * 1e3)).collect::<Vec<_>>().join(" ")
    };
    let (all_notified, all_polled) = (all(&notified), all(&polled));
    record_rounds(label, &plan, &notified, &polled);
    if round_trips {
        record_round_trips(label, &plan, &notified, &trips);
    }
    let count = notified.len();
    let (notified, polled) = (median_round(notified), median_round(polled));
    let target = if notified.p50 <= Duration::from_millis(2) { "met" } else { "MISSED" };
    println!("{label}hand-off on one hot key, {waiters} waiters, hold 0, retry {retry:?}, median of {count} rounds");
    println!("  notified ({notified_sections} sections)  {notified}   (target p50 ≤ 2 ms: {target}; p50 per round: {all_notified} ms)");
    println!("  polling  ({polling_sections} sections)   {polled}   (p50 per round: {all_polled} ms)");
    println!(
        "  notified vs polling: p50 {:.0}× shorter, {:.1}× the sections/s",
        polled.p50.as_secs_f64() / notified.p50.as_secs_f64().max(1e-9),
        notified.sections_per_sec / polled.sections_per_sec.max(f64::MIN_POSITIVE)
    );
    if let Some(&trip) = trips.get(trips.len() / 2) {
        println!(
            "  one round trip of the store (`inspect`, median of the rounds) {:.3} ms: notified p50 = {:.1} round trips (at least 2: the release, the next attempt)",
            trip.as_secs_f64() * 1e3,
            notified.p50.as_secs_f64() / trip.as_secs_f64().max(1e-9)
        );
    }
    (notified, polled)
}

/// Writes each round's notified p50 beside that round's round trip of the store, as a
/// result for `BENCHMARKS.md` (when `DISTLOCK_BENCH_OUT` is set): the hand-off in round
/// trips.
fn record_round_trips(label: &str, plan: &Plan, notified: &[HandOff], trips: &[Duration]) {
    let title = format!(
        "{label}hand-off p50 on one hot key, {} waiters, in round trips of the store (one `inspect`)",
        plan.waiters
    );
    let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
    let samples = [trips.iter().map(|&trip| ms(trip)).collect(), notified.iter().map(|round| ms(round.p50)).collect()];
    let ratios = Ratios::of(&record::suite(), &title, "ms", 1.0, &["round trip", "notified"], &samples);
    record::emit(&Record::Ratios(ratios));
}

/// Writes the p50 and p99 of every round, notified beside polling, as results for
/// `BENCHMARKS.md` (when `DISTLOCK_BENCH_OUT` is set).
fn record_rounds(label: &str, plan: &Plan, notified: &[HandOff], polled: &[HandOff]) {
    let ms = |rounds: &[HandOff], p99: bool| -> Vec<f64> {
        rounds.iter().map(|round| if p99 { round.p99 } else { round.p50 }.as_secs_f64() * 1e3).collect()
    };
    for (quantile, pick) in [("p50", false), ("p99", true)] {
        let title = format!(
            "{label}hand-off {quantile} on one hot key, {} waiters, hold 0, retry {:?}",
            plan.waiters, plan.retry
        );
        let samples = [ms(polled, pick), ms(notified, pick)];
        let ratios = Ratios::of(&record::suite(), &title, "ms", 1.0, &["polling", "notified"], &samples);
        record::emit(&Record::Ratios(ratios));
    }
}
