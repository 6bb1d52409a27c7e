//! Versioned and fenced updates on a real PostgreSQL server (`DISTLOCK_POSTGRES_URL`, set
//! by `scripts/test.sh`). Each test creates its own table with a random name.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockManager;
use distlock_conformance::kit::postgres_server::random_identifier;
use distlock_optimistic::{FencedOut, OptimisticError, StaleRecord, VersionedUpdate};
use distlock_postgres::PostgresLockStore;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// A pool and a fresh table `(id bigint primary key, counter bigint, title text,
/// version <version_type>, fence bigint)` holding row 1 at version 0.
async fn setup(test: &str, version_type: &str) -> Option<(PgPool, String)> {
    let url = distlock_conformance::kit::postgres_url(test)?;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.expect("connect");
    let table = random_identifier("opt");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, counter bigint NOT NULL DEFAULT 0, title text, \
         version {version_type} NOT NULL DEFAULT 0, fence bigint)"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    sqlx::query(&format!("INSERT INTO {table} (id) VALUES (1)")).execute(&pool).await.expect("insert");
    Some((pool, table))
}

async fn drop_table(pool: &PgPool, table: &str) {
    sqlx::query(&format!("DROP TABLE {table}")).execute(pool).await.expect("drop table");
}

async fn read(pool: &PgPool, table: &str) -> (i64, i64) {
    sqlx::query_as(&format!("SELECT counter, version::int8 FROM {table} WHERE id = 1"))
        .fetch_one(pool)
        .await
        .expect("read row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_read_modify_write_loses_no_update() {
    let Some((pool, table)) = setup("concurrent_read_modify_write", "integer").await else { return };
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 25;
    let stale = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (pool, table, stale) = (pool.clone(), table.clone(), stale.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let (counter, version) = read(&pool, &table).await;
                let outcome = VersionedUpdate::table(&table)
                    .key("id", 1_i64)
                    .version("version", version)
                    .set("counter", counter + 1)
                    .execute(&pool)
                    .await;
                match outcome {
                    Ok(new_version) => {
                        assert_eq!(new_version, version + 1);
                        done += 1;
                    }
                    Err(OptimisticError::Stale(StaleRecord { expected_version, .. })) => {
                        assert_eq!(expected_version, version);
                        stale.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(other) => panic!("unexpected error: {other}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let (counter, version) = read(&pool, &table).await;
    assert_eq!(counter, (TASKS * INCREMENTS) as i64, "every successful update counted once");
    assert_eq!(version, counter, "one version per update");
    assert!(stale.load(Ordering::Relaxed) > 0, "eight writers on one row must conflict at least once");
    drop_table(&pool, &table).await;
}

#[tokio::test]
async fn outcomes_are_told_apart() {
    let Some((pool, table)) = setup("outcomes_are_told_apart", "smallint").await else { return };
    let update = |id: i64, version: i64| VersionedUpdate::table(&table).key("id", id).version("version", version);

    assert_eq!(update(1, 0).set("title", "a").execute(&pool).await.unwrap(), 1);
    let err = update(1, 0).set("title", "b").execute(&pool).await.unwrap_err();
    match &err {
        OptimisticError::Stale(stale) => {
            assert_eq!((stale.table.as_str(), stale.id.as_str()), (table.as_str(), "1"));
            assert_eq!(stale.id.as_integer(), Some(1), "an integer key is a number");
            assert_eq!((stale.expected_version, stale.actual_version), (0, Some(1)));
        }
        other => panic!("expected Stale, got {other}"),
    }
    assert!(err.is_conflict());
    let err = update(2, 0).set("title", "b").execute(&pool).await.unwrap_err();
    assert!(matches!(&err, OptimisticError::NotFound { id, .. } if id == "2"), "{err}");

    // force: no check, still a bump.
    assert_eq!(update(1, 99).force().set("title", "admin").execute(&pool).await.unwrap(), 2);
    let err = update(2, 0).force().execute(&pool).await.unwrap_err();
    assert!(matches!(err, OptimisticError::NotFound { .. }), "{err:?}");
    // set_some leaves None out.
    update(1, 2).set_some("title", None::<&str>).set_some("counter", Some(5_i64)).execute(&pool).await.unwrap();
    let title: Option<String> =
        sqlx::query_scalar(&format!("SELECT title FROM {table} WHERE id = 1")).fetch_one(&pool).await.unwrap();
    assert_eq!(title.as_deref(), Some("admin"));
    assert_eq!(read(&pool, &table).await, (5, 3));
    drop_table(&pool, &table).await;
}

#[derive(Debug, sqlx::FromRow)]
#[allow(dead_code)]
struct Row {
    id: i64,
    counter: i64,
    title: Option<String>,
    version: i32,
}

#[tokio::test]
async fn returning_gives_the_updated_row() {
    let Some((pool, table)) = setup("returning", "integer").await else { return };
    let row: Row = VersionedUpdate::table(&table)
        .schema("public")
        .key("id", 1_i64)
        .version("version", 0)
        .set("title", "new")
        .set("counter", 41_i64)
        .execute_returning(&pool)
        .await
        .unwrap();
    assert_eq!((row.id, row.counter, row.title.as_deref(), row.version), (1, 41, Some("new"), 1));
    let row: Row = VersionedUpdate::table(&table)
        .key("id", 1_i64)
        .version("version", 0)
        .force()
        .execute_returning(&pool)
        .await
        .unwrap();
    assert_eq!(row.version, 2);
    let err = VersionedUpdate::table(&table)
        .key("id", 1_i64)
        .version("version", 0)
        .execute_returning::<Row, _>(&pool)
        .await
        .unwrap_err();
    assert!(matches!(err, OptimisticError::Stale(StaleRecord { actual_version: Some(2), .. })), "{err}");
    drop_table(&pool, &table).await;
}

#[tokio::test]
async fn works_in_a_transaction_and_on_a_connection() {
    let Some((pool, table)) = setup("transaction", "bigint").await else { return };
    let mut tx = pool.begin().await.unwrap();
    let version = VersionedUpdate::table(&table)
        .key("id", 1_i64)
        .version("version", 0)
        .set("counter", 7_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(version, 1);
    tx.rollback().await.unwrap();
    assert_eq!(read(&pool, &table).await, (0, 0), "rolled back with the transaction");

    let mut conn = pool.acquire().await.unwrap();
    let version =
        VersionedUpdate::table(&table).key("id", 1_i64).version("version", 0).execute(&mut *conn).await.unwrap();
    assert_eq!(version, 1);
    drop_table(&pool, &table).await;
}

#[tokio::test]
async fn version_overflow_is_its_own_error() {
    let Some((pool, table)) = setup("version_overflow", "smallint").await else { return };
    sqlx::query(&format!("UPDATE {table} SET version = 32767")).execute(&pool).await.unwrap();
    let err =
        VersionedUpdate::table(&table).key("id", 1_i64).version("version", 32767).execute(&pool).await.unwrap_err();
    assert!(matches!(err, OptimisticError::VersionOverflow { .. }), "{err}");
    assert_eq!(read(&pool, &table).await, (0, 32767));
    drop_table(&pool, &table).await;
}

#[tokio::test]
async fn bad_identifiers_are_refused_before_any_io() {
    // A pool that never connects: any I/O would fail with a Database error, not Invalid.
    let pool = PgPoolOptions::new().connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap();
    for (table, column) in [("t; DROP TABLE x", "c"), ("t", "c\" = 1 --"), ("", "c"), ("t", "1c")] {
        let err = VersionedUpdate::table(table)
            .key("id", 1_i64)
            .version("version", 0)
            .set(column, 1_i64)
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(matches!(err, OptimisticError::Invalid { .. }), "{table:?}/{column:?}: {err}");
    }
}

/// Two holders of one lock in sequence: the first pauses past its lease, the second takes
/// the lock and writes; the first's late write is refused because its fence is lower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_fenced_out() {
    let Some((pool, table)) = setup("fenced_write", "bigint").await else { return };
    let lock_table = random_identifier("locks");
    let store = PostgresLockStore::builder().table(&lock_table).build(pool.clone()).unwrap();
    store.ensure_schema().await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let key = format!("{table}:1");

    let first = locks.try_lock(&key, Duration::from_millis(300)).await.unwrap().expect("first lock");
    let first_fence = first.fence().expect("the PostgreSQL store fences");
    // Paused: neither releases nor renews.
    let _ = first.leak();
    // Waits (retrying) until the first lease has expired.
    let second = locks.lock(&key, Duration::from_secs(30)).await.unwrap();
    let second_fence = second.fence().expect("fence");
    assert!(second_fence > first_fence);
    let write = |fence: u64, counter: i64| {
        VersionedUpdate::table(&table)
            .key("id", 1_i64)
            .version("version", 0)
            .force()
            .fenced("fence", fence)
            .set("counter", counter)
            .execute(&pool)
    };
    write(second_fence, 2).await.unwrap();
    let err = write(first_fence, 1).await.unwrap_err();
    match &err {
        OptimisticError::FencedOut(FencedOut { fence, current_fence, .. }) => {
            assert_eq!((*fence, *current_fence), (first_fence, Some(second_fence)));
        }
        other => panic!("expected FencedOut, got {other}"),
    }
    assert_eq!(read(&pool, &table).await.0, 2, "the late write changed nothing");
    // The same holder may write again; the row keeps the highest fence.
    write(second_fence, 3).await.unwrap();
    let fence: i64 = sqlx::query_scalar(&format!("SELECT fence FROM {table}")).fetch_one(&pool).await.unwrap();
    assert_eq!(fence as u64, second_fence);
    assert!(second.release().await.unwrap());
    drop_table(&pool, &table).await;
    drop_table(&pool, &lock_table).await;
}

#[cfg(feature = "derive")]
mod derive {
    use super::*;
    use distlock_optimistic::Versioned;

    /// A patch: optional fields, a skipped one, an `integer` version. The derive names a
    /// fixed table, `posts`: the test moves its table into a schema of its own under that
    /// name.
    #[derive(Versioned)]
    #[versioned(table = "posts", key = "id")]
    struct PostPatch {
        id: i64,
        title: Option<String>,
        counter: i64,
        #[versioned(version)]
        version: i32,
        #[versioned(skip)]
        #[allow(dead_code)]
        note: &'static str,
    }

    #[tokio::test]
    async fn derived_methods_check_bump_and_force() {
        let Some((pool, table)) = setup("derive", "integer").await else { return };
        // One connection, whose search_path finds the private `posts`.
        let schema = random_identifier("opt_schema");
        let mut conn = pool.acquire().await.unwrap();
        for sql in [
            format!("CREATE SCHEMA {schema}"),
            format!("ALTER TABLE {table} SET SCHEMA {schema}"),
            format!("ALTER TABLE {schema}.{table} RENAME TO posts"),
            format!("SET search_path TO {schema}"),
        ] {
            sqlx::query(&sql).execute(&mut *conn).await.unwrap();
        }
        let mut patch = PostPatch { id: 1, title: Some("a".into()), counter: 1, version: 0, note: "" };
        assert_eq!(patch.update_by_id(&mut *conn).await.unwrap(), 1);
        let err = patch.update_by_id(&mut *conn).await.unwrap_err();
        assert!(matches!(err, OptimisticError::Stale(StaleRecord { actual_version: Some(1), .. })), "{err}");
        patch.version = 1;
        patch.title = None; // left out: the title stays "a"
        patch.counter = 2;
        let row: Row = patch.update_by_id_returning(&mut *conn).await.unwrap();
        assert_eq!((row.title.as_deref(), row.counter, row.version), (Some("a"), 2, 2));
        assert_eq!(patch.update_by_id_force(&mut *conn).await.unwrap(), 3);
        let row: Row = patch.update_by_id_force_returning(&mut *conn).await.unwrap();
        assert_eq!(row.version, 4);
        let err = PostPatch { id: 2, ..patch }.update_by_id(&mut *conn).await.unwrap_err();
        assert!(matches!(err, OptimisticError::NotFound { .. }), "{err}");
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&mut *conn).await.unwrap();
    }
}
