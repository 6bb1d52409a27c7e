//! An operation that gets no connection from the pool says why, in words an operator can
//! act on: every connection of the pool busy, or the server refusing new connections
//! (here a role's connection limit, as a server at its `max_connections` refuses).

use std::time::Duration;

use crate::common::key;
use distlock_api::{LockError, LockStore, Token, Ttl};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use distlock_postgres::{NoConnection, PostgresLockStore};

const TIMEOUT: Duration = Duration::from_millis(500);

/// The [`NoConnection`] behind a failed acquisition, and the error's whole message.
async fn no_connection(store: &PostgresLockStore) -> (String, String) {
    let err =
        store.try_acquire(&key("k"), &Token::generate(), Ttl::new(Duration::from_secs(5)).unwrap()).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
    let cause = err.cause().expect("a cause");
    assert!(cause.downcast_ref::<NoConnection>().is_some(), "{cause:?}");
    let message = err.report().to_string();
    eprintln!("{message}");
    (format!("{cause:?}"), message)
}

#[tokio::test]
async fn a_busy_pool_says_all_its_connections_are_busy() {
    let Some(url) = kit::postgres_url("postgres pool errors") else { return };
    let pool = PgPoolOptions::new().max_connections(1).acquire_timeout(TIMEOUT).connect_lazy(&url).unwrap();
    let store = PostgresLockStore::builder().build(pool).unwrap();
    let held = store.pool().acquire().await.expect("the pool's one connection");
    let (cause, message) = no_connection(&store).await;
    drop(held);
    assert!(cause.starts_with("Busy"), "{cause}");
    assert!(message.contains("all 1 connections of the pool are busy"), "{message}");
    assert!(message.contains("raise the pool's max_connections or run fewer operations at once"), "{message}");
    store.pool().close().await;
}

#[tokio::test]
async fn a_refusing_server_is_named_with_its_answer() {
    let Some(url) = kit::postgres_url("postgres pool errors") else { return };
    // A role the server lets open one connection at a time.
    let role = postgres_server::random_identifier("dl_limited");
    postgres_server::execute(&url, &format!("CREATE ROLE {role} LOGIN PASSWORD 'limited' CONNECTION LIMIT 1")).await;
    let options: PgConnectOptions = url.parse().unwrap();
    let options = options.username(&role).password("limited");
    let pool = PgPoolOptions::new().max_connections(2).acquire_timeout(TIMEOUT).connect_lazy_with(options);
    let store = PostgresLockStore::builder().build(pool).unwrap();
    // The pool holds its first connection, and the server refuses the second.
    let held = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match store.pool().acquire().await {
                Ok(conn) => break conn,
                // A backend of an earlier test's role may still be exiting.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("one connection of the limited role");
    let (cause, message) = no_connection(&store).await;
    drop(held);
    store.pool().close().await;
    postgres_server::execute(&url, &format!("DROP ROLE IF EXISTS {role}")).await;
    assert!(cause.starts_with("Refused"), "{cause}");
    assert!(message.contains("the server refused new connections: "), "{message}");
    assert!(message.contains(&format!("too many connections for role \"{role}\"")), "{message}");
    assert!(message.contains("the pool holds 1 of its 2 connections"), "{message}");
}
