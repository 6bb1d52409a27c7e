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

/// A layout made by a version without `placed_at`: `ensure_schema` adds the column to the
/// queue and places tables, dates the places already taken from the upgrade, and places
/// then report their age.
#[tokio::test]
async fn ensure_schema_adds_placed_at_to_an_older_layout() {
    use distlock_api::{GroupAcquire, GroupRequest, LockMode, OwnerId, QueuedAttempt, StoreMember};
    use distlock_mysql::sqlx;

    let Some(url) = kit::mysql_url("mysql placed_at upgrade") else { return };
    let table = format!("old_{}", Token::generate().short().replace('-', ""));
    let store = MysqlLockStore::builder().table(&table).connect(&url).await.unwrap();
    store.ensure_schema().await.unwrap();
    for suffix in ["_queue", "_places"] {
        sqlx::query(&format!("ALTER TABLE `{table}{suffix}` DROP COLUMN placed_at"))
            .execute(store.pool())
            .await
            .unwrap();
    }
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let (queued, holder, waiter) = (Token::generate(), Token::generate(), Token::generate());
    let key = LockKey::new("older-layout").unwrap().to_store_key();
    sqlx::query(&format!(
        "INSERT INTO `{table}_queue` (lock_key, token, expires_at) \
         VALUES (?, ?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + 60000000)"
    ))
    .bind(key.as_str())
    .bind(queued.as_str())
    .execute(store.pool())
    .await
    .unwrap();

    store.ensure_schema().await.unwrap();
    store.ensure_schema().await.expect("a second run finds the columns");
    let queue = store.queue().expect("a fair queue");
    let places = queue.queue_places(&key).await.unwrap();
    let young = |waited: Option<Duration>| waited.is_some_and(|waited| waited < Duration::from_secs(30));
    assert!(matches!(places.as_slice(), [place] if place.token == queued && young(place.waited)), "{places:?}");
    assert!(store.try_acquire(&key, &holder, ttl).await.unwrap().is_acquired());
    let attempt = QueuedAttempt { key: &key, token: &waiter, ttl, place: ttl };
    assert!(!queue.try_acquire_queued(attempt).await.unwrap().is_acquired());
    let places = queue.queue_places(&key).await.unwrap();
    assert!(places.iter().any(|place| place.token == waiter && young(place.waited)), "{places:?}");

    let groups = store.groups().expect("groups");
    let name = LockKey::new("older-layout-group").unwrap().to_store_key();
    let owner = OwnerId::new("test", "upgrade").unwrap();
    let members = [StoreMember::new(name.clone(), LockMode::Exclusive, Some(1))];
    let hold = GroupRequest::new(&members, &holder, &owner, ttl, None, None);
    assert!(matches!(groups.try_acquire_group(hold).await.unwrap(), GroupAcquire::Acquired { .. }));
    let wait = GroupRequest::new(&members, &waiter, &owner, ttl, Some(ttl), None);
    assert!(matches!(groups.try_acquire_group(wait).await.unwrap(), GroupAcquire::Blocked { .. }));
    let places = groups.places(&name).await.unwrap();
    assert!(matches!(places.as_slice(), [place] if place.token == waiter && young(place.waited)), "{places:?}");

    let drop = ["", "_queue", "_names", "_holders", "_places", "_permits", "_values", "_waiters"]
        .iter()
        .map(|suffix| format!("`{table}{suffix}`"))
        .collect::<Vec<_>>()
        .join(", ");
    sqlx::raw_sql(&format!("DROP TABLE {drop}")).execute(store.pool()).await.unwrap();
}
