//! `MysqlIdempotencyStore`: the idempotency contract of `distlock_api::idempotency` on
//! one table, on the lock store's pool, each operation one statement (the `.sql` files of
//! `src/sql/idempotency/`) timed by the server's clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use sqlx::mysql::{MySqlQueryResult, MySqlRow};
use sqlx::Row as _;

use crate::config::Identifier;
use crate::error::BACKEND;
use crate::sql::millis;
use crate::store::{MysqlLockStore, UNKNOWN_OUTCOME};

/// The table of [`MysqlIdempotencyStore::from_lock_store`], in the URL's database.
pub const DEFAULT_IDEMPOTENCY_TABLE: &str = "distlock_idempotency";
/// A claim that raced with the end of the record it did not take over (and so read no
/// row) is run again this many times.
const CLAIM_ATTEMPTS: usize = 5;
/// The most records one purge statement deletes.
const PURGE_BATCH: i64 = 10_000;

macro_rules! files {
    ($($field:ident = $path:literal),* $(,)?) => {
        /// The store's statements, rendered for its table.
        #[derive(Debug)]
        struct Statements {
            $($field: String,)*
        }

        impl Statements {
            fn new(table: &Identifier) -> Self {
                Self { $($field: render($path, include_str!(concat!("sql/idempotency/", $path)), table),)* }
            }
        }

        /// `(path, text)` of every embedded file.
        #[cfg(test)]
        pub(crate) const FILES: &[(&str, &str)] = &[$(($path, include_str!(concat!("sql/idempotency/", $path)))),*];
    };
}

files! {
    create_table = "create_table.sql",
    check_table = "check_table.sql",
    claim = "claim.sql",
    read = "read.sql",
    renew = "renew.sql",
    complete = "complete.sql",
    abandon = "abandon.sql",
    purge = "purge.sql",
}

/// `text` without its leading comment lines, the table's names filled in.
fn render(path: &str, text: &str, table: &Identifier) -> String {
    distlock_sql::template::render_for_table(path, text, table, &[("table", ""), ("expires_index", "expires_at")], &[])
}

/// An [`IdempotencyStore`] on MySQL or MariaDB: one table, by default
/// `distlock_idempotency` in the URL's database, created by
/// [`ensure_schema`](Self::ensure_schema):
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS `distlock_idempotency` (
///     idem_key VARBINARY(1024) NOT NULL PRIMARY KEY, fingerprint VARBINARY(32) NOT NULL,
///     token VARBINARY(64) NULL,     -- the running claim's token; NULL once completed
///     response LONGBLOB NULL,       -- the completed result; NULL while running
///     expires_at BIGINT NOT NULL,   -- µs since the epoch: lease end while running,
///     INDEX `distlock_idempotency_expires_at` (expires_at)) -- retention end after
/// ```
///
/// A claim is one `INSERT … ON DUPLICATE KEY UPDATE` that takes the key when it has no
/// live record (or a running claim of the same token) and changes nothing otherwise; the
/// statement's insert id says which. A claim that did not start reads what holds the key
/// with one `SELECT`. Renewal, completion and abandoning are one token-checked statement
/// each. Times are the server's `NOW(6)`. Expired records are deleted by
/// [`purge`](Self::purge) in batches of 10 000 rows.
///
/// Like the lock store, an operation that meets a connection the server dropped runs
/// again on another; a completion or an abandon that then finds nothing to change is an
/// error (the first attempt may have done it), not `false`.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// use distlock_idempotency::Idempotency;
/// use distlock_mysql::MysqlIdempotencyStore;
///
/// let store = MysqlIdempotencyStore::connect("mysql://app@db/app").await?;
/// store.ensure_schema().await?;
/// let idem = Idempotency::new(std::sync::Arc::new(store));
/// # Ok(()) }
/// ```
///
/// Cloning is cheap and clones share the pool.
#[derive(Clone)]
pub struct MysqlIdempotencyStore {
    locks: MysqlLockStore,
    table: Identifier,
    sql: Arc<Statements>,
}

impl fmt::Debug for MysqlIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlIdempotencyStore").field("table", &self.table).finish_non_exhaustive()
    }
}

fn fail<E: Into<distlock_api::BoxError>>(operation: &'static str) -> impl FnOnce(E) -> LockError {
    move |error| LockError::store(BACKEND, operation, None, error)
}

impl MysqlIdempotencyStore {
    /// The store on the lock store's pool, in the table `distlock_idempotency`.
    /// [`ensure_schema`](Self::ensure_schema) creates it only if the lock store
    /// [creates its schema](MysqlLockStore::creates_schema).
    pub fn from_lock_store(locks: &MysqlLockStore) -> Self {
        Self::in_table(locks, Identifier::trusted(DEFAULT_IDEMPOTENCY_TABLE))
    }

    /// The store on the lock store's pool, in the table `table`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when `table` is not `[A-Za-z_][A-Za-z0-9_]{0,47}`, before
    /// any I/O.
    pub fn with_table(locks: &MysqlLockStore, table: &str) -> Result<Self, LockError> {
        Ok(Self::in_table(locks, Identifier::new("table", table)?))
    }

    fn in_table(locks: &MysqlLockStore, table: Identifier) -> Self {
        let sql = Arc::new(Statements::new(&table));
        Self { locks: locks.clone(), table, sql }
    }

    /// Connects as [`MysqlLockStore::connect`] does (same URL and pool settings).
    ///
    /// # Errors
    ///
    /// Those of [`MysqlLockStore::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Self::from_lock_store(&MysqlLockStore::connect(url).await?))
    }

    /// The pool.
    pub fn pool(&self) -> &sqlx::MySqlPool {
        self.locks.pool()
    }

    /// The table, quoted as it appears in the SQL, e.g. `` `distlock_idempotency` ``.
    pub fn table_name(&self) -> String {
        self.table.quoted()
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement of the table, exactly as
    /// [`ensure_schema`](Self::ensure_schema) sends it: for a DBA to run where the
    /// store's role may not create tables.
    pub fn ddl(&self) -> &str {
        &self.sql.create_table
    }

    /// Creates the table if it does not exist (unless the lock store was built with
    /// `create_schema(false)`), then checks that it has the columns the store uses; safe
    /// to call concurrently and repeatedly.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"ensure schema"`) when the server fails or
    /// refuses (its message names the missing table, column or privilege).
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        let pool = self.locks.pool();
        if self.locks.creates_schema() {
            let create = || sqlx::query(&self.sql.create_table).execute(pool);
            self.locks.retrying("ensure schema", create).await.map_err(fail("ensure schema"))?;
        }
        let check = || sqlx::query(&self.sql.check_table).execute(pool);
        self.locks.retrying("ensure schema", check).await.map(drop).map_err(fail("ensure schema"))
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
            let batch = self
                .locks
                .retrying("purge", || sqlx::query(&self.sql.purge).bind(PURGE_BATCH).execute(self.locks.pool()))
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

    /// What holds `key` for a claim that did not start, or `None` when it has no live
    /// record.
    async fn read(&self, key: &IdempotencyKey, fingerprint: &Fingerprint) -> Result<Option<StoreClaim>, LockError> {
        let fingerprint = &fingerprint.as_bytes()[..];
        let row = self
            .locks
            .retrying("claim", || {
                sqlx::query(&self.sql.read)
                    .bind(fingerprint)
                    .bind(fingerprint)
                    .bind(key.as_str())
                    .fetch_optional(self.locks.pool())
            })
            .await
            .map_err(fail("claim"))?;
        row.map(|row| answer(&row)).transpose()
    }

    /// Runs a token-checked statement (complete, abandon) made by `statement`, again on
    /// a lost connection; `true` when it changed one row.
    async fn token_checked<F, Fut>(&self, operation: &'static str, mut statement: F) -> Result<bool, LockError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<MySqlQueryResult, sqlx::Error>>,
    {
        let mut attempts = 0;
        let done = self
            .locks
            .retrying(operation, || {
                attempts += 1;
                statement()
            })
            .await
            .map_err(fail(operation))?;
        if done.rows_affected() == 0 && attempts > 1 {
            return Err(LockError::store(BACKEND, operation, None, UNKNOWN_OUTCOME));
        }
        Ok(done.rows_affected() == 1)
    }
}

/// A claim's answer from a row `(outcome, data, µs left)` of `read.sql`.
fn answer(row: &MySqlRow) -> Result<StoreClaim, LockError> {
    let outcome: i64 = row.try_get(0).map_err(fail("claim"))?;
    let data: Option<Vec<u8>> = row.try_get(1).map_err(fail("claim"))?;
    let micros_left: i64 = row.try_get(2).map_err(fail("claim"))?;
    let unexpected = || LockError::store(BACKEND, "claim", None, format!("unexpected claim answer {outcome}"));
    match (outcome, data) {
        (1, Some(response)) => Ok(StoreClaim::Replay(StoredResponse::decode(&response)?)),
        (2, _) => {
            let millis_left = u64::try_from(micros_left).unwrap_or(0).div_ceil(1000);
            Ok(StoreClaim::InProgress { retry_after: Duration::from_millis(millis_left) })
        }
        (3, Some(stored)) => {
            Fingerprint::from_slice(&stored).map(|stored| StoreClaim::Mismatch { stored }).ok_or_else(unexpected)
        }
        _ => Err(unexpected()),
    }
}

#[async_trait]
impl IdempotencyStore for MysqlIdempotencyStore {
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
        let (key_text, fingerprint_bytes, me) = (key.as_str(), &fingerprint.as_bytes()[..], token.as_str());
        let lease_ms = millis(lease.as_duration());
        for _ in 0..CLAIM_ATTEMPTS {
            // Run again after a lost connection: a claim of the same token is taken again.
            let done = self
                .locks
                .retrying("claim", || {
                    sqlx::query(&self.sql.claim)
                        .bind(key_text)
                        .bind(fingerprint_bytes)
                        .bind(me)
                        .bind(lease_ms)
                        .bind(me)
                        .bind(fingerprint_bytes)
                        .bind(me)
                        .bind(me)
                        .bind(me)
                        .bind(me)
                        .bind(lease_ms)
                        .execute(self.locks.pool())
                })
                .await
                .map_err(fail("claim"))?;
            if done.last_insert_id() != 0 {
                return Ok(StoreClaim::Started);
            }
            // None: the record that held the key ended meanwhile; claim again.
            if let Some(answer) = self.read(key, fingerprint).await? {
                return Ok(answer);
            }
        }
        Err(LockError::store(BACKEND, "claim", None, "the key changed hands during every attempt to claim it"))
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        let lease_ms = millis(lease.as_duration());
        // Run again after a lost connection: renewing twice is renewing.
        let done = self
            .locks
            .retrying("renew", || {
                sqlx::query(&self.sql.renew)
                    .bind(lease_ms)
                    .bind(key.as_str())
                    .bind(token.as_str())
                    .execute(self.locks.pool())
            })
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
        let (encoded, retention_ms) = (response.encode(), millis(retention.as_duration()));
        self.token_checked("complete", || {
            sqlx::query(&self.sql.complete)
                .bind(encoded.as_slice())
                .bind(retention_ms)
                .bind(key.as_str())
                .bind(token.as_str())
                .execute(self.locks.pool())
        })
        .await
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        self.token_checked("abandon", || {
            sqlx::query(&self.sql.abandon).bind(key.as_str()).bind(token.as_str()).execute(self.locks.pool())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_rendered_with_quoted_names_and_the_server_clock() {
        let table = Identifier::new("table", "records").unwrap();
        for (path, text) in FILES {
            let rendered = render(path, text, &table);
            assert!(!rendered.contains(['{', '}']), "{path}: {rendered}");
            assert!(!rendered.starts_with("--"), "{path}");
            let clock = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";
            assert_eq!(text.matches("UNIX_TIMESTAMP").count(), text.matches(clock).count(), "{path}");
        }
        let sql = Statements::new(&table);
        assert!(sql.create_table.contains("CREATE TABLE IF NOT EXISTS `records` ("), "{}", sql.create_table);
        assert!(sql.create_table.contains("INDEX `records_expires_at` (expires_at)"), "{}", sql.create_table);
        // The claim binds eleven parameters, as `claim` sends them.
        assert_eq!(sql.claim.matches('?').count(), 11);
    }

    #[test]
    fn every_file_in_the_folder_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql/idempotency");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|file| file.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut embedded: Vec<&str> = FILES.iter().map(|(path, _)| *path).collect();
        embedded.sort_unstable();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn the_default_table_is_a_valid_identifier() {
        assert_eq!(
            Identifier::new("table", DEFAULT_IDEMPOTENCY_TABLE).unwrap(),
            Identifier::trusted(DEFAULT_IDEMPOTENCY_TABLE)
        );
    }
}
