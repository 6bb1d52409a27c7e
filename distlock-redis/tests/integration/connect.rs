//! Connecting checks the server: each way a server can refuse a connection's settings
//! (no password, a wrong password, a database it does not have) or not answer at all
//! fails at `connect` with the server's own reason and never the password. Every case
//! starts its own `redis-server`, so `CONFIG SET requirepass` touches nobody else.

use crate::common;

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use common::{store_key, unique_prefix};
use distlock_api::{Acquire, LockError, LockStore, Token, Ttl};
use distlock_conformance::kit::redis_server::RedisServer;
use distlock_redis::{RedisLockStore, RedisLockStoreBuilder};

/// A password no message could contain by accident.
fn password() -> String {
    format!("pw-{}", Token::generate().as_str())
}

/// `server` with `requirepass password`.
fn require_password(server: &RedisServer, password: &str) {
    server.command(&["CONFIG", "SET", "requirepass", password]);
}

fn server_url_with(server: &RedisServer, credentials: &str, path: &str) -> String {
    format!("redis://{credentials}127.0.0.1:{}{path}", server.port())
}

/// A `connect` failure: a store error of operation `connect` whose message contains
/// `cause` (in any case) and none of `secrets` (nor does its `Debug`).
fn assert_connect_error(result: Result<RedisLockStore, LockError>, cause: &str, secrets: &[&str]) -> LockError {
    let err = match result {
        Ok(store) => panic!("connect succeeded: {store:?}"),
        Err(err) => err,
    };
    assert!(matches!(err, LockError::Store { operation: "connect", backend: "redis", key: None, .. }), "{err:?}");
    let (display, debug) = (err.report().to_string(), format!("{err:?}"));
    assert!(display.to_lowercase().contains(&cause.to_lowercase()), "{display:?} does not say {cause:?}");
    eprintln!("connect failed as expected: {display}");
    assert!(!display.contains('\n'), "one line: {display:?}");
    for secret in secrets {
        assert!(!display.contains(secret) && !debug.contains(secret), "the password is echoed: {display} / {debug}");
    }
    err
}

async fn cycle(store: &RedisLockStore) {
    let (key, token) = (store_key("connect:cycle"), Token::generate());
    let ttl = Ttl::new(Duration::from_secs(10)).unwrap();
    assert!(store.try_acquire(&key, &token, ttl).await.unwrap().is_acquired());
    assert!(store.release(&key, &token).await.unwrap());
}

#[tokio::test]
async fn a_server_that_needs_a_password_refuses_a_url_without_one_at_connect() {
    let Some(server) = RedisServer::start_or_skip("connect without password") else { return };
    let secret = password();
    require_password(&server, &secret);
    let result = RedisLockStore::connect(&server_url_with(&server, "", "")).await;
    let err = assert_connect_error(result, "NOAUTH", &[&secret]);
    assert_eq!(err.to_string(), "redis store failed to connect");
}

#[tokio::test]
async fn a_wrong_password_fails_at_connect_without_echoing_either_password() {
    let Some(server) = RedisServer::start_or_skip("connect with a wrong password") else { return };
    let (secret, wrong) = (password(), password());
    // An ACL user as well as the default user's password (the kit's own commands are
    // not authenticated, so the user comes first).
    server.command(&["ACL", "SETUSER", "app", "on", &format!(">{secret}"), "~*", "&*", "+@all"]);
    require_password(&server, &secret);
    let result = RedisLockStore::connect(&server_url_with(&server, &format!(":{wrong}@"), "")).await;
    assert_connect_error(result, "password authentication failed", &[&secret, &wrong]);

    // The ACL user with a wrong password: the same.
    let result = RedisLockStore::connect(&server_url_with(&server, &format!("app:{wrong}@"), "")).await;
    assert_connect_error(result, "password authentication failed", &[&secret, &wrong]);

    // The right credentials connect, and the store works.
    let store = RedisLockStore::connect(&server_url_with(&server, &format!(":{secret}@"), "")).await.unwrap();
    cycle(&store).await;
    let store = RedisLockStore::connect(&server_url_with(&server, &format!("app:{secret}@"), "/3")).await.unwrap();
    cycle(&store).await;
    assert!(!format!("{store:?}").contains(&secret), "{store:?}");
}

#[tokio::test]
async fn a_database_the_server_does_not_have_fails_at_connect() {
    let Some(server) = RedisServer::start_or_skip("connect to a missing database") else { return };
    // A fresh server has databases 0–15.
    let result = RedisLockStore::connect(&server_url_with(&server, "", "/16")).await;
    assert_connect_error(result, "DB index is out of range", &[]);
    let secret = password();
    require_password(&server, &secret);
    let result = RedisLockStore::connect(&server_url_with(&server, &format!(":{secret}@"), "/4000000000")).await;
    assert_connect_error(result, "out of range", &[&secret]);

    let store = RedisLockStore::connect(&server_url_with(&server, &format!(":{secret}@"), "/15")).await.unwrap();
    cycle(&store).await;
}

#[tokio::test]
async fn the_database_in_the_path_is_the_one_the_store_uses() {
    let Some(server) = RedisServer::start_or_skip("database in the path") else { return };
    let prefix = unique_prefix("db");
    let in_db = |db: u8| {
        let url = format!("{}/{db}?prefix={prefix}", server.url());
        async move { RedisLockStore::connect(&url).await.unwrap() }
    };
    let (db5, db5_again, db0) = (in_db(5).await, in_db(5).await, in_db(0).await);
    let (key, token) = (store_key("db:k"), Token::generate());
    let ttl = Ttl::new(Duration::from_secs(10)).unwrap();
    assert!(db5.try_acquire(&key, &token, ttl).await.unwrap().is_acquired());
    assert!(matches!(db5_again.try_acquire(&key, &Token::generate(), ttl).await.unwrap(), Acquire::Held { .. }));
    assert!(db0.inspect(&key).await.unwrap().is_none(), "database 0 is another keyspace");
    // The kit's own connection looks at database 0: the record of db0's settings only.
    assert_eq!(server.keys("*"), [format!("{prefix}:lock-settings")]);
}

#[tokio::test]
async fn an_unreachable_server_fails_at_once_with_connection_refused() {
    // A port that was free a moment ago: nothing listens there.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let result = RedisLockStoreBuilder::new()
        .connect_timeout(Duration::from_secs(5))
        .connect(&format!("redis://:hunter2@127.0.0.1:{port}"))
        .await;
    let err = assert_connect_error(result, "refused", &["hunter2"]);
    // One attempt, no reconnection back-off: well within the connection timeout.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}: {err}", started.elapsed());
}

#[tokio::test]
async fn a_server_that_never_answers_fails_within_the_timeouts() {
    // The kernel completes the handshake (backlog), but nobody ever reads or answers.
    let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let result = RedisLockStoreBuilder::new()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .connect(&format!("redis://127.0.0.1:{port}"))
        .await;
    assert!(matches!(result, Err(LockError::Store { operation: "connect", .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    drop(silent);
}
