//! Fair waiting on PostgreSQL: a queue of waiters per key, and a release that hands the
//! key to the oldest live waiter.
//!
//! The queue is a table beside the lease table, `<table>_queue (key, token, arrival,
//! expires_at)`: one row per waiting acquisition, ordered by `arrival` (an identity
//! column), live while `expires_at` (the waiter's place, refreshed by each attempt) is in
//! the future. It is created on first use, so a schema made by an older distlock (or by
//! hand) keeps working: without the table, and without the right to create it, waiters
//! barge as before and a warning says how to create it.
//!
//! A release (one statement) frees the lease and, when a live waiter other than the
//! releaser is queued, writes that waiter's token into the lease instead, with the rest
//! of its place as the expiry and a new fence: the key is *handed* to it, no plain
//! acquisition can take it meanwhile, and a waiter that died lets it lapse soon. The
//! waiter's next queued attempt (one statement) turns the handed lease into a full one;
//! when the store's listener saw the hand-over's notification, that attempt is the
//! lighter `take_handed.sql` (one token-checked `UPDATE` and the place's `DELETE`), and the
//! full statement only when the lease turns out not to be the waiter's.

use std::time::Duration;

use distlock_api::{Acquire, LockError, LockMode, StoreKey, Token, Ttl, WaitingPlace};
use distlock_sql::listing::waiting_place;

use crate::error::{UnexpectedAnswer, BACKEND};
use crate::sql::{millis, SCHEMA_LOCK_KEY};
use crate::store::PostgresLockStore;

impl PostgresLockStore {
    /// Whether this store's queue table exists with the columns it needs, creating it or
    /// adding its `placed_at` column (when the store creates its schema) the first time
    /// it is asked. Without it, waiting is barging.
    pub(crate) async fn queue_ready(&self, operation: &'static str) -> Result<bool, LockError> {
        let ready = self
            .queue_state()
            .ready
            .get_or_try_init(|| async {
                let fail = |error: sqlx::Error| LockError::store(BACKEND, operation, None, error);
                let sql = &self.statements().queue;
                let (exists, placed_at): (bool, bool) = self
                    .retrying(operation, || sqlx::query_as(&sql.exists).fetch_one(self.pool()))
                    .await
                    .map_err(|error| LockError::store(BACKEND, operation, None, error))?;
                if exists && placed_at {
                    return Ok(true);
                }
                if !self.creates_schema() {
                    tracing::warn!(
                        table = %sql.table,
                        "the queue table of fair waiting is missing{} and the store does not create its schema: \
                         waiters barge; run the statements of Statements::queue_ddl",
                        if exists { " its placed_at column" } else { "" }
                    );
                    return Ok(false);
                }
                let mut tx = self.pool().begin().await.map_err(fail)?;
                sqlx::query(&self.statements().lock_schema)
                    .bind(SCHEMA_LOCK_KEY)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?;
                let ddl = if exists { std::slice::from_ref(&sql.add_placed_at) } else { &sql.create[..] };
                for ddl in ddl {
                    sqlx::query(ddl).execute(&mut *tx).await.map_err(fail)?;
                }
                tx.commit().await.map_err(fail)?;
                Ok(true)
            })
            .await?;
        Ok(*ready)
    }

    /// The queued attempt: see `src/sql/queue/acquire.sql`.
    pub(crate) async fn acquire_queued(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<Acquire, LockError> {
        // Someone waits for the key (this waiter, or those it is served before).
        self.queue_state().queued.insert(key.as_str());
        let sql = &self.statements().queue;
        if self.notifier.take_handed(token.as_str()) {
            let fence: Option<i64> = self
                .retrying("acquire", || {
                    sqlx::query_scalar(&sql.take_handed)
                        .bind(key.as_str())
                        .bind(token.as_str())
                        .bind(millis(ttl.as_duration()))
                        .fetch_optional(self.pool())
                })
                .await
                .map_err(|error| self.fail("acquire", key, error))?;
            if let Some(fence) = fence {
                return self.acquired(key, fence);
            }
        }
        let (fence, micros_left): (Option<i64>, Option<i64>) = self
            .retrying("acquire", || {
                sqlx::query_as(&sql.acquire)
                    .bind(key.as_str())
                    .bind(token.as_str())
                    .bind(millis(ttl.as_duration()))
                    .bind(millis(place.as_duration()))
                    .fetch_one(self.pool())
            })
            .await
            .map_err(|error| self.fail("acquire", key, error))?;
        match fence {
            Some(fence) => self.acquired(key, fence),
            None => Ok(Acquire::Held {
                ttl_left: micros_left.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(1))),
            }),
        }
    }

    /// An acquisition with the fence the statement returned.
    fn acquired(&self, key: &StoreKey, fence: i64) -> Result<Acquire, LockError> {
        let fence = u64::try_from(fence).map_err(|_| self.fail("acquire", key, format!("negative fence {fence}")))?;
        Ok(Acquire::Acquired { fence: Some(fence) })
    }

    /// The release that hands the key on: one statement as cheap as the plain release
    /// while the key's queue is empty, else the queue release. A key this store saw
    /// waiters queue for in the last
    /// [`RecentlyQueued::WINDOW`](crate::recent::RecentlyQueued::WINDOW) goes straight to
    /// the queue release, so a contended key costs one statement, not two. Returns
    /// whether `token`'s lease was freed.
    pub(crate) async fn release_handing_on(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        if self.queue_state().queued.contains(key.as_str()) {
            return self.release_queued(key, token).await;
        }
        let sql = &self.statements().queue;
        // Nobody queued: freed by one statement as cheap as the plain release.
        let (released, queued): (i64, bool) = self
            .retrying("release", || async move {
                let mut conn = self.kept.checkout().await?;
                let query = sqlx::query_as(&sql.release_alone).bind(key.as_str()).bind(token.as_str());
                let answer = query.fetch_one(&mut **conn).await;
                if answer.is_ok() {
                    self.kept.keep(conn);
                }
                answer
            })
            .await
            .map_err(|error| self.fail("release", key, error))?;
        if released == 1 || !queued {
            return Ok(released == 1);
        }
        self.queue_state().queued.insert(key.as_str());
        self.release_queued(key, token).await
    }

    /// The queue release: frees the lease or hands it to the oldest live waiter.
    async fn release_queued(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let sql = &self.statements().queue;
        let released: i64 = self
            .retrying("release", || async move {
                let mut conn = self.kept.checkout().await?;
                let query = sqlx::query_scalar(&sql.release).bind(key.as_str()).bind(token.as_str());
                let answer = query.fetch_one(&mut **conn).await;
                if answer.is_ok() {
                    self.kept.keep(conn);
                }
                answer
            })
            .await
            .map_err(|error| self.fail("release", key, error))?;
        Ok(released == 1)
    }

    /// How many live places `key`'s queue has.
    pub(crate) async fn queued(&self, key: &StoreKey) -> Result<usize, LockError> {
        if !self.queue_ready("queue_len").await? {
            return Ok(0);
        }
        let sql = &self.statements().queue;
        let len: i64 = self
            .retrying("queue_len", || sqlx::query_scalar(&sql.len).bind(key.as_str()).fetch_one(self.pool()))
            .await
            .map_err(|error| self.fail("queue_len", key, error))?;
        Ok(usize::try_from(len).unwrap_or(0))
    }

    /// The live places of `key`'s queue in arrival order, with their times left and
    /// waited (since the place was taken), computed on the server.
    pub(crate) async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        if !self.queue_ready("queue_places").await? {
            return Ok(Vec::new());
        }
        let sql = &self.statements().queue;
        let rows: Vec<(String, i64, i64)> = self
            .retrying("queue_places", || sqlx::query_as(&sql.places).bind(key.as_str()).fetch_all(self.pool()))
            .await
            .map_err(|error| self.fail("queue_places", key, error))?;
        rows.into_iter()
            .map(|(token, micros_left, micros_waited)| {
                waiting_place(&token, LockMode::Exclusive, micros_left, micros_waited)
                    .map_err(|what| self.fail("queue_places", key, UnexpectedAnswer(what)))
            })
            .collect()
    }
}
