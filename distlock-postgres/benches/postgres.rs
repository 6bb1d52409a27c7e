//! PostgreSQL store benchmark: each scenario beside the same statements sent raw, in one run.
//!
//! ```text
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p distlock-postgres
//! # only the uncontended and distinct-key cycles: `-- locks`; only the hand-off scenario:
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p distlock-postgres -- handoff
//! # fewer rounds on a busy machine:
//! DISTLOCK_BENCH_ROUNDS=3 DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p distlock-postgres
//! ```
//!
//! - uncontended: one acquire + release cycle, one task, logged and UNLOGGED table:
//!   - `raw`: the store's own acquire and release statements
//!     ([`PostgresLockStore::statements`]; the release that also checks the key's queue
//!     of fair waiting, which a store sends once that table exists) sent with
//!     `sqlx::query` through the same pool (sqlx pings each connection given back to the
//!     pool, which the store's kept connections skip);
//!   - `store`: `PostgresLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release` (key validation,
//!     token generation, the handle).
//! - distinct: 8 tasks, then 64, each cycling its own key, same three variants.
//! - notify cost: the distinct scenario (no waiters) through `store` with
//!   `release_notifications` on (release notifies only leases a waiter flagged, so these
//!   send nothing) and off, and — for comparison — acquire + a release that `pg_notify`s
//!   unconditionally (the statement before the `waiting` flag, sent raw), rotating rounds
//!   on the same table.
//! - hand-off: 8 waiters take turns on one hot key (hold 0, retry interval 50 ms): latency
//!   from a release to the next holder (p50/p99) and critical sections per second, woken
//!   by `LISTEN`/`NOTIFY` vs polling only, alternating, the median round of each; and
//!   the p50 in round trips of the store (one `inspect` of an absent key, each round).
//!
//! - lock groups (`kit::group_bench`, through the manager): a two-name group cycle and a
//!   read-lock cycle vs a single-key lock cycle, 8 readers vs 8 writers of one name, and
//!   a writer's wait among continuous readers (`cargo bench -p distlock-postgres --
//!   groups` runs only these).
//! - fair waiting (`kit::fair_bench`; `-- fair` runs it alone), logged table: tasks loop
//!   acquire → hold 2 ms → release on one hot key, fair vs barging, as 8 tasks in this
//!   process, then as 4 processes × 2 tasks and 6 processes × 8 tasks (48 waiters; the
//!   processes are copies of this benchmark): sections per second and the worst task's
//!   p99 wait.
//! - leader election (`kit::bench::election`; `-- election` runs only it), logged table:
//!   graceful hand-over, observer lag and failover after `kill -9` of the leader's
//!   process (TTL 2 s), each participant on a pool of its own.
//!
//! The scenarios, rounds and report are the conformance kit's (`kit::bench`,
//! `kit::handoff`), with the settings of every SQL store's benchmark (`kit::sql_bench`).
//! The tables live in schema `distlock_bench` under random names and are dropped at the
//! end.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockKey, LockStore, Token, Ttl};
use distlock_conformance::kit::bench::election::{self, Plan as ElectionPlan};
use distlock_conformance::kit::bench::{
    interleaved_rounds, on_worker, report_against_first, rounds, run, RawPostgres, Scenario, Stop, StoreDirect,
};
use distlock_conformance::kit::fair_bench::{self, FairPlan};
use distlock_conformance::kit::sql_bench::{self, RETRY, TASKS, TASK_CYCLES, TTL};
use distlock_postgres::sqlx;
use distlock_postgres::PostgresLockStore;

async fn connect(url: &str, table: &str, unlogged: bool, notify: bool) -> Arc<PostgresLockStore> {
    let store = PostgresLockStore::builder()
        .schema("distlock_bench")
        .table(table)
        .unlogged(unlogged)
        .release_notifications(notify)
        .application_name("distlock_bench")
        .max_connections(TASKS as u32 + 2)
        .connect(url)
        .await
        .expect("connect");
    store.ensure_schema().await.expect("ensure_schema");
    // The first release creates the queue table of fair waiting, which the raw baseline's
    // release reads.
    let (key, token) = (LockKey::new("bench:warm-up").expect("key").to_store_key(), Token::generate());
    let ttl = Ttl::new(TTL).expect("ttl");
    store.try_acquire(&key, &token, ttl).await.expect("warm-up acquire");
    store.release(&key, &token).await.expect("warm-up release");
    Arc::new(store)
}

/// A store with release notifications on `table`, as a `DynLockStore`: one participant
/// of an election.
async fn election_store(url: &str, table: &str) -> Arc<DynLockStore> {
    connect(url, table, false, true).await
}

/// The store's own statements, sent raw through its pool (the release that checks the
/// queue, as the store sends it); `release_sql` replaces that release when given.
fn raw(store: &PostgresLockStore, release_sql: Option<&str>) -> RawPostgres {
    let sql = store.statements();
    let release = release_sql.unwrap_or(sql.release_unqueued());
    RawPostgres::new(store.pool().clone(), sql.acquire(), release, TTL, RETRY)
}

/// What notifications cost releases nobody waits for: the distinct-keys scenario on the
/// same table through the store with release notifications on (no waiter flags the
/// leases, so no release notifies) and off, and with a release that always notifies (the
/// old statement, raw), in rotating rounds.
async fn notify_cost(
    store: &Arc<PostgresLockStore>,
    silent: &Arc<PostgresLockStore>,
    kind: &str,
    prefix: &str,
    rounds: usize,
) {
    // The release statement before the `waiting` flag: pg_notify for every released row.
    let always_release = format!(
        "WITH released AS ( \
             UPDATE {} SET token = NULL, expires_at = clock_timestamp() \
             WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
             RETURNING key) \
         SELECT count(*) FROM released, pg_notify('{}', released.key)",
        store.table_name(),
        store.statements().channel()
    );
    let direct = |store: &Arc<PostgresLockStore>| Arc::new(StoreDirect::new(store.clone(), TTL, RETRY).expect("ttl"));
    let (off, on) = (direct(silent), direct(store));
    let always = Arc::new(raw(store, Some(&always_release)));
    let scenario = Scenario::Distinct { workers: TASKS };
    let prefix = format!("{prefix}notify-cost:");
    let samples = interleaved_rounds(&[0, 1, 2], rounds, |variant| {
        let (off, on, always, prefix) = (off.clone(), on.clone(), always.clone(), prefix.clone());
        async move {
            let stop = Stop::Cycles(TASK_CYCLES);
            let measured = match variant {
                0 => run(&off, scenario, &prefix, stop).await,
                1 => run(&on, scenario, &prefix, stop).await,
                _ => run(&always, scenario, &prefix, stop).await,
            };
            assert_eq!(measured.expect("notify cost").lost, 0);
        }
    })
    .await;
    let total = (TASKS as u64 * TASK_CYCLES) as f64;
    report_against_first(
        &format!("{kind}: releases nobody waits for, distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round"),
        "µs/statement",
        total * 2.0,
        &["notifications off", "notifications on (flag-gated)", "always pg_notify (old release)"],
        &samples,
    );
}

fn main() {
    let url = std::env::var("DISTLOCK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    // `cargo bench -p distlock-postgres -- handoff` runs the hand-off scenario only.
    let only_hand_off = std::env::args().skip(1).any(|arg| arg == "handoff");
    let only_groups = std::env::args().skip(1).any(|arg| arg == "groups");
    // `-- fair` runs the fair-waiting comparison only.
    let only_fair = std::env::args().skip(1).any(|arg| arg == "fair");
    // `-- election` runs leader election only.
    let only_election = std::env::args().skip(1).any(|arg| arg == "election");
    // `-- locks` runs the uncontended and distinct-key cycles only.
    let only_locks = std::env::args().skip(1).any(|arg| arg == "locks");
    let (only_hand_off, only_groups, only_fair) = if only_election || only_locks {
        // None of the others runs.
        (true, true, true)
    } else {
        (only_hand_off, only_groups, only_fair)
    };
    let rounds = rounds(15);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        if let Some(spec) = election::leader_child() {
            let store = connect(&url, &spec.store, false, true).await;
            election::lead_distlock_until_killed(store, &spec, ElectionPlan::TTL).await
        }
        if let Some(worker) = fair_bench::worker_spec() {
            let store = connect(&url, &worker.store, false, true).await;
            fair_bench::run_worker(store, &worker).await;
            return;
        }
        println!("distlock-postgres benchmark against {url}: {rounds} rounds, median round");
        let suffix = Token::generate().as_str()[..8].to_owned();
        let prefix = format!("{suffix}:bench:");
        for (kind, unlogged) in [("logged", false), ("unlogged", true)] {
            let table = format!("bench_{kind}_{suffix}");
            let store = connect(&url, &table, unlogged, true).await;
            let dyn_store: Arc<DynLockStore> = store.clone();
            if kind == "logged" && !only_election && !only_locks && (only_fair || !(only_hand_off || only_groups)) {
                let plan = FairPlan {
                    tasks: TASKS,
                    processes: &[(4, 2), (6, 8)],
                    hold: Duration::from_millis(2),
                    run_for: fair_bench::run_for(),
                };
                fair_bench::compare(Arc::clone(&dyn_store), &table, &format!("{prefix}fair:"), plan).await;
            }
            if only_locks || (!only_hand_off && !only_groups && !only_fair) {
                sql_bench::cycles(raw(&store, None), Arc::clone(&dyn_store), &format!("{kind}: "), &prefix, rounds)
                    .await;
                let silent = connect(&url, &table, unlogged, false).await;
                notify_cost(&store, &silent, kind, &prefix, rounds).await;
                silent.pool().close().await;
            }
            if !only_hand_off && !only_fair {
                println!("{kind}:");
                sql_bench::groups(Arc::clone(&dyn_store), &prefix, rounds).await;
            }
            if !only_groups && !only_fair {
                sql_bench::hand_off(dyn_store, &format!("{kind}: "), &prefix, rounds).await;
            }
            if kind == "logged" && !only_locks && (only_election || !(only_hand_off || only_groups || only_fair)) {
                let name = format!("bench-{suffix}");
                let connect = || election_store(&url, &table);
                let side = election::distlock_side(&name, ElectionPlan::TTL, Some(table.clone()), connect).await;
                election::compare("", vec![side], ElectionPlan::standard()).await;
            }
            // The objects named after the table (short names: derived without a hash).
            let object = |suffix: &str| format!("\"distlock_bench\".\"{table}_{suffix}\"");
            let drop = format!(
                "DROP TABLE IF EXISTS {}; DROP TABLE {}, {}, {}; DROP FUNCTION {}",
                object("queue"),
                store.table_name(),
                object("holders"),
                object("permits"),
                object("acquire_group")
            );
            sqlx::raw_sql(&drop).execute(store.pool()).await.expect("drop the bench tables");
            store.pool().close().await;
        }
    }));
}
