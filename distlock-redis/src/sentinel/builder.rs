//! Making a [`RedisSentinelStore`]: the builder's settings and the URL's checked against
//! each other before any I/O, with clock fences as this topology's default; or the
//! builder's settings on the application's `SentinelClient`.

use distlock_api::LockError;
use redis::sentinel::SentinelClient;

use super::config::parse_sentinel_url;
use super::master::MasterSource;
use super::RedisSentinelStore;
use crate::single::RedisLockStoreBuilder;
use crate::url::RedisUrl;

/// The builder of a [`RedisSentinelStore`]: [`RedisSentinelStore::builder`].
pub type RedisSentinelStoreBuilder = RedisLockStoreBuilder<RedisSentinelStore>;

impl RedisSentinelStoreBuilder {
    /// Asks the sentinels at `url` (`redis+sentinel://host:port[,host:port…]/master`)
    /// for the master and connects to it with these settings; see
    /// [`RedisSentinelStore::connect`] for the URL and the errors.
    ///
    /// # Errors
    ///
    /// As [`RedisSentinelStore::connect`], and [`LockError::Config`] when the URL
    /// contradicts the builder or it was given a
    /// [`notification_client`](Self::notification_client) (each master's store opens its
    /// own subscriber).
    pub async fn connect(self, url: &str) -> Result<RedisSentinelStore, LockError> {
        self.refuse_notification_client("a Redis Sentinel store connects to each master itself")?;
        RedisSentinelStore::connect_with(self.retarget(), url).await
    }

    /// Asks the application's `client` for the master and connects to it with these
    /// settings (clock fences unless turned off here); after a failed operation the
    /// store asks `client` again and follows the master to its new address, as a store
    /// made by [`connect`](Self::connect) does with the URL's sentinels. The client
    /// carries the master's credentials, database and TLS
    /// (`SentinelNodeConnectionInfo`), and must be made for
    /// `SentinelServerType::Master`: on a replica every write fails with
    /// [`LockError::Store`]. There are no `wait_replicas` here (a URL parameter).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_redis::redis::sentinel::{SentinelClient, SentinelServerType};
    /// use distlock_redis::RedisSentinelStore;
    ///
    /// let sentinels = vec!["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"];
    /// let client = SentinelClient::build(sentinels, "main".into(), None, SentinelServerType::Master)?;
    /// let store = RedisSentinelStore::builder().release_notifications(true).build(client).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// Unlike the other Redis builders' `build`, it is `async` and connects: the store
    /// needs the master's address, which only the sentinels know. Each master's store
    /// opens its notification subscriber from the client the sentinels name for it, and
    /// records or checks the prefix's settings as `connect` does.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad setting (before any I/O), a
    /// [`notification_client`](Self::notification_client), or a prefix in use with other
    /// settings; [`LockError::Store`] (operation `"connect"`) when no sentinel names a
    /// reachable master within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn build(self, client: SentinelClient) -> Result<RedisSentinelStore, LockError> {
        self.refuse_notification_client("a Redis Sentinel store connects to each master itself")?;
        let builder = self.retarget().clock_fences_unless_set(true);
        builder.resolve(None)?;
        let source = MasterSource::Client(tokio::sync::Mutex::new(client));
        let (address, store) = source.connect(&builder).await?;
        Ok(RedisSentinelStore::new(source, builder, address, store))
    }
}

impl RedisSentinelStore {
    /// Connects: asks the sentinels (in URL order) for the master, then connects to it
    /// as [`RedisLockStore::connect`](crate::RedisLockStore::connect) does.
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
    /// ([`fair_queue`](RedisLockStoreBuilder::fair_queue),
    /// [`release_notifications`](RedisLockStoreBuilder::release_notifications),
    /// [`fencing`](RedisLockStoreBuilder::fencing),
    /// [`clock_fences`](RedisLockStoreBuilder::clock_fences), the key prefix) and
    /// timeouts. A setting given by both the builder and the URL must agree.
    ///
    /// [`connect`](RedisSentinelStoreBuilder::connect) takes a `redis+sentinel://` URL;
    /// [`build`](RedisSentinelStoreBuilder::build) the application's `SentinelClient`.
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
    pub fn builder() -> RedisSentinelStoreBuilder {
        RedisSentinelStoreBuilder::default()
    }

    /// [`RedisSentinelStoreBuilder::connect`](crate::RedisSentinelStoreBuilder::connect).
    pub(crate) async fn connect_with(builder: RedisLockStoreBuilder, url: &str) -> Result<Self, LockError> {
        let parsed = parse_sentinel_url(url)?;
        // Check the layout before any I/O, on a stand-in address.
        let stand_in = parsed.master_url("127.0.0.1");
        let builder = clock_default(builder, &stand_in);
        builder.clone().check_url(&RedisUrl::parse(&stand_in)?)?;
        let source = MasterSource::Url(parsed);
        let (address, store) = source.connect(&builder).await?;
        Ok(Self::new(source, builder, address, store))
    }
}

/// Clock fences unless the URL or the builder says otherwise.
pub(super) fn clock_default(builder: RedisLockStoreBuilder, url: &str) -> RedisLockStoreBuilder {
    match RedisUrl::parse(url).ok().and_then(|url| url.clock_fences()) {
        Some(_) => builder,
        None => builder.clock_fences_unless_set(true),
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
        let builder = clock_default(RedisLockStoreBuilder::new().clock_fences(false), "redis://h");
        assert!(builder.check_url(&RedisUrl::parse("redis://h/?fences=counter").unwrap()).is_ok());
    }
}
