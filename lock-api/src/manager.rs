//! `LockManager`: validation, tokens, waiting and background release, shared by all stores.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::LockError;
use crate::key::{LockKey, StoreKey};
use crate::lease::{Lease, Watchdog};
use crate::lock::DistributedLock;
use crate::observe::{self, AcquireOutcome, ReleaseOutcome};
use crate::options::{LockOptions, Renewal, ValidOptions};
use crate::store::{Acquire, DynLockStore, LockStore};
use crate::token::Token;

/// Takes, waits for and releases locks on any [`LockStore`].
///
/// The manager does everything that must behave the same whatever the store: it
/// validates keys and options (before any I/O), puts keys in the `lock:` namespace,
/// generates a fresh [`Token`] per acquisition, waits with a retry interval (waking
/// early when the store signals a release), and releases the locks of dropped
/// [`DistributedLock`] handles in the background.
///
/// It is cheap to clone (an `Arc` inside); clones share the store.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// # use distlock_api::{LockManager, LockStore};
/// # async fn demo(store: Arc<dyn LockStore>) -> Result<(), distlock_api::LockError> {
/// let locks = LockManager::new(store);
/// if let Some(lock) = locks.try_lock("order:42", Duration::from_secs(15), Duration::ZERO, Duration::from_millis(50)).await? {
///     // … the critical section …
///     lock.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockManager {
    inner: Arc<ManagerInner>,
}

pub(crate) struct ManagerInner {
    pub(crate) store: Arc<DynLockStore>,
    pending_releases: AtomicUsize,
    releases_done: Notify,
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("store", &self.inner.store)
            .field("pending_releases", &self.pending_releases())
            .finish()
    }
}

impl LockManager {
    /// A manager over `store`.
    pub fn new(store: Arc<DynLockStore>) -> Self {
        Self {
            inner: Arc::new(ManagerInner {
                store,
                pending_releases: AtomicUsize::new(0),
                releases_done: Notify::new(),
            }),
        }
    }

    /// The store this manager works on.
    pub fn store(&self) -> &Arc<DynLockStore> {
        &self.inner.store
    }

    /// Tries to take `key` for `ttl`, waiting up to `wait` while another owner holds it.
    ///
    /// Seed 000's `tryLock`. `wait` = 0 tries exactly once. With `wait` > 0 it retries until
    /// the deadline, pausing at most `retry_interval` between attempts (less when the store
    /// signals a release), never in a busy loop; the last attempt happens at the deadline.
    /// Returns `Ok(None)` when the lock was still held then.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] / [`LockError::InvalidOptions`] before any I/O;
    /// [`LockError::Store`] when the store fails (the outcome is then unknown, and the
    /// manager releases the attempted lease in the background).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the returned future is dropped (e.g. by `tokio::time::timeout`)
    /// while an attempt is in flight, the lease that attempt may have taken is released in
    /// the background; no lock is left behind.
    pub async fn try_lock(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
        retry_interval: Duration,
    ) -> Result<Option<DistributedLock>, LockError> {
        self.try_lock_with(key, &LockOptions::new(ttl).wait(wait).retry_interval(retry_interval)).await
    }

    /// [`try_lock`](Self::try_lock) with [`LockOptions`].
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn try_lock_with(&self, key: &str, options: &LockOptions) -> Result<Option<DistributedLock>, LockError> {
        let key = LockKey::new(key)?;
        let options = options.validate()?;
        self.acquire(key, options).await
    }

    /// Like [`try_lock`](Self::try_lock), but a lock still held at the deadline is an error.
    ///
    /// # Errors
    ///
    /// [`LockError::NotAcquired`] when the lock was held until the deadline; otherwise as
    /// [`try_lock`](Self::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn lock(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
        retry_interval: Duration,
    ) -> Result<DistributedLock, LockError> {
        self.lock_with(key, &LockOptions::new(ttl).wait(wait).retry_interval(retry_interval)).await
    }

    /// [`lock`](Self::lock) with [`LockOptions`].
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn lock_with(&self, key: &str, options: &LockOptions) -> Result<DistributedLock, LockError> {
        let key = LockKey::new(key)?;
        let options = options.validate()?;
        let name = key.as_str().to_owned();
        self.acquire(key, options).await?.ok_or(LockError::NotAcquired { key: name })
    }

    /// Runs `block` while holding `key`, then releases the lock.
    ///
    /// Seed 000's `withLock`. The lock is released whether `block` returns `Ok`, returns
    /// `Err` or panics (on panic, through the dropped handle's background release). The
    /// block's own result is returned unchanged: a failed release is logged with
    /// `tracing`, never allowed to replace the block's error or value.
    ///
    /// With renewal on ([`with_lock_options`](Self::with_lock_options) and
    /// [`LockOptions::auto_renew`]) the block is raced against the loss of the lease: if
    /// the lease is lost first, the block is dropped and
    /// [`LockError::LeaseLost`] returned, instead of letting the block run on unprotected.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # async fn demo(locks: distlock_api::LockManager) -> Result<(), distlock_api::LockError> {
    /// let paid = locks
    ///     .with_lock("order:42", Duration::from_secs(15), Duration::ZERO, Duration::from_millis(50), || async {
    ///         // … charge the order exactly once …
    ///         Ok::<_, distlock_api::LockError>(true)
    ///     })
    ///     .await?;
    /// # let _ = paid; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `E::from(LockError::NotAcquired { key })` when the lock stayed held until the
    /// deadline, `E::from` of any other [`LockError`] from acquisition, or the block's
    /// own error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while `block` runs drops the handle, which releases the lock
    /// in the background; `block` itself is dropped mid-way, as any future would be.
    pub async fn with_lock<F, Fut, T, E>(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
        retry_interval: Duration,
        block: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.with_lock_options(key, &LockOptions::new(ttl).wait(wait).retry_interval(retry_interval), block).await
    }

    /// [`with_lock`](Self::with_lock) with [`LockOptions`].
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Self::with_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_lock_options<F, Fut, T, E>(&self, key: &str, options: &LockOptions, block: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let lock = self.lock_with(key, options).await?;
        let outcome = if matches!(options.renewal, Renewal::Off) {
            block().await
        } else {
            tokio::select! {
                outcome = block() => outcome,
                reason = lock.lost() => {
                    let key = lock.key().as_str().to_owned();
                    drop(lock);
                    return Err(E::from(LockError::LeaseLost { key, reason }));
                }
            }
        };
        let key = lock.key().as_str().to_owned();
        match lock.release().await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                lock.key = %key,
                backend = self.inner.store.backend(),
                "lock had already expired or been taken over when the block finished"
            ),
            Err(error) => tracing::warn!(
                lock.key = %key,
                backend = self.inner.store.backend(),
                error = &error as &dyn std::error::Error,
                "failed to release lock after the block; it will be freed when its TTL expires"
            ),
        }
        outcome
    }

    /// The number of background releases (of dropped handles or cancelled acquisitions)
    /// still in flight.
    pub fn pending_releases(&self) -> usize {
        self.inner.pending_releases.load(Ordering::Acquire)
    }

    /// Waits until every background release started so far has finished, e.g. before
    /// shutting the runtime down so that dropped locks are freed now rather than by TTL.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; the releases go on.
    pub async fn flush_releases(&self) {
        loop {
            let done = self.inner.releases_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.pending_releases() == 0 {
                return;
            }
            done.await;
        }
    }

    async fn acquire(&self, key: LockKey, options: ValidOptions) -> Result<Option<DistributedLock>, LockError> {
        let backend = self.inner.store.backend();
        let span = tracing::debug_span!("distlock.acquire", lock.key = %key, backend);
        let started = Instant::now();
        let mut contended = false;
        let result = self.acquire_loop(key, options, &mut contended).instrument(span).await;
        let outcome = match &result {
            Ok(Some(_)) => AcquireOutcome::Acquired,
            Ok(None) => AcquireOutcome::Contended,
            Err(_) => AcquireOutcome::Error,
        };
        observe::acquire(backend, outcome, started.elapsed());
        if contended {
            observe::contention(backend);
        }
        result
    }

    async fn acquire_loop(
        &self,
        key: LockKey,
        options: ValidOptions,
        contended: &mut bool,
    ) -> Result<Option<DistributedLock>, LockError> {
        let store = &self.inner.store;
        let store_key = key.to_store_key();
        let token = Token::generate();
        let deadline = Instant::now() + options.wait;
        loop {
            let attempt = InFlightAcquire { manager: &self.inner, key: &store_key, token: &token, armed: true };
            let sent_at = Instant::now();
            let outcome = store.try_acquire(&store_key, &token, options.ttl).await;
            match outcome {
                Ok(Acquire::Acquired { fence }) => {
                    attempt.disarm();
                    tracing::debug!(lock.key = %key, backend = store.backend(), fence, "lock acquired");
                    let lease = Lease::new(sent_at, options.ttl, store.backend(), key.clone());
                    let watchdog = options.renew_every.map(|every| {
                        let watchdog = Watchdog {
                            store: Arc::clone(store),
                            key: store_key.clone(),
                            token: token.clone(),
                            ttl: options.ttl,
                            every,
                            lease: Arc::clone(&lease),
                        };
                        tokio::spawn(watchdog.run()).abort_handle()
                    });
                    let parts = crate::lock::Parts {
                        key,
                        store_key,
                        token,
                        fence,
                        ttl: options.ttl,
                        lease,
                        watchdog,
                        acquired_at: Instant::now(),
                    };
                    return Ok(Some(DistributedLock::new(Arc::clone(&self.inner), parts)));
                }
                Ok(Acquire::Held { .. }) => {
                    attempt.disarm();
                    *contended = true;
                }
                // The attempt's outcome is unknown: dropping `attempt` releases it in the background.
                Err(error) => {
                    tracing::debug!(
                        lock.key = %key,
                        backend = store.backend(),
                        error = &error as &dyn std::error::Error,
                        "lock acquisition failed"
                    );
                    return Err(error);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(lock.key = %key, backend = store.backend(), "lock held by another owner");
                return Ok(None);
            }
            let nap = options.retry_interval.min(deadline - now);
            if let Err(error) = store.wait_for_release(&store_key, nap).await {
                tracing::debug!(
                    lock.key = %key,
                    backend = store.backend(),
                    error = &error as &dyn std::error::Error,
                    "release notification failed; sleeping instead"
                );
                tokio::time::sleep_until(now + nap).await;
            }
        }
    }
}

impl ManagerInner {
    /// Hands `key`/`token` to a background task that releases it. Never does I/O itself and
    /// never panics: without a runtime the lease is left to expire.
    pub(crate) fn release_in_background(self: &Arc<Self>, key: StoreKey, token: Token) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                lock.key = %key.lock_key(),
                backend = self.store.backend(),
                "lock dropped outside a tokio runtime; it will be freed when its TTL expires"
            );
            return;
        };
        self.pending_releases.fetch_add(1, Ordering::AcqRel);
        let inner = Arc::clone(self);
        let backend = self.store.backend();
        let span = tracing::debug_span!(parent: None, "distlock.release", lock.key = %key.lock_key(), backend, background = true);
        let release = async move {
            let result = inner.store.release(&key, &token).await;
            observe::release(backend, ReleaseOutcome::of(&result));
            match result {
                Ok(released) => {
                    tracing::debug!(lock.key = %key.lock_key(), backend, released, "dropped lock released in the background");
                }
                Err(error) => tracing::warn!(
                    lock.key = %key.lock_key(),
                    backend,
                    error = &error as &dyn std::error::Error,
                    "background release failed; the lock will be freed when its TTL expires"
                ),
            }
            if inner.pending_releases.fetch_sub(1, Ordering::AcqRel) == 1 {
                inner.releases_done.notify_waiters();
            }
        };
        runtime.spawn(release.instrument(span));
    }
}

/// Releases an acquisition attempt whose outcome is unknown: the future was dropped
/// mid-flight or the store failed.
struct InFlightAcquire<'a> {
    manager: &'a Arc<ManagerInner>,
    key: &'a StoreKey,
    token: &'a Token,
    armed: bool,
}

impl InFlightAcquire<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlightAcquire<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.manager.release_in_background(self.key.clone(), self.token.clone());
        }
    }
}
