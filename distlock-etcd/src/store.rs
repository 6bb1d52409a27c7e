//! [`EtcdLockStore`]: the [`LockStore`] primitives as etcd v3 leases and transactions.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_api::waiters::{KeyState, WaiterRegistry, Woken};
use distlock_api::{
    async_trait, Acquire, Capabilities, GroupLockStore, HeldLock, KeyPattern, LeaseValueStore, ListCursor, ListPage,
    LockError, LockInfo, LockKey, LockMode, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, WaitingPlace,
};
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::time::Instant;

use crate::config::{lease_seconds, Config};
use crate::notify::ReleaseListener;
use crate::slots::Slots;

pub(crate) const BACKEND: &str = "etcd";

/// The granularity of etcd lease TTLs: whole seconds.
pub(crate) const TTL_GRANULARITY: Duration = Duration::from_secs(1);

/// A lock store on etcd v3 (Raft): linearizable grants, persisted fencing numbers.
///
/// A lock `order:1` is the etcd key `{prefix}/lock:order:1` (prefix `distlock` by
/// default), whose value is the holder's token and which is attached to a lease of its
/// own:
///
/// - **acquire**: one transaction
///   `If CreateRevision(key) = 0 Then Put(key, token, lease) Else Get(key)` on a lease
///   of the TTL: one this store released with at least half of its TTL left, kept alive
///   by a keep-alive sent beside the transaction (no Raft write), else a new
///   `LeaseGrant(ttl)` sent first. The fencing number is the key's create revision:
///   cluster-wide, persisted, strictly increasing.
/// - **release**: `If Value(key) = token Then Delete(key)` (and the lease's value, below);
///   the lease, which holds no key any more, is kept for this store's next acquisition
///   with the same TTL (at most 16 such leases; a lease not used again ends with its
///   TTL), or revoked.
/// - **extend**: the token-checked key names its lease; the same TTL is a lease
///   keep-alive (the fence stays), another TTL moves the key to a new lease in one
///   transaction (the create revision, hence the fence, stays too), with the lease's
///   value if it has one.
/// - **lease values** ([`LeaseValueStore`], what leader election publishes): a second
///   key `{prefix}/value/lock:order:1` on the lock key's lease, so it ends with it; its
///   value is the holder's token, a newline and the value. `set_value` puts it in one
///   transaction that checks the lock key's token and lease; `inspect_value` reads both
///   keys in one transaction and answers a value only when it is on the holder's lease
///   and names the holder's token; a release deletes both keys.
/// - **wait for release**: a watch on the store's prefix delivers every delete (release
///   or lease expiry) to the waiters; while the watch is down, waiters poll.
/// - **lock groups** ([`GroupLockStore`]: read/write locks, semaphores, multi-key
///   groups): the names' key prefixes are read at one revision, the grant is decided on
///   the client and committed in one transaction guarded by that revision; its fence is
///   the transaction's revision (crate README, "Lock groups").
///
/// TTLs are whole seconds ([`Capabilities::ttl_granularity`]): a TTL is rounded *up*, so
/// a lease never ends before the one asked for; the server may grant more (its minimum
/// TTL follows its election timeout), and checks expiry about every 500 ms. After a
/// leader change etcd gives every lease its full TTL again, so a crashed holder's key
/// may stay held for up to one more TTL.
///
/// Cloning is cheap: clones share the connection and the watch.
#[derive(Clone)]
pub struct EtcdLockStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    config: Config,
    waiters: WaiterRegistry,
    /// The places this store's waiters hold in queues, by (lock key, token): the
    /// lease and create revision of each, so a retry needs no lookup.
    places: Mutex<HashMap<(String, String), Place>>,
    /// This store's id in the names of its places: random, one per store.
    id: String,
    /// The names of this store's places: see [`Slots`].
    slots: Mutex<Slots>,
    /// Leases granted for attempts that found the key held, by (lock key, token): the
    /// waiter's next attempt keeps one alive (no Raft write) instead of granting anew.
    spares: Mutex<HashMap<(String, String), Spare>>,
    /// The leases of lock-group attempts, by token: see [`GroupLeases`].
    group_leases: Mutex<HashMap<String, GroupLeases>>,
    /// Lock leases in use and released ones kept for the next acquisition: see [`Leases`].
    leases: Mutex<Leases>,
    // Dropped with the last clone of the store: ends the watch task.
    _listener: Option<ReleaseListener>,
}

impl fmt::Debug for EtcdLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockStore")
            .field("key_prefix", &self.inner.config.key_prefix)
            .field("release_notifications", &self.inner.config.release_notifications)
            .field("response_timeout", &self.inner.config.response_timeout)
            .finish_non_exhaustive()
    }
}

impl EtcdLockStore {
    pub(crate) async fn from_client(client: Client, config: Config) -> Result<Self, LockError> {
        // The balanced channel connects lazily: ask the cluster once, so a wrong address
        // fails here rather than at the first lock.
        let mut maintenance = client.maintenance_client();
        match tokio::time::timeout(config.response_timeout, maintenance.status()).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => return Err(LockError::store(BACKEND, "connect", None, err)),
            Err(_) => return Err(LockError::store(BACKEND, "connect", None, "etcd did not answer in time")),
        }
        let waiters = WaiterRegistry::new();
        let listener = config
            .release_notifications
            .then(|| ReleaseListener::start(client.clone(), config.clone(), waiters.clone()));
        let (places, spares, group_leases) = (Mutex::default(), Mutex::default(), Mutex::default());
        let leases = Mutex::default();
        let (id, slots) = (Token::generate().as_str().replace('-', ""), Mutex::default());
        let inner =
            Inner { client, config, waiters, places, id, slots, spares, group_leases, leases, _listener: listener };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The etcd client the store uses (cheap to clone), e.g. to send requests of your own.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The key prefix: locks live at `{prefix}/lock:{key}`.
    pub fn key_prefix(&self) -> &str {
        &self.inner.config.key_prefix
    }

    /// The etcd key of a lock, `{prefix}/lock:{key}`.
    pub fn etcd_key(&self, key: &StoreKey) -> String {
        self.inner.config.lock_key(key.as_str())
    }

    /// The etcd key of the value attached to the lease of a lock
    /// ([`LeaseValueStore`]), `{prefix}/value/lock:{key}`.
    pub fn value_key(&self, key: &StoreKey) -> String {
        self.inner.config.value_key(key.as_str())
    }

    /// Whether the release watch is up (waiters sleep until notified rather than poll).
    pub fn is_listening(&self) -> bool {
        self.inner.waiters.is_listening()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn waiters(&self) -> &WaiterRegistry {
        &self.inner.waiters
    }

    /// The leases of the lock-group attempts of this store, by token.
    pub(crate) fn group_leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, GroupLeases>> {
        self.inner.group_leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one request with the store's request timeout, mapping failures to
    /// [`LockError::Store`].
    pub(crate) async fn call<T, E>(
        &self,
        operation: &'static str,
        key: Option<&StoreKey>,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, LockError>
    where
        E: Into<distlock_api::BoxError>,
    {
        let key_name = key.map(StoreKey::lock_key);
        match tokio::time::timeout(self.inner.config.response_timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(LockError::store(BACKEND, operation, key_name, err)),
            Err(_) => Err(LockError::store(
                BACKEND,
                operation,
                key_name,
                format!("no answer within {:?}", self.inner.config.response_timeout),
            )),
        }
    }

    /// Revokes `lease` in the background: it holds no key any more (or is about to be
    /// given up), so nothing waits for it; a failure only leaves it to expire.
    pub(crate) fn revoke_later(&self, lease: i64) {
        if lease == 0 {
            return;
        }
        let mut leases = self.inner.client.lease_client();
        let timeout = self.inner.config.response_timeout;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(Err(err)) = tokio::time::timeout(timeout, leases.revoke(lease)).await {
                    tracing::debug!(lease, error = %err, "revoking an unused etcd lease failed; it expires on its own");
                }
            });
        }
    }

    /// The time left on `lease` (whole seconds, rounded down by etcd), or `None` when it
    /// has ended.
    pub(crate) async fn lease_left(
        &self,
        operation: &'static str,
        key: &StoreKey,
        lease: i64,
    ) -> Result<Option<(Duration, i64)>, LockError> {
        if lease == 0 {
            return Ok(Some((Duration::MAX, 0)));
        }
        let mut leases = self.inner.client.lease_client();
        match tokio::time::timeout(self.inner.config.response_timeout, leases.time_to_live(lease, None)).await {
            Ok(Ok(answer)) if answer.ttl() >= 0 => {
                Ok(Some((Duration::from_secs(answer.ttl().unsigned_abs()), answer.granted_ttl())))
            }
            Ok(Ok(_)) => Ok(None),
            Ok(Err(err)) if is_lease_not_found(&err) => Ok(None),
            Ok(Err(err)) => Err(LockError::store(BACKEND, operation, Some(key.lock_key()), err)),
            Err(_) => Err(LockError::store(BACKEND, operation, Some(key.lock_key()), "no answer in time")),
        }
    }

    async fn holder_of(&self, key: &StoreKey, kv: &KeyValue) -> Result<Option<LockInfo>, LockError> {
        let token = token_of(kv).map_err(|cause| LockError::store(BACKEND, "inspect", Some(key.lock_key()), cause))?;
        let Some((left, _)) = self.lease_left("inspect", key, kv.lease()).await? else { return Ok(None) };
        Ok(Some(LockInfo::new(token, fence_of(kv.create_revision()), left)))
    }
}

/// A waiter's place in a queue, as this store created it.
#[derive(Debug, Clone)]
struct Place {
    /// The number of its slot (see [`Slots`]).
    slot: u32,
    lease: i64,
    /// The place key's create revision: its position in the queue.
    revision: i64,
    /// When the place's lease was last granted or kept alive.
    refreshed_at: Instant,
    /// The etcd key of the place just ahead, as read when this one was taken: the first
    /// wait's guess of what to watch (see [`QueueStore::wait_for_turn`]), used once.
    ahead: Option<String>,
}

/// What [`EtcdLockStore::keep_place`] did: the waiter's place, and whether the key was
/// held or an older place waited when it was taken (`false` when not read).
#[derive(Debug, Clone)]
struct KeptPlace {
    place: Place,
    blocked: bool,
}

/// A lease of this store's, as a lock-group attempt keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeptLease {
    pub(crate) lease: i64,
    /// Its TTL as asked, whole seconds.
    pub(crate) secs: i64,
    /// When it was last granted or kept alive.
    pub(crate) kept_at: Instant,
}

impl KeptLease {
    /// Whether the lease has surely not run out yet (etcd may have granted more).
    pub(crate) fn surely_alive(&self) -> bool {
        self.kept_at.elapsed() < Duration::from_secs(self.secs.unsigned_abs())
    }
}

/// The leases of one lock-group token that are not (yet) known from its keys: the hold
/// lease of an attempt in flight or kept for the next attempt of a waiting group, and the
/// lease of its places. A release or withdrawal with the token revokes them, so a grant
/// still in flight when its acquisition was cancelled takes nothing (its put fails, or
/// its keys go with the lease).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GroupLeases {
    pub(crate) hold: Option<KeptLease>,
    pub(crate) places: Option<KeptLease>,
}

/// An unused lease kept for a waiter's next attempt.
#[derive(Debug, Clone, Copy)]
struct Spare {
    lease: i64,
    /// Its TTL, whole seconds.
    secs: i64,
    kept_at: Instant,
}

/// The lock leases of a store's holders, and released ones it keeps for its next
/// acquisitions.
///
/// A released lock's lease holds no key any more. Instead of revoking it (a Raft write)
/// and granting another for the next acquisition (another), the store keeps it: the next
/// acquisition with the same TTL puts its key on it and sends a keep-alive beside that
/// transaction, as a waiter does with its spare (see `attempt`), so the lease has its full
/// TTL again when the key is held. Only leases with at least half of their TTL left are
/// used again; the others, and those beyond [`Leases::IDLE`], are revoked.
#[derive(Debug, Default)]
struct Leases {
    /// The leases holding a key of this store: lease → (TTL in whole seconds, when its
    /// TTL was last reset: granted, or kept alive).
    held: HashMap<i64, (i64, Instant)>,
    /// Released leases, with the TTL and reset time they had.
    idle: Vec<Spare>,
    /// The leases of places this store's waiters left by taking the key (the place went
    /// in the same transaction), kept for the store's next place with the same TTL.
    idle_places: Vec<Spare>,
}

impl Leases {
    /// Released leases (and, apart, place leases) kept at most.
    const IDLE: usize = 16;
    /// Held leases tracked at most (leases of locks never released, e.g. left to expire,
    /// stay until then): beyond it the record starts afresh, and those leases are revoked
    /// on release as untracked ones are.
    const HELD: usize = 4_096;

    /// Whether `spare` has at least half of its TTL left.
    fn fresh(spare: &Spare) -> bool {
        spare.kept_at.elapsed() < Duration::from_secs(spare.secs.unsigned_abs()) / 2
    }
}

/// What a check before a wait reads: whether the lock key exists, and the etcd key of a
/// place in its queue ahead of the waiter's (see [`EtcdLockStore::turn`]).
#[derive(Debug)]
struct Turn {
    held: bool,
    ahead: Option<String>,
}

impl EtcdLockStore {
    /// Takes or refreshes `token`'s place in the queue of `key`; returns it, and whether
    /// the waiter's turn is certainly not yet.
    async fn keep_place(&self, key: &StoreKey, token: &Token, place: Ttl) -> Result<KeptPlace, LockError> {
        let etcd_key = self.etcd_key(key);
        let cached = self.places().get(&(etcd_key.clone(), token.as_str().to_owned())).cloned();
        if let Some(mut known) = cached {
            // Refreshed recently enough: a third of the place's lease has not passed yet.
            if known.refreshed_at.elapsed() < place.as_duration() / 3 {
                return Ok(KeptPlace { place: known, blocked: false });
            }
            let mut leases = self.inner.client.lease_client();
            match tokio::time::timeout(self.inner.config.response_timeout, leases.keep_alive(known.lease)).await {
                Ok(Ok(_)) => {
                    known.refreshed_at = Instant::now();
                    self.places().insert((etcd_key, token.as_str().to_owned()), known.clone());
                    return Ok(KeptPlace { place: known, blocked: false });
                }
                // The place expired: take a new one (at the back of the queue).
                Ok(Err(err)) if is_lease_not_found(&err) => {}
                Ok(Err(err)) => return Err(LockError::store(BACKEND, "acquire", Some(key.lock_key()), err)),
                Err(_) => return Err(LockError::store(BACKEND, "acquire", Some(key.lock_key()), "no answer in time")),
            }
        }
        let slot = self.slots().assign(&etcd_key, token.as_str());
        let place_key = self.place_key(key, slot);
        let queue = self.inner.config.queue_prefix(key.as_str());
        let secs = lease_seconds(place.as_duration());
        let put = |lease: i64| {
            let kv = self.inner.client.kv_client();
            let options = PutOptions::new().with_lease(lease).with_prev_key();
            // Read in the same revision: the key's holder, and the oldest place (the
            // waiter's turn is not yet unless the key is free, or its own, and that place
            // is this one).
            let txn = Txn::new().and_then([
                TxnOp::put(place_key.clone(), place_value(token), Some(options)),
                TxnOp::get(etcd_key.clone(), None),
                oldest_place(&queue),
            ]);
            self.put_place(key, &etcd_key, token, txn, kv)
        };
        // The lease of a place this store's waiters left, with a keep-alive sent beside
        // the put (no Raft write), as a released lock's lease is used again.
        let mut reused = None;
        if let Some(idle) = self.take_idle_place(secs) {
            let refreshed_at = Instant::now();
            let mut keeper = self.inner.client.lease_client();
            let timeout = self.inner.config.response_timeout;
            let (kept, answer) =
                tokio::join!(tokio::time::timeout(timeout, keeper.keep_alive(idle.lease)), put(idle.lease));
            match (kept, answer) {
                (Ok(Ok(_)), Ok(answer)) => reused = Some((idle.lease, refreshed_at, answer)),
                // Not reset in time: the place lasts as long as the lease had left, and the
                // waiter's next attempt keeps it alive (or finds it gone).
                (_, Ok(answer)) => reused = Some((idle.lease, idle.kept_at, answer)),
                // The lease ran out (nothing was put): a new one.
                (_, Err(_)) => self.revoke_later(idle.lease),
            }
        }
        let (lease, refreshed_at, answer) = match reused {
            Some(reused) => reused,
            None => {
                let refreshed_at = Instant::now();
                let mut leases = self.inner.client.lease_client();
                let lease = self.call("acquire", Some(key), leases.grant(secs, None)).await?.id();
                match put(lease).await {
                    Ok(answer) => (lease, refreshed_at, answer),
                    Err(err) => {
                        self.revoke_later(lease);
                        return Err(err);
                    }
                }
            }
        };
        let revision = self.place_revision(&answer);
        let (mut held, mut oldest) = (false, None);
        for (i, op) in answer.op_responses().into_iter().enumerate() {
            match op {
                // Held by this token is an acquisition that went through (see `acquisition`).
                TxnOpResponse::Get(get) if i == 1 => {
                    held = get.kvs().first().is_some_and(|kv| kv.value() != token.as_str().as_bytes());
                }
                TxnOpResponse::Get(get) => oldest = get.kvs().first().map(|kv| kv.key().to_vec()),
                _ => {}
            }
        }
        let known = Place { slot, lease, revision, refreshed_at, ahead: None };
        self.places().insert((etcd_key, token.as_str().to_owned()), known.clone());
        let blocked = held || oldest.is_some_and(|oldest| oldest != place_key.as_bytes());
        Ok(KeptPlace { place: known, blocked })
    }

    /// The create revision of the place the transaction `answer` put: its own revision,
    /// or, when the place existed (taken by an earlier call whose answer was lost), the
    /// old one, which keeps its position; the old lease goes.
    fn place_revision(&self, answer: &etcd_client::TxnResponse) -> i64 {
        for op in answer.op_responses() {
            if let TxnOpResponse::Put(put) = op {
                if let Some(prev) = put.prev_key() {
                    self.revoke_later(prev.lease());
                    return prev.create_revision();
                }
            }
        }
        answer.header().map_or(0, |header| header.revision())
    }

    /// A token's first queued attempt, in one transaction: the key when it is free and
    /// nobody waits (as [`try_acquire`](LockStore::try_acquire) takes it), else a place at
    /// the back of the queue, with the key's holder read beside it. The place's lease is
    /// one this store's places left (kept alive beside the transaction), else a new one;
    /// when that kept lease turns out to have ended, the attempt runs again on a new one.
    async fn first_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        let etcd_key = self.etcd_key(key);
        let queue = self.inner.config.queue_prefix(key.as_str());
        let slot = self.slots().assign(&etcd_key, token.as_str());
        let place_key = self.place_key(key, slot);
        let secs = lease_seconds(place.as_duration());
        let mut idle = self.take_idle_place(secs);
        loop {
            let reused = idle.take();
            let place_lease = match reused {
                Some(spare) => spare.lease,
                None => self.call("acquire", Some(key), self.inner.client.lease_client().grant(secs, None)).await?.id(),
            };
            let placed = place_value(token);
            // Each transaction built is sent, and may put the place: until it is answered,
            // the slot may not go to another waiter (see `Slots`).
            let sent = AtomicU32::new(0);
            let txn = |lease: i64| {
                sent.fetch_add(1, Ordering::Relaxed);
                self.slots().put_sending(&etcd_key, token.as_str());
                let place = PutOptions::new().with_lease(place_lease).with_prev_key();
                take_if_free(&etcd_key, &queue, token, lease).or_else([
                    TxnOp::put(place_key.clone(), placed.clone(), Some(place)),
                    TxnOp::get(etcd_key.clone(), None),
                    newest_places(&queue),
                ])
            };
            let refreshed_at = Instant::now();
            let keep_alive = async {
                if reused.is_none() {
                    return Ok(Ok(()));
                }
                let mut keeper = self.inner.client.lease_client();
                let kept = tokio::time::timeout(self.inner.config.response_timeout, keeper.keep_alive(place_lease));
                kept.await.map(|kept| kept.map(drop))
            };
            let (kept, answer) = tokio::join!(keep_alive, self.attempt(key, token, ttl, txn));
            let lease_ended = matches!(&kept, Ok(Err(ended)) if is_lease_not_found(ended));
            // Answered (an earlier send of the attempt failed on its ended lock lease), or
            // failed on the place's ended lease: nothing else can be put.
            if answer.is_ok() || lease_ended {
                self.slots().puts_answered(&etcd_key, token.as_str(), sent.load(Ordering::Relaxed));
            }
            // When the place's lease was last reset to its full TTL.
            let reset_at = match (&kept, reused) {
                (Ok(Ok(())), _) | (_, None) => refreshed_at,
                (_, Some(spare)) => spare.kept_at,
            };
            let (answer, lease) = match answer {
                Ok(answer) => answer,
                Err(err) => {
                    self.revoke_later(place_lease);
                    // The kept lease had ended: the transaction failed on it; once more,
                    // on a new lease.
                    if lease_ended {
                        continue;
                    }
                    return Err(err);
                }
            };
            if answer.succeeded() {
                // Taken at once: no place was put.
                self.slots().gone(&etcd_key, token.as_str());
                let spare = Spare { lease: place_lease, secs, kept_at: reset_at };
                self.keep_or_revoke(|leases| &mut leases.idle_places, spare);
                return Ok(acquisition(answer, token));
            }
            if lease != 0 {
                self.keep_spare(&etcd_key, token, lease, ttl);
            }
            let revision = self.place_revision(&answer);
            let ahead = place_ahead(&answer, &place_key);
            let known = Place { slot, lease: place_lease, revision, refreshed_at: reset_at, ahead };
            self.places().insert((etcd_key.clone(), token.as_str().to_owned()), known);
            return Ok(acquisition(answer, token));
        }
    }

    /// One acquisition attempt (see [`attempt_with`](Self::attempt_with)); a lease that
    /// took the key is recorded as held, to be kept for the next acquisition on release.
    async fn attempt(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        txn: impl Fn(i64) -> Txn,
    ) -> Result<(etcd_client::TxnResponse, i64), LockError> {
        let sent_at = Instant::now();
        let (answer, lease) = self.attempt_with(key, token, ttl, txn).await?;
        if answer.succeeded() && lease != 0 {
            self.note_held(lease, lease_seconds(ttl.as_duration()), sent_at);
        }
        Ok((answer, lease))
    }

    /// The transaction `txn(lease)` with this waiter's spare lease from an earlier attempt
    /// or a released lease of this store (kept alive in parallel, so it has its full TTL
    /// again by the time the key is held), else a new lease. Returns the answer and the
    /// lease, or lease 0 when the key was held and the lease is not worth keeping.
    async fn attempt_with(
        &self,
        key: &StoreKey,
        token: &Token,
        ttl: Ttl,
        txn: impl Fn(i64) -> Txn,
    ) -> Result<(etcd_client::TxnResponse, i64), LockError> {
        let secs = lease_seconds(ttl.as_duration());
        let spare = self.spares().remove(&(self.etcd_key(key), token.as_str().to_owned()));
        let spare = match spare {
            Some(spare) => Some(spare),
            None => self.take_idle(secs),
        };
        let mut kv = self.inner.client.kv_client();
        let mut leases = self.inner.client.lease_client();
        match spare {
            Some(spare) if spare.secs == secs => {
                let timeout = self.inner.config.response_timeout;
                let mut keeper = self.inner.client.lease_client();
                // In flight, the spare stays the token's (see below, a new lease).
                let spare_key = (self.etcd_key(key), token.as_str().to_owned());
                self.spares().insert(spare_key.clone(), Spare { lease: spare.lease, secs, kept_at: spare.kept_at });
                let (kept, answer) = tokio::join!(
                    tokio::time::timeout(timeout, keeper.keep_alive(spare.lease)),
                    self.call("acquire", Some(key), kv.txn(txn(spare.lease)))
                );
                self.spares().remove(&spare_key);
                let expired = matches!(&kept, Ok(Err(err)) if is_lease_not_found(err));
                match (kept, answer) {
                    (Ok(Ok(_)), Ok(answer)) => return Ok((answer, spare.lease)),
                    // Expired while the waiter slept: nothing was put; try with a new lease.
                    (_, Err(_)) if expired => {}
                    (_, Ok(answer)) if expired && !answer.succeeded() => return Ok((answer, 0)),
                    (_, Ok(answer)) if !answer.succeeded() => {
                        self.revoke_later(spare.lease);
                        return Ok((answer, 0));
                    }
                    // Held now, but the lease's TTL was not reset: give the key up (the
                    // lease takes it along) rather than hold it for less than asked.
                    (kept, answer) => {
                        self.revoke_later(spare.lease);
                        let cause: distlock_api::BoxError = match (kept, answer) {
                            (_, Err(err)) => return Err(err),
                            (Ok(Err(err)), _) => err.into(),
                            _ => "the lease keep-alive got no answer in time".into(),
                        };
                        return Err(LockError::store(BACKEND, "acquire", Some(key.lock_key()), cause));
                    }
                }
            }
            Some(spare) => self.revoke_later(spare.lease),
            None => {}
        }
        let lease = self.call("acquire", Some(key), leases.grant(secs, None)).await?.id();
        // Until the answer comes, the lease is this attempt's spare: when the attempt is
        // cancelled, the manager's release with the token revokes it, and the lease takes
        // along a key the put may still make (the release may reach etcd first).
        let spare_key = (self.etcd_key(key), token.as_str().to_owned());
        self.spares().insert(spare_key.clone(), Spare { lease, secs, kept_at: Instant::now() });
        let answer = self.call("acquire", Some(key), kv.txn(txn(lease))).await;
        self.spares().remove(&spare_key);
        match answer {
            Ok(answer) => Ok((answer, lease)),
            Err(err) => {
                // The outcome is unknown; the manager releases with this token, and the
                // lease goes (taking the key with it, if the put happened).
                self.revoke_later(lease);
                Err(err)
            }
        }
    }

    /// Keeps `lease` (unused: the key was held) for the waiter's next attempt.
    fn keep_spare(&self, etcd_key: &str, token: &Token, lease: i64, ttl: Ttl) {
        let secs = lease_seconds(ttl.as_duration());
        let now = Instant::now();
        let mut spares = self.spares();
        // A waiter that gave up leaves its spare behind: drop those whose lease has ended.
        if spares.len() >= 64 {
            spares
                .retain(|_, spare| now.duration_since(spare.kept_at) < Duration::from_secs(spare.secs.unsigned_abs()));
        }
        if let Some(old) =
            spares.insert((etcd_key.to_owned(), token.as_str().to_owned()), Spare { lease, secs, kept_at: now })
        {
            self.revoke_later(old.lease);
        }
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Spare>> {
        self.inner.spares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.inner.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `lease` (TTL `secs`, reset at `reset_at`) holds a key of this store.
    fn note_held(&self, lease: i64, secs: i64, reset_at: Instant) {
        let mut leases = self.leases();
        if leases.held.len() >= Leases::HELD {
            leases.held.clear();
        }
        leases.held.insert(lease, (secs, reset_at));
    }

    /// Records that `lease` (held) had its TTL reset at `reset_at`.
    fn note_kept(&self, lease: i64, reset_at: Instant) {
        if let Some(held) = self.leases().held.get_mut(&lease) {
            held.1 = reset_at;
        }
    }

    /// A released lease of TTL `secs` with at least half of it left, if one is kept.
    fn take_idle(&self, secs: i64) -> Option<Spare> {
        self.take_fresh(|leases| &mut leases.idle, secs)
    }

    /// A kept place lease of TTL `secs` with at least half of it left, if there is one.
    fn take_idle_place(&self, secs: i64) -> Option<Spare> {
        self.take_fresh(|leases| &mut leases.idle_places, secs)
    }

    /// Takes a lease of TTL `secs` from the kept leases `kept` picks, revoking those that
    /// have less than half of their TTL left.
    fn take_fresh(&self, kept: fn(&mut Leases) -> &mut Vec<Spare>, secs: i64) -> Option<Spare> {
        let mut leases = self.leases();
        let kept = kept(&mut leases);
        // Allocates only when a lease went stale (rarely: one is used within half its TTL).
        let mut stale = Vec::new();
        kept.retain(|idle| {
            let fresh = Leases::fresh(idle);
            if !fresh {
                stale.push(idle.lease);
            }
            fresh
        });
        let found = kept.iter().rposition(|idle| idle.secs == secs).map(|at| kept.swap_remove(at));
        drop(leases);
        for lease in stale {
            self.revoke_later(lease);
        }
        found
    }

    /// Gives up `lease`, whose key was just deleted: kept for the next acquisition when
    /// this store granted it and it has half of its TTL left, else revoked.
    fn retire(&self, lease: i64) {
        let held = self.leases().held.remove(&lease);
        match held {
            Some((secs, kept_at)) => self.keep_or_revoke(|leases| &mut leases.idle, Spare { lease, secs, kept_at }),
            None => self.revoke_later(lease),
        }
    }

    /// Gives up the lease of `place`, whose key the waiter's successful attempt deleted:
    /// kept for the store's next place when it has half of its TTL left, else revoked.
    fn retire_place(&self, place: Place, secs: i64) {
        let spare = Spare { lease: place.lease, secs, kept_at: place.refreshed_at };
        self.keep_or_revoke(|leases| &mut leases.idle_places, spare);
    }

    /// Keeps `spare` among the leases `kept` picks when there is room and it has half of
    /// its TTL left; revokes it otherwise.
    fn keep_or_revoke(&self, kept: fn(&mut Leases) -> &mut Vec<Spare>, spare: Spare) {
        let mut leases = self.leases();
        let kept = kept(&mut leases);
        if kept.len() < Leases::IDLE && Leases::fresh(&spare) {
            kept.push(spare);
            return;
        }
        drop(leases);
        self.revoke_later(spare.lease);
    }

    /// The etcd key of this store's place slot `slot` in the queue of `key`.
    fn place_key(&self, key: &StoreKey, slot: u32) -> String {
        self.inner.config.place_key(key.as_str(), &self.inner.id, slot)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.inner.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `txn`, which puts `token`'s place in the queue of `etcd_key`; until it is
    /// answered the place's slot may not go to another waiter (see [`Slots`]).
    async fn put_place(
        &self,
        key: &StoreKey,
        etcd_key: &str,
        token: &Token,
        txn: Txn,
        mut kv: etcd_client::KvClient,
    ) -> Result<etcd_client::TxnResponse, LockError> {
        self.slots().put_sending(etcd_key, token.as_str());
        let answer = self.call("acquire", Some(key), kv.txn(txn)).await;
        if answer.is_ok() {
            self.slots().puts_answered(etcd_key, token.as_str(), 1);
        }
        answer
    }

    fn forget_place(&self, etcd_key: &str, token: &Token) {
        self.places().remove(&(etcd_key.to_owned(), token.as_str().to_owned()));
    }

    fn places(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Place>> {
        self.inner.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `key` is held, and a place of its queue ahead of a waiter's, in one
    /// read-only transaction run to its end in a task of its own: with `before` (the
    /// create revision of the waiter's place), the place just ahead of it, the one whose
    /// leaving makes it the next in line; without, the oldest place.
    ///
    /// A wait often ends (at its deadline) while this request is in flight. A dropped
    /// gRPC request resets its HTTP/2 stream, and a connection that resets too many is
    /// closed by the h2 library ("too_many_internal_resets"), so the request is never
    /// dropped half-way.
    async fn turn(&self, key: &StoreKey, before: Option<i64>) -> Result<Turn, LockError> {
        let queue = self.inner.config.queue_prefix(key.as_str());
        let ahead = GetOptions::new().with_prefix().with_limit(1).with_keys_only();
        let ahead = match before {
            Some(revision) => {
                ahead.with_max_create_revision(revision - 1).with_sort(SortTarget::Create, SortOrder::Descend)
            }
            None => ahead.with_sort(SortTarget::Create, SortOrder::Ascend),
        };
        let txn = Txn::new().and_then([
            TxnOp::get(self.etcd_key(key), Some(GetOptions::new().with_count_only())),
            TxnOp::get(queue, Some(ahead)),
        ]);
        let mut kv = self.inner.client.kv_client();
        let timeout = self.inner.config.response_timeout;
        let request = tokio::spawn(async move { tokio::time::timeout(timeout, kv.txn(txn)).await });
        let fail =
            |cause: distlock_api::BoxError| LockError::store(BACKEND, "wait for release", Some(key.lock_key()), cause);
        let answer = match request.await {
            Ok(Ok(Ok(answer))) => answer,
            Ok(Ok(Err(err))) => return Err(fail(err.into())),
            Ok(Err(_)) => return Err(fail("no answer in time".into())),
            Err(err) => return Err(fail(err.into())),
        };
        let mut turn = Turn { held: false, ahead: None };
        for (i, op) in answer.op_responses().into_iter().enumerate() {
            if let TxnOpResponse::Get(get) = op {
                if i == 0 {
                    turn.held = get.count() > 0;
                } else if let Some(first) = get.kvs().first() {
                    turn.ahead = Some(String::from_utf8_lossy(first.key()).into_owned());
                }
            }
        }
        Ok(turn)
    }
}

/// `Txn If CreateRevision(key) = 0 ∧ queue of key empty Then Put(key, token, lease)`: the
/// key when it is free and nobody waits (a plain attempt never overtakes a fair waiter).
fn take_if_free(etcd_key: &str, queue: &str, token: &Token, lease: i64) -> Txn {
    Txn::new()
        .when([
            Compare::create_revision(etcd_key, CompareOp::Equal, 0),
            Compare::create_revision(queue, CompareOp::Equal, 0).with_prefix(),
        ])
        .and_then([TxnOp::put(etcd_key, token.as_str(), Some(PutOptions::new().with_lease(lease)))])
}

/// `Get` of the oldest place (by create revision) of the queue `queue`, its key only.
fn oldest_place(queue: &str) -> TxnOp {
    let oldest = GetOptions::new().with_prefix().with_limit(1).with_keys_only();
    TxnOp::get(queue, Some(oldest.with_sort(SortTarget::Create, SortOrder::Ascend)))
}

/// `Get` of the two newest places (by create revision) of the queue `queue`, their keys
/// only: after a waiter's place was put, its own and the one just ahead of it.
fn newest_places(queue: &str) -> TxnOp {
    let newest = GetOptions::new().with_prefix().with_limit(2).with_keys_only();
    TxnOp::get(queue, Some(newest.with_sort(SortTarget::Create, SortOrder::Descend)))
}

/// The place just ahead of `place_key` in the answer of a transaction that put it and then
/// read [`newest_places`]: the newest place that is not `place_key`. A guess only: a place
/// that existed already (its put a retry) may have newer ones behind it.
fn place_ahead(answer: &etcd_client::TxnResponse, place_key: &str) -> Option<String> {
    let newest = answer.op_responses().into_iter().rev().find_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    })?;
    let ahead = newest.kvs().iter().find(|kv| kv.key() != place_key.as_bytes())?;
    Some(String::from_utf8_lossy(ahead.key()).into_owned())
}

/// What the answer of an acquisition's transaction (put if free, else get the key) says:
/// acquired, with the answer's revision as the fence; or, the key held, acquired still
/// when the holder is `token` (a retry of an acquisition that went through, contract
/// item 5), else held.
fn acquisition(answer: etcd_client::TxnResponse, token: &Token) -> Acquire {
    if answer.succeeded() {
        let revision = answer.header().map_or(0, |header| header.revision());
        return Acquire::Acquired { fence: fence_of(revision) };
    }
    // The key's `Get` is the transaction's first (places may be read after it).
    let holder = answer.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
        _ => None,
    });
    let holder = holder.flatten();
    match holder {
        Some(kv) if kv.value() == token.as_str().as_bytes() => {
            Acquire::Acquired { fence: fence_of(kv.create_revision()) }
        }
        _ => Acquire::Held { ttl_left: None },
    }
}

/// Now on this process's wall clock, in Unix milliseconds: when a waiting place is taken.
pub(crate) fn unix_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// The value of `token`'s place: when it was taken ([`unix_ms`]), a space and the token.
fn place_value(token: &Token) -> String {
    format!("{} {}", unix_ms(), token.as_str())
}

/// The token of the place `found` in the queue `queue`, and when it was taken: from its
/// value ([`place_value`]), or, for a place whose key ends in its token and whose value
/// is the time alone, from both.
fn read_place(found: &KeyValue, queue: &str) -> Option<(Token, Option<u64>)> {
    let value = std::str::from_utf8(found.value()).ok()?;
    if let Some((placed_ms, token)) = value.split_once(' ') {
        return Some((Token::parse(token).ok()?, placed_ms.parse().ok()));
    }
    let token = std::str::from_utf8(found.key()).ok()?.strip_prefix(queue)?;
    Some((Token::parse(token).ok()?, value.parse().ok()))
}

/// How long ago `placed_ms` ([`unix_ms`] of another process, maybe) was by this process's
/// clock; zero when it lies ahead.
pub(crate) fn waited_since(placed_ms: u64) -> Duration {
    Duration::from_millis(unix_ms().saturating_sub(placed_ms))
}

/// The key's create revision as a fencing number.
/// Where a listing page over the keys starting with `scope` begins: `scope`, or just after
/// the key `base` + the cursor's text.
///
/// # Errors
///
/// [`LockError::Config`] for a cursor before `scope`, which this listing cannot have
/// issued.
pub(crate) fn page_start(scope: &str, base: &str, cursor: Option<&ListCursor>) -> Result<String, LockError> {
    let Some(cursor) = cursor else { return Ok(scope.to_owned()) };
    let after = format!("{base}{}\0", cursor.as_str());
    if !after.starts_with(scope) && after.as_str() < scope {
        return Err(LockError::Config { message: "this list cursor was not issued by this listing".into() });
    }
    Ok(after)
}

pub(crate) fn fence_of(revision: i64) -> Option<u64> {
    u64::try_from(revision).ok().filter(|&r| r > 0)
}

pub(crate) fn token_of(kv: &KeyValue) -> Result<Token, String> {
    let text = std::str::from_utf8(kv.value()).map_err(|_| "the lock's value is not a token".to_owned())?;
    Token::parse(text).map_err(|_| "the lock's value is not a token".to_owned())
}

pub(crate) fn is_lease_not_found(err: &etcd_client::Error) -> bool {
    let text = err.to_string();
    text.contains("lease not found")
}

/// The first key after every key starting with `prefix` (etcd's prefix range end).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[async_trait]
impl LockStore for EtcdLockStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_fencing(true)
            .with_release_notifications(self.inner.config.release_notifications)
            .with_fair_queue(true)
            .with_ttl_granularity(TTL_GRANULARITY)
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        Some(self)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let etcd_key = self.etcd_key(key);
        // Free, and nobody queued: a plain attempt never overtakes a fair waiter.
        let queue = self.inner.config.queue_prefix(key.as_str());
        let txn =
            |lease: i64| take_if_free(&etcd_key, &queue, token, lease).or_else([TxnOp::get(etcd_key.clone(), None)]);
        let (answer, lease) = self.attempt(key, token, ttl, txn).await?;
        if !answer.succeeded() && lease != 0 {
            self.keep_spare(&etcd_key, token, lease, ttl);
        }
        Ok(acquisition(answer, token))
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let etcd_key = self.etcd_key(key);
        // A waiter's token: its place in the queue goes too (a place this store named;
        // another store's waiter leaves its own, or its place ends with its lease).
        let slot = self.slots().of(&etcd_key, token.as_str());
        let leave = slot.map(|slot| {
            let place = self.place_key(key, slot);
            TxnOp::delete(place, Some(DeleteOptions::new().with_prev_key()))
        });
        // The lease's value goes with the key (without its previous value: its lease is the
        // key's, revoked below once).
        let release = [
            TxnOp::delete(etcd_key.clone(), Some(DeleteOptions::new().with_prev_key())),
            TxnOp::delete(self.value_key(key), None),
        ];
        let txn = Txn::new()
            .when([Compare::value(etcd_key.clone(), CompareOp::Equal, token.as_str())])
            .and_then(release.into_iter().chain(leave.clone()).collect::<Vec<_>>())
            .or_else(leave.into_iter().collect::<Vec<_>>());
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("release", Some(key), kv.txn(txn)).await?;
        self.forget_place(&etcd_key, token);
        if slot.is_some() {
            self.slots().gone(&etcd_key, token.as_str());
        }
        // The token's spare lease, or the lease of its acquisition still in flight (a
        // cancelled attempt): revoked before returning, so that a put still on its way
        // either fails or is deleted with the lease.
        let spare = self.spares().remove(&(etcd_key.clone(), token.as_str().to_owned()));
        if let Some(spare) = spare {
            let mut leases = self.inner.client.lease_client();
            let timeout = self.inner.config.response_timeout;
            if let Ok(Err(err)) = tokio::time::timeout(timeout, leases.revoke(spare.lease)).await {
                if !is_lease_not_found(&err) {
                    tracing::debug!(lease = spare.lease, error = %err, "revoking a spare etcd lease failed; it expires on its own");
                }
            }
        }
        let lock_key = etcd_key.as_bytes();
        for op in answer.op_responses() {
            if let TxnOpResponse::Delete(deleted) = op {
                for prev in deleted.prev_kvs() {
                    if prev.key() == lock_key {
                        self.retire(prev.lease());
                    } else {
                        self.revoke_later(prev.lease());
                    }
                }
            }
        }
        Ok(answer.succeeded())
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let etcd_key = self.etcd_key(key);
        let wanted = lease_seconds(ttl.as_duration());
        let txn = Txn::new()
            .when([Compare::value(etcd_key.clone(), CompareOp::Equal, token.as_str())])
            .and_then([TxnOp::get(etcd_key.clone(), None)]);
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("extend", Some(key), kv.txn(txn)).await?;
        if !answer.succeeded() {
            return Ok(false);
        }
        let Some(current) = answer.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(KeyValue::lease),
            _ => None,
        }) else {
            return Ok(false);
        };
        // The lease's TTL and a keep-alive, in parallel: the keep-alive is what extends
        // with the same TTL, and does no harm when the key moves to a new lease.
        let mut keeper = self.inner.client.lease_client();
        let timeout = self.inner.config.response_timeout;
        let kept_at = Instant::now();
        let (left, kept) = tokio::join!(
            self.lease_left("inspect", key, current),
            tokio::time::timeout(timeout, keeper.keep_alive(current))
        );
        let Some((_, granted)) = left? else { return Ok(false) };
        let mut leases = self.inner.client.lease_client();
        if granted == wanted {
            return match kept {
                Ok(Ok(_)) => {
                    self.note_kept(current, kept_at);
                    Ok(true)
                }
                Ok(Err(err)) if is_lease_not_found(&err) => Ok(false),
                Ok(Err(err)) => Err(LockError::store(BACKEND, "extend", Some(key.lock_key()), err)),
                Err(_) => Err(LockError::store(BACKEND, "extend", Some(key.lock_key()), "no answer in time")),
            };
        }
        // Another TTL: move the key to a new lease; its create revision (the fence) stays.
        // The lease's value, if it has one, moves along unchanged (`ignore_value`).
        let granted_at = Instant::now();
        let lease = self.call("extend", Some(key), leases.grant(wanted, None)).await?.id();
        let value_key = self.value_key(key);
        let move_value = Txn::new()
            .when([
                Compare::create_revision(value_key.clone(), CompareOp::Greater, 0),
                Compare::lease(value_key.clone(), CompareOp::Equal, current),
            ])
            .and_then([TxnOp::put(value_key, "", Some(PutOptions::new().with_lease(lease).with_ignore_value()))]);
        let txn = Txn::new()
            .when([
                Compare::value(etcd_key.clone(), CompareOp::Equal, token.as_str()),
                Compare::lease(etcd_key.clone(), CompareOp::Equal, current),
            ])
            .and_then([
                TxnOp::put(etcd_key, token.as_str(), Some(PutOptions::new().with_lease(lease))),
                TxnOp::txn(move_value),
            ]);
        match self.call("extend", Some(key), kv.txn(txn)).await {
            Ok(answer) if answer.succeeded() => {
                self.leases().held.remove(&current);
                self.note_held(lease, wanted, granted_at);
                self.revoke_later(current);
                Ok(true)
            }
            Ok(_) => {
                self.revoke_later(lease);
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("inspect", Some(key), kv.get(self.etcd_key(key), None)).await?;
        match answer.kvs().first() {
            Some(found) => self.holder_of(key, found).await,
            None => Ok(None),
        }
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        if !self.inner.config.release_notifications {
            tokio::time::sleep_until(distlock_api::waiters::deadline_after(max)).await;
            return Ok(());
        }
        let etcd_key = self.etcd_key(key);
        // Free for a plain waiter: not held, and nobody queued (who would be served first).
        // Woken by a release, and by a place leaving the queue (on the queue's prefix).
        let queue = self.inner.config.queue_prefix(key.as_str());
        let check = || async {
            let turn = self.turn(key, None).await?;
            Ok(if turn.held || turn.ahead.is_some() { KeyState::Held { expires_in: None } } else { KeyState::Free })
        };
        self.inner.waiters.wait_any(&[&etcd_key, &queue], max, check).await.map(|_| ())
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let locks_prefix = self.inner.config.locks_prefix();
        let scope = format!("{locks_prefix}{}", pattern.literal_prefix());
        let start = page_start(&scope, &locks_prefix, cursor)?;
        let options = GetOptions::new()
            .with_range(prefix_end(scope.as_bytes()))
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("list", None, kv.get(start, Some(options))).await?;
        let mut locks = Vec::new();
        let mut last = None;
        for found in answer.kvs() {
            let Ok(name) = std::str::from_utf8(found.key()) else { continue };
            let Some(app_key) = name.strip_prefix(&locks_prefix) else { continue };
            last = Some(app_key.to_owned());
            if !pattern.matches(app_key) {
                continue;
            }
            let Ok(lock_key) = LockKey::new(app_key) else { continue };
            let store_key = lock_key.to_store_key();
            if let Some(holder) = self.holder_of(&store_key, found).await? {
                locks.push(HeldLock::new(lock_key, vec![holder]));
            }
        }
        let next = if answer.more() { last.map(ListCursor::new) } else { None };
        Ok(ListPage::new(locks, next))
    }
}

#[async_trait]
impl QueueStore for EtcdLockStore {
    /// A token's first queued attempt is one transaction, as a plain attempt is: it takes
    /// the key when free and nobody waits, else the place.
    fn queues_in_first_attempt(&self) -> bool {
        true
    }

    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let QueuedAttempt { key, token, ttl, place } = attempt;
        let etcd_key = self.etcd_key(key);
        if !self.places().contains_key(&(etcd_key.clone(), token.as_str().to_owned())) {
            return self.first_queued(attempt).await;
        }
        let KeptPlace { place: mine, blocked } = self.keep_place(key, token, place).await?;
        if blocked {
            // Held, or someone is ahead, as the place was taken: no attempt can succeed
            // yet (the wait's own check reads again before sleeping).
            return Ok(Acquire::Held { ttl_left: None });
        }
        let queue = self.inner.config.queue_prefix(key.as_str());
        let place_key = self.place_key(key, mine.slot);
        // Free, and no place older than this waiter's: its turn.
        let txn = |lease: i64| {
            Txn::new()
                .when([
                    Compare::create_revision(etcd_key.clone(), CompareOp::Equal, 0),
                    Compare::create_revision(queue.clone(), CompareOp::Greater, mine.revision - 1).with_prefix(),
                ])
                .and_then([
                    TxnOp::put(etcd_key.clone(), token.as_str(), Some(PutOptions::new().with_lease(lease))),
                    TxnOp::delete(place_key.clone(), None),
                ])
                .or_else([TxnOp::get(etcd_key.clone(), None)])
        };
        let (answer, lease) = self.attempt(key, token, ttl, txn).await?;
        if answer.succeeded() {
            self.forget_place(&etcd_key, token);
            self.slots().gone(&etcd_key, token.as_str());
            self.retire_place(mine, lease_seconds(place.as_duration()));
        } else if lease != 0 {
            self.keep_spare(&etcd_key, token, lease, ttl);
        }
        Ok(acquisition(answer, token))
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        if !self.inner.config.release_notifications {
            tokio::time::sleep_until(distlock_api::waiters::deadline_after(max)).await;
            return Ok(());
        }
        let etcd_key = self.etcd_key(key);
        let deadline = distlock_api::waiters::deadline_after(max);
        let (mine, guess, own_place) = match self.places().get_mut(&(etcd_key.clone(), token.as_str().to_owned())) {
            Some(place) => (Some(place.revision), place.ahead.take(), Some(self.place_key(key, place.slot))),
            None => (None, None, None),
        };
        // Each waiter waits on the place just ahead of its own, and the next in line on the
        // lock key: a release wakes the next waiter alone, and a place leaving wakes the
        // waiter behind it alone, instead of every waiter looking again (a read each).
        // `None`: the lock key. A first guess (the place read ahead when this one was
        // taken, else the lock key); the check corrects it.
        let mut watched: Option<String> = guess;
        loop {
            let seen = Mutex::new(None);
            // Sleep only when registered on the right key: the place ahead, or the lock key
            // while held and no place is ahead. Otherwise return, to take the turn or to
            // register on the right key.
            let check = || async {
                let turn = self.turn(key, mine).await?;
                let ahead = turn.ahead.clone().filter(|place| Some(place) != own_place.as_ref());
                let stay = ahead == watched && (turn.held || ahead.is_some());
                *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some((turn.held, ahead));
                Ok(if stay { KeyState::Held { expires_in: None } } else { KeyState::Free })
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let on = watched.as_deref().unwrap_or(&etcd_key);
            let woken = self.inner.waiters.wait(on, left, check).await?;
            let seen = seen.into_inner().unwrap_or_else(PoisonError::into_inner);
            if Instant::now() >= deadline {
                return Ok(());
            }
            match (woken, seen) {
                // The place ahead left: maybe next in line now (the first guess).
                (Woken::Notified, _) if watched.is_some() => watched = None,
                // Registered on the wrong key: register on the right one.
                (Woken::AlreadyFree, Some((held, ahead))) if held || ahead.is_some() => watched = ahead,
                // Next in line and the lock released, or the wait ended otherwise: attempt.
                _ => return Ok(()),
            }
        }
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let queue = self.inner.config.queue_prefix(key.as_str());
        let options = GetOptions::new().with_prefix().with_count_only();
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("count waiters", Some(key), kv.get(queue, Some(options))).await?;
        Ok(usize::try_from(answer.count()).unwrap_or(0))
    }

    /// One `Range` over the key's queue in creation order (arrival), then
    /// `LeaseTimeToLive` per place (in parallel). etcd keeps no clock: a place records
    /// when its waiter took it by the waiter's clock, and the time waited is read against
    /// this process's clock (so it is off by the clocks' difference).
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let queue = self.inner.config.queue_prefix(key.as_str());
        let options = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
        let mut kv = self.inner.client.kv_client();
        let answer = self.call("queue_places", Some(key), kv.get(queue.as_str(), Some(options))).await?;
        let lefts = futures_util::future::join_all(
            answer.kvs().iter().map(|found| self.lease_left("queue_places", key, found.lease())),
        )
        .await;
        let mut places = Vec::with_capacity(lefts.len());
        for (found, left) in answer.kvs().iter().zip(lefts) {
            let Some((left, _)) = left? else { continue };
            let Some((token, placed_ms)) = read_place(found, &queue) else { continue };
            places.push(WaitingPlace::new(token, LockMode::Exclusive, placed_ms.map(waited_since), left));
        }
        Ok(places)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/lock:"), b"a/lock;");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn fences_are_positive_revisions() {
        assert_eq!(fence_of(0), None);
        assert_eq!(fence_of(-1), None);
        assert_eq!(fence_of(42), Some(42));
    }
}
