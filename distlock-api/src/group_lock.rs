//! Taking lock groups through the manager, and the `GroupLock` handle.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::{groups as group_store, Acquisition, DefaultWait, Engine, Hold, Plan, Target};
use crate::error::{LockError, LossReason};
use crate::group::{Admission, GroupMember, LockGroup, OwnerId, StoreMember};
use crate::holder::{LockInfo, LockMode};
use crate::key::{LockKey, StoreKey};
use crate::manager::LockManager;
use crate::observe::{self, ReleaseOutcome};
use crate::options::{LockOptions, ValidOptions};
use crate::token::Token;

impl LockManager {
    /// Takes every member of `group` for `ttl` if all can be granted now, in one atomic
    /// attempt (the lock-service specification's `tryLocks`): `None` when any member is
    /// held in a conflicting way or out of permits; nothing is left behind then.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use distlock::{GroupMember, LockGroup, LockManager};
    /// # async fn demo(locks: LockManager) -> Result<(), distlock::LockError> {
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
        self.acquire_group(group, options, DefaultWait::OneAttempt).await
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
        self.acquire_group(group, options, DefaultWait::Unbounded).await?.ok_or(LockError::NotAcquired { key: first })
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
        let held = self
            .acquire_group(group, valid, DefaultWait::OneAttempt)
            .await?
            .ok_or(LockError::NotAcquired { key: first })?;
        Hold::run_then_release(held.hold, valid.renew_every.is_some(), block()).await
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
    /// # use distlock::{LockManager, OwnerId};
    /// # async fn start(store: std::sync::Arc<distlock::DynLockStore>) -> Result<(), distlock::LockError> {
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
        let key = LockKey::try_from(key)?;
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
        let key = LockKey::try_from(key)?;
        group_store(&**self.store(), "holders")?.holders(&key.into_store_key()).await
    }

    async fn acquire_group(
        &self,
        group: &LockGroup,
        options: ValidOptions,
        default_wait: DefaultWait,
    ) -> Result<Option<GroupLock>, LockError> {
        let engine = self.engine();
        let members: Vec<StoreMember> = group
            .members()
            .iter()
            .map(|member| {
                let default = member.permits.or(engine.permits.of(member.mode));
                StoreMember::new(member.key.to_store_key(), member.mode, default)
            })
            .collect();
        let keys: Arc<[StoreKey]> = members.iter().map(|member| member.key.clone()).collect();
        let holders_only = self.admission() == Admission::HoldersOnly;
        let plan = Plan::group(&*engine.store, members, &engine.owner, options.fairness, holders_only)?;
        let acquisition = Acquisition { target: Target::Group(keys), plan, options, default_wait };
        let members = || group.members().iter().map(|member| (member.key.clone(), member.mode)).collect();
        Ok(Engine::acquire(self.engine_ref(), acquisition).await?.map(|hold| GroupLock { hold, members: members() }))
    }
}

/// A held lock group: every member's hold, with one token, one fence (the *stamp*) and
/// one lease, renewed and released together.
///
/// Released with [`release`](Self::release); a handle dropped without it is released in
/// the background, as a [`DistributedLock`](crate::DistributedLock) is.
#[must_use = "a lock group is released as soon as its handle is dropped"]
pub struct GroupLock {
    hold: Arc<Hold>,
    members: Vec<(LockKey, LockMode)>,
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
        self.hold.fence()
    }

    /// The group's token.
    pub fn token(&self) -> &Token {
        self.hold.token()
    }

    /// The lease every member was taken (and is renewed) with.
    pub fn ttl(&self) -> Duration {
        self.hold.ttl()
    }

    /// Whether a background task renews the group.
    pub fn is_renewing(&self) -> bool {
        self.hold.is_renewing()
    }

    /// Until when every member is surely still held (as
    /// [`DistributedLock::safe_until`](crate::DistributedLock::safe_until)).
    pub fn safe_until(&self) -> Instant {
        self.hold.safe_until()
    }

    /// Whether the group's lease is lost (renewal found a member no longer held, or its
    /// deadline passed).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Resolves when the group's lease is lost, as
    /// [`DistributedLock::lost`](crate::DistributedLock::lost): a renewal that finds any
    /// member no longer held reports [`LossReason::NotHeld`].
    pub async fn lost(&self) -> LossReason {
        self.hold.lost().await
    }

    /// Resets every member's lease to `ttl` from now in one operation; `false` (and the
    /// group is lost) when any member was no longer held.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] for a bad `ttl`; [`LockError::Store`].
    pub async fn extend(&self, ttl: Duration) -> Result<bool, LockError> {
        self.hold.extend(ttl).await
    }

    /// Releases every member in one operation (and stops renewal).
    ///
    /// # Errors
    ///
    /// [`LockError::GroupNotHeld`] when no member was held any more (every hold expired);
    /// [`LockError::Store`] when the store fails — the group is then released once more in
    /// the background.
    pub async fn release(self) -> Result<(), LockError> {
        let stamp = self.hold.fence().unwrap_or(0);
        match Hold::release(self.hold).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LockError::GroupNotHeld { stamp }),
            Err(error) => Err(error),
        }
    }

    /// Gives up the handle but keeps the holds (and stops renewal), returning the stamp
    /// that releases them later with [`LockManager::release_stamp`]; otherwise they
    /// expire with their TTL.
    pub fn into_stamp(self) -> GroupStamp {
        self.hold.leak();
        let keys = match self.hold.target() {
            Target::Group(keys) => Arc::clone(keys),
            Target::Key(key) => Arc::from([key.clone()]),
        };
        GroupStamp { keys, token: self.hold.token().clone(), fence: self.hold.fence() }
    }
}

impl fmt::Debug for GroupLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupLock")
            .field("members", &self.members)
            .field("token", self.token())
            .field("stamp", &self.stamp())
            .field("backend", &self.hold.backend())
            .field("renewing", &self.is_renewing())
            .field("lost", &self.is_lost())
            .finish()
    }
}
