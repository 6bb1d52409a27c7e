//! Store configuration: key prefix, fencing mode and connection timeouts.

use std::time::Duration;

use distlock_api::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::store::RedisLockStore;

/// Builds a [`RedisLockStore`] with a non-default key prefix, fencing, or timeouts.
///
/// ```no_run
/// use std::time::Duration;
/// use distlock_redis::RedisLockStore;
///
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// let store = RedisLockStore::builder()
///     .key_prefix("neton") // keys become `neton:lock:<key>`
///     .fencing(true) // every acquisition gets a fencing number
///     .response_timeout(Duration::from_secs(1))
///     .connect("redis://127.0.0.1:6379")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` or `build` is called"]
pub struct RedisLockStoreBuilder {
    pub(crate) key_prefix: String,
    pub(crate) fencing: bool,
    pub(crate) release_notifications: bool,
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    reconnect_retries: usize,
}

impl Default for RedisLockStoreBuilder {
    fn default() -> Self {
        Self {
            key_prefix: RedisLockStore::DEFAULT_KEY_PREFIX.to_owned(),
            fencing: false,
            release_notifications: true,
            response_timeout: RedisLockStoreBuilder::DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: RedisLockStoreBuilder::DEFAULT_CONNECTION_TIMEOUT,
            reconnect_retries: RedisLockStoreBuilder::DEFAULT_RECONNECT_RETRIES,
        }
    }
}

impl RedisLockStoreBuilder {
    /// The longest key prefix accepted, in bytes.
    pub const MAX_KEY_PREFIX_LEN: usize = 256;
    /// Default [`response_timeout`](Self::response_timeout): 2 s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`connection_timeout`](Self::connection_timeout): 2 s.
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`reconnect_retries`](Self::reconnect_retries): 3.
    pub const DEFAULT_RECONNECT_RETRIES: usize = 3;

    /// A builder with the defaults: prefix `distlock`, no fencing, 2 s timeouts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The prefix of every key: the store writes `{key_prefix}:lock:{key}` (seed 000
    /// §3.1). Default `distlock`. Must be 1–256 bytes without control characters;
    /// checked by [`connect`](Self::connect) / [`build`](Self::build).
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.key_prefix = key_prefix.into();
        self
    }

    /// Fencing mode: every acquisition also returns a number strictly increasing per key,
    /// drawn from one counter per store (`{key_prefix}:fence`) and kept for the holder in
    /// `{key_prefix}:fence:lock:{key}`, which expires with the lease. Off by default, so
    /// acquire stays the spec's plain `SET key token NX PX ttl`.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Release notifications (on by default): every release also publishes the lock's
    /// key on `{key_prefix}:released` (pipelined with the release, no extra round trip),
    /// and waiters are woken through one subscriber connection per store instead of
    /// polling every `retry_interval`. Off: releases send only seed 000's script and
    /// waiters poll.
    pub fn release_notifications(mut self, enabled: bool) -> Self {
        self.release_notifications = enabled;
        self
    }

    /// How long to wait for the server's answer to one command before failing it with
    /// [`LockError::Store`]. Default 2 s.
    ///
    /// A timed-out acquire has an unknown outcome; the
    /// [`LockManager`](distlock_api::LockManager) releases it with the same token.
    /// Used by [`connect`](Self::connect) (and for the subscriber connection's
    /// `SUBSCRIBE` and health-check `PING`): [`build`](Self::build) keeps the given
    /// connection's own settings.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long one connection attempt may take. Default 2 s. Used by
    /// [`connect`](Self::connect), and for the subscriber connection.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How many times a lost connection is retried (with exponential back-off from
    /// 100 ms, at most 1 s apart) before the commands waiting for it fail. Default 3.
    /// The next command starts a new reconnection. Used by [`connect`](Self::connect) only.
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// The [`ConnectionManagerConfig`] that [`connect`](Self::connect) uses: this
    /// builder's timeouts and reconnection policy.
    pub fn connection_manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connection_timeout))
            .set_number_of_retries(self.reconnect_retries)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1))
    }

    /// Connects to `url` (`redis://[[user]:password@]host[:port][/db]`) and builds the store.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad key prefix or URL, before any I/O;
    /// [`LockError::Store`] when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection; nothing is
    /// written to the server.
    pub async fn connect(self, url: &str) -> Result<RedisLockStore, LockError> {
        validate_key_prefix(&self.key_prefix)?;
        let client = redis::Client::open(url)
            .map_err(|err| LockError::Config { message: format!("unusable Redis URL: {err}") })?;
        let conn = ConnectionManager::new_with_config(client.clone(), self.connection_manager_config())
            .await
            .map_err(|err| LockError::store(RedisLockStore::BACKEND, "connect", None, err))?;
        self.build_with_client(client, conn)
    }

    /// Builds the store on an existing connection (its timeouts stay as they are).
    ///
    /// The store publishes its releases, but it has no [`redis::Client`] to open its
    /// subscriber connection with, so its own waiters poll; use
    /// [`build_with_client`](Self::build_with_client) for notified waits.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad key prefix.
    pub fn build(self, conn: ConnectionManager) -> Result<RedisLockStore, LockError> {
        validate_key_prefix(&self.key_prefix)?;
        Ok(RedisLockStore::from_parts(conn, None, &self))
    }

    /// Builds the store on an existing connection, with `client` (normally the one `conn`
    /// was made from) for the subscriber connection of notified waits. Nothing is opened
    /// until the first wait.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad key prefix.
    pub fn build_with_client(
        self,
        client: redis::Client,
        conn: ConnectionManager,
    ) -> Result<RedisLockStore, LockError> {
        validate_key_prefix(&self.key_prefix)?;
        Ok(RedisLockStore::from_parts(conn, Some(client), &self))
    }
}

fn validate_key_prefix(prefix: &str) -> Result<(), LockError> {
    let problem = if prefix.is_empty() {
        "is empty".to_owned()
    } else if prefix.len() > RedisLockStoreBuilder::MAX_KEY_PREFIX_LEN {
        format!("is {} bytes long, at most {} are allowed", prefix.len(), RedisLockStoreBuilder::MAX_KEY_PREFIX_LEN)
    } else if let Some((index, _)) = prefix.char_indices().find(|(_, c)| c.is_control()) {
        format!("contains a control character at byte {index}")
    } else {
        return Ok(());
    };
    Err(LockError::Config { message: format!("the Redis key prefix {problem}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_prefix_rules() {
        for good in ["distlock", "neton", "a", "app:v2", "订单", &"p".repeat(256)] {
            assert!(validate_key_prefix(good).is_ok(), "{good:?}");
        }
        for bad in ["", "a\nb", "nul\0", "\u{7f}", &"p".repeat(257)] {
            let err = validate_key_prefix(bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
        }
    }

    #[tokio::test]
    async fn bad_prefix_and_bad_url_fail_before_any_io() {
        // Nothing listens on port 1: reaching the network would give a Store error, not Config.
        let err = RedisLockStoreBuilder::new().key_prefix("").connect("redis://127.0.0.1:1").await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        let err = RedisLockStoreBuilder::new().connect("http://127.0.0.1:6379").await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(!err.to_string().is_empty());
    }

    #[tokio::test]
    async fn unreachable_server_is_a_store_error_in_bounded_time() {
        let started = std::time::Instant::now();
        let err = RedisLockStoreBuilder::new().reconnect_retries(1).connect("redis://127.0.0.1:1").await.unwrap_err();
        assert!(matches!(err, LockError::Store { operation: "connect", .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }
}
