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
//! waiter's next queued attempt (one statement) turns the handed lease into a full one.

use std::time::Duration;

use distlock_api::{Acquire, LockError, StoreKey, Token, Ttl};
use tokio::sync::OnceCell;

use crate::config::Layout;
use crate::error::BACKEND;
use crate::sql::{millis, SCHEMA_LOCK_KEY};
use crate::store::PostgresLockStore;

/// The notification payload of a hand-over to a token: this followed by the token.
pub(crate) const TURN: &str = "turn:";

/// The statements of fair waiting.
#[derive(Debug)]
pub(crate) struct QueueStatements {
    /// The queue table, qualified and quoted.
    pub(crate) table: String,
    pub(crate) create: [String; 2],
    pub(crate) exists: String,
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) wait: String,
    pub(crate) len: String,
    pub(crate) purge: String,
}

impl QueueStatements {
    pub(crate) fn new(layout: &Layout, channel: &str) -> Self {
        let schema = layout.schema.quoted();
        let leases = format!("{schema}.{}", layout.table.quoted());
        let sequence = format!("{schema}.{}", layout.sequence.quoted());
        let name = layout.table.derived("queue");
        let queue = format!("{schema}.{}", name.quoted());
        let index = layout.table.derived("queue_order");
        let unlogged = if layout.unlogged { "UNLOGGED " } else { "" };
        let live = "expires_at > clock_timestamp()";
        // A hand-over wakes only the waiter it is for (`turn:<token>`); a release that
        // leaves the key free wakes every waiter of the key.
        let notify = if layout.notify {
            format!(
                "pg_notify('{channel}', CASE WHEN released.token IS NULL THEN released.key \
                                             ELSE '{TURN}' || released.token END)::text"
            )
        } else {
            "''".to_owned()
        };
        Self {
            create: [
                format!(
                    "CREATE {unlogged}TABLE IF NOT EXISTS {queue} ( \
                         key text COLLATE \"C\" NOT NULL, \
                         token text NOT NULL, \
                         arrival bigint GENERATED ALWAYS AS IDENTITY, \
                         expires_at timestamptz NOT NULL, \
                         PRIMARY KEY (key, token))"
                ),
                format!("CREATE INDEX IF NOT EXISTS {} ON {queue} (key, arrival)", index.quoted()),
            ],
            exists: format!("SELECT to_regclass('{queue}') IS NOT NULL"),
            // Taken when the lease was handed to $2, or is free and $2 is first in line (or
            // nobody waits); otherwise $2's place is taken, or refreshed once half of it
            // has passed (so a waiter woken by every hand-over rarely writes). One statement.
            acquire: format!(
                "WITH head AS ( \
                     SELECT token FROM {queue} WHERE key = $1 AND {live} ORDER BY arrival LIMIT 1), \
                 taken AS ( \
                     INSERT INTO {leases} AS held (key, token, fence, expires_at) \
                     SELECT $1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond' \
                     WHERE coalesce((SELECT token FROM head), $2) = $2 \
                     ON CONFLICT (key) DO UPDATE \
                     SET token = EXCLUDED.token, \
                         fence = CASE WHEN held.token = EXCLUDED.token THEN held.fence \
                                      ELSE GREATEST(held.fence + 1, EXCLUDED.fence) END, \
                         expires_at = EXCLUDED.expires_at{reset_waiting} \
                     WHERE held.expires_at <= clock_timestamp() \
                        OR (held.token = EXCLUDED.token AND held.expires_at > clock_timestamp()) \
                     RETURNING held.fence), \
                 left_queue AS ( \
                     DELETE FROM {queue} WHERE key = $1 AND (token = $2 OR NOT {live}) \
                         AND EXISTS (SELECT 1 FROM taken)), \
                 queued AS ( \
                     INSERT INTO {queue} AS place (key, token, expires_at) \
                     SELECT $1, $2, clock_timestamp() + $4 * interval '1 millisecond' \
                     WHERE NOT EXISTS (SELECT 1 FROM taken) \
                     ON CONFLICT (key, token) DO UPDATE SET expires_at = EXCLUDED.expires_at \
                     WHERE place.expires_at < clock_timestamp() + $4 * interval '0.5 millisecond') \
                 SELECT (SELECT fence FROM taken), \
                     (SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                      FROM {leases} WHERE key = $1 AND token IS NOT NULL AND {live})",
                // A handed lease keeps its flag: waiters that flagged it while it was
                // handed still wait for its release.
                reset_waiting = if layout.notify {
                    ", waiting = CASE WHEN held.token = EXCLUDED.token THEN held.waiting ELSE false END"
                } else {
                    ""
                },
            ),
            // The lease is freed, or handed to the oldest live waiter other than $2 (with
            // a new fence, for the rest of its place); $2's own place goes. A waiter
            // flagged the lease: the release (or hand-over) is notified.
            release: format!(
                "WITH next AS ( \
                     SELECT token, expires_at FROM {queue} \
                     WHERE key = $1 AND token <> $2 AND {live} ORDER BY arrival LIMIT 1), \
                 left_queue AS (DELETE FROM {queue} WHERE key = $1 AND token = $2), \
                 released AS ( \
                     UPDATE {leases} AS held \
                     SET token = (SELECT token FROM next), \
                         expires_at = coalesce((SELECT expires_at FROM next), clock_timestamp()), \
                         fence = CASE WHEN EXISTS (SELECT 1 FROM next) \
                                      THEN GREATEST(held.fence + 1, nextval('{sequence}')) ELSE held.fence END \
                     WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
                     RETURNING key, waiting, token) \
                 SELECT count(CASE WHEN released.waiting THEN {notify} ELSE '' END) FROM released"
            ),
            // As the lease table's wait, but a lease handed to $2 counts as free.
            wait: format!(
                "WITH flagged AS ( \
                     UPDATE {leases} SET waiting = true \
                     WHERE key = $1 AND token IS NOT NULL AND token <> $2 AND NOT waiting AND {live} \
                     RETURNING expires_at) \
                 SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM flagged \
                 UNION ALL \
                 SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM {leases} \
                 WHERE key = $1 AND token IS NOT NULL AND token <> $2 AND waiting AND {live}"
            ),
            len: format!("SELECT count(*) FROM {queue} WHERE key = $1 AND {live}"),
            purge: format!(
                "DELETE FROM {queue} WHERE ctid = ANY(ARRAY( \
                     SELECT ctid FROM {queue} \
                     WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond' LIMIT $2))"
            ),
            table: queue,
        }
    }
}

/// Whether the queue table is there (checked, or created, once per store).
#[derive(Debug, Default)]
pub(crate) struct QueueState {
    ready: OnceCell<bool>,
}

impl QueueState {
    /// What the check found, if it ran.
    pub(crate) fn is_ready(&self) -> Option<bool> {
        self.ready.get().copied()
    }
}

impl PostgresLockStore {
    /// Whether this store's queue table exists, creating it (when the store creates its
    /// schema) the first time it is asked. Without it, waiting is barging.
    pub(crate) async fn queue_ready(&self, operation: &'static str) -> Result<bool, LockError> {
        let ready = self
            .queue_state()
            .ready
            .get_or_try_init(|| async {
                let fail = |error: sqlx::Error| LockError::store(BACKEND, operation, None, error);
                let sql = &self.statements().queue;
                let exists: bool = self
                    .retrying(operation, || sqlx::query_scalar(&sql.exists).fetch_one(self.pool()))
                    .await
                    .map_err(fail)?;
                if exists {
                    return Ok(true);
                }
                if !self.creates_schema() {
                    tracing::warn!(
                        table = %sql.table,
                        "the queue table of fair waiting is missing and the store does not create its schema: \
                         waiters barge; create it with the statements of Statements::queue_ddl"
                    );
                    return Ok(false);
                }
                let mut tx = self.pool().begin().await.map_err(fail)?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(SCHEMA_LOCK_KEY)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?;
                for ddl in &sql.create {
                    sqlx::query(ddl).execute(&mut *tx).await.map_err(fail)?;
                }
                tx.commit().await.map_err(fail)?;
                Ok(true)
            })
            .await?;
        Ok(*ready)
    }

    /// The queued attempt: see [`QueueStatements::acquire`]'s comment.
    pub(crate) async fn acquire_queued(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        place: Ttl,
    ) -> Result<Acquire, LockError> {
        let sql = &self.statements().queue;
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
            Some(fence) => {
                let fence =
                    u64::try_from(fence).map_err(|_| self.fail("acquire", key, format!("negative fence {fence}")))?;
                Ok(Acquire::Acquired { fence: Some(fence) })
            }
            None => Ok(Acquire::Held {
                ttl_left: micros_left.map(|micros| Duration::from_micros(u64::try_from(micros).unwrap_or(1))),
            }),
        }
    }

    /// The release that hands the key on; returns whether `token`'s lease was freed.
    pub(crate) async fn release_handing_on(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let sql = &self.statements().queue;
        let released: i64 = self
            .retrying("release", || {
                sqlx::query_scalar(&sql.release).bind(key.as_str()).bind(token.as_str()).fetch_one(self.pool())
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
}
