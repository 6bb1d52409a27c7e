//! `PostgresIdempotencyStore`: the idempotency contract of `distlock_api::idempotency`
//! on one table, one statement per operation (the `.sql` files of `src/sql/idempotency/`,
//! rendered with the table's validated names as the lock statements are).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::idempotency::{
    Completion, Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse,
};
use distlock_api::{LockError, Token, Ttl};
use sqlx::{PgExecutor, PgPool, Row};

use crate::config::{Identifier, Layout, DEFAULT_SCHEMA};
use crate::error::BACKEND;
use crate::sql::{millis, PURGE_BATCH};
use crate::store::PostgresLockStore;
use crate::template::{idempotency, lease, Names};

/// The default table: `public.distlock_idempotency`.
const DEFAULT_TABLE: &str = "distlock_idempotency";
/// A claim whose statement raced with a concurrent take-over or purge (and so saw no
/// row) is retried this many times.
const CLAIM_ATTEMPTS: usize = 5;
/// Serialises concurrent `ensure_schema` calls: ASCII "distidem".
const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6964_656d;

/// Builds a [`PostgresIdempotencyStore`] with a non-default schema or table.
///
/// ```
/// use distlock_postgres::PostgresIdempotencyStore;
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
        self.layout().map(drop)
    }

    /// The store on `pool`. Call [`ensure_schema`](PostgresIdempotencyStore::ensure_schema)
    /// once before use.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), before any I/O.
    pub fn build(self, pool: PgPool) -> Result<PostgresIdempotencyStore, LockError> {
        Ok(PostgresIdempotencyStore { pool, sql: Arc::new(Statements::new(&self.layout()?)) })
    }

    /// The validated names: the idempotency table takes the place of the lock table.
    fn layout(&self) -> Result<Layout, LockError> {
        let schema = Identifier::new("schema", &self.schema)?;
        let table = Identifier::new("table", &self.table)?;
        Ok(Layout { schema, table, ..Layout::default() })
    }
}

/// The SQL text, rendered once per store from the files and the validated names.
#[derive(Debug)]
struct Statements {
    /// The quoted, qualified table name.
    table: String,
    /// Whether the schema is `public`, which `ensure_schema` does not create.
    default_schema: bool,
    lock_schema: String,
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
    fn new(layout: &Layout) -> Self {
        let names = Names::new(layout);
        Self {
            table: format!("{}.{}", layout.schema.quoted(), layout.table.quoted()),
            default_schema: layout.schema.as_str() == DEFAULT_SCHEMA,
            lock_schema: names.render(lease::LOCK_SCHEMA),
            create_schema: names.render(lease::CREATE_SCHEMA),
            create_table: names.render(idempotency::CREATE_TABLE),
            create_index: names.render(idempotency::CREATE_INDEX),
            claim: names.render(idempotency::CLAIM),
            read: names.render(idempotency::READ),
            renew: names.render(idempotency::RENEW),
            complete: names.render(idempotency::COMPLETE),
            abandon: names.render(idempotency::ABANDON),
            purge: names.render(idempotency::PURGE),
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
/// use distlock_idempotency::Idempotency;
/// use distlock_postgres::PostgresIdempotencyStore;
///
/// let store = PostgresIdempotencyStore::connect("postgres://app@db/app").await?;
/// store.ensure_schema().await?;
/// let idem = Idempotency::new(std::sync::Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresIdempotencyStore {
    pool: PgPool,
    sql: Arc<Statements>,
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
        let layout = Layout { table: Identifier::trusted(DEFAULT_TABLE), ..Layout::default() };
        Self { pool, sql: Arc::new(Statements::new(&layout)) }
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
        self.sql.table.clone()
    }

    /// Creates the schema (unless `public`), the table and its index if missing; safe to
    /// call concurrently and repeatedly.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the server refuses (e.g. no `CREATE` privilege).
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        let mut tx = self.pool.begin().await.map_err(fail("ensure schema"))?;
        let lock = sqlx::query(&self.sql.lock_schema).bind(SCHEMA_LOCK_KEY);
        lock.execute(&mut *tx).await.map_err(fail("ensure schema"))?;
        let schema = (!self.sql.default_schema).then_some(&self.sql.create_schema);
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
    /// `ClaimHandle::into_completion` of `distlock-idempotency`, inside
    /// the caller's transaction (`&mut *tx`): it commits with the operation's own writes,
    /// or not at all. Returns `false`, writing nothing, when the claim had lapsed; roll
    /// back then, since a newer request may be running the operation.
    ///
    /// ```no_run
    /// # async fn demo(store: distlock_postgres::PostgresIdempotencyStore, claim: distlock_idempotency::ClaimHandle) -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_api::idempotency::StoredResponse;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_one_statement_with_quoted_names() {
        let store = PostgresIdempotencyStore::builder().schema("s").table("t").layout().unwrap();
        let sql = Statements::new(&store);
        let statements = [
            &sql.create_table,
            &sql.create_index,
            &sql.claim,
            &sql.read,
            &sql.renew,
            &sql.complete,
            &sql.abandon,
            &sql.purge,
        ];
        for text in statements.iter().chain([&&sql.lock_schema, &&sql.create_schema]) {
            assert!(!text.contains(['{', '}']), "{text}");
        }
        let names = Names::new(&store);
        for file in idempotency::ALL {
            assert!(statements.contains(&&names.render(*file)), "{} is not a statement of the store", file.path);
            assert!(!file.text.contains("distribute_lock"), "{}", file.path);
        }
        assert!(sql.create_table.contains("CREATE TABLE IF NOT EXISTS \"s\".\"t\" ("), "{}", sql.create_table);
        assert!(sql.create_index.contains("\"t_expires_at\" ON \"s\".\"t\""), "{}", sql.create_index);
        assert_eq!(sql.create_schema.trim_end(), "CREATE SCHEMA IF NOT EXISTS \"s\"");
        assert_eq!(sql.table, "\"s\".\"t\"");
        assert!(!sql.default_schema);
    }

    #[test]
    fn names_are_checked_before_any_io() {
        assert!(PostgresIdempotencyStore::builder().check().is_ok());
        assert_eq!(Identifier::new("table", DEFAULT_TABLE).unwrap(), Identifier::trusted(DEFAULT_TABLE));
        for (schema, table) in [("a-b", "t"), ("s", "x; DROP TABLE y"), ("s", ""), ("s", &"n".repeat(64))] {
            let err = PostgresIdempotencyStore::builder().schema(schema).table(table).check().unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{schema}.{table}: {err}");
        }
        let long = "n".repeat(63);
        let sql = Statements::new(&PostgresIdempotencyStore::builder().table(&long).layout().unwrap());
        let index = sql.create_index.split('"').nth(1).unwrap();
        assert!(index.len() <= 63 && index.ends_with("_expires_at"), "{index}");
    }
}
