//! Making a [`RedisClusterStore`]: the shared settings with the Cluster's defaults, the
//! `redis+cluster://` URL split into its nodes, connecting, and the settings every client
//! of the prefix shares checked against the record.

use distlock_api::waiters::WaiterRegistry;
use distlock_api::LockError;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::PushInfo;

use super::store::dispatch;
use super::RedisClusterStore;
use crate::commands::Commands;
use crate::config::{self, Config};
use crate::layout::Layout;
use crate::single::RedisLockStoreBuilder;
use crate::url::{self, RedisUrl};

/// The builder of a [`RedisClusterStore`]: [`RedisClusterStore::builder`].
pub type RedisClusterStoreBuilder = RedisLockStoreBuilder<RedisClusterStore>;

impl RedisClusterStoreBuilder {
    /// Connects to the Cluster at `url` (`redis+cluster://host:port[,host:port…]`) with
    /// these settings; see [`RedisClusterStore::connect`] for the URL, the Cluster's
    /// defaults and the errors.
    ///
    /// # Errors
    ///
    /// As [`RedisClusterStore::connect`], and [`LockError::Config`] when the URL
    /// contradicts the builder or it was given a
    /// [`notification_client`](Self::notification_client) (a Cluster subscribes on its
    /// own connections).
    pub async fn connect(self, url: &str) -> Result<RedisClusterStore, LockError> {
        self.refuse_notification_client("a Redis Cluster store subscribes on its own connections")?;
        RedisClusterStore::connect_with(self, url).await
    }

    /// Builds the store on the application's cluster client (its nodes, credentials,
    /// TLS and protocol), with these settings and the Cluster's defaults (clock fences,
    /// release notifications and fair waiting on unless turned off here).
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_redis::redis::cluster::ClusterClientBuilder;
    /// use distlock_redis::redis::ProtocolVersion;
    /// use distlock_redis::RedisClusterStore;
    ///
    /// let client = ClusterClientBuilder::new(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .use_protocol(ProtocolVersion::RESP3) // for the release notifications
    ///     .build()?;
    /// let store = RedisClusterStore::builder().key_prefix("myapp").build(client)?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// Nothing is sent here: the store's cluster connection (made from `client`, with this
    /// builder's response and connect timeouts and the store's own handler of pushed
    /// messages) connects at the first command, and the settings every client of the
    /// prefix must share are checked by
    /// [`RedisClusterStore::check_shared_settings`], which an application calls once.
    /// Every command goes through that cluster connection: the direct connections to
    /// each master that [`connect`](Self::connect) opens need credentials the store
    /// cannot read back from a client.
    ///
    /// Release notifications arrive as RESP3 pushes, so with them on the client must use
    /// `ProtocolVersion::RESP3`; on a RESP2 client the first notified wait fails with
    /// [`LockError::Store`] (turn them off with
    /// [`release_notifications(false)`](Self::release_notifications) instead).
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad key prefix, a zero timeout, or a
    /// [`notification_client`](Self::notification_client) (a Cluster subscribes on its
    /// own connections).
    pub fn build(self, client: ClusterClient) -> Result<RedisClusterStore, LockError> {
        self.refuse_notification_client("a Redis Cluster store subscribes on its own connections")?;
        let config = self.resolve_cluster(None)?;
        let registry = WaiterRegistry::new();
        let settings = ClusterConfig::new()
            .set_connection_timeout(config.connect_timeout)
            .set_response_timeout(config.response_timeout)
            .set_push_sender(push_sender(&registry));
        let conn = client.get_pending_async_connection_with_config(settings);
        Ok(RedisClusterStore::assemble(conn, config, registry, None))
    }
}

impl RedisClusterStore {
    /// Connects to `redis+cluster://[[user]:password@]host1:port1,host2:port2,…[?prefix=…&fencing=…&fences=…&notifications=…&fair=…]`:
    /// any reachable subset of the masters (the others are discovered). Same layout
    /// parameters as a single node's [`RedisUrl`]; on a Cluster, release notifications
    /// (`notifications`), fair waiting (`fair`) and clock fences (`fences`) are on unless
    /// the URL turns them off. With `fair=false` waiters barge with the acquire script
    /// instead of queueing.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] before any I/O for a malformed URL; [`LockError::Store`]
    /// (operation `"connect"`) when the cluster cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// A builder for the settings of [`RedisLockStoreBuilder`](crate::RedisLockStoreBuilder)
    /// on a Cluster: the key prefix,
    /// [`fencing`](crate::RedisLockStoreBuilder::fencing),
    /// [`clock_fences`](crate::RedisLockStoreBuilder::clock_fences),
    /// [`release_notifications`](crate::RedisLockStoreBuilder::release_notifications),
    /// [`fair_queue`](crate::RedisLockStoreBuilder::fair_queue) and the response and
    /// connect timeouts. A setting given by both the builder and the URL must agree;
    /// one given by neither takes the Cluster's default (clock fences, notifications and
    /// fair waiting on). As on a single node, the first store of a prefix records its
    /// settings in `{prefix}:lock-settings` and a store with other settings is refused
    /// ([`RedisLockStore::check_shared_settings`](crate::RedisLockStore::check_shared_settings)).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_api::LockError> {
    /// use distlock_redis::RedisClusterStore;
    ///
    /// let store = RedisClusterStore::builder()
    ///     .fair_queue(false)
    ///     .fencing(true)
    ///     .connect("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub fn builder() -> RedisClusterStoreBuilder {
        RedisClusterStoreBuilder::default()
    }

    /// [`RedisClusterStoreBuilder::connect`](RedisClusterStoreBuilder::connect).
    pub(crate) async fn connect_with(builder: RedisClusterStoreBuilder, url: &str) -> Result<Self, LockError> {
        let (nodes, auth) = split_cluster_url(url)?;
        let first = RedisUrl::parse(&nodes[0])?;
        for node in &nodes[1..] {
            RedisUrl::parse(node)?;
        }
        let config = builder.resolve_cluster(Some(&first))?;
        let registry = WaiterRegistry::new();
        let plain: Vec<String> = nodes.iter().map(|node| strip_query(node)).collect();
        let client = ClusterClientBuilder::new(plain)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push_sender(&registry))
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .build()
            .map_err(|err| LockError::Config { message: format!("Redis Cluster URL: {err}") })?;
        let conn =
            client.get_async_connection().await.map_err(|err| LockError::store(Self::BACKEND, "connect", None, err))?;
        let store = Self::assemble(conn, config, registry, Some(auth));
        store.check_shared_settings().await?;
        Ok(store)
    }

    /// The store on `conn`, whose pushes wake `registry`'s waiters; `auth` is the nodes'
    /// `user:password@` for direct connections to each master (`None`: none are opened).
    fn assemble(conn: ClusterConnection, config: Config, registry: WaiterRegistry, auth: Option<String>) -> Self {
        let Config { key_prefix, fencing, clock_fences, release_notifications, fair_queue, .. } = config;
        registry.set_listening(release_notifications);
        let layout = Layout::cluster(&key_prefix);
        let commands =
            Commands { layout, backend: Self::BACKEND, fencing, clock_fences, notifications: release_notifications };
        Self::new(conn, key_prefix, commands, fair_queue, registry, auth)
    }

    /// Records this store's settings in `{prefix}:lock-settings` if no client of its key
    /// prefix did, or checks them against the record, as
    /// [`RedisLockStore::check_shared_settings`](crate::RedisLockStore::check_shared_settings)
    /// does on one server. [`connect`](RedisClusterStoreBuilder::connect) calls it; a
    /// store made by [`build`](RedisClusterStoreBuilder::build) sends nothing until an
    /// application calls it.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the prefix is in use with other settings;
    /// [`LockError::Store`] (operation `"connect"`) when the Cluster cannot be reached.
    pub async fn check_shared_settings(&self) -> Result<(), LockError> {
        let commands = self.commands();
        let settings_key = commands.layout.settings_key();
        let settings =
            config::shared_settings(commands.fencing, commands.clock_fences, commands.notifications, self.fair_queue());
        let mut conn = self.cluster_connection();
        let recorded: Option<String> = async {
            redis::cmd("SET").arg(&settings_key).arg(&settings).arg("NX").query_async::<()>(&mut conn).await?;
            redis::cmd("GET").arg(&settings_key).query_async(&mut conn).await
        }
        .await
        .map_err(|err| LockError::store(Self::BACKEND, "connect", None, err))?;
        config::check_recorded_settings(self.key_prefix(), &settings_key, &settings, recorded)
    }
}

/// The handler of the cluster connection's pushed messages: they wake `registry`'s waiters.
fn push_sender(registry: &WaiterRegistry) -> impl Fn(PushInfo) -> Result<(), std::convert::Infallible> + Send + Sync {
    let registry = registry.clone();
    move |push: PushInfo| {
        dispatch(&registry, &push);
        Ok(())
    }
}

fn strip_query(url: &str) -> String {
    url.split_once('?').map_or(url, |(base, _)| base).to_owned()
}

/// The nodes' URLs of `redis+cluster://auth@h1,h2/…?query` (`redis://auth@h1/…?query`, …)
/// and their credentials (`user:password@`, or empty); no I/O.
fn split_cluster_url(url: &str) -> Result<(Vec<String>, String), LockError> {
    let split = url::CLUSTER.split(url)?;
    let tail = split.tail;
    if !(tail.is_empty() || tail.starts_with('?') || tail.starts_with("/?") || tail == "/" || tail.starts_with("/0")) {
        return Err(url::CLUSTER.error("Redis Cluster has only database 0"));
    }
    Ok((split.node_urls(), split.auth.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn urls_split_into_nodes() {
        assert_eq!(
            split_cluster_url("redis+cluster://:pw@a:1,b:2?prefix=x").unwrap(),
            (vec!["redis://:pw@a:1?prefix=x".to_owned(), "redis://:pw@b:2?prefix=x".to_owned()], ":pw@".to_owned())
        );
        for bad in ["redis://a", "redis+cluster://a,,b", "redis+cluster://", "redis+cluster://a/3"] {
            assert!(matches!(split_cluster_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }

    /// Nothing listens on port 1: `build` sends nothing, so every check is local.
    #[tokio::test]
    async fn build_checks_the_settings_without_any_io() {
        let client = ClusterClient::new(["redis://127.0.0.1:1"]).unwrap();
        let store = RedisClusterStore::builder().build(client.clone()).unwrap();
        assert!(store.notifications() && store.fair_queue() && store.clock_fences() && !store.fencing());
        let off = RedisClusterStore::builder().release_notifications(false).build(client.clone()).unwrap();
        assert!(!off.notifications());
        for builder in [
            RedisClusterStore::builder().key_prefix("a\nb"),
            RedisClusterStore::builder().response_timeout(Duration::ZERO),
            RedisClusterStore::builder().notification_client(redis::Client::open("redis://127.0.0.1:1").unwrap()),
        ] {
            let err = builder.build(client.clone()).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{err}");
        }
    }
}
