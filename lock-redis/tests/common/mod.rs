//! Helpers shared by this crate's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use distlock_api::{LockKey, StoreKey, Token};
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::redis::{self, FromRedisValue};
use distlock_redis::{RedisLockStore, RedisLockStoreBuilder};

/// A key prefix no other test uses, so tests share one server without flushing it.
pub fn unique_prefix(test: &str) -> String {
    format!("dltest-{test}-{}", Token::generate().as_str())
}

pub fn store_key(key: &str) -> StoreKey {
    LockKey::new(key).unwrap().to_store_key()
}

/// A store on the shared server (`DISTLOCK_REDIS_URL`) with a unique prefix; `None` when
/// the test is skipped.
pub async fn shared_store(test: &str, builder: RedisLockStoreBuilder) -> Option<RedisLockStore> {
    let url = distlock_conformance::kit::redis_url(test)?;
    let store = builder.key_prefix(unique_prefix(test)).connect(&url).await.expect("connect to DISTLOCK_REDIS_URL");
    Some(store)
}

/// Sends a raw command on the store's own connection.
pub async fn raw<T: FromRedisValue>(store: &RedisLockStore, args: &[&str]) -> T {
    let mut conn: ConnectionManager = store.connection_manager().clone();
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn).await.unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

/// Every key under the store's prefix but the record of its settings
/// ([`RedisLockStore::settings_key`]), which stays for as long as the prefix is used.
pub async fn keys_left(store: &RedisLockStore) -> Vec<String> {
    let keys: Vec<String> = raw(store, &["KEYS", &format!("{}:*", store.key_prefix())]).await;
    let settings = store.settings_key();
    keys.into_iter().filter(|key| *key != settings).collect()
}

/// Deletes every key under the store's prefix (fencing counters are never deleted by the
/// store itself).
pub async fn cleanup(store: &RedisLockStore) {
    let pattern = format!("{}:*", store.key_prefix());
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) =
            raw(store, &["SCAN", &cursor.to_string(), "MATCH", &pattern, "COUNT", "1000"]).await;
        for key in keys {
            let _: i64 = raw(store, &["DEL", &key]).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Retries `op` until it succeeds or `within` runs out (for "the store works again" checks
/// after a fault); returns the value and how many attempts failed.
pub async fn eventually<T, E: std::fmt::Display, F, Fut>(within: Duration, mut op: F) -> (T, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut failures = 0;
    loop {
        match op().await {
            Ok(value) => return (value, failures),
            Err(err) if tokio::time::Instant::now() < deadline => {
                failures += 1;
                eprintln!("not yet: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("still failing after {within:?}: {err}"),
        }
    }
}
