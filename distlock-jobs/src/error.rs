//! What can be wrong with a job.

use std::time::Duration;

use distlock_api::LockError;

/// A job that cannot be scheduled, or a lock store that failed. Configuration errors are
/// raised before any I/O.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The cron expression does not parse.
    #[error("invalid schedule `{pattern}`: {reason}")]
    Schedule {
        /// The expression as given.
        pattern: String,
        /// What the cron parser said.
        reason: String,
    },
    /// The job's name is not usable in a lock key.
    #[error("invalid job name")]
    Name(#[source] LockError),
    /// `at_least` is not shorter than `at_most`, a duration is zero, or `late_start` is
    /// not shorter than `at_least`.
    #[error("invalid job durations: {0}")]
    Durations(String),
    /// The schedule has no firing after the given time (e.g. a year that has passed).
    #[error("the schedule `{pattern}` has no firing after {after:?}")]
    Exhausted {
        /// The expression.
        pattern: String,
        /// Since when none was found.
        after: Duration,
    },
    /// The lock store failed.
    #[error(transparent)]
    Lock(#[from] LockError),
}
