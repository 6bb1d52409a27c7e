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
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};

    use metrics::{Key, Label, Level, Metadata};

    use super::{AcquireOutcome, ReleaseOutcome};
    use crate::metric_names as names;

    /// A moment that a duration metric is measured from.
    pub(crate) type Stamp = tokio::time::Instant;

    /// What the `metrics` macros would record from (their target and level).
    static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The keys of one backend's metrics, built once: with a label value known only at run
    /// time, the `metrics` macros build a key (a label vector, a hash) at every call. The
    /// recorder is still looked up at every call, so one installed later is used.
    struct Keys {
        backend: &'static str,
        acquired: Key,
        contended: Key,
        acquire_error: Key,
        wait: Key,
        contention: Key,
        released: Key,
        not_held: Key,
        release_error: Key,
        renew_failure: Key,
        lease_lost: Key,
        hold: Key,
    }

    impl Keys {
        fn new(backend: &'static str) -> Self {
            let key = |name: &'static str, outcome: Option<&'static str>| {
                let mut labels = vec![Label::from_static_parts("backend", backend)];
                labels.extend(outcome.map(|outcome| Label::from_static_parts("outcome", outcome)));
                Key::from_parts(name, labels)
            };
            Self {
                backend,
                acquired: key(names::ACQUIRE_TOTAL, Some("acquired")),
                contended: key(names::ACQUIRE_TOTAL, Some("contended")),
                acquire_error: key(names::ACQUIRE_TOTAL, Some("error")),
                wait: key(names::WAIT_SECONDS, None),
                contention: key(names::CONTENTION_TOTAL, None),
                released: key(names::RELEASE_TOTAL, Some("released")),
                not_held: key(names::RELEASE_TOTAL, Some("not_held")),
                release_error: key(names::RELEASE_TOTAL, Some("error")),
                renew_failure: key(names::RENEW_FAILURE_TOTAL, None),
                lease_lost: key(names::LEASE_LOST_TOTAL, None),
                hold: key(names::HOLD_SECONDS, None),
            }
        }
    }

    /// The keys of `backend`: from this thread's last one, else from the process's (one
    /// set per backend name, kept for the life of the process).
    fn keys(backend: &'static str) -> &'static Keys {
        thread_local! {
            static LAST: Cell<Option<&'static Keys>> = const { Cell::new(None) };
        }
        if let Some(keys) = LAST.get().filter(|keys| keys.backend == backend) {
            return keys;
        }
        static ALL: OnceLock<Mutex<HashMap<&'static str, &'static Keys>>> = OnceLock::new();
        let keys = *ALL
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(backend)
            .or_insert_with(|| Box::leak(Box::new(Keys::new(backend))));
        LAST.set(Some(keys));
        keys
    }

    fn count(key: &Key) {
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
    }

    fn record(key: &Key, value: f64) {
        metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA)).record(value);
    }

    /// Now, for a duration metric.
    pub(crate) fn stamp() -> Stamp {
        Stamp::now()
    }

    /// An acquisition call that started at `started` ended at `ended`.
    pub(crate) fn acquire(backend: &'static str, outcome: AcquireOutcome, started: tokio::time::Instant, ended: Stamp) {
        let waited = ended.saturating_duration_since(started);
        let keys = keys(backend);
        count(match outcome {
            AcquireOutcome::Acquired => &keys.acquired,
            AcquireOutcome::Contended => &keys.contended,
            AcquireOutcome::Error => &keys.acquire_error,
        });
        record(&keys.wait, waited.as_secs_f64());
    }

    pub(crate) fn contention(backend: &'static str) {
        count(&keys(backend).contention);
    }

    pub(crate) fn release(backend: &'static str, outcome: ReleaseOutcome) {
        let keys = keys(backend);
        count(match outcome {
            ReleaseOutcome::Released => &keys.released,
            ReleaseOutcome::NotHeld => &keys.not_held,
            ReleaseOutcome::Error => &keys.release_error,
        });
    }

    pub(crate) fn renew_failure(backend: &'static str) {
        count(&keys(backend).renew_failure);
    }

    pub(crate) fn lease_lost(backend: &'static str) {
        count(&keys(backend).lease_lost);
    }

    pub(crate) fn hold(backend: &'static str, acquired_at: Stamp) {
        let held = acquired_at.elapsed();
        record(&keys(backend).hold, held.as_secs_f64());
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
    pub(crate) fn acquire(_: &'static str, _: AcquireOutcome, _: tokio::time::Instant, _: Stamp) {}
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
