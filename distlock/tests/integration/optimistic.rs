//! `#[derive(Versioned)]` through `distlock::optimistic`, with `i16` (`smallint`) and `i64`
//! (`bigint`) version fields, on a real PostgreSQL server (`DISTLOCK_POSTGRES_URL`, set by
//! `scripts/test.sh`): an update, a stale update, and the top of each column's range.
//!
//! The derive names a fixed table; each test creates a schema of its own holding a table
//! of that name, and finds it through its connection's `search_path`.
#![cfg(feature = "optimistic")]

use distlock::optimistic::sqlx::{self, Connection as _, PgConnection};
use distlock::optimistic::{OptimisticError, StaleRecord, Versioned, VersionedUpdate};
use distlock_conformance::kit::postgres_server::random_identifier;

#[derive(Debug, Clone, Versioned)]
#[versioned(table = "small_versions", crate = "distlock::optimistic")]
struct SmallPatch {
    id: i64,
    title: String,
    #[versioned(version)]
    version: i16,
}

#[derive(Debug, Clone, Versioned)]
#[versioned(table = "big_versions", crate = "distlock::optimistic")]
struct BigPatch {
    id: i64,
    title: String,
    #[versioned(version)]
    version: i64,
}

/// One connection whose `search_path` is a fresh schema holding `table` (`id bigint`,
/// `title text`, `version <version_type>`) with row 1 at version 0; and the schema's name.
async fn connect(test: &str, table: &str, version_type: &str) -> Option<(PgConnection, String)> {
    let url = distlock_conformance::kit::postgres_url(test)?;
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    let schema = random_identifier("versioned");
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("SET search_path TO {schema}"),
        format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, title text NOT NULL, \
             version {version_type} NOT NULL DEFAULT 0)"
        ),
        format!("INSERT INTO {table} (id, title) VALUES (1, 'first')"),
    ] {
        sqlx::query(&sql).execute(&mut conn).await.expect(&sql);
    }
    Some((conn, schema))
}

async fn drop_schema(mut conn: PgConnection, schema: &str) {
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&mut conn).await.expect("drop schema");
}

async fn read_small(conn: &mut PgConnection) -> (String, i16) {
    let query = sqlx::query_as("SELECT title, version FROM small_versions WHERE id = 1");
    query.fetch_one(conn).await.expect("read row")
}

async fn read_big(conn: &mut PgConnection) -> (String, i64) {
    let query = sqlx::query_as("SELECT title, version FROM big_versions WHERE id = 1");
    query.fetch_one(conn).await.expect("read row")
}

#[tokio::test]
async fn smallint_version_round_trips_and_refuses_a_stale_update() {
    let Some((mut conn, schema)) = connect("derive i16 version", "small_versions", "smallint").await else { return };
    let mut patch = SmallPatch { id: 1, title: "second".into(), version: 0 };
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), 1);
    assert_eq!(read_small(&mut conn).await, ("second".to_owned(), 1));

    // A writer that read version 0 too: refused, and the row keeps the first write.
    let stale = SmallPatch { title: "late".into(), ..patch.clone() };
    let err = stale.update_by_id(&mut conn).await.unwrap_err();
    assert!(
        matches!(&err, OptimisticError::Stale(StaleRecord { expected_version: 0, actual_version: Some(1), .. })),
        "{err}"
    );
    assert_eq!(read_small(&mut conn).await, ("second".to_owned(), 1));

    // The version read back as the column's type goes straight into the next update.
    let (_, version) = read_small(&mut conn).await;
    patch.version = version;
    patch.title = "third".into();
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), 2);
    let builder = VersionedUpdate::table("small_versions").key("id", 1_i64).version("version", 2_i16);
    assert_eq!(builder.set("title", "fourth").execute(&mut conn).await.unwrap(), 3);
    assert_eq!(read_small(&mut conn).await, ("fourth".to_owned(), 3));

    // The top of smallint: the last version it holds is written, the next one overflows.
    sqlx::query("UPDATE small_versions SET version = 32766").execute(&mut conn).await.unwrap();
    patch.version = i16::MAX - 1;
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), i64::from(i16::MAX));
    patch.version = i16::MAX;
    let err = patch.update_by_id(&mut conn).await.unwrap_err();
    assert!(matches!(err, OptimisticError::VersionOverflow { .. }), "{err}");
    assert_eq!(read_small(&mut conn).await.1, i16::MAX);

    drop_schema(conn, &schema).await;
}

#[tokio::test]
async fn bigint_version_round_trips_and_refuses_a_stale_update() {
    let Some((mut conn, schema)) = connect("derive i64 version", "big_versions", "bigint").await else { return };
    let mut patch = BigPatch { id: 1, title: "second".into(), version: 0 };
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), 1);
    assert_eq!(read_big(&mut conn).await, ("second".to_owned(), 1));

    let stale = BigPatch { title: "late".into(), ..patch.clone() };
    let err = stale.update_by_id(&mut conn).await.unwrap_err();
    assert!(
        matches!(&err, OptimisticError::Stale(StaleRecord { expected_version: 0, actual_version: Some(1), .. })),
        "{err}"
    );
    assert_eq!(read_big(&mut conn).await, ("second".to_owned(), 1));

    // Versions beyond 32-bit range are compared and bumped as bigints.
    let high = i64::from(i32::MAX) + 10;
    sqlx::query(&format!("UPDATE big_versions SET version = {high}")).execute(&mut conn).await.unwrap();
    patch.version = high;
    patch.title = "third".into();
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), high + 1);
    let err = patch.update_by_id(&mut conn).await.unwrap_err();
    assert!(
        matches!(&err, OptimisticError::Stale(StaleRecord { expected_version, actual_version: Some(actual), .. })
            if *expected_version == high && *actual == high + 1),
        "{err}"
    );
    assert_eq!(read_big(&mut conn).await, ("third".to_owned(), high + 1));

    // The top of bigint.
    sqlx::query(&format!("UPDATE big_versions SET version = {}", i64::MAX - 1)).execute(&mut conn).await.unwrap();
    patch.version = i64::MAX - 1;
    assert_eq!(patch.update_by_id(&mut conn).await.unwrap(), i64::MAX);
    patch.version = i64::MAX;
    let err = patch.update_by_id(&mut conn).await.unwrap_err();
    assert!(matches!(err, OptimisticError::VersionOverflow { .. }), "{err}");

    drop_schema(conn, &schema).await;
}
