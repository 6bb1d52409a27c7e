//! The one error type of the distlock family.

use std::error::Error as StdError;
use std::time::Duration;

/// A boxed driver error carried by [`LockError::Store`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong when taking, keeping or releasing a lock.
///
/// Match on variants, not on messages:
///
/// ```
/// use distlock_api::{LockError, LockKey};
///
/// let err = LockKey::new("").unwrap_err();
/// assert!(matches!(err, LockError::InvalidKey { .. }), "{err}");
/// ```
///
/// No variant's `Display` contains a lock token. A store failure names the backend, the
/// operation and the key; the driver's error is its [`source()`](StdError::source), not
/// part of the message, so reporters do not print it twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and the wait (if any) ran out.
    ///
    /// Seed 000's `LockNotAcquiredException`; HTTP integrations map it to 409 Conflict.
    #[error("lock `{key}` not acquired: it is held by another owner")]
    NotAcquired {
        /// The application's key (without the `lock:` namespace).
        key: String,
    },

    /// The key is empty, too long or contains a control character.
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// What is wrong with it.
        reason: InvalidKey,
    },

    /// A TTL, wait or retry interval is out of range.
    #[error("invalid lock options: {reason}")]
    InvalidOptions {
        /// What is wrong with them.
        reason: InvalidOptions,
    },

    /// The lease was lost while the lock was in use (see
    /// [`DistributedLock::lost`](crate::DistributedLock::lost)): `with_lock` with renewal
    /// stopped the block rather than let it run on unprotected.
    #[error("lease of lock `{key}` lost: {reason}")]
    LeaseLost {
        /// The application's key.
        key: String,
        /// How it was lost.
        reason: crate::lease::LossReason,
    },

    /// A token given as text is not a hyphenated UUID v4.
    #[error("invalid lock token: expected a 36-character UUID v4")]
    InvalidToken,

    /// Store configuration or a connection URL is unusable (unknown scheme, feature not
    /// enabled, bad identifier…). Raised before any I/O.
    #[error("invalid store configuration: {message}")]
    Config {
        /// What is wrong, in words.
        message: String,
    },

    /// The store failed: the server could not be reached, answered with an error, or
    /// answered something unexpected. The outcome of the operation is unknown; the
    /// manager never reports such an operation as acquired or released.
    #[error("{backend} store failed to {operation} lock `{key}`")]
    Store {
        /// The store's [`backend`](crate::LockStore::backend) name, e.g. `"redis"`.
        backend: &'static str,
        /// What was being done: `"acquire"`, `"release"`, `"extend"`, `"inspect"`…
        operation: &'static str,
        /// The key concerned (as the store saw it, namespace included), or `"-"`.
        key: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

impl LockError {
    /// Builds a [`LockError::Store`].
    pub fn store(
        backend: &'static str,
        operation: &'static str,
        key: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Store { backend, operation, key: key.into(), source: source.into() }
    }

    /// Whether this error means "the lock is held by someone else".
    pub fn is_not_acquired(&self) -> bool {
        matches!(self, Self::NotAcquired { .. })
    }
}

/// Why a [`LockKey`](crate::LockKey) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// The key is the empty string.
    #[error("the key is empty")]
    Empty,
    /// The key is longer than allowed.
    #[error("the key is {len} bytes long, at most {max} are allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The key contains NUL or another control character.
    #[error("the key contains a control character at byte {index}")]
    ControlCharacter {
        /// Byte offset of the first offending character.
        index: usize,
    },
}

/// Why [`LockOptions`](crate::LockOptions) were rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOptions {
    /// A lease of zero would never hold (or, on some servers, never expire).
    #[error("the TTL must be greater than zero")]
    ZeroTtl,
    /// The lease is longer than the accepted maximum.
    #[error("the TTL {ttl:?} is longer than the maximum {max:?}")]
    TtlTooLong {
        /// The TTL given.
        ttl: Duration,
        /// The maximum.
        max: Duration,
    },
    /// The wait is longer than the accepted maximum.
    #[error("the wait {wait:?} is longer than the maximum {max:?}")]
    WaitTooLong {
        /// The wait given.
        wait: Duration,
        /// The maximum.
        max: Duration,
    },
    /// A renewal interval must be greater than zero and shorter than the TTL.
    #[error("the renewal interval {interval:?} must be greater than zero and shorter than the TTL {ttl:?}")]
    RenewInterval {
        /// The interval given.
        interval: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// Waiting with a zero retry interval would be a busy loop.
    #[error("the retry interval must be greater than zero when wait > 0")]
    ZeroRetryInterval,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_error_keeps_the_cause_out_of_the_message() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = LockError::store("redis", "acquire", "lock:a", cause);
        assert_eq!(err.to_string(), "redis store failed to acquire lock `lock:a`");
        assert_eq!(err.source().map(ToString::to_string).as_deref(), Some("refused"));
    }
}
