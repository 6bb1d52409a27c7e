//! The measurements behind the plots, through a [`LockManager`] on any store: cycle time
//! as more tasks cycle at once, cycle time of lock groups as they hold more keys, and
//! each task's wait on one hot key with fair and with barging waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{DynLockStore, Fairness, GroupMember, LockGroup, LockManager, LockOptions};

use super::locker::Library;
use super::record::{cdf, Figure, Ratios, Series};
use super::workload::{run, BenchError, Measured, Scenario, Stop};

/// Concurrent tasks of the cycle-time curve.
pub const TASKS: [usize; 5] = [1, 2, 4, 8, 16];
/// Group sizes of the group cycle-time curve.
pub const KEYS: [usize; 5] = [1, 2, 4, 6, 8];

/// What [`plot_series`] measures and how long.
#[derive(Debug, Clone, Copy)]
pub struct SweepPlan {
    /// How long each point (or fairness variant) runs.
    pub per_point: Duration,
    /// Leases.
    pub ttl: Duration,
    /// Waiting tasks' longest pause between attempts.
    pub retry: Duration,
    /// Tasks on the hot key of the fairness comparison.
    pub hot_tasks: usize,
    /// How long each of them holds the hot key.
    pub hold: Duration,
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

#[allow(clippy::cast_precision_loss)]
fn count(n: usize) -> f64 {
    n as f64
}

/// The median acquire + release cycle of `tasks` tasks cycling their own keys at once,
/// for each count in [`TASKS`], in µs.
///
/// # Errors
///
/// When the store fails.
pub async fn cycle_vs_tasks(
    library: &Arc<Library>,
    prefix: &str,
    per_point: Duration,
) -> Result<Vec<(f64, f64)>, BenchError> {
    let mut points = Vec::with_capacity(TASKS.len());
    for tasks in TASKS {
        let stop = Stop::At(Instant::now() + per_point);
        let measured =
            run(library, Scenario::Distinct { workers: tasks }, &format!("{prefix}tasks:{tasks}:"), stop).await?;
        if let Some(p50) = measured.quantile(0.5) {
            points.push((count(tasks), micros(p50)));
        }
    }
    Ok(points)
}

/// The median try_lock_group + release cycle of a group of `keys` exclusive names, one
/// task, for each size in [`KEYS`], in µs. Empty for a store without lock groups.
///
/// # Errors
///
/// When the store fails or refuses a group.
pub async fn cycle_vs_keys(
    store: &Arc<DynLockStore>,
    prefix: &str,
    per_point: Duration,
    ttl: Duration,
) -> Result<Vec<(f64, f64)>, BenchError> {
    if store.groups().is_none() {
        return Ok(Vec::new());
    }
    let locks = LockManager::new(Arc::clone(store));
    let mut points = Vec::with_capacity(KEYS.len());
    for keys in KEYS {
        let members: Result<Vec<GroupMember>, _> =
            (0..keys).map(|key| GroupMember::exclusive(&format!("{prefix}group:{keys}:{key}"))).collect();
        let group = LockGroup::new(members?)?;
        let mut cycles = Vec::new();
        let deadline = Instant::now() + per_point;
        while Instant::now() < deadline {
            let started = Instant::now();
            let Some(held) = locks.try_lock_group(&group, ttl).await? else {
                return Err(BenchError::Held(format!("a group of {keys} benchmark keys was held by someone else")));
            };
            held.release().await?;
            cycles.push(started.elapsed());
        }
        cycles.sort_unstable();
        if let Some(p50) = cycles.get(cycles.len() / 2) {
            points.push((count(keys), micros(*p50)));
        }
    }
    Ok(points)
}

/// What one fairness variant measured.
#[derive(Debug, Clone)]
pub struct Waits {
    /// Each task's mean wait for the hot key, in ms, longest first.
    pub per_task: Vec<f64>,
    /// Critical sections per second, all tasks together.
    pub sections_per_sec: f64,
}

/// `tasks` tasks take `{prefix}hot` in turn for `run_for`, each holding it `hold` (the
/// work of a critical section), waiting with `fairness`.
///
/// # Errors
///
/// When the store fails or a task panics.
pub async fn hot_key_waits(
    locks: &LockManager,
    prefix: &str,
    plan: &SweepPlan,
    fairness: Fairness,
) -> Result<Waits, BenchError> {
    let key = format!("{prefix}hot");
    let started = Instant::now();
    let deadline = started + plan.per_point;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..plan.hot_tasks {
        let (locks, key, plan) = (locks.clone(), key.clone(), *plan);
        tasks.spawn(async move {
            let (mut waited, mut sections) = (Duration::ZERO, 0u32);
            loop {
                let asked = Instant::now();
                let Some(left) = deadline.checked_duration_since(asked).filter(|left| !left.is_zero()) else { break };
                let options = LockOptions::new().wait(left).retry_interval(plan.retry).fairness(fairness);
                let Some(lock) = locks.try_lock_opts(&key, plan.ttl, &options).await? else { break };
                waited += asked.elapsed();
                sections += 1;
                tokio::time::sleep(plan.hold).await;
                lock.release().await?;
            }
            Ok::<_, BenchError>((waited, sections))
        });
    }
    let mut per_task = Vec::with_capacity(plan.hot_tasks);
    let mut total = 0u32;
    while let Some(joined) = tasks.join_next().await {
        let (waited, sections) = joined.map_err(|error| BenchError::Worker(error.to_string()))??;
        total += sections;
        per_task.push(waited.as_secs_f64() * 1e3 / f64::from(sections.max(1)));
    }
    per_task.sort_by(|a, b| b.total_cmp(a));
    Ok(Waits { per_task, sections_per_sec: f64::from(total) / started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE) })
}

/// Fair beside barging waiting on one hot key: each variant's per-task waits as a series,
/// and a comparison of time per section and the longest mean wait. Nothing for a store
/// that keeps no queue (its waiting is barging either way).
///
/// # Errors
///
/// As [`hot_key_waits`].
pub async fn fair_vs_barging(
    store: &Arc<DynLockStore>,
    suite: &str,
    prefix: &str,
    plan: &SweepPlan,
) -> Result<(Vec<Series>, Vec<Ratios>), BenchError> {
    if !store.capabilities().fair_queue {
        return Ok((Vec::new(), Vec::new()));
    }
    let locks = LockManager::new(Arc::clone(store));
    let barging = hot_key_waits(&locks, &format!("{prefix}barging:"), plan, Fairness::Barging).await?;
    let fair = hot_key_waits(&locks, &format!("{prefix}fair:"), plan, Fairness::Fair).await?;
    let series = [("fair", &fair), ("barging", &barging)]
        .into_iter()
        .map(|(name, waits)| Series {
            suite: suite.to_owned(),
            figure: Figure::FairWait,
            name: name.to_owned(),
            points: waits.per_task.iter().enumerate().map(|(rank, &wait)| (count(rank + 1), wait)).collect(),
        })
        .collect();
    let title = format!("fair vs barging waiting, {} tasks on one hot key, hold {:?}", plan.hot_tasks, plan.hold);
    let compare = |what: &str, unit: &str, measure: fn(&Waits) -> f64| {
        let samples = [vec![measure(&barging)], vec![measure(&fair)]];
        Ratios::of(suite, &format!("{title}: {what}"), unit, 1.0, &["barging", "fair"], &samples)
    };
    let ratios = vec![
        compare("time per section", "µs/section", |waits| 1e6 / waits.sections_per_sec.max(f64::MIN_POSITIVE)),
        compare("the longest per-task mean wait", "ms", |waits| waits.per_task.first().copied().unwrap_or_default()),
    ];
    Ok((series, ratios))
}

/// The hand-off latencies of a hot-key run as a CDF series named `name`, in ms.
pub fn handoff_series(suite: &str, name: &str, measured: &Measured) -> Series {
    #[allow(clippy::cast_precision_loss)]
    let millis: Vec<f64> = measured.latencies.iter().map(|&nanos| nanos as f64 / 1e6).collect();
    Series { suite: suite.to_owned(), figure: Figure::Handoff, name: name.to_owned(), points: cdf(&millis, 200) }
}

/// Every plot's measurements but the hand-off's (which come from the hot-key scenario the
/// caller runs anyway) for `store` under `suite`: cycle time vs tasks and vs keys held,
/// fair vs barging waits, and the fairness comparison.
///
/// # Errors
///
/// When the store fails.
pub async fn plot_series(
    store: &Arc<DynLockStore>,
    suite: &str,
    prefix: &str,
    plan: &SweepPlan,
) -> Result<(Vec<Series>, Vec<Ratios>), BenchError> {
    let library = Arc::new(Library::new(LockManager::new(Arc::clone(store)), plan.ttl, plan.retry));
    let curve = |figure, points| Series { suite: suite.to_owned(), figure, name: "distlock".to_owned(), points };
    let mut series = vec![curve(Figure::CycleVsTasks, cycle_vs_tasks(&library, prefix, plan.per_point).await?)];
    let keys = cycle_vs_keys(store, prefix, plan.per_point, plan.ttl).await?;
    if !keys.is_empty() {
        series.push(curve(Figure::CycleVsKeys, keys));
    }
    let (fair, ratios) = fair_vs_barging(store, suite, prefix, plan).await?;
    series.extend(fair);
    Ok((series, ratios))
}
