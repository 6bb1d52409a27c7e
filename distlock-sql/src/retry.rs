//! Running a statement again when that is harmless, and the driver errors that allow it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use sqlx::error::DatabaseError;

/// When a store runs a statement again: after a lost connection (once per connection
/// the pool may hold, so that a pool full of dead connections is drained) and after the
/// server rolled it back as a deadlock's victim (a few times).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// How often a statement runs again after a lost connection.
    pub lost_connections: u32,
    /// How often a statement runs again after the server rolled it back as a deadlock's
    /// victim (it did nothing, so running it again is the same as running it first).
    pub deadlocks: u32,
    /// Whether an error means the connection was dead before or while the statement ran.
    pub is_connection_lost: fn(&sqlx::Error) -> bool,
    /// Whether an error means the server rolled the statement's transaction back as a
    /// deadlock's victim.
    pub is_deadlock: fn(&sqlx::Error) -> bool,
}

impl Retry {
    /// Runs `statement` (a fresh future per call, each on a connection from the pool),
    /// again while it fails in one of the ways above and retries are left; `operation`
    /// names it in the `debug` log.
    ///
    /// # Errors
    ///
    /// The last attempt's error.
    pub async fn run<T, F, Fut>(self, operation: &str, mut statement: F) -> Result<T, sqlx::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let (mut retries, mut deadlocks) = (self.lost_connections, self.deadlocks);
        loop {
            match statement().await {
                Err(error) if retries > 0 && (self.is_connection_lost)(&error) => {
                    retries -= 1;
                    tracing::debug!(%error, operation, "lost a pooled connection; running the statement on another");
                }
                Err(error) if deadlocks > 0 && (self.is_deadlock)(&error) => {
                    deadlocks -= 1;
                    tracing::debug!(%error, operation, "the statement was a deadlock's victim; running it again");
                }
                other => return other,
            }
        }
    }
}

/// Whether `error` means the connection was dead before (or died while) the statement
/// ran: the socket was closed or reset, the driver's worker is gone, or the server's own
/// answer says so (`goodbye`, the database's error codes for a shutdown or a killed
/// connection). A pool timeout is *not* one: no connection could be had at all, so
/// another attempt would only wait again.
pub fn is_connection_lost(error: &sqlx::Error, goodbye: impl Fn(&dyn DatabaseError) -> bool) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(error) => goodbye(error.as_ref()),
        _ => false,
    }
}

/// Connecting did not finish within the configured time: the cause of a
/// [`LockError::Store`](distlock_api::LockError::Store) of operation `"connect"`.
#[derive(Debug)]
pub struct ConnectTimedOut {
    /// The builder setting that bounded the wait, e.g. `"connect timeout"`.
    pub setting: &'static str,
    /// Its value.
    pub timeout: Duration,
}

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no answer from the server within the {} ({:?})", self.setting, self.timeout)
    }
}

impl std::error::Error for ConnectTimedOut {}
