//! The SQL baselines: a SQL store's own acquire and release statements sent raw with
//! `sqlx`, through one driver loop; what each database binds and reads back is its
//! [`RawStatements`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockKey, Token};
use sqlx::{MySql, Pool, Postgres};

use super::locker::{poll, Locker};

/// How one database's baseline sends a store's acquire and release statements.
pub trait RawStatements: sqlx::Database {
    /// The backend named in errors, as the store names itself.
    const BACKEND: &'static str;

    /// Runs the acquire statement for `key` (as the store writes it) and `token`, with
    /// leases of `ttl_ms`; whether it took the key.
    fn acquire(
        pool: &Pool<Self>,
        sql: &str,
        key: &str,
        token: &str,
        ttl_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Runs the release statement; whether it freed the key.
    fn release(
        pool: &Pool<Self>,
        sql: &str,
        key: &str,
        token: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

/// PostgreSQL: an acquire statement `INSERT … ON CONFLICT … DO UPDATE … WHERE expired
/// RETURNING …` binding key, token and TTL in ms, and a release statement binding key
/// and token, returning the count released as its first column — take both from
/// `PostgresLockStore::statements()`, so they cannot drift from the store's.
impl RawStatements for Postgres {
    const BACKEND: &'static str = "postgres";

    async fn acquire(pool: &Pool<Self>, sql: &str, key: &str, token: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        let row = sqlx::query(sql).bind(key).bind(token).bind(ttl_ms).fetch_optional(pool).await?;
        Ok(row.is_some())
    }

    async fn release(pool: &Pool<Self>, sql: &str, key: &str, token: &str) -> Result<bool, sqlx::Error> {
        let released: i64 = sqlx::query_scalar(sql).bind(key).bind(token).fetch_one(pool).await?;
        Ok(released == 1)
    }
}

/// MySQL: an acquire statement (`INSERT … ON DUPLICATE KEY UPDATE`, binding key, token,
/// TTL in ms, token, token, token, TTL in ms; acquired when the OK packet's insert id is
/// not 0) and a release statement (binding key, token three times; one row matched means
/// released) — take both from `MysqlLockStore::statements()`, so they cannot drift from
/// the store's.
impl RawStatements for MySql {
    const BACKEND: &'static str = "mysql";

    async fn acquire(pool: &Pool<Self>, sql: &str, key: &str, token: &str, ttl_ms: i64) -> Result<bool, sqlx::Error> {
        let query = sqlx::query(sql).bind(key).bind(token).bind(ttl_ms).bind(token).bind(token).bind(token);
        let done = query.bind(ttl_ms).execute(pool).await?;
        Ok(done.last_insert_id() != 0)
    }

    async fn release(pool: &Pool<Self>, sql: &str, key: &str, token: &str) -> Result<bool, sqlx::Error> {
        let query = sqlx::query(sql).bind(key).bind(token).bind(key).bind(token).bind(key).bind(token);
        Ok(query.execute(pool).await?.rows_affected() == 1)
    }
}

/// Sends a SQL store's acquire and release statements raw (see [`RawStatements`] for
/// what each database binds), waiting workers polling.
#[derive(Debug)]
pub struct RawSql<DB: RawStatements> {
    pool: Pool<DB>,
    acquire_sql: Arc<str>,
    release_sql: Arc<str>,
    ttl_ms: i64,
    retry: Duration,
}

/// The PostgreSQL baseline.
pub type RawPostgres = RawSql<Postgres>;
/// The MySQL baseline.
pub type RawMysql = RawSql<MySql>;

impl<DB: RawStatements> Clone for RawSql<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            acquire_sql: Arc::clone(&self.acquire_sql),
            release_sql: Arc::clone(&self.release_sql),
            ttl_ms: self.ttl_ms,
            retry: self.retry,
        }
    }
}

impl<DB: RawStatements> RawSql<DB> {
    /// Sends through `pool` (share the store's pool to compare like with like). Leases
    /// last `ttl`; waiting workers poll every `retry`.
    pub fn new(pool: Pool<DB>, acquire_sql: &str, release_sql: &str, ttl: Duration, retry: Duration) -> Self {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        Self { pool, acquire_sql: acquire_sql.into(), release_sql: release_sql.into(), ttl_ms, retry }
    }

    fn error(operation: &'static str, key: &str, error: sqlx::Error) -> LockError {
        LockError::store(DB::BACKEND, operation, Some(key), error)
    }
}

impl<DB: RawStatements> Locker for RawSql<DB> {
    /// (the key as the store writes it, the application's key, this worker's token)
    type Key = (String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        Ok((key.as_str().to_owned(), name.to_owned(), Token::generate()))
    }

    async fn acquire(&self, (key, name, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            DB::acquire(&self.pool, &self.acquire_sql, key, token.as_str(), self.ttl_ms)
                .await
                .map_err(|error| Self::error("acquire", name, error))
        })
        .await
    }

    async fn release(&self, (key, name, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        DB::release(&self.pool, &self.release_sql, key, token.as_str())
            .await
            .map_err(|error| Self::error("release", name, error))
    }
}
