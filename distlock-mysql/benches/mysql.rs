//! MySQL store benchmark: each scenario beside the same statements sent raw, in one run.
//!
//! ```text
//! DISTLOCK_MYSQL_URL=mysql://root@127.0.0.1:3306/distlock cargo bench -p distlock-mysql
//! # only the hand-off scenario (or only `groups`, `fair`, or the `cycles` against raw):
//! DISTLOCK_MYSQL_URL=mysql://root@127.0.0.1:3306/distlock cargo bench -p distlock-mysql -- handoff
//! # fewer rounds and shorter fair-waiting runs on a busy machine:
//! DISTLOCK_BENCH_ROUNDS=3 DISTLOCK_FAIR_SECONDS=3 DISTLOCK_MYSQL_URL=… cargo bench -p distlock-mysql
//! ```
//!
//! - uncontended: one acquire + release cycle, one task:
//!   - `raw`: the store's own acquire and release statements
//!     ([`MysqlLockStore::statements`]) sent with `sqlx::query` through the same pool
//!     (sqlx pings each connection given back to the pool, which the store's kept
//!     connections skip);
//!   - `store`: `MysqlLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release`.
//! - distinct: 8 tasks, then 64, each cycling its own key, same three variants.
//! - hand-off: 8 waiters take turns on one hot key (hold 0, retry interval 50 ms): latency
//!   from a release to the next holder (p50/p99) and critical sections per second, woken
//!   by the store's listener vs polling only, alternating, the median round of each;
//!   and the p50 in round trips of the store (one `inspect` of an absent key, each round).
//! - lock groups (`kit::group_bench`, through the manager; `-- groups` runs only these).
//! - fair waiting: 8 tasks on one hot key, holding 2 ms, fair vs barging, in this process
//!   and then as 8 processes of one task each (copies of this benchmark, on the same
//!   table); per variant the worst task's p99 wait as a multiple of the fair share
//!   (`kit::fair_bench`; `DISTLOCK_FAIR_SECONDS` per variant, default 10; `-- fair` runs
//!   only this).
//! - leader election (`kit::bench::election`; `-- election` runs only it): graceful
//!   hand-over, observer lag and failover after `kill -9` of the leader's process (TTL
//!   2 s), each participant on a pool of its own.
//!
//! The settings are those of every SQL store's benchmark (`kit::sql_bench`).
//!
//! The tables get random names and are dropped at the end.

use std::sync::Arc;

use distlock_api::{DynLockStore, Token};
use distlock_conformance::kit::bench::election::{self, Plan as ElectionPlan};
use distlock_conformance::kit::bench::{on_worker, rounds, RawMysql};
use distlock_conformance::kit::fair_bench;
use distlock_conformance::kit::sql_bench::{self, RETRY, TASKS, TTL};
use distlock_mysql::sqlx;
use distlock_mysql::MysqlLockStore;

async fn connect(url: &str, table: &str) -> Arc<MysqlLockStore> {
    let store =
        MysqlLockStore::builder().table(table).max_connections(TASKS as u32 + 2).connect(url).await.expect("connect");
    store.ensure_schema().await.expect("ensure_schema");
    Arc::new(store)
}

/// The store on `table` as a `DynLockStore`, on a pool of its own: one participant of an
/// election.
async fn election_store(url: &str, table: &str) -> Arc<DynLockStore> {
    connect(url, table).await
}

fn main() {
    let url = std::env::var("DISTLOCK_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/distlock".to_owned());
    let only = |name: &str| std::env::args().skip(1).any(|arg| arg == name);
    let (only_hand_off, only_groups, only_cycles, only_fair, only_election) =
        (only("handoff"), only("groups"), only("cycles"), only("fair"), only("election"));
    let some = only_hand_off || only_groups || only_cycles || only_fair || only_election;
    let rounds = rounds(15);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        if let Some(spec) = election::leader_child() {
            election::lead_distlock_until_killed(connect(&url, &spec.store).await, &spec, ElectionPlan::TTL).await
        }
        if let Some(worker) = fair_bench::worker_spec() {
            let store = connect(&url, &worker.store).await;
            fair_bench::run_worker(store.clone(), &worker).await;
            store.pool().close().await;
            return;
        }
        println!("distlock-mysql benchmark against {url}: {rounds} rounds, median round");
        let suffix = Token::generate().as_str()[..8].to_owned();
        let prefix = format!("{suffix}:bench:");
        let table = format!("bench_{suffix}");
        let store = connect(&url, &table).await;
        let dyn_store: Arc<DynLockStore> = store.clone();
        if !some || only_fair {
            sql_bench::fair(Arc::clone(&dyn_store), &table, &prefix).await;
        }
        if !some || only_cycles {
            let sql = store.statements();
            let raw = RawMysql::new(store.pool().clone(), sql.acquire(), sql.release(), TTL, RETRY);
            sql_bench::cycles(raw, Arc::clone(&dyn_store), "", &prefix, rounds).await;
        }
        if !some || only_groups {
            sql_bench::groups(Arc::clone(&dyn_store), &prefix, rounds).await;
        }
        if !some || only_hand_off {
            sql_bench::hand_off(Arc::clone(&dyn_store), "", &prefix, rounds).await;
        }
        if !some || only_election {
            let name = format!("bench-{suffix}");
            let connect = || election_store(&url, &table);
            let side = election::distlock_side(&name, ElectionPlan::TTL, Some(table.clone()), connect).await;
            election::compare("", vec![side], ElectionPlan::standard()).await;
        }
        let tables: Vec<String> = ["", "_queue", "_names", "_holders", "_places", "_permits", "_waiters", "_values"]
            .iter()
            .map(|suffix| format!("`{table}{suffix}`"))
            .collect();
        sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {}", tables.join(", ")))
            .execute(store.pool())
            .await
            .expect("drop the bench tables");
        store.pool().close().await;
    }));
}
