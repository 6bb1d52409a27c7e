//! What a benchmark drives: distlock's `LockManager`, or a store's raw commands.
//!
//! The workloads are generic over [`Locker`] (no boxing, no dynamic dispatch), so the
//! library and its raw baseline pay the same harness costs and the ratio between them is
//! the library's own overhead.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use distlock::postgres::sqlx::{self, PgPool};
use distlock::redis::redis::{self, aio::ConnectionManager, Value};
use distlock::{DistributedLock, LockError, LockManager, LockOptions, Token};
use tokio::time::Instant;

/// Takes and frees locks, one way or another.
pub(crate) trait Locker: Send + Sync + 'static {
    /// A key as this implementation sends it (prepared once per worker).
    type Key: Send + Sync + 'static;
    /// Proof of a held lock, consumed by `release`.
    type Guard: Send + 'static;

    /// Prepares the key named `name` for one worker.
    fn key(&self, name: &str) -> Self::Key;

    /// Takes `key`, trying for up to `wait` (once when zero); `None` when it stayed held.
    fn acquire(
        &self,
        key: &Self::Key,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>, LockError>> + Send;

    /// Frees `key`; `false` when the guard no longer held it.
    fn release(&self, key: &Self::Key, guard: Self::Guard) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// distlock itself: `LockManager::try_lock` + `DistributedLock::release` (key validation,
/// a fresh token per acquisition, waiting, the handle).
#[derive(Debug)]
pub(crate) struct Library {
    locks: LockManager,
    ttl: Duration,
    retry: Duration,
}

impl Library {
    pub(crate) fn new(locks: LockManager, ttl: Duration, retry: Duration) -> Self {
        Self { locks, ttl, retry }
    }
}

impl Locker for Library {
    type Key = String;
    type Guard = DistributedLock;

    fn key(&self, name: &str) -> String {
        name.to_owned()
    }

    async fn acquire(&self, key: &String, wait: Duration) -> Result<Option<DistributedLock>, LockError> {
        self.locks.try_lock_opts(key, self.ttl, &LockOptions::new().wait(wait).retry_interval(self.retry)).await
    }

    async fn release(&self, _key: &String, guard: DistributedLock) -> Result<bool, LockError> {
        guard.release().await
    }
}

/// Polls `attempt` until it succeeds or `wait` ran out, pausing `retry` in between: how
/// a hand-written lock waits.
async fn poll<F, Fut>(wait: Duration, retry: Duration, mut attempt: F) -> Result<Option<()>, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, LockError>>,
{
    let deadline = Instant::now() + wait;
    loop {
        if attempt().await? {
            return Ok(Some(()));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(retry.min(deadline - now)).await;
    }
}

/// The memory baseline: a `tokio::sync::Mutex<HashMap>` of key → (owner, expiry),
/// insert if free or expired, remove if still ours.
#[derive(Debug)]
pub(crate) struct RawMemory {
    held: tokio::sync::Mutex<HashMap<String, (u64, Instant)>>,
    next_owner: std::sync::atomic::AtomicU64,
    ttl: Duration,
    retry: Duration,
}

impl RawMemory {
    pub(crate) fn new(ttl: Duration, retry: Duration) -> Self {
        Self { held: tokio::sync::Mutex::default(), next_owner: 0.into(), ttl, retry }
    }
}

impl Locker for RawMemory {
    type Key = (String, u64);
    type Guard = ();

    fn key(&self, name: &str) -> (String, u64) {
        (name.to_owned(), self.next_owner.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    async fn acquire(&self, key: &(String, u64), wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let now = Instant::now();
            let mut held = self.held.lock().await;
            match held.get(&key.0) {
                Some(&(_, expires)) if expires > now => Ok(false),
                _ => {
                    held.insert(key.0.clone(), (key.1, now + self.ttl));
                    Ok(true)
                }
            }
        })
        .await
    }

    async fn release(&self, key: &(String, u64), (): ()) -> Result<bool, LockError> {
        let now = Instant::now();
        let mut held = self.held.lock().await;
        match held.get(&key.0) {
            Some(&(owner, expires)) if owner == key.1 && expires > now => {
                held.remove(&key.0);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

fn redis_error(operation: &'static str, key: &str, error: redis::RedisError) -> LockError {
    LockError::store("redis", operation, Some(key), error)
}

/// The Redis baseline: seed 000's commands sent with the `redis` crate on one
/// `ConnectionManager` — `SET key token NX PX ttl`, and the store's own release script
/// by `EVALSHA`.
#[derive(Clone)]
pub(crate) struct RawRedis {
    conn: ConnectionManager,
    release_sha: String,
    ttl_ms: u64,
    retry: Duration,
}

impl std::fmt::Debug for RawRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRedis").field("release_sha", &self.release_sha).finish_non_exhaustive()
    }
}

impl RawRedis {
    pub(crate) async fn connect(url: &str, ttl: Duration, retry: Duration) -> Result<Self, LockError> {
        let client = redis::Client::open(url).map_err(|error| redis_error("connect", "-", error))?;
        let mut conn = client.get_connection_manager().await.map_err(|error| redis_error("connect", "-", error))?;
        let release_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(distlock::redis::RELEASE_SCRIPT)
            .query_async(&mut conn)
            .await
            .map_err(|error| redis_error("load the release script for", "-", error))?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        Ok(Self { conn, release_sha, ttl_ms, retry })
    }
}

impl Locker for RawRedis {
    /// (the Redis key, laid out as the store does, and this worker's token)
    type Key = (String, String);
    type Guard = ();

    fn key(&self, name: &str) -> (String, String) {
        let prefix = distlock::redis::RedisLockStore::DEFAULT_KEY_PREFIX;
        (format!("{prefix}:lock:{name}"), Token::generate().as_str().to_owned())
    }

    async fn acquire(&self, key: &(String, String), wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let mut conn = self.conn.clone();
            let set: Value = redis::cmd("SET")
                .arg(&key.0)
                .arg(&key.1)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .query_async(&mut conn)
                .await
                .map_err(|error| redis_error("acquire", &key.0, error))?;
            Ok(matches!(set, Value::Okay))
        })
        .await
    }

    async fn release(&self, key: &(String, String), (): ()) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(1)
            .arg(&key.0)
            .arg(&key.1)
            .query_async(&mut conn)
            .await
            .map_err(|error| redis_error("release", &key.0, error))?;
        Ok(released == 1)
    }
}

fn postgres_error(operation: &'static str, key: &str, error: sqlx::Error) -> LockError {
    LockError::store("postgres", operation, Some(key), error)
}

/// The PostgreSQL baseline: the store's own acquire (`INSERT … ON CONFLICT … DO UPDATE
/// … WHERE expired RETURNING`) and release statements (from
/// `PostgresLockStore::statements()`, so they cannot drift) on the default lease table,
/// sent raw through the store's own pool.
#[derive(Debug)]
pub(crate) struct RawPostgres {
    pool: PgPool,
    acquire_sql: String,
    release_sql: String,
    ttl_ms: i64,
    retry: Duration,
}

impl RawPostgres {
    /// Connects with the store's defaults; the lease table must exist (`distlock::connect`
    /// creates it).
    pub(crate) async fn connect(url: &str, ttl: Duration, retry: Duration) -> Result<Self, LockError> {
        let store = distlock::postgres::PostgresLockStore::connect(url).await?;
        let statements = store.statements();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        Ok(Self {
            pool: store.pool().clone(),
            acquire_sql: statements.acquire().to_owned(),
            release_sql: statements.release().to_owned(),
            ttl_ms,
            retry,
        })
    }
}

impl Locker for RawPostgres {
    /// (the namespaced key, as the store writes it, and this worker's token)
    type Key = (String, String);
    type Guard = ();

    fn key(&self, name: &str) -> (String, String) {
        (format!("{}{name}", distlock::LOCK_NAMESPACE), Token::generate().as_str().to_owned())
    }

    async fn acquire(&self, key: &(String, String), wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let row = sqlx::query(&self.acquire_sql)
                .bind(&key.0)
                .bind(&key.1)
                .bind(self.ttl_ms)
                .fetch_optional(&self.pool)
                .await
                .map_err(|error| postgres_error("acquire", &key.0, error))?;
            Ok(row.is_some())
        })
        .await
    }

    async fn release(&self, key: &(String, String), (): ()) -> Result<bool, LockError> {
        let released: i64 = sqlx::query_scalar(&self.release_sql)
            .bind(&key.0)
            .bind(&key.1)
            .fetch_one(&self.pool)
            .await
            .map_err(|error| postgres_error("release", &key.0, error))?;
        Ok(released == 1)
    }
}
