//! Fair waiting, measured: tasks loop acquire → hold → release on one hot key, each
//! waiting with the library's own waiting, once fair (the default) and once barging, in
//! the same run; and the same spread over several processes.
//!
//! In one process the variants take turns: [`ROUNDS`] rounds, each variant running a
//! share of the time in every round, in an order that rotates, so that a slower stretch
//! of a shared machine meets them all; sections per second are compared round by round.
//!
//! Reported per variant: sections per second; the *fair share* — the wait of a task under
//! strict turn-taking, `(tasks − 1) ×` the mean section time; the worst task's p99 wait as
//! a multiple of the fair share; and the spread of acquisitions per task (max ÷ min).
//!
//! A process runs as a worker of the cross-process comparison when [`worker_spec`] finds
//! its role in the environment: the benchmark's `main` then calls [`run_worker`] with its
//! store instead of benchmarking. Workers open their connections and the store's release
//! notifications before the common start, so the waits measured are steady-state ones.

use std::future::Future;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_api::{DynLockStore, LockManager, LockOptions};
use distlock_bench::record::{self, RatioRow, Ratios, Record};
use tokio::time::Instant;

const WORKER_VAR: &str = "DISTLOCK_FAIR_WORKER";

/// Rounds of an in-process comparison ([`in_rounds`]): each variant runs `run_for ÷
/// ROUNDS` per round.
pub const ROUNDS: usize = 5;
const TTL: Duration = Duration::from_secs(30);

/// How long each variant runs: `DISTLOCK_FAIR_SECONDS` when set to a positive number of
/// seconds, else 10 s.
pub fn run_for() -> Duration {
    let seconds = std::env::var("DISTLOCK_FAIR_SECONDS").ok().and_then(|s| s.parse().ok()).filter(|&s| s > 0);
    Duration::from_secs(seconds.unwrap_or(10))
}

/// What [`compare`] runs.
#[derive(Debug, Clone, Copy)]
pub struct FairPlan {
    /// Tasks in one process (the in-process comparison).
    pub tasks: usize,
    /// The cross-process comparisons, each as processes × tasks in each; empty skips them.
    pub processes: &'static [(usize, usize)],
    /// How long each holds the key.
    pub hold: Duration,
    /// How long each variant runs.
    pub run_for: Duration,
}

/// The figures of one variant.
#[derive(Debug, Clone, Copy)]
pub struct FairFigures {
    /// Sections per second, all tasks together.
    pub sections_per_s: f64,
    /// The wait under strict turn-taking, in ms.
    pub fair_share_ms: f64,
    /// The worst task's p99 wait, in ms.
    pub worst_p99_ms: f64,
    /// Acquisitions of the busiest task ÷ the idlest's.
    pub spread: f64,
}

impl FairFigures {
    /// The worst task's p99 wait ÷ the fair share.
    pub fn p99_ratio(&self) -> f64 {
        self.worst_p99_ms / self.fair_share_ms
    }

    /// Computes the figures from each task's waits (ms) over `elapsed`.
    pub fn of(waits: &[Vec<f64>], elapsed: Duration) -> Self {
        let sections: usize = waits.iter().map(Vec::len).sum();
        #[allow(clippy::cast_precision_loss)]
        let (sections_f, tasks) = (sections.max(1) as f64, waits.len().max(1) as f64);
        let elapsed_ms = elapsed.as_secs_f64() * 1e3;
        let worst_p99_ms = waits.iter().map(|task| p99(task.clone())).fold(0.0, f64::max);
        let most = waits.iter().map(Vec::len).max().unwrap_or(0);
        let least = waits.iter().map(Vec::len).min().unwrap_or(0).max(1);
        #[allow(clippy::cast_precision_loss)]
        let spread = most as f64 / least as f64;
        Self {
            sections_per_s: sections_f / elapsed.as_secs_f64(),
            fair_share_ms: (tasks - 1.0) * elapsed_ms / sections_f,
            worst_p99_ms,
            spread,
        }
    }

    fn print(&self, label: &str) {
        println!(
            "  {label:<8} {:>7.0} sections/s  fair share {:>6.2} ms  worst task p99 wait {:>8.2} ms = {:>6.2}× the fair share  acquisitions max÷min {:>5.2}",
            self.sections_per_s,
            self.fair_share_ms,
            self.worst_p99_ms,
            self.p99_ratio(),
            self.spread
        );
    }
}

/// One variant of [`in_rounds`]: its figures over all rounds (each task's waits of every
/// round together, over the variant's whole running time), and its sections per second
/// round by round.
#[derive(Debug, Clone)]
pub struct RoundFigures {
    /// Over all rounds.
    pub figures: FairFigures,
    /// Sections per second in each round.
    pub per_round: Vec<f64>,
}

/// Runs every variant `rounds` times for `run_for ÷ rounds` each, taking turns in an order
/// that rotates every round; `run(variant, until)` runs one variant until `until` and
/// returns each task's waits (ms). Returns the variants' figures in the order of
/// `variants`.
pub async fn in_rounds<V, F, Fut>(variants: &[V], rounds: usize, run_for: Duration, run: F) -> Vec<RoundFigures>
where
    V: Copy,
    F: Fn(V, Instant) -> Fut,
    Fut: Future<Output = Vec<Vec<f64>>>,
{
    let rounds = rounds.max(1);
    let share = run_for / u32::try_from(rounds).unwrap_or(u32::MAX);
    let mut waits: Vec<Vec<Vec<f64>>> = vec![Vec::new(); variants.len()];
    let mut elapsed = vec![Duration::ZERO; variants.len()];
    let mut per_round = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..rounds {
        for i in 0..variants.len() {
            let index = (i + round) % variants.len();
            let started = Instant::now();
            let round_waits = run(variants[index], started + share).await;
            let took = started.elapsed();
            let sections: usize = round_waits.iter().map(Vec::len).sum();
            #[allow(clippy::cast_precision_loss)]
            per_round[index].push(sections as f64 / took.as_secs_f64().max(f64::MIN_POSITIVE));
            elapsed[index] += took;
            let tasks = &mut waits[index];
            for (task, task_waits) in round_waits.into_iter().enumerate() {
                if tasks.len() <= task {
                    tasks.resize_with(task + 1, Vec::new);
                }
                tasks[task].extend(task_waits);
            }
        }
    }
    waits
        .iter()
        .zip(elapsed)
        .zip(per_round)
        .map(|((waits, elapsed), per_round)| RoundFigures { figures: FairFigures::of(waits, elapsed), per_round })
        .collect()
}

/// Prints each variant of a sections-per-second comparison ([`Ratios::of`] on
/// [`RoundFigures::per_round`]) ÷ its baseline: the median and the range of the
/// per-round ratios.
pub fn print_rounds(sections: &Ratios) {
    let Some((base, variants)) = sections.rows.split_first() else { return };
    for row in variants {
        println!(
            "  {} ÷ {} sections/s: {:.3}× (median of the rounds' ratios), per round {:.3}×–{:.3}× over {} rounds",
            row.name, base.name, row.ratio, row.min, row.max, sections.rounds
        );
    }
}

fn p99(mut samples: Vec<f64>) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() * 99).div_ceil(100)).saturating_sub(1)]
}

fn options(fair: bool) -> LockOptions {
    let options = LockOptions::new().wait(Duration::from_secs(60));
    if fair {
        options
    } else {
        options.barging()
    }
}

/// `tasks` tasks on `key` until `until`: each task's waits in ms.
///
/// # Panics
///
/// When the store fails: a benchmark has no one to hand its error to.
pub async fn hot_key(
    store: Arc<DynLockStore>,
    key: &str,
    tasks: usize,
    hold: Duration,
    until: Instant,
    fair: bool,
) -> Vec<Vec<f64>> {
    let locks = LockManager::new(store);
    let options = options(fair);
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (locks, key) = (locks.clone(), key.to_owned());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                while Instant::now() < until {
                    let asked = Instant::now();
                    let held = locks.lock_opts(&key, TTL, &options).await.expect("hot key");
                    waits.push(asked.elapsed().as_secs_f64() * 1e3);
                    tokio::time::sleep(hold).await;
                    held.release().await.expect("release");
                }
                waits
            })
        })
        .collect();
    let mut all = Vec::with_capacity(tasks);
    for handle in handles {
        all.push(handle.await.expect("task"));
    }
    all
}

/// A worker process's share of the cross-process comparison.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// What the benchmark needs to open the same store (a key prefix, a table name).
    pub store: String,
    key: String,
    tasks: usize,
    hold: Duration,
    start_unix_ms: u64,
    run_for: Duration,
    fair: bool,
}

/// The spec of this process, when it is a worker of [`across_processes`].
pub fn worker_spec() -> Option<WorkerSpec> {
    let spec = std::env::var(WORKER_VAR).ok()?;
    let mut parts = spec.split('|');
    let store = parts.next()?.to_owned();
    let key = parts.next()?.to_owned();
    let tasks = parts.next()?.parse().ok()?;
    let hold = Duration::from_micros(parts.next()?.parse().ok()?);
    let start = parts.next()?.parse().ok()?;
    let run_for = Duration::from_millis(parts.next()?.parse().ok()?);
    let fair = parts.next()? == "fair";
    Some(WorkerSpec { store, key, tasks, hold, start_unix_ms: start, run_for, fair })
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs a worker process's share on `store` and prints each task's waits on a line of
/// its own (`WAITS w1,w2,…`).
///
/// # Panics
///
/// When the store fails.
pub async fn run_worker(store: Arc<DynLockStore>, spec: &WorkerSpec) {
    warm_up(&store, &spec.key, spec.tasks).await;
    let delay = Duration::from_millis(spec.start_unix_ms.saturating_sub(unix_ms()));
    tokio::time::sleep(delay).await;
    let until = Instant::now() + spec.run_for;
    for waits in hot_key(store, &spec.key, spec.tasks, spec.hold, until, spec.fair).await {
        let line: Vec<String> = waits.iter().map(|w| format!("{w:.3}")).collect();
        println!("WAITS {}", line.join(","));
    }
}

/// Connections a worker opens per task before the start: a task's wait, its release and
/// the wake-up a release sends may each be on a connection of the pool at once.
const WARM_CONNECTIONS_PER_TASK: usize = 4;

/// Opens before the start what a worker's tasks use, so that their measured waits do not
/// include connecting (nor a connection refused mid-run while the server is busy
/// interrupting listeners): [`WARM_CONNECTIONS_PER_TASK`] connections per task (that
/// many acquisitions at once, each on a key of its own, as far as the pool allows) and
/// the store's release notifications (a short wait on a held key).
async fn warm_up(store: &Arc<DynLockStore>, key: &str, tasks: usize) {
    let locks = LockManager::new(Arc::clone(store));
    let ttl = Duration::from_secs(10);
    let warm = |i: usize| format!("{key}:warm:{}:{i}", std::process::id());
    let attempts = (0..tasks * WARM_CONNECTIONS_PER_TASK).map(|i| {
        let (locks, warm) = (&locks, warm(i));
        async move { locks.try_lock(&warm, ttl).await.expect("warm-up lock") }
    });
    let held = futures_util::future::join_all(attempts).await;
    if let Some(Some(first)) = held.first() {
        let options = LockOptions::new().wait(Duration::from_millis(20)).retry_interval(Duration::from_millis(10));
        let waited = locks.try_lock_opts(first.key().as_str(), ttl, &options).await.expect("warm-up wait");
        assert!(waited.is_none(), "a held warm-up key was taken");
    }
    for lock in held.into_iter().flatten() {
        lock.release().await.expect("warm-up release");
    }
}

/// Runs `processes` copies of this executable as workers of `tasks` tasks each, holding
/// `hold` for `run_for` (same environment, so the same server; `store` tells them which
/// prefix or table), and collects every task's waits.
///
/// # Panics
///
/// When a worker cannot be started or fails.
pub fn across_processes(
    store: &str,
    key: &str,
    (processes, tasks, hold, run_for): (usize, usize, Duration, Duration),
    fair: bool,
) -> Vec<Vec<f64>> {
    let exe = std::env::current_exe().expect("the benchmark's own executable");
    let start = unix_ms() + 3_000; // every worker is connected and warmed up by then
    let spec = format!(
        "{store}|{key}|{tasks}|{}|{start}|{}|{}",
        hold.as_micros(),
        run_for.as_millis(),
        if fair { "fair" } else { "barging" }
    );
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .arg("--bench")
                .env(WORKER_VAR, &spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let mut all = Vec::new();
    for child in children {
        let output = child.wait_with_output().expect("worker");
        assert!(
            output.status.success(),
            "a worker failed ({:?}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .take_while(|line| !line.starts_with("stack backtrace"))
                .take(5)
                .collect::<Vec<_>>()
                .join(" / ")
        );
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(waits) = line.strip_prefix("WAITS ") {
                all.push(waits.split(',').filter_map(|w| w.parse().ok()).collect());
            }
        }
    }
    all
}

/// Fair vs barging on one hot key, in one process and across processes (workers open
/// the store named by `store_arg`); prints both and returns `(fair, barging)` for the
/// in-process run and, when run, for the cross-process one.
///
/// # Panics
///
/// When the store fails.
pub async fn compare(
    store: Arc<DynLockStore>,
    store_arg: &str,
    prefix: &str,
    plan: FairPlan,
) -> Vec<(FairFigures, FairFigures)> {
    let mut results = Vec::new();
    println!(
        "fair waiting: {} tasks on one key, hold {:?}, {:?} per variant in {ROUNDS} rounds",
        plan.tasks, plan.hold, plan.run_for
    );
    let pair = in_rounds(&[true, false], ROUNDS, plan.run_for, |fair, until| {
        let key = format!("{prefix}fair:{}", if fair { "fair" } else { "barging" });
        let store = Arc::clone(&store);
        async move { hot_key(store, &key, plan.tasks, plan.hold, until, fair).await }
    })
    .await;
    let [fair, barging] = [&pair[0], &pair[1]];
    fair.figures.print("fair");
    barging.figures.print("barging");
    print_rounds(&record_pair(&format!("{} tasks", plan.tasks), &plan, fair, barging));
    results.push((fair.figures, barging.figures));
    for &(processes, tasks) in plan.processes {
        println!("fair waiting: {processes} processes × {tasks} tasks on one key");
        let mut pair = Vec::new();
        for fair in [true, false] {
            let key = format!("{prefix}fair:procs{processes}x{tasks}:{}", if fair { "fair" } else { "barging" });
            let store_arg = store_arg.to_owned();
            let shape = (processes, tasks, plan.hold, plan.run_for);
            let waits = tokio::task::spawn_blocking(move || across_processes(&store_arg, &key, shape, fair))
                .await
                .expect("workers");
            // Every worker runs `run_for` (plus its last section).
            let figures = FairFigures::of(&waits, plan.run_for);
            figures.print(if fair { "fair" } else { "barging" });
            pair.push(RoundFigures { figures, per_round: vec![figures.sections_per_s] });
        }
        record_pair(&format!("{processes} processes × {tasks} tasks"), &plan, &pair[0], &pair[1]);
        results.push((pair[0].figures, pair[1].figures));
    }
    results
}

/// Writes one fair-vs-barging run as results for `BENCHMARKS.md` (when
/// `DISTLOCK_BENCH_OUT` is set): each variant's worst task p99 wait beside the fair
/// share, and fair sections per second beside barging, round by round. Returns the
/// latter.
fn record_pair(who: &str, plan: &FairPlan, fair: &RoundFigures, barging: &RoundFigures) -> Ratios {
    let rounds = fair.per_round.len();
    let (fair_rounds, barging_rounds) = (fair.per_round.clone(), barging.per_round.clone());
    let (fair, barging) = (fair.figures, barging.figures);
    let suite = record::suite();
    let row =
        |name: &str, value: f64, ratio: f64| RatioRow { name: name.to_owned(), value, ratio, min: ratio, max: ratio };
    let waits = Ratios {
        suite: suite.clone(),
        title: format!(
            "fair waiting, {who} on one key, hold {:?}: worst task p99 wait, each ÷ its variant's fair share",
            plan.hold
        ),
        unit: "ms".to_owned(),
        rounds,
        rows: vec![
            row("fair share", fair.fair_share_ms, 1.0),
            row("fair", fair.worst_p99_ms, fair.p99_ratio()),
            row("barging", barging.worst_p99_ms, barging.p99_ratio()),
        ],
    };
    let throughput = Ratios::of(
        &suite,
        &format!("fair waiting, {who} on one key, hold {:?}: sections per second", plan.hold),
        "sections/s",
        1.0,
        &["barging", "fair"],
        &[barging_rounds, fair_rounds],
    );
    record::emit(&Record::Ratios(waits));
    record::emit(&Record::Ratios(throughput.clone()));
    throughput
}
