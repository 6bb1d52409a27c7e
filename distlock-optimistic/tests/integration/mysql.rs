//! Versioned and fenced updates on the private MariaDB server the test kit starts
//! (`DISTLOCK_MYSQL_URL`, set by `scripts/test.sh`). Each test creates its own table.
#![cfg(feature = "mysql")]

use distlock_conformance::kit::postgres_server::random_identifier;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::MySql;

async fn setup(test: &str) -> Option<(sqlx::MySqlPool, String)> {
    let url = distlock_conformance::kit::mysql_url(test)?;
    let pool = MySqlPoolOptions::new().max_connections(8).connect(&url).await.expect("connect");
    let table = random_identifier("opt");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, counter BIGINT NOT NULL DEFAULT 0, title TEXT, \
         version BIGINT NOT NULL DEFAULT 0, fence BIGINT) ENGINE = InnoDB"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    sqlx::query(&format!("INSERT INTO {table} (id) VALUES (1)")).execute(&pool).await.expect("insert");
    Some((pool, table))
}

cases!(MySql, setup);

#[test]
fn the_statement_is_the_one_written_by_hand() {
    let sql = Update::new("posts").key("id", 7_i64).version("version", 3).set("title", "t").fenced("fence", 9).sql();
    assert_eq!(
        sql.unwrap(),
        "UPDATE `posts` SET `title` = ?, `version` = `version` + 1, `fence` = ? \
         WHERE `id` = ? AND `version` = ? AND (`fence` IS NULL OR `fence` <= ?)"
    );
    // Without `RETURNING`, a forced update learns its new version from the insert id.
    let forced = Update::new("posts").key("id", 7_i64).version("v", 3).force().sql().unwrap();
    assert_eq!(forced, "UPDATE `posts` SET `v` = LAST_INSERT_ID(`v` + 1) WHERE `id` = ?");
}

#[tokio::test]
async fn version_overflow_is_its_own_error() {
    let Some((pool, table)) = setup("version_overflow").await else { return };
    sqlx::query(&format!("ALTER TABLE {table} MODIFY version SMALLINT NOT NULL")).execute(&pool).await.unwrap();
    sqlx::query(&format!("UPDATE {table} SET version = 32767")).execute(&pool).await.unwrap();
    let err = Update::new(&table).key("id", 1_i64).version("version", 32767_i16).execute(&pool).await.unwrap_err();
    assert!(matches!(err, OptimisticError::VersionOverflow { .. }), "{err}");
    assert_eq!(read(&pool, &table).await, (0, 32767));
}
