//! distlock beside other Rust lock crates, in one process, against the same servers.
//!
//! ```text
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 \
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!   cargo bench -p distlock-cli --bench peers
//! ```
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
//! peer's time as a ratio of distlock's (above 1: the peer is slower). Keys live under a
//! random prefix and are all released; nothing is flushed.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_lock::{DistributedLock as _, LockHandle as _, LockProvider as _};

const ROUNDS: usize = 7;
const CYCLES: usize = 1_000;
const TASKS: usize = 8;
const TASK_CYCLES: usize = 250;
const TTL: Duration = Duration::from_secs(30);

/// One lock implementation, doing acquire + release cycles.
trait Contender: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn cycle(&self, key: &str) -> impl Future<Output = ()> + Send;
}

struct Distlock {
    name: &'static str,
    locks: distlock::LockManager,
}

impl Contender for Distlock {
    fn name(&self) -> &'static str {
        self.name
    }

    async fn cycle(&self, key: &str) {
        let lock = self.locks.try_lock(key, TTL).await.expect("lock");
        assert!(lock.expect("the key is free").release().await.expect("release"));
    }
}

struct Rslock(rslock::LockManager);

impl Contender for Rslock {
    fn name(&self) -> &'static str {
        "rslock"
    }

    async fn cycle(&self, key: &str) {
        let lock = self.0.lock(key, TTL).await.expect("rslock: the key is free");
        self.0.unlock(&lock).await;
    }
}

struct DlRedis(distributed_lock::RedisLockProvider);

impl Contender for DlRedis {
    fn name(&self) -> &'static str {
        "distributed-lock"
    }

    async fn cycle(&self, key: &str) {
        let handle = self.0.create_lock(key).try_acquire().await.expect("try_acquire").expect("the key is free");
        handle.release().await.expect("release");
    }
}

struct DlPostgres(distributed_lock::PostgresLockProvider);

impl Contender for DlPostgres {
    fn name(&self) -> &'static str {
        "distributed-lock"
    }

    async fn cycle(&self, key: &str) {
        let handle = self.0.create_lock(key).try_acquire().await.expect("try_acquire").expect("the key is free");
        handle.release().await.expect("release");
    }
}

/// Runs one scenario for one contender; returns µs per cycle.
async fn scenario<C: Contender>(contender: Arc<C>, prefix: &str, tasks: usize) -> f64 {
    let started = Instant::now();
    if tasks == 1 {
        let key = format!("{prefix}{}:one", contender.name());
        for _ in 0..CYCLES {
            contender.cycle(&key).await;
        }
        return started.elapsed().as_secs_f64() * 1e6 / CYCLES as f64;
    }
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let contender = Arc::clone(&contender);
        let key = format!("{prefix}{}:{task}", contender.name());
        set.spawn(async move {
            for _ in 0..TASK_CYCLES {
                contender.cycle(&key).await;
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.expect("task");
    }
    started.elapsed().as_secs_f64() * 1e6 / (tasks * TASK_CYCLES) as f64
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The contenders of one store, behind one enum so rounds can rotate them.
enum Any {
    Distlock(Arc<Distlock>),
    Rslock(Arc<Rslock>),
    DlRedis(Arc<DlRedis>),
    DlPostgres(Arc<DlPostgres>),
}

impl Any {
    fn name(&self) -> &'static str {
        match self {
            Self::Distlock(c) => c.name(),
            Self::Rslock(c) => c.name(),
            Self::DlRedis(c) => c.name(),
            Self::DlPostgres(c) => c.name(),
        }
    }

    async fn run(&self, prefix: &str, tasks: usize) -> f64 {
        match self {
            Self::Distlock(c) => scenario(Arc::clone(c), prefix, tasks).await,
            Self::Rslock(c) => scenario(Arc::clone(c), prefix, tasks).await,
            Self::DlRedis(c) => scenario(Arc::clone(c), prefix, tasks).await,
            Self::DlPostgres(c) => scenario(Arc::clone(c), prefix, tasks).await,
        }
    }
}

async fn compare(store: &str, contenders: &[Any]) {
    let run = uuid::Uuid::new_v4().simple().to_string();
    for (title, tasks) in [("uncontended (1 task)", 1), ("distinct keys (8 tasks)", TASKS)] {
        let mut samples = vec![Vec::new(); contenders.len()];
        for round in 0..=ROUNDS {
            for i in 0..contenders.len() {
                let index = (i + round) % contenders.len();
                let prefix = format!("distlock-peers:{run}:{round}:");
                let micros = contenders[index].run(&prefix, tasks).await;
                // Round 0 warms connections and caches up and is not counted.
                if round > 0 {
                    samples[index].push(micros);
                }
            }
        }
        let medians: Vec<f64> = samples.into_iter().map(median).collect();
        println!("{store} · {title}: µs per acquire + release cycle (median of {ROUNDS} rounds)");
        for (contender, micros) in contenders.iter().zip(&medians) {
            println!("  {:<18} {micros:9.1} µs   {:.2}× distlock", contender.name(), micros / medians[0]);
        }
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        match std::env::var("DISTLOCK_REDIS_URL") {
            Ok(url) => {
                let distlock = Distlock {
                    name: "distlock",
                    locks: distlock::LockManager::new(distlock::connect(&url).await.expect("distlock redis")),
                };
                let mut rslock = rslock::LockManager::new(vec![url.clone()]);
                rslock.set_retry(1, Duration::from_millis(1));
                let dl = distributed_lock::RedisLockProvider::new(url.clone()).await.expect("distributed-lock redis");
                compare(
                    "redis",
                    &[
                        Any::Distlock(Arc::new(distlock)),
                        Any::Rslock(Arc::new(Rslock(rslock))),
                        Any::DlRedis(Arc::new(DlRedis(dl))),
                    ],
                )
                .await;
            }
            Err(_) => println!("redis: skipped (set DISTLOCK_REDIS_URL)"),
        }
        match std::env::var("DISTLOCK_POSTGRES_URL") {
            Ok(url) => {
                let distlock = Distlock {
                    name: "distlock",
                    locks: distlock::LockManager::new(distlock::connect(&url).await.expect("distlock postgres")),
                };
                let dl = distributed_lock::PostgresLockProvider::builder()
                    .connection_string(url.clone())
                    .build()
                    .await
                    .expect("distributed-lock postgres");
                compare("postgres", &[Any::Distlock(Arc::new(distlock)), Any::DlPostgres(Arc::new(DlPostgres(dl)))])
                    .await;
            }
            Err(_) => println!("postgres: skipped (set DISTLOCK_POSTGRES_URL)"),
        }
    });
}
