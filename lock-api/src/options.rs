//! Lease durations and acquisition options.

use std::time::Duration;

use crate::error::{InvalidOptions, LockError};

/// A validated lease duration, in whole milliseconds.
///
/// A TTL is required (seed 000, constraint 2: no lock without expiry). It must be greater
/// than zero and at most [`Ttl::MAX`]; a sub-millisecond or fractional TTL is rounded
/// **up** to the next whole millisecond, never truncated to 0 (which some servers read as
/// "no expiry").
///
/// ```
/// use std::time::Duration;
/// use distlock_api::Ttl;
///
/// assert_eq!(Ttl::new(Duration::from_micros(1))?.as_millis(), 1);
/// assert_eq!(Ttl::new(Duration::from_micros(1_500))?.as_millis(), 2);
/// assert!(Ttl::new(Duration::ZERO).is_err());
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    /// The longest lease accepted: 365 days. Longer values are almost certainly a unit
    /// mistake and would overflow some servers' and clocks' arithmetic.
    pub const MAX: Duration = Duration::from_secs(365 * 24 * 60 * 60);

    /// Validates `ttl` and rounds it up to whole milliseconds.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] when `ttl` is zero or longer than [`Ttl::MAX`].
    pub fn new(ttl: Duration) -> Result<Self, LockError> {
        if ttl.is_zero() {
            return Err(LockError::InvalidOptions { reason: InvalidOptions::ZeroTtl });
        }
        if ttl > Self::MAX {
            return Err(LockError::InvalidOptions { reason: InvalidOptions::TtlTooLong { ttl, max: Self::MAX } });
        }
        Ok(Self(ceil_millis(ttl)))
    }

    /// The lease in whole milliseconds (at least 1), as sent to servers (`PX`).
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// The lease as a [`Duration`] (a whole number of milliseconds).
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

fn ceil_millis(d: Duration) -> u64 {
    let whole = d.as_secs() * 1_000 + u64::from(d.subsec_millis());
    if Duration::from_millis(whole) == d {
        whole
    } else {
        whole + 1
    }
}

/// How to acquire a lock: lease length, how long to wait, and how often to retry.
///
/// The defaults are seed 000's: `wait` = 0 (try once), `retry_interval` = 50 ms. The TTL
/// has no default: every lock expires.
///
/// ```
/// use std::time::Duration;
/// use distlock_api::LockOptions;
///
/// let options = LockOptions::new(Duration::from_secs(15))
///     .wait(Duration::from_secs(2))
///     .retry_interval(Duration::from_millis(20));
/// assert_eq!(options.validate()?.ttl.as_millis(), 15_000);
/// # Ok::<(), distlock_api::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// The lease: how long the lock lives unless released or extended.
    pub ttl: Duration,
    /// How long to keep trying when the lock is held; zero tries exactly once.
    pub wait: Duration,
    /// The longest pause between two attempts while waiting. A waiter may wake sooner
    /// when the store signals a release, and the last attempt happens at the deadline.
    pub retry_interval: Duration,
    /// Whether the lease is renewed in the background while the handle lives.
    pub renewal: Renewal,
}

/// Automatic lease renewal (the "watchdog") for a held lock.
///
/// With renewal on, a background task extends the lease (token-checked) every interval
/// while the [`DistributedLock`](crate::DistributedLock) lives, so jobs of unknown length
/// keep their lock with a short TTL: if the process dies, the lock is free one TTL later.
/// Renewal stops on release, on drop, and once the lease is lost; transient store errors
/// are retried while the lease is still valid; a lease found taken is never silently
/// re-acquired. See [`DistributedLock::lost`](crate::DistributedLock::lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Renewal {
    /// No renewal: the lease ends after its TTL unless extended by hand (seed 000 v1).
    #[default]
    Off,
    /// Renew every TTL / 3.
    Auto,
    /// Renew at this interval, which must be shorter than the TTL.
    Every(Duration),
}

impl LockOptions {
    /// Seed 000's default pause between attempts: 50 ms.
    pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(50);

    /// The longest `wait` accepted (same bound as [`Ttl::MAX`]).
    pub const MAX_WAIT: Duration = Ttl::MAX;

    /// Options with the given lease, no waiting and a 50 ms retry interval.
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, wait: Duration::ZERO, retry_interval: Self::DEFAULT_RETRY_INTERVAL, renewal: Renewal::Off }
    }

    /// Sets how long to keep trying when the lock is held.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the longest pause between two attempts.
    #[must_use]
    pub fn retry_interval(mut self, retry_interval: Duration) -> Self {
        self.retry_interval = retry_interval;
        self
    }

    /// Renews the lease automatically every TTL / 3 while the handle lives.
    #[must_use]
    pub fn auto_renew(mut self) -> Self {
        self.renewal = Renewal::Auto;
        self
    }

    /// Renews the lease automatically every `interval` (shorter than the TTL) while the
    /// handle lives.
    #[must_use]
    pub fn renew_every(mut self, interval: Duration) -> Self {
        self.renewal = Renewal::Every(interval);
        self
    }

    /// Checks every field and returns the validated form the manager works with.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a zero or too long TTL, a `wait` longer than
    /// [`LockOptions::MAX_WAIT`], a zero `retry_interval` while `wait` > 0, or a renewal
    /// interval that is zero or not shorter than the TTL.
    pub fn validate(&self) -> Result<ValidOptions, LockError> {
        let ttl = Ttl::new(self.ttl)?;
        if self.wait > Self::MAX_WAIT {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::WaitTooLong { wait: self.wait, max: Self::MAX_WAIT },
            });
        }
        if !self.wait.is_zero() && self.retry_interval.is_zero() {
            return Err(LockError::InvalidOptions { reason: InvalidOptions::ZeroRetryInterval });
        }
        let renew_every = match self.renewal {
            Renewal::Off => None,
            Renewal::Auto => Some((ttl.as_duration() / 3).max(Duration::from_millis(1))),
            Renewal::Every(every) if every.is_zero() || every >= ttl.as_duration() => {
                return Err(LockError::InvalidOptions {
                    reason: InvalidOptions::RenewInterval { interval: every, ttl: ttl.as_duration() },
                });
            }
            Renewal::Every(every) => Some(every),
        };
        Ok(ValidOptions { ttl, wait: self.wait, retry_interval: self.retry_interval, renew_every })
    }
}

/// [`LockOptions`] that passed [`LockOptions::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidOptions {
    /// The validated lease.
    pub ttl: Ttl,
    /// How long to keep trying; zero tries once.
    pub wait: Duration,
    /// The longest pause between attempts (> 0 whenever `wait` > 0).
    pub retry_interval: Duration,
    /// The renewal interval, when the lease is renewed automatically (< the TTL).
    pub renew_every: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_and_rejects_extremes() {
        assert_eq!(Ttl::new(Duration::from_nanos(1)).unwrap().as_millis(), 1);
        assert_eq!(Ttl::new(Duration::from_millis(250)).unwrap().as_millis(), 250);
        assert_eq!(Ttl::new(Duration::new(1, 1)).unwrap().as_millis(), 1_001);
        assert_eq!(Ttl::new(Ttl::MAX).unwrap().as_duration(), Ttl::MAX);
        assert!(matches!(Ttl::new(Duration::ZERO), Err(LockError::InvalidOptions { reason: InvalidOptions::ZeroTtl })));
        assert!(matches!(
            Ttl::new(Duration::MAX),
            Err(LockError::InvalidOptions { reason: InvalidOptions::TtlTooLong { .. } })
        ));
    }

    #[test]
    fn options_defaults_and_checks() {
        let options = LockOptions::new(Duration::from_secs(1));
        assert_eq!(options.wait, Duration::ZERO);
        assert_eq!(options.retry_interval, Duration::from_millis(50));
        assert!(options.retry_interval(Duration::ZERO).validate().is_ok(), "no wait, no retry needed");
        let err = options.wait(Duration::from_secs(1)).retry_interval(Duration::ZERO).validate().unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::ZeroRetryInterval }), "{err}");
        assert_eq!(options.auto_renew().validate().unwrap().renew_every, Some(Duration::from_secs(1) / 3));
        assert_eq!(
            options.renew_every(Duration::from_millis(10)).validate().unwrap().renew_every,
            Some(Duration::from_millis(10))
        );
        for bad in [Duration::ZERO, Duration::from_secs(1), Duration::from_secs(2)] {
            let err = options.renew_every(bad).validate().unwrap_err();
            assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RenewInterval { .. } }), "{err}");
        }
        let err = options.wait(Duration::MAX).validate().unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::WaitTooLong { .. } }), "{err}");
    }
}
