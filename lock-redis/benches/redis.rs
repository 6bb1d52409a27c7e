//! Redis store benchmark, each scenario beside the same commands sent raw, in one run.
//!
//! ```text
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p distlock-redis
//! ```
//!
//! - uncontended: one acquire + release cycle, one task:
//!   - `raw`: `SET key token NX PX 30000` + `EVALSHA <release sha> 1 key token` sent with
//!     the `redis` crate;
//!   - `store`: `RedisLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release` (key validation,
//!     token generation, the handle).
//! - distinct: 8 tasks, each cycling its own key, same three variants.
//! - hand-off: one hot key, 8 waiters, hold 0, retry interval 50 ms: release → next
//!   holder latency (p50/p99) and critical sections/s, with release notifications
//!   (pub/sub) and with polling only (`PollingOnly` hides the notifications).
//!
//! All variants share one `ConnectionManager` (the store is built on a clone of the raw
//! connection). The store's release is seed 000's `EVALSHA` with the notification's
//! `PUBLISH` pipelined behind it, so `store` vs `raw` includes the cost of notifying. Rounds rotate the order of the variants; the median round is reported, and the median
//! of the per-round ratios to raw (a round's variants run back to back, under the same load).
//! Keys live under a random prefix and are all released; nothing is flushed.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockManager, Token};
use distlock_conformance::kit::bench::{interleaved_rounds, manager_cycles, report_against_first, store_cycles};
use distlock_conformance::kit::handoff::{hot_key, PollingOnly};
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::redis::{self, Value};
use distlock_redis::{RedisLockStore, RELEASE_SCRIPT};

const ROUNDS: usize = 21;
const CYCLES: usize = 1_000;
const TASKS: usize = 8;
const TASK_CYCLES: usize = 250;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(50);
const HANDOFF_WAITERS: usize = 8;
const HANDOFF_SECTIONS: usize = 4_000;
const POLLING_SECTIONS: usize = 200;

#[derive(Clone)]
struct Bench {
    conn: ConnectionManager,
    store: Arc<RedisLockStore>,
    locks: LockManager,
    prefix: String,
    release_sha: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Raw,
    Store,
    Manager,
}

const VARIANTS: [Variant; 3] = [Variant::Raw, Variant::Store, Variant::Manager];
const NAMES: [&str; 3] = ["raw", "store", "manager"];

impl Bench {
    async fn raw_cycle(&self, conn: &mut ConnectionManager, redis_key: &str, token: &str) {
        let set: Value = redis::cmd("SET")
            .arg(redis_key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(conn)
            .await
            .expect("raw SET");
        assert!(matches!(set, Value::Okay), "raw SET: {set:?}");
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(1)
            .arg(redis_key)
            .arg(token)
            .query_async(conn)
            .await
            .expect("raw EVALSHA");
        assert_eq!(released, 1);
    }

    /// `cycles` acquire + release cycles of `name` with `variant`.
    async fn run(&self, variant: Variant, name: &str, cycles: usize) {
        match variant {
            Variant::Raw => {
                let mut conn = self.conn.clone();
                let redis_key = format!("{}:lock:{name}", self.prefix);
                let token = Token::generate();
                for _ in 0..cycles {
                    self.raw_cycle(&mut conn, &redis_key, token.as_str()).await;
                }
            }
            Variant::Store => store_cycles(self.store.as_ref(), name, TTL, cycles).await,
            Variant::Manager => manager_cycles(&self.locks, name, TTL, cycles).await,
        }
    }
}

fn main() {
    let url = std::env::var("DISTLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let prefix = format!("dlbench-{}", Token::generate().as_str());
        let client = redis::Client::open(url.as_str()).expect("DISTLOCK_REDIS_URL");
        let config = RedisLockStore::builder().connection_manager_config();
        let conn = ConnectionManager::new_with_config(client.clone(), config).await.expect("connect");
        let store =
            RedisLockStore::builder().key_prefix(&prefix).build_with_client(client, conn.clone()).expect("store");
        let store = Arc::new(store);
        let locks = LockManager::new(store.clone());
        let release_sha = redis::Script::new(RELEASE_SCRIPT).get_hash().to_owned();
        let shared_store: Arc<DynLockStore> = store.clone();
        let bench = Bench { conn, store, locks, prefix, release_sha };

        println!("distlock-redis benchmark against {url}: {ROUNDS} rounds, median round");
        let uncontended = interleaved_rounds(&VARIANTS, ROUNDS, |variant| {
            let bench = bench.clone();
            async move { bench.run(variant, "bench:uncontended", CYCLES).await }
        })
        .await;
        report_against_first(
            &format!("uncontended acquire+release, 1 task, {CYCLES} cycles/round"),
            "µs/cycle",
            CYCLES as f64,
            &NAMES,
            &uncontended,
        );

        let distinct = interleaved_rounds(&VARIANTS, ROUNDS, |variant| {
            let bench = bench.clone();
            async move {
                let tasks: Vec<_> = (0..TASKS)
                    .map(|t| {
                        let bench = bench.clone();
                        tokio::spawn(
                            async move { bench.run(variant, &format!("bench:distinct:{t}"), TASK_CYCLES).await },
                        )
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("task");
                }
            }
        })
        .await;
        let total = (TASKS * TASK_CYCLES) as f64;
        let medians = report_against_first(
            &format!("distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round"),
            "µs/cycle (wall)",
            total,
            &NAMES,
            &distinct,
        );
        let [raw, store, manager] = [0, 1, 2].map(|i| 1e6 / medians[i]);
        println!("  throughput: raw {raw:.0}, store {store:.0}, manager {manager:.0} cycles/s");

        let store = shared_store;
        // Warm-up: the subscriber connection, the scripts.
        hot_key(Arc::clone(&store), "bench:handoff", HANDOFF_WAITERS, 200, RETRY).await;
        let notified = hot_key(Arc::clone(&store), "bench:handoff", HANDOFF_WAITERS, HANDOFF_SECTIONS, RETRY).await;
        let polling =
            hot_key(Arc::new(PollingOnly(store)), "bench:handoff", HANDOFF_WAITERS, POLLING_SECTIONS, RETRY).await;
        println!("hand-off, one hot key, {HANDOFF_WAITERS} waiters, hold 0, retry {RETRY:?}");
        println!("  notified ({HANDOFF_SECTIONS} sections)  {notified}");
        println!("  polling  ({POLLING_SECTIONS} sections)   {polling}");
        println!(
            "  notified vs polling: p50 {:.0}× faster, {:.1}× the sections/s; target p50 ≤ 2 ms: {}",
            polling.p50.as_secs_f64() / notified.p50.as_secs_f64().max(1e-9),
            notified.sections_per_sec / polling.sections_per_sec,
            if notified.p50 <= Duration::from_millis(2) { "met" } else { "MISSED" }
        );
        assert_eq!(notified.violations + polling.violations, 0, "mutual exclusion violated");
    });
}
