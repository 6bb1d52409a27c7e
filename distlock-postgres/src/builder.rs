//! The builder: knobs, their validation, and connecting.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockError;
use distlock_sql::connect::{check_timeouts, first_connection, merge, pool_options};
use sqlx::postgres::{PgConnection, PgPool};

use crate::config::{
    Identifier, Layout, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SCHEMA, DEFAULT_SEQUENCE, DEFAULT_TABLE, MAX_ACQUIRE_TIMEOUT,
};
use crate::error::BACKEND;
use crate::sql::Statements;
use crate::store::PostgresLockStore;
use crate::url::PostgresUrl;

impl PostgresLockStore {
    /// Connects to `url` with the defaults (`public.distribute_lock`, a pool of 8
    /// connections named `distlock`, 5 s acquire and connect timeouts), or with the layout the URL
    /// names (`?schema=`, `?table=`, `?sequence=`, `?unlogged=`, `?create=`,
    /// `?notifications=`; see [`PostgresUrl`]). Call
    /// [`ensure_schema`](Self::ensure_schema) next unless migrations create the table.
    ///
    /// Use [`builder`](Self::builder) for pool settings.
    ///
    /// # Errors
    ///
    /// As [`PostgresLockStoreBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// A builder for a store with another schema, table, sequence, an `UNLOGGED` table,
    /// or other pool settings.
    pub fn builder() -> PostgresLockStoreBuilder {
        PostgresLockStoreBuilder::new()
    }
}

/// Configures a [`PostgresLockStore`]: where its table lives and, for
/// [`connect`](Self::connect), how its pool connects.
///
/// Names are validated by [`build`](Self::build) and [`connect`](Self::connect), before
/// any I/O.
///
/// # Builder settings and URL parameters
///
/// [`connect`](Self::connect) also reads the layout parameters of its URL (see
/// [`PostgresUrl`]). A setting made on the builder and the same parameter in the URL must
/// agree: when they differ, `connect` fails with [`LockError::Config`] naming the
/// parameter, so that a deployment's URL and the application's code can never silently
/// point at two different tables. A setting made in only one place is used; neither
/// means the default.
///
/// ```
/// use distlock_postgres::PostgresLockStore;
/// use distlock_postgres::sqlx::postgres::PgPoolOptions;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock_api::LockError> {
/// // A lazy pool does no I/O until the first query.
/// let pool = PgPoolOptions::new().connect_lazy("postgres://app@db.internal/app").expect("url");
/// let store = PostgresLockStore::builder().schema("locks").table("leases").unlogged(true).build(pool)?;
/// assert_eq!(store.table_name(), "\"locks\".\"leases\"");
///
/// let err = PostgresLockStore::builder().table("x; DROP TABLE y").build(store.pool().clone()).unwrap_err();
/// assert!(matches!(err, distlock_api::LockError::Config { .. }), "{err}");
///
/// // The URL and the builder disagree: refused before any I/O.
/// let err = PostgresLockStore::builder().table("leases").connect("postgres://db.internal/app?table=other").await;
/// assert!(err.unwrap_err().to_string().contains("`table`"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresLockStoreBuilder {
    schema: Option<String>,
    table: Option<String>,
    sequence: Option<String>,
    unlogged: Option<bool>,
    release_notifications: Option<bool>,
    create_schema: Option<bool>,
    application_name: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
    connect_timeout: Duration,
}

impl Default for PostgresLockStoreBuilder {
    fn default() -> Self {
        Self {
            schema: None,
            table: None,
            sequence: None,
            unlogged: None,
            release_notifications: None,
            create_schema: None,
            application_name: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl PostgresLockStoreBuilder {
    /// A builder with the defaults: `public.distribute_lock`, sequence
    /// `public.distlock_fence_seq`, a logged table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The schema of the lease table and the fence sequence (default `public`; URL
    /// parameter `schema`).
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The lease table (default `distribute_lock`; URL parameter `table`).
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// The sequence fences are drawn from (default `distlock_fence_seq`, in the same
    /// schema; URL parameter `sequence`). Several tables may share one sequence; fences
    /// stay strictly increasing per key either way.
    #[must_use]
    pub fn sequence(mut self, sequence: impl Into<String>) -> Self {
        self.sequence = Some(sequence.into());
        self
    }

    /// Whether [`ensure_schema`](PostgresLockStore::ensure_schema) creates the table
    /// `UNLOGGED` (default `false`; URL parameter `unlogged`): faster, because lock
    /// changes write no WAL, but a server crash empties the table (see the crate
    /// documentation). The fence sequence is always logged. Has no effect on a table that
    /// already exists.
    #[must_use]
    pub fn unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = Some(unlogged);
        self
    }

    /// Whether releases notify waiters with `pg_notify` and waiters `LISTEN` for them
    /// (default `true`; URL parameter `notifications`; see "Release notifications" in
    /// the crate documentation). With `false`, release is the plain `UPDATE` and waiters
    /// poll every `retry_interval`: for write-heavy workloads that rarely wait, because
    /// PostgreSQL serialises the commits of all notifying transactions (so concurrent
    /// releases on a logged table no longer share WAL flushes). Every store on a table
    /// should agree, or waiters on a notifying store miss the releases of a silent one
    /// until their next poll.
    #[must_use]
    pub fn release_notifications(mut self, notify: bool) -> Self {
        self.release_notifications = Some(notify);
        self
    }

    /// Whether the store may create its schema, sequence and table (default `true`; URL
    /// parameter `create`). With `false` — for a role that may not run DDL, where a DBA
    /// created the table from [`Statements::ddl`] —
    /// [`ensure_schema`](PostgresLockStore::ensure_schema) and [`connect`](Self::connect)
    /// only check that the schema, the sequence and the table exist with the columns and
    /// privileges the store needs, and fail naming what is missing.
    #[must_use]
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = Some(create);
        self
    }

    /// The `application_name` of connections opened by [`connect`](Self::connect)
    /// (default: the URL's `application_name`, else `distlock`; this setting wins over
    /// the URL's). Visible in `pg_stat_activity`.
    #[must_use]
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// The pool size of [`connect`](Self::connect) (default 8; 0 counts as 1).
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// How long the pool of [`connect`](Self::connect) waits for a connection, including
    /// opening one, before an operation fails (default 5 s; from 1 ms to
    /// [`MAX_ACQUIRE_TIMEOUT`](crate::MAX_ACQUIRE_TIMEOUT), checked by `connect`). This
    /// bounds how long any operation waits on an unreachable server before returning
    /// [`LockError::Store`].
    #[must_use]
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for the server's first answer (default
    /// 5 s; from 1 ms to [`MAX_ACQUIRE_TIMEOUT`](crate::MAX_ACQUIRE_TIMEOUT), checked by
    /// `connect`).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Builds a store over an existing pool. Does no I/O.
    ///
    /// The pool's own settings (size, timeouts, `application_name`) are used as they are.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when a schema, table or sequence name is not a plain
    /// identifier (`[A-Za-z_][A-Za-z0-9_]{0,62}`).
    pub fn build(self, pool: PgPool) -> Result<PostgresLockStore, LockError> {
        let (layout, create) = self.settings(None)?;
        Ok(store(pool, layout, create))
    }

    /// Connects to `url` with this builder's settings and builds the store: checks the
    /// URL and every setting (before any I/O), opens one connection to see that the
    /// server answers and accepts the credentials, and, with
    /// [`create_schema(false)`](Self::create_schema), checks that the table is there and
    /// usable. Call [`ensure_schema`](PostgresLockStore::ensure_schema) next unless the
    /// table is managed by migrations.
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`] (before any I/O) for a URL that is not `postgres://` or
    ///   `postgresql://`, an unknown, repeated or malformed URL parameter, a bad name, a
    ///   URL parameter that contradicts a builder setting, or a timeout out of range. The message names the parameter and never repeats the URL.
    /// - [`LockError::Store`] (operation `"connect"`) with the server's or the network's
    ///   own message: connection refused (at once, not after a timeout), a
    ///   database or role that does not exist, a wrong password, no answer within the
    ///   connect timeout, or (with `create_schema(false)`) what is missing from the layout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(self, url: &str) -> Result<PostgresLockStore, LockError> {
        let url = PostgresUrl::parse(url)?;
        let (layout, create) = self.settings(Some(&url))?;
        let timeouts = [("acquire_timeout", self.acquire_timeout), ("connect_timeout", self.connect_timeout)];
        check_timeouts(&timeouts, MAX_ACQUIRE_TIMEOUT)?;
        let mut options = url.connect_options().clone();
        match &self.application_name {
            Some(name) => options = options.application_name(name),
            None if options.get_application_name().is_none() => {
                options = options.application_name(DEFAULT_APPLICATION_NAME);
            }
            None => {}
        }
        let address = options.get_socket().is_none().then(|| (options.get_host(), options.get_port()));
        first_connection::<PgConnection>(BACKEND, &options, address, "connect timeout", self.connect_timeout).await?;
        let pool = pool_options(self.max_connections, self.acquire_timeout).connect_lazy_with(options);
        let store = store(pool, layout, create);
        if !create {
            store.check_schema("connect").await?;
        }
        Ok(store)
    }

    /// The layout and `create_schema` from this builder's settings, merged with `url`'s
    /// parameters (which must agree with settings made on the builder).
    fn settings(&self, url: Option<&PostgresUrl>) -> Result<(Layout, bool), LockError> {
        let name = |what: &str, value: &Option<String>| value.as_deref().map(|v| Identifier::new(what, v)).transpose();
        let schema = name("schema", &self.schema)?;
        let table = name("table", &self.table)?;
        let sequence = name("sequence", &self.sequence)?;
        let from_url =
            |f: fn(&PostgresUrl) -> Option<&str>| url.and_then(f).map(|v| Identifier::new("name", v)).transpose();
        let layout = Layout {
            schema: merge("schema", schema, from_url(PostgresUrl::schema)?, Identifier::trusted(DEFAULT_SCHEMA))?,
            table: merge("table", table, from_url(PostgresUrl::table)?, Identifier::trusted(DEFAULT_TABLE))?,
            sequence: merge(
                "sequence",
                sequence,
                from_url(PostgresUrl::sequence)?,
                Identifier::trusted(DEFAULT_SEQUENCE),
            )?,
            unlogged: merge("unlogged", self.unlogged, url.and_then(PostgresUrl::unlogged), false)?,
            notify: merge("notifications", self.release_notifications, url.and_then(PostgresUrl::notifications), true)?,
        };
        let create = merge("create", self.create_schema, url.and_then(PostgresUrl::create), true)?;
        Ok((layout, create))
    }
}

fn store(pool: PgPool, layout: Layout, create: bool) -> PostgresLockStore {
    PostgresLockStore::from_parts(pool, Arc::new(Statements::new(&layout)), Arc::new(layout), create)
}
