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
/// use distlock::{LockError, LockKey};
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
    /// HTTP integrations map it to 409 Conflict.
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
        reason: LossReason,
    },

    /// A lock group (or an owner id) is unusable: empty, a name twice, too many members,
    /// zero permits. Raised before any I/O.
    #[error("invalid lock group: {reason}")]
    InvalidGroup {
        /// What is wrong with it.
        reason: InvalidGroup,
    },

    /// A group released by its stamp was not held (any more): it was released already,
    /// or every hold expired. Nothing was changed.
    #[error("lock group with stamp {stamp} is not held: released already or expired")]
    GroupNotHeld {
        /// The group's stamp (fencing number), `0` on a store without fencing.
        stamp: u64,
    },

    /// A [`LeaseValue`](crate::LeaseValue) is too long or holds a NUL character. Raised
    /// before any I/O.
    #[error("invalid lease value: {reason}")]
    InvalidValue {
        /// What is wrong with it.
        reason: InvalidValue,
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

    /// The store does not offer this operation (e.g. a third-party store without
    /// [`LockStore::list`](crate::LockStore::list)).
    #[error("the {backend} store does not support `{operation}`")]
    Unsupported {
        /// The store's [`backend`](crate::LockStore::backend) name.
        backend: &'static str,
        /// The operation asked for.
        operation: &'static str,
    },

    /// The store failed: the server could not be reached, answered with an error, or
    /// answered something unexpected. The outcome of the operation is unknown; the
    /// manager never reports such an operation as acquired or released.
    ///
    /// Its `Display` names the backend, the operation and the key when there is one, e.g.
    /// ``redis store failed to acquire lock `order:42` ``; the driver's error is its
    /// [`source()`](StdError::source) (also [`LockError::cause`]), so error reporters
    /// (`anyhow`, `eyre`, [`LockError::report`]) print the chain once:
    /// ``redis store failed to acquire lock `order:42`: Connection refused (os error 111)``.
    #[error("{backend} store failed to {operation}{}", KeySuffix(key.as_deref()))]
    Store {
        /// The store's [`backend`](crate::LockStore::backend) name, e.g. `"redis"`.
        backend: &'static str,
        /// What was being done: `"acquire"`, `"release"`, `"extend"`, `"inspect"`,
        /// `"connect"`…
        operation: &'static str,
        /// The application's key (without the `lock:` namespace), when the operation
        /// concerned one key.
        key: Option<String>,
        /// The driver's error.
        #[source]
        cause: BoxError,
    },
}

/// `` lock `key` `` after the operation, when there is a key.
struct KeySuffix<'a>(Option<&'a str>);

impl std::fmt::Display for KeySuffix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(key) => write!(f, " lock `{key}`"),
            None => Ok(()),
        }
    }
}

/// An error and its sources on one line, `a: b: c`, skipping a source whose message the
/// previous one already contains (many drivers repeat their cause in their own message);
/// made by [`LockError::report`].
#[derive(Debug, Clone, Copy)]
pub struct ErrorReport<'a>(&'a (dyn StdError + 'static));

impl std::fmt::Display for ErrorReport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            let text = cause.to_string();
            if !text.is_empty() && !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown = text;
            }
            next = cause.source();
        }
        Ok(())
    }
}

impl LockError {
    /// Builds a [`LockError::Store`] for an operation on the application's `key`
    /// ([`StoreKey::lock_key`](crate::StoreKey::lock_key)), or on no key in particular
    /// (`None`: connecting, purging…).
    pub fn store(
        backend: &'static str,
        operation: &'static str,
        key: Option<&str>,
        cause: impl Into<BoxError>,
    ) -> Self {
        Self::Store { backend, operation, key: key.map(str::to_owned), cause: cause.into() }
    }

    /// The driver's error behind a [`LockError::Store`] (its
    /// [`source()`](StdError::source), with `Send + Sync`), for code that wants to inspect or
    /// downcast it.
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        match self {
            Self::Store { cause, .. } => Some(&**cause),
            _ => None,
        }
    }

    /// The error and its causes on one line, `a: b: c`, skipping a cause whose message
    /// the one before already contains (as many drivers repeat theirs): what to log when
    /// no error reporter walks the chain.
    ///
    /// ```
    /// use distlock_api::LockError;
    ///
    /// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    /// let err = LockError::store("redis", "acquire", Some("order:42"), refused);
    /// assert_eq!(err.to_string(), "redis store failed to acquire lock `order:42`");
    /// assert_eq!(err.report().to_string(), "redis store failed to acquire lock `order:42`: connection refused");
    /// ```
    pub fn report(&self) -> ErrorReport<'_> {
        ErrorReport(self)
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
    /// A [`KeyPattern`](crate::KeyPattern) ends in a lone `\`.
    #[error("the pattern ends in a lone `\\` (write `\\\\` for a literal backslash)")]
    DanglingEscape,
}

/// Why a [`LockGroup`](crate::LockGroup) or [`OwnerId`](crate::OwnerId) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidGroup {
    /// A group needs at least one member.
    #[error("the group has no members")]
    Empty,
    /// A name appears twice.
    #[error("`{key}` appears more than once in the group")]
    DuplicateName {
        /// The name.
        key: String,
    },
    /// More members than the store (or any store) takes at once.
    #[error("the group has {len} members, at most {max} are allowed")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A mode with zero permits could never be granted.
    #[error("zero permits for `{key}`: a mode needs at least one")]
    ZeroPermits {
        /// The name.
        key: String,
    },
    /// An owner id must be `app@instance`, each part non-empty, without `@`, whitespace or
    /// control characters, at most 128 bytes.
    #[error("an owner id must be `app@instance` (non-empty parts without `@`, whitespace or control characters, at most 128 bytes)")]
    Owner,
    /// [`OwnerId::from_env`](crate::OwnerId::from_env) found no instance name.
    #[error("no instance name for the owner id: set {var} to a name of this instance that stays the same across its restarts (a pod name, a replica index)")]
    OwnerInstanceUnset {
        /// The environment variable read.
        var: &'static str,
    },
}

/// Why a [`LeaseValue`](crate::LeaseValue) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidValue {
    /// The value is longer than allowed.
    #[error("the value is {len} bytes long, at most {max} are allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The value contains a NUL character.
    #[error("the value contains a NUL character at byte {index}")]
    Nul {
        /// Byte offset of the NUL.
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
    /// A renewal interval must be shorter than the TTL minus the loss margin (otherwise
    /// the loss would be signalled before the first renewal).
    #[error(
        "the renewal interval {interval:?} must be shorter than the TTL {ttl:?} minus the loss margin {loss_margin:?}"
    )]
    RenewInterval {
        /// The interval given.
        interval: Duration,
        /// The TTL.
        ttl: Duration,
        /// The loss margin.
        loss_margin: Duration,
    },
    /// The renewal interval, given or computed for the lease, is shorter than the accepted
    /// minimum ([`Renewal::MIN_INTERVAL`](crate::Renewal::MIN_INTERVAL)): each renewal is
    /// a round trip to the store.
    #[error("the renewal interval {interval:?} is shorter than the minimum {min:?}")]
    RenewIntervalTooShort {
        /// The interval given, or computed from the TTL and the loss margin.
        interval: Duration,
        /// The minimum.
        min: Duration,
    },
    /// The loss margin must be shorter than the TTL.
    #[error("the loss margin {margin:?} must be shorter than the TTL {ttl:?}")]
    LossMargin {
        /// The margin given.
        margin: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// The retry interval is longer than the accepted maximum.
    #[error("the retry interval {interval:?} is longer than the maximum {max:?}")]
    RetryIntervalTooLong {
        /// The interval given.
        interval: Duration,
        /// The maximum.
        max: Duration,
    },
    /// Waiting with a zero retry interval would be a busy loop.
    #[error("the retry interval must be greater than zero when waiting")]
    ZeroRetryInterval,
}

/// Why a lease was lost (see [`DistributedLock::lost`](crate::DistributedLock::lost)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The store answered that the token no longer holds the key: the lease expired and
    /// perhaps was taken over, or an administrator released it.
    NotHeld,
    /// No renewal was confirmed in time: the store could not be reached, or the lock is
    /// not renewed. Signalled the [loss margin](crate::LockOptions::loss_margin) before
    /// the moment the store could free the lease — computed on a monotonic clock from
    /// when the last confirmed acquire or extend was *sent*, less an allowance for clock
    /// drift (1 % of the TTL + 2 ms) — so the holder has that long to stop before
    /// another owner can take the key.
    DeadlinePassed,
    /// [`Renewal::MAX_CONSECUTIVE_FAILURES`](crate::Renewal::MAX_CONSECUTIVE_FAILURES)
    /// renewals in a row failed (the store answered with an error or not at all) and
    /// renewal stopped, before the deadline of [`DeadlinePassed`](Self::DeadlinePassed):
    /// the store may still hold the lease until then, but it is no longer renewed.
    RenewalFailed,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotHeld => "the store no longer holds the lease for this token",
            Self::DeadlinePassed => "the lease's deadline passed without a confirmed renewal",
            Self::RenewalFailed => "renewal stopped after failing several times in a row",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_carries_its_cause_as_its_source() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let err = LockError::store("redis", "acquire", Some("a"), cause);
        assert_eq!(err.to_string(), "redis store failed to acquire lock `a`");
        assert_eq!(err.source().map(ToString::to_string).as_deref(), Some("connection refused"));
        assert_eq!(err.cause().map(ToString::to_string).as_deref(), Some("connection refused"));
        assert_eq!(err.report().to_string(), "redis store failed to acquire lock `a`: connection refused");
        let err = LockError::store("postgres", "connect", None, "refused");
        assert_eq!(err.report().to_string(), "postgres store failed to connect: refused");
    }

    #[test]
    fn cause_chain_skips_repeated_messages() {
        #[derive(Debug)]
        struct Outer(std::io::Error, &'static str);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.1)
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let inner = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let repeating = Outer(inner(), "io error: refused");
        assert_eq!(ErrorReport(&repeating).to_string(), "io error: refused");
        let wrapping = Outer(inner(), "pool failed");
        assert_eq!(ErrorReport(&wrapping).to_string(), "pool failed: refused");
    }
}
