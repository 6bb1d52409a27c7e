//! The handle core: one acquisition's token, fence, lease, renewal, lost signal, extend
//! and release. [`DistributedLock`](crate::DistributedLock) and
//! [`GroupLock`](crate::GroupLock) are views of it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::guard::DropGuard;
use super::lease::{renew_until_lost, Lease, RenewFuture};
use super::state::Engine;
use super::target::Target;
use crate::error::{LockError, LossReason};
use crate::key::LockKey;
use crate::observe::{self, ReleaseOutcome};
use crate::options::{Ttl, ValidOptions};
use crate::token::Token;

/// One acquisition, shared by the handles of a reentrant scope (one handle elsewhere).
/// Dropping the last handle drops its guard, which releases the lease in the background
/// unless it was released or leaked.
#[derive(Debug)]
pub(crate) struct Hold {
    guard: DropGuard,
    fence: Option<u64>,
    ttl: Ttl,
    lease: Kept,
    watchdog: Option<AbortHandle>,
    /// When the acquisition was confirmed, for `distlock_hold_seconds`.
    acquired_at: observe::Stamp,
    /// Whether the lock was given up with `leak` (the hold time is then unknown).
    leaked: AtomicBool,
}

/// A hold's lease: its own, or shared with its renewal task.
#[derive(Debug)]
enum Kept {
    Own(Lease),
    Shared(Arc<Lease>),
}

impl std::ops::Deref for Kept {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        match self {
            Self::Own(lease) => lease,
            Self::Shared(lease) => lease,
        }
    }
}

impl Hold {
    /// The hold of an acquisition confirmed for an attempt sent at `sent_at`, with its
    /// guard (armed); starts renewal when the options ask for it.
    pub(crate) fn new(guard: DropGuard, fence: Option<u64>, sent_at: Instant, options: &ValidOptions) -> Arc<Self> {
        let engine = guard.engine();
        let backend = engine.store.backend();
        let lease = Lease::new(sent_at, options.ttl, options.loss_margin, backend);
        let (lease, watchdog) = match options.renew_every {
            None => (Kept::Own(lease), None),
            Some(every) => {
                let lease = Arc::new(lease);
                let (target, token) = (guard.target().clone(), guard.token().clone());
                let renewal = renew(Arc::clone(engine), target, token, options.ttl, every, &lease);
                (Kept::Shared(lease), Some(tokio::spawn(renewal).abort_handle()))
            }
        };
        Arc::new(Self {
            guard: guard.held(),
            fence,
            ttl: options.ttl,
            lease,
            watchdog,
            acquired_at: observe::stamp(),
            leaked: AtomicBool::new(false),
        })
    }

    /// When the acquisition was confirmed (for the metrics).
    pub(crate) fn acquired_at(&self) -> observe::Stamp {
        self.acquired_at
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.guard.engine()
    }

    pub(crate) fn backend(&self) -> &'static str {
        self.engine().store.backend()
    }

    pub(crate) fn target(&self) -> &Target {
        self.guard.target()
    }

    /// The application key (a group's first member), for the handle and the logs.
    pub(crate) fn label(&self) -> &LockKey {
        self.target().first().as_lock_key()
    }

    pub(crate) fn token(&self) -> &Token {
        self.guard.token()
    }

    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl.as_duration()
    }

    pub(crate) fn is_renewing(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|task| !task.is_finished())
    }

    pub(crate) fn safe_until(&self) -> Instant {
        self.lease.safe_until()
    }

    pub(crate) fn time_left(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.lease.safe_until().saturating_duration_since(Instant::now())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lease.lost_reason().is_some()
    }

    pub(crate) async fn lost(&self) -> LossReason {
        self.lease.lost(self.target().log_key()).await
    }

    /// Whether another handle may join this hold: the lease is neither lost nor leaked.
    pub(crate) fn is_joinable(&self) -> bool {
        !self.leaked.load(Ordering::Acquire) && !self.is_lost()
    }

    /// Runs `block` while `this` holds the lease, then releases it (the `with_lock`
    /// calls). With `renewing`, the block is raced against the loss of the lease: lost
    /// first, the block is dropped mid-way and the answer is [`LockError::LeaseLost`]. A
    /// failed release is logged, never allowed to replace the block's result.
    pub(crate) async fn run_then_release<Fut, T, E>(this: Arc<Self>, renewing: bool, block: Fut) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let outcome = if renewing {
            tokio::select! {
                outcome = block => outcome,
                reason = this.lost() => {
                    return Err(E::from(LockError::LeaseLost { key: this.label().as_str().to_owned(), reason }));
                }
            }
        } else {
            block.await
        };
        let (key, backend) = (this.label().clone(), this.backend());
        match Self::release(this).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                lock.key = %key,
                backend,
                "lock had already expired or been taken over when the block finished"
            ),
            Err(error) => tracing::warn!(
                lock.key = %key,
                backend,
                error = %error.report(),
                "failed to release lock after the block; retrying in the background"
            ),
        }
        outcome
    }

    /// Resets the lease to `ttl` from now, if still held; marks it lost otherwise.
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<bool, LockError> {
        let ttl = Ttl::new(ttl)?;
        let sent_at = Instant::now();
        let extended = self.target().extend(&*self.engine().store, self.token(), ttl).await?;
        if extended {
            self.lease.renewed(sent_at, ttl);
        } else {
            self.lease.mark_lost(LossReason::NotHeld, self.target().log_key());
        }
        Ok(extended)
    }

    /// Releases the lease (stopping renewal first) when `this` is its last handle; the
    /// other handles of a reentrant scope keep it, and the answer is then whether it is
    /// still held. On a store error the guard stays armed, so the lease is released once
    /// more in the background.
    pub(crate) async fn release(this: Arc<Self>) -> Result<bool, LockError> {
        let hold = match Arc::try_unwrap(this) {
            Ok(hold) => hold,
            Err(shared) => return Ok(!shared.is_lost()),
        };
        hold.stop_renewal();
        let backend = hold.backend();
        // As in `Engine::acquire`: no span at all unless one would be recorded.
        let span = match hold.target() {
            _ if !tracing::enabled!(tracing::Level::DEBUG) => None,
            Target::Key(_) => Some(tracing::debug_span!("distlock.release", lock.key = %hold.label(), backend)),
            Target::Group(_) => Some(tracing::debug_span!("distlock.release_group", lock.key = %hold.label(), backend)),
        };
        let release = hold.target().release(&*hold.engine().store, hold.token());
        let result = match &span {
            Some(span) => release.instrument(span.clone()).await,
            None => release.await,
        };
        observe::release(backend, ReleaseOutcome::of(&result));
        let _entered = span.as_ref().map(tracing::Span::enter);
        match &result {
            Ok(released) => {
                hold.guard.disarm();
                tracing::debug!(lock.key = %hold.label(), backend, released, "lock released");
            }
            Err(error) => tracing::debug!(
                lock.key = %hold.label(),
                backend,
                error = %error.report(),
                "release failed; retrying in the background"
            ),
        }
        result
    }

    /// Gives up the lease without releasing it (and stops renewal): it lives until its TTL.
    pub(crate) fn leak(&self) {
        self.stop_renewal();
        self.guard.disarm();
        self.leaked.store(true, Ordering::Release);
    }

    fn stop_renewal(&self) {
        if let Some(task) = &self.watchdog {
            task.abort();
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop_renewal();
        if !self.leaked.load(Ordering::Acquire) {
            observe::hold(self.backend(), self.acquired_at);
        }
    }
}

/// The renewal task of a hold: extends `target` every `every` until the lease is lost;
/// the hold aborts it on release, leak or drop.
fn renew(
    engine: Arc<Engine>,
    target: Target,
    token: Token,
    ttl: Ttl,
    every: Duration,
    lease: &Arc<Lease>,
) -> impl Future<Output = ()> + Send + 'static {
    let lease = Arc::clone(lease);
    let backend = engine.store.backend();
    let log_key = target.log_key().to_owned();
    let span = tracing::debug_span!("distlock.renew", lock.key = %log_key, backend);
    let extend = move || -> RenewFuture {
        let (engine, target, token) = (Arc::clone(&engine), target.clone(), token.clone());
        Box::pin(async move { target.extend(&*engine.store, &token, ttl).await })
    };
    async move {
        let first = Instant::now() + every;
        renew_until_lost(&lease, backend, ttl, (first, every), Some(&log_key), extend).await;
    }
    .instrument(span)
}
