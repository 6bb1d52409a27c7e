//! SQLite store benchmark: each scenario beside the same statements sent raw, in one run,
//! on a database file in a fresh temporary directory.
//!
//! ```text
//! cargo bench -p distlock-sqlite
//! # only the `cycles` against raw (or only `groups`, `handoff` or `fair`; several combine):
//! cargo bench -p distlock-sqlite -- cycles
//! # fewer rounds and shorter fair-waiting runs on a busy machine:
//! DISTLOCK_BENCH_ROUNDS=3 DISTLOCK_FAIR_SECONDS=3 cargo bench -p distlock-sqlite
//! ```
//!
//! - fair waiting: 8 tasks on one hot key, holding 2 ms, fair vs barging, in this process
//!   and then as 8 processes of one task each (copies of this benchmark, on the same
//!   file); per variant the worst task's p99 wait as a multiple of the fair share
//!   (`kit::fair_bench`; `DISTLOCK_FAIR_SECONDS` per variant, default 10).
//! - uncontended: one acquire + release cycle, one task:
//!   - `raw`: the store's own statements ([`SqliteLockStore::statements`]) sent with
//!     `sqlx::query` through the same pool, in the store's transactions — acquire:
//!     `BEGIN IMMEDIATE`, the lease select, the next fence, the lease put, `COMMIT`;
//!     release: `BEGIN IMMEDIATE`, the lease delete, the queue leave, the queue select,
//!     `COMMIT` — writers taking turns in the process ([`RawSqlite`]);
//!   - `store`: `SqliteLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release`.
//! - distinct: 8 tasks, then 64, each cycling its own key, same three variants.
//! - lock groups (`kit::group_bench`, through the manager).
//! - hand-off: 8 waiters take turns on one hot key (hold 0, retry interval 50 ms): latency
//!   from a release to the next holder (p50/p99) and critical sections per second, woken
//!   by the store's datagrams vs polling only, alternating, the median round of each;
//!   and the p50 in reads of the store (one `inspect` of an absent key, each round).
//!
//! - leader election (`kit::bench::election`; `-- election` runs only it): graceful
//!   hand-over, observer lag and failover after `kill -9` of the leader's process (TTL
//!   2 s; a holder process that is gone is noticed before its lease ends), each
//!   participant on a pool of its own.
//!
//! The store has its defaults (fair queue, release notifications, liveness on) and the
//! settings are those of every SQL store's benchmark (`kit::sql_bench`). The directory is
//! removed at the end.

use std::sync::Arc;

use distlock_api::{DynLockStore, Token};
use distlock_conformance::kit::bench::election::{self, Plan as ElectionPlan};
use distlock_conformance::kit::bench::{on_worker, rounds, RawSqlite, SqliteStatements};
use distlock_conformance::kit::fair_bench;
use distlock_conformance::kit::sql_bench::{self, RETRY, TASKS, TTL};
use distlock_sqlite::SqliteLockStore;

async fn connect(url: &str) -> Arc<SqliteLockStore> {
    let store = SqliteLockStore::builder().max_connections(TASKS as u32 + 2).connect(url).await.expect("connect");
    Arc::new(store)
}

/// The store's acquire and release statements, sent raw through its pool.
fn raw(store: &SqliteLockStore) -> RawSqlite {
    let sql = store.statements();
    let statements = SqliteStatements {
        lease_select: sql.lease_select().to_owned(),
        next_fence: sql.next_fence().to_owned(),
        lease_put: sql.lease_put().to_owned(),
        lease_delete: sql.lease_delete().to_owned(),
        queue: Some((sql.queue_leave().to_owned(), sql.queue_select().to_owned())),
    };
    let boot = SqliteLockStore::boot_id().expect("boot id");
    RawSqlite::new(store.pool().clone(), statements, boot, SqliteLockStore::clock, TTL, RETRY)
}

/// The store in `url` as a `DynLockStore`, on a pool of its own: one participant of an
/// election.
async fn election_store(url: &str) -> Arc<DynLockStore> {
    connect(url).await
}

fn main() {
    let only = |name: &str| std::env::args().skip(1).any(|arg| arg == name);
    let (only_cycles, only_groups, only_hand_off, only_fair, only_election) =
        (only("cycles"), only("groups"), only("handoff"), only("fair"), only("election"));
    let some = only_cycles || only_groups || only_hand_off || only_fair || only_election;
    let rounds = rounds(15);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        if let Some(spec) = election::leader_child() {
            election::lead_distlock_until_killed(connect(&spec.store).await, &spec, ElectionPlan::TTL).await
        }
        if let Some(worker) = fair_bench::worker_spec() {
            let store = connect(&worker.store).await;
            fair_bench::run_worker(store.clone(), &worker).await;
            store.pool().close().await;
            return;
        }
        let suffix = Token::generate().as_str()[..8].to_owned();
        let dir = std::env::temp_dir().join(format!("distlock-bench-sqlite-{suffix}"));
        std::fs::create_dir_all(&dir).expect("create the database directory");
        let url = format!("sqlite://{}", dir.join("locks.db").display());
        println!("distlock-sqlite benchmark on {url}: {rounds} rounds, median round");
        let prefix = format!("{suffix}:bench:");
        let store = connect(&url).await;
        let dyn_store: Arc<DynLockStore> = store.clone();
        if !some || only_fair {
            sql_bench::fair(Arc::clone(&dyn_store), &url, &prefix).await;
        }
        if !some || only_cycles {
            sql_bench::cycles(raw(&store), Arc::clone(&dyn_store), "", &prefix, rounds).await;
        }
        if !some || only_groups {
            sql_bench::groups(Arc::clone(&dyn_store), &prefix, rounds).await;
        }
        if !some || only_hand_off {
            sql_bench::hand_off(Arc::clone(&dyn_store), "", &prefix, rounds).await;
        }
        if !some || only_election {
            let name = format!("bench-{suffix}");
            let side =
                election::distlock_side(&name, ElectionPlan::TTL, Some(url.clone()), || election_store(&url)).await;
            election::compare("", vec![side], ElectionPlan::standard()).await;
        }
        store.pool().close().await;
        drop((dyn_store, store));
        std::fs::remove_dir_all(&dir).expect("remove the database directory");
    }));
}
