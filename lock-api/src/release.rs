//! Background releases: the manager's shared state, and the hand-over of leases that a
//! dropped handle or an acquisition of unknown outcome leaves behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::Instrument;

use crate::error::LockError;
use crate::group::{GroupLockStore, OwnerId, Permits};
use crate::key::StoreKey;
use crate::observe::{self, ReleaseOutcome};
use crate::options::Ttl;
use crate::store::DynLockStore;
use crate::token::Token;

/// Why a lease is released in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cleanup {
    /// A handle was dropped (or its release failed): the user held this lock.
    DroppedHandle,
    /// An acquisition failed or was cancelled while its outcome was unknown: the lease
    /// may not exist at all, so failing to free it is not news for the user.
    UnknownAcquire,
}

/// What a handle holds: one key, or every member of a group (released and renewed in
/// one operation).
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Key(StoreKey),
    Group(Arc<[StoreKey]>),
}

impl Target {
    /// The application key to name in logs (a group's first member).
    pub(crate) fn log_key(&self) -> &str {
        match self {
            Self::Key(key) => key.lock_key(),
            Self::Group(keys) => keys.first().map_or("", StoreKey::lock_key),
        }
    }

    /// Extends the lease; `Ok(false)` when (any part of) it is no longer held.
    pub(crate) async fn extend(&self, store: &DynLockStore, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        match self {
            Self::Key(key) => store.extend(key, token, ttl).await,
            Self::Group(keys) => {
                Ok(group_store(store, "extend_group")?.extend_group(keys, token, ttl).await? == keys.len())
            }
        }
    }

    /// Releases the lease; `Ok(false)` when nothing was held any more.
    pub(crate) async fn release(&self, store: &DynLockStore, token: &Token) -> Result<bool, LockError> {
        match self {
            Self::Key(key) => store.release(key, token).await,
            Self::Group(keys) => Ok(group_store(store, "release_group")?.release_group(keys, token).await? > 0),
        }
    }
}

/// The store's group primitives, or `Unsupported`.
pub(crate) fn group_store<'a>(
    store: &'a DynLockStore,
    operation: &'static str,
) -> Result<&'a dyn GroupLockStore, LockError> {
    store.groups().ok_or(LockError::Unsupported { backend: store.backend(), operation })
}

/// What a manager and its handles share.
#[derive(Debug)]
pub(crate) struct ManagerInner {
    pub(crate) store: Arc<DynLockStore>,
    /// The owner recorded with group holds.
    pub(crate) owner: OwnerId,
    /// Group members' permits when neither the member nor the store's table has any.
    pub(crate) permits: Permits,
    pending_releases: AtomicUsize,
    releases_done: Notify,
}

impl ManagerInner {
    pub(crate) fn new(store: Arc<DynLockStore>, owner: OwnerId, permits: Permits) -> Self {
        Self { store, owner, permits, pending_releases: AtomicUsize::new(0), releases_done: Notify::new() }
    }

    pub(crate) fn pending_releases(&self) -> usize {
        self.pending_releases.load(Ordering::Acquire)
    }

    /// Resolves once no background release is in flight.
    pub(crate) async fn flush_releases(&self) {
        loop {
            let done = self.releases_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.pending_releases() == 0 {
                return;
            }
            done.await;
        }
    }

    /// Hands `key`/`token` to a background task that releases it. Never does I/O itself and
    /// never panics: without a runtime the lease is left to expire.
    pub(crate) fn release_in_background(self: &Arc<Self>, key: impl Into<Target>, token: Token, why: Cleanup) {
        let key: Target = key.into();
        let backend = self.store.backend();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                lock.key = %key.log_key(),
                backend,
                "lock dropped outside a tokio runtime; it will be freed when its TTL expires"
            );
            return;
        };
        self.pending_releases.fetch_add(1, Ordering::AcqRel);
        let inner = Arc::clone(self);
        let span = tracing::debug_span!(parent: None, "distlock.release", lock.key = %key.log_key(), backend, background = true);
        let release = async move {
            let result = key.release(&*inner.store, &token).await;
            match (&result, why) {
                (Ok(released), Cleanup::DroppedHandle) => {
                    observe::release(backend, ReleaseOutcome::of(&result));
                    tracing::debug!(lock.key = %key.log_key(), backend, released, "dropped lock released in the background");
                }
                (Err(error), Cleanup::DroppedHandle) => {
                    observe::release(backend, ReleaseOutcome::of(&result));
                    tracing::warn!(
                        lock.key = %key.log_key(),
                        backend,
                        error = error as &dyn std::error::Error,
                        "background release failed; the lock will be freed when its TTL expires"
                    );
                }
                (Ok(released), Cleanup::UnknownAcquire) => tracing::debug!(
                    lock.key = %key.log_key(),
                    backend,
                    released,
                    "cleaned up an acquisition whose outcome was unknown"
                ),
                (Err(error), Cleanup::UnknownAcquire) => tracing::debug!(
                    lock.key = %key.log_key(),
                    backend,
                    error = error as &dyn std::error::Error,
                    "could not clean up an acquisition whose outcome was unknown; a lease it may have taken expires with its TTL"
                ),
            }
            if inner.pending_releases.fetch_sub(1, Ordering::AcqRel) == 1 {
                inner.releases_done.notify_waiters();
            }
        };
        runtime.spawn(release.instrument(span));
    }
}

impl From<StoreKey> for Target {
    fn from(key: StoreKey) -> Self {
        Self::Key(key)
    }
}

/// Releases an acquisition attempt whose outcome is unknown: the future was dropped
/// mid-flight or the store failed. Disarm it once the store answered.
pub(crate) struct InFlightAcquire<'a> {
    pub(crate) manager: &'a Arc<ManagerInner>,
    pub(crate) key: &'a StoreKey,
    pub(crate) token: &'a Token,
}

impl InFlightAcquire<'_> {
    pub(crate) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for InFlightAcquire<'_> {
    fn drop(&mut self) {
        self.manager.release_in_background(self.key.clone(), self.token.clone(), Cleanup::UnknownAcquire);
    }
}

/// A waiter's place in a key's queue (or a waiting group's places on its names): until
/// disarmed (the wait ended with the lock), its drop leaves the queue in the background
/// (a release with the waiter's token also frees the key if it was handed to the waiter
/// meanwhile, and a group release frees the group's places).
pub(crate) struct QueuePlace {
    pub(crate) manager: Arc<ManagerInner>,
    pub(crate) target: Target,
    pub(crate) token: Token,
}

impl QueuePlace {
    pub(crate) fn disarm(self) {
        let _ = std::mem::ManuallyDrop::new(self);
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.manager.release_in_background(self.target.clone(), self.token.clone(), Cleanup::UnknownAcquire);
    }
}
