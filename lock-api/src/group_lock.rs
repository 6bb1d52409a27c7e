//! Taking lock groups through the manager, and the `GroupLock` handle.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{LockError, LossReason};
use crate::group::{Admission, GroupAcquire, GroupMember, GroupRequest, LockGroup, OwnerId, StoreMember};
use crate::hold::{LockInfo, LockMode};
use crate::key::{LockKey, StoreKey};
use crate::lease::{Lease, Watchdog};
use crate::manager::LockManager;
use crate::observe::{self, AcquireOutcome, ReleaseOutcome};
use crate::options::{Fairness, LockOptions, Ttl, ValidOptions};
use crate::release::{group_store, Cleanup, ManagerInner, QueuePlace, Target};
use crate::token::Token;

impl LockManager {
    /// Takes every member of `group` for `ttl` if all can be granted now, in one atomic
    /// attempt (the lock-service specification's `tryLocks`): `None` when any member is
    /// held in a conflicting way or out of permits; nothing is left behind then.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use distlock_api::{GroupMember, LockGroup, LockManager};
    /// # async fn demo(locks: LockManager) -> Result<(), distlock_api::LockError> {
    /// let group = LockGroup::new([GroupMember::exclusive("WS2")?, GroupMember::shared("WS1")?])?;
    /// if let Some(held) = locks.try_lock_group(&group, Duration::from_secs(30)).await? {
    ///     println!("stamp {:?}", held.stamp());
    ///     held.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] / [`LockError::InvalidGroup`] (a group larger than
    /// the store takes) before any I/O; [`LockError::Unsupported`] on a store without
    /// groups; [`LockError::Store`] when the store fails (what the attempt may have taken
    /// is released in the background).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_lock`](Self::try_lock).
    pub async fn try_lock_group(&self, group: &LockGroup, ttl: Duration) -> Result<Option<GroupLock>, LockError> {
        self.try_lock_group_opts(group, ttl, &LockOptions::new()).await
    }

    /// As [`try_lock_group`](Self::try_lock_group), waiting up to `options.wait` (unset:
    /// one attempt), woken by releases. While it waits, its exclusive members hold back
    /// new shared holders (writer preference), unless the manager's
    /// [admission](Self::with_admission) is [`Admission::HoldersOnly`].
    ///
    /// # Errors
    ///
    /// As [`try_lock_group`](Self::try_lock_group).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; the intents of a cancelled wait expire within a few retry intervals.
    pub async fn try_lock_group_opts(
        &self,
        group: &LockGroup,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Option<GroupLock>, LockError> {
        let options = options.validate(ttl)?;
        self.acquire_group(group, options, false).await
    }

    /// Takes every member of `group` for `ttl`, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`try_lock_group`](Self::try_lock_group).
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock_group_opts`](Self::try_lock_group_opts).
    pub async fn lock_group(&self, group: &LockGroup, ttl: Duration) -> Result<GroupLock, LockError> {
        self.lock_group_opts(group, ttl, &LockOptions::new()).await
    }

    /// Takes every member of `group` for `ttl`, waiting up to `options.wait` (unset: as
    /// long as it takes); still blocked at the deadline is [`LockError::NotAcquired`]
    /// naming the first member.
    ///
    /// # Errors
    ///
    /// As [`try_lock_group`](Self::try_lock_group), plus [`LockError::NotAcquired`].
    ///
    /// # Cancel safety
    ///
    /// As [`try_lock_group_opts`](Self::try_lock_group_opts).
    pub async fn lock_group_opts(
        &self,
        group: &LockGroup,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<GroupLock, LockError> {
        let options = options.validate(ttl)?;
        let first = group.members()[0].key.as_str().to_owned();
        self.acquire_group(group, options, true).await?.ok_or(LockError::NotAcquired { key: first })
    }

    /// Runs `block` while holding every member of `group` for `ttl`, taken in one attempt
    /// unless `options.wait` says otherwise, then releases the group — as
    /// [`with_lock_opts`](Self::with_lock_opts) does for one key: released on `Ok`, `Err`
    /// and panic; the block's result is returned unchanged; with renewal, a lost lease
    /// drops the block and returns [`LockError::LeaseLost`].
    ///
    /// # Errors
    ///
    /// `E::from(LockError::NotAcquired { key })` (the first member) when the group was
    /// not granted, `E::from` of any other [`LockError`], or the block's own error.
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_lock_group_opts<F, Fut, T, E>(
        &self,
        group: &LockGroup,
        ttl: Duration,
        options: &LockOptions,
        block: F,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let valid = options.validate(ttl)?;
        let first = group.members()[0].key.as_str().to_owned();
        let held =
            self.acquire_group(group, valid, false).await?.ok_or(LockError::NotAcquired { key: first.clone() })?;
        let outcome = if valid.renew_every.is_none() {
            block().await
        } else {
            tokio::select! {
                outcome = block() => outcome,
                reason = held.lost() => {
                    drop(held);
                    return Err(E::from(LockError::LeaseLost { key: first, reason }));
                }
            }
        };
        if let Err(error) = held.release().await {
            tracing::warn!(
                lock.key = %first,
                backend = self.store().backend(),
                error = &error as &dyn std::error::Error,
                "failed to release the lock group after the block"
            );
        }
        outcome
    }

    /// A read lock: `key` in shared mode, waiting as long as it takes (behind waiting
    /// writers; with [`Admission::HoldersOnly`], only for writers that hold).
    ///
    /// # Errors
    ///
    /// As [`lock_group`](Self::lock_group).
    pub async fn lock_read(&self, key: &str, ttl: Duration) -> Result<GroupLock, LockError> {
        self.lock_group(&LockGroup::single(GroupMember::shared(key)?)?, ttl).await
    }

    /// A write lock: `key` in exclusive mode, waiting as long as it takes; while it
    /// waits, new readers wait behind it (not with [`Admission::HoldersOnly`]).
    ///
    /// # Errors
    ///
    /// As [`lock_group`](Self::lock_group).
    pub async fn lock_write(&self, key: &str, ttl: Duration) -> Result<GroupLock, LockError> {
        self.lock_group(&LockGroup::single(GroupMember::exclusive(key)?)?, ttl).await
    }

    /// One slot of the semaphore `key` of `permits` slots (shared mode; the store's
    /// permits table overrides `permits`), waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] for zero permits; otherwise as
    /// [`lock_group`](Self::lock_group).
    pub async fn acquire_permit(&self, key: &str, permits: u32, ttl: Duration) -> Result<GroupLock, LockError> {
        self.lock_group(&LockGroup::single(GroupMember::shared(key)?.with_permits(permits))?, ttl).await
    }

    /// Releases a group by its [stamp](GroupLock::into_stamp) (the specification's
    /// `releaseLocks(stamp)`).
    ///
    /// # Errors
    ///
    /// [`LockError::GroupNotHeld`] when none of its holds was held any more (released
    /// already, or expired); [`LockError::Store`] when the store fails.
    pub async fn release_stamp(&self, stamp: &GroupStamp) -> Result<(), LockError> {
        let groups = group_store(&**self.store(), "release_group")?;
        let freed = groups.release_group(&stamp.keys, &stamp.token).await?;
        observe::release(self.store().backend(), ReleaseOutcome::of(&Ok::<bool, LockError>(freed > 0)));
        if freed == 0 {
            return Err(LockError::GroupNotHeld { stamp: stamp.fence.unwrap_or(0) });
        }
        Ok(())
    }

    /// Frees every group hold recorded for this manager's [owner](Self::owner) — at
    /// start-up, what a previous run of this instance left behind. Returns how many holds
    /// (one per member of each group) it freed.
    ///
    /// Every hold taken through a group call counts: read and write locks
    /// ([`lock_read`](Self::lock_read), [`lock_write`](Self::lock_write)), semaphore slots
    /// ([`acquire_permit`](Self::acquire_permit)) and groups
    /// ([`try_lock_group`](Self::try_lock_group) and the other `…_group` calls), renewed
    /// or not. Each group is freed atomically (all its members or none), and waiters learn
    /// of it as of a release; the places a dead waiting group left are not holds, and end
    /// within a few retry intervals. Single locks ([`lock`](Self::lock),
    /// [`try_lock`](Self::try_lock), [`with_lock`](Self::with_lock)) carry no owner on any
    /// store — the store records their token only (on Redis the value of
    /// `SET key token NX PX ttl`) — so they end with their TTL: take a key that a restart
    /// must free as a one-member write lock instead.
    ///
    /// The owner must be this instance's alone (see [`OwnerId`]): called while another
    /// process with the same owner id runs, it frees that process's live holds.
    ///
    /// ```
    /// # use distlock_api::{LockManager, OwnerId};
    /// # async fn start(store: std::sync::Arc<distlock_api::DynLockStore>) -> Result<(), distlock_api::LockError> {
    /// let locks = LockManager::new(store).with_owner(OwnerId::from_env("billing")?);
    /// let freed = locks.release_owner().await?; // before taking anything
    /// # let _ = freed; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; [`LockError::Unsupported`] on a store
    /// without groups.
    pub async fn release_owner(&self) -> Result<u64, LockError> {
        self.release_owner_of(self.owner()).await
    }

    /// Frees every group hold recorded for `owner` (an administrator's tool).
    ///
    /// # Errors
    ///
    /// As [`release_owner`](Self::release_owner).
    pub async fn release_owner_of(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let freed = group_store(&**self.store(), "release_owner")?.release_owner(owner).await?;
        tracing::info!(owner = %owner, backend = self.store().backend(), freed, "released every group hold of the owner");
        Ok(freed)
    }

    /// Records the permits of (`key`, `mode`) in the store, for every instance's next
    /// grant; `None` removes the entry. Holders beyond a lowered count keep their holds.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`], or [`LockError::InvalidGroup`] for `Some(0)`, before
    /// any I/O; [`LockError::Store`] when the store fails.
    pub async fn set_permits(&self, key: &str, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let key = LockKey::new(key)?;
        if permits == Some(0) {
            return Err(LockError::InvalidGroup {
                reason: crate::error::InvalidGroup::ZeroPermits { key: key.as_str().to_owned() },
            });
        }
        group_store(&**self.store(), "set_permits")?.set_permits(&key.to_store_key(), mode, permits).await
    }

    /// Every live group holder of `key`: mode, owner, fence, time left.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] before any I/O; [`LockError::Store`] when the store fails.
    pub async fn holders(&self, key: &str) -> Result<Vec<LockInfo>, LockError> {
        let key = LockKey::new(key)?;
        group_store(&**self.store(), "holders")?.holders(&key.to_store_key()).await
    }

    async fn acquire_group(
        &self,
        group: &LockGroup,
        options: ValidOptions,
        wait_by_default: bool,
    ) -> Result<Option<GroupLock>, LockError> {
        let inner = self.inner();
        let store = &inner.store;
        let backend = store.backend();
        let groups = group_store(&**store, "acquire_group")?;
        let max = groups.max_group();
        if group.members().len() > max {
            return Err(LockError::InvalidGroup {
                reason: crate::error::InvalidGroup::TooLarge { len: group.members().len(), max },
            });
        }
        let members: Vec<StoreMember> = group
            .members()
            .iter()
            .map(|member| {
                let default = member.permits.or(inner.permits.of(member.mode));
                StoreMember::new(member.key.to_store_key(), member.mode, default)
            })
            .collect();
        let keys: Arc<[StoreKey]> = members.iter().map(|member| member.key.clone()).collect();
        let first = group.members()[0].key.clone();
        let span = tracing::debug_span!("distlock.acquire_group", lock.key = %first, members = keys.len(), backend);
        let started = Instant::now();
        let token = Token::generate();
        let deadline = match (options.wait, wait_by_default) {
            (Some(wait), _) => Some(started + wait),
            (None, false) => Some(started),
            (None, true) => None,
        };
        let waits = deadline != Some(started);
        let holders_only = self.admission() == Admission::HoldersOnly;
        let intents = (waits && !holders_only).then(|| options.place_ttl());
        let fair = options.fairness == Fairness::Fair;
        let request = |ticket: Option<u64>| {
            let request = GroupRequest::new(&members, &token, &inner.owner, options.ttl, intents, ticket);
            let request = if fair { request } else { request.barging() };
            if holders_only {
                request.holders_only()
            } else {
                request
            }
        };
        let mut ticket = None;
        let mut contended = false;
        // The group's places once an attempt left them: a wait that ends without the group
        // (cancelled, failed) leaves them in the background.
        let mut places: Option<QueuePlace> = None;
        let result = async {
            loop {
                let attempt = InFlightGroup { manager: inner, keys: &keys, token: &token };
                let sent_at = Instant::now();
                match groups.try_acquire_group(request(ticket)).await {
                    Ok(GroupAcquire::Acquired { fence }) => {
                        attempt.disarm();
                        if let Some(places) = places.take() {
                            places.disarm();
                        }
                        tracing::debug!(lock.key = %first, backend, fence, "lock group acquired");
                        return Ok(Some(self.group_handle(
                            group,
                            Arc::clone(&keys),
                            token.clone(),
                            fence,
                            sent_at,
                            options,
                        )));
                    }
                    Ok(GroupAcquire::Blocked { ticket: given }) => {
                        attempt.disarm();
                        contended = true;
                        ticket = Some(given);
                        if intents.is_some() && places.is_none() {
                            places = Some(QueuePlace {
                                manager: Arc::clone(inner),
                                target: Target::Group(Arc::clone(&keys)),
                                token: token.clone(),
                            });
                        }
                    }
                    Err(error) => {
                        // The in-flight attempt's release also frees the group's places.
                        if let Some(places) = places.take() {
                            places.disarm();
                        }
                        tracing::warn!(
                            lock.key = %first,
                            backend,
                            error = &error as &dyn std::error::Error,
                            "lock group acquisition failed"
                        );
                        return Err(error);
                    }
                }
                let now = Instant::now();
                let mut nap = options.retry_interval;
                if let Some(deadline) = deadline {
                    if now >= deadline {
                        if let Some(places) = places.take() {
                            places.disarm();
                            if let Err(error) = groups.withdraw_intents(&keys, &token).await {
                                tracing::debug!(
                                    lock.key = %first,
                                    backend,
                                    error = &error as &dyn std::error::Error,
                                    "could not withdraw a waiting group's intents; they expire on their own"
                                );
                            }
                        }
                        return Ok(None);
                    }
                    nap = nap.min(deadline - now);
                }
                if groups.wait_for_change(request(ticket), nap).await.is_err() {
                    tokio::time::sleep_until(now + nap).await;
                }
            }
        }
        .instrument(span)
        .await;
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

    fn group_handle(
        &self,
        group: &LockGroup,
        keys: Arc<[StoreKey]>,
        token: Token,
        fence: Option<u64>,
        sent_at: Instant,
        options: ValidOptions,
    ) -> GroupLock {
        let inner = self.inner();
        let backend = inner.store.backend();
        let first = group.members()[0].key.clone();
        let lease = Lease::new(sent_at, options.ttl, options.loss_margin, backend, first);
        let watchdog = options.renew_every.map(|every| {
            let watchdog = Watchdog {
                store: Arc::clone(&inner.store),
                key: Target::Group(Arc::clone(&keys)),
                token: token.clone(),
                ttl: options.ttl,
                every,
                lease: Arc::clone(&lease),
            };
            tokio::spawn(watchdog.run()).abort_handle()
        });
        GroupLock {
            manager: Arc::clone(inner),
            members: group.members().iter().map(|member| (member.key.clone(), member.mode)).collect(),
            keys,
            token,
            fence,
            ttl: options.ttl,
            lease,
            watchdog,
            acquired_at: Instant::now(),
            armed: true,
        }
    }
}

/// Releases a group attempt whose outcome is unknown (cancelled or failed).
struct InFlightGroup<'a> {
    manager: &'a Arc<ManagerInner>,
    keys: &'a [StoreKey],
    token: &'a Token,
}

impl InFlightGroup<'_> {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for InFlightGroup<'_> {
    fn drop(&mut self) {
        self.manager.release_in_background(
            Target::Group(self.keys.into()),
            self.token.clone(),
            Cleanup::UnknownAcquire,
        );
    }
}

/// A held lock group: every member's hold, with one token, one fence (the *stamp*) and
/// one lease, renewed and released together.
///
/// Released with [`release`](Self::release); a handle dropped without it is released in
/// the background, as a [`DistributedLock`](crate::DistributedLock) is.
#[must_use = "a lock group is released as soon as its handle is dropped"]
pub struct GroupLock {
    manager: Arc<ManagerInner>,
    members: Vec<(LockKey, LockMode)>,
    keys: Arc<[StoreKey]>,
    token: Token,
    fence: Option<u64>,
    ttl: Ttl,
    lease: Arc<Lease>,
    watchdog: Option<AbortHandle>,
    acquired_at: Instant,
    armed: bool,
}

/// What releases a group later, without its handle: the specification's stamp, with the
/// token that authorises the release (see [`GroupLock::into_stamp`]).
#[derive(Clone, PartialEq, Eq)]
pub struct GroupStamp {
    keys: Arc<[StoreKey]>,
    token: Token,
    fence: Option<u64>,
}

impl GroupStamp {
    /// The group's fencing number, when the store fences.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The token that authorises the release.
    pub fn token(&self) -> &Token {
        &self.token
    }
}

impl fmt::Debug for GroupStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupStamp").field("keys", &self.keys).field("fence", &self.fence).finish_non_exhaustive()
    }
}

impl GroupLock {
    /// The members: names and modes, in the order the group gave them.
    pub fn members(&self) -> &[(LockKey, LockMode)] {
        &self.members
    }

    /// The group's fencing number — the specification's *stamp*, strictly increasing —
    /// when the store fences. Not an authority: releasing needs the token.
    pub fn stamp(&self) -> Option<u64> {
        self.fence
    }

    /// The group's token.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The lease every member was taken (and is renewed) with.
    pub fn ttl(&self) -> Duration {
        self.ttl.as_duration()
    }

    /// Whether a background task renews the group.
    pub fn is_renewing(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|task| !task.is_finished())
    }

    /// Until when every member is surely still held (as
    /// [`DistributedLock::safe_until`](crate::DistributedLock::safe_until)).
    pub fn safe_until(&self) -> Instant {
        self.lease.safe_until()
    }

    /// Whether the group's lease is lost (renewal found a member no longer held, or its
    /// deadline passed).
    pub fn is_lost(&self) -> bool {
        self.lease.lost_reason().is_some()
    }

    /// Resolves when the group's lease is lost, as
    /// [`DistributedLock::lost`](crate::DistributedLock::lost): a renewal that finds any
    /// member no longer held reports [`LossReason::NotHeld`].
    pub async fn lost(&self) -> LossReason {
        self.lease.lost().await
    }

    /// Resets every member's lease to `ttl` from now in one operation; `false` (and the
    /// group is lost) when any member was no longer held.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a bad `ttl`; [`LockError::Store`].
    pub async fn extend(&self, ttl: Duration) -> Result<bool, LockError> {
        let ttl = Ttl::new(ttl)?;
        let sent_at = Instant::now();
        let extended = Target::Group(Arc::clone(&self.keys)).extend(&*self.manager.store, &self.token, ttl).await?;
        if extended {
            self.lease.renewed(sent_at, ttl);
        } else {
            self.lease.mark_lost(LossReason::NotHeld);
        }
        Ok(extended)
    }

    /// Releases every member in one operation (and stops renewal).
    ///
    /// # Errors
    ///
    /// [`LockError::GroupNotHeld`] when no member was held any more (every hold expired);
    /// [`LockError::Store`] when the store fails — the group is then released once more in
    /// the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.stop_renewal();
        let backend = self.manager.store.backend();
        let stamp = self.fence.unwrap_or(0);
        let span = tracing::debug_span!("distlock.release_group", lock.key = %self.members[0].0, backend);
        let result =
            Target::Group(Arc::clone(&self.keys)).release(&*self.manager.store, &self.token).instrument(span).await;
        observe::release(backend, ReleaseOutcome::of(&result));
        match result {
            Ok(true) => {
                self.armed = false;
                Ok(())
            }
            Ok(false) => {
                self.armed = false;
                Err(LockError::GroupNotHeld { stamp })
            }
            Err(error) => Err(error),
        }
    }

    /// Gives up the handle but keeps the holds (and stops renewal), returning the stamp
    /// that releases them later with [`LockManager::release_stamp`]; otherwise they
    /// expire with their TTL.
    pub fn into_stamp(mut self) -> GroupStamp {
        self.stop_renewal();
        self.armed = false;
        GroupStamp { keys: Arc::clone(&self.keys), token: self.token.clone(), fence: self.fence }
    }

    fn stop_renewal(&mut self) {
        if let Some(task) = self.watchdog.take() {
            task.abort();
        }
    }
}

impl Drop for GroupLock {
    fn drop(&mut self) {
        self.stop_renewal();
        observe::hold(self.manager.store.backend(), self.acquired_at.elapsed());
        if self.armed {
            self.manager.release_in_background(
                Target::Group(Arc::clone(&self.keys)),
                self.token.clone(),
                Cleanup::DroppedHandle,
            );
        }
    }
}

impl fmt::Debug for GroupLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupLock")
            .field("members", &self.members)
            .field("token", &self.token)
            .field("stamp", &self.fence)
            .field("backend", &self.manager.store.backend())
            .field("renewing", &self.is_renewing())
            .field("lost", &self.is_lost())
            .finish()
    }
}
