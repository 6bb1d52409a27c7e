//! The store's own error causes, carried as the cause of [`LockError::Store`](distlock_api::LockError::Store),
//! and the classification of driver errors the store retries.

use std::fmt;
use std::time::Duration;

/// The backend name reported by `LockStore::backend` and in `LockError::Store`.
pub(crate) const BACKEND: &str = "postgres";

/// The server answered, but not as a lock table of ours would.
#[derive(Debug)]
pub(crate) struct UnexpectedAnswer(pub(crate) String);

impl fmt::Display for UnexpectedAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected answer from PostgreSQL: {}", self.0)
    }
}

impl std::error::Error for UnexpectedAnswer {}

/// An acquisition statement ran longer than the purge horizon, so the fence it drew at
/// its start might be smaller than that of a purged row for the same key. The lease was
/// written but is not reported as held; the manager releases it with the same token.
#[derive(Debug)]
pub(crate) struct SlowAcquire {
    pub(crate) horizon: Duration,
}

impl fmt::Display for SlowAcquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the acquire statement ran longer than the purge horizon ({:?}); its fence cannot be trusted",
            self.horizon
        )
    }
}

impl std::error::Error for SlowAcquire {}

/// The lease table (or what it needs) is missing or unusable, and the store was told
/// not to create it.
#[derive(Debug)]
pub(crate) struct SchemaProblem(pub(crate) String);

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SchemaProblem {}

/// Whether `error` means the connection was dead before (or died while) the statement
/// ran, so that PostgreSQL cannot have committed it, except in the narrow case of a
/// backend that died between its commit and its answer. Such a statement is safe to run
/// again on another connection when running it twice is harmless.
///
/// - I/O errors: the socket was closed or reset (a backend terminated by
///   `pg_terminate_backend`, a server restart, a failover).
/// - SQLSTATE class 57P (`admin_shutdown`, `crash_shutdown`, `cannot_connect_now`): the
///   server's goodbye, read as the answer to the next statement on a dead connection.
/// - SQLSTATE class 08 (connection exception).
///
/// A pool timeout is *not* one: no connection could be had at all, so another attempt
/// would only wait again.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    distlock_sql::retry::is_connection_lost(error, |error| {
        error.code().is_some_and(|code| code.starts_with("57P") || code.starts_with("08"))
    })
}

/// Whether the server aborted the statement as a deadlock's victim (SQLSTATE `40P01`):
/// its transaction was rolled back, so nothing it did remains.
pub(crate) fn is_deadlock(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error) if error.code().as_deref() == Some("40P01"))
}

/// Why a group operation failed before it started: the objects of lock groups (the
/// holders and permits tables, the grant function) are missing or unusable, and the store
/// may not create them ([`create_schema(false)`](crate::PostgresLockStoreBuilder::create_schema),
/// `?create=false`).
///
/// It is the [`source`](std::error::Error::source) of the [`LockError::Store`](distlock_api::LockError::Store)
/// that every group operation of such a store returns until the objects exist; single
/// locks are not affected. [`sql`](Self::sql) is the script that creates them, to run as
/// the schema's owner (or call [`ensure_schema`](crate::PostgresLockStore::ensure_schema)
/// on a store that may create, e.g. connected with `?create=true`).
///
/// ```no_run
/// # async fn demo(store: distlock_postgres::PostgresLockStore, request: distlock_api::GroupRequest<'_>) {
/// use distlock_api::GroupLockStore;
/// use distlock_postgres::GroupSchemaMissing;
///
/// if let Err(err) = store.try_acquire_group(request).await {
///     let cause = std::error::Error::source(&err).and_then(|cause| cause.downcast_ref::<GroupSchemaMissing>());
///     if let Some(missing) = cause {
///         eprintln!("{missing}\n-- run as the owner:\n{}", missing.sql());
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct GroupSchemaMissing {
    pub(crate) missing: Vec<String>,
    pub(crate) statements: Vec<String>,
    /// Whether the store may create: then what is missing is something `CREATE … IF NOT
    /// EXISTS` does not fix (an object of another layout, a privilege).
    pub(crate) may_create: bool,
}

impl GroupSchemaMissing {
    /// What is missing or unusable, one entry per problem, e.g.
    /// `table "public"."distribute_lock_holders" does not exist`.
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    /// The statements that create the group objects (idempotent: `CREATE … IF NOT
    /// EXISTS`, `CREATE OR REPLACE FUNCTION`), separated by `;` and blank lines.
    pub fn sql(&self) -> String {
        self.statements.join(";\n\n") + ";\n"
    }
}

impl fmt::Display for GroupSchemaMissing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let missing = self.missing.join("; ");
        if self.may_create {
            return write!(
                f,
                "lock groups are not usable: {missing} (objects of that name exist but were not created by this \
                 version of distlock, or this role lacks privileges: grant them, or drop the objects so that the \
                 store creates them)"
            );
        }
        write!(
            f,
            "lock groups are not set up: {missing}; the store may not create them (create_schema is off): \
             run `GroupSchemaMissing::sql()` (the lock-group statements of `Statements::ddl`) as the \
             schema's owner, or call `ensure_schema` once on a store connected with `?create=true`"
        )
    }
}

impl std::error::Error for GroupSchemaMissing {}
