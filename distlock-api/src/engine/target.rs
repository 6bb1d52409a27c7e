//! Every call the engine makes to the store. A single key goes through [`LockStore`]'s
//! own primitives (its wire is the store's single-lock wire); a group goes through
//! [`GroupLockStore`]. The rest of the engine sees only [`Target`] and [`Plan`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::{InvalidGroup, LockError};
use crate::group::{GroupAcquire, GroupLockStore, GroupRequest, OwnerId, StoreMember};
use crate::key::StoreKey;
use crate::options::{Fairness, Ttl, ValidOptions};
use crate::store::{Acquire, DynLockStore, QueuedAttempt};
use crate::token::Token;

/// What a hold covers: one key, or every member of a group (acquired, renewed and
/// released in one operation).
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Key(StoreKey),
    /// At least one key: a [`LockGroup`](crate::LockGroup) is never empty.
    Group(Arc<[StoreKey]>),
}

/// How an acquisition asks for its target, besides the token and the lease.
#[derive(Debug)]
pub(crate) enum Plan<'a> {
    Key {
        /// Whether a blocked waiter takes a place in the key's queue (fair waiting on a
        /// store that has queues).
        queue: bool,
        /// Whether the place is taken with the first attempt (the store's first queued
        /// attempt costs no more than a plain one: [`QueueStore::queues_in_first_attempt`]).
        ///
        /// [`QueueStore::queues_in_first_attempt`]: crate::QueueStore::queues_in_first_attempt
        at_once: bool,
    },
    Group {
        members: Vec<StoreMember>,
        owner: &'a OwnerId,
        fair: bool,
        holders_only: bool,
    },
}

/// When a waiter takes its place in the store's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queueing {
    /// Never: it retries until the deadline.
    Never,
    /// With its first attempt (a group's intents; a key on a store whose first queued
    /// attempt costs no more than a plain one).
    FirstAttempt,
    /// With the attempt right after the first one found the target held: arrival order
    /// is the order of those calls.
    AfterFirstBlock,
}

/// Where a waiter stands between attempts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Standing {
    /// The waiter has (or its next attempt takes) a place in the store's queue.
    pub(crate) queued: bool,
    /// A waiting group's ticket, from its first blocked attempt.
    pub(crate) ticket: Option<u64>,
}

/// One attempt (or wait) of an acquisition: its target, plan, token, lease and standing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) target: &'a Target,
    pub(crate) plan: &'a Plan<'a>,
    pub(crate) token: &'a Token,
    /// The lease, and the retry interval that a place in the store's queue outlives
    /// ([`ValidOptions::place_ttl`], worked out only for an attempt that queues).
    pub(crate) options: &'a ValidOptions,
    pub(crate) standing: Standing,
}

/// How one attempt ended, when the store answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    Acquired {
        fence: Option<u64>,
    },
    Blocked {
        /// When the holder's lease ends on its own, if the store said.
        holder_ttl_left: Option<Duration>,
        ticket: Option<u64>,
    },
}

impl<'a> Plan<'a> {
    /// The plan of a single key.
    pub(crate) fn key(store: &DynLockStore, fairness: Fairness) -> Self {
        let queue = store.queue().filter(|_| fairness == Fairness::Fair);
        Self::Key { queue: queue.is_some(), at_once: queue.is_some_and(|queue| queue.queues_in_first_attempt()) }
    }

    /// The plan of a group of `members`, checked against what the store takes before any I/O.
    ///
    /// # Errors
    ///
    /// [`LockError::Unsupported`] on a store without groups, [`LockError::InvalidGroup`]
    /// for a group larger than the store takes.
    pub(crate) fn group(
        store: &DynLockStore,
        members: Vec<StoreMember>,
        owner: &'a OwnerId,
        fairness: Fairness,
        holders_only: bool,
    ) -> Result<Self, LockError> {
        let max = groups(store, "acquire_group")?.max_group();
        if members.len() > max {
            return Err(LockError::InvalidGroup { reason: InvalidGroup::TooLarge { len: members.len(), max } });
        }
        Ok(Self::Group { members, owner, fair: fairness == Fairness::Fair, holders_only })
    }

    pub(crate) fn queueing(&self) -> Queueing {
        match self {
            Self::Key { queue: true, at_once: false } => Queueing::AfterFirstBlock,
            Self::Key { queue: true, at_once: true } | Self::Group { holders_only: false, .. } => {
                Queueing::FirstAttempt
            }
            Self::Key { queue: false, .. } | Self::Group { holders_only: true, .. } => Queueing::Never,
        }
    }
}

impl Ask<'_> {
    /// One attempt to take the target.
    pub(crate) async fn attempt(&self, store: &DynLockStore) -> Result<Attempt, LockError> {
        let Some(request) = self.group_request() else {
            let key = self.target.first();
            let outcome = match store.queue().filter(|_| self.standing.queued) {
                Some(queue) => {
                    let queued = QueuedAttempt {
                        key,
                        token: self.token,
                        ttl: self.options.ttl,
                        place: self.options.place_ttl(),
                    };
                    queue.try_acquire_queued(queued).await?
                }
                None => store.try_acquire(key, self.token, self.options.ttl).await?,
            };
            return Ok(match outcome {
                Acquire::Acquired { fence } => Attempt::Acquired { fence },
                Acquire::Held { ttl_left } => Attempt::Blocked { holder_ttl_left: ttl_left, ticket: None },
            });
        };
        Ok(match groups(store, "acquire_group")?.try_acquire_group(request).await? {
            GroupAcquire::Acquired { fence } => Attempt::Acquired { fence },
            GroupAcquire::Blocked { ticket } => Attempt::Blocked { holder_ttl_left: None, ticket: Some(ticket) },
        })
    }

    /// Sleeps until the target may be free (a release, the waiter's turn, a change of the
    /// group's names), at most `nap`; spurious returns are allowed.
    pub(crate) async fn wait(&self, store: &DynLockStore, nap: Duration) -> Result<(), LockError> {
        match self.group_request() {
            Some(request) => groups(store, "acquire_group")?.wait_for_change(request, nap).await,
            None => match store.queue().filter(|_| self.standing.queued) {
                Some(queue) => queue.wait_for_turn(self.target.first(), self.token, nap).await,
                None => store.wait_for_release(self.target.first(), nap).await,
            },
        }
    }

    /// The request of a group plan; `None` for a single key.
    fn group_request(&self) -> Option<GroupRequest<'_>> {
        let Plan::Group { members, owner, fair, holders_only } = self.plan else {
            return None;
        };
        let intents = self.standing.queued.then(|| self.options.place_ttl());
        let request = GroupRequest::new(members, self.token, owner, self.options.ttl, intents, self.standing.ticket);
        let request = if *fair { request } else { request.barging() };
        Some(if *holders_only { request.holders_only() } else { request })
    }
}

impl Target {
    /// The key a single lock holds; a group's first member.
    pub(crate) fn first(&self) -> &StoreKey {
        match self {
            Self::Key(key) => key,
            Self::Group(keys) => &keys[0],
        }
    }

    /// The application key to name in logs (a group's first member).
    pub(crate) fn log_key(&self) -> &str {
        self.first().lock_key()
    }

    /// Leaves the store's queue: a key's place (a release with the waiter's token, which
    /// also frees the key if it was handed to the waiter meanwhile) or a group's intents.
    pub(crate) async fn withdraw(&self, store: &DynLockStore, token: &Token) -> Result<(), LockError> {
        match self {
            Self::Key(key) => store.release(key, token).await.map(drop),
            Self::Group(keys) => groups(store, "withdraw_intents")?.withdraw_intents(keys, token).await,
        }
    }

    /// Extends the lease; `Ok(false)` when (any part of) it is no longer held.
    pub(crate) async fn extend(&self, store: &DynLockStore, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        match self {
            Self::Key(key) => store.extend(key, token, ttl).await,
            Self::Group(keys) => Ok(groups(store, "extend_group")?.extend_group(keys, token, ttl).await? == keys.len()),
        }
    }

    /// Releases the lease, and any place in the store's queue; `Ok(false)` when nothing
    /// was held any more.
    pub(crate) async fn release(&self, store: &DynLockStore, token: &Token) -> Result<bool, LockError> {
        match self {
            Self::Key(key) => store.release(key, token).await,
            Self::Group(keys) => Ok(groups(store, "release_group")?.release_group(keys, token).await? > 0),
        }
    }
}

/// The store's group primitives, or `Unsupported`.
pub(crate) fn groups<'a>(
    store: &'a DynLockStore,
    operation: &'static str,
) -> Result<&'a dyn GroupLockStore, LockError> {
    store.groups().ok_or(LockError::Unsupported { backend: store.backend(), operation })
}
