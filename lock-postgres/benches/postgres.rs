//! PostgreSQL store benchmark: each scenario beside the same statements sent raw, in one run.
//!
//! ```text
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p distlock-postgres
//! # only the hand-off scenario:
//! DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p distlock-postgres -- handoff
//! ```
//!
//! - uncontended: one acquire + release cycle, one task, logged and UNLOGGED table:
//!   - `raw`: the store's own acquire and release statements
//!     ([`PostgresLockStore::statements`]) sent with `sqlx::query` through the same pool;
//!   - `store`: `PostgresLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release` (key validation,
//!     token generation, the handle).
//! - distinct: 8 tasks, each cycling its own key, same three variants.
//!
//! - notify cost: the distinct scenario (no waiters) through `store` with
//!   `release_notifications` on (release notifies only leases a waiter flagged, so these
//!   send nothing) and off, and — for comparison — acquire + a release that `pg_notify`s
//!   unconditionally (the statement before the `waiting` flag, sent raw), rotating rounds
//!   on the same table.
//! - hand-off: 8 waiters take turns on one hot key (hold 0, retry interval 50 ms): latency
//!   from a release to the next holder (p50/p99) and critical sections per second, woken
//!   by `LISTEN`/`NOTIFY` vs polling only ([`PollingOnly`]), alternating, the median round
//!   of each.
//!
//! Rounds rotate the order of the variants; the median round is reported, and the median
//! of the per-round ratios to raw (a round's variants run back to back, under the same
//! load). The tables live in schema `distlock_bench` under random names and are dropped
//! at the end.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockKey, LockManager, Token, Ttl};
use distlock_conformance::kit::bench::{interleaved_rounds, manager_cycles, report_against_first, store_cycles};
use distlock_conformance::kit::handoff::{hot_key, HandOff, PollingOnly};
use distlock_postgres::sqlx;
use distlock_postgres::PostgresLockStore;

const ROUNDS: usize = 15;
const CYCLES: usize = 300;
const TASKS: usize = 8;
const TASK_CYCLES: usize = 100;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(50);
const HANDOFF_ROUNDS: usize = 5;
const NOTIFIED_SECTIONS: usize = 1_600;
const POLLING_SECTIONS: usize = 160;

#[derive(Clone)]
struct Bench {
    store: Arc<PostgresLockStore>,
    locks: LockManager,
    prefix: String,
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
    async fn new(url: &str, table: &str, unlogged: bool, notify: bool) -> Self {
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
        let store = Arc::new(store);
        let locks = LockManager::new(store.clone());
        Self { store, locks, prefix: Token::generate().as_str()[..8].to_owned() }
    }

    /// `cycles` acquire + release cycles of `name` with `variant`.
    async fn run(&self, variant: Variant, name: &str, cycles: usize) {
        let name = format!("{}:{name}", self.prefix);
        let ttl = Ttl::new(TTL).expect("ttl");
        match variant {
            Variant::Raw => {
                let key = LockKey::new(name).expect("key").to_store_key();
                let token = Token::generate();
                let (sql, pool) = (self.store.statements(), self.store.pool());
                for _ in 0..cycles {
                    let acquired: Option<(i64, bool)> = sqlx::query_as(sql.acquire())
                        .bind(key.as_str())
                        .bind(token.as_str())
                        .bind(i64::try_from(ttl.as_millis()).expect("ttl"))
                        .fetch_optional(pool)
                        .await
                        .expect("raw acquire");
                    assert!(acquired.is_some(), "raw acquire");
                    let released: i64 = sqlx::query_scalar(sql.release())
                        .bind(key.as_str())
                        .bind(token.as_str())
                        .fetch_one(pool)
                        .await
                        .expect("raw release");
                    assert_eq!(released, 1);
                }
            }
            Variant::Store => store_cycles(self.store.as_ref(), &name, TTL, cycles).await,
            Variant::Manager => manager_cycles(&self.locks, &name, TTL, cycles).await,
        }
    }
}

async fn scenarios(bench: &Bench, kind: &str) {
    // Per statement: a cycle is two (acquire + release).
    let uncontended = interleaved_rounds(&VARIANTS, ROUNDS, |variant| {
        let bench = bench.clone();
        async move { bench.run(variant, "bench:uncontended", CYCLES).await }
    })
    .await;
    report_against_first(
        &format!("{kind}: uncontended acquire+release, 1 task, {CYCLES} cycles/round"),
        "µs/statement",
        (CYCLES * 2) as f64,
        &NAMES,
        &uncontended,
    );

    let distinct = interleaved_rounds(&VARIANTS, ROUNDS, |variant| {
        let bench = bench.clone();
        async move {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let bench = bench.clone();
                    tokio::spawn(async move { bench.run(variant, &format!("bench:distinct:{t}"), TASK_CYCLES).await })
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
        &format!("{kind}: distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round (wall time)"),
        "µs/statement",
        total * 2.0,
        &NAMES,
        &distinct,
    );
    let [raw, store, manager] = [0, 1, 2].map(|i| 1e6 / (medians[i] * 2.0));
    println!("  throughput: raw {raw:.0}, store {store:.0}, manager {manager:.0} cycles/s");
}

/// What notifications cost releases nobody waits for: the distinct-keys scenario on the
/// same table through `store` with release notifications on (no waiter flags the leases,
/// so no release notifies) and off, and with a release that always notifies (the old
/// statement, raw), in rotating rounds.
async fn notify_cost(bench: &Bench, silent: &Bench, kind: &str) {
    // The release statement before the `waiting` flag: pg_notify for every released row.
    let always_release = format!(
        "WITH released AS ( \
             UPDATE {} SET token = NULL, expires_at = clock_timestamp() \
             WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
             RETURNING key) \
         SELECT count(*) FROM released, pg_notify('{}', released.key)",
        bench.store.table_name(),
        bench.store.statements().channel()
    );
    let always_release = Arc::new(always_release);
    let run = |bench: Bench, always: bool| {
        let always_release = Arc::clone(&always_release);
        async move {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (bench, always_release) = (bench.clone(), Arc::clone(&always_release));
                    tokio::spawn(async move {
                        let name = format!("bench:notify-cost:{t}");
                        if !always {
                            bench.run(Variant::Store, &name, TASK_CYCLES).await;
                            return;
                        }
                        let key = LockKey::new(format!("{}:{name}", bench.prefix)).expect("key").to_store_key();
                        let (token, pool) = (Token::generate(), bench.store.pool());
                        let ttl = i64::try_from(TTL.as_millis()).expect("ttl");
                        for _ in 0..TASK_CYCLES {
                            let acquired: Option<(i64, bool)> = sqlx::query_as(bench.store.statements().acquire())
                                .bind(key.as_str())
                                .bind(token.as_str())
                                .bind(ttl)
                                .fetch_optional(pool)
                                .await
                                .expect("acquire");
                            assert!(acquired.is_some(), "acquire");
                            let released: i64 = sqlx::query_scalar(&always_release)
                                .bind(key.as_str())
                                .bind(token.as_str())
                                .fetch_one(pool)
                                .await
                                .expect("release");
                            assert_eq!(released, 1);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task");
            }
        }
    };
    // off (the baseline), on (flag-gated), always.
    let variants = [(silent, false), (bench, false), (bench, true)];
    let samples = interleaved_rounds(&[0, 1, 2], ROUNDS, |index: usize| {
        let (bench, always) = variants[index];
        run(bench.clone(), always)
    })
    .await;
    let total = (TASKS * TASK_CYCLES) as f64;
    report_against_first(
        &format!("{kind}: releases nobody waits for, distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round"),
        "µs/statement",
        total * 2.0,
        &["notifications off", "notifications on (flag-gated)", "always pg_notify (old release)"],
        &samples,
    );
}

/// The round with the median p50 hand-off.
fn median_round(mut rounds: Vec<HandOff>) -> HandOff {
    rounds.sort_by_key(|round| round.p50);
    rounds.swap_remove(rounds.len() / 2)
}

async fn hand_off(bench: &Bench, kind: &str) {
    let store: Arc<DynLockStore> = bench.store.clone();
    let polling: Arc<DynLockStore> = Arc::new(PollingOnly(Arc::clone(&store)));
    let key = format!("{}:bench:handoff", bench.prefix);
    // Warm-up: the listener, connections, the row.
    hot_key(Arc::clone(&store), &key, TASKS, 200, RETRY).await;
    let (mut notified, mut polled) = (Vec::new(), Vec::new());
    for _ in 0..HANDOFF_ROUNDS {
        notified.push(hot_key(Arc::clone(&store), &key, TASKS, NOTIFIED_SECTIONS, RETRY).await);
        polled.push(hot_key(Arc::clone(&polling), &key, TASKS, POLLING_SECTIONS, RETRY).await);
    }
    for round in notified.iter().chain(&polled) {
        assert_eq!(round.violations, 0, "two holders at once");
    }
    let all = |rounds: &[HandOff]| {
        rounds.iter().map(|r| format!("{:.2}", r.p50.as_secs_f64() * 1e3)).collect::<Vec<_>>().join(" ")
    };
    let (all_notified, all_polled) = (all(&notified), all(&polled));
    let (notified, polled) = (median_round(notified), median_round(polled));
    let target = if notified.p50 <= Duration::from_millis(2) { "met" } else { "MISSED" };
    println!(
        "{kind}: hand-off on one hot key, {TASKS} waiters, hold 0, retry {RETRY:?}, median of {HANDOFF_ROUNDS} rounds"
    );
    println!("  notified      {notified}   (target p50 ≤ 2 ms: {target}; p50 per round: {all_notified} ms)");
    println!("  polling only  {polled}   (p50 per round: {all_polled} ms)");
    println!(
        "  notified vs polling: p50 {:.0}× shorter, {:.1}× the sections/s",
        polled.p50.as_secs_f64() / notified.p50.as_secs_f64().max(1e-9),
        notified.sections_per_sec / polled.sections_per_sec
    );
}

fn main() {
    let url = std::env::var("DISTLOCK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    // `cargo bench -p distlock-postgres -- handoff` runs the hand-off scenario only.
    let only_hand_off = std::env::args().skip(1).any(|arg| arg == "handoff");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        println!("distlock-postgres benchmark against {url}: {ROUNDS} rounds, median round");
        let suffix = Token::generate().as_str()[..8].to_owned();
        for (kind, unlogged) in [("logged", false), ("unlogged", true)] {
            let table = format!("bench_{kind}_{suffix}");
            let bench = Bench::new(&url, &table, unlogged, true).await;
            if !only_hand_off {
                scenarios(&bench, kind).await;
                let silent = Bench::new(&url, &table, unlogged, false).await;
                notify_cost(&bench, &silent, kind).await;
                silent.store.pool().close().await;
            }
            hand_off(&bench, kind).await;
            let drop = format!("DROP TABLE {}", bench.store.table_name());
            sqlx::query(&drop).execute(bench.store.pool()).await.expect("drop the bench table");
            bench.store.pool().close().await;
        }
    });
}
