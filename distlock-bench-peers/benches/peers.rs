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
//! - uncontended: one task cycling one key;
//! - distinct: 8 tasks, each cycling its own key.
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

use distlock::LockError;
use distlock_conformance::kit::bench::{
    interleaved_rounds, report_against_first, run, Library, Locker, Scenario, Stop,
};
use distributed_lock::{DistributedLock as _, LockHandle as _};

const ROUNDS: usize = 7;
const CYCLES: u64 = 1_000;
const TASKS: usize = 8;
const TASK_CYCLES: u64 = 250;
const TTL: Duration = Duration::from_secs(30);

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
    for (title, scenario, cycles, total) in [
        ("uncontended (1 task)", Scenario::Uncontended, CYCLES, CYCLES),
        ("distinct keys (8 tasks)", Scenario::Distinct { workers: TASKS }, TASK_CYCLES, TASK_CYCLES * TASKS as u64),
    ] {
        let samples = interleaved_rounds(&indices, ROUNDS, |i| contenders[i].run(scenario, &prefix, cycles)).await;
        let title = format!("{store} · {title}: µs per acquire + release cycle (median of {ROUNDS} rounds)");
        report_against_first(&title, "µs", total as f64, &names, &samples);
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
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
    });
}
