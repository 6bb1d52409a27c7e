//! Lease tracking for a held lock: its deadline on a monotonic clock, the lost-lease
//! signal, and the renewal loop; [`LeaseWatch`] offers the same to other leases kept in a
//! store (an idempotency claim).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::{InvalidOptions, LockError, LossReason};
use crate::observe;
use crate::options::{Renewal, Ttl};

/// When a lease confirmed by a call sent at `sent_at` surely still holds: the TTL minus
/// an allowance for clock drift between this process and the store (1 % + 2 ms).
fn safe_deadline(sent_at: Instant, ttl: Ttl) -> Instant {
    let ttl = ttl.as_duration();
    let drift = ttl / 100 + Duration::from_millis(2);
    sent_at + ttl.saturating_sub(drift)
}

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    /// The store surely holds the lease until this moment, unless renewed: no other
    /// owner can take the key before it.
    safe_until: Instant,
    lost: Option<LossReason>,
}

/// The lease state shared by a handle and its watchdog.
#[derive(Debug)]
pub(crate) struct Lease {
    /// Read and written under the lock, never across an await.
    state: Mutex<LeaseState>,
    /// Notified at every change of `state`, for [`lost`](Self::lost).
    changed: Notify,
    /// How long before `safe_until` the loss is signalled.
    margin: Duration,
    backend: &'static str,
    /// What the lease is of, for its "lease lost" warning: `None` for a lock, whose key
    /// the caller names (it is not copied here); else only what it is (an idempotency
    /// claim, whose key must not be logged).
    what: Option<&'static str>,
}

/// The target of the `warn` event logged when a lease is found lost (every other event of
/// the library has its module's path as target). A program that reports the loss itself
/// — as the `distlock` command does — can turn this one event off, e.g. with the
/// `tracing-subscriber` filter `warn,distlock::lease_lost=off`.
pub const LEASE_LOST_TARGET: &str = "distlock::lease_lost";

impl Lease {
    /// A lease of a lock on `backend` whose acquisition was sent at `sent_at`; its loss is
    /// signalled `margin` before the store could free it.
    pub(crate) fn new(sent_at: Instant, ttl: Ttl, margin: Duration, backend: &'static str) -> Self {
        Self {
            state: Mutex::new(LeaseState { safe_until: safe_deadline(sent_at, ttl), lost: None }),
            changed: Notify::new(),
            margin,
            backend,
            what: None,
        }
    }

    /// A renewal sent at `sent_at` was confirmed.
    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Ttl) {
        let modified = self.update(|state| {
            if state.lost.is_some() {
                return false;
            }
            state.safe_until = state.safe_until.max(safe_deadline(sent_at, ttl));
            true
        });
        if modified {
            self.changed.notify_waiters();
        }
    }

    /// Records the loss (once: later calls change nothing), with a warning (naming
    /// `key`, for a lock's lease) and the `distlock_lease_lost_total` metric.
    pub(crate) fn mark_lost(&self, reason: LossReason, key: &str) {
        let newly_lost = self.update(|state| {
            if state.lost.is_some() {
                return false;
            }
            state.lost = Some(reason);
            true
        });
        if newly_lost {
            self.changed.notify_waiters();
            match self.what {
                None => {
                    tracing::warn!(target: LEASE_LOST_TARGET, backend = self.backend, lock.key = %key, %reason, "lease lost");
                }
                Some(what) => {
                    tracing::warn!(target: LEASE_LOST_TARGET, lease = what, backend = self.backend, %reason, "lease lost");
                }
            }
            observe::lease_lost(self.backend);
        }
    }

    /// The state as it is now.
    fn read(&self) -> LeaseState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` under the lock; returns what it returns (whether it changed
    /// anything). The state is `Copy` and every change is one assignment, so a poisoned
    /// lock still holds a consistent state.
    fn update(&self, change: impl FnOnce(&mut LeaseState) -> bool) -> bool {
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Until when the store surely holds the lease (unless renewed further).
    pub(crate) fn safe_until(&self) -> Instant {
        self.read().safe_until
    }

    /// When the loss is signalled unless a renewal is confirmed first: the loss margin
    /// before [`safe_until`](Self::safe_until).
    pub(crate) fn deadline(&self) -> Instant {
        self.loss_deadline(self.safe_until())
    }

    fn loss_deadline(&self, safe_until: Instant) -> Instant {
        safe_until.checked_sub(self.margin).unwrap_or(safe_until)
    }

    pub(crate) fn lost_reason(&self) -> Option<LossReason> {
        let state = self.read();
        state
            .lost
            .or_else(|| (Instant::now() >= self.loss_deadline(state.safe_until)).then_some(LossReason::DeadlinePassed))
    }

    /// Resolves when the lease is lost (at the latest at its deadline); `key` as for
    /// [`mark_lost`](Self::mark_lost).
    pub(crate) async fn lost(&self, key: &str) -> LossReason {
        loop {
            // Armed before the state is read: a change after the read completes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let state = self.read();
            if let Some(reason) = state.lost {
                return reason;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(self.loss_deadline(state.safe_until)) => {
                    if self.deadline() <= Instant::now() {
                        self.mark_lost(LossReason::DeadlinePassed, key);
                    }
                }
            }
        }
    }
}

/// One renewal: `Ok(true)` renewed, `Ok(false)` no longer held.
pub(super) type RenewFuture = Pin<Box<dyn Future<Output = Result<bool, LockError>> + Send>>;

/// Renews `lease` by calling `renew` at `first`, then every `every` until it is lost. A store error is
/// retried after `every`, or sooner when the attempts left would not all fit before the
/// loss deadline (see [`retry_at`]); [`Renewal::MAX_CONSECUTIVE_FAILURES`] errors in a row
/// end renewal. "Not held" is final and never leads to a re-acquisition.
pub(super) async fn renew_until_lost<F>(
    lease: &Lease,
    backend: &'static str,
    ttl: Ttl,
    (first, every): (Instant, Duration),
    log_key: Option<&str>,
    mut renew: F,
) where
    F: FnMut() -> RenewFuture,
{
    let log_key = log_key.unwrap_or("");
    let mut failures = 0;
    let mut next = first;
    loop {
        tokio::time::sleep_until(next).await;
        let sent_at = Instant::now();
        let deadline = lease.deadline();
        if sent_at >= deadline {
            lease.mark_lost(LossReason::DeadlinePassed, log_key);
            break;
        }
        match tokio::time::timeout_at(deadline, renew()).await {
            Ok(Ok(true)) => {
                tracing::debug!(lock.key = log_key, backend, "lease renewed");
                lease.renewed(sent_at, ttl);
                failures = 0;
                next = sent_at + every;
            }
            Ok(Ok(false)) => {
                observe::renew_failure(backend);
                lease.mark_lost(LossReason::NotHeld, log_key);
                break;
            }
            Ok(Err(error)) => {
                observe::renew_failure(backend);
                failures += 1;
                let error = error.report();
                if failures >= Renewal::MAX_CONSECUTIVE_FAILURES {
                    tracing::warn!(lock.key = log_key, backend, %error, failures, "lease renewal failed; renewal stops");
                    lease.mark_lost(LossReason::RenewalFailed, log_key);
                    break;
                }
                tracing::warn!(lock.key = log_key, backend, %error, failures, "lease renewal failed; retrying");
                next = retry_at(Instant::now(), deadline, every, Renewal::MAX_CONSECUTIVE_FAILURES - failures);
            }
            Err(_) => {
                observe::renew_failure(backend);
                lease.mark_lost(LossReason::DeadlinePassed, log_key);
                break;
            }
        }
    }
}

/// When to retry a failed renewal, `now`, with `attempts_left` attempts before renewal
/// stops: after the regular interval `every`, unless the attempts left would not all be
/// sent before the loss `deadline` that way; then they are spread evenly over the time
/// left, so that an outage shorter than that time is ridden out.
fn retry_at(now: Instant, deadline: Instant, every: Duration, attempts_left: u32) -> Instant {
    let spread = deadline.saturating_duration_since(now) / (attempts_left + 1);
    now + every.min(spread)
}

/// The lease of something kept in a store other than a lock — an idempotency claim, say
/// — tracked the way [`DistributedLock`](crate::DistributedLock) tracks its own: a
/// deadline on this process's monotonic clock, the lost-lease signal
/// ([`lost`](Self::lost), [`is_lost`](Self::is_lost)) and, optionally, a renewal task.
///
/// The owner of the lease tells it about every confirmed renewal it makes by hand
/// ([`renewed`](Self::renewed)) or lets [`spawn_renewal`](Self::spawn_renewal) renew it;
/// a renewal that finds the lease no longer held, or no renewal confirmed before the
/// deadline, marks it lost (with a warning that names only `what` and the backend, and
/// the `distlock_lease_lost_total` metric).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::{LeaseWatch, LossReason, Ttl};
///
/// let ttl = Ttl::new(Duration::from_secs(10))?;
/// let sent_at = tokio::time::Instant::now();
/// let lease = LeaseWatch::new(sent_at, ttl, Duration::from_secs(2), "memory", "idempotency claim");
/// // No renewal: lost the margin before the lease could end.
/// assert_eq!(lease.lost().await, LossReason::DeadlinePassed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseWatch {
    lease: Arc<Lease>,
}

impl LeaseWatch {
    /// A lease of `what` (e.g. `"idempotency claim"`, logged instead of any key) on
    /// `backend`, taken by a call sent at `sent_at` for `ttl`; its loss is signalled
    /// `margin` before the store could free it.
    pub fn new(sent_at: Instant, ttl: Ttl, margin: Duration, backend: &'static str, what: &'static str) -> Self {
        let lease = Arc::new(Lease {
            state: Mutex::new(LeaseState { safe_until: safe_deadline(sent_at, ttl), lost: None }),
            changed: Notify::new(),
            margin,
            backend,
            what: Some(what),
        });
        Self { lease }
    }

    /// A renewal sent at `sent_at` for `ttl` was confirmed by the store.
    pub fn renewed(&self, sent_at: Instant, ttl: Ttl) {
        self.lease.renewed(sent_at, ttl);
    }

    /// Records the loss (once: later calls change nothing).
    pub fn mark_lost(&self, reason: LossReason) {
        self.lease.mark_lost(reason, "");
    }

    /// Until when the store surely holds the lease, unless renewed.
    pub fn safe_until(&self) -> Instant {
        self.lease.safe_until()
    }

    /// Whether the lease is lost (a renewal found it not held, or the deadline passed).
    pub fn is_lost(&self) -> bool {
        self.lease.lost_reason().is_some()
    }

    /// Resolves when the lease is lost, with the reason (see
    /// [`DistributedLock::lost`](crate::DistributedLock::lost)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the lease.
    pub async fn lost(&self) -> LossReason {
        self.lease.lost("").await
    }

    /// Starts a task on the current runtime that calls `renew` (one renewal for `ttl`:
    /// `Ok(true)` renewed, `Ok(false)` no longer held) every `every` until the lease is
    /// lost, exactly as a lock's watchdog does (including its handling of
    /// [failed renewals](crate::Renewal#failed-renewals)). Abort the returned handle when
    /// the lease ends. [`Renewal::interval`] computes `every` from a renewal setting.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] when `every` is shorter than
    /// [`Renewal::MIN_INTERVAL`]; [`LockError::Config`] when called outside a tokio
    /// runtime. Nothing is started then.
    pub fn spawn_renewal<F, Fut>(&self, ttl: Ttl, every: Duration, renew: F) -> Result<AbortHandle, LockError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, LockError>> + Send + 'static,
    {
        self.spawn_renewal_from(Instant::now() + every, ttl, every, renew)
    }

    /// [`spawn_renewal`](Self::spawn_renewal) with the first renewal at `first` rather
    /// than `every` from now: for a task started some time after the lease was taken,
    /// which keeps the lease's own schedule (`first` is then `every` after the lease was
    /// taken). A `first` already passed renews at once.
    ///
    /// # Errors
    ///
    /// As [`spawn_renewal`](Self::spawn_renewal).
    pub fn spawn_renewal_from<F, Fut>(
        &self,
        first: Instant,
        ttl: Ttl,
        every: Duration,
        mut renew: F,
    ) -> Result<AbortHandle, LockError>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, LockError>> + Send + 'static,
    {
        if every < Renewal::MIN_INTERVAL {
            return Err(LockError::InvalidOptions {
                reason: InvalidOptions::RenewIntervalTooShort { interval: every, min: Renewal::MIN_INTERVAL },
            });
        }
        let lease = Arc::clone(&self.lease);
        let backend = lease.backend;
        let boxed = move || -> RenewFuture { Box::pin(renew()) };
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LockError::Config {
            message: "lease renewal must be started inside a tokio runtime".to_owned(),
        })?;
        Ok(runtime
            .spawn(async move { renew_until_lost(&lease, backend, ttl, (first, every), None, boxed).await })
            .abort_handle())
    }
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("backend", &self.lease.backend)
            .field("safe_until", &self.lease.safe_until())
            .field("lost", &self.lease.lost_reason())
            .finish()
    }
}
