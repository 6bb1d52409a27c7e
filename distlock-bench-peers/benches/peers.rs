//! distlock beside other Rust lock crates, in one process, against the same servers.
//!
//! ```text
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 \
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!   cargo bench --manifest-path distlock-bench-peers/Cargo.toml
//! ```
//!
//! A workspace of its own (`distlock-bench-peers/`): the peers, and the TLS and macro features they
//! turn on in `redis` and `sqlx`, are built for this benchmark only.
//!
//! Scenarios (each an acquire + release cycle of a free key, 30 s TTL):
//! - uncontended: one task cycling one key, the contenders taking turns 10 cycles at a
//!   time, each turn run in the benchmark's own task (as the stores' own uncontended
//!   comparisons run);
//! - distinct: 8 tasks, each cycling its own key;
//! - hot key (Redis): 8 tasks loop acquire → hold 2 ms → release on one key, each variant
//!   for `DISTLOCK_FAIR_SECONDS` (default 10) in all, in rounds that rotate the variants
//!   (`kit::fair_bench::in_rounds`): sections per second, and the worst task's
//!   p99 wait as a multiple of the fair share (`kit::fair_bench`'s figures). distlock waits
//!   fair (a store with `fair=true&notifications=true`, on a prefix of its own) and barging; `rslock` waits with
//!   `acquire_no_guard` (attempts with a random pause of up to its retry delay), as it
//!   comes (200 ms) and with a 10 ms retry delay.
//!
//! Contenders:
//! - Redis: distlock's `RedisLockStore` through `LockManager::try_lock` + `release`;
//!   `rslock` 0.10 (`LockManager::lock` + `unlock`, one server, one attempt);
//!   `distributed-lock` 0.2 (`RedisLockProvider` → `create_lock` → `try_acquire` →
//!   `release`).
//! - PostgreSQL: distlock's `PostgresLockStore` (lease table) through `LockManager`;
//!   `distributed-lock` 0.2 (`PostgresLockProvider`: session advisory locks).
//!
//! Rounds rotate the order of the contenders; the median round is reported, and each
//! peer's time as a ratio of distlock's (above 1: the peer is slower). Scenarios, rounds
//! and report are the conformance kit's benchmark harness (`kit::bench`), each peer a
//! `Locker`. Keys live under a
//! random prefix and are all released; nothing is flushed.

use std::sync::Arc;
use std::time::Duration;

use distlock::{DynLockStore, LockError};
use distlock_conformance::kit::bench::record::{self, RatioRow, Ratios, Record};
use distlock_conformance::kit::bench::{
    interleaved_cycles, interleaved_rounds, on_worker, one_cycle, report_against_first, run, BenchError, Library,
    Locker, Scenario, Stop,
};
use distlock_conformance::kit::fair_bench::{self, FairFigures};
use distributed_lock::{DistributedLock as _, LockHandle as _};
use tokio::time::Instant;

/// Rounds of the uncontended and distinct-key comparisons: a few seconds in all, and
/// enough that one slow stretch of a shared machine does not decide the median.
const ROUNDS: usize = 21;
const CYCLES: u64 = 1_000;
/// Uncontended cycles a contender runs at its turn.
const TURN_CYCLES: u64 = 10;
const TASKS: usize = 8;
const TASK_CYCLES: u64 = 250;
const TTL: Duration = Duration::from_secs(30);
/// How long each task of the hot-key comparison holds the key.
const HOLD: Duration = Duration::from_millis(2);

fn peer_error(peer: &'static str, operation: &'static str, key: &str, error: impl std::fmt::Display) -> LockError {
    LockError::store(peer, operation, Some(key), error.to_string())
}

struct Rslock(rslock::LockManager);

impl Locker for Rslock {
    type Key = String;
    type Guard = rslock::Lock;

    fn key(&self, name: &str) -> Result<String, LockError> {
        Ok(name.to_owned())
    }

    async fn acquire(&self, key: &String, _wait: Duration) -> Result<Option<rslock::Lock>, LockError> {
        let lock = self.0.lock(key.as_str(), TTL).await.map_err(|error| peer_error("rslock", "acquire", key, error))?;
        Ok(Some(lock))
    }

    async fn release(&self, _key: &String, lock: rslock::Lock) -> Result<bool, LockError> {
        self.0.unlock(&lock).await;
        Ok(true)
    }
}

/// `distributed-lock`'s providers: `create_lock` → `try_acquire` → `release`.
struct Dl<P>(P);

impl<P> Locker for Dl<P>
where
    P: distributed_lock::LockProvider + Send + Sync + 'static,
    P::Lock: Send + Sync + 'static,
    <P::Lock as distributed_lock::DistributedLock>::Handle: Send + 'static,
{
    type Key = P::Lock;
    type Guard = <P::Lock as distributed_lock::DistributedLock>::Handle;

    fn key(&self, name: &str) -> Result<P::Lock, LockError> {
        Ok(self.0.create_lock(name))
    }

    async fn acquire(&self, lock: &P::Lock, _wait: Duration) -> Result<Option<Self::Guard>, LockError> {
        let name = lock.name().to_owned();
        lock.try_acquire().await.map_err(|error| peer_error("distributed-lock", "acquire", &name, error))
    }

    async fn release(&self, lock: &P::Lock, handle: Self::Guard) -> Result<bool, LockError> {
        let name = lock.name().to_owned();
        handle.release().await.map_err(|error| peer_error("distributed-lock", "release", &name, error))?;
        Ok(true)
    }
}

/// The contenders of one store, behind one enum so rounds can rotate them.
enum Any {
    Distlock(Arc<Library>),
    Rslock(Arc<Rslock>),
    DlRedis(Arc<Dl<distributed_lock::RedisLockProvider>>),
    DlPostgres(Arc<Dl<distributed_lock::PostgresLockProvider>>),
}

impl Any {
    fn name(&self) -> &'static str {
        match self {
            Self::Distlock(_) => "distlock",
            Self::Rslock(_) => "rslock",
            Self::DlRedis(_) | Self::DlPostgres(_) => "distributed-lock",
        }
    }

    /// `cycles` acquire + release cycles of `{prefix}{name}:uncontended` in this task, as
    /// the stores' own uncontended comparisons run them: no task is spawned per turn.
    async fn cycles_here(&self, prefix: &str, cycles: u64) {
        async fn cycles_of<L: Locker>(locker: &L, name: &str, cycles: u64) -> Result<(), BenchError> {
            let key = locker.key(name)?;
            for _ in 0..cycles {
                one_cycle(locker, &key, name).await?;
            }
            Ok(())
        }
        let name = format!("{prefix}{}:uncontended", self.name());
        let done = match self {
            Self::Distlock(c) => cycles_of(&**c, &name, cycles).await,
            Self::Rslock(c) => cycles_of(&**c, &name, cycles).await,
            Self::DlRedis(c) => cycles_of(&**c, &name, cycles).await,
            Self::DlPostgres(c) => cycles_of(&**c, &name, cycles).await,
        };
        done.unwrap_or_else(|error| panic!("{}: {error}", self.name()));
    }

    async fn run(&self, scenario: Scenario, prefix: &str, cycles: u64) {
        let prefix = format!("{prefix}{}:", self.name());
        let stop = Stop::Cycles(cycles);
        let measured = match self {
            Self::Distlock(c) => run(c, scenario, &prefix, stop).await,
            Self::Rslock(c) => run(c, scenario, &prefix, stop).await,
            Self::DlRedis(c) => run(c, scenario, &prefix, stop).await,
            Self::DlPostgres(c) => run(c, scenario, &prefix, stop).await,
        };
        measured.unwrap_or_else(|error| panic!("{}: {error}", self.name()));
    }
}

async fn compare(store: &str, contenders: &[Any]) {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("distlock-peers:{run_id}:");
    let indices: Vec<usize> = (0..contenders.len()).collect();
    let names: Vec<&str> = contenders.iter().map(Any::name).collect();
    // One task: the contenders take turns, TURN_CYCLES cycles at a time, so that a slower
    // stretch of the machine meets them all.
    let samples =
        interleaved_cycles(&indices, ROUNDS, CYCLES / TURN_CYCLES, |i| contenders[i].cycles_here(&prefix, TURN_CYCLES))
            .await;
    let title = format!(
        "{store} · uncontended (1 task, taking turns {TURN_CYCLES} cycles at a time): µs per acquire + release \
         cycle (median of {ROUNDS} rounds)"
    );
    report_against_first(&title, "µs", (CYCLES / TURN_CYCLES * TURN_CYCLES) as f64, &names, &samples);
    let scenario = Scenario::Distinct { workers: TASKS };
    let samples = interleaved_rounds(&indices, ROUNDS, |i| contenders[i].run(scenario, &prefix, TASK_CYCLES)).await;
    let title =
        format!("{store} · distinct keys ({TASKS} tasks): µs per acquire + release cycle (median of {ROUNDS} rounds)");
    report_against_first(&title, "µs", (TASK_CYCLES * TASKS as u64) as f64, &names, &samples);
}

/// [`TASKS`] tasks on one key through `rslock` until `until`: each task's waits in ms.
async fn rslock_hot_key(manager: Arc<rslock::LockManager>, key: &str, until: Instant) -> Vec<Vec<f64>> {
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let (manager, key) = (Arc::clone(&manager), key.to_owned());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                while Instant::now() < until {
                    let asked = Instant::now();
                    let lock = manager.acquire_no_guard(key.as_bytes(), TTL).await.expect("rslock hot key");
                    waits.push(asked.elapsed().as_secs_f64() * 1e3);
                    tokio::time::sleep(HOLD).await;
                    manager.unlock(&lock).await;
                }
                waits
            })
        })
        .collect();
    let mut all = Vec::with_capacity(TASKS);
    for handle in handles {
        all.push(handle.await.expect("rslock task"));
    }
    all
}

/// One hot key on Redis: rslock (as it comes, and with a 10 ms retry delay) beside
/// distlock waiting fair and barging; prints and records sections per second and each
/// variant's worst task p99 wait ÷ its fair share.
async fn hot_key(url: &str, prefix: &str) {
    let run_for = fair_bench::run_for();
    // A prefix of its own: the other comparisons' store uses the default prefix without
    // fair waiting, and a prefix's settings are shared by all its clients.
    let fair_url = format!("{url}?prefix=peers-hot-{}&fair=true&notifications=true", uuid::Uuid::new_v4().simple());
    let store: Arc<DynLockStore> = distlock::connect(&fair_url).await.expect("distlock redis, fair");
    let rslock = |delay: Option<Duration>| {
        let mut manager = rslock::LockManager::new(vec![url.to_owned()]);
        if let Some(delay) = delay {
            manager.set_retry(3, delay);
        }
        Arc::new(manager)
    };
    let managers = [rslock(None), rslock(Some(Duration::from_millis(10)))];
    let names = ["rslock", "rslock, 10 ms retry", "distlock, fair", "distlock, barging"];
    let rounds = fair_bench::in_rounds(&[0, 1, 2, 3], fair_bench::ROUNDS, run_for, |variant, until| {
        let key = format!("{prefix}hot:{variant}");
        let (store, manager) = (Arc::clone(&store), Arc::clone(&managers[variant % 2]));
        async move {
            match variant {
                0 | 1 => rslock_hot_key(manager, &key, until).await,
                _ => fair_bench::hot_key(store, &key, TASKS, HOLD, until, variant == 2).await,
            }
        }
    })
    .await;
    let variants: Vec<(&str, FairFigures)> = names.iter().zip(&rounds).map(|(name, r)| (*name, r.figures)).collect();
    let who = format!(
        "redis · hot key, {TASKS} tasks, hold {HOLD:?}, {run_for:?} per variant in {} rounds",
        fair_bench::ROUNDS
    );
    println!("{who}");
    for (name, figures) in &variants {
        println!(
            "  {name:<20}{:>7.0} sections/s ({:.2}× rslock)   worst task p99 wait {:>8.2} ms = {:>6.2}× its fair share",
            figures.sections_per_s,
            figures.sections_per_s / variants[0].1.sections_per_s,
            figures.worst_p99_ms,
            figures.p99_ratio()
        );
    }
    let throughput: Vec<Vec<f64>> = rounds.iter().map(|r| r.per_round.clone()).collect();
    let suite = record::suite();
    let sections = Ratios::of(&suite, &format!("{who}: sections per second"), "sections/s", 1.0, &names, &throughput);
    fair_bench::print_rounds(&sections);
    let rows = variants
        .iter()
        .map(|(name, figures)| {
            let ratio = figures.p99_ratio();
            RatioRow { name: (*name).to_owned(), value: figures.worst_p99_ms, ratio, min: ratio, max: ratio }
        })
        .collect();
    let title = format!("{who}: worst task p99 wait, each ÷ its variant's fair share");
    let waits = Ratios { suite, title, unit: "ms".to_owned(), rounds: fair_bench::ROUNDS, rows };
    record::emit(&Record::Ratios(sections));
    record::emit(&Record::Ratios(waits));
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        let library = |store| Arc::new(Library::new(distlock::LockManager::new(store), TTL, Duration::from_millis(50)));
        match std::env::var("DISTLOCK_REDIS_URL") {
            Ok(url) => {
                let distlock = library(distlock::connect(&url).await.expect("distlock redis"));
                let mut rslock = rslock::LockManager::new(vec![url.clone()]);
                rslock.set_retry(1, Duration::from_millis(1));
                let dl = distributed_lock::RedisLockProvider::new(url.clone()).await.expect("distributed-lock redis");
                compare(
                    "redis",
                    &[Any::Distlock(distlock), Any::Rslock(Arc::new(Rslock(rslock))), Any::DlRedis(Arc::new(Dl(dl)))],
                )
                .await;
                let prefix = format!("distlock-peers:{}:", uuid::Uuid::new_v4().simple());
                hot_key(&url, &prefix).await;
            }
            Err(_) => println!("redis: skipped (set DISTLOCK_REDIS_URL)"),
        }
        match std::env::var("DISTLOCK_POSTGRES_URL") {
            Ok(url) => {
                let distlock = library(distlock::connect(&url).await.expect("distlock postgres"));
                let dl = distributed_lock::PostgresLockProvider::builder()
                    .connection_string(url.clone())
                    .build()
                    .await
                    .expect("distributed-lock postgres");
                compare("postgres", &[Any::Distlock(distlock), Any::DlPostgres(Arc::new(Dl(dl)))]).await;
            }
            Err(_) => println!("postgres: skipped (set DISTLOCK_POSTGRES_URL)"),
        }
    }));
}
