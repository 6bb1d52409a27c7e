//! The settings every Redis topology shares: [`RedisLockStoreBuilder`]'s knobs, their
//! defaults and validation, and the URL's layout parameters resolved against them into
//! a [`Config`]. It is the one-server builder (its type parameter defaults to
//! [`RedisLockStore`]); each topology's `builder.rs` (`single/`, `cluster/`, `sentinel/`,
//! `redlock/`) adds its own `connect` and `build`.

use std::marker::PhantomData;
use std::time::Duration;

use distlock_api::LockError;

use super::RedisLockStore;
use crate::config::{self, checked_timeout, validate_key_prefix, Config};
use crate::url::RedisUrl;

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
/// // The same layout, given by the URL alone:
/// let same = RedisLockStore::connect("redis://127.0.0.1:6379?prefix=neton&fencing=true").await?;
/// # let _ = (store, same); Ok(()) }
/// ```
///
/// # The URL and the builder
///
/// The layout can be set here or in the URL given to [`connect`](Self::connect)
/// (`?prefix=`, `?fencing=`, `?notifications=`, see [`RedisUrl`]). A setting made in
/// both places must agree: a URL saying `prefix=a` and a builder saying
/// `key_prefix("b")` is a [`LockError::Config`], never a silent choice of one. A setting
/// made in neither place gets its default.
///
/// # Durations
///
/// A zero timeout is a [`LockError::Config`] from [`connect`](Self::connect) /
/// [`build`](Self::build) naming the setting; a timeout longer than
/// [`MAX_TIMEOUT`](Self::MAX_TIMEOUT) (up to `Duration::MAX`, "never") is cut to it.
///
/// # Every topology
///
/// The same builder, with the same settings, makes the store of each topology:
/// `RedisLockStore::builder()` (one server), [`RedisClusterStore::builder()`](crate::RedisClusterStore::builder)
/// ([`RedisClusterStoreBuilder`](crate::RedisClusterStoreBuilder)) and
/// [`RedisSentinelStore::builder()`](crate::RedisSentinelStore::builder)
/// ([`RedisSentinelStoreBuilder`](crate::RedisSentinelStoreBuilder)); each has `connect(url)` for its URL scheme. The
/// single-server one also has [`build`](Self::build) on an existing connection, and the
/// Cluster's [`build`](crate::RedisClusterStoreBuilder::build) on the application's
/// `redis::cluster::ClusterClient`, Sentinel's
/// [`build`](crate::RedisSentinelStoreBuilder::build) on its
/// `redis::sentinel::SentinelClient`.
#[must_use = "a builder does nothing until `connect` or `build` is called"]
pub struct RedisLockStoreBuilder<S = RedisLockStore> {
    // The layout: `None` until set, so that a URL can set it instead (see `resolve`).
    pub(crate) key_prefix: Option<String>,
    pub(crate) fencing: Option<bool>,
    pub(crate) clock_fences: Option<bool>,
    pub(crate) release_notifications: Option<bool>,
    pub(crate) fair_queue: Option<bool>,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_retries: usize,
    pub(crate) notification_client: Option<redis::Client>,
    pub(crate) topology: PhantomData<fn() -> S>,
}

impl<S> Default for RedisLockStoreBuilder<S> {
    fn default() -> Self {
        Self {
            key_prefix: None,
            fencing: None,
            clock_fences: None,
            release_notifications: None,
            fair_queue: None,
            response_timeout: RedisLockStoreBuilder::DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: RedisLockStoreBuilder::DEFAULT_CONNECT_TIMEOUT,
            reconnect_retries: RedisLockStoreBuilder::DEFAULT_RECONNECT_RETRIES,
            notification_client: None,
            topology: PhantomData,
        }
    }
}

impl<S> Clone for RedisLockStoreBuilder<S> {
    fn clone(&self) -> Self {
        Self {
            key_prefix: self.key_prefix.clone(),
            notification_client: self.notification_client.clone(),
            topology: PhantomData,
            ..*self
        }
    }
}

impl<S> std::fmt::Debug for RedisLockStoreBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLockStoreBuilder")
            .field("topology", &std::any::type_name::<S>())
            .field("key_prefix", &self.key_prefix)
            .field("fencing", &self.fencing)
            .field("clock_fences", &self.clock_fences)
            .field("release_notifications", &self.release_notifications)
            .field("fair_queue", &self.fair_queue)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_retries", &self.reconnect_retries)
            .field("notification_client", &self.notification_client.is_some())
            .finish()
    }
}

impl RedisLockStoreBuilder {
    /// The longest key prefix accepted, in bytes.
    pub const MAX_KEY_PREFIX_LEN: usize = config::MAX_KEY_PREFIX_LEN;
    /// The longest timeout kept as given: 1 hour. A longer
    /// [`response_timeout`](Self::response_timeout) or
    /// [`connect_timeout`](Self::connect_timeout) (say `Duration::MAX`) is cut to it.
    pub const MAX_TIMEOUT: Duration = config::MAX_TIMEOUT;
    /// Default [`response_timeout`](Self::response_timeout): 2 s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`connect_timeout`](Self::connect_timeout): 2 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`reconnect_retries`](Self::reconnect_retries): 3.
    pub const DEFAULT_RECONNECT_RETRIES: usize = 3;

    /// A builder with the defaults: prefix `distlock`, no fencing, no release
    /// notifications, no fair queue (so a lock cycle sends only `SET key token NX PX ttl`
    /// and the compare-and-delete release script), 2 s timeouts, 3 reconnection retries.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> RedisLockStoreBuilder<S> {
    /// The prefix of every key: the store writes `{key_prefix}:lock:{key}`. Default
    /// `distlock`; the URL parameter `?prefix=` sets it too. At most 256 bytes without
    /// control characters; checked by [`connect`](Self::connect) / [`build`](Self::build).
    /// An empty prefix leaves the keys bare: `lock:{key}`, `fence`, `lock-settings`….
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(key_prefix.into());
        self
    }

    /// Fencing mode: every acquisition also returns a number strictly increasing per key,
    /// drawn from one counter per store (`{key_prefix}:fence`) and kept for the holder in
    /// `{key_prefix}:fence:lock:{key}`, which expires with the lease. Off by default, so
    /// acquire stays a plain `SET key token NX PX ttl`; the URL parameter `?fencing=true`
    /// turns it on too.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// Restart-safe fencing numbers (off by default; the URL parameter `?fences=clock`
    /// turns them on, `?fences=counter` is the default). With [`fencing`](Self::fencing)
    /// on, each number is `max(counter + 1, the server's clock in µs)` instead of the
    /// counter's `INCR`, so numbers keep strictly increasing when a server **without
    /// persistence** restarts (the counter is lost, the clock is not) or a replica with a
    /// lagging counter is promoted. The numbers are then about 1.8 × 10¹⁵. Same keys, same
    /// one round trip; the scripts read `TIME` (see `src/lua/fenced_acquire_clock.lua`).
    ///
    /// It assumes the server's clock does not go backwards across a restart (NTP slews,
    /// it does not step back), and after a failover that the new master's clock is not
    /// behind the old one's by more than the failover took. Counter fences (the
    /// default) need persistence (`appendonly yes`) for the same guarantee.
    /// No effect without fencing.
    pub fn clock_fences(mut self, enabled: bool) -> Self {
        self.clock_fences = Some(enabled);
        self
    }

    /// The same settings, for the store of another topology.
    pub(crate) fn retarget<T>(self) -> RedisLockStoreBuilder<T> {
        RedisLockStoreBuilder {
            key_prefix: self.key_prefix,
            fencing: self.fencing,
            clock_fences: self.clock_fences,
            release_notifications: self.release_notifications,
            fair_queue: self.fair_queue,
            response_timeout: self.response_timeout,
            connect_timeout: self.connect_timeout,
            reconnect_retries: self.reconnect_retries,
            notification_client: self.notification_client,
            topology: PhantomData,
        }
    }

    /// [`clock_fences`](Self::clock_fences), unless it was set already (a topology's own default).
    pub(crate) fn clock_fences_unless_set(mut self, enabled: bool) -> Self {
        self.clock_fences.get_or_insert(enabled);
        self
    }

    /// The settings `url` would give, checked against this builder's, without any I/O.
    pub(crate) fn check_url(self, url: &RedisUrl) -> Result<(), LockError> {
        self.resolve(Some(url)).map(drop)
    }

    /// Release notifications (off by default; the URL parameter `?notifications=true`
    /// turns them on too): every release also publishes the lock's key on
    /// `{key_prefix}:released` (pipelined with the release, no extra round trip), and
    /// waiters are woken through one subscriber connection per store instead of polling
    /// every `retry_interval`, so a hand-off takes about one round trip.
    /// Off: releases send only the compare-and-delete script and waiters poll, pausing
    /// `retry_interval` between attempts.
    pub fn release_notifications(mut self, enabled: bool) -> Self {
        self.release_notifications = Some(enabled);
        self
    }

    /// Fair waiting (off by default; the URL parameter `?fair=true` turns it on too):
    /// waiting acquisitions take a place in a queue per key
    /// (`{key_prefix}:queue:lock:{key}` and `{key_prefix}:queue-ttl:lock:{key}`, sorted
    /// sets that exist only while someone waits), and a release hands the key to the
    /// oldest live waiter, so waiters are served in arrival order across every process.
    /// The release is then one script, the compare-and-delete followed by the hand-over
    /// (and the notification, when on); an uncontended acquisition is still a plain
    /// `SET key token NX PX ttl`, and a waiting one a script that keeps its place.
    ///
    /// Off: releases are exactly the compare-and-delete script
    /// [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) (with the notification's `PUBLISH`
    /// pipelined behind it, when on), and every waiter barges with `SET … NX PX`, whatever
    /// its [`Fairness`](distlock_api::Fairness).
    pub fn fair_queue(mut self, enabled: bool) -> Self {
        self.fair_queue = Some(enabled);
        self
    }

    /// How long to wait for the server's answer to one command before failing it with
    /// [`LockError::Store`]. Default 2 s; must be greater than zero; at most
    /// [`MAX_TIMEOUT`](Self::MAX_TIMEOUT) (longer is cut to it).
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

    /// How long one connection attempt may take. Default 2 s; must be greater than zero;
    /// at most [`MAX_TIMEOUT`](Self::MAX_TIMEOUT) (longer is cut to it). Used by
    /// [`connect`](Self::connect), and for the subscriber connection.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How many times a lost connection is retried (with exponential back-off from
    /// 100 ms, at most 1 s apart) before the commands waiting for it fail. Default 3.
    /// The next command starts a new reconnection. Used by [`connect`](Self::connect) only.
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// The client that [`build`](RedisLockStoreBuilder::build) opens the subscriber
    /// connection of [release notifications](Self::release_notifications) with (normally
    /// the one the application's connection was made from). Nothing is opened until the
    /// first wait. [`connect`](RedisLockStoreBuilder::connect) makes its own from the URL.
    pub fn notification_client(mut self, client: redis::Client) -> Self {
        self.notification_client = Some(client);
        self
    }

    /// `Ok` unless a [`notification_client`](Self::notification_client) was given to the
    /// builder of a topology that opens its own connections (`why` says so).
    pub(crate) fn refuse_notification_client(&self, why: &str) -> Result<(), LockError> {
        if self.notification_client.is_none() {
            return Ok(());
        }
        Err(LockError::Config {
            message: format!("{why}: `notification_client` is for `RedisLockStoreBuilder::build`"),
        })
    }

    /// The checked configuration: this builder's settings, the URL's layout (which must
    /// agree with them), then the defaults.
    pub(crate) fn resolve(&self, url: Option<&RedisUrl>) -> Result<Config, LockError> {
        self.resolve_with(url, false)
    }

    /// [`resolve`](Self::resolve) with a Redis Cluster's defaults: clock fences, release
    /// notifications and fair waiting on unless the builder or the URL turn them off.
    pub(crate) fn resolve_cluster(&self, url: Option<&RedisUrl>) -> Result<Config, LockError> {
        self.resolve_with(url, true)
    }

    /// `resolve`; `on` is the default of clock fences, notifications and fair waiting.
    fn resolve_with(&self, url: Option<&RedisUrl>, on: bool) -> Result<Config, LockError> {
        let key_prefix = agree(
            "prefix",
            "key_prefix",
            self.key_prefix.clone(),
            url.and_then(|url| url.key_prefix().map(str::to_owned)),
        )?
        .unwrap_or_else(|| config::DEFAULT_KEY_PREFIX.to_owned());
        validate_key_prefix(&key_prefix)?;
        let fencing = agree("fencing", "fencing", self.fencing, url.and_then(RedisUrl::fencing))?.unwrap_or(false);
        let clock_fences =
            agree("fences", "clock_fences", self.clock_fences, url.and_then(RedisUrl::clock_fences))?.unwrap_or(on);
        let release_notifications = agree(
            "notifications",
            "release_notifications",
            self.release_notifications,
            url.and_then(RedisUrl::release_notifications),
        )?
        .unwrap_or(on);
        let fair_queue =
            agree("fair", "fair_queue", self.fair_queue, url.and_then(RedisUrl::fair_queue))?.unwrap_or(on);
        Ok(Config {
            key_prefix,
            fencing,
            clock_fences,
            release_notifications,
            fair_queue,
            response_timeout: checked_timeout("response_timeout", self.response_timeout)?,
            connect_timeout: checked_timeout("connect_timeout", self.connect_timeout)?,
        })
    }
}

/// A layout setting given by the builder (`setting`) and/or the URL (`parameter`): both
/// must agree.
fn agree<T: PartialEq + std::fmt::Debug>(
    parameter: &str,
    setting: &str,
    from_builder: Option<T>,
    from_url: Option<T>,
) -> Result<Option<T>, LockError> {
    match (from_builder, from_url) {
        (Some(built), Some(given)) if built != given => Err(LockError::Config {
            message: format!(
                "the Redis URL's `{parameter}` ({given:?}) contradicts the builder's `{setting}` ({built:?}); set it in one place"
            ),
        }),
        (built, given) => Ok(built.or(given)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(builder: RedisLockStoreBuilder, url: &str) -> Result<Config, LockError> {
        builder.resolve(Some(&RedisUrl::parse(url).unwrap()))
    }

    #[test]
    fn defaults() {
        let config = RedisLockStoreBuilder::new().resolve(None).unwrap();
        assert_eq!(
            config,
            Config {
                key_prefix: "distlock".to_owned(),
                fencing: false,
                clock_fences: false,
                release_notifications: false,
                fair_queue: false,
                response_timeout: Duration::from_secs(2),
                connect_timeout: Duration::from_secs(2),
            }
        );
    }

    #[test]
    fn the_url_sets_what_the_builder_left_alone() {
        let config = resolved(RedisLockStoreBuilder::new(), "redis://h/?prefix=neton&fencing=true&notifications=false");
        let config = config.unwrap();
        assert_eq!((config.key_prefix.as_str(), config.fencing, config.release_notifications), ("neton", true, false));
        // And the builder what the URL left alone.
        let config =
            resolved(RedisLockStoreBuilder::new().fencing(true).key_prefix("app"), "redis://h/?notifications=false");
        let config = config.unwrap();
        assert_eq!((config.key_prefix.as_str(), config.fencing, config.release_notifications), ("app", true, false));
    }

    #[test]
    fn the_url_and_the_builder_may_repeat_a_setting_but_not_contradict_it() {
        let same = RedisLockStoreBuilder::new().key_prefix("neton").fencing(true).release_notifications(false);
        let config = resolved(same, "redis://h/?prefix=neton&fencing=true&notifications=false").unwrap();
        assert_eq!((config.key_prefix.as_str(), config.fencing, config.release_notifications), ("neton", true, false));

        for (builder, url, names) in [
            (RedisLockStoreBuilder::new().key_prefix("a"), "redis://h/?prefix=b", ["`prefix`", "`key_prefix`"]),
            (RedisLockStoreBuilder::new().fencing(false), "redis://h/?fencing=true", ["`fencing`", "`fencing`"]),
            (
                RedisLockStoreBuilder::new().release_notifications(true),
                "redis://h/?notifications=false",
                ["`notifications`", "`release_notifications`"],
            ),
        ] {
            let err = resolved(builder, url).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{err}");
            let message = err.to_string();
            assert!(names.iter().all(|name| message.contains(name)) && message.contains("contradicts"), "{message}");
        }
    }

    #[test]
    fn zero_timeouts_are_config_errors_naming_the_setting() {
        for (builder, setting) in [
            (RedisLockStoreBuilder::new().response_timeout(Duration::ZERO), "`response_timeout`"),
            (RedisLockStoreBuilder::new().connect_timeout(Duration::ZERO), "`connect_timeout`"),
        ] {
            let err = builder.resolve(None).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains(setting), "{err}");
        }
    }
}
