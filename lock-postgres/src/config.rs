//! Store configuration: validated SQL identifiers, the builder and pool settings.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::sql::Statements;
use crate::store::{PostgresLockStore, BACKEND};

/// The schema used unless [`PostgresLockStoreBuilder::schema`] says otherwise.
pub const DEFAULT_SCHEMA: &str = "public";
/// The lease table used unless [`PostgresLockStoreBuilder::table`] says otherwise.
pub const DEFAULT_TABLE: &str = "distlock_locks";
/// The fence sequence used unless [`PostgresLockStoreBuilder::sequence`] says otherwise.
pub const DEFAULT_SEQUENCE: &str = "distlock_fence_seq";
/// The `application_name` of connections opened by [`PostgresLockStore::connect`].
pub const DEFAULT_APPLICATION_NAME: &str = "distlock";
/// The pool size of [`PostgresLockStore::connect`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;
/// How long [`PostgresLockStore::connect`]'s pool waits for a connection (including
/// opening one) before an operation fails with [`LockError::Store`].
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A PostgreSQL identifier that matched `[A-Za-z_][A-Za-z0-9_]{0,62}`.
///
/// Only such names are ever spliced into SQL text, and always double-quoted, so a
/// configured name can neither inject SQL nor be silently case-folded or truncated by
/// the server (63 bytes is PostgreSQL's `NAMEDATALEN - 1`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Identifier(String);

impl Identifier {
    const MAX_LEN: usize = 63;

    /// Validates `name`; `what` ("schema", "table"…) goes into the error message.
    pub(crate) fn new(what: &str, name: &str) -> Result<Self, LockError> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && name.len() <= Self::MAX_LEN {
            Ok(Self(name.to_owned()))
        } else {
            Err(LockError::Config {
                message: format!(
                    "{what} name {name:?} is not a plain SQL identifier: expected 1 to {} characters \
                     matching [A-Za-z_][A-Za-z0-9_]*",
                    Self::MAX_LEN
                ),
            })
        }
    }

    /// One of this crate's constant default names (checked by a unit test).
    fn trusted(name: &'static str) -> Self {
        Self(name.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The identifier double-quoted, ready for SQL text.
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }
}

impl fmt::Debug for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Where the store keeps its state: validated schema, table and sequence names.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) schema: Identifier,
    pub(crate) table: Identifier,
    pub(crate) sequence: Identifier,
    pub(crate) unlogged: bool,
    /// Whether release sends `pg_notify` (and waiters `LISTEN`).
    pub(crate) notify: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            schema: Identifier::trusted(DEFAULT_SCHEMA),
            table: Identifier::trusted(DEFAULT_TABLE),
            sequence: Identifier::trusted(DEFAULT_SEQUENCE),
            unlogged: false,
            notify: true,
        }
    }
}

/// Configures a [`PostgresLockStore`]: where its table lives and, for
/// [`connect`](Self::connect), how its pool connects.
///
/// Names are validated by [`build`](Self::build) and [`connect`](Self::connect), before
/// any I/O.
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
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresLockStoreBuilder {
    schema: String,
    table: String,
    sequence: String,
    unlogged: bool,
    release_notifications: bool,
    application_name: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
}

impl Default for PostgresLockStoreBuilder {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            sequence: DEFAULT_SEQUENCE.to_owned(),
            unlogged: false,
            release_notifications: true,
            application_name: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }
}

impl PostgresLockStoreBuilder {
    /// A builder with the defaults: `public.distlock_locks`, sequence
    /// `public.distlock_fence_seq`, a logged table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The schema of the lease table and the fence sequence (default `public`).
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The lease table (default `distlock_locks`).
    #[must_use]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The sequence fences are drawn from (default `distlock_fence_seq`, in the same
    /// schema). Several tables may share one sequence; fences stay strictly increasing
    /// per key either way.
    #[must_use]
    pub fn sequence(mut self, sequence: impl Into<String>) -> Self {
        self.sequence = sequence.into();
        self
    }

    /// Whether [`ensure_schema`](PostgresLockStore::ensure_schema) creates the table
    /// `UNLOGGED` (default `false`): faster, because lock changes write no WAL, but a
    /// server crash empties the table (see the crate documentation). The fence sequence
    /// is always logged. Has no effect on a table that already exists.
    #[must_use]
    pub fn unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// Whether releases notify waiters with `pg_notify` and waiters `LISTEN` for them
    /// (default `true`; see "Release notifications" in the crate documentation). With
    /// `false`, release is the plain `UPDATE` and waiters poll every `retry_interval`:
    /// for write-heavy workloads that rarely wait, because PostgreSQL serialises the
    /// commits of all notifying transactions (so concurrent releases on a logged table no
    /// longer share WAL flushes). Every store on a table should agree, or waiters on a
    /// notifying store miss the releases of a silent one until their next poll.
    #[must_use]
    pub fn release_notifications(mut self, notify: bool) -> Self {
        self.release_notifications = notify;
        self
    }

    /// The `application_name` of connections opened by [`connect`](Self::connect)
    /// (default: the URL's, else `distlock`). Visible in `pg_stat_activity`.
    #[must_use]
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// The pool size of [`connect`](Self::connect) (default 8).
    #[must_use]
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// How long [`connect`](Self::connect)'s pool waits for a connection, including
    /// opening one, before an operation fails (default 5 s). This bounds how long any
    /// operation waits on an unreachable server before returning [`LockError::Store`].
    #[must_use]
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
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
        let layout = self.layout()?;
        Ok(PostgresLockStore::from_parts(pool, Arc::new(Statements::new(&layout)), Arc::new(layout)))
    }

    /// Opens a pool to `url` with this builder's settings, checks that one connection
    /// can be made, and builds the store. Call
    /// [`ensure_schema`](PostgresLockStore::ensure_schema) next unless the table is
    /// managed by migrations.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad name or an unparsable URL (before any I/O);
    /// [`LockError::Store`] (operation `"connect"`) when no connection could be made
    /// within the acquire timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-built pool.
    pub async fn connect(self, url: &str) -> Result<PostgresLockStore, LockError> {
        let layout = self.layout()?;
        let mut options = PgConnectOptions::from_str(url)
            .map_err(|error| LockError::Config { message: format!("unusable PostgreSQL URL: {error}") })?;
        match &self.application_name {
            Some(name) => options = options.application_name(name),
            None if options.get_application_name().is_none() => {
                options = options.application_name(DEFAULT_APPLICATION_NAME);
            }
            None => {}
        }
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections.max(1))
            .acquire_timeout(self.acquire_timeout)
            // Every operation is one statement whose failure is reported honestly; a ping
            // before each would add a round trip to every lock operation. A connection that
            // died (server restart, pg_terminate_backend) fails once and is discarded.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(|error| LockError::store(BACKEND, "connect", None, error))?;
        Ok(PostgresLockStore::from_parts(pool, Arc::new(Statements::new(&layout)), Arc::new(layout)))
    }

    fn layout(&self) -> Result<Layout, LockError> {
        Ok(Layout {
            schema: Identifier::new("schema", &self.schema)?,
            table: Identifier::new("table", &self.table)?,
            sequence: Identifier::new("sequence", &self.sequence)?,
            unlogged: self.unlogged,
            notify: self.release_notifications,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_follow_the_plain_pattern() {
        for good in ["a", "_", "public", "Locks_2", "_x9", &"n".repeat(63)] {
            let id = Identifier::new("table", good).unwrap();
            assert_eq!(id.quoted(), format!("\"{good}\""));
        }
        let too_long = "n".repeat(64);
        for bad in ["", "9a", "x; DROP TABLE y", "a\"b", "a-b", "a b", "ü", "a.b", "a'b", "a\0", too_long.as_str()] {
            let err = Identifier::new("table", bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn default_names_are_valid_identifiers() {
        let layout = PostgresLockStoreBuilder::new().layout().unwrap();
        let default = Layout::default();
        assert_eq!(layout.schema, default.schema);
        assert_eq!(layout.table, default.table);
        assert_eq!(layout.sequence, default.sequence);
        assert!(!default.unlogged);
    }

    #[test]
    fn config_errors_name_the_identifier() {
        let err = PostgresLockStoreBuilder::new().schema("a\"b").layout().unwrap_err();
        assert!(err.to_string().contains("schema name \"a\\\"b\""), "{err}");
    }
}
