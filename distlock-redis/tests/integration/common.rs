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

/// What every key of the store starts with: `{prefix}:`, or nothing for the empty prefix.
fn stem(store: &RedisLockStore) -> String {
    if store.key_prefix().is_empty() {
        String::new()
    } else {
        format!("{}:", store.key_prefix())
    }
}

/// A lock's key, as the README documents it: `{prefix}:lock:{key}`.
pub fn lock_key(store: &RedisLockStore, key: &StoreKey) -> String {
    format!("{}{}", stem(store), key.as_str())
}

/// A fencing-mode holder's fence record: `{prefix}:fence:lock:{key}`.
pub fn fence_key(store: &RedisLockStore, key: &StoreKey) -> String {
    format!("{}fence:{}", stem(store), key.as_str())
}

/// The store's one fencing counter: `{prefix}:fence`.
pub fn fence_counter_key(store: &RedisLockStore) -> String {
    format!("{}fence", stem(store))
}

/// The record of the settings every client of the prefix shares: `{prefix}:lock-settings`.
pub fn settings_key(store: &RedisLockStore) -> String {
    format!("{}lock-settings", stem(store))
}

/// The channel releases are published on: `{prefix}:released`.
pub fn release_channel(store: &RedisLockStore) -> String {
    format!("{}released", stem(store))
}

/// The keys of a group name start `{prefix}:group:{<name>}`, the name with `%`, `{` and
/// `}` written `%25`, `%7B` and `%7D`.
pub fn group_key_stem(store: &RedisLockStore, key: &StoreKey) -> String {
    let name = key.lock_key().replace('%', "%25").replace('{', "%7B").replace('}', "%7D");
    format!("{}group:{{{name}}}", stem(store))
}

/// The lease key of the group `token` took: `{prefix}:group-lease:<token>`.
pub fn group_lease_key(store: &RedisLockStore, token: &Token) -> String {
    format!("{}group-lease:{}", stem(store), token.as_str())
}

/// Every key under the store's prefix but the record of its settings
/// ([`settings_key`]), which stays for as long as the prefix is used.
pub async fn keys_left(store: &RedisLockStore) -> Vec<String> {
    let keys: Vec<String> = raw(store, &["KEYS", &format!("{}:*", store.key_prefix())]).await;
    let settings = settings_key(store);
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

/// Releases `held` (a lock on `key`) while another task waits for `key` with a retry
/// interval far longer than the test, and asserts the waiter got the lock soon after:
/// only the release notification can have woken it.
pub async fn release_wakes_the_waiter(
    locks: &distlock_api::LockManager,
    held: distlock_api::DistributedLock,
    key: &str,
) {
    let options =
        distlock_api::LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(30));
    let waiter = tokio::spawn({
        let (locks, key) = (locks.clone(), key.to_owned());
        async move { locks.lock_opts(&key, Duration::from_secs(30), &options).await.map(|lock| lock.token().clone()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = tokio::time::Instant::now();
    assert!(held.release().await.unwrap());
    let _ = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken in time").unwrap().unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(5), "{:?}", released_at.elapsed());
}
