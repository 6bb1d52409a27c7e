//! `RedisSentinelStore`: the single-node store on the master that Redis Sentinel names,
//! following failovers.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, GroupAcquire, GroupLockStore, GroupRequest, KeyPattern, ListCursor, ListPage, LockError,
    LockInfo, LockMode, LockStore, OwnerId, QueueStore, QueuedAttempt, StoreKey, Token, Ttl,
};
use tokio::time::Instant;

use crate::store::RedisLockStore;

/// A [`LockStore`] on a Redis master found through **Sentinel**: the single-node store
/// (same layout, same scripts, lock groups, fair queue) on the address the sentinels
/// report for the master's name, re-resolved whenever an operation fails (connection
/// lost, `READONLY` from a demoted master, a timeout): after a failover the store moves
/// to the promoted replica by itself.
///
/// ```text
/// redis+sentinel://[[user]:password@]sentinel1:26379,sentinel2:26379,…/<master name>[/<db>][?prefix=…&fencing=…&fences=…&notifications=…&wait_replicas=N&wait_timeout_ms=T]
/// ```
///
/// The credentials and database are the master's; the sentinels are asked without
/// authentication. The layout parameters are a single node's
/// ([`RedisUrl`](crate::RedisUrl)); fencing numbers default to clock fences here
/// (`?fences=clock`), so they keep increasing across a failover even when the promoted
/// replica had not received the last counter values.
///
/// # What a failover costs
///
/// Replication is asynchronous: a lease granted by the old master and not yet copied to
/// the replica is **lost** when the replica is promoted, and another client can then be
/// granted the same lock while the first still believes it holds it. `wait_replicas=N`
/// narrows that window: after every acquisition the store sends `WAIT N wait_timeout_ms`
/// (default 100 ms) and, when fewer than N replicas acknowledged the write in time,
/// releases the lease and fails the acquisition with [`LockError::Store`]. It cannot
/// close the window (Redis can still lose an acknowledged write in some failovers), and
/// it costs a round trip to the replicas. **Fencing** numbers checked by the protected
/// resource are the protection: with clock fences the promoted master's numbers stay
/// above the old master's, so a write of the holder whose lease was lost is refused
/// once the new holder has written.
#[derive(Clone)]
pub struct RedisSentinelStore {
    inner: Arc<Inner>,
}

struct Inner {
    sentinels: Vec<String>,
    master_name: String,
    /// `user:password@` or empty.
    auth: String,
    /// `/<db>?<layout>` as given (the store's own parameters removed).
    tail: String,
    wait_replicas: Option<(u32, Duration)>,
    /// The settings of the store on each master (clock fences unless told otherwise).
    builder: crate::RedisLockStoreBuilder,
    current: RwLock<(String, Arc<RedisLockStore>)>,
    refreshing: tokio::sync::Mutex<Instant>,
}

impl fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSentinelStore")
            .field("sentinels", &self.inner.sentinels)
            .field("master_name", &self.inner.master_name)
            .field("master", &self.master_address())
            .field("wait_replicas", &self.inner.wait_replicas)
            .finish()
    }
}

/// How long one question to one sentinel may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);
/// At most one re-resolution this often.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

impl RedisSentinelStore {
    /// The name reported by [`LockStore::backend`].
    pub const BACKEND: &'static str = "redis-sentinel";

    /// Connects: asks the sentinels (in URL order) for the master, then connects to it
    /// as [`RedisLockStore::connect`] does.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] before any I/O for a malformed URL; [`LockError::Store`]
    /// (operation `"connect"`) when no sentinel names a reachable master.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// A builder for the settings of the store on the master (and on every master a
    /// failover promotes): its layout
    /// ([`fair_queue`](crate::RedisLockStoreBuilder::fair_queue),
    /// [`release_notifications`](crate::RedisLockStoreBuilder::release_notifications),
    /// [`fencing`](crate::RedisLockStoreBuilder::fencing),
    /// [`clock_fences`](crate::RedisLockStoreBuilder::clock_fences), the key prefix) and
    /// timeouts. A setting given by both the builder and the URL must agree.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_api::LockError> {
    /// use distlock_redis::RedisSentinelStore;
    ///
    /// let store = RedisSentinelStore::builder()
    ///     .fair_queue(true)
    ///     .release_notifications(true)
    ///     .connect("redis+sentinel://127.0.0.1:26379/main")
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub fn builder() -> crate::RedisSentinelStoreBuilder {
        crate::RedisSentinelStoreBuilder::default()
    }

    /// [`RedisSentinelStoreBuilder::connect`](crate::RedisSentinelStoreBuilder::connect).
    pub(crate) async fn connect_with(builder: crate::RedisLockStoreBuilder, url: &str) -> Result<Self, LockError> {
        let parsed = parse_sentinel_url(url)?;
        // Check the layout before any I/O, on a stand-in address.
        let stand_in = format!("redis://{}127.0.0.1{}", parsed.auth, parsed.tail);
        let builder = clock_default(builder, &stand_in);
        builder.clone().check_url(&crate::RedisUrl::parse(&stand_in)?)?;
        let (address, store) =
            connect_master(&builder, &parsed.sentinels, &parsed.master_name, &parsed.auth, &parsed.tail).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                sentinels: parsed.sentinels,
                master_name: parsed.master_name,
                auth: parsed.auth,
                tail: parsed.tail,
                wait_replicas: parsed.wait_replicas,
                builder,
                current: RwLock::new((address, Arc::new(store))),
                refreshing: tokio::sync::Mutex::new(Instant::now()),
            }),
        })
    }

    /// The master's address (`host:port`) the store uses now.
    pub fn master_address(&self) -> String {
        self.inner.current.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// The single-node store on the current master.
    pub fn current(&self) -> Arc<RedisLockStore> {
        Arc::clone(&self.inner.current.read().unwrap_or_else(|e| e.into_inner()).1)
    }

    /// Asks the sentinels for the master again and moves to it if it changed (at most
    /// once per 100 ms; errors are ignored: the next failure asks again).
    async fn refresh(&self) {
        let mut last = self.inner.refreshing.lock().await;
        if last.elapsed() < REFRESH_EVERY {
            return;
        }
        *last = Instant::now();
        let Ok(address) = resolve(&self.inner.sentinels, &self.inner.master_name).await else { return };
        if address == self.master_address() {
            return;
        }
        let url = format!("redis://{}{address}{}", self.inner.auth, self.inner.tail);
        match self.inner.builder.clone().connect(&url).await {
            Ok(store) => {
                tracing::info!(master = %address, "Sentinel: following the master to its new address");
                *self.inner.current.write().unwrap_or_else(|e| e.into_inner()) = (address, Arc::new(store));
            }
            Err(err) => tracing::debug!(error = %err, "Sentinel: the new master is not reachable yet"),
        }
    }

    /// `result`, after asking the sentinels again when it is a store failure.
    async fn follow<T>(&self, result: Result<T, LockError>) -> Result<T, LockError> {
        if matches!(result, Err(LockError::Store { .. })) {
            self.refresh().await;
        }
        result
    }

    /// `WAIT n timeout` after an acquisition; too few acknowledgements release the lease
    /// and fail the acquisition.
    async fn wait_for_replicas(
        &self,
        store: &RedisLockStore,
        key: &StoreKey,
        token: &Token,
        acquired: Acquire,
    ) -> Result<Acquire, LockError> {
        let (Some((replicas, timeout)), true) = (self.inner.wait_replicas, acquired.is_acquired()) else {
            return Ok(acquired);
        };
        let mut conn = store.connection_manager().clone();
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let acked: Result<i64, _> = redis::cmd("WAIT").arg(replicas).arg(millis).query_async(&mut conn).await;
        let problem = match acked {
            Ok(acked) if acked >= i64::from(replicas) => return Ok(acquired),
            Ok(acked) => format!("only {acked} of {replicas} replicas acknowledged the lease within {timeout:?}"),
            Err(err) => format!("WAIT failed: {err}"),
        };
        let _ = store.release(key, token).await;
        Err(LockError::store(Self::BACKEND, "acquire", Some(key.lock_key()), ReplicaError(problem)))
    }
}

#[derive(Debug)]
struct ReplicaError(String);

impl fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplicaError {}

/// Clock fences unless the URL or the builder says otherwise.
fn clock_default(builder: crate::RedisLockStoreBuilder, url: &str) -> crate::RedisLockStoreBuilder {
    match crate::RedisUrl::parse(url).ok().and_then(|url| url.clock_fences()) {
        Some(_) => builder,
        None => builder.clock_fences_unless_set(true),
    }
}

async fn connect_master(
    builder: &crate::RedisLockStoreBuilder,
    sentinels: &[String],
    master_name: &str,
    auth: &str,
    tail: &str,
) -> Result<(String, RedisLockStore), LockError> {
    let address = resolve(sentinels, master_name).await?;
    let url = format!("redis://{auth}{address}{tail}");
    let store = builder.clone().connect(&url).await?;
    Ok((address, store))
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` on each sentinel in turn: the first answer.
async fn resolve(sentinels: &[String], master_name: &str) -> Result<String, LockError> {
    let mut last = String::from("no sentinel answered");
    for sentinel in sentinels {
        let ask = async {
            let client = redis::Client::open(format!("redis://{sentinel}"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master_name)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        };
        match tokio::time::timeout(SENTINEL_TIMEOUT, ask).await {
            Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
            Ok(Ok(None)) => last = format!("sentinel {sentinel} does not know the master `{master_name}`"),
            Ok(Err(err)) => last = format!("sentinel {sentinel}: {err}"),
            Err(_) => last = format!("sentinel {sentinel} did not answer in time"),
        }
    }
    Err(LockError::store(RedisSentinelStore::BACKEND, "connect", None, ReplicaError(last)))
}

struct SentinelUrl {
    sentinels: Vec<String>,
    master_name: String,
    auth: String,
    tail: String,
    wait_replicas: Option<(u32, Duration)>,
}

/// `redis+sentinel://auth@s1,s2/name[/db]?query` (no I/O).
fn parse_sentinel_url(url: &str) -> Result<SentinelUrl, LockError> {
    let config = |message: String| LockError::Config { message: format!("Redis Sentinel URL: {message}") };
    let Some(rest) = url.strip_prefix("redis+sentinel://") else {
        return Err(config("expected redis+sentinel://sentinel1:26379,sentinel2:26379/<master name>".to_owned()));
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some((authority, path)) = rest.split_once('/') else {
        return Err(config("the master's name is missing: …/<master name>".to_owned()));
    };
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), authority),
    };
    let sentinels: Vec<String> = hosts.split(',').map(str::to_owned).collect();
    if sentinels.iter().any(String::is_empty) {
        return Err(config("an empty host in the list of sentinels".to_owned()));
    }
    let (master_name, db) = path.split_once('/').unwrap_or((path, ""));
    if master_name.is_empty() {
        return Err(config("the master's name is missing: …/<master name>".to_owned()));
    }
    let (mut replicas, mut timeout) = (None, Duration::from_millis(100));
    let mut layout = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "wait_replicas" => {
                let n: u32 =
                    value.parse().map_err(|_| config(format!("`wait_replicas` must be a count, not `{value}`")))?;
                replicas = (n > 0).then_some(n);
            }
            "wait_timeout_ms" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| config(format!("`wait_timeout_ms` must be a positive number, not `{value}`")))?;
                timeout = Duration::from_millis(ms);
            }
            _ => layout.push(pair),
        }
    }
    let mut tail = if db.is_empty() { String::new() } else { format!("/{db}") };
    if !layout.is_empty() {
        tail.push('?');
        tail.push_str(&layout.join("&"));
    }
    Ok(SentinelUrl {
        sentinels,
        master_name: master_name.to_owned(),
        auth,
        tail,
        wait_replicas: replicas.map(|n| (n, timeout)),
    })
}

#[async_trait]
impl LockStore for RedisSentinelStore {
    fn backend(&self) -> &'static str {
        Self::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.current().capabilities()
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        self.capabilities().fair_queue.then_some(self as &dyn QueueStore)
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        Some(self)
    }

    /// The single-node acquire on the current master, then (with `wait_replicas`) `WAIT`.
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let store = self.current();
        let result = match store.try_acquire(key, token, ttl).await {
            Ok(acquired) => self.wait_for_replicas(&store, key, token, acquired).await,
            Err(err) => Err(err),
        };
        self.follow(result).await
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let result = self.current().release(key, token).await;
        self.follow(result).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let result = self.current().extend(key, token, ttl).await;
        self.follow(result).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let result = self.current().inspect(key).await;
        self.follow(result).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_release(key, max).await;
        self.follow(result).await
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let result = self.current().list(pattern, cursor, limit).await;
        self.follow(result).await
    }
}

#[async_trait]
impl QueueStore for RedisSentinelStore {
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let (key, token) = (attempt.key, attempt.token);
        let store = self.current();
        let result = match store.try_acquire_queued(attempt).await {
            Ok(acquired) => self.wait_for_replicas(&store, key, token, acquired).await,
            Err(err) => Err(err),
        };
        self.follow(result).await
    }

    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_turn(key, token, max).await;
        self.follow(result).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let result = self.current().queue_len(key).await;
        self.follow(result).await
    }
}

/// Lock groups: the single-node store's, on the current master.
#[async_trait]
impl GroupLockStore for RedisSentinelStore {
    fn max_group(&self) -> usize {
        self.current().max_group()
    }

    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let result = self.current().try_acquire_group(request).await;
        self.follow(result).await
    }

    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let result = self.current().extend_group(keys, token, ttl).await;
        self.follow(result).await
    }

    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let result = self.current().release_group(keys, token).await;
        self.follow(result).await
    }

    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let result = self.current().withdraw_intents(keys, token).await;
        self.follow(result).await
    }

    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let result = self.current().release_owner(owner).await;
        self.follow(result).await
    }

    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let result = self.current().set_permits(key, mode, permits).await;
        self.follow(result).await
    }

    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let result = self.current().permits(key, mode).await;
        self.follow(result).await
    }

    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let result = self.current().holders(key).await;
        self.follow(result).await
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let result = self.current().waiting(key).await;
        self.follow(result).await
    }

    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let result = self.current().wait_for_change(request, max).await;
        self.follow(result).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 1: reaching the network would give a Store error.
    #[tokio::test]
    async fn a_url_contradicting_the_builder_is_refused_before_any_io() {
        let builder = RedisSentinelStore::builder().fair_queue(false);
        let err = builder.connect("redis+sentinel://127.0.0.1:1/main?fair=true").await;
        let err = err.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("`fair`"), "{err}");
        let builder = RedisSentinelStore::builder().clock_fences(false);
        let err = builder.connect("redis+sentinel://127.0.0.1:1/main?fences=clock").await;
        assert!(matches!(err.unwrap_err(), LockError::Config { .. }));
        // The builder's counter fences win over the Sentinel default of clock fences.
        let builder = clock_default(crate::RedisLockStore::builder().clock_fences(false), "redis://h");
        assert!(builder.check_url(&crate::RedisUrl::parse("redis://h/?fences=counter").unwrap()).is_ok());
    }

    #[test]
    fn urls_name_the_sentinels_the_master_and_the_layout() {
        let url = parse_sentinel_url(
            "redis+sentinel://:pw@a:26379,b:26379/main/2?prefix=x&wait_replicas=1&wait_timeout_ms=50",
        )
        .unwrap();
        assert_eq!(url.sentinels, ["a:26379", "b:26379"]);
        assert_eq!((url.master_name.as_str(), url.auth.as_str(), url.tail.as_str()), ("main", ":pw@", "/2?prefix=x"));
        assert_eq!(url.wait_replicas, Some((1, Duration::from_millis(50))));
        for bad in [
            "redis://a",
            "redis+sentinel://a,b",
            "redis+sentinel://a,,b/m",
            "redis+sentinel://a/",
            "redis+sentinel://a/m?wait_replicas=x",
            "redis+sentinel://a/m?wait_timeout_ms=0",
        ] {
            assert!(matches!(parse_sentinel_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }
}
