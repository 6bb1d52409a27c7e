//! What a store reports of a holder (its token, fence, time left, mode and owner) and of
//! a waiter's place (its token, mode, age and time left).

use std::time::Duration;

use crate::token::Token;

/// The current holder of a key, as reported by [`LockStore::inspect`](crate::LockStore::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The holder's token.
    pub token: Token,
    /// The holder's fencing number, on stores that fence.
    pub fence: Option<u64>,
    /// The time left on the lease, by the store's clock; never more than the TTL.
    pub ttl_left: Duration,
    /// How the key is held.
    pub mode: LockMode,
    /// The holder's owner, for [group](crate::GroupLockStore) holds; `None` for single
    /// locks, which record no owner.
    pub owner: Option<String>,
}

impl LockInfo {
    /// Builds a `LockInfo` of an exclusive holder (the struct is `#[non_exhaustive]`).
    pub fn new(token: Token, fence: Option<u64>, ttl_left: Duration) -> Self {
        Self { token, fence, ttl_left, mode: LockMode::Exclusive, owner: None }
    }

    /// Sets the mode (builder style).
    #[must_use]
    pub fn with_mode(mut self, mode: LockMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the owner (builder style).
    #[must_use]
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// How a holder holds a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockMode {
    /// The only holder (or one of the exclusive mode's permits): a mutual-exclusion lock,
    /// the write side of a read/write lock.
    #[default]
    Exclusive,
    /// One of several holders: the read side of a read/write lock, a semaphore slot.
    Shared,
}

impl LockMode {
    /// The mode's name in tools' output: `"exclusive"` or `"shared"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A waiting acquisition's place on a key, as [`QueueStore::queue_places`](crate::QueueStore::queue_places)
/// (a fair-queue place of a single lock) and
/// [`GroupLockStore::places`](crate::GroupLockStore::places) (the place, or intent, of a
/// waiting group) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitingPlace {
    /// The waiter's token (the lease's token once it acquires).
    pub token: Token,
    /// The mode it waits for: [`LockMode::Exclusive`] for a single lock's place.
    pub mode: LockMode,
    /// How long the place has existed, since the waiter first took it, by the store's
    /// clock (on etcd, which keeps no clock: by the waiter's clock when it took the
    /// place and the reader's now); `None` on a store that does not record when a place
    /// was taken.
    pub waited: Option<Duration>,
    /// The time left on the place, by the store's clock: the waiter loses it then unless
    /// its next attempt refreshes it.
    pub ttl_left: Duration,
}

impl WaitingPlace {
    /// Builds a `WaitingPlace` (the struct is `#[non_exhaustive]`).
    pub fn new(token: Token, mode: LockMode, waited: Option<Duration>, ttl_left: Duration) -> Self {
        Self { token, mode, waited, ttl_left }
    }
}
