//! The `LockStore` trait: the atomic primitives every store implements.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::LockError;
use crate::group::GroupLockStore;
use crate::holder::{LockInfo, WaitingPlace};
use crate::key::StoreKey;
use crate::listing::{KeyPattern, ListCursor, ListPage};
use crate::options::Ttl;
use crate::token::Token;
use crate::value::LeaseValueStore;

/// A type-erased store, as users hold it: `Arc<DynLockStore>`.
pub type DynLockStore = dyn LockStore;

/// What a successful or failed [`LockStore::try_acquire`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// The caller's token now holds the key.
    Acquired {
        /// The fencing number of this acquisition, on stores that fence
        /// ([`Capabilities::fencing`]); strictly greater than every earlier one for the key.
        fence: Option<u64>,
    },
    /// Another token holds an unexpired lease.
    Held {
        /// The holder's remaining lease, when the store learned it in the same operation.
        ttl_left: Option<Duration>,
    },
}

impl Acquire {
    /// Whether the key was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Self::Acquired { .. })
    }
}

/// Optional abilities of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Every acquisition returns a fencing number ([`Acquire::Acquired::fence`]).
    pub fencing: bool,
    /// [`LockStore::wait_for_release`] wakes on a release signal; without it the method
    /// just sleeps and waiters poll.
    pub release_notifications: bool,
    /// The store keeps a queue of waiters per key ([`LockStore::queue`]):
    /// a release hands the key to the oldest live waiter, so waiting acquisitions are
    /// served in arrival order. Without it, waiting is barging: whoever asks first after
    /// a release gets the key.
    pub fair_queue: bool,
    /// The store keeps lease TTLs only to this granularity: it rounds every TTL *up* to a
    /// whole multiple of it (etcd: whole seconds), so a lease lasts at least as long as
    /// asked, and [`LockInfo::ttl_left`] may be reported in such steps. `Duration::ZERO`
    /// (the default): TTLs are kept to the millisecond, as given.
    pub ttl_granularity: Duration,
    /// The names of one lock group must share a Redis Cluster **hash tag** (the text
    /// between the first `{` and the next `}`, as in `{orders}:a`, `{orders}:b`), so that
    /// the whole group lives in one hash slot and is granted in one atomic step; a group
    /// whose names do not is refused before any I/O. Applications (and the conformance
    /// suite) that build multi-name groups give their names a common tag when this is set.
    pub group_hash_tag: bool,
}

impl Capabilities {
    /// No optional abilities.
    pub const NONE: Self = Self {
        fencing: false,
        release_notifications: false,
        fair_queue: false,
        ttl_granularity: Duration::ZERO,
        group_hash_tag: false,
    };

    /// Sets [`Capabilities::fencing`].
    #[must_use]
    pub const fn with_fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Sets [`Capabilities::release_notifications`].
    #[must_use]
    pub const fn with_release_notifications(mut self, notifications: bool) -> Self {
        self.release_notifications = notifications;
        self
    }

    /// Sets [`Capabilities::fair_queue`].
    #[must_use]
    pub const fn with_fair_queue(mut self, fair_queue: bool) -> Self {
        self.fair_queue = fair_queue;
        self
    }

    /// Sets [`Capabilities::ttl_granularity`].
    #[must_use]
    pub const fn with_ttl_granularity(mut self, granularity: Duration) -> Self {
        self.ttl_granularity = granularity;
        self
    }

    /// Sets [`Capabilities::group_hash_tag`].
    #[must_use]
    pub const fn with_group_hash_tag(mut self, group_hash_tag: bool) -> Self {
        self.group_hash_tag = group_hash_tag;
        self
    }

    /// The lease a store with this [granularity](Capabilities::ttl_granularity) grants
    /// for `ttl`: `ttl` rounded up to a whole multiple of the granularity.
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock::Capabilities;
    ///
    /// let whole_seconds = Capabilities::NONE.with_ttl_granularity(Duration::from_secs(1));
    /// assert_eq!(whole_seconds.granted_ttl(Duration::from_millis(300)), Duration::from_secs(1));
    /// assert_eq!(Capabilities::NONE.granted_ttl(Duration::from_millis(300)), Duration::from_millis(300));
    /// ```
    pub fn granted_ttl(&self, ttl: Duration) -> Duration {
        let step = self.ttl_granularity.as_nanos();
        if step == 0 {
            return ttl;
        }
        let steps = ttl.as_nanos().div_ceil(step).max(1);
        u32::try_from(steps).ok().and_then(|n| self.ttl_granularity.checked_mul(n)).unwrap_or(Duration::MAX)
    }
}

/// The atomic primitives a lock store provides.
///
/// Applications rarely call a store directly: they wrap it in a
/// [`LockManager`](crate::LockManager), which validates input, generates tokens, waits,
/// and releases dropped handles. Every method here is **one atomic operation** on the
/// server (one command, one script or one SQL statement).
///
/// Keys arrive as [`StoreKey`]s (already validated and in the `lock:` namespace), TTLs as
/// [`Ttl`]s (whole milliseconds, ≥ 1), so a store does no input validation of its own.
///
/// # Contract
///
/// Every store keeps these promises; the `distlock-conformance` suite checks each.
///
/// 1. **Mutual exclusion.** While a lease is unexpired, at most one token holds the key.
/// 2. **Token-safe release and extend.** Only the holder's token can release or extend;
///    a wrong or expired token gets `false` and changes nothing.
/// 3. **Leases expire on the store's clock** (Redis `PX`, PostgreSQL `clock_timestamp()`,
///    tokio's clock in memory), never on a client's wall clock. An expired lease can be
///    taken over atomically by exactly one new acquirer.
/// 4. **Not reentrant.** Acquiring a held key with another token fails. The manager uses
///    a fresh token per acquisition, so a process cannot take its own lock twice (its
///    opt-in [reentrant scopes](crate::reentrant_scope) share a held lease without
///    asking the store again).
/// 5. **Unknown outcomes are recoverable.** When `try_acquire` returns an error (say the
///    connection dropped after the command was sent) the lease may exist on the server.
///    The manager then releases the key with the same token, which must be harmless if
///    the lease does not exist. A store that retries internally must recognise a lease
///    already held by the same token as acquired, never leave it orphaned.
/// 6. **Fencing** (when [`Capabilities::fencing`]): each successful acquisition of a key
///    gets a number strictly greater than every earlier one for that key, across
///    release, expiry take-over and store restarts (as far as the store's durability goes).
/// 7. **Errors are honest.** A failure is [`LockError::Store`] carrying the backend name
///    and the driver error as its cause; never a panic, never a false "acquired" or
///    "released".
/// 8. **Cancel safety.** Dropping any returned future leaves the store consistent: the
///    operation either happened atomically or not at all. (The manager releases a lease
///    whose acquisition was cancelled.)
/// 9. **Fair queue** (when [`Capabilities::fair_queue`], through [`queue`](Self::queue)):
///    a waiter that calls [`QueueStore::try_acquire_queued`] takes a place in the key's queue
///    (arrival order, kept on the server) that lives for its `place` TTL unless a later
///    call refreshes it. A release (or the departure of a waiter) that leaves the key free
///    while live places remain hands the key to the oldest one: the key is then held by
///    that waiter's token for the rest of its place's lease, and its next
///    `try_acquire_queued` turns that into a full lease (its fencing number, issued at
///    the hand-over or at that attempt, is greater than every earlier one of the key). A
///    waiter whose place expires (it crashed, or was cancelled without leaving) loses it,
///    and a key handed to it expires with the place. `release` with a waiter's token
///    removes its place. A plain [`try_acquire`](Self::try_acquire) never queues: it
///    takes the key only when it is neither held nor handed to a waiter.
// No method has a default body, so a wrapper that misses one does not compile (a default
// it did not override would silently bypass the wrapped store). A new method (or
// capability accessor) is forwarded in `forward_lock_store!` below and in
// distlock-testing's `FaultyStore`, whose `tests/integration/forwarding.rs` fails until it is.
#[async_trait]
pub trait LockStore: Debug + Send + Sync + 'static {
    /// A short, stable backend name: `"memory"`, `"redis"`, `"postgres"`.
    fn backend(&self) -> &'static str;

    /// The store's optional abilities.
    fn capabilities(&self) -> Capabilities;

    /// Takes `key` for `token` for `ttl` if it is free or its lease has expired.
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError>;

    /// Frees `key` if it is still held by `token` and unexpired; returns whether it did.
    /// `false` means "you no longer held it"; another holder's lock is never touched.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError>;

    /// Resets the lease of `key` to `ttl` from now, if it is still held by `token`;
    /// returns whether it did.
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError>;

    /// The current holder of `key`, or `None` when it is free (or its lease expired).
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError>;

    /// Waits at most `max` for a release of `key`, returning early when the store signals
    /// one (or the key is already free). A store without release notifications simply
    /// sleeps `max`. Spurious early returns are allowed; the caller tries again.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError>;

    /// The store's fair queue of waiters (contract item 9), when it keeps one: `Some`
    /// exactly when [`Capabilities::fair_queue`] is set. A waiting acquisition with
    /// [`Fairness::Fair`](crate::Fairness::Fair) goes through it; without it, waiting
    /// is barging.
    fn queue(&self) -> Option<&dyn QueueStore>;

    /// The store's lock groups (read/write locks, semaphores, multi-locks), when it has
    /// them. The default is `None`; the stores of the distlock family all have them.
    ///
    /// Group names live apart from single-lock keys: a group hold of `a` and a
    /// [`try_acquire`](Self::try_acquire) of `a` do not exclude each other.
    fn groups(&self) -> Option<&dyn GroupLockStore>;

    /// The store's values attached to leases ([`LeaseValueStore`]), which leader election
    /// needs to publish the leader's value, when it has them.
    fn values(&self) -> Option<&dyn LeaseValueStore>;

    /// One page of the held locks whose application key matches `pattern`, starting at
    /// `cursor` (`None`: from the beginning), with about `limit` keys examined per page
    /// (0 counts as 1, more than [`ListPage::MAX_LIMIT`] as that).
    ///
    /// A listing never blocks the store: each page is one bounded operation (Redis
    /// `SCAN`, an index range in PostgreSQL), so listing 100,000 held keys costs many
    /// small operations rather than one long one. A page may hold fewer than `limit`
    /// locks, even none, while [`ListPage::next`] is still set (on Redis also a few more,
    /// as `SCAN … COUNT` may); the listing is complete when it is `None`. Locks taken or
    /// released during a listing may or may not appear; a lock held throughout appears
    /// at least once (on Redis possibly twice, as with `SCAN`). Only unexpired leases are
    /// listed. The memory and PostgreSQL stores list in key order (byte order of the
    /// UTF-8 text); Redis in the order of its hash table.
    ///
    /// A store that cannot list returns [`LockError::Unsupported`]; the stores of the
    /// distlock family all list.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; [`LockError::Unsupported`] when the
    /// store cannot list; [`LockError::Config`] for a cursor this store cannot have
    /// issued.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError>;
}

/// One attempt of a queued waiter, as [`QueueStore::try_acquire_queued`] takes it: the
/// two durations are named, so the lease and the place cannot be swapped.
#[derive(Debug, Clone, Copy)]
pub struct QueuedAttempt<'a> {
    /// The key to take.
    pub key: &'a StoreKey,
    /// The waiter's token: its place in the queue and, once acquired, the lease's.
    pub token: &'a Token,
    /// The lease the key gets when this attempt acquires it.
    pub ttl: Ttl,
    /// How long the waiter's place lives unless a later attempt refreshes it.
    pub place: Ttl,
}

/// A store's fair queue of waiters (contract item 9 of [`LockStore`]), reached through
/// [`LockStore::queue`].
#[async_trait]
pub trait QueueStore: Debug + Send + Sync {
    /// One attempt of a waiting acquisition that keeps `attempt.token`'s place in the
    /// key's queue of waiters, in one atomic step: acquired when the key was handed to
    /// the token, or is free and the token is the oldest live waiter (or nobody waits);
    /// otherwise the place is taken (at the back of the queue) or refreshed for
    /// `attempt.place`, and the answer is [`Acquire::Held`].
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError>;

    /// Whether a token's first [`try_acquire_queued`](Self::try_acquire_queued) costs no
    /// more than [`LockStore::try_acquire`]: one step that takes a free key nobody waits
    /// for, or else the place. The manager then queues a fair waiter with its first
    /// attempt, rather than with the attempt after a plain one found the key held: a
    /// contended acquisition saves that plain attempt.
    fn queues_in_first_attempt(&self) -> bool;

    /// As [`LockStore::wait_for_release`], for a queued waiter: the wait also ends at
    /// once when the key is handed to `token` (the check after registering treats "held
    /// by `token`" as free).
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError>;

    /// How many live places the key's queue of waiters has.
    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError>;

    /// The live places of the key's queue of waiters in arrival order (the next to be
    /// served first), each with its token, time left and how long it has waited (since
    /// the waiter first took it), read in one operation.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError>;
}

macro_rules! forward_lock_store {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<S: LockStore + ?Sized> LockStore for $ptr<S> {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }

            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }

            async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
                (**self).try_acquire(key, token, ttl).await
            }

            async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
                (**self).release(key, token).await
            }

            async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
                (**self).extend(key, token, ttl).await
            }

            async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
                (**self).inspect(key).await
            }

            async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
                (**self).wait_for_release(key, max).await
            }

            fn queue(&self) -> Option<&dyn QueueStore> {
                (**self).queue()
            }

            fn groups(&self) -> Option<&dyn GroupLockStore> {
                (**self).groups()
            }

            fn values(&self) -> Option<&dyn LeaseValueStore> {
                (**self).values()
            }

            async fn list(
                &self,
                pattern: &KeyPattern,
                cursor: Option<&ListCursor>,
                limit: usize,
            ) -> Result<ListPage, LockError> {
                (**self).list(pattern, cursor, limit).await
            }
        }
    )*};
}

forward_lock_store!(Arc, Box);
