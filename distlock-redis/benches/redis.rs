//! Redis store benchmark, each scenario beside the same commands sent raw, in one run.
//!
//! ```text
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p distlock-redis
//! # fewer rounds on a busy machine:
//! DISTLOCK_BENCH_ROUNDS=5 DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p distlock-redis
//! # one comparison only: `-- handoff`, `-- fair`, `-- groups` or `-- election`; the
//! # uncontended and distinct-key cycles only: `-- locks`
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p distlock-redis -- handoff
//! ```
//!
//! - uncontended: one acquire + release cycle, one task, the variants taking turns cycle
//!   by cycle:
//!   - `raw`: `SET key token NX PX 30000` + `EVALSHA <release sha> 1 key token` sent with
//!     the `redis` crate;
//!   - `store`: `RedisLockStore::try_acquire` + `release` (fixed token), the store in its
//!     default mode (the same two commands);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release` (key validation,
//!     token generation, the handle) on that store.
//! - distinct: 8 tasks, then 64, each cycling its own key, same three variants, in three
//!   times the rounds (a whole round of many tasks is timed, and these spread widely).
//! - the cost of fair waiting where nobody waits: the store alone with fair waiting and
//!   notifications (one script for the release) vs notifications alone (the release
//!   script with `PUBLISH` pipelined).
//! - lock groups (`kit::group_bench`): two-name group and read-lock cycles vs a single-key
//!   cycle, 8 readers vs 8 writers of one name, a writer among continuous readers.
//! - hand-off: one hot key, 8 waiters, hold 0, retry interval 50 ms: release → next
//!   holder latency (p50/p99) and critical sections/s, with release notifications
//!   (pub/sub) and with polling only, and the p50 in round trips of the store (one
//!   `inspect` of an absent key, measured in each round).
//! - fair waiting (`kit::fair_bench`; `-- fair` runs it alone): tasks loop acquire →
//!   hold 2 ms → release on one hot key, fair vs barging, as 8 tasks in this process, then
//!   as 4 processes × 2 tasks and 6 processes × 8 tasks (48 waiters; the processes are
//!   copies of this benchmark): sections per second and the worst task's p99 wait.
//! - leader election (`kit::bench::election`; `-- election` runs it alone): graceful
//!   hand-over, observer lag and failover after `kill -9` of the leader's process (TTL
//!   2 s), on stores with `fencing`, `fair_queue` and `release_notifications`, each
//!   participant on a connection of its own.
//!
//! All variants share one `ConnectionManager` (the stores are built on clones of the raw
//! connection). The hand-off, group and fair-waiting comparisons use a store with fair
//! waiting and release notifications on. The
//! scenarios, rounds and report are the conformance kit's (`kit::bench`,
//! `kit::handoff`). Keys live under a random prefix and are all released; nothing is
//! flushed.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, Token};
use distlock_conformance::kit::bench::election::{self, Plan as ElectionPlan};
use distlock_conformance::kit::bench::{
    interleaved_rounds, on_worker, report_against_first, rounds, run, RawRedis, Scenario, SideBySide, Stop,
    StoreDirect, Unit,
};
use distlock_conformance::kit::fair_bench::{self, FairPlan};
use distlock_conformance::kit::group_bench::{self, GroupPlan};
use distlock_conformance::kit::handoff::{self, Plan};
use distlock_redis::redis::{self, aio::ConnectionManager};
use distlock_redis::{RedisLockStore, RELEASE_SCRIPT};

/// The writer among continuous readers again with these longer holds (see `GroupPlan`).
const LONGER_HOLDS: [Duration; 1] = [Duration::from_millis(20)];
const CYCLES: u64 = 1_000;
const TASKS: usize = 8;
const TASK_CYCLES: u64 = 250;
const MANY_TASKS: usize = 64;
/// 64 tasks × 250 cycles: rounds of ~100 ms, long enough that the start and end of the
/// tasks and a neighbour's burst do not decide a round (rounds of 40 cycles last 15 ms, and
/// their ratios to raw spread from 0.75× to 1.68×).
const MANY_TASK_CYCLES: u64 = 250;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(50);

fn main() {
    let url = std::env::var("DISTLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let rounds = rounds(21);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        if let Some(spec) = election::leader_child() {
            election::lead_distlock_until_killed(election_store(&url, &spec.store).await, &spec, ElectionPlan::TTL)
                .await
        }
        let worker = fair_bench::worker_spec();
        let prefix =
            worker.as_ref().map_or_else(|| format!("dlbench-{}", Token::generate().as_str()), |w| w.store.clone());
        let client = redis::Client::open(url.as_str()).expect("DISTLOCK_REDIS_URL");
        let config = RedisLockStore::builder().connection_manager_config();
        let conn = ConnectionManager::new_with_config(client.clone(), config).await.expect("connect");
        // Fair waiting and notifications on: the fair, hand-off and group comparisons are
        // about them (the default wire is `seed_only` below).
        let store: Arc<DynLockStore> = Arc::new(
            RedisLockStore::builder()
                .key_prefix(&prefix)
                .fair_queue(true)
                .release_notifications(true)
                .notification_client(client.clone())
                .build(conn.clone())
                .expect("store"),
        );
        if let Some(worker) = worker {
            fair_bench::run_worker(store, &worker).await;
            return;
        }
        // `cargo bench -p distlock-redis -- fair` runs the fair-waiting comparison only.
        let fair_plan = FairPlan {
            tasks: TASKS,
            processes: &[(4, 2), (6, 8)],
            hold: Duration::from_millis(2),
            run_for: fair_bench::run_for(),
        };
        if std::env::args().skip(1).any(|arg| arg == "fair") {
            fair_bench::compare(store, &prefix, "bench:", fair_plan).await;
            return;
        }
        let group_plan = GroupPlan {
            cycles: CYCLES / 2,
            rounds: rounds.min(7),
            hold: Duration::from_millis(5),
            hot_cycles: 40,
            writer_samples: 100,
            longer_holds: &LONGER_HOLDS,
        };
        // `cargo bench -p distlock-redis -- election` runs leader election only.
        if std::env::args().skip(1).any(|arg| arg == "election") {
            elections(&url, &prefix).await;
            return;
        }
        let plan = Plan {
            waiters: TASKS,
            retry: RETRY,
            notified_sections: 4_000,
            polling_sections: 200,
            rounds: 1,
            round_trips: true,
        };
        // `cargo bench -p distlock-redis -- handoff` runs the hand-off comparison only.
        if std::env::args().skip(1).any(|arg| arg == "handoff") {
            handoff::compare(store, "", "bench:handoff:", Plan { rounds: rounds.min(5), ..plan }).await;
            return;
        }
        // `cargo bench -p distlock-redis -- groups` runs the lock-group comparisons only.
        if std::env::args().skip(1).any(|arg| arg == "groups") {
            group_bench::compare(store, "bench:", GroupPlan { rounds, ..group_plan }).await;
            return;
        }
        let raw =
            RawRedis::new(conn.clone(), &prefix, RELEASE_SCRIPT, TTL, RETRY).await.expect("load the release script");
        // The store in its default mode, whose wire is exactly the raw commands.
        let default: Arc<DynLockStore> =
            Arc::new(RedisLockStore::builder().key_prefix(&prefix).build(conn.clone()).expect("store"));
        let bench = SideBySide::new(raw, default, TTL, RETRY, "bench:").expect("bench");

        println!("distlock-redis benchmark against {url}: {rounds} rounds, median round");
        let title = format!("uncontended acquire+release, 1 task, {CYCLES} cycles/round, taking turns cycle by cycle");
        bench.compare_turns(&title, CYCLES, 1, rounds, Unit::CYCLE).await;
        // Rounds of many tasks, timed whole, spread from 0.7× to 1.4× of raw's on a shared
        // machine (a round meets a neighbour's burst or not): three times the rounds.
        let task_rounds = 3 * rounds;
        let title = format!("distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round (wall time)");
        bench.compare(&title, Scenario::Distinct { workers: TASKS }, TASK_CYCLES, task_rounds, Unit::CYCLE).await;
        let title = format!("distinct keys, {MANY_TASKS} tasks × {MANY_TASK_CYCLES} cycles/round (wall time)");
        let scenario = Scenario::Distinct { workers: MANY_TASKS };
        bench.compare(&title, scenario, MANY_TASK_CYCLES, task_rounds, Unit::CYCLE).await;

        // The cost of fair waiting where nobody waits: the release script with the queue
        // check vs the plain release + PUBLISH, through the store alone.
        let seed_only = RedisLockStore::builder().key_prefix(&prefix).release_notifications(true);
        let seed_only: Arc<DynLockStore> = Arc::new(seed_only.notification_client(client).build(conn).expect("store"));
        let (fair, plain) = (
            Arc::new(StoreDirect::new(Arc::clone(&store), TTL, RETRY).expect("ttl")),
            Arc::new(StoreDirect::new(seed_only, TTL, RETRY).expect("ttl")),
        );
        let samples = interleaved_rounds(&[0, 1], rounds, |variant| {
            let (fair, plain) = (Arc::clone(&fair), Arc::clone(&plain));
            async move {
                let locker = if variant == 0 { plain } else { fair };
                run(&locker, Scenario::Uncontended, "bench:fair-cost:", Stop::Cycles(CYCLES)).await.expect("cycle");
            }
        })
        .await;
        #[allow(clippy::cast_precision_loss)]
        report_against_first(
            &format!("uncontended cycle, store alone, {CYCLES} cycles/round: fair waiting's release vs the plain one"),
            "µs/cycle",
            CYCLES as f64,
            &["fair_queue(false)", "fair_queue(true)"],
            &samples,
        );

        // `cargo bench -p distlock-redis -- locks` stops here.
        if std::env::args().skip(1).any(|arg| arg == "locks") {
            return;
        }
        handoff::compare(Arc::clone(&store), "", "bench:handoff:", plan).await;

        group_bench::compare(Arc::clone(&store), "bench:", group_plan).await;
        fair_bench::compare(store, &prefix, "bench:", fair_plan).await;
        elections(&url, &prefix).await;
    }));
}

/// A store as leader election needs it (fencing, fair waiting, release notifications) on
/// a connection of its own.
async fn election_store(url: &str, prefix: &str) -> Arc<DynLockStore> {
    let client = redis::Client::open(url).expect("DISTLOCK_REDIS_URL");
    let config = RedisLockStore::builder().connection_manager_config();
    let conn = ConnectionManager::new_with_config(client.clone(), config).await.expect("connect");
    let builder = RedisLockStore::builder().key_prefix(prefix).fencing(true).fair_queue(true);
    Arc::new(builder.release_notifications(true).notification_client(client).build(conn).expect("store"))
}

/// Leader election: hand-over, observer lag, failover after `kill -9`.
async fn elections(url: &str, prefix: &str) {
    let name = format!("bench-{}", &Token::generate().as_str()[..8]);
    let ttl = ElectionPlan::TTL;
    let side = election::distlock_side(&name, ttl, Some(prefix.to_owned()), || election_store(url, prefix)).await;
    election::compare("", vec![side], ElectionPlan::standard()).await;
}
