//! `distlock bench`: throughput and latency of a store through distlock, beside the
//! store's raw commands.

mod locker;
mod report;
mod workload;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockManager, LockOptions};
use indicatif::{ProgressBar, ProgressStyle};

use self::locker::{Library, Locker, RawMemory, RawPostgres, RawRedis};
use self::report::{Report, Row};
use self::workload::Measured;
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
    let progress = progress_bar(scenarios.len() * runs_per_scenario);
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
        progress.set_message(format!("{} · distlock", scenario.name()));
        let measured = bench.measure(&library, scenario, "lib").await?;
        progress.inc(1);
        let mut row = Row::new(scenario, "distlock", workers, &measured);
        if let Some(raw) = &raw {
            progress.set_message(format!("{} · raw", scenario.name()));
            let baseline = raw.measure(&bench, scenario).await?;
            progress.inc(1);
            let baseline = Row::new(scenario, "raw", workers, &baseline);
            row.compare_with(&baseline);
            rows.push(row);
            rows.push(baseline);
        } else {
            rows.push(row);
        }
    }
    progress.finish_and_clear();

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

/// The settings shared by every run.
struct Bench {
    workers: usize,
    duration: Duration,
    patience: Duration,
    /// Every run uses fresh keys under this, so nothing collides on a shared server.
    run_id: String,
}

impl Bench {
    async fn measure<L: Locker>(
        &self,
        locker: &Arc<L>,
        scenario: Scenario,
        variant: &str,
    ) -> Result<Measured, Failure> {
        let prefix = format!("distlock-bench:{}:{variant}:", self.run_id);
        workload::run(locker, scenario, &prefix, self.workers, self.duration, self.patience).await
    }

    /// A short uncontended run, not reported: connections, caches, allocator.
    async fn warm_up<L: Locker>(&self, locker: &Arc<L>) -> Result<(), Failure> {
        let prefix = format!("distlock-bench:{}:warm-up:", self.run_id);
        let time = (self.duration / 10).min(Duration::from_millis(200));
        workload::run(locker, Scenario::Distinct, &prefix, self.workers, time, self.patience).await.map(drop)
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
            "redis" => Self::Redis(Arc::new(RawRedis::connect(url, ttl, retry).await?)),
            "postgres" => Self::Postgres(Arc::new(RawPostgres::connect(url, ttl, retry).await?)),
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

/// A progress bar on stderr when it is a terminal; hidden otherwise.
fn progress_bar(runs: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(u64::try_from(runs).unwrap_or(u64::MAX));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:24}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}
