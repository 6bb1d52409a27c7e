//! A versioned update through `VersionedUpdate` beside the hand-written statement a user
//! would send instead (`UPDATE … SET …, version = version + 1 WHERE id = $1 AND version = $2`
//! and a check of `rows_affected`, which cannot tell a stale row from a missing one) and
//! beside `VersionedUpdate`'s own statement bound by hand, through the same pool, on the PostgreSQL at
//! `DISTLOCK_POSTGRES_URL` (`scripts/test.sh cargo bench -p distlock-optimistic`).
//!
//! Rounds and ratios are the conformance kit's (`kit::bench::interleaved_rounds`,
//! `report_against_first`): variants run back to back in rotating order.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use distlock_conformance::kit::bench::{interleaved_rounds, report_against_first, rounds};
use distlock_conformance::kit::postgres_server::random_identifier;
use distlock_optimistic::VersionedUpdate;
use sqlx::postgres::PgPoolOptions;

const CYCLES: usize = 300;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    HandWritten,
    SameSql,
    Library,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(url) = distlock_conformance::kit::postgres_url("distlock-optimistic bench") else { return };
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("connect");
    let table = random_identifier("opt_bench");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, counter bigint NOT NULL, version bigint NOT NULL)"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    sqlx::query(&format!("INSERT INTO {table} VALUES (1, 0, 0)")).execute(&pool).await.expect("insert");
    let hand_written = format!("UPDATE {table} SET counter = $2, version = version + 1 WHERE id = $1 AND version = $3");
    // The statement VersionedUpdate sends, bound by hand: what the builder itself costs.
    let same_sql = VersionedUpdate::table(&table)
        .key("id", 1_i64)
        .version("version", 0)
        .set("counter", 0_i64)
        .sql()
        .expect("statement");
    let version = Arc::new(AtomicI64::new(0));

    let rounds = rounds(15);
    let samples = interleaved_rounds(&[Variant::HandWritten, Variant::SameSql, Variant::Library], rounds, |variant| {
        let (pool, table, hand_written, same_sql, version) =
            (pool.clone(), table.clone(), hand_written.clone(), same_sql.clone(), version.clone());
        async move {
            for _ in 0..CYCLES {
                let current = version.load(Ordering::Relaxed);
                if variant == Variant::HandWritten {
                    let done = sqlx::query(&hand_written)
                        .bind(1_i64)
                        .bind(current)
                        .bind(current)
                        .execute(&pool)
                        .await
                        .expect("update");
                    assert_eq!(done.rows_affected(), 1);
                } else if variant == Variant::SameSql {
                    let done = sqlx::query(&same_sql)
                        .bind(1_i64)
                        .bind(current)
                        .bind(current)
                        .execute(&pool)
                        .await
                        .expect("same statement");
                    assert_eq!(done.rows_affected(), 1);
                } else {
                    VersionedUpdate::table(&table)
                        .key("id", 1_i64)
                        .version("version", current)
                        .set("counter", current)
                        .execute(&pool)
                        .await
                        .expect("versioned update");
                }
                version.store(current + 1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let title = format!("PostgreSQL versioned update of one row, {CYCLES} updates/round, {rounds} rounds");
    report_against_first(
        &title,
        "µs/update",
        CYCLES as f64,
        &["hand-written", "same-sql", "VersionedUpdate"],
        &samples,
    );
    sqlx::query(&format!("DROP TABLE {table}")).execute(&pool).await.expect("drop table");
}
