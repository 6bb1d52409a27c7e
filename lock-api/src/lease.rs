//! Lease tracking for a held lock: its deadline on a monotonic clock, the lost-lease
//! signal, and the renewal watchdog.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::LossReason;
use crate::key::LockKey;
use crate::observe;
use crate::options::Ttl;
use crate::release::Target;
use crate::store::DynLockStore;
use crate::token::Token;

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
    state: watch::Sender<LeaseState>,
    /// How long before `safe_until` the loss is signalled.
    margin: Duration,
    backend: &'static str,
    key: LockKey,
}

impl Lease {
    /// A lease of `key` on `backend` whose acquisition was sent at `sent_at`; its loss is
    /// signalled `margin` before the store could free it.
    pub(crate) fn new(sent_at: Instant, ttl: Ttl, margin: Duration, backend: &'static str, key: LockKey) -> Arc<Self> {
        Arc::new(Self {
            state: watch::channel(LeaseState { safe_until: safe_deadline(sent_at, ttl), lost: None }).0,
            margin,
            backend,
            key,
        })
    }

    /// A renewal sent at `sent_at` was confirmed.
    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Ttl) {
        self.state.send_if_modified(|state| {
            if state.lost.is_some() {
                return false;
            }
            state.safe_until = state.safe_until.max(safe_deadline(sent_at, ttl));
            true
        });
    }

    /// Records the loss (once: later calls change nothing), with a warning and the
    /// `distlock_lease_lost_total` metric.
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        let newly_lost = self.state.send_if_modified(|state| {
            if state.lost.is_some() {
                return false;
            }
            state.lost = Some(reason);
            true
        });
        if newly_lost {
            tracing::warn!(lock.key = %self.key, backend = self.backend, %reason, "lease lost");
            observe::lease_lost(self.backend);
        }
    }

    /// Until when the store surely holds the lease (unless renewed further).
    pub(crate) fn safe_until(&self) -> Instant {
        self.state.borrow().safe_until
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
        let state = *self.state.borrow();
        state
            .lost
            .or_else(|| (Instant::now() >= self.loss_deadline(state.safe_until)).then_some(LossReason::DeadlinePassed))
    }

    /// Resolves when the lease is lost (at the latest at its deadline).
    pub(crate) async fn lost(&self) -> LossReason {
        let mut seen = self.state.subscribe();
        loop {
            let state = *seen.borrow_and_update();
            if let Some(reason) = state.lost {
                return reason;
            }
            tokio::select! {
                changed = seen.changed() => {
                    if changed.is_err() {
                        return LossReason::DeadlinePassed;
                    }
                }
                () = tokio::time::sleep_until(self.loss_deadline(state.safe_until)) => {
                    if self.deadline() <= Instant::now() {
                        self.mark_lost(LossReason::DeadlinePassed);
                    }
                }
            }
        }
    }
}

/// What the watchdog renews, and how often.
pub(crate) struct Watchdog {
    pub(crate) store: Arc<DynLockStore>,
    pub(crate) key: Target,
    pub(crate) token: Token,
    pub(crate) ttl: Ttl,
    pub(crate) every: Duration,
    pub(crate) lease: Arc<Lease>,
}

impl Watchdog {
    /// Renews the lease every `every` until it is lost; the handle aborts the task on
    /// release or drop. Transient store errors are retried while the lease is still
    /// valid; "not held" is final and never leads to a re-acquisition.
    pub(crate) async fn run(self) {
        let backend = self.store.backend();
        let span = tracing::debug_span!("distlock.renew", lock.key = %self.key.log_key(), backend);
        let retry_pause = (self.every / 4).clamp(Duration::from_millis(5), Duration::from_millis(500));
        let mut next = Instant::now() + self.every;
        loop {
            tokio::time::sleep_until(next).await;
            let sent_at = Instant::now();
            let deadline = self.lease.deadline();
            if sent_at >= deadline {
                self.lease.mark_lost(LossReason::DeadlinePassed);
                break;
            }
            let extend = tokio::time::timeout_at(deadline, self.key.extend(&*self.store, &self.token, self.ttl));
            match tracing::Instrument::instrument(extend, span.clone()).await {
                Ok(Ok(true)) => {
                    span.in_scope(|| tracing::debug!(lock.key = %self.key.log_key(), backend, "lease renewed"));
                    self.lease.renewed(sent_at, self.ttl);
                    next = sent_at + self.every;
                }
                Ok(Ok(false)) => {
                    observe::renew_failure(backend);
                    span.in_scope(|| self.lease.mark_lost(LossReason::NotHeld));
                    break;
                }
                Ok(Err(error)) => {
                    observe::renew_failure(backend);
                    span.in_scope(|| {
                        tracing::warn!(
                            lock.key = %self.key.log_key(),
                            backend,
                            error = &error as &dyn std::error::Error,
                            "lease renewal failed; retrying while the lease is still valid"
                        );
                    });
                    next = (Instant::now() + retry_pause).min(deadline);
                }
                Err(_) => {
                    observe::renew_failure(backend);
                    span.in_scope(|| self.lease.mark_lost(LossReason::DeadlinePassed));
                    break;
                }
            }
        }
    }
}
