//! One benchmark harness for every store's benchmark and for `distlock bench`.
//!
//! - [`Locker`]: what is measured — distlock's manager ([`Library`]), a store without the
//!   manager ([`StoreDirect`]), or a store's own commands sent raw ([`RawMemory`],
//!   [`RawRedis`], [`RawPostgres`], [`RawMysql`], [`RawSqlite`]);
//! - [`run`]: the scenarios — a cycle loop on one key, N workers on distinct keys, N
//!   workers handing one hot key to each other ([`Scenario`]);
//! - [`interleaved_rounds`] and [`report_against_first`]: variants run back to back in
//!   rotating order, so load that drifts during a run hits them alike, and are reported as
//!   ratios to the first; [`SideBySide`] does both for raw / store / manager;
//!   [`interleaved_cycles`] interleaves one-task cycles one by one instead, for variants
//!   whose cost differs by less than the load drifts within a round.
//!
//! With `DISTLOCK_BENCH_OUT=dir`, every report is also written to `dir` as JSON lines
//! ([`record`]); [`document`] turns a directory of them into `BENCHMARKS.md` and its
//! SVG plots ([`plot`]), as `scripts/bench.sh` does.
//!
//! [`election`] measures leader election (hand-over, observer lag, failover after
//! `kill -9`), each store beside etcd's own election where there is one.
//!
//! The stores' own benchmarks add their comparisons (hand-off, fair waiting, lock groups)
//! in the test kit (`distlock_conformance::kit`); the `distlock` CLI's `bench` command
//! runs the scenarios here against a user's server.

pub mod document;
pub mod election;
mod locker;
pub mod plot;
mod raw_redis;
mod raw_sql;
mod raw_sqlite;
pub mod record;
pub mod sweep;
mod workload;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{DynLockStore, LockError, LockManager};

pub use self::locker::{Library, Locker, RawMemory, StoreDirect};
pub use self::raw_redis::RawRedis;
pub use self::raw_sql::{RawMysql, RawPostgres, RawSql, RawStatements};
pub use self::raw_sqlite::{RawSqlite, SqliteStatements};
pub use self::workload::{one_cycle, run, BenchError, Measured, Scenario, Stop};

/// Runs a benchmark's `body` as a task on the runtime's worker threads, where an
/// application's code runs, and returns its output (a panic in it is resumed here).
///
/// A benchmark's `main` blocks on this: `runtime.block_on(on_worker(async move { … }))`.
/// Code run by `block_on` itself runs on the calling thread, outside the workers: each
/// reply from the store then wakes that thread from its sleep, which costs more than
/// the work measured and would be counted in every comparison.
///
/// # Panics
///
/// Panics with `body`'s panic, or if the runtime shuts down before `body` finishes.
pub async fn on_worker<F>(body: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match tokio::spawn(body).await {
        Ok(output) => output,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("benchmark task ended without finishing: {error}"),
        },
    }
}

/// `DISTLOCK_BENCH_ROUNDS` when set to a positive number (short runs on a busy machine),
/// else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("DISTLOCK_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(default)
}

/// `DISTLOCK_BENCH_SCALE` when set to a factor in (0, 1] (`scripts/bench.sh --quick`
/// sets 0.2), else 1: the share of each round's work (sections, writer samples) that the
/// long-running comparisons do.
pub fn scale() -> f64 {
    std::env::var("DISTLOCK_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&f| f > 0.0 && f <= 1.0)
        .unwrap_or(1.0)
}

/// `n` times [`scale`], at least 1.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn scaled(n: usize) -> usize {
    ((n as f64 * scale()).round() as usize).max(1)
}

/// The median of `samples` (the upper one of an even count); 0 for none.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Runs `scenario` once per variant as a warm-up, then `rounds` times per variant,
/// rotating which variant goes first. Returns each variant's round durations in µs, in
/// the order of `variants`.
pub async fn interleaved_rounds<V, F, Fut>(variants: &[V], rounds: usize, scenario: F) -> Vec<Vec<f64>>
where
    V: Copy,
    F: Fn(V) -> Fut,
    Fut: Future<Output = ()>,
{
    // A round of one "cycle" per variant: the same warm-up, rotation and timing.
    interleaved_cycles(variants, rounds, 1, scenario).await
}

/// Runs one cycle of each variant as a warm-up, then `rounds` rounds of `cycles` cycles
/// per variant, the variants taking turns cycle by cycle (in an order that rotates every
/// cycle), each cycle timed on its own. Returns each variant's round totals in µs, in the
/// order of `variants`, as [`interleaved_rounds`] does.
///
/// A round of [`interleaved_rounds`] runs one variant's cycles back to back, so a slower
/// stretch of a shared machine (a neighbour's burst, lasting a round) lands on one
/// variant; here every variant's cycles are spread over the whole round and meet the same
/// stretches. For one-task cycles of a few hundred µs whose costs differ by 10–30 %.
pub async fn interleaved_cycles<V, F, Fut>(variants: &[V], rounds: usize, cycles: u64, cycle: F) -> Vec<Vec<f64>>
where
    V: Copy,
    F: Fn(V) -> Fut,
    Fut: Future<Output = ()>,
{
    for &variant in variants {
        cycle(variant).await;
    }
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    let mut turn = 0usize;
    for _ in 0..rounds {
        let mut totals = vec![Duration::ZERO; variants.len()];
        for _ in 0..cycles {
            for i in 0..variants.len() {
                let index = (i + turn) % variants.len();
                let started = Instant::now();
                cycle(variants[index]).await;
                totals[index] += started.elapsed();
            }
            turn = turn.wrapping_add(1);
        }
        for (sample, total) in samples.iter_mut().zip(totals) {
            sample.push(total.as_secs_f64() * 1e6);
        }
    }
    samples
}

/// Prints each variant's median round divided by `per` (e.g. µs per cycle), and for every
/// variant after the first its ratio to the first: the median of the per-round ratios (a
/// round's variants ran back to back, under the same load; the figure recorded), and that
/// of the medians; writes the comparison as a [`record::Ratios`] when
/// `DISTLOCK_BENCH_OUT` is set. Returns the per-`per` medians.
pub fn report_against_first(title: &str, unit: &str, per: f64, names: &[&str], samples: &[Vec<f64>]) -> Vec<f64> {
    let ratios = record::Ratios::of(&record::suite(), title, unit, per, names, samples);
    let medians: Vec<f64> = ratios.rows.iter().map(|row| row.value).collect();
    println!("{title}");
    let width = names.iter().map(|name| name.chars().count()).max().unwrap_or(0) + 1;
    for (i, row) in ratios.rows.iter().enumerate() {
        let (name, value) = (&row.name, row.value);
        if i == 0 {
            println!("  {name:<width$}{value:9.2} {unit}");
        } else {
            println!(
                "  {name:<width$}{value:9.2} {unit}   {:.3}× {} (median of per-round ratios; of the medians {:.3}×)",
                row.ratio,
                names[0],
                value / medians[0]
            );
        }
    }
    record::emit(&record::Record::Ratios(ratios));
    medians
}

/// How [`SideBySide::compare`] divides a round: per cycle (acquire + release), or per
/// statement (a cycle is two).
#[derive(Debug, Clone, Copy)]
pub struct Unit {
    /// Printed after each figure.
    pub name: &'static str,
    /// Operations per cycle.
    pub per_cycle: u32,
}

impl Unit {
    /// µs per acquire + release cycle.
    pub const CYCLE: Self = Self { name: "µs/cycle", per_cycle: 1 };
    /// µs per statement, two a cycle.
    pub const STATEMENT: Self = Self { name: "µs/statement", per_cycle: 2 };
}

/// What a store benchmark compares, in report order (ratios are to raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The store's own commands, sent raw.
    Raw,
    /// The store's `try_acquire` + `release` with a fixed token, no manager.
    Store,
    /// `LockManager::try_lock` + `DistributedLock::release`.
    Manager,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Self; 3] = [Self::Raw, Self::Store, Self::Manager];

    /// The variant's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Store => "store",
            Self::Manager => "manager",
        }
    }
}

/// One store three ways — its raw commands, the store alone, the manager — run side by
/// side on the same keys.
#[derive(Debug)]
pub struct SideBySide<R> {
    raw: Arc<R>,
    store: Arc<StoreDirect>,
    manager: Arc<Library>,
    prefix: String,
}

impl<R: Locker> SideBySide<R> {
    /// `raw` beside `store` and a manager on it, leases of `ttl`, waiting workers retrying
    /// every `retry`, every key named `{prefix}…`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a TTL the stores do not accept.
    pub fn new(
        raw: R,
        store: Arc<DynLockStore>,
        ttl: Duration,
        retry: Duration,
        prefix: &str,
    ) -> Result<Self, LockError> {
        let manager = Library::new(LockManager::new(Arc::clone(&store)), ttl, retry);
        Ok(Self {
            raw: Arc::new(raw),
            store: Arc::new(StoreDirect::new(store, ttl, retry)?),
            manager: Arc::new(manager),
            prefix: prefix.to_owned(),
        })
    }

    /// Runs `scenario` with `variant` until `stop`.
    ///
    /// # Errors
    ///
    /// As [`run`].
    pub async fn run(&self, variant: Variant, scenario: Scenario, stop: Stop) -> Result<Measured, BenchError> {
        match variant {
            Variant::Raw => run(&self.raw, scenario, &self.prefix, stop).await,
            Variant::Store => run(&self.store, scenario, &self.prefix, stop).await,
            Variant::Manager => run(&self.manager, scenario, &self.prefix, stop).await,
        }
    }

    /// `rounds` interleaved rounds of `scenario`, `cycles` per worker, for every variant;
    /// prints the median round in `unit` and the ratios to raw under `title` (and the
    /// throughput when several workers ran). Returns the medians in µs per cycle.
    ///
    /// # Panics
    ///
    /// When a run fails: a benchmark has no one to hand its error to.
    pub async fn compare(&self, title: &str, scenario: Scenario, cycles: u64, rounds: usize, unit: Unit) -> Vec<f64> {
        let workers = match scenario {
            Scenario::Uncontended => 1,
            Scenario::Distinct { workers } | Scenario::HotKey { workers, .. } => workers,
        };
        let samples = interleaved_rounds(&Variant::ALL, rounds, |variant| async move {
            let measured = self.run(variant, scenario, Stop::Cycles(cycles)).await;
            let measured = measured.unwrap_or_else(|error| panic!("{title}, {}: {error}", variant.name()));
            assert_eq!((measured.violations, measured.lost), (0, 0), "{title}, {}", variant.name());
        })
        .await;
        Self::report(title, workers, cycles, unit, &samples)
    }

    /// [`Scenario::Uncontended`] as [`interleaved_cycles`]: the variants take turns, each
    /// on a key of its own, `batch` acquire + release cycles a turn (timed together),
    /// `cycles` per variant and round, so that a slower stretch of a shared machine meets
    /// them all. A batch of 1 for a store behind a network hop, whose cycles take tens of
    /// µs: the two clock reads per turn are lost in the noise; a larger batch for cycles
    /// of a µs. Prints and returns as [`compare`](Self::compare).
    ///
    /// # Panics
    ///
    /// When a cycle fails.
    pub async fn compare_turns(&self, title: &str, cycles: u64, batch: u64, rounds: usize, unit: Unit) -> Vec<f64> {
        let batch = batch.clamp(1, cycles.max(1));
        let samples = self.uncontended_turns(title, cycles / batch, batch, rounds).await;
        Self::report(title, 1, cycles / batch * batch, unit, &samples)
    }

    fn report(title: &str, workers: usize, cycles: u64, unit: Unit, samples: &[Vec<f64>]) -> Vec<f64> {
        #[allow(clippy::cast_precision_loss)]
        let total = (workers as u64 * cycles) as f64;
        let names = Variant::ALL.map(Variant::name);
        let per_op = report_against_first(title, unit.name, total * f64::from(unit.per_cycle), &names, samples);
        let per_cycle: Vec<f64> = per_op.iter().map(|micros| micros * f64::from(unit.per_cycle)).collect();
        if workers > 1 {
            let throughput: Vec<String> =
                names.iter().zip(&per_cycle).map(|(name, micros)| format!("{name} {:.0}", 1e6 / micros)).collect();
            println!("  throughput: {} cycles/s", throughput.join(", "));
        }
        per_cycle
    }

    /// `batch` acquire + release cycles per variant in turn, `turns` per variant and
    /// round, on a key per variant (`{prefix}uncontended:<variant>`).
    async fn uncontended_turns(&self, title: &str, turns: u64, batch: u64, rounds: usize) -> Vec<Vec<f64>> {
        let names = Variant::ALL.map(|variant| format!("{}uncontended:{}", self.prefix, variant.name()));
        let fail =
            |variant: Variant, error: &dyn std::fmt::Display| -> ! { panic!("{title}, {}: {error}", variant.name()) };
        let [raw_name, store_name, manager_name] = &names;
        let raw_key = self.raw.key(raw_name).unwrap_or_else(|e| fail(Variant::Raw, &e));
        let store_key = self.store.key(store_name).unwrap_or_else(|e| fail(Variant::Store, &e));
        let manager_key = self.manager.key(manager_name).unwrap_or_else(|e| fail(Variant::Manager, &e));
        interleaved_cycles(&Variant::ALL, rounds, turns, |variant| {
            let (raw_key, store_key, manager_key) = (&raw_key, &store_key, &manager_key);
            async move {
                for _ in 0..batch {
                    let released = match variant {
                        Variant::Raw => one_cycle(&*self.raw, raw_key, raw_name).await,
                        Variant::Store => one_cycle(&*self.store, store_key, store_name).await,
                        Variant::Manager => one_cycle(&*self.manager, manager_key, manager_name).await,
                    };
                    match released {
                        Ok(true) => {}
                        Ok(false) => fail(variant, &"the lease was lost before its release"),
                        Err(error) => fail(variant, &error),
                    }
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[tokio::test]
    async fn interleaved_cycles_takes_turns_cycle_by_cycle_and_times_each_variant_apart() {
        let order = RefCell::new(Vec::new());
        let samples = interleaved_cycles(&[0usize, 1, 2], 2, 3, |variant| {
            order.borrow_mut().push(variant);
            async move {
                if variant == 2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
        .await;
        let order = order.into_inner();
        // One warm-up cycle each, then 2 rounds × 3 cycles × 3 variants, rotating.
        assert_eq!(&order[..3], &[0, 1, 2]);
        assert_eq!(&order[3..12], &[0, 1, 2, 1, 2, 0, 2, 0, 1]);
        assert_eq!(order.len(), 3 + 2 * 3 * 3);
        assert_eq!(samples.len(), 3);
        assert!(samples.iter().all(|rounds| rounds.len() == 2));
        // Only variant 2's cycles sleep: 3 × 20 ms per round, counted to it alone.
        assert!(samples[2].iter().all(|&us| us >= 60_000.0), "{samples:?}");
        assert!(samples[0].iter().chain(&samples[1]).all(|&us| us < 60_000.0), "{samples:?}");
    }
}
