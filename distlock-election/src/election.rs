//! `Election`: one named election on a lock manager's store — its settings and its
//! reads. The calls that return a handle live with the handle: `campaign` in
//! `leadership.rs`, `observe` in `observer.rs`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{
    DynLockStore, LeaseValue, LeaseValueStore, LockError, LockKey, LockManager, LockOptions, StoreKey, ValuedHolder,
};

/// The namespace of election keys among a store's locks: election `jobs` is the lock
/// `election:jobs`, as `distlock list` shows it.
const KEY_PREFIX: &str = "election:";

/// One named election: candidates [`campaign`](Self::campaign) and wait until they lead;
/// anyone reads the [`leader`](Self::leader) or [`observe`](Self::observe)s its changes.
///
/// The leader holds the lock `election:<name>` with a lease that renews itself; its
/// **term** is that acquisition's fencing number, so terms strictly increase across
/// leaders and a resource that remembers the highest term it has seen refuses a deposed
/// leader's writes. Its **value** (an identity, an address) is attached to the lease, so
/// it is seen exactly while that leader leads.
///
/// Candidates wait in the store's fair queue (where the store has one): they lead in the
/// order they started waiting, and a resigning leader hands over at once, not after a
/// TTL. A leader that crashes leads until its lease runs out (the TTL), then the next
/// candidate leads.
///
/// The store must fence ([`Capabilities::fencing`](distlock_api::Capabilities::fencing))
/// and keep values with leases ([`LockStore::values`](distlock_api::LockStore::values)).
///
/// ```
/// use std::sync::Arc;
/// use distlock::election::Election;
/// use distlock::memory::MemoryLockStore;
/// use distlock::LockManager;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
/// let election = Election::new(&locks, "scheduler")?;
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.term, leadership.term());
/// assert_eq!(leader.value.as_ref().map(|v| v.as_str()), Some("10.0.0.7:8080"));
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locks: LockManager,
    name: Arc<str>,
    key: LockKey,
    store_key: StoreKey,
    ttl: Duration,
    loss_margin: Option<Duration>,
    poll: Duration,
}

/// The leader of an election, as [`Election::leader`] and [`Observer`](crate::Observer) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: strictly greater than every earlier leader's.
    pub term: u64,
    /// The value the leader campaigned with or last proclaimed; `None` only in the
    /// moment between a candidate taking the lead and publishing its value.
    pub value: Option<LeaseValue>,
    /// How long the leader's lease has left, by the store's clock (a live leader renews it).
    pub ttl_left: Duration,
}

impl Leader {
    /// The leader a holder of the election's lock is. A holder without a fence is a
    /// candidate the store is handing the lock to (the fence comes with its next
    /// attempt, in a moment): nobody leads yet.
    pub(crate) fn of(held: ValuedHolder) -> Option<Self> {
        Some(Self { term: held.holder.fence?, value: held.value, ttl_left: held.holder.ttl_left })
    }
}

impl Election {
    /// The default lease of a leader: 10 s. A leader that crashes is replaced within
    /// about this long; a live one renews its lease every third of it.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// The default longest pause of an [`Observer`](crate::Observer) between two reads: 100 ms. A change
    /// of leader is seen sooner on a store with release notifications (the observer wakes
    /// at the release); a [proclaimed](crate::Leadership::proclaim) value within this long.
    pub const DEFAULT_POLL: Duration = Duration::from_millis(100);

    /// The election `name` among the locks of `locks`' store.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] when `election:<name>` is not a valid lock key.
    pub fn new(locks: &LockManager, name: &str) -> Result<Self, LockError> {
        let key = LockKey::new(format!("{KEY_PREFIX}{name}"))?;
        let store_key = key.to_store_key();
        Ok(Self {
            locks: locks.clone(),
            name: name.into(),
            key,
            store_key,
            ttl: Self::DEFAULT_TTL,
            loss_margin: None,
            poll: Self::DEFAULT_POLL,
        })
    }

    /// Sets the leader's lease (default [`DEFAULT_TTL`](Self::DEFAULT_TTL)): how long a
    /// crashed leader keeps the lead. Checked by the next campaign.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how long before its lease could end a leader's [`lost`](crate::Leadership::lost)
    /// fires when no renewal was confirmed (default: a fifth of the TTL): the time it
    /// has to stop its work before another candidate can lead. Checked by the next
    /// campaign.
    #[must_use]
    pub fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// Sets an observer's longest pause between reads (default
    /// [`DEFAULT_POLL`](Self::DEFAULT_POLL), at least 1 ms).
    #[must_use]
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(1));
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock key the leader holds: `election:<name>`.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The current leader, or `None` when nobody leads: one read of the store.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign), without the input errors.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        Ok(self.holder().await?.and_then(Leader::of))
    }

    /// The holder of the election's lock with its value.
    pub(crate) async fn holder(&self) -> Result<Option<ValuedHolder>, LockError> {
        self.check()?.inspect_value(&self.store_key).await
    }

    /// A campaign's lock options: renewed, fair, waiting as long as it takes.
    pub(crate) fn options(&self) -> LockOptions {
        let options = LockOptions::new().auto_renew();
        match self.loss_margin {
            Some(margin) => options.loss_margin(margin),
            None => options,
        }
    }

    pub(crate) fn locks(&self) -> &LockManager {
        &self.locks
    }

    pub(crate) fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn store(&self) -> &Arc<DynLockStore> {
        self.locks.store()
    }

    pub(crate) fn store_key(&self) -> &StoreKey {
        &self.store_key
    }

    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }

    /// The store's values, when it keeps them and fences.
    pub(crate) fn check(&self) -> Result<&dyn LeaseValueStore, LockError> {
        let store = self.locks.store();
        let values =
            store.values().ok_or(LockError::Unsupported { backend: store.backend(), operation: "election" })?;
        if !store.capabilities().fencing {
            return Err(self.not_fencing());
        }
        Ok(values)
    }

    fn not_fencing(&self) -> LockError {
        LockError::Config {
            message: format!(
                "leader election needs a {} store that fences (its terms are the fences): on Redis, connect with `fencing=true`",
                self.locks.store().backend()
            ),
        }
    }
}
