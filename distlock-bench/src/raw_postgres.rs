//! The PostgreSQL baseline: the PostgreSQL store's own acquire and release statements
//! sent raw with `sqlx`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockKey, Token};
use sqlx::PgPool;

use super::locker::{poll, Locker};

fn postgres_error(operation: &'static str, key: &str, error: sqlx::Error) -> LockError {
    LockError::store("postgres", operation, Some(key), error)
}

/// Sends an acquire statement (`INSERT … ON CONFLICT … DO UPDATE … WHERE expired
/// RETURNING …`, binding key, token and TTL in ms) and a release statement (binding key
/// and token, returning the count released) — take both from
/// `PostgresLockStore::statements()`, so they cannot drift from the store's.
#[derive(Debug, Clone)]
pub struct RawPostgres {
    pool: PgPool,
    acquire_sql: Arc<str>,
    release_sql: Arc<str>,
    ttl_ms: i64,
    retry: Duration,
}

impl RawPostgres {
    /// Sends through `pool` (share the store's pool to compare like with like). Leases
    /// last `ttl`; waiting workers poll every `retry`.
    pub fn new(pool: PgPool, acquire_sql: &str, release_sql: &str, ttl: Duration, retry: Duration) -> Self {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        Self { pool, acquire_sql: acquire_sql.into(), release_sql: release_sql.into(), ttl_ms, retry }
    }
}

impl Locker for RawPostgres {
    /// (the key as the store writes it, the application's key, this worker's token)
    type Key = (String, String, Token);
    type Guard = ();

    fn key(&self, name: &str) -> Result<Self::Key, LockError> {
        let key = LockKey::new(name)?.to_store_key();
        Ok((key.as_str().to_owned(), name.to_owned(), Token::generate()))
    }

    async fn acquire(&self, (key, name, token): &Self::Key, wait: Duration) -> Result<Option<()>, LockError> {
        poll(wait, self.retry, || async {
            let row = sqlx::query(&self.acquire_sql)
                .bind(key)
                .bind(token.as_str())
                .bind(self.ttl_ms)
                .fetch_optional(&self.pool)
                .await
                .map_err(|error| postgres_error("acquire", name, error))?;
            Ok(row.is_some())
        })
        .await
    }

    async fn release(&self, (key, name, token): &Self::Key, (): ()) -> Result<bool, LockError> {
        let released: i64 = sqlx::query_scalar(&self.release_sql)
            .bind(key)
            .bind(token.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(|error| postgres_error("release", name, error))?;
        Ok(released == 1)
    }
}
