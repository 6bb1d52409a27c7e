//! `LockManager`: validation, tokens, waiting and background release, shared by all stores.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Acquisition, DefaultWait, Engine, EngineRef, EngineRefs, Hold, Plan, Target};
use crate::error::LockError;
use crate::group::{Admission, OwnerId, Permits};
use crate::key::LockKey;
use crate::lock::DistributedLock;
use crate::options::{LockOptions, ValidOptions};
use crate::store::DynLockStore;

/// Takes, waits for and releases locks on any [`LockStore`](crate::LockStore).
///
/// The manager does everything that must behave the same whatever the store: it
/// validates keys and options (before any I/O), puts keys in the `lock:` namespace,
/// generates a fresh [`Token`](crate::Token) per acquisition, waits with a retry interval (waking
/// early when the store signals a release), and releases the locks of dropped
/// [`DistributedLock`] handles in the background.
///
/// Every call takes the key and the TTL; the `_opts` form adds [`LockOptions`] (wait,
/// retry interval, renewal, loss margin). How long each call waits:
///
/// | call | returns | waits |
/// |---|---|---|
/// | [`try_lock`](Self::try_lock) | `Option<DistributedLock>` | never: one attempt |
/// | [`lock`](Self::lock) | `DistributedLock` | until it gets the lock |
/// | [`with_lock`](Self::with_lock) | the block's result, or `NotAcquired` | never: one attempt |
/// | `…_opts` | as above | up to [`LockOptions::wait`] when set |
///
/// It is cheap to clone (an `Arc` inside); clones share the store.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// # use distlock::{LockManager, LockStore};
/// # async fn demo(store: Arc<dyn LockStore>) -> Result<(), distlock::LockError> {
/// let locks = LockManager::new(store);
/// if let Some(lock) = locks.try_lock("order:42", Duration::from_secs(15)).await? {
///     // … the critical section …
///     lock.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockManager {
    /// The engine, through the references its holds keep, one per thread slot.
    refs: Arc<EngineRefs>,
    admission: Admission,
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("store", &self.engine().store)
            .field("owner", &self.engine().owner)
            .field("admission", &self.admission)
            .field("pending_releases", &self.pending_releases())
            .finish()
    }
}

impl LockManager {
    /// A manager over `store`.
    pub fn new(store: Arc<DynLockStore>) -> Self {
        Self::over(Engine::new(store, OwnerId::for_process(), Permits::DEFAULT), Admission::default())
    }

    fn over(engine: Engine, admission: Admission) -> Self {
        Self { refs: Arc::new(EngineRefs::new(&Arc::new(engine))), admission }
    }

    /// This manager with `owner` recorded on its [group](Self::lock_group) holds, e.g. to
    /// [release what a previous run left](Self::release_owner) at start-up
    /// ([`OwnerId::from_env`] reads the instance's name from the environment). Call it
    /// when building the manager: clones made before keep the old owner.
    #[must_use]
    pub fn with_owner(self, owner: OwnerId) -> Self {
        let permits = self.engine().permits;
        Self::over(Engine::new(Arc::clone(&self.engine().store), owner, permits), self.admission)
    }

    /// This manager with `permits` assumed for group members whose name has no entry in
    /// the store's permits table ([`Permits::DEFAULT`] unless set; [`Permits::SEED`] for
    /// one reader at a time). Every instance sharing the names should use the same
    /// setting, or record the permits in the store with [`set_permits`](Self::set_permits).
    #[must_use]
    pub fn with_permits(self, permits: Permits) -> Self {
        let owner = self.engine().owner.clone();
        Self::over(Engine::new(Arc::clone(&self.engine().store), owner, permits), self.admission)
    }

    /// This manager with `admission` deciding what refuses its group requests besides the
    /// permits: [`Admission::Queued`] (the default) — holders and the places of waiting
    /// groups, so a waiting writer holds back new readers — or
    /// [`Admission::HoldersOnly`] — live holders alone, so a reader is refused only while
    /// a writer holds (the lock-service specification's rule, with
    /// [`Permits::SEED`] its permits). Single locks are not affected.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use distlock::{Admission, LockManager, LockStore, Permits};
    /// # fn demo(store: Arc<dyn LockStore>) {
    /// let locks = LockManager::new(store).with_permits(Permits::SEED).with_admission(Admission::HoldersOnly);
    /// assert_eq!(locks.admission(), Admission::HoldersOnly);
    /// # }
    /// ```
    #[must_use]
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// What refuses this manager's group requests besides the permits (see
    /// [`with_admission`](Self::with_admission)).
    pub fn admission(&self) -> Admission {
        self.admission
    }

    /// The owner recorded on this manager's group holds.
    pub fn owner(&self) -> &OwnerId {
        &self.engine().owner
    }

    /// The store this manager works on.
    pub fn store(&self) -> &Arc<DynLockStore> {
        &self.engine().store
    }

    /// Takes `key` for `ttl` if it is free now, in one attempt: never waits.
    ///
    /// Returns `Ok(None)` when another owner holds it. To wait for it, use
    /// [`lock`](Self::lock), or [`try_lock_opts`](Self::try_lock_opts) with
    /// [`LockOptions::wait`].
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
    pub async fn try_lock(&self, key: &str, ttl: Duration) -> Result<Option<DistributedLock>, LockError> {
        // As `try_lock_opts`, without its future around this one.
        let (key, options) = checked(key, ttl, &LockOptions::new())?;
        self.acquire(key, options, DefaultWait::OneAttempt).await
    }

    /// Takes `key` for `ttl`, waiting up to `options.wait` while another owner holds it
    /// (unset: one attempt, no waiting).
    ///
    /// While waiting it retries until the deadline, pausing at most
    /// `options.retry_interval` between attempts (less when the store signals a release),
    /// never in a busy loop; the last attempt happens at the deadline. Returns `Ok(None)`
    /// when the lock was still held then.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn try_lock_opts(
        &self,
        key: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Option<DistributedLock>, LockError> {
        let (key, options) = checked(key, ttl, options)?;
        self.acquire(key, options, DefaultWait::OneAttempt).await
    }

    /// Takes `key` for `ttl`, waiting as long as it takes while another owner holds it.
    ///
    /// Like `tokio::sync::Mutex::lock`, it returns only with the lock (or an error); bound
    /// the wait with [`lock_opts`](Self::lock_opts) and [`LockOptions::wait`], or with
    /// `tokio::time::timeout` (cancel safe). Between attempts it sleeps at most the
    /// 50 ms retry interval, waking at once when the store signals a release.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] / [`LockError::InvalidOptions`] before any I/O;
    /// [`LockError::Store`] when the store fails.
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn lock(&self, key: &str, ttl: Duration) -> Result<DistributedLock, LockError> {
        self.lock_opts(key, ttl, &LockOptions::new()).await
    }

    /// Takes `key` for `ttl`, waiting up to `options.wait` (unset: as long as it takes);
    /// a lock still held at the deadline is [`LockError::NotAcquired`].
    ///
    /// # Errors
    ///
    /// [`LockError::NotAcquired`] when the lock was held until the deadline; otherwise as
    /// [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock`](Self::try_lock).
    pub async fn lock_opts(
        &self,
        key: &str,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<DistributedLock, LockError> {
        let (key, options) = checked(key, ttl, options)?;
        self.lock_valid(key, options, DefaultWait::Unbounded).await
    }

    async fn lock_valid(
        &self,
        key: LockKey,
        options: ValidOptions,
        default_wait: DefaultWait,
    ) -> Result<DistributedLock, LockError> {
        let name = key.as_str().to_owned();
        self.acquire(key, options, default_wait).await?.ok_or(LockError::NotAcquired { key: name })
    }

    /// Runs `block` while holding `key` for `ttl`, taken in one attempt (no waiting), then
    /// releases the lock; a held lock is [`LockError::NotAcquired`].
    ///
    /// The lock is released whether `block` returns `Ok`, returns `Err` or panics (on
    /// panic, through the dropped handle's background release). The block's own result is
    /// returned unchanged: a failed release is logged with `tracing`, never allowed to
    /// replace the block's error or value.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # async fn demo(locks: distlock::LockManager) -> Result<(), distlock::LockError> {
    /// let paid = locks
    ///     .with_lock("order:42", Duration::from_secs(15), || async {
    ///         // … charge the order exactly once …
    ///         Ok::<_, distlock::LockError>(true)
    ///     })
    ///     .await?;
    /// # let _ = paid; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `E::from(LockError::NotAcquired { key })` when the lock was held, `E::from` of any
    /// other [`LockError`] from acquisition, or the block's own error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while `block` runs drops the handle, which releases the lock
    /// in the background; `block` itself is dropped mid-way, as any future would be.
    pub async fn with_lock<F, Fut, T, E>(&self, key: &str, ttl: Duration, block: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.with_lock_opts(key, ttl, &LockOptions::new(), block).await
    }

    /// Runs `block` while holding `key` for `ttl`, waiting up to `options.wait` for it
    /// (unset: one attempt), then releases the lock.
    ///
    /// As [`with_lock`](Self::with_lock); in addition, with renewal on
    /// ([`LockOptions::auto_renew`]) the block is raced against the loss of the lease: if
    /// the lease is lost first, the block is dropped and [`LockError::LeaseLost`]
    /// returned, instead of letting the block run on unprotected.
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Self::with_lock), plus [`LockError::LeaseLost`].
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_lock_opts<F, Fut, T, E>(
        &self,
        key: &str,
        ttl: Duration,
        options: &LockOptions,
        block: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let (key, options) = checked(key, ttl, options)?;
        let lock = self.lock_valid(key, options, DefaultWait::OneAttempt).await?;
        Hold::run_then_release(lock.into_hold(), options.renew_every.is_some(), block()).await
    }

    /// The number of background releases (of dropped handles or cancelled acquisitions)
    /// still in flight.
    pub fn pending_releases(&self) -> usize {
        self.engine().pending_releases()
    }

    /// Waits until every background release started so far has finished, e.g. before
    /// shutting the runtime down so that dropped locks are freed now rather than by TTL,
    /// or in a test right after dropping a handle.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; the releases go on.
    pub async fn flush_releases(&self) {
        self.engine().flush_releases().await;
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.refs.engine()
    }

    /// The engine reference a hold taken on this thread keeps.
    pub(crate) fn engine_ref(&self) -> &Arc<EngineRef> {
        self.refs.current()
    }

    async fn acquire(
        &self,
        key: LockKey,
        options: ValidOptions,
        default_wait: DefaultWait,
    ) -> Result<Option<DistributedLock>, LockError> {
        let engine = self.engine_ref();
        let acquisition = Acquisition {
            target: Target::Key(key.into_store_key()),
            plan: Plan::key(&*engine.engine().store, options.fairness),
            options,
            default_wait,
        };
        Ok(Engine::acquire(engine, acquisition).await?.map(DistributedLock::new))
    }
}

/// `key` and `options` for `ttl`, checked before any I/O.
fn checked(key: &str, ttl: Duration, options: &LockOptions) -> Result<(LockKey, ValidOptions), LockError> {
    Ok((LockKey::try_from(key)?, options.validate(ttl)?))
}
