//! The Redis baseline: the Redis store's own commands sent with the `redis` crate —
//! `SET key token NX PX ttl`, and the store's release script by `EVALSHA`.

use std::time::Duration;

use distlock_api::{LockError, LockKey, Token};
use redis::aio::ConnectionManager;
use redis::Value;

use super::locker::{poll, Locker};

fn redis_error(operation: &'static str, key: Option<&str>, error: redis::RedisError) -> LockError {
    LockError::store("redis", operation, key, error)
}

/// Acquires with `SET key token NX PX ttl` and releases with the store's release script
/// (`EVALSHA`), on keys laid out as the store lays them out: `{key_prefix}:lock:{name}`.
#[derive(Clone)]
pub struct RawRedis {
    conn: ConnectionManager,
    key_prefix: String,
    release_sha: String,
    ttl_ms: u64,
    retry: Duration,
}

impl std::fmt::Debug for RawRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRedis")
            .field("key_prefix", &self.key_prefix)
            .field("release_sha", &self.release_sha)
            .finish_non_exhaustive()
    }
}

impl RawRedis {
    /// Sends on `conn` (share the store's connection to compare like with like), after
    /// loading `release_script` (the store's `RELEASE_SCRIPT`) with `SCRIPT LOAD`.
    /// Leases last `ttl`; waiting workers poll every `retry`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the script cannot be loaded.
    pub async fn new(
        mut conn: ConnectionManager,
        key_prefix: &str,
        release_script: &str,
        ttl: Duration,
        retry: Duration,
    ) -> Result<Self, LockError> {
        let release_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(release_script)
            .query_async(&mut conn)
            .await
            .map_err(|error| redis_error("load the release script for", None, error))?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        Ok(Self { conn, key_prefix: key_prefix.to_owned(), release_sha, ttl_ms, retry })
    }

    /// [`new`](Self::new) on a connection of its own to `url`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the URL is malformed or the server unreachable.
    pub async fn connect(
        url: &str,
        key_prefix: &str,
        release_script: &str,
        ttl: Duration,
        retry: Duration,
    ) -> Result<Self, LockError> {
        let client = redis::Client::open(url).map_err(|error| redis_error("connect", None, error))?;
        let conn = client.get_connection_manager().await.map_err(|error| redis_error("connect", None, error))?;
        Self::new(conn, key_prefix, release_script, ttl, retry).await
    }
}

impl Locker for RawRedis {
    /// (the Redis key, the application's key, this worker's token)
    type Key = (String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        Ok((format!("{}:{}", self.key_prefix, key.as_str()), name.to_owned(), Token::generate()))
    }

    async fn acquire(&self, (key, name, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let mut conn = self.conn.clone();
            let set: Value = redis::cmd("SET")
                .arg(key)
                .arg(token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .query_async(&mut conn)
                .await
                .map_err(|error| redis_error("acquire", Some(name), error))?;
            Ok(matches!(set, Value::Okay))
        })
        .await
    }

    async fn release(&self, (key, name, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(1)
            .arg(key)
            .arg(token.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|error| redis_error("release", Some(name), error))?;
        Ok(released == 1)
    }
}
