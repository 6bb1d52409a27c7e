//! An operation that gets no connection from the pool says why, in words an operator can
//! act on: every connection of the pool busy, or the server refusing a new connection
//! (here a user's `MAX_USER_CONNECTIONS`, as a server at its `max_connections` refuses).

use std::time::Duration;

use distlock_api::{LockError, LockKey, LockStore, Token, Ttl};
use distlock_conformance::kit;
use distlock_mysql::sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use distlock_mysql::sqlx::{Connection, MySqlConnection};
use distlock_mysql::{MysqlLockStore, NoConnection};

const TIMEOUT: Duration = Duration::from_millis(500);

/// The [`NoConnection`] behind a failed acquisition, and the error's whole message.
async fn no_connection(store: &MysqlLockStore) -> (String, String) {
    let key = LockKey::new(format!("no-connection:{}", Token::generate().short())).unwrap().to_store_key();
    let err = store.try_acquire(&key, &Token::generate(), Ttl::new(Duration::from_secs(5)).unwrap()).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
    let cause = err.cause().expect("a cause");
    assert!(cause.downcast_ref::<NoConnection>().is_some(), "{cause:?}");
    let message = err.report().to_string();
    eprintln!("{message}");
    (format!("{cause:?}"), message)
}

/// Runs `statement` as the URL's (admin) user.
async fn execute(url: &str, statement: &str) {
    let mut conn = MySqlConnection::connect(url).await.expect("admin connection");
    distlock_mysql::sqlx::raw_sql(statement).execute(&mut conn).await.unwrap_or_else(|e| panic!("{statement}: {e}"));
    let _ = conn.close().await;
}

#[tokio::test]
async fn a_busy_pool_says_all_its_connections_are_busy() {
    let Some(url) = kit::mysql_url("mysql pool errors") else { return };
    let pool = MySqlPoolOptions::new().max_connections(1).acquire_timeout(TIMEOUT).connect_lazy(&url).unwrap();
    let store = MysqlLockStore::builder().build(pool).unwrap();
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
    let Some(url) = kit::mysql_url("mysql pool errors") else { return };
    // A user the server lets open one connection at a time.
    let user = format!("dl_limited_{}", Token::generate().short().replace('-', ""));
    let options: MySqlConnectOptions = url.parse().unwrap();
    let database = options.get_database().expect("a database in the URL").to_owned();
    execute(
        &url,
        &format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'limited' WITH MAX_USER_CONNECTIONS 1; \
             GRANT ALL ON `{database}`.* TO '{user}'@'%'"
        ),
    )
    .await;
    let options = options.username(&user).password("limited");
    let pool = MySqlPoolOptions::new().max_connections(2).acquire_timeout(TIMEOUT).connect_lazy_with(options);
    let store = MysqlLockStore::builder().build(pool).unwrap();
    // The pool holds its first connection, and the server refuses the second.
    let held = store.pool().acquire().await.expect("one connection of the limited user");
    let (cause, message) = no_connection(&store).await;
    drop(held);
    store.pool().close().await;
    execute(&url, &format!("DROP USER IF EXISTS '{user}'@'%'")).await;
    assert!(cause.starts_with("Rejected"), "{cause}");
    assert!(message.contains("the server refused a new connection: "), "{message}");
    assert!(message.contains(&format!("'{user}'")) && message.contains("max_user_connections"), "{message}");
    assert!(message.contains("the pool holds 1 of its 2 connections and could not open another"), "{message}");
}
