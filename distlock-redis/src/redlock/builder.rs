//! Making a [`RedlockStore`]: its settings, the masters' URLs checked against them before
//! any I/O, and connecting to a majority of the masters.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockError;
use redis::aio::ConnectionManager;

use super::config::{masters_fencing, split_redlock_url};
use super::quorum::BACKEND;
use super::RedlockStore;
use crate::commands::Failure;
use crate::single::RedisLockStore;
use crate::single::RedisLockStoreBuilder;
use crate::url::RedisUrl;

impl RedlockStore {
    /// Connects to `redlock://host1:port1,host2:port2,host3:port3[/db][?prefix=…&fencing=…]`
    /// (see [`RedlockStoreBuilder::connect`]).
    ///
    /// # Errors
    ///
    /// As [`RedlockStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        RedlockStoreBuilder::new().connect(url).await
    }

    /// A builder (timeouts, layout), which connects by URL
    /// ([`connect`](RedlockStoreBuilder::connect)) or builds on the application's clients
    /// ([`build`](RedlockStoreBuilder::build)).
    pub fn builder() -> RedlockStoreBuilder {
        RedlockStoreBuilder::new()
    }

    /// Records the settings every client of the key prefix must share on each master, or
    /// checks them against its record, as
    /// [`RedisLockStore::check_shared_settings`](crate::RedisLockStore::check_shared_settings)
    /// does on one server. [`connect`](RedlockStoreBuilder::connect) does it on every
    /// master it reaches; a store made by [`build`](RedlockStoreBuilder::build) sends
    /// nothing until an application calls this.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when a master holds other settings for the prefix;
    /// [`LockError::Store`] (operation `"connect"`) when fewer than a majority of the
    /// masters answer.
    pub async fn check_shared_settings(&self) -> Result<(), LockError> {
        let checks = self.masters.iter().map(RedisLockStore::check_shared_settings);
        let results = futures_util::future::join_all(checks).await;
        let answered = results.iter().filter(|result| result.is_ok()).count();
        let mut failure = None;
        for result in results {
            match result {
                Err(err @ LockError::Config { .. }) => return Err(err),
                Err(err) => failure = failure.or(Some(err)),
                Ok(()) => {}
            }
        }
        match failure {
            Some(err) if answered < self.quorum() => Err(LockError::store(
                BACKEND,
                "connect",
                None,
                Failure(format!("only {answered} of {} masters answered: {err}", self.masters.len())),
            )),
            _ => Ok(()),
        }
    }
}

/// Builds a [`RedlockStore`]: the masters' layout and timeouts.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// let store = distlock_redis::RedlockStore::builder()
///     .fencing(true)
///     .connect("redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?prefix=app")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct RedlockStoreBuilder {
    node: RedisLockStoreBuilder,
    fencing: Option<bool>,
    response_timeout: Duration,
}

impl Default for RedlockStoreBuilder {
    fn default() -> Self {
        let timeout = RedlockStore::DEFAULT_RESPONSE_TIMEOUT;
        Self { node: RedisLockStoreBuilder::new().response_timeout(timeout), fencing: None, response_timeout: timeout }
    }
}

impl RedlockStoreBuilder {
    /// The defaults: prefix `distlock`, no fencing, no release notifications, 1 s per master.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key prefix on every master (as [`RedisLockStoreBuilder::key_prefix`]).
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.node = self.node.key_prefix(key_prefix);
        self
    }

    /// Fencing numbers (off by default; `?fencing=true`), always drawn from the masters'
    /// clocks (see [`RedlockStore`]).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// Release notifications on every master (off by default; `?notifications=true` turns
    /// them on too).
    pub fn release_notifications(mut self, enabled: bool) -> Self {
        self.node = self.node.release_notifications(enabled);
        self
    }

    /// How long to wait for one master's answer to one command (default 1 s; for acquire
    /// and extend also at most half the TTL), as
    /// [`RedisLockStoreBuilder::response_timeout`] on each master's connection. A master
    /// that does not answer in time counts as failed. Must be greater than zero.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self.node = self.node.response_timeout(timeout);
        self
    }

    /// How long to wait for one connection attempt to a master (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.node = self.node.connect_timeout(timeout);
        self
    }

    /// Connects to a `redlock://` URL:
    ///
    /// ```text
    /// redlock://[[user]:password@]host1[:port1],host2[:port2],…[/db][?prefix=…&fencing=…&notifications=…&fences=clock]
    /// ```
    ///
    /// Every master gets the same credentials, database and layout parameters (those of
    /// a single-node `redis://` URL; `fences` may only be `clock`). 1 to
    /// [`MAX_MASTERS`](RedlockStore::MAX_MASTERS) masters, distinct; an odd number is
    /// usual (3 or 5).
    ///
    /// Connecting needs a majority of the masters reachable; the others are connected
    /// lazily and join as soon as they answer.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] (before any I/O) for a malformed URL; [`LockError::Store`]
    /// with operation `"connect"` when fewer than a majority of masters can be reached.
    pub async fn connect(self, url: &str) -> Result<RedlockStore, LockError> {
        let urls = split_redlock_url(url)?;
        self.connect_masters(&urls).await
    }

    /// Builds the store on the application's clients, one per master (1 to
    /// [`MAX_MASTERS`](RedlockStore::MAX_MASTERS), distinct; an odd number is usual), with
    /// these settings; each client's address, credentials, database and TLS are kept.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_redis::{redis, RedlockStore};
    ///
    /// let clients = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
    ///     .into_iter()
    ///     .map(redis::Client::open)
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let store = RedlockStore::builder().key_prefix("myapp").release_notifications(true).build(clients)?;
    /// # let _ = store; Ok(()) }
    /// ```
    ///
    /// Nothing is sent here: each master's connection (with this builder's timeouts) is
    /// opened at its first command, and its subscriber for
    /// [release notifications](Self::release_notifications) from the same client at the
    /// first wait. The settings every client of the prefix must share are checked by
    /// [`RedlockStore::check_shared_settings`], which an application calls once;
    /// [`connect`](Self::connect) checks them itself.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for no client or too many, a master given twice, a bad key
    /// prefix or a zero timeout.
    pub fn build(self, clients: impl IntoIterator<Item = redis::Client>) -> Result<RedlockStore, LockError> {
        let clients: Vec<redis::Client> = clients.into_iter().collect();
        self.check_masters(clients.len())?;
        for (index, client) in clients.iter().enumerate() {
            let address = client.get_connection_info().addr();
            if clients[..index].iter().any(|other| other.get_connection_info().addr() == address) {
                return Err(LockError::Config { message: format!("the Redlock master `{address}` is given twice") });
            }
        }
        let fencing = self.fencing.unwrap_or(false);
        let node = self.node.clone().fencing(fencing).clock_fences(true).fair_queue(false);
        let masters = clients
            .into_iter()
            .map(|client| {
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), node.connection_manager_config())
                    .map_err(|err| LockError::store(BACKEND, "connect", None, err))?;
                node.clone().notification_client(client).build(conn)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedlockStore {
            masters: masters.into(),
            fencing,
            response_timeout: self.response_timeout,
            granted: Arc::default(),
        })
    }

    /// `Ok` for 1 to `MAX_MASTERS` masters and a usable response timeout.
    fn check_masters(&self, masters: usize) -> Result<(), LockError> {
        if masters == 0 || masters > RedlockStore::MAX_MASTERS {
            return Err(LockError::Config {
                message: format!("Redlock needs 1 to {} masters, not {masters}", RedlockStore::MAX_MASTERS),
            });
        }
        if self.response_timeout.is_zero() {
            return Err(LockError::Config {
                message: "the Redlock `response_timeout` must be greater than zero".into(),
            });
        }
        Ok(())
    }

    /// Connects to the masters given as single-node `redis://` URLs (each may carry the
    /// same layout parameters).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub(crate) async fn connect_masters(self, urls: &[String]) -> Result<RedlockStore, LockError> {
        self.check_masters(urls.len())?;
        let parsed = urls.iter().map(|url| RedisUrl::parse(url)).collect::<Result<Vec<_>, _>>()?;
        let fencing = masters_fencing(self.fencing, &parsed)?;
        let node = self.node.clone().fencing(fencing).clock_fences(true).fair_queue(false);
        let quorum = parsed.len() / 2 + 1;
        let connects = parsed.iter().map(|url| node.clone().connect_url(url));
        let results = futures_util::future::join_all(connects).await;
        let reachable = results.iter().filter(|result| result.is_ok()).count();
        if reachable < quorum {
            let cause = results.into_iter().find_map(Result::err).map_or_else(String::new, |err| err.to_string());
            return Err(LockError::store(
                BACKEND,
                "connect",
                None,
                Failure(format!("only {reachable} of {} masters reachable, {quorum} needed: {cause}", parsed.len())),
            ));
        }
        let mut masters = Vec::with_capacity(parsed.len());
        for (result, url) in results.into_iter().zip(&parsed) {
            match result {
                Ok(master) => masters.push(master),
                Err(LockError::Config { message }) => return Err(LockError::Config { message }),
                Err(_) => {
                    let client = url.client().clone();
                    let conn =
                        ConnectionManager::new_lazy_with_config(client.clone(), node.connection_manager_config())
                            .map_err(|err| LockError::store(BACKEND, "connect", None, err))?;
                    masters.push(node.clone().build_lazy(url, client, conn)?);
                }
            }
        }
        Ok(RedlockStore {
            masters: masters.into(),
            fencing,
            response_timeout: self.response_timeout,
            granted: Arc::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens on port 1: reaching the network would give a Store error.
    #[tokio::test]
    async fn a_zero_response_timeout_is_refused_before_any_io() {
        let builder = RedlockStore::builder().response_timeout(Duration::ZERO);
        let err = builder.connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("`response_timeout`"), "{err}");
    }

    #[tokio::test]
    async fn build_checks_the_masters_and_settings_without_any_io() {
        let client = |port: u16| redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let store = RedlockStore::builder().fencing(true).build([client(1), client(2), client(3)]).unwrap();
        assert!(store.fencing() && store.masters().len() == 3 && store.quorum() == 2);
        assert!(!store.masters().iter().any(RedisLockStore::notified_waits), "notifications are off by default");
        let notified = RedlockStore::builder().release_notifications(true).build([client(1)]).unwrap();
        assert!(notified.masters().iter().all(RedisLockStore::notified_waits));
        for (builder, clients) in [
            (RedlockStore::builder(), vec![]),
            (RedlockStore::builder(), vec![client(1), client(2), client(1)]),
            (RedlockStore::builder(), (1..=16).map(client).collect()),
            (RedlockStore::builder().response_timeout(Duration::ZERO), vec![client(1)]),
            (RedlockStore::builder().key_prefix("a\nb"), vec![client(1)]),
        ] {
            let err = builder.build(clients).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{err}");
        }
    }
}
