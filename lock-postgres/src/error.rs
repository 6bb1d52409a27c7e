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

/// Connecting did not finish within the configured time.
#[derive(Debug)]
pub(crate) struct ConnectTimedOut(pub(crate) Duration);

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no answer from the server within the acquire timeout ({:?})", self.0)
    }
}

impl std::error::Error for ConnectTimedOut {}

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
    match error {
        sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(error) => {
            error.code().is_some_and(|code| code.starts_with("57P") || code.starts_with("08"))
        }
        _ => false,
    }
}
