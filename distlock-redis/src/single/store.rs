//! `RedisLockStore`: the lock commands behind the `LockStore` trait.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, HeldLock, KeyPattern, LeaseValue, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockKey, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, ValuedHolder, WaitingPlace,
};
use redis::aio::ConnectionManager;

use crate::commands::{Commands, Failure};
use crate::config::{self, Config};
use crate::layout::Layout;
use crate::notify::ReleaseListener;
use crate::scripts::{Loaded, SCRIPTS};

/// A [`LockStore`] on a single Redis server: `SET NX PX` to acquire, token-checked Lua
/// scripts to release and extend.
///
/// | operation | what the server receives |
/// |---|---|
/// | acquire | `SET {key_prefix}:lock:{key} <token> NX PX <ttl_ms>` |
/// | acquire, [fencing mode](crate::RedisLockStoreBuilder::fencing) | `EVALSHA` of a script doing that `SET` and, on success, `INCR {key_prefix}:fence` + `SET {key_prefix}:fence:lock:{key} <fence>:<token> PX <ttl_ms>` |
/// | release | `EVALSHA` of the compare-and-delete script [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) (`GET` == token → `DEL`), with `PUBLISH {key_prefix}:released {key_prefix}:lock:{key}` pipelined behind it |
/// | extend | `EVALSHA` of the extend script (`lua/extend.lua`: `GET` == token → `PEXPIRE`); in fencing mode also `PEXPIRE` of the fence key |
/// | inspect | `EVALSHA` of a read-only script (`GET`, `PTTL`, the fence key) |
/// | set a lease's value | `EVALSHA` of `lua/set_value.lua`: `GET` == token → `SET {key_prefix}:value:lock:{key} <token>:<value>` |
/// | inspect with the value | `EVALSHA` of `lua/inspect_value.lua`: `GET`, `PTTL`, the fence key and the value key (deleted when left by another token) |
/// | wait for release | once per store: a subscriber connection on `{key_prefix}:released`; per wait: `EXISTS {key_prefix}:lock:{key}` |
/// | list, per page | `SCAN <cursor> MATCH {key_prefix}:lock:<pattern> COUNT <limit>`, then `EVALSHA` of the read-only list script (`lua/list.lua`) on the keys found, 500 at a time (`STRLEN`, `PTTL`, `GET`, the fence keys) |
///
/// Every `EVALSHA` falls back to `EVAL` once when the server answers `NOSCRIPT`.
/// Commands go through a [`ConnectionManager`], which reconnects after a lost connection.
/// The store itself never retries a command: an error means the outcome is unknown, and
/// the [`LockManager`](distlock_api::LockManager) then releases the attempted lease with
/// the same token (the token check makes that harmless if the lease does not exist).
///
/// Cloning is cheap and clones share the connection.
#[derive(Clone)]
pub struct RedisLockStore {
    conn: ConnectionManager,
    key_prefix: String,
    /// The key layout and the commands of every lock operation.
    commands: Arc<Commands>,
    /// Whether releases hand keys to queued waiters (fair waiting).
    fair_queue: bool,
    /// `{key_prefix}:released`, or `None` when release notifications are off.
    release_channel: Option<String>,
    /// The subscriber, when the store has a client to open it with.
    listener: Option<Arc<ReleaseListener>>,
    /// Whether the release and extend scripts were loaded (`SCRIPT LOAD`) on the server.
    loaded: Arc<[Loaded; 2]>,
}

/// The scripts a store loads with `SCRIPT LOAD` before their first `EVALSHA`: their
/// places in [`RedisLockStore::loaded`].
const RELEASE: usize = 0;
const EXTEND: usize = 1;

impl fmt::Debug for RedisLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockStore")
            .field("key_prefix", &self.key_prefix)
            .field("fencing", &self.commands.fencing)
            .field("clock_fences", &self.commands.clock_fences)
            .field("fair_queue", &self.fair_queue)
            .field("release_channel", &self.release_channel)
            .field("listener", &self.listener)
            .field("conn", &self.conn)
            .finish()
    }
}

impl RedisLockStore {
    /// The name reported by [`LockStore::backend`] and in [`LockError::Store`].
    pub const BACKEND: &'static str = "redis";

    /// The default key prefix: keys are `distlock:lock:{key}`.
    pub const DEFAULT_KEY_PREFIX: &'static str = config::DEFAULT_KEY_PREFIX;

    /// The longest single [`wait_for_release`](LockStore::wait_for_release): a longer
    /// `max` (up to `Duration::MAX`) returns after this long, an early return the
    /// caller treats like any other (it tries again).
    pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

    /// The store from its parts; `client` opens the subscriber connection of notified waits.
    pub(crate) fn from_parts(conn: ConnectionManager, client: Option<redis::Client>, config: Config) -> Self {
        let Config {
            key_prefix,
            fencing,
            clock_fences,
            release_notifications,
            fair_queue,
            response_timeout,
            connect_timeout,
        } = config;
        let layout = Layout::node(&key_prefix);
        let release_channel = release_notifications.then(|| format!("{}released", layout.stem()));
        let listener = release_channel.as_ref().zip(client).map(|(channel, client)| {
            Arc::new(ReleaseListener::new(client, channel.clone(), connect_timeout, response_timeout))
        });
        Self {
            conn,
            key_prefix,
            commands: Arc::new(Commands {
                layout,
                backend: Self::BACKEND,
                fencing,
                clock_fences,
                notifications: release_notifications,
            }),
            fair_queue,
            release_channel,
            listener,
            loaded: Arc::default(),
        }
    }

    /// The prefix in front of every key (`{key_prefix}:lock:{key}`).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// Whether acquisitions return fencing numbers.
    pub fn fencing(&self) -> bool {
        self.commands.fencing
    }

    /// Whether fencing numbers are drawn from the server's clock and the counter
    /// (restart-safe, see [`clock_fences`](crate::RedisLockStoreBuilder::clock_fences)).
    pub fn clock_fences(&self) -> bool {
        self.commands.clock_fences
    }

    /// The connection the store uses (a clone shares it).
    pub fn connection_manager(&self) -> &ConnectionManager {
        &self.conn
    }

    /// The commands of every lock and group operation, with this store's layout.
    pub(crate) fn commands(&self) -> &Commands {
        &self.commands
    }

    /// The Redis key of a lock: `{key_prefix}:lock:{key}`, e.g. `neton:lock:order:1`.
    pub(crate) fn redis_key(&self, key: &StoreKey) -> String {
        self.commands.layout.lock_key(key)
    }

    /// What every key of the store starts with: `{key_prefix}:`, or nothing when the
    /// prefix is empty.
    pub(crate) fn key_stem(&self) -> &str {
        self.commands.layout.stem()
    }

    /// The fencing counter of the whole store: `{key_prefix}:fence`, e.g. `neton:fence`.
    /// One integer (`INCR`) for every key of the prefix, written only in fencing mode and
    /// never deleted; the only key this store keeps without an expiry.
    pub(crate) fn fence_counter_key(&self) -> String {
        format!("{}fence", self.key_stem())
    }

    /// The key that records a lock's fencing number for its holder:
    /// `{key_prefix}:fence:{lock key}`, e.g. `neton:fence:lock:order:1`, value
    /// `<fence>:<token>`. Written by a fencing-mode acquire with the lease's own `PX`,
    /// extended with it, so it expires with the lease (release leaves it to expire).
    pub(crate) fn fence_key(&self, key: &StoreKey) -> String {
        self.commands.layout.fence_key(key)
    }

    /// The key that records the settings every client of the prefix must share:
    /// `{key_prefix}:lock-settings`, e.g. `neton:lock-settings`, a string without expiry
    /// holding [`shared_settings`](Self::shared_settings). Written by the first store that
    /// [connects](crate::RedisLockStoreBuilder::connect) to the prefix and read by every
    /// later one.
    pub(crate) fn settings_key(&self) -> String {
        self.commands.layout.settings_key()
    }

    /// The settings that decide what the store writes and expects of the other clients
    /// of its prefix, as URL parameters: `fencing=…&fences=…&notifications=…&fair=…`,
    /// e.g. `fencing=false&fences=counter&notifications=false&fair=false` by default.
    ///
    /// Every client of a prefix must use the same: a client without the fair queue
    /// ignores the queue of fair waiters (they wait for expiries instead of hand-offs), a
    /// client without notifications never wakes notified waiters (they wait out their
    /// retry interval), counter and clock fences give numbers of different orders.
    pub fn shared_settings(&self) -> String {
        config::shared_settings(self.fencing(), self.clock_fences(), self.release_channel.is_some(), self.fair_queue)
    }

    /// Records this store's [`shared_settings`](Self::shared_settings) under
    /// `{key_prefix}:lock-settings` when the prefix has none yet, and otherwise
    /// checks them against the record: `SET {settings key} <settings> NX` and `GET` of it,
    /// pipelined (one round trip). [`RedisLockStoreBuilder::connect`](crate::RedisLockStoreBuilder::connect)
    /// calls it; a store [built](crate::RedisLockStoreBuilder::build) on a connection of
    /// the application's own can call it at start-up.
    ///
    /// To change the settings of a prefix, stop every client of it, delete the key
    /// (`DEL {settings key}`) and start them with the new settings.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] naming both settings and the key when the record differs;
    /// [`LockError::Store`] when the commands fail.
    pub async fn check_shared_settings(&self) -> Result<(), LockError> {
        let (key, settings) = (self.settings_key(), self.shared_settings());
        let mut conn = self.conn.clone();
        let (recorded,): (Option<String>,) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(&settings)
            .arg("NX")
            .ignore()
            .cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|err| LockError::store(Self::BACKEND, "connect", None, err))?;
        config::check_recorded_settings(&self.key_prefix, &key, &settings, recorded)
    }

    /// The pub/sub channel every release is published on, `{key_prefix}:released` (the
    /// message is the lock's Redis key), or `None` when release notifications are
    /// [off](crate::RedisLockStoreBuilder::release_notifications).
    pub(crate) fn release_channel(&self) -> Option<&str> {
        self.release_channel.as_deref()
    }

    /// Whether waits on this store are woken by published releases (it publishes and
    /// has a client for its subscriber connection); otherwise waiters poll.
    pub fn notified_waits(&self) -> bool {
        self.listener.is_some()
    }

    /// The release subscriber, when waits are notified (lock groups wait on it too).
    pub(crate) fn listener(&self) -> Option<&ReleaseListener> {
        self.listener.as_deref()
    }

    /// A store failure of `operation` on `key`, named as the application knows it.
    fn error(operation: &'static str, key: &StoreKey, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, Some(key.lock_key()), err)
    }
}

#[async_trait]
impl LockStore for RedisLockStore {
    fn backend(&self) -> &'static str {
        Self::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_fencing(self.fencing())
            .with_release_notifications(self.notified_waits())
            .with_fair_queue(self.fair_queue)
    }

    /// Lock groups: see the crate README, "Lock groups".
    fn queue(&self) -> Option<&dyn QueueStore> {
        self.fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn distlock_api::GroupLockStore> {
        Some(self)
    }

    /// Values attached to leases: see [`LeaseValueStore`] for this store.
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    /// `SET {key_prefix}:lock:{key} <token> NX PX <ttl_ms>`, or in fencing mode the
    /// fenced-acquire script. One round trip; never retried.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the [`LockStore`] sense: the command either ran atomically or not;
    /// if it ran, the lease is released by the manager that dropped the future.
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.commands.try_acquire(&mut self.conn.clone(), key, token, ttl).await
    }

    /// The compare-and-delete script [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) (`EVALSHA`, `EVAL` on `NOSCRIPT`),
    /// with `PUBLISH {key_prefix}:released {key_prefix}:lock:{key}` pipelined behind it:
    /// one round trip, and the server runs the `PUBLISH` after the script, so a woken
    /// waiter finds the key deleted. A `PUBLISH` after a release that deleted nothing is
    /// a harmless spurious wake-up; a failed `PUBLISH` does not fail the release (waiters
    /// then find the key free at their next poll).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let mut conn = self.conn.clone();
        if self.fair_queue {
            return self.commands.fair_release(&mut conn, key, token).await;
        }
        self.commands.release(&mut conn, Some(&self.loaded[RELEASE]), key, token).await
    }

    /// The extend script (`lua/extend.lua`): `GET` == token, then `PEXPIRE` (`EVALSHA`, `EVAL` on `NOSCRIPT`).
    /// In fencing mode its own script also moves the expiry of the fence key.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.commands.extend(&mut self.conn.clone(), Some(&self.loaded[EXTEND]), key, token, ttl).await
    }

    /// `GET` + `PTTL` (+ the fence key in fencing mode) in one read-only script.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the key holds something this store did not write
    /// (not a token, or no expiry).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.commands.inspect(&mut self.conn.clone(), key).await
    }

    /// Waits for a published release of `key`, at most `max`.
    ///
    /// Registers the waiter, makes sure the store's one subscriber connection is
    /// subscribed (starting it on the first wait), then sends `EXISTS` for the lock key:
    /// a key released before the registration is seen free right away, a release after
    /// it is published to a subscription that already exists. Returns early on the
    /// release message, when the key is free, or when the subscription drops or comes
    /// back (messages may have been missed). While the subscriber is not subscribed the
    /// wait is a plain sleep of `max`: waiters poll, never busy-loop, never overstay `max`.
    /// Without notifications ([`notified_waits`](Self::notified_waits) is `false`) it
    /// sleeps `max`. A `max` above [`MAX_WAIT`](Self::MAX_WAIT) counts as `MAX_WAIT`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the `EXISTS` fails; the manager then sleeps the interval.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        // The waits below build deadlines `now + max`, which must not overflow.
        let max = max.min(Self::MAX_WAIT);
        let Some(listener) = &self.listener else {
            tokio::time::sleep(max).await;
            return Ok(());
        };
        let redis_key = self.redis_key(key);
        let still_held = || async {
            let mut conn = self.conn.clone();
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .map_err(|err| Self::error("wait_for_release", key, err))?;
            Ok::<_, LockError>(exists > 0)
        };
        let woken = listener.wait(&[&redis_key], max, still_held).await?;
        tracing::trace!(redis.key = %redis_key, ?woken, "wait for release ended");
        Ok(())
    }

    /// One `SCAN <cursor> MATCH {key_prefix}:lock:<glob> COUNT <limit>`, then the
    /// read-only list script (`lua/list.lua`) on the keys it found (one run per
    /// 500 keys): each command bounded by `limit` (at most [`ListPage::MAX_LIMIT`]) or by
    /// 500 keys, never `KEYS`.
    ///
    /// The cursor is `SCAN`'s, so a lock held throughout the listing is listed at least
    /// once, possibly twice (when the server resizes its hash table meanwhile). Only keys
    /// in this store's namespace are examined (`{key_prefix}:lock:…`: never the fencing
    /// keys), and of those only the ones this store could have written (a token with an
    /// expiry); anything else under the prefix is skipped. In fencing mode each holder's
    /// fence is read from its fence key, as [`inspect`](LockStore::inspect) does.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when a command fails; [`LockError::Config`] for a cursor
    /// that is not a `SCAN` cursor.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let position = self.scan_position(cursor)?;
        let glob = pattern.to_redis_glob(&self.commands.layout.lock_namespace());
        let (next, found) = self.scan(position, &glob, limit, "list").await?;
        let locks = self.holders(pattern, found).await?;
        Ok(ListPage::new(locks, (next != 0).then(|| ListCursor::new(next.to_string()))))
    }
}

/// Values attached to leases, in a key beside the lock's: `{key_prefix}:value:lock:{key}`
/// holds `<token>:<value>` without expiry, so a renewal (which moves only the lock key's
/// expiry) keeps it. A value is reported only while the token it was written for holds the
/// lock; the next [`inspect_value`](LeaseValueStore::inspect_value) after a release, an
/// expiry or a hand-over deletes it, and until then it stays on the server (at most one
/// value key per lock key that ever had a value).
#[async_trait]
impl LeaseValueStore for RedisLockStore {
    /// One script (`lua/set_value.lua`): `GET` of the lock key == token, then `SET` of the
    /// value key. One round trip; never retried.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        self.commands.set_value(&mut self.conn.clone(), key, token, value).await
    }

    /// One script (`lua/inspect_value.lua`): `GET` + `PTTL` of the lock key, the fence key
    /// in fencing mode, and the value key, deleted when it was left by another token.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the key holds something this store did not write
    /// (not a token, or no expiry).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        self.commands.inspect_value(&mut self.conn.clone(), key).await
    }
}

#[async_trait]
impl QueueStore for RedisLockStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    /// One script (fair waiting, see [`RedisLockStoreBuilder::fair_queue`](crate::RedisLockStoreBuilder::fair_queue)):
    /// takes the key when it was handed to `token`, or is free with `token` first in line
    /// (or nobody waiting) — in fencing mode with a fencing number, as the fenced acquire
    /// — and otherwise takes or refreshes `token`'s place in
    /// the key's queue (`{key_prefix}:queue:{lock key}`) for `place`. A free key whose first waiter is
    /// someone else is handed to that waiter. Without the queue, a plain
    /// [`try_acquire`](LockStore::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        if !self.fair_queue {
            return self.try_acquire(attempt.key, attempt.token, attempt.ttl).await;
        }
        self.commands.try_acquire_queued(&mut self.conn.clone(), attempt).await
    }

    /// As [`wait_for_release`](LockStore::wait_for_release); the check after registering
    /// is a `GET`, and a key handed to `token` counts as free.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        let max = max.min(Self::MAX_WAIT);
        let Some(listener) = &self.listener else {
            tokio::time::sleep(max).await;
            return Ok(());
        };
        let redis_key = self.redis_key(key);
        let held_by_other = || async {
            let mut conn = self.conn.clone();
            let holder: Option<String> = redis::cmd("GET")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .map_err(|err| Self::error("wait_for_release", key, err))?;
            Ok::<_, LockError>(holder.is_some_and(|holder| holder != token.as_str()))
        };
        let turn = crate::notify::turn_key(&redis_key, token);
        let woken = listener.wait(&[&redis_key, &turn], max, held_by_other).await?;
        tracing::trace!(redis.key = %redis_key, ?woken, "wait for a turn ended");
        Ok(())
    }

    /// A read-only script: `ZCOUNT` of the unexpired places in
    /// the key's `{key_prefix}:queue-ttl:{lock key}`.
    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.commands.queue_len(&mut self.conn.clone(), key).await
    }

    /// A read-only script: the key's `{key_prefix}:queue:{lock key}` (tokens by arrival
    /// on the server's clock, µs) and the places' expiries.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        self.commands.queue_places(&mut self.conn.clone(), key).await
    }
}

impl RedisLockStore {
    /// The `SCAN` position a listing cursor names (0: from the beginning).
    pub(crate) fn scan_position(&self, cursor: Option<&ListCursor>) -> Result<u64, LockError> {
        match cursor {
            None => Ok(0),
            Some(cursor) => cursor.as_str().parse().map_err(|_| LockError::Config {
                message: format!("{cursor:?} is not a listing cursor of the Redis store"),
            }),
        }
    }

    /// One `SCAN position MATCH glob COUNT limit`: the next position and the keys found.
    pub(crate) async fn scan(
        &self,
        position: u64,
        glob: &str,
        limit: usize,
        operation: &'static str,
    ) -> Result<(u64, Vec<String>), LockError> {
        let mut conn = self.conn.clone();
        let (next, found): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(position)
            .arg("MATCH")
            .arg(glob)
            .arg("COUNT")
            .arg(limit.clamp(1, ListPage::MAX_LIMIT))
            .query_async(&mut conn)
            .await
            .map_err(|err| LockError::store(Self::BACKEND, operation, None, err))?;
        // Keys that are not UTF-8 are another program's.
        Ok((next, found.into_iter().filter_map(|key| String::from_utf8(key).ok()).collect()))
    }
}

/// The most lock keys one run of the list script reads: a bigger page is read by several
/// runs, so that no script holds the server for long (about 2 µs per key).
const LIST_SCRIPT_BATCH: usize = 500;

impl RedisLockStore {
    /// The holders of the Redis keys one `SCAN` found, read by the list script in batches
    /// of at most [`LIST_SCRIPT_BATCH`] keys; keys that are not this store's locks are
    /// skipped.
    async fn holders(&self, pattern: &KeyPattern, found: Vec<String>) -> Result<Vec<HeldLock>, LockError> {
        let namespace = self.commands.layout.lock_namespace();
        let mut keys = Vec::with_capacity(found.len());
        for redis_key in found {
            // Anything here matched the glob; keep what the pattern itself matches and
            // what is a valid key (another program's keys may be neither).
            let Some(key) = redis_key.strip_prefix(&namespace) else { continue };
            if !pattern.matches(key) {
                continue;
            }
            let Ok(key) = LockKey::new(key) else { continue };
            keys.push((redis_key, key));
        }
        let mut locks = Vec::with_capacity(keys.len());
        for batch in keys.chunks(LIST_SCRIPT_BATCH) {
            locks.extend(self.read_holders(batch).await?);
        }
        Ok(locks)
    }

    /// One run of the list script over `keys` (Redis key, application key).
    async fn read_holders(&self, keys: &[(String, LockKey)]) -> Result<Vec<HeldLock>, LockError> {
        let fence_keys: Vec<String> = if self.fencing() {
            keys.iter().map(|(_, key)| self.fence_key(&key.to_store_key())).collect()
        } else {
            Vec::new()
        };
        let mut conn = self.conn.clone();
        let holders: Vec<(Option<String>, i64, Option<u64>)> = SCRIPTS
            .list
            .run(&mut conn, |cmd| {
                cmd.arg(keys.len() + fence_keys.len());
                for (redis_key, _) in keys {
                    cmd.arg(redis_key);
                }
                cmd.arg(&fence_keys).arg(keys.len());
            })
            .await
            .map_err(|err| LockError::store(Self::BACKEND, "list", None, err))?;
        if holders.len() != keys.len() {
            return Err(LockError::store(
                Self::BACKEND,
                "list",
                None,
                Failure(format!("the list script returned {} entries for {} keys", holders.len(), keys.len())),
            ));
        }
        Ok(keys
            .iter()
            .zip(holders)
            .filter_map(|((_, key), (token, pttl, fence))| {
                // A string that is not a token was not written by this store.
                let token = Token::parse(&token?).ok()?;
                let ttl_left = Duration::from_millis(u64::try_from(pttl).ok()?);
                Some(HeldLock::new(key.clone(), vec![LockInfo::new(token, fence, ttl_left)]))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_api::LockKey;

    #[test]
    fn keys_follow_seed_000() {
        // `redis_key` and `fence_key` are pure; a lazy manager never connects.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = runtime.enter();
        let conn = ConnectionManager::new_lazy_with_config(client, Default::default()).unwrap();
        let store = RedisLockStore::builder().key_prefix("neton").build(conn.clone()).unwrap();
        let key = LockKey::new("order:1").unwrap().to_store_key();
        assert_eq!(store.redis_key(&key), "neton:lock:order:1");
        assert_eq!(store.fence_counter_key(), "neton:fence");
        assert_eq!(store.fence_key(&key), "neton:fence:lock:order:1");
        assert_eq!(store.settings_key(), "neton:lock-settings");
        assert_eq!(store.release_channel(), None, "no notifications by default");
        assert_eq!(store.shared_settings(), "fencing=false&fences=counter&notifications=false&fair=false");
        assert_eq!(store.backend(), "redis");
        let capabilities = store.capabilities();
        assert!(!capabilities.fencing && !capabilities.release_notifications && !capabilities.fair_queue);

        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let notified = RedisLockStore::builder()
            .key_prefix("neton")
            .release_notifications(true)
            .notification_client(client.clone())
            .build(conn.clone())
            .unwrap();
        assert_eq!(notified.release_channel(), Some("neton:released"));
        assert!(notified.capabilities().release_notifications);
        let no_subscriber = RedisLockStore::builder().release_notifications(true).build(conn.clone());
        assert!(matches!(no_subscriber, Err(LockError::Config { .. })), "no client for a subscriber: refused");
        let quiet = RedisLockStore::builder().notification_client(client).build(conn.clone()).unwrap();
        assert!(!quiet.capabilities().release_notifications);

        let bare = RedisLockStore::builder().key_prefix("").build(conn).unwrap();
        assert_eq!(bare.redis_key(&LockKey::new("split:7").unwrap().to_store_key()), "lock:split:7");
        assert_eq!((bare.fence_counter_key(), bare.settings_key()), ("fence".to_owned(), "lock-settings".to_owned()));
    }
}
