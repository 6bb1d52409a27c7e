//! The builder: knobs, their validation, and opening the database.

use std::time::Duration;

use distlock_api::LockError;
use distlock_sql::connect::{check_timeouts, merge, pool_options};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqliteSynchronous};

use crate::config::{
    Identifier, Layout, DEFAULT_BUSY_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE,
    MAX_TIMEOUT,
};
use crate::store::{SqliteLockStore, BACKEND};
use crate::url::SqliteUrl;

impl SqliteLockStore {
    /// Opens (creating it if missing) the database file `url` names, e.g.
    /// `sqlite:///var/lib/app/locks.db`, with the defaults or the settings in the URL (see
    /// [`SqliteUrl`]), and creates the store's tables if they are missing.
    ///
    /// # Errors
    ///
    /// As [`SqliteLockStoreBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes what it opened; a table creation that was
    /// under way is rolled back.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// A builder for another table, other timeouts or other optional behaviours.
    pub fn builder() -> SqliteLockStoreBuilder {
        SqliteLockStoreBuilder::new()
    }
}

/// Configures a [`SqliteLockStore`].
///
/// [`connect`](Self::connect) also reads the settings of its URL (see [`SqliteUrl`]). A
/// setting made on the builder and the same parameter in the URL must agree: when they
/// differ, `connect` fails with [`LockError::Config`] naming the parameter.
///
/// ```
/// use distlock_sqlite::SqliteLockStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock_api::LockError> {
/// let err = SqliteLockStore::builder().table("x; DROP TABLE y").connect("sqlite:///tmp/locks.db").await;
/// assert!(matches!(err, Err(distlock_api::LockError::Config { .. })));
///
/// let err = SqliteLockStore::builder().table("jobs").connect("sqlite:///tmp/locks.db?table=other").await;
/// assert!(err.unwrap_err().to_string().contains("`table`"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteLockStoreBuilder {
    table: Option<String>,
    release_notifications: Option<bool>,
    fair_queue: Option<bool>,
    liveness: Option<bool>,
    connect_timeout: Duration,
    busy_timeout: Duration,
    max_connections: u32,
}

impl Default for SqliteLockStoreBuilder {
    fn default() -> Self {
        Self {
            table: None,
            release_notifications: None,
            fair_queue: None,
            liveness: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl SqliteLockStoreBuilder {
    /// A builder with the defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease table (default `distlock`; URL parameter `table`). The store's other
    /// tables are named after it: `<table>_counter`, `<table>_queue`, `<table>_holders`,
    /// `<table>_intents`, `<table>_permits`, `<table>_waiters`. Stores with different
    /// tables in one file are independent.
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Whether releases wake waiting processes at once (default `true`; URL parameter
    /// `notifications`): each waiting store listens on a Unix datagram socket, registered
    /// in the waiters table, and a release sends it the key. With `false`, waiters poll
    /// every `retry_interval`.
    #[must_use]
    pub fn release_notifications(mut self, notify: bool) -> Self {
        self.release_notifications = Some(notify);
        self
    }

    /// Whether waiting acquisitions are served in arrival order (default `true`; URL
    /// parameter `fair_queue`): a release hands the key to the oldest waiter. With
    /// `false`, whoever asks first after a release gets the key.
    #[must_use]
    pub fn fair_queue(mut self, fair: bool) -> Self {
        self.fair_queue = Some(fair);
        self
    }

    /// Whether a lease whose holder process is gone counts as free (default `true`; URL
    /// parameter `liveness`): a holder killed with `kill -9` frees its locks at once
    /// instead of at the end of their TTL. Turn it off when leases are meant to outlive
    /// the process that took them (a job that marks "done for this hour" and exits).
    #[must_use]
    pub fn liveness(mut self, liveness: bool) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// How long opening the database and, later, waiting for a pooled connection may
    /// take before an operation fails with [`LockError::Store`] (default 5 s; from 1 ms to
    /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT), checked by `connect`).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a write waits for another process's write to finish before it fails
    /// (SQLite's `busy_timeout`; default 30 s; from 1 ms to
    /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT), checked by `connect`). Writes of one store are
    /// queued in the process and never wait here for each other.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The pool size of [`connect`](Self::connect) (default 4; 0 counts as 1).
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// Builds a store over an existing pool. Does no I/O: the tables are created (and
    /// the database switched to WAL) at the first operation.
    ///
    /// The pool's connections should have a `busy_timeout` (sqlx's default is 5 s), so
    /// that writers of other processes wait instead of failing.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the table name is not a plain identifier.
    pub fn build(self, pool: SqlitePool) -> Result<SqliteLockStore, LockError> {
        let layout = self.layout(None)?;
        Ok(SqliteLockStore::from_parts(pool, layout))
    }

    /// Checks the URL and every setting (before any I/O), opens the database file
    /// (creating it and its directory's missing file, not missing directories), switches
    /// it to WAL and creates the store's tables if they are missing.
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`] (before any I/O) for a URL that is not `sqlite:`, an
    ///   unknown, repeated or malformed parameter, a bad table name, a URL parameter that
    ///   contradicts a builder setting, or a timeout out of range.
    /// - [`LockError::Store`] (operation `"connect"`) when the file cannot be opened or
    ///   created (a missing directory, no permission, not a database) or the tables
    ///   cannot be made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future closes what it opened.
    pub async fn connect(self, url: &str) -> Result<SqliteLockStore, LockError> {
        let url = SqliteUrl::parse(url)?;
        let layout = self.layout(Some(&url))?;
        check_timeouts(&[("connect_timeout", self.connect_timeout), ("busy_timeout", self.busy_timeout)], MAX_TIMEOUT)?;
        let options = SqliteConnectOptions::new()
            .filename(url.path())
            .create_if_missing(true)
            .busy_timeout(self.busy_timeout)
            .synchronous(SqliteSynchronous::Normal);
        let pool = pool_options(self.max_connections, self.connect_timeout).connect_lazy_with(options);
        let store = SqliteLockStore::from_parts(pool, layout);
        match tokio::time::timeout(self.connect_timeout, store.ready("connect")).await {
            Ok(ready) => ready?,
            Err(_) => {
                return Err(LockError::store(
                    BACKEND,
                    "connect",
                    None,
                    format!("the database was not ready within {:?}", self.connect_timeout),
                ))
            }
        }
        Ok(store)
    }

    /// The layout from this builder's settings merged with `url`'s parameters (which
    /// must agree with settings made on the builder).
    fn layout(&self, url: Option<&SqliteUrl>) -> Result<Layout, LockError> {
        let table = self.table.as_deref().map(|table| Identifier::new("table", table)).transpose()?;
        let url_table = url.and_then(SqliteUrl::table).map(|table| Identifier::new("table", table)).transpose()?;
        Ok(Layout {
            table: merge("table", table, url_table, Identifier::trusted(DEFAULT_TABLE))?,
            notifications: merge(
                "notifications",
                self.release_notifications,
                url.and_then(SqliteUrl::notifications),
                true,
            )?,
            fair_queue: merge("fair_queue", self.fair_queue, url.and_then(SqliteUrl::fair_queue), true)?,
            liveness: merge("liveness", self.liveness, url.and_then(SqliteUrl::liveness), true)?,
        })
    }
}
