//! `DistributedLock`: the handle of one held lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::key::{LockKey, StoreKey};
use crate::manager::ManagerInner;
use crate::options::Ttl;
use crate::token::Token;

/// A held lock (seed 000's `DistributedLock`).
///
/// Release it with [`release`](Self::release). A handle dropped without `release` is
/// released in the background by its [`LockManager`](crate::LockManager) — promptly, not
/// only after the TTL, and without doing I/O inside `Drop`. When no tokio runtime is left
/// to run that release, a warning is logged and the lease expires on its own.
/// [`leak`](Self::leak) opts out: the lock then lives until its TTL.
#[must_use = "a lock is released as soon as its handle is dropped"]
pub struct DistributedLock {
    manager: Arc<ManagerInner>,
    key: LockKey,
    store_key: StoreKey,
    token: Token,
    fence: Option<u64>,
    armed: bool,
}

impl DistributedLock {
    pub(crate) fn new(
        manager: Arc<ManagerInner>,
        key: LockKey,
        store_key: StoreKey,
        token: Token,
        fence: Option<u64>,
    ) -> Self {
        Self { manager, key, store_key, token, fence, armed: true }
    }

    /// The application's key (without the `lock:` namespace).
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The namespaced key the store holds.
    pub fn store_key(&self) -> &StoreKey {
        &self.store_key
    }

    /// The token of this acquisition.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The fencing number of this acquisition, when the store fences
    /// ([`Capabilities::fencing`](crate::Capabilities::fencing)). Pass it to the protected
    /// resource, which rejects writes carrying a smaller number than it has seen.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Releases the lock, checking the token (seed 000 §3.2).
    ///
    /// Returns `true` when this handle still held the lock and freed it, `false` when the
    /// lease had already expired (and perhaps been taken by another owner, whose lock is
    /// left untouched).
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
    pub async fn release(mut self) -> Result<bool, LockError> {
        let released = self.manager.store.release(&self.store_key, &self.token).await?;
        self.armed = false;
        tracing::debug!(lock.key = %self.key, backend = self.manager.store.backend(), released, "lock released");
        Ok(released)
    }

    /// Resets the lease to `ttl` from now, if this handle still holds the lock.
    ///
    /// Returns `false` when the lease had already expired or been taken over; the handle is
    /// then useless (a new acquisition is needed).
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
        self.manager.store.extend(&self.store_key, &self.token, ttl).await
    }

    /// Gives up the handle without releasing the lock: it stays held until its TTL runs
    /// out. Returns the token, e.g. to release it later by other means.
    pub fn leak(mut self) -> Token {
        self.armed = false;
        self.token.clone()
    }
}

impl Drop for DistributedLock {
    fn drop(&mut self) {
        if self.armed {
            self.manager.release_in_background(self.store_key.clone(), self.token.clone());
        }
    }
}

impl fmt::Debug for DistributedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLock")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fence", &self.fence)
            .field("backend", &self.manager.store.backend())
            .finish()
    }
}
