//! Making a [`RedisLockStore`]: connecting to one server (which checks that the server
//! accepts the connection's settings), or building on a connection of the application's.

use std::time::Duration;

use distlock_api::{probe, LockError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, ConnectionAddr};

use super::RedisLockStoreBuilder;
use crate::config::{saturated_timeout, Config};
use crate::single::RedisLockStore;
use crate::url::RedisUrl;

impl RedisLockStoreBuilder {
    /// The [`ConnectionManagerConfig`] that [`connect`](Self::connect) uses: this
    /// builder's timeouts (cut to [`MAX_TIMEOUT`](Self::MAX_TIMEOUT)) and reconnection
    /// policy. A zero timeout is passed on as it is here; `connect` refuses it.
    pub fn connection_manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(saturated_timeout(self.response_timeout)))
            .set_connection_timeout(Some(saturated_timeout(self.connect_timeout)))
            .set_number_of_retries(self.reconnect_retries)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1))
    }

    /// Connects to `url` and builds the store.
    ///
    /// `url` is `redis://[[user]:password@]host[:port][/db]`, optionally with the
    /// store's layout as query parameters (`?prefix=neton&fencing=true`); see
    /// [`RedisUrl`] for every accepted form and parameter.
    ///
    /// Connecting checks the server before returning: one connection is opened (no
    /// retries, within [`connect_timeout`](Self::connect_timeout)), authenticated,
    /// switched to the URL's database and sent `PING`. So a wrong or missing password,
    /// a database number the server does not have, or an unreachable server fails here,
    /// not at the first lock. Then it records the settings every client of the key
    /// prefix must share, or checks them against the record
    /// ([`RedisLockStore::check_shared_settings`]).
    ///
    /// # Errors
    ///
    /// [`LockError::Config`], before any I/O, for an unusable URL, an unknown or
    /// malformed URL parameter, a URL parameter that contradicts this builder, a bad key
    /// prefix or a zero timeout; after connecting, when the prefix is in use with other
    /// settings. [`LockError::Store`] with operation `"connect"` when the
    /// server cannot be reached or refuses the connection (its message carries the
    /// server's reason, e.g. `NOAUTH`, `WRONGPASS` or `DB index is out of range`, never
    /// the password).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connections; nothing is
    /// written to the server.
    pub async fn connect(self, url: &str) -> Result<RedisLockStore, LockError> {
        let url = RedisUrl::parse(url)?;
        self.connect_url(&url).await
    }

    /// [`connect`](Self::connect) with an already parsed URL.
    pub(crate) async fn connect_url(self, url: &RedisUrl) -> Result<RedisLockStore, LockError> {
        let config = self.resolve(Some(url))?;
        let client = url.client().clone();
        verify_server(&client, &config).await?;
        let conn = ConnectionManager::new_with_config(client.clone(), self.connection_manager_config())
            .await
            .map_err(connect_error)?;
        let store = RedisLockStore::from_parts(conn, Some(client), config);
        store.check_shared_settings().await?;
        Ok(store)
    }

    /// Builds the store on an existing connection (its timeouts stay as they are).
    ///
    /// The store opens a second connection for the subscriber of notified waits, so
    /// [`release_notifications`](Self::release_notifications) needs the
    /// [`notification_client`](Self::notification_client) to open it with; without one
    /// they are refused here, never silently left off.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_redis::RedisLockStore;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let conn = client.get_connection_manager().await?; // the application's own connection
    /// let store = RedisLockStore::builder()
    ///     .key_prefix("myapp")
    ///     .release_notifications(true)
    ///     .notification_client(client)
    ///     .build(conn)?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// Unlike [`connect`](Self::connect), it sends nothing: the settings every client of
    /// the prefix must share are checked by
    /// [`RedisLockStore::check_shared_settings`], which an application calls once.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad key prefix, a zero timeout, or release
    /// notifications without a notification client.
    pub fn build(self, conn: ConnectionManager) -> Result<RedisLockStore, LockError> {
        let config = self.resolve(None)?;
        if config.release_notifications && self.notification_client.is_none() {
            return Err(LockError::Config {
                message: "Redis release notifications need a subscriber connection: give the builder the \
                          `redis::Client` to open it with (`RedisLockStoreBuilder::notification_client`)"
                    .to_owned(),
            });
        }
        Ok(RedisLockStore::from_parts(conn, self.notification_client, config))
    }

    /// Builds the store on a lazy connection to `url` (nothing is sent until the first
    /// command), for a Redlock master that was down when connecting.
    pub(crate) fn build_lazy(
        self,
        url: &RedisUrl,
        client: redis::Client,
        conn: ConnectionManager,
    ) -> Result<RedisLockStore, LockError> {
        let config = self.resolve(Some(url))?;
        Ok(RedisLockStore::from_parts(conn, Some(client), config))
    }
}

impl RedisLockStore {
    /// Connects to `url` with the default configuration, or the layout the URL gives:
    /// key prefix `distlock`, no fencing, no release notifications, no fair queue, 2 s
    /// timeouts.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_api::LockError> {
    /// let store = distlock_redis::RedisLockStore::connect("redis://127.0.0.1:6379").await?;
    /// let neton = distlock_redis::RedisLockStore::connect("redis://127.0.0.1:6379/0?prefix=neton").await?;
    /// # let _ = (store, neton); Ok(()) }
    /// ```
    ///
    /// See [`RedisLockStoreBuilder::connect`] for the URL, what connecting checks, and
    /// its errors.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for an unusable URL or parameter, before any I/O;
    /// [`LockError::Store`] (operation `"connect"`) when the server cannot be reached or
    /// refuses the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is written to the server.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        RedisLockStoreBuilder::new().connect(url).await
    }

    /// A builder for a non-default key prefix, fencing mode or timeouts.
    pub fn builder() -> RedisLockStoreBuilder {
        RedisLockStoreBuilder::new()
    }
}

/// One connection, no retries: connect, authenticate, `SELECT` the database, `PING`.
/// Whatever the server refuses shows here with its own reason; when it does not answer as
/// a Redis server, the error says what answers at its address instead.
async fn verify_server(client: &redis::Client, config: &Config) -> Result<(), LockError> {
    let settings = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout));
    let verified = async {
        let mut conn = client.get_multiplexed_async_connection_with_config(&settings).await?;
        redis::cmd("PING").query_async::<redis::Value>(&mut conn).await
    };
    match verified.await {
        Ok(_) => Ok(()),
        Err(err) => match client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                Err(probe::connect_error(RedisLockStore::BACKEND, host, *port, err).await)
            }
            _ => Err(connect_error(err)),
        },
    }
}

fn connect_error(err: redis::RedisError) -> LockError {
    LockError::store(RedisLockStore::BACKEND, "connect", None, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 1: reaching the network would give a Store error, not Config.
    const NOWHERE: &str = "redis://127.0.0.1:1";

    #[test]
    fn huge_timeouts_are_cut_to_the_maximum() {
        let builder = RedisLockStoreBuilder::new()
            .response_timeout(Duration::MAX)
            .connect_timeout(Duration::MAX)
            .reconnect_retries(usize::MAX);
        let config = builder.resolve(None).unwrap();
        assert_eq!(config.response_timeout, RedisLockStoreBuilder::MAX_TIMEOUT);
        assert_eq!(config.connect_timeout, RedisLockStoreBuilder::MAX_TIMEOUT);
        let manager = builder.connection_manager_config();
        assert_eq!(manager.response_timeout(), Some(RedisLockStoreBuilder::MAX_TIMEOUT));
        assert_eq!(manager.connection_timeout(), Some(RedisLockStoreBuilder::MAX_TIMEOUT));
    }

    #[tokio::test]
    async fn bad_settings_and_bad_urls_fail_before_any_io() {
        for builder in [
            RedisLockStoreBuilder::new().key_prefix("a\nb"),
            RedisLockStoreBuilder::new().fair_queue(false),
            RedisLockStoreBuilder::new().response_timeout(Duration::ZERO),
            RedisLockStoreBuilder::new().connect_timeout(Duration::ZERO),
            RedisLockStoreBuilder::new().fencing(true),
        ] {
            let err = builder.clone().connect(&format!("{NOWHERE}/?fencing=false&fair=true")).await.unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{builder:?}: {err}");
        }
        for url in ["http://127.0.0.1:6379", "redis://127.0.0.1:1/?prefix=%0A", "redis://127.0.0.1:1/?x=1"] {
            let err = RedisLockStore::connect(url).await.unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn unreachable_server_is_a_store_error_in_bounded_time() {
        let started = std::time::Instant::now();
        let err = RedisLockStore::connect(NOWHERE).await.unwrap_err();
        assert!(matches!(err, LockError::Store { operation: "connect", key: None, .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "one attempt, no back-off: {:?}", started.elapsed());
    }
}
