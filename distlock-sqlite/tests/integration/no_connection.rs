//! An operation that gets no connection from the pool says why, in words an operator can
//! act on: every connection of the pool busy.

use std::time::Duration;

use distlock_api::{LockError, LockKey, LockStore, Token, Ttl};
use distlock_sqlite::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use distlock_sqlite::{NoConnection, SqliteLockStore};

const TIMEOUT: Duration = Duration::from_millis(500);

#[tokio::test]
async fn a_busy_pool_says_all_its_connections_are_busy() {
    let dir = std::env::temp_dir().join(format!("distlock-sqlite-no-connection-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let path = dir.join(format!("busy-{}.db", Token::generate().short()));
    let options = SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    let pool = SqlitePoolOptions::new().max_connections(1).acquire_timeout(TIMEOUT).connect_lazy_with(options);
    let store = SqliteLockStore::builder().build(pool).unwrap();
    let held = store.pool().acquire().await.expect("the pool's one connection");
    let key = LockKey::new("busy").unwrap().to_store_key();
    let err = store.try_acquire(&key, &Token::generate(), Ttl::new(Duration::from_secs(5)).unwrap()).await.unwrap_err();
    drop(held);
    assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
    let cause = err.cause().expect("a cause");
    assert!(matches!(cause.downcast_ref::<NoConnection>(), Some(NoConnection::Busy { .. })), "{cause:?}");
    let message = err.report().to_string();
    eprintln!("{message}");
    assert!(message.contains("all 1 connections of the pool are busy"), "{message}");
    assert!(message.contains("raise the pool's max_connections or run fewer operations at once"), "{message}");
    store.pool().close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
