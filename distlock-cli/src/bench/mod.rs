//! `distlock bench`: throughput and latency of a store through distlock, beside the
//! store's raw commands. The scenarios and the raw baselines are the benchmark harness
//! every store's own benchmark runs (the `distlock-bench` crate); this module
//! picks them from the command line and prints the report.

mod plots;
mod report;

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockError, LockManager, LockOptions};
use distlock_bench::{self as harness, BenchError, Library, Locker, Measured, RawMemory, RawPostgres, RawRedis, Stop};
use indicatif::{ProgressBar, ProgressStyle};

use self::report::{Report, Row};
use crate::cli::{BenchArgs, Scenario};
use crate::exit::{self, Failure};
use crate::store;

/// The store `bench` uses without `--store`.
const DEFAULT_STORE: &str = "memory://";

/// Runs the benchmark and prints the table (or JSON).
pub(crate) async fn bench(url: Option<&str>, args: BenchArgs) -> Result<u8, Failure> {
    if args.duration.is_zero() {
        return Err(Failure::usage("--duration must be greater than zero"));
    }
    LockOptions::new().wait(args.duration).retry_interval(args.retry).validate(args.ttl)?;
    let url = url.filter(|url| !url.trim().is_empty()).unwrap_or(DEFAULT_STORE);
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|scenario| args.scenarios.is_empty() || args.scenarios.contains(scenario))
        .collect();
    let workers = usize::from(args.workers);

    let lock_store = store::connect(url).await?;
    let backend = lock_store.backend();
    let capabilities = lock_store.capabilities();
    let library = Arc::new(Library::new(LockManager::new(Arc::clone(&lock_store)), args.ttl, args.retry));
    let raw = if args.baseline { Some(Raw::connect(backend, url, args.ttl, args.retry).await?) } else { None };

    let runs_per_scenario = if raw.is_some() { 2 } else { 1 };
    let mut progress = Progress::new(scenarios.len() * runs_per_scenario, args.duration);
    // A waiting hot-key worker takes the lock within one retry interval (polling) or at
    // once (notified); one that just released waits that long for a hand-off.
    let patience = args.retry * 4 + Duration::from_millis(50);
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let bench = Bench { workers, duration: args.duration, patience, run_id };

    bench.warm_up(&library).await?;
    if let Some(raw) = &raw {
        raw.warm_up(&bench).await?;
    }
    let mut rows = Vec::new();
    let mut handoffs = Vec::new();
    for scenario in scenarios {
        let cycles = progress.start(scenario, "distlock");
        let measured = bench.measure(&library, scenario, "lib", cycles).await?;
        progress.finish(&measured);
        let mut row = Row::new(scenario, "distlock", workers, &measured);
        if scenario == Scenario::HotKey {
            handoffs.push(("distlock", measured));
        }
        if let Some(raw) = &raw {
            let cycles = progress.start(scenario, "raw");
            let measured = raw.measure(&bench, scenario, cycles).await?;
            progress.finish(&measured);
            let baseline = Row::new(scenario, "raw", workers, &measured);
            if scenario == Scenario::HotKey {
                handoffs.push(("raw", measured));
            }
            row.compare_with(&baseline);
            rows.push(row);
            rows.push(baseline);
        } else {
            rows.push(row);
        }
    }
    progress.done();
    if let Some(dir) = &args.plot {
        plots::draw(&lock_store, &bench, &args, &handoffs, dir).await?;
    }

    let report = Report::new(backend, capabilities, &args, rows);
    if args.json {
        let json =
            serde_json::to_string_pretty(&report).map_err(|error| Failure::new(exit::SOFTWARE, error.to_string()))?;
        println!("{json}");
    } else {
        report.print_table();
        if raw.is_none() {
            println!("\nAdd --baseline to compare with the store's raw commands in the same run.");
        }
    }
    if report.violations > 0 {
        eprintln!("distlock: {} mutual-exclusion violation(s) observed", report.violations);
        return Ok(exit::SOFTWARE);
    }
    Ok(0)
}

fn failure(error: BenchError) -> Failure {
    match error {
        BenchError::Lock(error) => error.into(),
        other => Failure::new(exit::SOFTWARE, other.to_string()),
    }
}

/// The settings shared by every run.
struct Bench {
    workers: usize,
    duration: Duration,
    patience: Duration,
    /// Every run uses fresh keys under this, so nothing collides on a shared server.
    run_id: String,
}

impl Bench {
    fn scenario(&self, scenario: Scenario) -> harness::Scenario {
        match scenario {
            Scenario::Uncontended => harness::Scenario::Uncontended,
            Scenario::Distinct => harness::Scenario::Distinct { workers: self.workers },
            Scenario::HotKey => harness::Scenario::HotKey { workers: self.workers, hand_over: Some(self.patience) },
        }
    }

    /// Runs `scenario` for the bench's duration, counting finished cycles in `cycles`
    /// as they happen (for the progress display; the report uses the harness's own count).
    async fn measure<L: Locker>(
        &self,
        locker: &Arc<L>,
        scenario: Scenario,
        variant: &str,
        cycles: Arc<AtomicU64>,
    ) -> Result<Measured, Failure> {
        let prefix = format!("distlock-bench:{}:{variant}:", self.run_id);
        let stop = Stop::At(Instant::now() + self.duration);
        let counted = Arc::new(Counted { inner: Arc::clone(locker), cycles });
        harness::run(&counted, self.scenario(scenario), &prefix, stop).await.map_err(failure)
    }

    /// A short uncontended run, not reported: connections, caches, allocator.
    async fn warm_up<L: Locker>(&self, locker: &Arc<L>) -> Result<(), Failure> {
        let prefix = format!("distlock-bench:{}:warm-up:", self.run_id);
        let stop = Stop::At(Instant::now() + (self.duration / 10).min(Duration::from_millis(200)));
        harness::run(locker, self.scenario(Scenario::Distinct), &prefix, stop).await.map(drop).map_err(failure)
    }
}

/// The raw-command baseline of each store.
enum Raw {
    Memory(Arc<RawMemory>),
    Redis(Arc<RawRedis>),
    Postgres(Arc<RawPostgres>),
}

impl Raw {
    async fn connect(backend: &str, url: &str, ttl: Duration, retry: Duration) -> Result<Self, Failure> {
        Ok(match backend {
            "memory" => Self::Memory(Arc::new(RawMemory::new(ttl, retry))),
            "redis" => {
                let (prefix, script) =
                    (distlock::redis::RedisLockStore::DEFAULT_KEY_PREFIX, distlock::redis::RELEASE_SCRIPT);
                Self::Redis(Arc::new(RawRedis::connect(url, prefix, script, ttl, retry).await?))
            }
            "postgres" => {
                // The store's own statements on its default lease table (which
                // `distlock::connect` created), sent raw through the store's pool.
                let store = distlock::postgres::PostgresLockStore::connect(url).await?;
                let sql = store.statements();
                Self::Postgres(Arc::new(RawPostgres::new(
                    store.pool().clone(),
                    sql.acquire(),
                    sql.release(),
                    ttl,
                    retry,
                )))
            }
            other => return Err(Failure::usage(format!("--baseline: no raw baseline for the `{other}` store"))),
        })
    }

    async fn measure(&self, bench: &Bench, scenario: Scenario, cycles: Arc<AtomicU64>) -> Result<Measured, Failure> {
        match self {
            Self::Memory(raw) => bench.measure(raw, scenario, "raw", cycles).await,
            Self::Redis(raw) => bench.measure(raw, scenario, "raw", cycles).await,
            Self::Postgres(raw) => bench.measure(raw, scenario, "raw", cycles).await,
        }
    }

    async fn warm_up(&self, bench: &Bench) -> Result<(), Failure> {
        match self {
            Self::Memory(raw) => bench.warm_up(raw).await,
            Self::Redis(raw) => bench.warm_up(raw).await,
            Self::Postgres(raw) => bench.warm_up(raw).await,
        }
    }
}

/// A [`Locker`] that counts finished cycles (releases) as they happen, so the progress
/// display can show operations while a run is still going. Both distlock and the raw
/// baseline are wrapped alike: one relaxed atomic add per cycle, the same for both sides
/// of the ratio.
struct Counted<L> {
    inner: Arc<L>,
    cycles: Arc<AtomicU64>,
}

impl<L: Locker> Locker for Counted<L> {
    type Key = L::Key;
    type Guard = L::Guard;

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        self.inner.key(name)
    }

    fn acquire(
        &self,
        key: &Self::Key,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send {
        self.inner.acquire(key, wait)
    }

    async fn release(&self, key: &Self::Key, guard: Self::Guard) -> Result<bool, LockError> {
        let released = self.inner.release(key, guard).await;
        self.cycles.fetch_add(1, Ordering::Relaxed);
        released
    }
}

/// Progress on stderr, keeping stdout for the results. On a terminal: a bar over the
/// runs whose message shows the current run's time and operations so far, redrawn ten
/// times a second. Otherwise: a line when each run finishes, and for runs of 10 s or
/// more a line every 5 s while they go on.
struct Progress {
    bar: Option<ProgressBar>,
    runs: usize,
    done: usize,
    duration: Duration,
    current: String,
    started: Instant,
    cycles: Arc<AtomicU64>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn new(runs: usize, duration: Duration) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| progress_bar(runs));
        Self {
            bar,
            runs,
            done: 0,
            duration,
            current: String::new(),
            started: Instant::now(),
            cycles: Arc::default(),
            ticker: None,
        }
    }

    /// Starts showing a run; returns the counter the run adds its finished cycles to.
    fn start(&mut self, scenario: Scenario, implementation: &str) -> Arc<AtomicU64> {
        self.current = format!("{} · {implementation}", scenario.name());
        self.started = Instant::now();
        self.cycles = Arc::default();
        let line = RunLine {
            name: self.current.clone(),
            run: self.done + 1,
            runs: self.runs,
            duration: self.duration,
            started: self.started,
            cycles: Arc::clone(&self.cycles),
        };
        self.ticker = match &self.bar {
            Some(bar) => {
                let bar = bar.clone();
                bar.set_message(line.status());
                Some(tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(100));
                    loop {
                        tick.tick().await;
                        bar.set_message(line.status());
                    }
                }))
            }
            None if self.duration >= Duration::from_secs(10) => Some(tokio::spawn(async move {
                let every = Duration::from_secs(5);
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    eprintln!("distlock bench: {}/{} {}", line.run, line.runs, line.status());
                }
            })),
            None => None,
        };
        Arc::clone(&self.cycles)
    }

    fn finish(&mut self, measured: &Measured) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
        self.done += 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => eprintln!(
                "distlock bench: {}/{} {} done in {:.1}s: {} ops, {:.0} ops/s",
                self.done,
                self.runs,
                self.current,
                self.started.elapsed().as_secs_f64(),
                measured.ops,
                measured.ops_per_sec()
            ),
        }
    }

    fn done(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// What the progress display says about the run in progress.
struct RunLine {
    name: String,
    run: usize,
    runs: usize,
    duration: Duration,
    started: Instant,
    cycles: Arc<AtomicU64>,
}

impl RunLine {
    /// `distinct · distlock: 0.4s / 1.0s, 12345 ops`.
    fn status(&self) -> String {
        let elapsed = self.started.elapsed().min(self.duration);
        format!(
            "{}: {:.1}s / {:.1}s, {} ops",
            self.name,
            elapsed.as_secs_f64(),
            self.duration.as_secs_f64(),
            self.cycles.load(Ordering::Relaxed)
        )
    }
}

/// A progress bar (stderr is a terminal).
fn progress_bar(runs: usize) -> ProgressBar {
    let bar = ProgressBar::new(u64::try_from(runs).unwrap_or(u64::MAX));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:24}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}
