//! `DistributedLock`: the handle of one held lock, a view of the engine's hold.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Hold;
use crate::error::{LockError, LossReason};
use crate::key::{LockKey, StoreKey};
use crate::token::Token;

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

impl DistributedLock {
    /// The handle of `hold`: a new acquisition, or another handle on a reentrant scope's hold.
    pub(crate) fn new(hold: Arc<Hold>) -> Self {
        Self { hold }
    }

    /// The engine's hold behind this handle.
    pub(crate) fn into_hold(self) -> Arc<Hold> {
        self.hold
    }

    /// How many handles share this lease: 1, or more when a [reentrant
    /// scope](crate::reentrant_scope) took the key again while holding it. The lease is
    /// released when the last of them is released or dropped.
    pub fn hold_count(&self) -> usize {
        Arc::strong_count(&self.hold)
    }

    /// The application's key (without the `lock:` namespace).
    pub fn key(&self) -> &LockKey {
        self.hold.label()
    }

    /// The namespaced key the store holds.
    pub fn store_key(&self) -> &StoreKey {
        self.hold.target().first()
    }

    /// The token of this acquisition.
    pub fn token(&self) -> &Token {
        self.hold.token()
    }

    /// The fencing number of this acquisition, when the store fences
    /// ([`Capabilities::fencing`](crate::Capabilities::fencing)). Pass it to the protected
    /// resource, which rejects writes carrying a smaller number than it has seen.
    pub fn fence(&self) -> Option<u64> {
        self.hold.fence()
    }

    /// The lease length this lock was taken (and is renewed) with.
    pub fn ttl(&self) -> Duration {
        self.hold.ttl()
    }

    /// Whether a background task renews the lease.
    pub fn is_renewing(&self) -> bool {
        self.hold.is_renewing()
    }

    /// Until when the store surely still holds this lease, unless it is renewed: the
    /// moment the last confirmed acquire or extend was sent, plus the TTL, less an
    /// allowance for clock drift (1 % of the TTL + 2 ms). No other owner can take the key
    /// before this moment; [`lost`](Self::lost) fires the
    /// [loss margin](crate::LockOptions::loss_margin) earlier when no renewal is
    /// confirmed by then.
    pub fn safe_until(&self) -> Instant {
        self.hold.safe_until()
    }

    /// The time left until [`safe_until`](Self::safe_until), by this process's monotonic
    /// clock. Zero once lost.
    pub fn time_left(&self) -> Duration {
        self.hold.time_left()
    }

    /// Whether the lease is lost: renewal or an extend found it no longer held, renewal
    /// failed too many times in a row, or its deadline passed without a confirmed renewal.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
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
    /// # async fn demo(locks: distlock::LockManager) -> Result<(), distlock::LockError> {
    /// let options = distlock::LockOptions::new().auto_renew();
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
        self.hold.lost().await
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
        Hold::release(self.hold).await
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
        self.hold.extend(ttl).await
    }

    /// Gives up the handle without releasing the lock (and stops renewal): it stays held
    /// until its TTL runs out, also for the other handles of a reentrant scope. Returns
    /// the token, e.g. to release it later by other means.
    pub fn leak(self) -> Token {
        self.hold.leak();
        self.hold.token().clone()
    }
}

impl fmt::Debug for DistributedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLock")
            .field("key", self.key())
            .field("token", self.token())
            .field("fence", &self.fence())
            .field("backend", &self.hold.backend())
            .field("renewing", &self.is_renewing())
            .field("lost", &self.is_lost())
            .field("hold_count", &self.hold_count())
            .finish()
    }
}
