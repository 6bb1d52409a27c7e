//! `RedisIdempotencyStore`: one hash per key, one Lua script per operation.

use std::fmt;

use async_trait::async_trait;
use distlock_api::idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use distlock_redis::redis::aio::ConnectionManager;
use distlock_redis::redis::{self, Script, Value};
use distlock_redis::RedisLockStore;

const BACKEND: &str = "redis";

/// The claim: `KEYS[1]` the record, `ARGV` fingerprint, token, lease in ms. Answers
/// `{0}` started, `{1, response}` replay, `{2, pttl}` in progress, `{3, fingerprint}`
/// mismatch. A record whose lease or retention ended has expired with its key.
pub const CLAIM_SCRIPT: &str = r"local r = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'resp')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'tok', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
if r[1] ~= ARGV[1] then return {3, r[1]} end
if r[3] then return {1, r[3]} end
if r[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
return {2, redis.call('PTTL', KEYS[1])}";

/// The completion: `KEYS[1]` the record, `ARGV` token, encoded response, retention in
/// ms. `1` when the token still held the claim (now a completed record), else `0` and
/// nothing written.
pub const COMPLETE_SCRIPT: &str = r"if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'tok')
redis.call('HSET', KEYS[1], 'resp', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1";

/// Renewal: `KEYS[1]`, `ARGV` token, lease in ms → `1` renewed, `0` not claimed by it.
const RENEW_SCRIPT: &str = r"if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])";

/// Abandon: `KEYS[1]`, `ARGV` token → `1` deleted, `0` not claimed by it.
const ABANDON_SCRIPT: &str = r"if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])";

struct Scripts {
    claim: Script,
    complete: Script,
    renew: Script,
    abandon: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    claim: Script::new(CLAIM_SCRIPT),
    complete: Script::new(COMPLETE_SCRIPT),
    renew: Script::new(RENEW_SCRIPT),
    abandon: Script::new(ABANDON_SCRIPT),
});

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
/// use distlock_idempotency::{Idempotency, RedisIdempotencyStore};
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
        let answer: Vec<Value> = SCRIPTS
            .claim
            .key(self.redis_key(key))
            .arg(&fingerprint.as_bytes()[..])
            .arg(token.as_str())
            .arg(lease.as_millis())
            .invoke_async(&mut conn)
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
        let renewed: i64 = SCRIPTS
            .renew
            .key(self.redis_key(key))
            .arg(token.as_str())
            .arg(lease.as_millis())
            .invoke_async(&mut conn)
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
        let done: i64 = SCRIPTS
            .complete
            .key(self.redis_key(key))
            .arg(token.as_str())
            .arg(response.encode())
            .arg(retention.as_millis())
            .invoke_async(&mut conn)
            .await
            .map_err(Self::fail("complete"))?;
        Ok(done == 1)
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let deleted: i64 = SCRIPTS
            .abandon
            .key(self.redis_key(key))
            .arg(token.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(Self::fail("abandon"))?;
        Ok(deleted == 1)
    }
}
