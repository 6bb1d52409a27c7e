//! Connecting: settings checked before any I/O, servers that refuse, and a role without
//! DDL rights (`create=false`).

use std::time::{Duration, Instant};

use distlock_api::{LockError, LockKey, LockStore, Token, Ttl};
use distlock_conformance::kit;
use distlock_mysql::MysqlLockStore;

#[tokio::test]
async fn bad_settings_are_config_errors_before_any_io() {
    // Nothing listens on port 1: a Config error proves no connection was tried first.
    for url in [
        "mysql://root@127.0.0.1:1/db?table=a-b",
        "mysql://root@127.0.0.1:1/db?table=x%3B%20DROP%20TABLE%20y",
        "mysql://root@127.0.0.1:1/db?create=maybe",
        "mysql://root@127.0.0.1:1/db?bogus=1",
        "postgres://root@127.0.0.1:1/db",
    ] {
        let err = MysqlLockStore::connect(url).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
    }
    let err = MysqlLockStore::builder().table("a").connect("mysql://root@127.0.0.1:1/db?table=b").await.unwrap_err();
    assert!(err.to_string().contains("`table`"), "{err}");
    let err = MysqlLockStore::builder()
        .acquire_timeout(Duration::ZERO)
        .connect("mysql://root@127.0.0.1:1/db")
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
}

#[tokio::test]
async fn a_refused_connection_is_a_store_error_at_once() {
    let started = Instant::now();
    let err = MysqlLockStore::connect("mysql://root:secret@127.0.0.1:1/db").await.unwrap_err();
    assert!(matches!(err, LockError::Store { backend: "mysql", operation: "connect", .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains("secret"));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

/// With `create=false` the store creates nothing: a missing table fails `connect` with the
/// server's message naming it; once a DBA ran `ddl()`, the same URL works.
#[tokio::test]
async fn create_false_only_checks_the_table() {
    let Some(url) = kit::mysql_url("mysql create=false") else { return };
    let table = format!("dba_{}", Token::generate().short().replace('-', ""));
    let separator = if url.contains('?') { '&' } else { '?' };
    let locked_down = format!("{url}{separator}table={table}&create=false");
    let err = MysqlLockStore::connect(&locked_down).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "connect", .. }), "{err}");
    let cause = err.cause().map(ToString::to_string).unwrap_or_default();
    assert!(cause.contains(&table), "{cause}");

    let owner = MysqlLockStore::builder().table(&table).connect(&url).await.unwrap();
    for ddl in owner.ddl() {
        distlock_mysql::sqlx::query(ddl).execute(owner.pool()).await.unwrap();
    }
    let store = MysqlLockStore::connect(&locked_down).await.unwrap();
    store.ensure_schema().await.unwrap();
    let key = LockKey::new("dba-made").unwrap().to_store_key();
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, Ttl::new(Duration::from_secs(5)).unwrap()).await.unwrap().is_acquired());
    assert!(store.release(&key, &token).await.unwrap());
    let drop = ["", "_queue", "_names", "_holders", "_places", "_permits", "_values"]
        .iter()
        .map(|suffix| format!("`{table}{suffix}`"))
        .collect::<Vec<_>>()
        .join(", ");
    distlock_mysql::sqlx::raw_sql(&format!("DROP TABLE {drop}")).execute(owner.pool()).await.unwrap();
}
