//! `distlock bench`: throughput and latency of a store through distlock, beside the
//! store's raw commands. The scenarios and the raw baselines are the benchmark harness
//! every store's own benchmark runs (`distlock_conformance::kit::bench`); this module
//! picks them from the command line and prints the report.

mod report;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockManager, LockOptions};
use distlock_conformance::kit::bench::{
    self as harness, BenchError, Library, Locker, Measured, RawMemory, RawPostgres, RawRedis, Stop,
};
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
    let library = Arc::new(Library::new(LockManager::new(lock_store), args.ttl, args.retry));
    let raw = if args.baseline { Some(Raw::connect(backend, url, args.ttl, args.retry).await?) } else { None };

    let runs_per_scenario = if raw.is_some() { 2 } else { 1 };
    let mut progress = Progress::new(scenarios.len() * runs_per_scenario);
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
    for scenario in scenarios {
        progress.start(scenario, "distlock");
        let measured = bench.measure(&library, scenario, "lib").await?;
        progress.finish(&measured);
        let mut row = Row::new(scenario, "distlock", workers, &measured);
        if let Some(raw) = &raw {
            progress.start(scenario, "raw");
            let baseline = raw.measure(&bench, scenario).await?;
            progress.finish(&baseline);
            let baseline = Row::new(scenario, "raw", workers, &baseline);
            row.compare_with(&baseline);
            rows.push(row);
            rows.push(baseline);
        } else {
            rows.push(row);
        }
    }
    progress.done();

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

    async fn measure<L: Locker>(
        &self,
        locker: &Arc<L>,
        scenario: Scenario,
        variant: &str,
    ) -> Result<Measured, Failure> {
        let prefix = format!("distlock-bench:{}:{variant}:", self.run_id);
        let stop = Stop::At(Instant::now() + self.duration);
        harness::run(locker, self.scenario(scenario), &prefix, stop).await.map_err(failure)
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

    async fn measure(&self, bench: &Bench, scenario: Scenario) -> Result<Measured, Failure> {
        match self {
            Self::Memory(raw) => bench.measure(raw, scenario, "raw").await,
            Self::Redis(raw) => bench.measure(raw, scenario, "raw").await,
            Self::Postgres(raw) => bench.measure(raw, scenario, "raw").await,
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

/// Progress on stderr: a bar on a terminal, otherwise one line per finished run.
struct Progress {
    bar: Option<ProgressBar>,
    runs: usize,
    done: usize,
    current: String,
}

impl Progress {
    fn new(runs: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| progress_bar(runs));
        Self { bar, runs, done: 0, current: String::new() }
    }

    fn start(&mut self, scenario: Scenario, implementation: &str) {
        let name = format!("{} · {implementation}", scenario.name());
        if let Some(bar) = &self.bar {
            bar.set_message(name.clone());
        }
        self.current = name;
    }

    fn finish(&mut self, measured: &Measured) {
        self.done += 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => eprintln!(
                "distlock bench: {}/{} {} done, {:.0} ops/s",
                self.done,
                self.runs,
                self.current,
                measured.ops_per_sec()
            ),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
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
