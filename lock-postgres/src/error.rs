//! The store's own error causes, carried as the cause of [`LockError::Store`](distlock_api::LockError::Store).

use std::fmt;

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
/// its start might be smaller than that of a purged row for the same key (see
/// [`sql`](crate::sql)). The lease was written but is not reported as held; the manager
/// releases it with the same token.
#[derive(Debug)]
pub(crate) struct SlowAcquire;

impl fmt::Display for SlowAcquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the acquire statement ran longer than the purge horizon ({:?}); its fence cannot be trusted",
            crate::MIN_PURGE_HORIZON
        )
    }
}

impl std::error::Error for SlowAcquire {}
