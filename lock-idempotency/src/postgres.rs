//! `PostgresIdempotencyStore`: one table, one statement per operation.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::idempotency::{
    Completion, Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse,
};
use distlock_api::{LockError, Token, Ttl};
use distlock_postgres::sqlx::{self, PgExecutor, PgPool, Row};
use distlock_postgres::{PostgresLockStore, DEFAULT_SCHEMA};

const BACKEND: &str = "postgres";
/// The default table: `public.distlock_idempotency`.
const DEFAULT_TABLE: &str = "distlock_idempotency";
/// How many rows one purge statement deletes at most.
const PURGE_BATCH: i64 = 10_000;
/// A claim whose statement raced with a concurrent take-over or purge (and so saw no
/// row) is retried this many times.
const CLAIM_ATTEMPTS: usize = 5;
/// Serialises concurrent `ensure_schema` calls: ASCII "distidem".
const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6964_656d;

/// Builds a [`PostgresIdempotencyStore`] with a non-default schema or table.
///
/// ```
/// use distlock_idempotency::PostgresIdempotencyStore;
///
/// let builder = PostgresIdempotencyStore::builder().schema("app").table("idempotency");
/// assert!(PostgresIdempotencyStore::builder().table("no-dashes").check().is_err());
/// # drop(builder);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresIdempotencyStoreBuilder {
    schema: String,
    table: String,
}

impl Default for PostgresIdempotencyStoreBuilder {
    fn default() -> Self {
        Self { schema: DEFAULT_SCHEMA.to_owned(), table: DEFAULT_TABLE.to_owned() }
    }
}

impl PostgresIdempotencyStoreBuilder {
    /// The schema of the table (default `public`), `[A-Za-z_][A-Za-z0-9_]{0,62}`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The table (default `distlock_idempotency`), `[A-Za-z_][A-Za-z0-9_]{0,62}`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Checks the names.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] naming the setting that is not an identifier.
    pub fn check(&self) -> Result<(), LockError> {
        identifier("schema", &self.schema)?;
        identifier("table", &self.table)
    }

    /// The store on `pool`. Call [`ensure_schema`](PostgresIdempotencyStore::ensure_schema)
    /// once before use.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), before any I/O.
    pub fn build(self, pool: PgPool) -> Result<PostgresIdempotencyStore, LockError> {
        self.check()?;
        Ok(PostgresIdempotencyStore { pool, sql: std::sync::Arc::new(Statements::new(&self.schema, &self.table)) })
    }
}

fn identifier(setting: &str, name: &str) -> Result<(), LockError> {
    let mut chars = name.chars();
    let valid = name.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        return Ok(());
    }
    Err(LockError::Config {
        message: format!("the PostgreSQL {setting} name {name:?} must match [A-Za-z_][A-Za-z0-9_]{{0,62}}"),
    })
}

/// The SQL text, built once per store from validated, quoted names.
#[derive(Debug)]
struct Statements {
    schema: String,
    table: String,
    create_schema: String,
    create_table: String,
    create_index: String,
    claim: String,
    read: String,
    renew: String,
    complete: String,
    abandon: String,
    purge: String,
}

impl Statements {
    fn new(schema: &str, table: &str) -> Self {
        let t = format!("\"{schema}\".\"{table}\"");
        let ms = "* interval '1 millisecond'";
        // The answer of a claim that did not start: mismatch (3) with the stored
        // fingerprint, replay (1) with the response, or in progress (2) with the lease's
        // time left in ms.
        let answer = "CASE WHEN r.fingerprint <> $2 THEN 3 WHEN r.response IS NOT NULL THEN 1 ELSE 2 END, \
             CASE WHEN r.fingerprint <> $2 THEN r.fingerprint ELSE r.response END, \
             GREATEST(0, ceil(extract(epoch FROM r.expires_at - clock_timestamp()) * 1000))::bigint";
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
            create_schema: format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                     key text PRIMARY KEY, \
                     fingerprint bytea NOT NULL, \
                     token text, \
                     response bytea, \
                     expires_at timestamptz NOT NULL)"
            ),
            create_index: format!("CREATE INDEX IF NOT EXISTS \"{table}_expires_at\" ON {t} (expires_at)"),
            // One statement. A live record of another claim answers from the snapshot
            // (no insert attempted: a replay writes and locks nothing). Otherwise insert,
            // or take over a record whose lease or retention ended, or a claim of the
            // same token (a retried claim); a row written concurrently by another claim
            // makes the insert do nothing and the statement return no row.
            claim: format!(
                "WITH live AS (\
                     SELECT fingerprint, token, response, expires_at FROM {t} \
                     WHERE key = $1 AND expires_at > clock_timestamp()), \
                 claimed AS (\
                     INSERT INTO {t} AS r (key, fingerprint, token, response, expires_at) \
                     SELECT $1, $2, $3, NULL, clock_timestamp() + $4 {ms} \
                     WHERE NOT EXISTS (SELECT 1 FROM live WHERE live.token IS DISTINCT FROM $3) \
                     ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, token = EXCLUDED.token, \
                         response = NULL, expires_at = EXCLUDED.expires_at \
                     WHERE r.expires_at <= clock_timestamp() OR r.token = EXCLUDED.token \
                     RETURNING 1) \
                 SELECT 0, NULL::bytea, NULL::bigint FROM claimed \
                 UNION ALL \
                 SELECT {answer} FROM live r WHERE NOT EXISTS (SELECT 1 FROM claimed)"
            ),
            read: format!("SELECT {answer} FROM {t} r WHERE r.key = $1 AND r.expires_at > clock_timestamp()"),
            renew: format!(
                "UPDATE {t} SET expires_at = clock_timestamp() + $3 {ms} \
                 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            complete: format!(
                "UPDATE {t} SET token = NULL, response = $3, expires_at = clock_timestamp() + $4 {ms} \
                 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            abandon: format!("DELETE FROM {t} WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"),
            purge: format!(
                "DELETE FROM {t} WHERE key = ANY(ARRAY(\
                     SELECT key FROM {t} WHERE expires_at <= clock_timestamp() LIMIT $1)) \
                 AND expires_at <= clock_timestamp()"
            ),
        }
    }
}

/// An [`IdempotencyStore`] on PostgreSQL: one table, by default
/// `public.distlock_idempotency`, created by [`ensure_schema`](Self::ensure_schema):
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS "public"."distlock_idempotency" (
///     key text PRIMARY KEY, fingerprint bytea NOT NULL,
///     token text,              -- the running claim's token; NULL once completed
///     response bytea,          -- the completed result; NULL while running
///     expires_at timestamptz NOT NULL);  -- lease end while running, retention end after
/// CREATE INDEX IF NOT EXISTS "distlock_idempotency_expires_at" ON … (expires_at);
/// ```
///
/// A claim is one statement: a live record of another claim is answered from (a replay
/// only reads), anything else is `INSERT … ON CONFLICT (key) DO UPDATE … WHERE <expired
/// or same token>`; a duplicate that races with a concurrent claim of the same key reads
/// the winner's row with one more `SELECT`. Completion is one token-checked `UPDATE`. Times are the server's
/// `clock_timestamp()`. Expired records are deleted by [`purge`](Self::purge) in batches
/// of 10 000 rows, or in the background by [`spawn_purger`](Self::spawn_purger).
///
/// [`complete_in`](Self::complete_in) writes the result inside the caller's own
/// transaction: when the operation's effect is in the same database, effect and stored
/// result commit together or not at all — the one case that is exactly-once.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// use distlock_idempotency::{Idempotency, PostgresIdempotencyStore};
///
/// let store = PostgresIdempotencyStore::connect("postgres://app@db/app").await?;
/// store.ensure_schema().await?;
/// let idem = Idempotency::new(std::sync::Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresIdempotencyStore {
    pool: PgPool,
    sql: std::sync::Arc<Statements>,
}

impl fmt::Debug for PostgresIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresIdempotencyStore").field("table", &self.table_name()).finish_non_exhaustive()
    }
}

fn fail(operation: &'static str) -> impl FnOnce(sqlx::Error) -> LockError {
    move |error| LockError::store(BACKEND, operation, None, error)
}

impl PostgresIdempotencyStore {
    /// A builder for a non-default schema or table.
    pub fn builder() -> PostgresIdempotencyStoreBuilder {
        PostgresIdempotencyStoreBuilder::default()
    }

    /// The store on `pool`, in `public.distlock_idempotency`.
    pub fn from_pool(pool: PgPool) -> Self {
        Self { pool, sql: std::sync::Arc::new(Statements::new(DEFAULT_SCHEMA, DEFAULT_TABLE)) }
    }

    /// The store on the lock store's pool, in `public.distlock_idempotency`.
    pub fn from_lock_store(locks: &PostgresLockStore) -> Self {
        Self::from_pool(locks.pool().clone())
    }

    /// Connects as [`PostgresLockStore::connect`] does (same URL and pool settings).
    ///
    /// # Errors
    ///
    /// Those of [`PostgresLockStore::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Self::from_lock_store(&PostgresLockStore::connect(url).await?))
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The quoted table name, e.g. `"public"."distlock_idempotency"`.
    pub fn table_name(&self) -> String {
        format!("\"{}\".\"{}\"", self.sql.schema, self.sql.table)
    }

    /// Creates the schema (unless `public`), the table and its index if missing; safe to
    /// call concurrently and repeatedly.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the server refuses (e.g. no `CREATE` privilege).
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        let mut tx = self.pool.begin().await.map_err(fail("ensure schema"))?;
        let lock = sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(SCHEMA_LOCK_KEY);
        lock.execute(&mut *tx).await.map_err(fail("ensure schema"))?;
        let schema = (self.sql.schema != DEFAULT_SCHEMA).then_some(&self.sql.create_schema);
        for ddl in schema.into_iter().chain([&self.sql.create_table, &self.sql.create_index]) {
            sqlx::query(ddl).execute(&mut *tx).await.map_err(fail("ensure schema"))?;
        }
        tx.commit().await.map_err(fail("ensure schema"))
    }

    /// Deletes records whose lease or retention ended, at most 10 000 per statement,
    /// and returns how many.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"purge"`); batches deleted before stay deleted.
    pub async fn purge(&self) -> Result<u64, LockError> {
        let mut purged = 0;
        loop {
            let batch = sqlx::query(&self.sql.purge)
                .bind(PURGE_BATCH)
                .execute(&self.pool)
                .await
                .map_err(fail("purge"))?
                .rows_affected();
            purged += batch;
            if batch < PURGE_BATCH.unsigned_abs() {
                tracing::debug!(table = %self.table_name(), purged, "purged idempotency records");
                return Ok(purged);
            }
        }
    }

    /// Starts a task on the current runtime that [`purge`](Self::purge)s now and then
    /// every `every` (at least 1 ms), logging failures. Dropping the handle stops it.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] outside a tokio runtime.
    pub fn spawn_purger(&self, every: Duration) -> Result<PurgeTask, LockError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LockError::Config {
            message: "spawn_purger must be called inside a tokio runtime".to_owned(),
        })?;
        let store = self.clone();
        let task = runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = store.purge().await {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "idempotency purge failed; retrying later"
                    );
                }
            }
        });
        Ok(PurgeTask(task.abort_handle()))
    }

    /// Stores `response` for the claim given up by
    /// [`ClaimHandle::into_completion`](crate::ClaimHandle::into_completion), inside
    /// the caller's transaction (`&mut *tx`): it commits with the operation's own writes,
    /// or not at all. Returns `false`, writing nothing, when the claim had lapsed; roll
    /// back then, since a newer request may be running the operation.
    ///
    /// ```no_run
    /// # async fn demo(store: distlock_idempotency::PostgresIdempotencyStore, claim: distlock_idempotency::ClaimHandle) -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_idempotency::StoredResponse;
    ///
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 7").execute(&mut *tx).await?;
    /// # use distlock_postgres::sqlx;
    /// if store.complete_in(&mut *tx, &claim.into_completion()?, &StoredResponse::new(200, "done")).await? {
    ///     tx.commit().await?; // effect and stored result together
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the statement fails.
    pub async fn complete_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        completion: &Completion,
        response: &StoredResponse,
    ) -> Result<bool, LockError> {
        let done = sqlx::query(&self.sql.complete)
            .bind(completion.key().as_str())
            .bind(completion.token().as_str())
            .bind(response.encode())
            .bind(millis(completion.retention()))
            .execute(executor)
            .await
            .map_err(fail("complete"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn read(&self, key: &IdempotencyKey, fingerprint: &Fingerprint) -> Result<Option<StoreClaim>, LockError> {
        let row = sqlx::query(&self.sql.read)
            .bind(key.as_str())
            .bind(&fingerprint.as_bytes()[..])
            .fetch_optional(&self.pool)
            .await
            .map_err(fail("claim"))?;
        row.map(|row| answer(&row)).transpose()
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A claim's answer from a row `(outcome, data, ms_left)`.
fn answer(row: &sqlx::postgres::PgRow) -> Result<StoreClaim, LockError> {
    let decode = |e: sqlx::Error| LockError::store(BACKEND, "claim", None, e);
    let outcome: i32 = row.try_get(0).map_err(decode)?;
    let data: Option<Vec<u8>> = row.try_get(1).map_err(decode)?;
    let ms_left: Option<i64> = row.try_get(2).map_err(decode)?;
    let unexpected = || LockError::store(BACKEND, "claim", None, format!("unexpected claim answer {outcome}"));
    match (outcome, data) {
        (0, _) => Ok(StoreClaim::Started),
        (1, Some(response)) => Ok(StoreClaim::Replay(StoredResponse::decode(&response)?)),
        (2, _) => Ok(StoreClaim::InProgress {
            retry_after: Duration::from_millis(ms_left.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0)),
        }),
        (3, Some(stored)) => {
            Fingerprint::from_slice(&stored).map(|stored| StoreClaim::Mismatch { stored }).ok_or_else(unexpected)
        }
        _ => Err(unexpected()),
    }
}

/// The background purge of [`PostgresIdempotencyStore::spawn_purger`]; dropping it stops
/// the task.
#[derive(Debug)]
#[must_use = "the background purge stops when its handle is dropped"]
pub struct PurgeTask(tokio::task::AbortHandle);

impl Drop for PurgeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[async_trait]
impl IdempotencyStore for PostgresIdempotencyStore {
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
        for _ in 0..CLAIM_ATTEMPTS {
            let row = sqlx::query(&self.sql.claim)
                .bind(key.as_str())
                .bind(&fingerprint.as_bytes()[..])
                .bind(token.as_str())
                .bind(millis(lease.as_duration()))
                .fetch_optional(&self.pool)
                .await
                .map_err(fail("claim"))?;
            if let Some(row) = row {
                return answer(&row);
            }
            // The row was written by a claim that committed after this statement's
            // snapshot: read it with a fresh one. None: it ended meanwhile; claim again.
            if let Some(answer) = self.read(key, fingerprint).await? {
                return Ok(answer);
            }
        }
        Err(LockError::store(BACKEND, "claim", None, "the key changed hands during every attempt to claim it"))
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        let done = sqlx::query(&self.sql.renew)
            .bind(key.as_str())
            .bind(token.as_str())
            .bind(millis(lease.as_duration()))
            .execute(&self.pool)
            .await
            .map_err(fail("renew"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError> {
        let completion = Completion::new(key.clone(), token.clone(), retention);
        self.complete_in(&self.pool, &completion, response).await
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        let done = sqlx::query(&self.sql.abandon)
            .bind(key.as_str())
            .bind(token.as_str())
            .execute(&self.pool)
            .await
            .map_err(fail("abandon"))?;
        Ok(done.rows_affected() == 1)
    }
}
