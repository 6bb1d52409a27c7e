//! `DistributedLock`: the handle of one held lock.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::LockError;
use crate::error::LossReason;
use crate::key::{LockKey, StoreKey};
use crate::lease::Lease;
use crate::observe::{self, ReleaseOutcome};
use crate::options::Ttl;
use crate::release::{Cleanup, ManagerInner};
use crate::token::Token;

/// What the manager hands over to a new handle.
pub(crate) struct Parts {
    pub(crate) key: LockKey,
    pub(crate) store_key: StoreKey,
    pub(crate) token: Token,
    pub(crate) fence: Option<u64>,
    pub(crate) ttl: Ttl,
    pub(crate) lease: Arc<Lease>,
    pub(crate) watchdog: Option<AbortHandle>,
    /// When the acquisition was confirmed, for `distlock_hold_seconds`.
    pub(crate) acquired_at: Instant,
}

/// A held lock.
///
/// Release it with [`release`](Self::release). A handle dropped without `release` is
/// released in the background by its [`LockManager`](crate::LockManager) — promptly, not
/// only after the TTL, and without doing I/O inside `Drop`. When no tokio runtime is left
/// to run that release, a warning is logged and the lease expires on its own.
/// [`leak`](Self::leak) opts out: the lock then lives until its TTL.
///
/// The handle tracks its lease on a monotonic clock: [`lost`](Self::lost) resolves and
/// [`is_lost`](Self::is_lost) turns true once the lease can no longer be assumed held.
///
/// Inside a [reentrant scope](crate::reentrant_scope), taking a key the scope already
/// holds gives another handle on the same lease ([`hold_count`](Self::hold_count) counts
/// them); the lease is released when the last of them is released or dropped.
#[must_use = "a lock is released as soon as its handle is dropped"]
pub struct DistributedLock {
    hold: Arc<Hold>,
}

/// One acquisition, shared by the handles of a reentrant scope (one handle elsewhere).
pub(crate) struct Hold {
    manager: Arc<ManagerInner>,
    parts: Parts,
    /// Whether dropping the last handle must release the lock in the background.
    armed: AtomicBool,
    /// Whether the lock was given up with `leak` (the hold time is then unknown).
    leaked: AtomicBool,
}

impl Hold {
    fn stop_renewal(&self) {
        if let Some(task) = &self.parts.watchdog {
            task.abort();
        }
    }

    /// Whether another handle may join this hold: the lease is neither lost nor leaked.
    pub(crate) fn is_joinable(&self) -> bool {
        !self.leaked.load(Ordering::Acquire) && self.parts.lease.lost_reason().is_none()
    }

    pub(crate) fn key(&self) -> &LockKey {
        &self.parts.key
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop_renewal();
        if !self.leaked.load(Ordering::Acquire) {
            observe::hold(self.manager.store.backend(), self.parts.acquired_at.elapsed());
        }
        if self.armed.load(Ordering::Acquire) {
            self.manager.release_in_background(
                self.parts.store_key.clone(),
                self.parts.token.clone(),
                Cleanup::DroppedHandle,
            );
        }
    }
}

impl DistributedLock {
    pub(crate) fn new(manager: Arc<ManagerInner>, parts: Parts) -> Self {
        Self::joining(Arc::new(Hold { manager, parts, armed: AtomicBool::new(true), leaked: AtomicBool::new(false) }))
    }

    /// Another handle on an existing hold (a reentrant acquisition).
    pub(crate) fn joining(hold: Arc<Hold>) -> Self {
        Self { hold }
    }

    /// The shared hold, for the reentrant scope's registry.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// How many handles share this lease: 1, or more when a [reentrant
    /// scope](crate::reentrant_scope) took the key again while holding it. The lease is
    /// released when the last of them is released or dropped.
    pub fn hold_count(&self) -> usize {
        Arc::strong_count(&self.hold)
    }

    /// The application's key (without the `lock:` namespace).
    pub fn key(&self) -> &LockKey {
        &self.hold.parts.key
    }

    /// The namespaced key the store holds.
    pub fn store_key(&self) -> &StoreKey {
        &self.hold.parts.store_key
    }

    /// The token of this acquisition.
    pub fn token(&self) -> &Token {
        &self.hold.parts.token
    }

    /// The fencing number of this acquisition, when the store fences
    /// ([`Capabilities::fencing`](crate::Capabilities::fencing)). Pass it to the protected
    /// resource, which rejects writes carrying a smaller number than it has seen.
    pub fn fence(&self) -> Option<u64> {
        self.hold.parts.fence
    }

    /// The lease length this lock was taken (and is renewed) with.
    pub fn ttl(&self) -> Duration {
        self.hold.parts.ttl.as_duration()
    }

    /// Whether a background task renews the lease.
    pub fn is_renewing(&self) -> bool {
        self.hold.parts.watchdog.as_ref().is_some_and(|task| !task.is_finished())
    }

    /// Until when the store surely still holds this lease, unless it is renewed: the
    /// moment the last confirmed acquire or extend was sent, plus the TTL, less an
    /// allowance for clock drift (1 % of the TTL + 2 ms). No other owner can take the key
    /// before this moment; [`lost`](Self::lost) fires the
    /// [loss margin](crate::LockOptions::loss_margin) earlier when no renewal is
    /// confirmed by then.
    pub fn safe_until(&self) -> Instant {
        self.hold.parts.lease.safe_until()
    }

    /// The time left until [`safe_until`](Self::safe_until), by this process's monotonic
    /// clock. Zero once lost.
    pub fn time_left(&self) -> Duration {
        if self.hold.parts.lease.lost_reason().is_some() {
            return Duration::ZERO;
        }
        self.hold.parts.lease.safe_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease is lost: renewal or an extend found it no longer held, renewal
    /// failed too many times in a row, or its deadline passed without a confirmed renewal.
    pub fn is_lost(&self) -> bool {
        self.hold.parts.lease.lost_reason().is_some()
    }

    /// Resolves when the lease is lost, with the reason:
    ///
    /// - [`LossReason::NotHeld`] when renewal (or [`extend`](Self::extend)) found the key no
    ///   longer held by this token — it expired, was taken over, or was released by an
    ///   administrator;
    /// - [`LossReason::DeadlinePassed`] when no renewal was confirmed by the
    ///   [loss margin](crate::LockOptions::loss_margin) before
    ///   [`safe_until`](Self::safe_until) — the store could not be reached in time, or
    ///   the lock is not renewed. It fires at least the margin (a fifth of the TTL by
    ///   default) before the store could hand the key to another owner, so the holder
    ///   has that long to stop its work;
    /// - [`LossReason::RenewalFailed`] when renewal stopped after
    ///   [`Renewal::MAX_CONSECUTIVE_FAILURES`](crate::Renewal::MAX_CONSECUTIVE_FAILURES)
    ///   failed renewals in a row (see [failed renewals](crate::Renewal#failed-renewals)),
    ///   at the latest at that same deadline.
    ///
    /// A normal [`release`](Self::release) consumes the handle; it never fires this.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # async fn demo(locks: distlock_api::LockManager) -> Result<(), distlock_api::LockError> {
    /// let options = distlock_api::LockOptions::new().auto_renew();
    /// let lock = locks.lock_opts("job:import", Duration::from_secs(10), &options).await?;
    /// tokio::select! {
    ///     () = async { /* … the long job … */ } => { lock.release().await?; }
    ///     reason = lock.lost() => eprintln!("stopped: {reason}"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the lease.
    pub async fn lost(&self) -> LossReason {
        self.hold.parts.lease.lost().await
    }

    /// Releases the lock, checking the token: a lock taken over by another owner is never
    /// touched. Stops renewal first.
    ///
    /// Returns `true` when this handle still held the lock and freed it, `false` when the
    /// lease had already expired (and perhaps been taken by another owner, whose lock is
    /// left untouched).
    ///
    /// A handle that shares its lease with others of a [reentrant
    /// scope](crate::reentrant_scope) ([`hold_count`](Self::hold_count) > 1) only ends its
    /// own hold, without a round trip: the store keeps the lease for the others, and the
    /// result says whether the lease is still held (not [lost](Self::lost)).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; the handle is then released once more in
    /// the background, and failing that the lease expires with its TTL.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before the store answered, the handle is
    /// dropped with it and released in the background.
    pub async fn release(self) -> Result<bool, LockError> {
        let hold = match Arc::try_unwrap(self.hold) {
            Ok(hold) => hold,
            // Other handles of a reentrant scope still hold the lease: this hold just ends.
            Err(shared) => return Ok(shared.parts.lease.lost_reason().is_none()),
        };
        hold.stop_renewal();
        let manager = Arc::clone(&hold.manager);
        let backend = manager.store.backend();
        let span = tracing::debug_span!("distlock.release", lock.key = %hold.parts.key, backend);
        let result = manager.store.release(&hold.parts.store_key, &hold.parts.token).instrument(span.clone()).await;
        observe::release(backend, ReleaseOutcome::of(&result));
        let _entered = span.enter();
        match &result {
            Ok(released) => {
                hold.armed.store(false, Ordering::Release);
                tracing::debug!(lock.key = %hold.parts.key, backend, released, "lock released");
            }
            Err(error) => tracing::debug!(
                lock.key = %hold.parts.key,
                backend,
                error = error as &dyn std::error::Error,
                "release failed; retrying in the background"
            ),
        }
        result
    }

    /// Resets the lease to `ttl` from now, if this handle still holds the lock.
    ///
    /// Returns `false` when the lease had already expired or been taken over; the handle is
    /// then lost ([`lost`](Self::lost) fires) and a new acquisition is needed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a zero or too long `ttl`, before any I/O;
    /// [`LockError::Store`] when the store fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the extension either happened atomically or not at all.
    pub async fn extend(&self, ttl: Duration) -> Result<bool, LockError> {
        let ttl = Ttl::new(ttl)?;
        let sent_at = Instant::now();
        let extended = self.hold.manager.store.extend(&self.hold.parts.store_key, &self.hold.parts.token, ttl).await?;
        if extended {
            self.hold.parts.lease.renewed(sent_at, ttl);
        } else {
            self.hold.parts.lease.mark_lost(LossReason::NotHeld);
        }
        Ok(extended)
    }

    /// Gives up the handle without releasing the lock (and stops renewal): it stays held
    /// until its TTL runs out, also for the other handles of a reentrant scope. Returns
    /// the token, e.g. to release it later by other means.
    pub fn leak(self) -> Token {
        self.hold.stop_renewal();
        self.hold.armed.store(false, Ordering::Release);
        self.hold.leaked.store(true, Ordering::Release);
        self.hold.parts.token.clone()
    }
}

impl fmt::Debug for DistributedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLock")
            .field("key", &self.hold.parts.key)
            .field("token", &self.hold.parts.token)
            .field("fence", &self.hold.parts.fence)
            .field("backend", &self.hold.manager.store.backend())
            .field("renewing", &self.is_renewing())
            .field("lost", &self.is_lost())
            .field("hold_count", &self.hold_count())
            .finish()
    }
}
