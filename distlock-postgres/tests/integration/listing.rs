//! `list` on PostgreSQL: keyset pages over the primary key, at scale, on the index.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::TestTable;
use distlock_api::{DynLockStore, KeyPattern, ListCursor, LockError, LockStore};
use distlock_conformance::cases::list_at_scale;
use distlock_postgres::sqlx::{self, Connection, Row};

/// 100,000 held keys, written with the store's layout by one `INSERT … SELECT`, beside
/// 20,000 released and 20,000 expired rows of the same namespace and 20,000 held keys
/// of another: the listing finds every held key in bounded pages of an index range
/// scan, and an acquire + release on the same table stays fast meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_many_held_keys_without_blocking() {
    const COUNT: usize = 100_000;
    let Some(table) = TestTable::new("postgres listing at scale").await else { return };
    let sequence = table.store.sequence_name().replace('\'', "''");
    let started = std::time::Instant::now();
    let fill = |namespace: &str, from: usize, to: usize, token: &str, expires: &str| {
        format!(
            "INSERT INTO {{table}} (key, token, fence, expires_at) \
             SELECT 'lock:{namespace}:' || i, {token}, nextval('{sequence}'), clock_timestamp() + interval '{expires}' \
             FROM generate_series({from}, {to}) AS i"
        )
    };
    table.admin(&fill("held", 0, COUNT - 1, "gen_random_uuid()::text", "10 minutes")).await;
    table.admin(&fill("held", COUNT, COUNT + 19_999, "NULL", "-1 second")).await;
    table.admin(&fill("held", COUNT + 20_000, COUNT + 39_999, "gen_random_uuid()::text", "-1 second")).await;
    table.admin(&fill("other", 0, 19_999, "gen_random_uuid()::text", "10 minutes")).await;
    table.admin("ANALYZE {table}").await;
    let filled = started.elapsed();

    let limit = 1_000;
    let store: Arc<DynLockStore> = Arc::new(table.store.clone());
    let stats = list_at_scale(Arc::clone(&store), "held", COUNT, limit, Duration::from_secs(2)).await;
    eprintln!(
        "postgres: listed {COUNT} held keys (of {} rows in the table) in {:?}: {} pages of limit {limit}, \
         slowest page {:?}; {} acquire + release cycles meanwhile, slowest {:?} (filled in {filled:?})",
        COUNT + 60_000,
        stats.elapsed,
        stats.pages,
        stats.slowest_page,
        stats.probe_cycles,
        stats.slowest_probe,
    );
    // The released and expired rows of the namespace are examined too (a page costs the
    // same whatever matches): 140 pages of 1,000 rows.
    assert!(stats.pages >= 140, "{} pages", stats.pages);
    assert_plans_use_the_primary_key(&table).await;
    table.drop().await;
}

/// The list statement is an index range scan on the primary key, also as a generic plan
/// (what a prepared statement may switch to after five executions).
async fn assert_plans_use_the_primary_key(table: &TestTable) {
    let mut conn = sqlx::PgConnection::connect(&table.url).await.expect("connect");
    let list = table.sql_file(include_str!("../../src/sql/lease/list.sql"));
    sqlx::query(&format!("PREPARE listing(text, text, text, bigint, text) AS {list}"))
        .execute(&mut conn)
        .await
        .expect("PREPARE");
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::query(&format!("SET plan_cache_mode = {mode}")).execute(&mut conn).await.expect("SET");
        let rows =
            sqlx::query("EXPLAIN EXECUTE listing('lock:held:', 'lock:held:5', 'lock:held;', 1000, 'lock:held:%')")
                .fetch_all(&mut conn)
                .await
                .expect("EXPLAIN");
        let plan: Vec<String> = rows.iter().map(|row| row.get::<String, _>(0)).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("Index Scan using") && plan.contains("_pkey"), "{mode}:\n{plan}");
        assert!(!plan.contains("Seq Scan"), "{mode}:\n{plan}");
    }
}

/// A cursor the store cannot have issued is a configuration error, before any I/O.
#[tokio::test]
async fn a_foreign_cursor_is_refused() {
    let Some(table) = TestTable::new("postgres listing cursor").await else { return };
    let err = table.store.list(&KeyPattern::all(), Some(&ListCursor::new("12345")), 10).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    table.drop().await;
}
