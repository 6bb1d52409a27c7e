//! `Faults`: the handle a test keeps to inject faults while a manager owns the store.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_api::{Acquire, DynLockStore, LockError, LockKey, StoreKey, Token, Ttl};
use tokio::sync::watch;

use crate::injected::InjectedFault;
use crate::op::Op;

const OPS: usize = Op::ALL.len();

/// The faults set for one operation.
#[derive(Debug, Clone, Copy, Default)]
struct OpFaults {
    fail_all: bool,
    fail_next: usize,
    lose_next: usize,
    delay: Duration,
}

#[derive(Debug, Default)]
struct State {
    ops: [OpFaults; OPS],
    drop_notifications: bool,
}

struct Shared {
    /// The wrapped store, for faults that act on it directly (`steal`, `expire`).
    inner: Arc<DynLockStore>,
    state: Mutex<State>,
    /// Calls that returned, per operation (indexed by `Op::index`).
    calls: watch::Sender<[usize; OPS]>,
}

/// How one call of an operation fails, decided when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Fail without calling the wrapped store.
    Before,
    /// Call the wrapped store, then fail.
    After,
}

/// What one call does, decided when it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) delay: Duration,
    pub(crate) failure: Option<Failure>,
    /// For `wait_for_release`: sleep the whole `max` instead of waiting for a release.
    pub(crate) drop_notification: bool,
}

impl Plan {
    /// The error this plan's failure returns.
    pub(crate) fn error(backend: &'static str, op: Op, key: Option<&StoreKey>, failure: Failure) -> LockError {
        let cause = InjectedFault::new(op, failure == Failure::After);
        LockError::store(backend, op.as_str(), key.map(StoreKey::lock_key), cause)
    }
}

/// What [`Faults::steal`] did: the new owner of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stolen {
    /// The new owner's token: release the key with it
    /// ([`LockStore::release`](distlock_api::LockStore::release)), or let it expire.
    pub token: Token,
    /// The new owner's fencing number, on stores that fence: greater than the previous
    /// holder's, so a protected resource now rejects the previous holder's writes.
    pub fence: Option<u64>,
    /// The new owner's lease: what the previous holder had left of its own.
    pub ttl: Duration,
}

/// The control handle of a [`FaultyStore`](crate::FaultyStore): inject faults, count
/// calls.
///
/// Get it from [`FaultyStore::faults`](crate::FaultyStore::faults) before handing the
/// store to a [`LockManager`](distlock_api::LockManager); clones control the same store.
/// A fault applies to the calls that *start* after it is set, whatever the key; every
/// setting stays until changed or [`heal`](Self::heal)ed. All methods take `&self`, so a
/// test can keep the handle while the code under test runs in other tasks.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock::{LockError, LockManager};
/// use distlock::memory::MemoryLockStore;
/// use distlock::testing::{FaultyStore, InjectedFault, Op};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), LockError> {
/// let store = FaultyStore::new(MemoryLockStore::new());
/// let faults = store.faults();
/// let locks = LockManager::new(Arc::new(store));
///
/// faults.fail_next(Op::Acquire, 1);
/// let err = locks.try_lock("report", Duration::from_secs(30)).await.unwrap_err();
/// assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
/// assert!(InjectedFault::of(&err).is_some());
///
/// let lock = locks.try_lock("report", Duration::from_secs(30)).await?.expect("the key is free");
/// assert_eq!(faults.calls(Op::Acquire), 2);
/// # drop(lock); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl Faults {
    pub(crate) fn new(inner: Arc<DynLockStore>) -> Self {
        Self {
            shared: Arc::new(Shared { inner, state: Mutex::new(State::default()), calls: watch::channel([0; OPS]).0 }),
        }
    }

    // A test that panicked while holding the lock must not turn every later call into a
    // panic: the state is plain data, always consistent.
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next `n` calls of `op` fail with a [`LockError::Store`] without reaching the
    /// wrapped store, as when the store cannot be reached. Replaces an earlier count for
    /// `op`; `0` cancels it.
    ///
    /// The error names the wrapped store's backend, the operation ([`Op::as_str`]) and
    /// the key; its cause is an [`InjectedFault`]. What the manager does with such a
    /// failure is what it does in production: a failed acquisition is an error to the
    /// caller (and its possible lease is released in the background), a failed renewal
    /// is retried, and the third failure in a row loses the lease
    /// ([`Renewal`](distlock_api::Renewal#failed-renewals)), a failed `release()` is retried once
    /// in the background, a failed wait for a release becomes a sleep.
    pub fn fail_next(&self, op: Op, n: usize) {
        self.state().ops[op.index()].fail_next = n;
    }

    /// Every call of `op` fails as with [`fail_next`](Self::fail_next) until
    /// [`heal`](Self::heal): a store outage for that operation. For a whole outage, call
    /// it for every operation in [`Op::ALL`].
    pub fn fail_all(&self, op: Op) {
        self.state().ops[op.index()].fail_all = true;
    }

    /// The next `n` calls of `op` are performed by the wrapped store, and then fail with
    /// a [`LockError::Store`] as if the connection dropped before the reply came back: an
    /// operation of unknown outcome. Replaces an earlier count for `op`; `0` cancels it.
    ///
    /// For [`Op::Acquire`] the lease was really taken; the manager reports the error and
    /// releases that lease in the background (see
    /// [`LockManager::flush_releases`](distlock_api::LockManager::flush_releases)). For
    /// [`Op::Release`] the lock was really freed although the caller saw an error.
    pub fn lose_next_replies(&self, op: Op, n: usize) {
        self.state().ops[op.index()].lose_next = n;
    }

    /// Every call of `op` first waits `latency` (on tokio's clock: under paused time it
    /// costs no real time); [`Duration::ZERO`] removes the delay. Failing calls are
    /// delayed too, as a timeout would be. `Duration::MAX` makes the calls hang until the
    /// caller gives up on them, e.g. the renewal deadline of an auto-renewed lock.
    pub fn delay(&self, op: Op, latency: Duration) {
        self.state().ops[op.index()].delay = latency;
    }

    /// With `true`, [`LockStore::wait_for_release`](distlock_api::LockStore::wait_for_release)
    /// (and a waiting group's
    /// [`GroupLockStore::wait_for_change`](distlock_api::GroupLockStore::wait_for_change))
    /// no longer wakes on a release: it sleeps its whole `max`, as on a store without
    /// release notifications (or whose notification channel is down), so waiters fall
    /// back to polling every `retry_interval`. The store's
    /// [`capabilities`](distlock_api::LockStore::capabilities) then report no release
    /// notifications. `false` restores them.
    pub fn drop_release_notifications(&self, drop: bool) {
        self.state().drop_notifications = drop;
    }

    /// Removes every fault: failures, lost replies, delays, dropped notifications. The
    /// call counts stay.
    pub fn heal(&self) {
        *self.state() = State::default();
    }

    /// Makes the current lease of `key` (an application key, as given to the manager)
    /// vanish, as if it had expired: the key is free, and the holder's next renewal or
    /// `extend()` finds it no longer held ([`LossReason::NotHeld`]) and its `release()`
    /// returns `false`. Returns whether there was a lease to end.
    ///
    /// It goes through the wrapped store's own operations — `inspect` for the holder's
    /// token, then a token-checked `release` — so it works on every store, is not
    /// counted in [`calls`](Self::calls), and is not subject to the injected faults.
    /// Unlike a real expiry, waiters are woken as by a release on stores with release
    /// notifications.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] for an invalid key, before any I/O;
    /// [`LockError::Store`] when the wrapped store fails.
    ///
    /// [`LossReason::NotHeld`]: distlock_api::LossReason::NotHeld
    pub async fn expire(&self, key: &str) -> Result<bool, LockError> {
        let key = LockKey::new(key)?.to_store_key();
        let inner = &self.shared.inner;
        let Some(holder) = inner.inspect(&key).await? else {
            return Ok(false);
        };
        inner.release(&key, &holder.token).await
    }

    /// Hands the lease of `key` (an application key, as given to the manager) to another
    /// owner, as if it had expired and been taken over: the holder's next renewal or
    /// `extend()` finds it no longer held ([`LossReason::NotHeld`]), its `release()`
    /// returns `false`, and the key stays held — by the new owner, for as long as the
    /// previous holder had left. Returns the new owner, or `None` when the key was not
    /// held (or when someone else took it in the instant between: the lease is gone
    /// either way).
    ///
    /// Like [`expire`](Self::expire), it goes through the wrapped store's own operations
    /// (`inspect`, `release`, `try_acquire` with a fresh token), so it works on every
    /// store, is not counted in [`calls`](Self::calls), and is not subject to the
    /// injected faults.
    ///
    /// # Errors
    ///
    /// As [`expire`](Self::expire).
    ///
    /// [`LossReason::NotHeld`]: distlock_api::LossReason::NotHeld
    pub async fn steal(&self, key: &str) -> Result<Option<Stolen>, LockError> {
        let key = LockKey::new(key)?.to_store_key();
        let inner = &self.shared.inner;
        let Some(holder) = inner.inspect(&key).await? else {
            return Ok(None);
        };
        if !inner.release(&key, &holder.token).await? {
            return Ok(None);
        }
        // A lease is at least a millisecond; `ttl_left` may have rounded down to zero.
        let ttl = Ttl::new(holder.ttl_left.max(Duration::from_millis(1)))?;
        let token = Token::generate();
        match inner.try_acquire(&key, &token, ttl).await? {
            Acquire::Acquired { fence } => Ok(Some(Stolen { token, fence, ttl: ttl.as_duration() })),
            _ => Ok(None),
        }
    }

    /// How many calls of `op` have returned so far (with a value or an error, injected or
    /// not). A call dropped before it returned is not counted.
    pub fn calls(&self, op: Op) -> usize {
        self.shared.calls.borrow()[op.index()]
    }

    /// Waits until at least `n` calls of `op` have returned
    /// ([`calls`](Self::calls)): a signal to synchronise a test with the code under test
    /// without sleeping — e.g. "the job holds its lock" (`Op::Acquire`), "the lease was
    /// renewed twice" (`Op::Extend`).
    ///
    /// It never gives up on its own: bound it with `tokio::time::timeout` (under paused
    /// time, a timeout fires as soon as nothing else can run).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn wait_for_calls(&self, op: Op, n: usize) {
        let mut calls = self.shared.calls.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = calls.wait_for(|calls| calls[op.index()] >= n).await;
    }

    /// Decides what a call of `op` starting now does, consuming one unit of its
    /// `fail_next` / `lose_next_replies` count.
    pub(crate) fn plan(&self, op: Op) -> Plan {
        let mut state = self.state();
        let drop_notification = state.drop_notifications && matches!(op, Op::WaitForRelease | Op::WaitForChange);
        let faults = &mut state.ops[op.index()];
        let failure = if faults.fail_all {
            Some(Failure::Before)
        } else if faults.fail_next > 0 {
            faults.fail_next -= 1;
            Some(Failure::Before)
        } else if faults.lose_next > 0 {
            faults.lose_next -= 1;
            Some(Failure::After)
        } else {
            None
        };
        Plan { delay: faults.delay, failure, drop_notification }
    }

    /// Whether release notifications are dropped now.
    pub(crate) fn notifications_dropped(&self) -> bool {
        self.state().drop_notifications
    }

    /// Counts a call of `op` that returned.
    pub(crate) fn returned(&self, op: Op) {
        self.shared.calls.send_modify(|calls| calls[op.index()] += 1);
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Calls([usize; OPS]);
        impl fmt::Debug for Calls {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(Op::ALL.iter().map(|op| (op.as_str(), self.0[op.index()]))).finish()
            }
        }
        let state = self.state();
        let mut out = f.debug_struct("Faults");
        for op in Op::ALL {
            let faults = state.ops[op.index()];
            if faults.fail_all || faults.fail_next > 0 || faults.lose_next > 0 || !faults.delay.is_zero() {
                out.field(op.as_str(), &faults);
            }
        }
        let calls = Calls(*self.shared.calls.borrow());
        out.field("drop_release_notifications", &state.drop_notifications).field("calls", &calls).finish()
    }
}
