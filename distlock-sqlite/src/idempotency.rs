//! `SqliteIdempotencyStore`: the idempotency contract of `distlock_api::idempotency` in
//! one table of a lock store's database file, each operation one write of the store (the
//! `.sql` files of `src/sql/idempotency/`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use distlock_api::idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use sqlx::Row as _;

use crate::clock::{left, ms_after, now_ms};
use crate::config::Identifier;
use crate::store::{SqliteLockStore, BACKEND};

/// The table of [`SqliteIdempotencyStore::from_lock_store`]: `distlock_idempotency`.
pub const DEFAULT_IDEMPOTENCY_TABLE: &str = "distlock_idempotency";
/// The most records one purge statement deletes.
const PURGE_BATCH: i64 = 10_000;

/// Declares one field per `.sql` file and renders them for a table.
macro_rules! statements {
    ($($field:ident => $path:literal,)*) => {
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

        #[cfg(test)]
        const FILES: &[&str] = &[$($path),*];
    };
}

statements! {
    create => "create.sql",
    select => "select.sql",
    claim => "claim.sql",
    renew => "renew.sql",
    complete => "complete.sql",
    abandon => "abandon.sql",
    purge => "purge.sql",
}

fn render(path: &str, text: &str, table: &Identifier) -> String {
    distlock_sql::template::render_for_table(
        path,
        text,
        table,
        &[("records", ""), ("records_retained", "retained")],
        &[],
    )
}

/// An [`IdempotencyStore`] in the database file of a [`SqliteLockStore`], shared by every
/// process of the host that opens the file, in one table (by default
/// `distlock_idempotency`) created on first use:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS "distlock_idempotency" (
///     key TEXT NOT NULL PRIMARY KEY, fingerprint BLOB NOT NULL,
///     token TEXT, boot TEXT, lease_ms INTEGER,     -- a running claim and its lease
///     response BLOB, retain_until_ms INTEGER       -- a completed result and its retention
/// ) WITHOUT ROWID;
/// ```
///
/// Every operation is one write of the lock store (a `BEGIN IMMEDIATE` transaction or an
/// autocommit statement, in the store's turn with the other writers of the host), so two
/// processes claiming one key never both start. A claim's lease is measured as the lock
/// store measures leases, on the host's `CLOCK_BOOTTIME` tagged with the boot id: no
/// wall-clock step shortens or lengthens it, and a claim written before a reboot has
/// lapsed after it. A completed result is kept for its retention on the wall clock, so
/// that it outlives a reboot (a wall-clock step moves the end of a retention, never the
/// end of a claim). Expired records are deleted by [`purge`](Self::purge).
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// use distlock_idempotency::Idempotency;
/// use distlock_sqlite::SqliteIdempotencyStore;
///
/// let store = SqliteIdempotencyStore::connect("sqlite:///var/lib/app/locks.db").await?;
/// let idem = Idempotency::new(std::sync::Arc::new(store));
/// # Ok(()) }
/// ```
///
/// Cloning is cheap and clones share the lock store's pool.
#[derive(Clone)]
pub struct SqliteIdempotencyStore {
    locks: SqliteLockStore,
    table: Identifier,
    sql: Arc<Statements>,
    ready: Arc<tokio::sync::OnceCell<()>>,
}

impl fmt::Debug for SqliteIdempotencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteIdempotencyStore").field("table", &self.table).finish_non_exhaustive()
    }
}

/// The wall clock in milliseconds since the Unix epoch: the clock of retentions only.
fn unix_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn fail<E: Into<distlock_api::BoxError>>(operation: &'static str) -> impl FnOnce(E) -> LockError {
    move |error| LockError::store(BACKEND, operation, None, error)
}

/// A record as read by `select.sql`.
struct Record {
    fingerprint: Vec<u8>,
    token: Option<String>,
    boot: Option<String>,
    lease_ms: Option<i64>,
    response: Option<Vec<u8>>,
    retain_until_ms: Option<i64>,
}

impl Record {
    fn of(row: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            fingerprint: row.try_get("fingerprint")?,
            token: row.try_get("token")?,
            boot: row.try_get("boot")?,
            lease_ms: row.try_get("lease_ms")?,
            response: row.try_get("response")?,
            retain_until_ms: row.try_get("retain_until_ms")?,
        })
    }

    /// The time left on the record's running claim, when it is one of this boot with
    /// time left.
    fn running(&self, boot: &str, now: i64) -> Option<Duration> {
        let lease_ms = self.lease_ms.filter(|&end| end > now)?;
        (self.token.is_some() && self.boot.as_deref() == Some(boot)).then(|| left(now, lease_ms))
    }

    /// The record's result, when it is completed and within its retention.
    fn result(&self, unix_now: i64) -> Option<&[u8]> {
        self.response.as_deref().filter(|_| self.retain_until_ms.is_some_and(|end| end > unix_now))
    }
}

impl SqliteIdempotencyStore {
    /// The store in `locks`'s database file, in the table `distlock_idempotency`.
    pub fn from_lock_store(locks: &SqliteLockStore) -> Self {
        Self::in_table(locks, Identifier::trusted(DEFAULT_IDEMPOTENCY_TABLE))
    }

    /// The store in `locks`'s database file, in the table `table`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when `table` is not `[A-Za-z_][A-Za-z0-9_]{0,47}` (or starts
    /// with `sqlite_`), before any I/O.
    pub fn with_table(locks: &SqliteLockStore, table: &str) -> Result<Self, LockError> {
        Ok(Self::in_table(locks, Identifier::new("table", table)?))
    }

    fn in_table(locks: &SqliteLockStore, table: Identifier) -> Self {
        let sql = Arc::new(Statements::new(&table));
        Self { locks: locks.clone(), table, sql, ready: Arc::default() }
    }

    /// Opens the database `url` names as [`SqliteLockStore::connect`] does (same URL and
    /// settings) and keeps the records in its table `distlock_idempotency`.
    ///
    /// # Errors
    ///
    /// Those of [`SqliteLockStore::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Self::from_lock_store(&SqliteLockStore::connect(url).await?))
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        self.table.as_str()
    }

    /// Creates the table if it is missing (once per store and its clones; every
    /// operation does it first, so calling it is only a way to fail early).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"ensure schema"`) when the file cannot be written.
    pub async fn ensure_schema(&self) -> Result<(), LockError> {
        self.ready("ensure schema").await
    }

    async fn ready(&self, operation: &'static str) -> Result<(), LockError> {
        if self.ready.initialized() {
            return Ok(());
        }
        self.locks.ready(operation).await?;
        let create = || async {
            let mut write = self.locks.explained(self.locks.begin().await).await.map_err(fail(operation))?;
            sqlx::query(&self.sql.create).execute(write.conn()).await.map_err(fail(operation))?;
            write.commit().await.map_err(fail(operation))
        };
        self.ready.get_or_try_init(create).await.map(|_| ())
    }

    /// Deletes records whose claim lapsed or whose retention ended, at most 10 000 per
    /// statement, and returns how many.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"purge"`); batches deleted before stay deleted.
    pub async fn purge(&self) -> Result<u64, LockError> {
        self.ready("purge").await?;
        let boot = SqliteLockStore::boot_id()?;
        let mut purged = 0;
        loop {
            let batch = sqlx::query(&self.sql.purge).bind(boot).bind(now_ms()).bind(unix_ms()).bind(PURGE_BATCH);
            let deleted = self.locks.explained(self.locks.write_one(batch).await).await.map_err(fail("purge"))?;
            purged += deleted;
            if deleted < PURGE_BATCH.unsigned_abs() {
                tracing::debug!(table = self.table_name(), purged, "purged idempotency records");
                return Ok(purged);
            }
        }
    }

    /// Runs the token-checked statement `sql` (renew, complete, abandon) with key,
    /// token, boot and the boot clock bound first, then `more`.
    async fn token_checked<'q>(
        &self,
        operation: &'static str,
        sql: &'q str,
        key: &'q IdempotencyKey,
        token: &'q Token,
        more: impl FnOnce(Query<'q>) -> Query<'q>,
    ) -> Result<bool, LockError> {
        self.ready(operation).await?;
        let boot = SqliteLockStore::boot_id()?;
        let query = sqlx::query(sql).bind(key.as_str()).bind(token.as_str()).bind(boot).bind(now_ms());
        let done = self.locks.explained(self.locks.write_one(more(query)).await).await.map_err(fail(operation))?;
        Ok(done == 1)
    }
}

/// A statement with its parameters.
type Query<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

#[async_trait]
impl IdempotencyStore for SqliteIdempotencyStore {
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
        self.ready("claim").await?;
        let boot = SqliteLockStore::boot_id()?;
        let mut write = self.locks.explained(self.locks.begin().await).await.map_err(fail("claim"))?;
        let row = sqlx::query(&self.sql.select).bind(key.as_str()).fetch_optional(write.conn()).await;
        let record = row.and_then(|row| row.as_ref().map(Record::of).transpose()).map_err(fail("claim"))?;
        let (now, unix_now) = (now_ms(), unix_ms());
        if let Some(record) = &record {
            let running = record.running(boot, now);
            let result = record.result(unix_now);
            let mine = record.token.as_deref() == Some(token.as_str());
            if !(running.is_some() && mine) && (running.is_some() || result.is_some()) {
                // A live record of another claim: answered from, nothing written.
                write.rollback().await;
                if record.fingerprint != fingerprint.as_bytes()[..] {
                    let stored = Fingerprint::from_slice(&record.fingerprint).ok_or_else(|| {
                        LockError::store(BACKEND, "claim", None, "a stored fingerprint is not 32 bytes")
                    })?;
                    return Ok(StoreClaim::Mismatch { stored });
                }
                return Ok(match (result, running) {
                    (Some(response), _) => StoreClaim::Replay(StoredResponse::decode(response)?),
                    (None, retry_after) => StoreClaim::InProgress { retry_after: retry_after.unwrap_or_default() },
                });
            }
        }
        sqlx::query(&self.sql.claim)
            .bind(key.as_str())
            .bind(&fingerprint.as_bytes()[..])
            .bind(token.as_str())
            .bind(boot)
            .bind(ms_after(now, lease.as_duration()))
            .execute(write.conn())
            .await
            .map_err(fail("claim"))?;
        write.commit().await.map_err(fail("claim"))?;
        Ok(StoreClaim::Started)
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        let until = ms_after(now_ms(), lease.as_duration());
        self.token_checked("renew", &self.sql.renew, key, token, |query| query.bind(until)).await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError> {
        let retention_ms = i64::try_from(retention.as_duration().as_millis()).unwrap_or(i64::MAX);
        let until = unix_ms().saturating_add(retention_ms);
        let encoded = response.encode();
        self.token_checked("complete", &self.sql.complete, key, token, |query| query.bind(encoded).bind(until)).await
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        self.token_checked("abandon", &self.sql.abandon, key, token, |query| query).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_embedded_and_rendered_with_quoted_names() {
        let table = Identifier::new("table", "records").unwrap();
        let sql = Statements::new(&table);
        for text in [&sql.create, &sql.select, &sql.claim, &sql.renew, &sql.complete, &sql.abandon, &sql.purge] {
            assert!(!text.contains(['{', '}']), "{text}");
        }
        assert!(sql.create.contains("CREATE TABLE IF NOT EXISTS \"records\" ("), "{}", sql.create);
        assert!(sql.create.contains("\"records_retained\" ON \"records\""), "{}", sql.create);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sql/idempotency");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|file| file.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut embedded: Vec<&str> = FILES.to_vec();
        embedded.sort_unstable();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn a_record_is_live_while_its_claim_or_retention_lasts() {
        let record = |token: Option<&str>, boot: &str, lease_ms, retain_until_ms: Option<i64>| Record {
            fingerprint: vec![0; 32],
            token: token.map(str::to_owned),
            boot: Some(boot.to_owned()),
            lease_ms,
            response: retain_until_ms.map(|_| vec![1]),
            retain_until_ms,
        };
        assert_eq!(record(Some("t"), "b", Some(15), None).running("b", 10), Some(Duration::from_millis(5)));
        assert_eq!(record(Some("t"), "b", Some(10), None).running("b", 10), None);
        assert_eq!(record(Some("t"), "other boot", Some(15), None).running("b", 10), None);
        assert!(record(None, "b", None, Some(20)).result(19).is_some());
        assert!(record(None, "b", None, Some(20)).result(20).is_none());
    }

    #[test]
    fn table_names_are_checked() {
        assert_eq!(
            Identifier::new("table", DEFAULT_IDEMPOTENCY_TABLE).unwrap(),
            Identifier::trusted(DEFAULT_IDEMPOTENCY_TABLE)
        );
        for bad in ["a-b", "x; DROP TABLE y", "", "sqlite_master"] {
            assert!(matches!(Identifier::new("table", bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
