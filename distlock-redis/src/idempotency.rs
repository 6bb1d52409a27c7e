//! `RedisIdempotencyStore`: the idempotency contract of `distlock_api::idempotency` on
//! one Redis server — one hash per key, one Lua script per operation (the
//! `idempotency_*.lua` files of `src/lua/`).

use std::fmt;

use async_trait::async_trait;
use distlock_api::idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use redis::aio::ConnectionManager;
use redis::Value;

use crate::scripts::SCRIPTS;
use crate::single::RedisLockStore;

const BACKEND: &str = "redis";

/// An [`IdempotencyStore`] on one Redis server.
///
/// Each record is one hash, `{key_prefix}:idem:{key}`, with the fields `fp` (the
/// fingerprint), `tok` (the running claim's token) and `resp` (the completed result);
/// the key's expiry is the claim's lease while it runs and the retention once completed,
/// so Redis itself removes crashed claims and old results. Every operation is one script
/// sent with `EVALSHA` (`EVAL` on `NOSCRIPT`), and every record is one key, so the layout
/// also fits one Redis Cluster slot per record.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// use distlock_idempotency::Idempotency;
/// use distlock_redis::RedisIdempotencyStore;
///
/// // The URL of the lock store (`?prefix=` included): records are `myapp:idem:{key}`.
/// let store = RedisIdempotencyStore::connect("redis://127.0.0.1:6379/0?prefix=myapp").await?;
/// let idem = Idempotency::new(std::sync::Arc::new(store));
/// # Ok(()) }
/// ```
///
/// Cloning is cheap; clones share the connection.
#[derive(Clone)]
pub struct RedisIdempotencyStore {
    conn: ConnectionManager,
    namespace: String,
}

impl RedisIdempotencyStore {
    /// The store on the lock store's connection, under its key prefix.
    pub fn from_lock_store(locks: &RedisLockStore) -> Self {
        Self { conn: locks.connection_manager().clone(), namespace: format!("{}:idem:", locks.key_prefix()) }
    }

    /// Connects as [`RedisLockStore::connect`] does (same URL, same `?prefix=`), and
    /// builds the store on that connection.
    ///
    /// # Errors
    ///
    /// Those of [`RedisLockStore::connect`]: [`LockError::Config`] for a bad URL before
    /// any I/O, [`LockError::Store`] when the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Self::from_lock_store(&RedisLockStore::connect(url).await?))
    }

    /// The Redis key of a record: `{key_prefix}:idem:{key}`.
    pub fn redis_key(&self, key: &IdempotencyKey) -> String {
        format!("{}{}", self.namespace, key.as_str())
    }

    fn fail(operation: &'static str) -> impl FnOnce(redis::RedisError) -> LockError {
        move |error| LockError::store(BACKEND, operation, None, error)
    }
}

impl fmt::Debug for RedisIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisIdempotencyStore").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

fn unexpected(answer: &[Value]) -> LockError {
    LockError::store(BACKEND, "claim", None, format!("unexpected answer from the claim script: {answer:?}"))
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        _ => None,
    }
}

#[async_trait]
impl IdempotencyStore for RedisIdempotencyStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        token: &Token,
        lease: Ttl,
    ) -> Result<StoreClaim, LockError> {
        let mut conn = self.conn.clone();
        let record = self.redis_key(key);
        let answer: Vec<Value> = SCRIPTS
            .idempotency_claim
            .run(&mut conn, |cmd| {
                cmd.arg(1).arg(&record).arg(&fingerprint.as_bytes()[..]).arg(token.as_str()).arg(lease.as_millis());
            })
            .await
            .map_err(Self::fail("claim"))?;
        match answer.as_slice() {
            [Value::Int(0)] => Ok(StoreClaim::Started),
            [Value::Int(1), response] => {
                Ok(StoreClaim::Replay(StoredResponse::decode(bytes(response).ok_or_else(|| unexpected(&answer))?)?))
            }
            [Value::Int(2), Value::Int(pttl)] => Ok(StoreClaim::InProgress {
                retry_after: std::time::Duration::from_millis(u64::try_from(*pttl).unwrap_or(0)),
            }),
            [Value::Int(3), stored] => bytes(stored)
                .and_then(Fingerprint::from_slice)
                .map(|stored| StoreClaim::Mismatch { stored })
                .ok_or_else(|| unexpected(&answer)),
            _ => Err(unexpected(&answer)),
        }
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let record = self.redis_key(key);
        let renewed: i64 = SCRIPTS
            .idempotency_renew
            .run(&mut conn, |cmd| {
                cmd.arg(1).arg(&record).arg(token.as_str()).arg(lease.as_millis());
            })
            .await
            .map_err(Self::fail("renew"))?;
        Ok(renewed == 1)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let (record, response) = (self.redis_key(key), response.encode());
        let done: i64 = SCRIPTS
            .idempotency_complete
            .run(&mut conn, |cmd| {
                cmd.arg(1).arg(&record).arg(token.as_str()).arg(&response).arg(retention.as_millis());
            })
            .await
            .map_err(Self::fail("complete"))?;
        Ok(done == 1)
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let record = self.redis_key(key);
        let deleted: i64 = SCRIPTS
            .idempotency_abandon
            .run(&mut conn, |cmd| {
                cmd.arg(1).arg(&record).arg(token.as_str());
            })
            .await
            .map_err(Self::fail("abandon"))?;
        Ok(deleted == 1)
    }
}
