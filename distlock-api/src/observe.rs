//! Metrics (feature `metrics`, through the [`metrics`](https://docs.rs/metrics) facade)
//! recorded by the manager, the handles and the renewal watchdog.
//!
//! Every function here compiles to nothing when the feature is off.

/// How an acquisition call that reached the store ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    Acquired,
    Contended,
    Error,
}

/// How a release (explicit, after `with_lock`, or in the background) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    Released,
    NotHeld,
    Error,
}

impl ReleaseOutcome {
    pub(crate) fn of(result: &Result<bool, crate::LockError>) -> Self {
        match result {
            Ok(true) => Self::Released,
            Ok(false) => Self::NotHeld,
            Err(_) => Self::Error,
        }
    }
}

#[cfg(feature = "metrics")]
mod imp {
    use super::{AcquireOutcome, ReleaseOutcome};

    /// A moment that a duration metric is measured from.
    pub(crate) type Stamp = tokio::time::Instant;

    /// Now, for a duration metric.
    pub(crate) fn stamp() -> Stamp {
        Stamp::now()
    }

    pub(crate) fn acquire(backend: &'static str, outcome: AcquireOutcome, started: tokio::time::Instant) {
        let waited = started.elapsed();
        let outcome = match outcome {
            AcquireOutcome::Acquired => "acquired",
            AcquireOutcome::Contended => "contended",
            AcquireOutcome::Error => "error",
        };
        metrics::counter!(crate::metric_names::ACQUIRE_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
        metrics::histogram!(crate::metric_names::WAIT_SECONDS, "backend" => backend).record(waited.as_secs_f64());
    }

    pub(crate) fn contention(backend: &'static str) {
        metrics::counter!(crate::metric_names::CONTENTION_TOTAL, "backend" => backend).increment(1);
    }

    pub(crate) fn release(backend: &'static str, outcome: ReleaseOutcome) {
        let outcome = match outcome {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::NotHeld => "not_held",
            ReleaseOutcome::Error => "error",
        };
        metrics::counter!(crate::metric_names::RELEASE_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
    }

    pub(crate) fn renew_failure(backend: &'static str) {
        metrics::counter!(crate::metric_names::RENEW_FAILURE_TOTAL, "backend" => backend).increment(1);
    }

    pub(crate) fn lease_lost(backend: &'static str) {
        metrics::counter!(crate::metric_names::LEASE_LOST_TOTAL, "backend" => backend).increment(1);
    }

    pub(crate) fn hold(backend: &'static str, acquired_at: Stamp) {
        let held = acquired_at.elapsed();
        metrics::histogram!(crate::metric_names::HOLD_SECONDS, "backend" => backend).record(held.as_secs_f64());
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use super::{AcquireOutcome, ReleaseOutcome};

    /// Without metrics, no duration is measured, so no clock is read.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Stamp;

    #[inline(always)]
    pub(crate) fn stamp() -> Stamp {
        Stamp
    }
    #[inline(always)]
    pub(crate) fn acquire(_: &'static str, _: AcquireOutcome, _: tokio::time::Instant) {}
    #[inline(always)]
    pub(crate) fn contention(_: &'static str) {}
    #[inline(always)]
    pub(crate) fn release(_: &'static str, _: ReleaseOutcome) {}
    #[inline(always)]
    pub(crate) fn renew_failure(_: &'static str) {}
    #[inline(always)]
    pub(crate) fn lease_lost(_: &'static str) {}
    #[inline(always)]
    pub(crate) fn hold(_: &'static str, _: Stamp) {}
}

pub(crate) use imp::{acquire, contention, hold, lease_lost, release, renew_failure, stamp, Stamp};
