//! Versioned and fenced updates on SQLite database files, each test in a fresh directory
//! of its own.
#![cfg(feature = "sqlite")]

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::Sqlite;

async fn setup(test: &str) -> Option<(sqlx::SqlitePool, String)> {
    let dir = distlock_conformance::kit::fresh_dir(&format!("optimistic-{test}"));
    let options = SqliteConnectOptions::new()
        .filename(dir.join(format!("{test}.db")))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(std::time::Duration::from_secs(30));
    let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options).await.expect("open");
    let table = "posts".to_owned();
    sqlx::query(&format!(
        "CREATE TABLE {table} (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0, title TEXT, \
         version INTEGER NOT NULL DEFAULT 0, fence INTEGER)"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    sqlx::query(&format!("INSERT INTO {table} (id) VALUES (1)")).execute(&pool).await.expect("insert");
    Some((pool, table))
}

cases!(Sqlite, setup);

#[test]
fn the_statement_uses_numbered_parameters_and_double_quotes() {
    let sql = Update::new("posts").key("id", 7_i64).version("version", 3).set("title", "t").fenced("fence", 9).sql();
    assert_eq!(
        sql.unwrap(),
        "UPDATE \"posts\" SET \"title\" = ?2, \"version\" = \"version\" + 1, \"fence\" = ?4 \
         WHERE \"id\" = ?1 AND \"version\" = ?3 AND (\"fence\" IS NULL OR \"fence\" <= ?4)"
    );
    let forced = Update::new("posts").key("id", 7_i64).version("v", 3).force().sql().unwrap();
    assert!(forced.ends_with("RETURNING \"v\" AS __distlock_new_version"), "{forced}");
}
