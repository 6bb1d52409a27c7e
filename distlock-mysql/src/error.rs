//! The store's own error causes, carried as the cause of [`LockError::Store`](distlock_api::LockError::Store),
//! and the classification of driver errors the store retries.

use std::fmt;

/// The backend name reported by `LockStore::backend` and in `LockError::Store`.
pub(crate) const BACKEND: &str = "mysql";

/// The server answered, but not as a lock table of ours would.
#[derive(Debug)]
pub(crate) struct UnexpectedAnswer(pub(crate) String);

impl fmt::Display for UnexpectedAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected answer from MySQL: {}", self.0)
    }
}

impl std::error::Error for UnexpectedAnswer {}

/// Whether `error` means the connection was dead before (or died while) the statement
/// ran: the socket was closed or reset (a server restart, `KILL <id>`), or the server's
/// goodbye was read as the answer (1053 shutdown in progress, 1927 connection killed,
/// 4031 disconnected by the server for inactivity). Such a statement is run again on
/// another connection when running it twice is harmless. A pool timeout is not one.
pub(crate) fn is_connection_lost(error: &sqlx::Error) -> bool {
    distlock_sql::retry::is_connection_lost(error, |error| {
        error.code().is_some_and(|code| matches!(code.as_ref(), "08S01" | "08004" | "70100"))
            || error
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|error| matches!(error.number(), 1053 | 1927 | 4031 | 2006 | 2013))
    })
}

/// The server's error number of a statement it refused (`None` for other errors).
pub(crate) fn error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(error) => {
            error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(sqlx::mysql::MySqlDatabaseError::number)
        }
        _ => None,
    }
}

/// Whether the server rolled the statement's transaction back as a deadlock's victim
/// (1213) or after a lock wait timeout (1205): nothing it did remains.
pub(crate) fn is_deadlock(error: &sqlx::Error) -> bool {
    matches!(error_number(error), Some(1213 | 1205))
}

/// Whether `error` is the server refusing a new connection over one of its limits: 1040
/// (its `max_connections`), 1203 (its `max_user_connections`), or 1226 for a user's own
/// `MAX_USER_CONNECTIONS` or `MAX_CONNECTIONS_PER_HOUR` (1226 also names the per-hour
/// query and update limits, which a statement meets, not a connection).
pub(crate) fn is_refusal(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(error)
    if error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().is_some_and(|error| match error.number() {
        1040 | 1203 => true,
        1226 => error.message().contains("connections"),
        _ => false,
    }))
}
