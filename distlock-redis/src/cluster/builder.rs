//! Making a [`RedisClusterStore`]: the shared settings with the Cluster's defaults, the
//! `redis+cluster://` URL split into its nodes, connecting, and the settings every client
//! of the prefix shares checked against the record.

use distlock_api::waiters::WaiterRegistry;
use distlock_api::LockError;
use redis::cluster::ClusterClientBuilder;
use redis::PushInfo;

use super::store::dispatch;
use super::RedisClusterStore;
use crate::builder::RedisLockStoreBuilder;
use crate::commands::Commands;
use crate::config;
use crate::layout::Layout;
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
        let config = builder.resolve_cluster(&first)?;
        let (key_prefix, fencing, clock_fences) = (config.key_prefix, config.fencing, config.clock_fences);
        let (notifications, fair_queue) = (config.release_notifications, config.fair_queue);
        let registry = WaiterRegistry::new();
        let pushes = registry.clone();
        let sender = move |push: PushInfo| {
            dispatch(&pushes, &push);
            Ok::<(), std::convert::Infallible>(())
        };
        let plain: Vec<String> = nodes.iter().map(|node| strip_query(node)).collect();
        let client = ClusterClientBuilder::new(plain)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(sender)
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .build()
            .map_err(|err| LockError::Config { message: format!("Redis Cluster URL: {err}") })?;
        let mut conn =
            client.get_async_connection().await.map_err(|err| LockError::store(Self::BACKEND, "connect", None, err))?;
        let layout = Layout::cluster(&key_prefix);
        let settings_key = layout.settings_key();
        let settings = config::shared_settings(fencing, clock_fences, notifications, fair_queue);
        let recorded: Option<String> = async {
            redis::cmd("SET").arg(&settings_key).arg(&settings).arg("NX").query_async::<()>(&mut conn).await?;
            redis::cmd("GET").arg(&settings_key).query_async(&mut conn).await
        }
        .await
        .map_err(|err| LockError::store(Self::BACKEND, "connect", None, err))?;
        config::check_recorded_settings(&key_prefix, &settings_key, &settings, recorded)?;
        registry.set_listening(notifications);
        let commands = Commands { layout, backend: Self::BACKEND, fencing, clock_fences, notifications };
        Ok(Self::new(conn, key_prefix, commands, fair_queue, registry, auth))
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
}
