//! `RedisClusterStore`: the single-node store's scripts on Redis Cluster, with a
//! hash-tagged layout (every key of one lock in one slot) and sharded pub/sub.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::{KeyState, WaiterRegistry};
use distlock_api::{
    Acquire, Capabilities, HeldLock, KeyPattern, LeaseValue, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockKey, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, Ttl, ValuedHolder, WaitingPlace,
};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{PushInfo, PushKind, Value};

use crate::commands::Commands;

/// A connection to one master, or the cluster connection (which follows redirections).
#[derive(Clone)]
pub(crate) enum AnyConn {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for AnyConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// An error that may be the `redis` crate's: what [`RedisClusterStore::exec`] looks at to
/// tell a redirection (send again through the cluster connection) or a lost connection.
pub(crate) trait RedisCause {
    /// The `redis` error behind this one, if any.
    fn redis_cause(&self) -> Option<&redis::RedisError>;
}

impl RedisCause for redis::RedisError {
    fn redis_cause(&self) -> Option<&redis::RedisError> {
        Some(self)
    }
}

impl RedisCause for LockError {
    fn redis_cause(&self) -> Option<&redis::RedisError> {
        self.cause().and_then(|cause| cause.downcast_ref())
    }
}

/// The direct route: one multiplexed connection per master and the slot map, so that a
/// lock's command goes straight to the master owning its slot (no hop through the
/// cluster connection's task). A redirection (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`:
/// the command did not run) sends the same command through the cluster connection and
/// reloads the slot map; a lost connection is reported, never retried.
#[derive(Default)]
struct FastPath {
    /// `(first slot, last slot, "host:port")`, sorted.
    slots: std::sync::RwLock<Vec<(u16, u16, String)>>,
    conns: Mutex<HashMap<String, MultiplexedConnection>>,
}

/// The hash slot of a key (CRC16/XMODEM of its hash tag, or of the key), as Redis computes it.
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

/// A [`LockStore`] on **Redis Cluster** (Redis ≥ 7): the single-node store's commands and
/// scripts, with every key of one lock in **one hash slot**, so no script is ever
/// `CROSSSLOT`, and release notifications on **sharded pub/sub**.
///
/// | key | purpose |
/// |---|---|
/// | `{prefix}:{lock:<key>}` | the lease: the holder's token, `PX` = TTL |
/// | `{prefix}:{lock:<key>}:fence` | the lock's own fence counter (fencing mode; no expiry: one small key per name ever fenced) |
/// | `{prefix}:{lock:<key>}:holder` | `<fence>:<token>` of the current holder, expires with the lease |
/// | `{prefix}:{lock:<key>}:queue`, `…:queue-ttl` | the fair queue of waiters |
/// | `{prefix}:{lock:<key>}:value` | `<token>:<value>`: the value the holder attached to its lease ([`values`](LockStore::values)); no expiry, deleted by the next read after the lease ends |
/// | channel `{prefix}:{lock:<key>}:released` | `SPUBLISH`ed by every release (from inside the script) |
///
/// The hash tag is `{lock:<key>}` (Redis hashes the text between the first `{` and the
/// next `}`), so locks spread over the cluster's slots and masters; a prefix containing
/// braces would pin every lock to one slot, and a key containing `}` shares the slot of
/// the keys with the same text before it.
///
/// A lock's commands go straight to the master owning its slot (the store's own slot
/// map, one multiplexed connection per master); a redirection (`MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`: the command did not run) sends it again through the
/// `redis` crate's cluster connection, which follows it, and reloads the map. A command
/// that still fails (say `TRYAGAIN` for as long as a slot is half migrated) fails that
/// one operation, which the manager treats as an unknown outcome and releases with the
/// same token. Mutual exclusion holds throughout because every key of a lock moves with
/// its slot.
///
/// Fencing numbers are drawn per lock from its counter and, by default, the master's
/// clock ([`clock_fences`](crate::RedisLockStoreBuilder::clock_fences); `?fences=counter`
/// turns it off), so they survive a master restart without persistence and a failover
/// to a replica.
///
/// Waiters `SSUBSCRIBE` to the channel of the key they wait for on the master that owns
/// its slot (the connection re-subscribes after reconnections and slot moves).
///
/// # Lock groups
///
/// A lock group is granted in one atomic script when **all its names share a hash tag**
/// (`{orders}:a`, `{orders}:b`: Redis hashes only the text in the first braces), so the
/// whole group lives in one slot; every key the group scripts touch — the names' holders
/// and permits, the groups' lease keys, the tag's fence counter and shard channel —
/// carries that tag (`{prefix}:group:{orders}:{orders}:a:h`,
/// `{prefix}:group-lease:{orders}:<token>`, …). A group whose names have different tags would span
/// slots: it is refused with [`LockError::Config`] before any I/O. A name without a tag is
/// its own tag (a one-name group always works). The capability
/// [`group_hash_tag`](distlock_api::Capabilities::group_hash_tag) says so.
///
/// [`release_owner`](distlock_api::GroupLockStore::release_owner) visits every master:
/// a `SCAN` of each master's whole keyspace for the groups' lease keys, a `GET` of each
/// and one script per group released.
#[derive(Clone)]
pub struct RedisClusterStore {
    conn: ClusterConnection,
    key_prefix: String,
    /// The hash-tagged key layout and the commands of every lock operation.
    commands: Arc<Commands>,
    /// Whether waiters queue (fair waiting); releases hand keys to queued waiters either way.
    fair_queue: bool,
    registry: WaiterRegistry,
    subscribed: Arc<Mutex<HashMap<String, usize>>>,
    fast: Arc<FastPath>,
    /// `user:password@` of the nodes, for the direct connections; `None`: every command
    /// goes through the cluster connection.
    auth: Option<String>,
}

impl fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("key_prefix", &self.key_prefix)
            .field("fencing", &self.commands.fencing)
            .field("clock_fences", &self.commands.clock_fences)
            .field("notifications", &self.commands.notifications)
            .field("fair_queue", &self.fair_queue)
            .finish_non_exhaustive()
    }
}

/// How many idle shard subscriptions a store keeps before dropping them.
const MAX_IDLE_SUBSCRIPTIONS: usize = 1024;

impl RedisClusterStore {
    /// The name reported by [`LockStore::backend`] and in [`LockError::Store`].
    pub const BACKEND: &'static str = "redis-cluster";

    /// The store on a connected Cluster: its connection, the checked settings and the
    /// registry its connection's pushes wake.
    pub(super) fn new(
        conn: ClusterConnection,
        key_prefix: String,
        commands: Commands,
        fair_queue: bool,
        registry: WaiterRegistry,
        auth: Option<String>,
    ) -> Self {
        Self {
            conn,
            key_prefix,
            commands: Arc::new(commands),
            fair_queue,
            registry,
            subscribed: Arc::default(),
            fast: Arc::default(),
            auth,
        }
    }

    /// The commands of every lock and group operation, on the hash-tagged layout.
    pub(crate) fn commands(&self) -> &Commands {
        &self.commands
    }

    /// The lock's Redis key: `{prefix}:{lock:<key>}`.
    pub(crate) fn redis_key(&self, key: &StoreKey) -> String {
        self.commands.layout.lock_key(key)
    }

    /// The lock's shard channel: `{prefix}:{lock:<key>}:released`.
    pub(crate) fn release_channel(&self, key: &StoreKey) -> String {
        self.commands.layout.release_channel(key)
    }

    /// Whether acquisitions return fencing numbers.
    pub fn fencing(&self) -> bool {
        self.commands.fencing
    }

    /// Whether fencing numbers are drawn from the master's clock as well as the counter.
    pub fn clock_fences(&self) -> bool {
        self.commands.clock_fences
    }

    /// The prefix of every key of the store.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// Whether releases are published and waiters wake on them.
    pub fn notifications(&self) -> bool {
        self.commands.notifications
    }

    /// Whether waiters queue and are served in arrival order.
    pub fn fair_queue(&self) -> bool {
        self.fair_queue
    }

    pub(crate) fn registry(&self) -> &WaiterRegistry {
        &self.registry
    }

    /// A clone of the cluster connection (it follows redirections).
    pub(crate) fn cluster_connection(&self) -> ClusterConnection {
        self.conn.clone()
    }

    fn error(operation: &'static str, key: Option<&StoreKey>, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, key.map(StoreKey::lock_key), err)
    }

    /// `SSUBSCRIBE`s to `channel` unless already subscribed; counts the waiter.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), LockError> {
        let first = {
            let mut subscribed = self.subscribed.lock().unwrap_or_else(|e| e.into_inner());
            let count = subscribed.entry(channel.to_owned()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if first {
            let mut conn = self.conn.clone();
            if let Err(err) = conn.ssubscribe(channel).await {
                self.unsubscribe(channel);
                return Err(Self::error("wait_for_release", None, err));
            }
        }
        Ok(())
    }

    /// One waiter of `channel` left; idle subscriptions are dropped once there are many.
    pub(crate) fn unsubscribe(&self, channel: &str) {
        let idle: Vec<String> = {
            let mut subscribed = self.subscribed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = subscribed.get_mut(channel) {
                *count = count.saturating_sub(1);
            }
            if subscribed.len() <= MAX_IDLE_SUBSCRIPTIONS {
                return;
            }
            let idle: Vec<String> = subscribed.iter().filter(|(_, &n)| n == 0).map(|(c, _)| c.clone()).collect();
            for channel in &idle {
                subscribed.remove(channel);
            }
            idle
        };
        let mut conn = self.conn.clone();
        tokio::spawn(async move {
            let _ = conn.sunsubscribe(idle).await;
        });
    }

    async fn wait_on(&self, key: &StoreKey, max: Duration, token: Option<&Token>) -> Result<(), LockError> {
        let max = max.min(crate::RedisLockStore::MAX_WAIT);
        if !self.notifications() {
            tokio::time::sleep(max).await;
            return Ok(());
        }
        let (redis_key, channel) = (self.redis_key(key), self.release_channel(key));
        let counted = std::sync::atomic::AtomicBool::new(false);
        let check = || async {
            self.subscribe(&channel).await?;
            counted.store(true, std::sync::atomic::Ordering::Relaxed);
            let mut conn = self.conn.clone();
            let holder: Option<String> = redis::cmd("GET")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .map_err(|err| Self::error("wait_for_release", Some(key), err))?;
            let held = holder.is_some_and(|holder| token.is_none_or(|token| holder != token.as_str()));
            Ok(if held { KeyState::Held { expires_in: None } } else { KeyState::Free })
        };
        let turn = token.map(|token| crate::notify::turn_key(&redis_key, token));
        let keys: Vec<&str> = std::iter::once(redis_key.as_str()).chain(turn.as_deref()).collect();
        let result = self.registry.wait_any(&keys, max, check).await;
        if counted.load(std::sync::atomic::Ordering::Relaxed) {
            self.unsubscribe(&channel);
        }
        result.map(|_| ())
    }

    /// Runs `op` on the master owning `redis_key`'s slot, directly; after a redirection
    /// (the command did not run) through the cluster connection instead.
    pub(crate) async fn exec<T, E, F, Fut>(&self, redis_key: &str, op: F) -> Result<T, E>
    where
        E: RedisCause,
        F: Fn(AnyConn) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        if let Some((address, conn)) = self.node_conn(redis_key).await {
            match op(AnyConn::Node(conn)).await {
                Err(err) if err.redis_cause().is_some_and(redis::RedisError::is_cluster_error) => {
                    self.fast.slots.write().unwrap_or_else(|e| e.into_inner()).clear();
                }
                Err(err) => {
                    if err.redis_cause().is_some_and(|err| {
                        err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
                    }) {
                        self.fast.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&address);
                    }
                    return Err(err);
                }
                done => return done,
            }
        }
        op(AnyConn::Cluster(self.conn.clone())).await
    }

    /// The direct connection to the master owning `redis_key`'s slot, opened on first
    /// use; `None` when the store has no credentials for it (made by `build`), or the
    /// slot map or the master cannot be reached (the cluster connection is used then).
    async fn node_conn(&self, redis_key: &str) -> Option<(String, MultiplexedConnection)> {
        let auth = self.auth.as_deref()?;
        let slot = key_slot(redis_key.as_bytes());
        let address = self.slot_owner(slot).await?;
        if let Some(conn) = self.fast.conns.lock().unwrap_or_else(|e| e.into_inner()).get(&address) {
            return Some((address, conn.clone()));
        }
        let client = redis::Client::open(format!("redis://{auth}{address}")).ok()?;
        let settings = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = client.get_multiplexed_async_connection_with_config(&settings).await.ok()?;
        self.fast.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(address.clone(), conn.clone());
        Some((address, conn))
    }

    async fn slot_owner(&self, slot: u16) -> Option<String> {
        let find = |slots: &[(u16, u16, String)]| {
            slots
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, address)| address.clone())
        };
        {
            let slots = self.fast.slots.read().unwrap_or_else(|e| e.into_inner());
            if !slots.is_empty() {
                return find(&slots);
            }
        }
        let mut slots: Vec<(u16, u16, String)> = self
            .slot_ranges()
            .await
            .ok()?
            .into_iter()
            .map(|(first, last, host, port)| (first, last, format!("{host}:{port}")))
            .collect();
        slots.sort();
        let owner = find(&slots);
        *self.fast.slots.write().unwrap_or_else(|e| e.into_inner()) = slots;
        owner
    }

    /// The masters' addresses, from `CLUSTER SLOTS`, sorted.
    pub(crate) async fn masters(&self, operation: &'static str) -> Result<Vec<(String, u16)>, LockError> {
        let ranges = self.slot_ranges().await.map_err(|err| Self::error(operation, None, err))?;
        let mut masters = Vec::new();
        for (_, _, host, port) in ranges {
            if !masters.contains(&(host.clone(), port)) {
                masters.push((host, port));
            }
        }
        masters.sort();
        Ok(masters)
    }

    /// `CLUSTER SLOTS`: each range's first and last slot and its master's host and port.
    async fn slot_ranges(&self) -> redis::RedisResult<Vec<(u16, u16, String, u16)>> {
        let mut conn = self.conn.clone();
        let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn).await?;
        let mut slots = Vec::new();
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(node))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let host = match node.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = node.get(1) else { continue };
            let (Ok(first), Ok(last), Ok(port)) = (u16::try_from(*first), u16::try_from(*last), u16::try_from(*port))
            else {
                continue;
            };
            slots.push((first, last, host, port));
        }
        Ok(slots)
    }
}

/// Hands a shard message to the waiters: the released lock's Redis key, or the `h` keys
/// of the group names that changed, one per line (keys have no control characters).
pub(super) fn dispatch(registry: &WaiterRegistry, push: &PushInfo) {
    if push.kind == PushKind::SMessage {
        if let Some(Value::BulkString(message)) = push.data.get(1) {
            if let Ok(keys) = std::str::from_utf8(message) {
                for key in keys.split('\n') {
                    registry.wake(key);
                }
            }
        }
    } else if push.kind == PushKind::Disconnection {
        // Messages may have been missed: waiters check again.
        registry.set_listening(false);
        registry.set_listening(true);
    }
}

#[async_trait]
impl LockStore for RedisClusterStore {
    fn backend(&self) -> &'static str {
        Self::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_fencing(self.fencing())
            .with_release_notifications(self.notifications())
            .with_fair_queue(self.fair_queue)
            .with_group_hash_tag(true)
    }

    /// Lock groups whose names share a hash tag (`{orders}:a`, `{orders}:b`): see
    /// [`RedisClusterStore`], "Lock groups".
    fn queue(&self) -> Option<&dyn QueueStore> {
        self.fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn distlock_api::GroupLockStore> {
        Some(self)
    }

    /// Values attached to leases, in the lock's slot: see [`RedisClusterStore`].
    fn values(&self) -> Option<&dyn LeaseValueStore> {
        Some(self)
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let commands = &*self.commands;
        self.exec(
            &self.redis_key(key),
            |mut conn| async move { commands.try_acquire(&mut conn, key, token, ttl).await },
        )
        .await
    }

    /// The fair release script (seed 000's compare-and-delete, then the hand-over to the
    /// oldest waiter), `SPUBLISH`ing the release on the lock's shard channel.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let commands = &*self.commands;
        self.exec(&self.redis_key(key), |mut conn| async move { commands.fair_release(&mut conn, key, token).await })
            .await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let commands = &*self.commands;
        self.exec(
            &self.redis_key(key),
            |mut conn| async move { commands.extend(&mut conn, None, key, token, ttl).await },
        )
        .await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let commands = &*self.commands;
        self.exec(&self.redis_key(key), |mut conn| async move { commands.inspect(&mut conn, key).await }).await
    }

    /// `SSUBSCRIBE` to the lock's shard channel (once per store and channel), then `GET`
    /// of the lock key; wakes on the release message, a free key, or `max`.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.wait_on(key, max, None).await
    }

    /// Pages through every master in turn (`SCAN` on one master at a time; the cursor is
    /// `<master index>:<SCAN cursor>`), reading each lock found with the inspect script.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let namespace = self.commands.layout.lock_namespace();
        let glob = format!("{}}}", pattern.to_redis_glob(&namespace));
        let (found, next) = self.scan_masters("list", &glob, cursor, limit).await?;
        let reads = found.into_iter().filter_map(|redis_key| {
            let key = redis_key.strip_prefix(&namespace)?.strip_suffix('}')?;
            if !pattern.matches(key) {
                return None;
            }
            let key = LockKey::new(key).ok()?;
            Some(async move {
                let info = self.inspect(&key.to_store_key()).await?;
                Ok::<_, LockError>(info.map(|info| HeldLock::new(key, vec![info])))
            })
        });
        let locks = futures_util::future::join_all(reads).await.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage::new(locks.into_iter().flatten().collect(), next))
    }
}

impl RedisClusterStore {
    /// One `SCAN … MATCH glob COUNT limit` on one master (the cursor is `<master
    /// index>:<SCAN cursor>`), going on to the next master when one is done: the keys
    /// found and where the listing goes on.
    pub(crate) async fn scan_masters(
        &self,
        operation: &'static str,
        glob: &str,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<(Vec<String>, Option<ListCursor>), LockError> {
        let bad_cursor = |cursor: &ListCursor| LockError::Config {
            message: format!("{cursor:?} is not a listing cursor of the Redis Cluster store"),
        };
        let (mut index, mut position): (usize, u64) = match cursor {
            None => (0, 0),
            Some(cursor) => {
                let (index, position) = cursor.as_str().split_once(':').ok_or_else(|| bad_cursor(cursor))?;
                (index.parse().map_err(|_| bad_cursor(cursor))?, position.parse().map_err(|_| bad_cursor(cursor))?)
            }
        };
        let masters = self.masters(operation).await?;
        let mut found = Vec::new();
        while let Some((host, port)) = masters.get(index) {
            let mut scan = redis::cmd("SCAN");
            scan.arg(position).arg("MATCH").arg(glob).arg("COUNT").arg(limit.clamp(1, ListPage::MAX_LIMIT));
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
            let mut conn = self.conn.clone();
            let reply = conn.route_command(scan, routing).await.map_err(|err| Self::error(operation, None, err))?;
            let (next, keys): (u64, Vec<String>) =
                redis::FromRedisValue::from_redis_value(reply).map_err(|err| Self::error(operation, None, err))?;
            found = keys;
            if next == 0 {
                index += 1;
                position = 0;
            } else {
                position = next;
            }
            if !found.is_empty() || next != 0 {
                break;
            }
        }
        let next = (index < masters.len()).then(|| ListCursor::new(format!("{index}:{position}")));
        Ok((found, next))
    }
}

/// The single-node store's value scripts, on the master owning the lock's slot (the value
/// key carries the lock's hash tag).
#[async_trait]
impl LeaseValueStore for RedisClusterStore {
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let commands = &*self.commands;
        self.exec(
            &self.redis_key(key),
            |mut conn| async move { commands.set_value(&mut conn, key, token, value).await },
        )
        .await
    }

    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let commands = &*self.commands;
        self.exec(&self.redis_key(key), |mut conn| async move { commands.inspect_value(&mut conn, key).await }).await
    }
}

#[async_trait]
impl QueueStore for RedisClusterStore {
    /// A queued attempt does more than a plain one: the manager queues after a plain
    /// attempt found the key held.
    fn queues_in_first_attempt(&self) -> bool {
        false
    }

    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        self.commands.try_acquire_queued(&mut self.conn.clone(), attempt).await
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        self.wait_on(key, max, Some(token)).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.commands.queue_len(&mut self.conn.clone(), key).await
    }

    /// The single-node queue places script, in the lock's slot.
    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        self.commands.queue_places(&mut self.conn.clone(), key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_slots() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"{lock:a}:fence"), key_slot(b"lock:a"));
    }
}
