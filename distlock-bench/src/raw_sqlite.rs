//! The SQLite baseline: a SQLite store's own acquire and release transactions sent raw
//! with `sqlx`, statement by statement, in the shape the store sends them.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockKey, Token};
use sqlx::sqlite::SqlitePool;
use sqlx::Row as _;

use super::locker::{poll, Locker};

/// The statements of a SQLite store's acquire and release, as the store renders them for
/// its tables: take them from `SqliteLockStore::statements()`, so they cannot drift from
/// the store's.
#[derive(Debug, Clone)]
pub struct SqliteStatements {
    /// Reads a key's lease (binds the key; returns `boot`, `expires_ms`, …).
    pub lease_select: String,
    /// Takes the next fence (returns it).
    pub next_fence: String,
    /// Writes a lease (binds key, token, fence, boot, expiry, pid, pid start, PID namespace).
    pub lease_put: String,
    /// Deletes a lease held by a token (binds key, token and the key's notification
    /// channel, `l:` and the key; returns `boot`, `expires_ms` and the waiting sockets).
    pub lease_delete: String,
    /// With the store's fair queue: removes the token's place in the key's queue, then
    /// reads the places left (binds key and token; then the key).
    pub queue: Option<(String, String)>,
}

/// Sends a SQLite store's acquire and release transactions raw through its pool, each
/// statement (`BEGIN IMMEDIATE` and `COMMIT` too, as the store sends them) with
/// `sqlx::query` on one pooled connection:
///
/// - acquire: `BEGIN IMMEDIATE`, the lease select (held when it is unexpired on this
///   boot: `ROLLBACK`), the next fence, the lease put, `COMMIT`;
/// - release: `BEGIN IMMEDIATE`, the lease delete (which brings the sockets of waiting
///   processes back, left alone here), with a fair queue the queue leave and the queue
///   select, `COMMIT`.
///
/// Writers take turns in the process on a mutex, as the store's do (SQLite's own busy
/// handler would make them sleep in steps of milliseconds). A failed statement leaves its
/// connection to the pool as it is: a baseline for runs without errors. Nobody queues in
/// the scenarios this drives (waiting workers poll), so places found are left alone. A
/// lease names this process by its id alone (start time and namespace 0: never judged
/// gone), is stamped with the store's boot id and measured on `clock` (pass the store's);
/// waiting workers poll every `retry`.
#[derive(Debug, Clone)]
pub struct RawSqlite {
    pool: SqlitePool,
    sql: Arc<SqliteStatements>,
    turn: Arc<tokio::sync::Mutex<()>>,
    boot: Arc<str>,
    clock: fn() -> Duration,
    pid: i64,
    ttl_ms: i64,
    retry: Duration,
}

impl RawSqlite {
    /// Sends `sql` through `pool` (share the store's pool to compare like with like),
    /// leases of `ttl` on `clock` written under `boot`; waiting workers poll every `retry`.
    pub fn new(
        pool: SqlitePool,
        sql: SqliteStatements,
        boot: &str,
        clock: fn() -> Duration,
        ttl: Duration,
        retry: Duration,
    ) -> Self {
        Self {
            pool,
            sql: Arc::new(sql),
            turn: Arc::default(),
            boot: boot.into(),
            clock,
            pid: i64::from(std::process::id()),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1),
            retry,
        }
    }

    fn now_ms(&self) -> i64 {
        i64::try_from((self.clock)().as_millis()).unwrap_or(i64::MAX)
    }

    async fn try_acquire(&self, key: &str, token: &str) -> Result<bool, sqlx::Error> {
        let _turn = self.turn.lock().await;
        let mut conn = self.pool.acquire().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let now = self.now_ms();
        if let Some(row) = sqlx::query(&self.sql.lease_select).bind(key).fetch_optional(&mut *conn).await? {
            let (boot, expires_ms): (String, i64) = (row.try_get("boot")?, row.try_get("expires_ms")?);
            if *boot == *self.boot && expires_ms > now {
                sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                return Ok(false);
            }
        }
        let fence: i64 = sqlx::query_scalar(&self.sql.next_fence).fetch_one(&mut *conn).await?;
        sqlx::query(&self.sql.lease_put)
            .bind(key)
            .bind(token)
            .bind(fence)
            .bind(&*self.boot)
            .bind(now.saturating_add(self.ttl_ms))
            .bind(self.pid)
            .bind(0i64)
            .bind(0i64)
            .execute(&mut *conn)
            .await?;
        sqlx::query("COMMIT").execute(&mut *conn).await?;
        Ok(true)
    }

    async fn release(&self, key: &str, channel: &str, token: &str) -> Result<bool, sqlx::Error> {
        let _turn = self.turn.lock().await;
        let mut conn = self.pool.acquire().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let now = self.now_ms();
        let deleted: Option<(String, i64, Option<String>)> = sqlx::query_as(&self.sql.lease_delete)
            .bind(key)
            .bind(token)
            .bind(channel)
            .fetch_optional(&mut *conn)
            .await?;
        let held = deleted.is_some_and(|(boot, expires_ms, _)| *boot == *self.boot && expires_ms > now);
        if let Some((leave, places)) = &self.sql.queue {
            sqlx::query(leave).bind(key).bind(token).execute(&mut *conn).await?;
            sqlx::query(places).bind(key).fetch_all(&mut *conn).await?;
        }
        sqlx::query("COMMIT").execute(&mut *conn).await?;
        Ok(held)
    }

    fn error(operation: &'static str, key: &str, error: sqlx::Error) -> LockError {
        LockError::store("sqlite", operation, Some(key), error)
    }
}

impl Locker for RawSqlite {
    /// (the key as the store writes it, its notification channel, the application's key,
    /// this worker's token)
    type Key = (String, String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        let channel = format!("l:{}", key.as_str());
        Ok((key.as_str().to_owned(), channel, name.to_owned(), Token::generate()))
    }

    async fn acquire(&self, (key, _, name, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            self.try_acquire(key, token.as_str()).await.map_err(|error| Self::error("acquire", name, error))
        })
        .await
    }

    async fn release(&self, (key, channel, name, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        RawSqlite::release(self, key, channel, token.as_str())
            .await
            .map_err(|error| Self::error("release", name, error))
    }
}
