//! The MySQL baseline: the MySQL store's own acquire and release statements sent raw
//! with `sqlx`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockKey, Token};
use sqlx::MySqlPool;

use super::locker::{poll, Locker};

fn mysql_error(operation: &'static str, key: &str, error: sqlx::Error) -> LockError {
    LockError::store("mysql", operation, Some(key), error)
}

/// Sends an acquire statement (`INSERT … ON DUPLICATE KEY UPDATE`, binding key, token,
/// TTL in ms, token, token, token, TTL in ms; acquired when the OK packet's insert id is
/// not 0) and a release statement (binding key, token three times; one row matched means
/// released) — take both from `MysqlLockStore::statements()`, so they cannot drift from
/// the store's.
#[derive(Debug, Clone)]
pub struct RawMysql {
    pool: MySqlPool,
    acquire_sql: Arc<str>,
    release_sql: Arc<str>,
    ttl_ms: i64,
    retry: Duration,
}

impl RawMysql {
    /// Sends through `pool` (share the store's pool to compare like with like). Leases
    /// last `ttl`; waiting workers poll every `retry`.
    pub fn new(pool: MySqlPool, acquire_sql: &str, release_sql: &str, ttl: Duration, retry: Duration) -> Self {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        Self { pool, acquire_sql: acquire_sql.into(), release_sql: release_sql.into(), ttl_ms, retry }
    }
}

impl Locker for RawMysql {
    /// (the key as the store writes it, the application's key, this worker's token)
    type Key = (String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        Ok((key.as_str().to_owned(), name.to_owned(), Token::generate()))
    }

    async fn acquire(&self, (key, name, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let done = sqlx::query(&self.acquire_sql)
                .bind(key)
                .bind(token.as_str())
                .bind(self.ttl_ms)
                .bind(token.as_str())
                .bind(token.as_str())
                .bind(token.as_str())
                .bind(self.ttl_ms)
                .execute(&self.pool)
                .await
                .map_err(|error| mysql_error("acquire", name, error))?;
            Ok(done.last_insert_id() != 0)
        })
        .await
    }

    async fn release(&self, (key, name, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        let done = sqlx::query(&self.release_sql)
            .bind(key)
            .bind(token.as_str())
            .bind(key)
            .bind(token.as_str())
            .bind(key)
            .bind(token.as_str())
            .execute(&self.pool)
            .await
            .map_err(|error| mysql_error("release", name, error))?;
        Ok(done.rows_affected() == 1)
    }
}
