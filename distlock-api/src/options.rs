//! Lease durations and acquisition options.

use std::time::Duration;

use crate::error::{InvalidOptions, LockError};

/// A validated lease duration, in whole milliseconds.
///
/// A TTL is required: no lock lives without expiry. It must be greater
/// than zero and at most [`Ttl::MAX`]; a sub-millisecond or fractional TTL is rounded
/// **up** to the next whole millisecond, never truncated to 0 (which some servers read as
/// "no expiry").
///
/// ```
/// use std::time::Duration;
/// use distlock::Ttl;
///
/// assert_eq!(Ttl::new(Duration::from_micros(1))?.as_millis(), 1);
/// assert_eq!(Ttl::new(Duration::from_micros(1_500))?.as_millis(), 2);
/// assert!(Ttl::new(Duration::ZERO).is_err());
/// # Ok::<(), distlock::LockError>(())
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

/// How to acquire and keep a lock, beyond its key and TTL: how long to wait, how often
/// to retry, whether to renew the lease, and how early to warn of its loss.
///
/// The lock calls take the key and the TTL; options are for everything else, with the
/// `_opts` form of each call ([`LockManager::try_lock_opts`](crate::LockManager::try_lock_opts),
/// [`lock_opts`](crate::LockManager::lock_opts),
/// [`with_lock_opts`](crate::LockManager::with_lock_opts)). The defaults:
///
/// | setting | default |
/// |---|---|
/// | [`wait`](Self::wait) | unset: `lock` waits until it gets the lock; `try_lock` and `with_lock` try once |
/// | [`retry_interval`](Self::retry_interval) | 50 ms |
/// | [`renewal`](Self::auto_renew) | off; [`auto_renew`](Self::auto_renew) renews every `max(1 s, min(10 s, TTL / 3))` |
/// | [`loss_margin`](Self::loss_margin) | a fifth of the TTL |
/// | [`fairness`](Self::barging) | [`Fairness::Fair`]: waiters are served in arrival order where the store keeps a queue |
///
/// ```
/// use std::time::Duration;
/// use distlock::LockOptions;
///
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(2))
///     .retry_interval(Duration::from_millis(20))
///     .auto_renew();
/// let valid = options.validate(Duration::from_secs(15))?;
/// assert_eq!(valid.ttl.as_millis(), 15_000);
/// assert_eq!(valid.loss_margin, Duration::from_secs(3));
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// How long to keep trying while another owner holds the lock. `None` (the default)
    /// leaves it to the call: `lock` waits without a deadline, `try_lock` and `with_lock`
    /// make a single attempt. `Some(Duration::ZERO)` always makes a single attempt.
    pub wait: Option<Duration>,
    /// The longest pause between two attempts while waiting. A waiter wakes sooner when
    /// the store signals a release or when the holder's lease is known to end sooner, and
    /// the last attempt happens at the deadline.
    pub retry_interval: Duration,
    /// Whether the lease is renewed in the background while the handle lives.
    pub renewal: Renewal,
    /// How long before the store could free the lease [`DistributedLock::lost`](crate::DistributedLock::lost)
    /// fires when renewals are not confirmed. `None` (the default) is a fifth of the TTL.
    pub loss_margin: Option<Duration>,
    /// In which order waiters get a contended key.
    pub fairness: Fairness,
}

/// In which order waiting acquisitions of one key are served.
///
/// A non-waiting attempt ([`try_lock`](crate::LockManager::try_lock)) never queues under
/// either setting; an uncontended acquisition is the same single command under both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fairness {
    /// Arrival order (the default): once its first attempt finds the key held, a waiter
    /// takes a place in the key's queue on the server (so the order holds across
    /// processes), and a release hands the key to the oldest live waiter. A waiter's
    /// place is a lease of a few retry intervals, refreshed at each attempt: one that
    /// crashes or is cancelled stops holding up the others soon after. On a store without
    /// a queue ([`Capabilities::fair_queue`](crate::Capabilities::fair_queue) is `false`)
    /// this is [`Barging`](Self::Barging).
    ///
    /// Lock groups (read/write locks, semaphores) wait in the same way: a waiting group
    /// leaves a place on each of its names, and later requests count it as a holder of its
    /// mode, so readers, writers and semaphore waiters are served in arrival order.
    #[default]
    Fair,
    /// Whoever asks first after a release gets the key: the most throughput on a hot key,
    /// but a waiter can lose many times in a row while others take the key again and again.
    /// A waiting lock group still leaves places for its exclusive members (writer
    /// preference: readers never starve a waiting writer), but none for its shared ones.
    Barging,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Automatic lease renewal (the "watchdog") for a held lock.
///
/// With renewal on, a background task extends the lease (token-checked) every interval
/// while the [`DistributedLock`](crate::DistributedLock) lives, so jobs of unknown length
/// keep their lock with a short TTL: if the process dies, the lock is free one TTL later.
/// Renewal stops on release, on drop, and once the lease is lost; a lease found taken is
/// never silently re-acquired. See [`DistributedLock::lost`](crate::DistributedLock::lost).
///
/// # Failed renewals
///
/// A renewal the store answers with an error (or does not answer) is retried sooner than
/// the interval: the remaining attempts are spread over the time left before the loss
/// deadline. After [`MAX_CONSECUTIVE_FAILURES`](Self::MAX_CONSECUTIVE_FAILURES) failures
/// in a row renewal stops and the lease is lost ([`LossReason::RenewalFailed`]); a
/// confirmed renewal resets the count. The loss is never signalled later than the loss
/// deadline ([`LossReason::DeadlinePassed`]), whatever the number of failures so far. A
/// store that answers "not held" ends renewal at once ([`LossReason::NotHeld`]).
///
/// # Intervals
///
/// Every interval, chosen or computed, is at least [`MIN_INTERVAL`](Self::MIN_INTERVAL)
/// and shorter than the TTL minus the [loss margin](LockOptions::loss_margin), so that a
/// renewal is sent before the loss would be signalled; [`LockOptions::validate`] refuses
/// anything else with [`LockError::InvalidOptions`] before any I/O. [`interval`](Self::interval)
/// computes the interval of a setting for a lease:
///
/// ```
/// use std::time::Duration;
/// use distlock::{Renewal, Ttl};
///
/// let every = |renewal: Renewal, ttl_ms: u64| {
///     let ttl = Ttl::new(Duration::from_millis(ttl_ms))?;
///     renewal.interval(ttl, ttl.as_duration() / 5) // the default loss margin
/// };
/// let secs = |s: u64| Some(Duration::from_secs(s));
/// assert_eq!(every(Renewal::Auto, 3_000)?, secs(1));
/// assert_eq!(every(Renewal::Auto, 9_000)?, secs(3));
/// assert_eq!(every(Renewal::Auto, 30_000)?, secs(10));
/// assert_eq!(every(Renewal::Auto, 60_000)?, secs(10));
/// // Under 2.5 s the 1 s floor would leave no second renewal before the loss margin.
/// assert_eq!(every(Renewal::Auto, 2_000)?, Some(Duration::from_millis(800)));
/// assert_eq!(every(Renewal::HalfTtl, 30_000)?, secs(15));
/// assert_eq!(every(Renewal::Off, 30_000)?, None);
/// assert!(every(Renewal::Every(Duration::from_millis(1)), 30_000).is_err());
/// # Ok::<(), distlock::LockError>(())
/// ```
///
/// [`LossReason::RenewalFailed`]: crate::LossReason::RenewalFailed
/// [`LossReason::DeadlinePassed`]: crate::LossReason::DeadlinePassed
/// [`LossReason::NotHeld`]: crate::LossReason::NotHeld
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Renewal {
    /// No renewal: the lease ends after its TTL unless extended by hand.
    #[default]
    Off,
    /// Renew every `max(1 s, min(10 s, TTL / 3))` — 1 s for a 3 s lease, 3 s for 9 s, 10 s
    /// for 30 s and longer — but at least twice before the loss would be signalled: when
    /// the TTL minus the loss margin is shorter than two such intervals (with the default
    /// margin, a TTL under 2.5 s), every half of that time instead, below the 1 s floor.
    /// Refused when that is shorter than [`MIN_INTERVAL`](Self::MIN_INTERVAL).
    Auto,
    /// Renew every half of the TTL (a watchdog at TTL / 2, 15 s for a 30 s lease). The
    /// loss margin must then be shorter than half the TTL (the default, a fifth, is).
    HalfTtl,
    /// Renew at this interval: at least [`MIN_INTERVAL`](Self::MIN_INTERVAL) and shorter
    /// than the TTL minus the [loss margin](LockOptions::loss_margin).
    Every(Duration),
}

impl Renewal {
    /// The shortest renewal interval accepted: 10 ms, at most a hundred renewals a second
    /// per lock. Shorter intervals only load the store (each renewal is a round trip to
    /// it) and are almost always a unit mistake.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

    /// The shortest interval of [`Renewal::Auto`] when the lease leaves room for it: 1 s.
    pub const AUTO_MIN: Duration = Duration::from_secs(1);

    /// The longest interval of [`Renewal::Auto`]: 10 s.
    pub const AUTO_MAX: Duration = Duration::from_secs(10);

    /// How many renewals in a row may fail before renewal stops and the lease is lost: 3.
    pub const MAX_CONSECUTIVE_FAILURES: u32 = 3;

    /// The interval at which this setting renews a lease of `ttl` whose loss is signalled
    /// `loss_margin` before its end; `None` for [`Renewal::Off`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] when the interval would be shorter than
    /// [`MIN_INTERVAL`](Self::MIN_INTERVAL)
    /// ([`InvalidOptions::RenewIntervalTooShort`]), or would not leave time before the
    /// loss margin, i.e. is not shorter than `ttl - loss_margin`
    /// ([`InvalidOptions::RenewInterval`]).
    pub fn interval(self, ttl: Ttl, loss_margin: Duration) -> Result<Option<Duration>, LockError> {
        let ttl = ttl.as_duration();
        let window = ttl.saturating_sub(loss_margin);
        let every = match self {
            Self::Off => return Ok(None),
            // At least twice before the loss would be signalled, even below the floor.
            Self::Auto => (ttl / 3).clamp(Self::AUTO_MIN, Self::AUTO_MAX).min(window / 2),
            Self::HalfTtl => ttl / 2,
            Self::Every(every) => every,
        };
        if every < Self::MIN_INTERVAL {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::RenewIntervalTooShort { interval: every, min: Self::MIN_INTERVAL },
            });
        }
        if every >= window {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::RenewInterval { interval: every, ttl, loss_margin },
            });
        }
        Ok(Some(every))
    }
}

impl LockOptions {
    /// The default pause between attempts: 50 ms.
    pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(50);

    /// The default loss margin is the TTL divided by this: a fifth of the TTL.
    pub const DEFAULT_LOSS_MARGIN_DIVISOR: u32 = 5;

    /// The longest `wait` and `retry_interval` accepted (same bound as [`Ttl::MAX`]).
    pub const MAX_WAIT: Duration = Ttl::MAX;

    /// The defaults: no explicit wait, a 50 ms retry interval, no renewal, a loss margin
    /// of a fifth of the TTL.
    pub const fn new() -> Self {
        Self {
            wait: None,
            retry_interval: Self::DEFAULT_RETRY_INTERVAL,
            renewal: Renewal::Off,
            loss_margin: None,
            fairness: Fairness::Fair,
        }
    }

    /// Waits without a queue ([`Fairness::Barging`]): whoever asks first after a release
    /// gets the key.
    #[must_use]
    pub const fn barging(mut self) -> Self {
        self.fairness = Fairness::Barging;
        self
    }

    /// Sets in which order waiters are served (default [`Fairness::Fair`]).
    #[must_use]
    pub const fn fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Sets how long to keep trying while another owner holds the lock (zero: a single
    /// attempt). Then `NotAcquired` (or `None` from `try_lock_opts`).
    #[must_use]
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Sets the longest pause between two attempts. Default 50 ms; must be > 0 when
    /// waiting.
    #[must_use]
    pub const fn retry_interval(mut self, retry_interval: Duration) -> Self {
        self.retry_interval = retry_interval;
        self
    }

    /// Renews the lease automatically while the handle lives, every
    /// `max(1 s, min(10 s, TTL / 3))` (see [`Renewal::Auto`]): 10 s for a 30 s lease.
    #[must_use]
    pub const fn auto_renew(mut self) -> Self {
        self.renewal = Renewal::Auto;
        self
    }

    /// Renews the lease automatically every half of the TTL while the handle lives
    /// ([`Renewal::HalfTtl`]): a watchdog at TTL / 2. The loss margin must be shorter than
    /// half the TTL.
    #[must_use]
    pub const fn renew_at_half_ttl(mut self) -> Self {
        self.renewal = Renewal::HalfTtl;
        self
    }

    /// Renews the lease automatically every `interval` while the handle lives
    /// ([`Renewal::Every`]); the interval must be at least [`Renewal::MIN_INTERVAL`]
    /// (10 ms) and shorter than the TTL minus the loss margin.
    #[must_use]
    pub const fn renew_every(mut self, interval: Duration) -> Self {
        self.renewal = Renewal::Every(interval);
        self
    }

    /// Sets how long before the store could free the lease
    /// [`DistributedLock::lost`](crate::DistributedLock::lost) fires when no renewal was
    /// confirmed: the time a holder has to stop its work before another owner may take
    /// the key. Default: a fifth of the TTL. Must be shorter than the TTL.
    #[must_use]
    pub const fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// Checks every setting against the lease `ttl` and returns the validated form the
    /// manager works with. `wait` stays `None` when unset.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a zero or too long TTL, a `wait` or
    /// `retry_interval` longer than [`LockOptions::MAX_WAIT`], a zero `retry_interval`
    /// while waiting, a loss margin not shorter than the TTL, or a renewal interval that
    /// is shorter than [`Renewal::MIN_INTERVAL`] or leaves no time before the loss margin
    /// (see [`Renewal::interval`]).
    pub fn validate(&self, ttl: Duration) -> Result<ValidOptions, LockError> {
        let ttl = Ttl::new(ttl)?;
        if let Some(wait) = self.wait.filter(|wait| *wait > Self::MAX_WAIT) {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::WaitTooLong { wait, max: Self::MAX_WAIT },
            });
        }
        if self.retry_interval > Self::MAX_WAIT {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::RetryIntervalTooLong { interval: self.retry_interval, max: Self::MAX_WAIT },
            });
        }
        if self.wait != Some(Duration::ZERO) && self.retry_interval.is_zero() {
            return Err(LockError::InvalidOptions { reason: InvalidOptions::ZeroRetryInterval });
        }
        let loss_margin = match self.loss_margin {
            None => ttl.as_duration() / Self::DEFAULT_LOSS_MARGIN_DIVISOR,
            Some(margin) if margin >= ttl.as_duration() => {
                return Err(LockError::InvalidOptions {
                    reason: InvalidOptions::LossMargin { margin, ttl: ttl.as_duration() },
                });
            }
            Some(margin) => margin,
        };
        let renew_every = self.renewal.interval(ttl, loss_margin)?;
        Ok(ValidOptions {
            ttl,
            wait: self.wait,
            retry_interval: self.retry_interval,
            renew_every,
            loss_margin,
            fairness: self.fairness,
        })
    }
}

/// [`LockOptions`] that passed [`LockOptions::validate`], with the TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValidOptions {
    /// The validated lease.
    pub ttl: Ttl,
    /// How long to keep trying; `None` when the call decides.
    pub wait: Option<Duration>,
    /// The longest pause between attempts (> 0 unless the wait is zero).
    pub retry_interval: Duration,
    /// The renewal interval, when the lease is renewed automatically.
    pub renew_every: Option<Duration>,
    /// How long before the store could free the lease the loss is signalled.
    pub loss_margin: Duration,
    /// In which order waiters are served.
    pub fairness: Fairness,
}

impl ValidOptions {
    /// How long a waiter's place in a queue (or a waiting group's intent) lives unless a
    /// later attempt refreshes it: three retry intervals and half a second, at most a
    /// minute. A waiter attempts at least once per retry interval, so a live waiter
    /// never loses its place, and one that died stops holding the others up soon.
    pub fn place_ttl(&self) -> Ttl {
        let ttl = (self.retry_interval.saturating_mul(3) + Duration::from_millis(500)).min(Duration::from_secs(60));
        Ttl(ceil_millis(ttl))
    }
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
        let ttl = Duration::from_secs(1);
        let options = LockOptions::new();
        assert_eq!(options, LockOptions::default());
        assert_eq!(options.wait, None);
        assert_eq!(options.retry_interval, Duration::from_millis(50));
        let valid = options.validate(ttl).unwrap();
        assert_eq!(valid.loss_margin, Duration::from_millis(200), "a fifth of the TTL");
        assert!(options.wait(Duration::ZERO).retry_interval(Duration::ZERO).validate(ttl).is_ok(), "no wait, no retry");
        for waiting in [options, options.wait(Duration::from_secs(1))] {
            let err = waiting.retry_interval(Duration::ZERO).validate(ttl).unwrap_err();
            assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::ZeroRetryInterval }), "{err}");
        }
        // Below the 1 s floor: twice before the loss margin (0.8 s) instead.
        assert_eq!(options.auto_renew().validate(ttl).unwrap().renew_every, Some(Duration::from_millis(400)));
        let late = options.auto_renew().loss_margin(Duration::from_millis(900));
        assert_eq!(late.validate(ttl).unwrap().renew_every, Some(Duration::from_millis(50)), "before the loss margin");
        let err = options.auto_renew().loss_margin(ttl - Duration::from_nanos(1)).validate(ttl).unwrap_err();
        assert!(
            matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RenewIntervalTooShort { .. } }),
            "{err}"
        );
        assert_eq!(
            options.renew_every(Duration::from_millis(10)).validate(ttl).unwrap().renew_every,
            Some(Duration::from_millis(10))
        );
        for bad in [Duration::from_millis(800), Duration::from_secs(1), Duration::MAX] {
            let err = options.renew_every(bad).validate(ttl).unwrap_err();
            assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RenewInterval { .. } }), "{err}");
        }
        assert_eq!(options.loss_margin(Duration::ZERO).validate(ttl).unwrap().loss_margin, Duration::ZERO);
        for bad in [ttl, Duration::MAX] {
            let err = options.loss_margin(bad).validate(ttl).unwrap_err();
            assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::LossMargin { .. } }), "{err}");
        }
        let err = options.wait(Duration::MAX).validate(ttl).unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::WaitTooLong { .. } }), "{err}");
        let err = options.retry_interval(Duration::MAX).validate(ttl).unwrap_err();
        assert!(
            matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RetryIntervalTooLong { .. } }),
            "{err}"
        );
        let err = options.validate(Duration::MAX).unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::TtlTooLong { .. } }), "{err}");
    }

    fn auto_every(ttl: Duration, margin: Option<Duration>) -> Result<Option<Duration>, LockError> {
        let options = LockOptions::new().auto_renew();
        let options = match margin {
            Some(margin) => options.loss_margin(margin),
            None => options,
        };
        options.validate(ttl).map(|valid| valid.renew_every)
    }

    #[test]
    fn auto_renewal_is_a_third_of_the_ttl_between_one_and_ten_seconds() {
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        for (ttl, every) in [
            (s(3), s(1)),
            (s(6), s(2)),
            (s(9), s(3)),
            (s(15), s(5)),
            (s(30), s(10)),
            (s(31), s(10)),
            (s(60), s(10)),
            (s(3600), s(10)),
            (Ttl::MAX, s(10)),
            // The 1 s floor, still twice before the loss margin (0.8 × 2.7 s = 2.16 s).
            (ms(2_700), s(1)),
            (ms(2_500), s(1)),
            // The floor would leave less than two renewals before the loss margin: every
            // half of the TTL minus the margin (0.4 × TTL by default).
            (s(2), ms(800)),
            (s(1), ms(400)),
            (ms(100), ms(40)),
            (ms(25), ms(10)),
        ] {
            assert_eq!(auto_every(ttl, None).unwrap(), Some(every), "TTL {ttl:?}");
        }
        // A larger loss margin brings the renewal forward: twice before it.
        assert_eq!(auto_every(s(30), Some(s(20))).unwrap(), Some(s(5)));
        assert_eq!(auto_every(s(3), Some(s(2))).unwrap(), Some(ms(500)));
        // Too short a lease to renew at least every 10 ms.
        for (ttl, margin) in [(ms(24), None), (ms(1), None), (s(1), Some(ms(990)))] {
            let err = auto_every(ttl, margin).unwrap_err();
            assert!(
                matches!(
                    err,
                    LockError::InvalidOptions {
                        reason: InvalidOptions::RenewIntervalTooShort { min, .. }
                    } if min == Renewal::MIN_INTERVAL
                ),
                "TTL {ttl:?}: {err}"
            );
        }
    }

    #[test]
    fn half_ttl_renewal_is_one_setting() {
        let options = LockOptions::new().renew_at_half_ttl();
        assert_eq!(options.renewal, Renewal::HalfTtl);
        for ttl in [Duration::from_secs(30), Duration::from_secs(5), Duration::from_millis(100)] {
            assert_eq!(options.validate(ttl).unwrap().renew_every, Some(ttl / 2), "TTL {ttl:?}");
        }
        // The loss margin must leave the renewal time: shorter than half the TTL.
        let ttl = Duration::from_secs(30);
        assert_eq!(
            options.loss_margin(Duration::from_secs(14)).validate(ttl).unwrap().renew_every,
            Some(Duration::from_secs(15))
        );
        let err = options.loss_margin(Duration::from_secs(15)).validate(ttl).unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RenewInterval { .. } }), "{err}");
        let err = options.validate(Duration::from_millis(19)).unwrap_err();
        assert!(
            matches!(err, LockError::InvalidOptions { reason: InvalidOptions::RenewIntervalTooShort { .. } }),
            "{err}"
        );
    }

    #[test]
    fn explicit_renewal_below_the_floor_is_refused() {
        let ttl = Duration::from_secs(30);
        for bad in [Duration::ZERO, Duration::from_nanos(1), Duration::from_micros(9_999), Duration::from_millis(9)] {
            let err = LockOptions::new().renew_every(bad).validate(ttl).unwrap_err();
            match err {
                LockError::InvalidOptions { reason: InvalidOptions::RenewIntervalTooShort { interval, min } } => {
                    assert_eq!((interval, min), (bad, Duration::from_millis(10)));
                }
                other => panic!("{bad:?}: {other}"),
            }
        }
        for ok in [Renewal::MIN_INTERVAL, Duration::from_secs(1), Duration::from_secs(23)] {
            assert_eq!(LockOptions::new().renew_every(ok).validate(ttl).unwrap().renew_every, Some(ok));
        }
        let text = LockOptions::new().renew_every(Duration::from_nanos(1)).validate(ttl).unwrap_err().to_string();
        assert!(text.contains("1ns") && text.contains("10ms"), "{text}");
    }
}
