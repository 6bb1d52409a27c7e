//! The store's knobs: [`EtcdLockStoreBuilder`] collects and validates settings, then
//! connects.

use std::time::Duration;

use distlock_api::{probe, LockError};
use etcd_client::{Client, ConnectOptions};

use crate::config::{
    checked_timeout, validate_key_prefix, Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEY_PREFIX, DEFAULT_RESPONSE_TIMEOUT,
};
use crate::store::EtcdLockStore;
use crate::url::EtcdUrl;

/// Builds an [`EtcdLockStore`]: the key prefix, release notifications and timeouts.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::etcd::EtcdLockStore;
///
/// let store = EtcdLockStore::builder()
///     .key_prefix("myapp")
///     .response_timeout(Duration::from_secs(2))
///     .connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct EtcdLockStoreBuilder {
    key_prefix: Option<String>,
    release_notifications: Option<bool>,
    response_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
}

impl Default for EtcdLockStoreBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl EtcdLockStoreBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self { key_prefix: None, release_notifications: None, response_timeout: None, connect_timeout: None }
    }

    /// The key prefix: a lock `order:1` lives at the etcd key `{prefix}/lock:order:1`.
    /// Defaults to `distlock`. A URL's `?prefix=` wins over this setting.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Whether waiters wake through a watch on the store's prefix (no polling while the
    /// watch is healthy). Defaults to `true`. A URL's `?notifications=` wins.
    pub fn release_notifications(mut self, enabled: bool) -> Self {
        self.release_notifications = Some(enabled);
        self
    }

    /// The longest one request may take; a request that takes longer fails with
    /// [`LockError::Store`] (its outcome is then unknown, as after a dropped connection).
    /// Defaults to 5 seconds. A URL's `?timeout=` wins.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// The longest connecting to a member may take. Defaults to 5 seconds. A URL's
    /// `?connect_timeout=` wins.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Parses `url` ([`EtcdUrl`]), connects to its members and checks that the cluster
    /// answers.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad URL or setting (before any I/O);
    /// [`LockError::Store`] (operation `"connect"`) when the cluster does not answer.
    pub async fn connect(self, url: &str) -> Result<EtcdLockStore, LockError> {
        let url = EtcdUrl::parse(url)?;
        let config = self.resolve(Some(&url))?;
        let (connect_timeout, response_timeout) = (config.connect_timeout, config.response_timeout);
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            // Fail fast on a member cut off from the leader instead of hanging (and end a
            // watch served by such a member, so the listener moves to a healthy one).
            .with_require_leader(true)
            // Notice a dead connection (a partition) within a few seconds, even while idle.
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        if let Some((name, password)) = url.credentials() {
            options = options.with_user(name.clone(), password.clone());
        }
        let connecting = Client::connect(url.endpoints(), Some(options));
        // A failure names what answers at the first endpoint (another kind of server?).
        let first = url.endpoints().first().map(String::as_str).unwrap_or_default();
        let client = match tokio::time::timeout(connect_timeout.saturating_add(response_timeout), connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => return Err(probe::connect_error_at("etcd", first, err).await),
            Err(_) => return Err(probe::connect_error_at("etcd", first, "timed out connecting to etcd").await),
        };
        match EtcdLockStore::from_client(client, config).await {
            Err(LockError::Store { operation: "connect", cause, .. }) => {
                Err(probe::connect_error_at("etcd", first, cause).await)
            }
            built => built,
        }
    }

    /// Builds the store on an existing client (its connection options stay as they
    /// are), and asks the cluster once for its status, so an unreachable cluster fails
    /// here rather than at the first lock.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::etcd::{etcd_client::Client, EtcdLockStore};
    ///
    /// let client = Client::connect(["127.0.0.1:2379"], None).await?; // the application's own
    /// let store = EtcdLockStore::builder().key_prefix("myapp").build(client).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad setting (before any I/O); [`LockError::Store`]
    /// (operation `"connect"`) when the cluster does not answer.
    pub async fn build(self, client: Client) -> Result<EtcdLockStore, LockError> {
        let config = self.resolve(None)?;
        EtcdLockStore::from_client(client, config).await
    }

    /// The checked settings: the URL's, then this builder's, then the defaults.
    fn resolve(self, url: Option<&EtcdUrl>) -> Result<Config, LockError> {
        let key_prefix = url
            .and_then(EtcdUrl::key_prefix)
            .map(str::to_owned)
            .or(self.key_prefix)
            .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
        validate_key_prefix(&key_prefix)?;
        let response_timeout = checked_timeout(
            "response_timeout",
            url.and_then(EtcdUrl::response_timeout).or(self.response_timeout).unwrap_or(DEFAULT_RESPONSE_TIMEOUT),
        )?;
        let connect_timeout = checked_timeout(
            "connect_timeout",
            url.and_then(EtcdUrl::connect_timeout).or(self.connect_timeout).unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        )?;
        let release_notifications =
            url.and_then(EtcdUrl::release_notifications).or(self.release_notifications).unwrap_or(true);
        Ok(Config { key_prefix, release_notifications, response_timeout, connect_timeout })
    }
}

impl EtcdLockStore {
    /// A builder for the store's settings.
    pub fn builder() -> EtcdLockStoreBuilder {
        EtcdLockStoreBuilder::new()
    }

    /// Connects with the default settings (and the URL's parameters), see
    /// [`EtcdUrl`](crate::EtcdUrl).
    ///
    /// # Errors
    ///
    /// As [`EtcdLockStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        EtcdLockStoreBuilder::new().connect(url).await
    }
}
