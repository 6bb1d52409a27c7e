//! The builder: knobs, their validation, and connecting.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockError;
use distlock_sql::connect::{check_timeouts, first_connection, merge, pool_options};
use sqlx::mysql::{MySqlConnection, MySqlPool};

use crate::config::{
    Identifier, Layout, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE,
    MAX_TIMEOUT,
};
use crate::error::BACKEND;
use crate::sql::Statements;
use crate::store::MysqlLockStore;
use crate::url::MysqlUrl;

impl MysqlLockStore {
    /// Connects to `url` with the defaults (table `distribute_lock` in the URL's
    /// database, a pool of 8 connections, 5 s timeouts), or with the table the URL names
    /// (`?table=`, `?create=`; see [`MysqlUrl`]). Call
    /// [`ensure_schema`](Self::ensure_schema) next unless migrations create the tables.
    ///
    /// # Errors
    ///
    /// As [`MysqlLockStoreBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// A builder for a store with another table or other pool settings.
    pub fn builder() -> MysqlLockStoreBuilder {
        MysqlLockStoreBuilder::new()
    }
}

/// Configures a [`MysqlLockStore`]: its table and, for [`connect`](Self::connect), how
/// its pool connects.
///
/// Names are validated by [`build`](Self::build) and [`connect`](Self::connect), before
/// any I/O. A setting made on the builder and the same parameter in the URL must agree:
/// when they differ, `connect` fails with [`LockError::Config`] naming the parameter.
///
/// ```
/// use distlock_mysql::MysqlLockStore;
/// use distlock_mysql::sqlx::mysql::MySqlPoolOptions;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock_api::LockError> {
/// // A lazy pool does no I/O until the first query.
/// let pool = MySqlPoolOptions::new().connect_lazy("mysql://app@db.internal/app").expect("url");
/// let store = MysqlLockStore::builder().table("leases").build(pool)?;
/// assert_eq!(store.table_name(), "`leases`");
///
/// let err = MysqlLockStore::builder().table("x; DROP TABLE y").build(store.pool().clone()).unwrap_err();
/// assert!(matches!(err, distlock_api::LockError::Config { .. }), "{err}");
///
/// // The URL and the builder disagree: refused before any I/O.
/// let err = MysqlLockStore::builder().table("leases").connect("mysql://db.internal/app?table=other").await;
/// assert!(err.unwrap_err().to_string().contains("`table`"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MysqlLockStoreBuilder {
    table: Option<String>,
    create_schema: Option<bool>,
    release_notifications: Option<bool>,
    max_connections: u32,
    acquire_timeout: Duration,
    connect_timeout: Duration,
}

impl Default for MysqlLockStoreBuilder {
    fn default() -> Self {
        Self {
            table: None,
            create_schema: None,
            release_notifications: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl MysqlLockStoreBuilder {
    /// A builder with the defaults: table `distribute_lock`, a pool of 8, 5 s timeouts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease table (default `distribute_lock`; URL parameter `table`), in the
    /// connection's database. The queue and group tables are named after it
    /// (`<table>_queue`, `<table>_names`, `<table>_holders`, `<table>_places`,
    /// `<table>_permits`).
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Whether the store may create its tables (default `true`; URL parameter `create`).
    /// With `false` — for a role that may not run DDL, where a DBA created the tables
    /// from [`MysqlLockStore::ddl`] — [`ensure_schema`](MysqlLockStore::ensure_schema)
    /// and [`connect`](Self::connect) only check that the tables exist with the columns
    /// the store reads, and fail with the server's message naming what is missing.
    #[must_use]
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = Some(create);
        self
    }

    /// Whether waiters are woken by releases (default `true`; URL parameter
    /// `notifications`; see "Waiting" in the crate documentation): the store then keeps
    /// up to two connections beside its pool, a listener that sleeps until a release it
    /// waits for interrupts it with `KILL QUERY`, and a waker that sends those
    /// interrupts to other stores. With `false`, waiters poll every retry interval.
    #[must_use]
    pub fn release_notifications(mut self, notify: bool) -> Self {
        self.release_notifications = Some(notify);
        self
    }

    /// The pool size of [`connect`](Self::connect) (default 8; 0 counts as 1).
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// How long the pool of [`connect`](Self::connect) waits for a connection, including
    /// opening one, before an operation fails with [`LockError::Store`] (default 5 s;
    /// from 1 ms to one hour, checked by `connect`).
    #[must_use]
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for the server's first answer (default
    /// 5 s; from 1 ms to one hour, checked by `connect`).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Builds a store over an existing pool. Does no I/O.
    ///
    /// The pool's own settings are used as they are; its connections should keep
    /// sqlx's default time zone (`+00:00`).
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the table name is not a plain identifier
    /// (`[A-Za-z_][A-Za-z0-9_]{0,47}`).
    pub fn build(self, pool: MySqlPool) -> Result<MysqlLockStore, LockError> {
        let (layout, create) = self.settings(None)?;
        Ok(store(pool, layout, create))
    }

    /// Connects to `url` with this builder's settings and builds the store: checks the
    /// URL and every setting (before any I/O), opens one connection to see that the
    /// server answers and accepts the credentials, and, with
    /// [`create_schema(false)`](Self::create_schema), checks that the tables are there.
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`] (before any I/O) for a URL that is not `mysql://` or
    ///   `mariadb://`, an unknown, repeated or malformed URL parameter, a bad name, a URL
    ///   parameter that contradicts a builder setting, or a timeout out of range.
    /// - [`LockError::Store`] (operation `"connect"`) with the server's or the network's
    ///   own message: connection refused, unknown database, access denied, no answer
    ///   within the connect timeout, or (with `create_schema(false)`) a missing table.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(self, url: &str) -> Result<MysqlLockStore, LockError> {
        let url = MysqlUrl::parse(url)?;
        let (layout, create) = self.settings(Some(&url))?;
        let timeouts = [("acquire_timeout", self.acquire_timeout), ("connect_timeout", self.connect_timeout)];
        check_timeouts(&timeouts, MAX_TIMEOUT)?;
        let options = url.connect_options().clone();
        let address = options.get_socket().is_none().then(|| (options.get_host(), options.get_port()));
        first_connection::<MySqlConnection>(BACKEND, &options, address, "connect timeout", self.connect_timeout)
            .await?;
        let pool = pool_options(self.max_connections, self.acquire_timeout).connect_lazy_with(options);
        let store = store(pool, layout, create);
        if !create {
            store.check_schema("connect").await?;
        }
        Ok(store)
    }

    /// The layout and `create_schema` from this builder's settings, merged with `url`'s
    /// parameters (which must agree with settings made on the builder).
    fn settings(&self, url: Option<&MysqlUrl>) -> Result<(Layout, bool), LockError> {
        let table = self.table.as_deref().map(|name| Identifier::new("table", name)).transpose()?;
        let layout = Layout {
            table: merge("table", table, url.and_then(MysqlUrl::table_identifier), Identifier::trusted(DEFAULT_TABLE))?,
            notify: merge("notifications", self.release_notifications, url.and_then(MysqlUrl::notifications), true)?,
        };
        let create = merge("create", self.create_schema, url.and_then(MysqlUrl::create), true)?;
        Ok((layout, create))
    }
}

fn store(pool: MySqlPool, layout: Layout, create: bool) -> MysqlLockStore {
    MysqlLockStore::from_parts(pool, Arc::new(Statements::new(&layout)), Arc::new(layout), create)
}
