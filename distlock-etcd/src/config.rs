//! The store's validated configuration: plain data, the defaults, the key layout, and the
//! rules every setting is checked against. A leaf: it imports nothing else of this crate.

use std::time::Duration;

use distlock_api::LockError;

/// The default key prefix: keys are `distlock/lock:{key}`.
pub(crate) const DEFAULT_KEY_PREFIX: &str = "distlock";
/// The longest key prefix accepted, in bytes.
pub(crate) const MAX_KEY_PREFIX_LEN: usize = 256;
/// The longest timeout kept as given; longer ones are cut to it.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// The default time one request (or the connection check) may take.
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The default time to establish a connection to a member.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything a store needs to know about its layout and requests, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) key_prefix: String,
    pub(crate) release_notifications: bool,
    /// Greater than zero, at most `MAX_TIMEOUT`.
    pub(crate) response_timeout: Duration,
    /// Greater than zero, at most `MAX_TIMEOUT`.
    pub(crate) connect_timeout: Duration,
}

impl Config {
    /// The etcd key of a single lock: `{prefix}/{store key}` (`distlock/lock:order:1`).
    pub(crate) fn lock_key(&self, store_key: &str) -> String {
        format!("{}/{store_key}", self.key_prefix)
    }

    /// The first etcd key of the single locks, `{prefix}/lock:` (every lock key starts so).
    pub(crate) fn locks_prefix(&self) -> String {
        format!("{}/{}", self.key_prefix, distlock_api::LOCK_NAMESPACE)
    }

    /// Every key of this store starts with `{prefix}/`; the release watch covers them all.
    pub(crate) fn store_prefix(&self) -> String {
        format!("{}/", self.key_prefix)
    }

    /// The prefix of a lock's queue of waiters: `{prefix}/queue/{store key}` and the unit
    /// separator (a control character, so never part of a key: the queue of `a` is not a
    /// prefix of the queue of `a/b`). A waiter's place is this prefix followed by the
    /// name of a slot (see [`place_key`](Self::place_key)).
    pub(crate) fn queue_prefix(&self, store_key: &str) -> String {
        format!("{}/{QUEUE_SEGMENT}{store_key}{QUEUE_SEPARATOR}", self.key_prefix)
    }

    /// The etcd key of the value attached to a lock's lease: `{prefix}/value/{store key}`
    /// (`distlock/value/lock:order:1`), apart from the locks so a listing never shows it.
    pub(crate) fn value_key(&self, store_key: &str) -> String {
        format!("{}/{VALUE_SEGMENT}{store_key}", self.key_prefix)
    }

    /// The etcd key of the place slot `slot` of a store in the queue of `store_key`: its
    /// [`queue_prefix`](Self::queue_prefix) followed by the store's id, a dot and the
    /// slot's number (`distlock/queue/lock:a␟5f0c….0`). A store names its waiters' places
    /// from a few slots it uses again, so that a busy queue does not leave a deleted key
    /// per wait in etcd's index.
    pub(crate) fn place_key(&self, store_key: &str, store_id: &str, slot: u32) -> String {
        format!("{}{store_id}.{slot}", self.queue_prefix(store_key))
    }

    /// The prefix of the queue that holds the place `etcd_key` (see
    /// [`queue_prefix`](Self::queue_prefix)), or `None` for another key.
    pub(crate) fn queue_of_place(&self, etcd_key: &str) -> Option<String> {
        let rest = etcd_key.strip_prefix(&self.key_prefix)?.strip_prefix('/')?.strip_prefix(QUEUE_SEGMENT)?;
        let (store_key, _slot) = rest.rsplit_once(QUEUE_SEPARATOR)?;
        Some(self.queue_prefix(store_key))
    }
}

impl Config {
    /// The prefix of every key of the lock-group name `store_key`:
    /// `{prefix}/group/{store key}` and the unit separator. Under it: a holder
    /// `h{token}`, a waiting group's place `i{token}`, the permits `pS` and `pX`.
    pub(crate) fn group_prefix(&self, store_key: &str) -> String {
        format!("{}/{GROUP_SEGMENT}{store_key}{QUEUE_SEPARATOR}", self.key_prefix)
    }

    /// The first etcd key of the group names' keys, `{prefix}/group/lock:` (every group
    /// key starts so).
    pub(crate) fn groups_prefix(&self) -> String {
        format!("{}/{GROUP_SEGMENT}{}", self.key_prefix, distlock_api::LOCK_NAMESPACE)
    }

    /// The store key of the group name whose key is `etcd_key` and what follows the
    /// name's [prefix](Self::group_prefix) (`h<token>`, `i<token>`, `p<mode>`), or `None`
    /// for a key that is not a group key.
    pub(crate) fn group_part<'k>(&self, etcd_key: &'k str) -> Option<(&'k str, &'k str)> {
        let rest = etcd_key.strip_prefix(&self.key_prefix)?.strip_prefix('/')?.strip_prefix(GROUP_SEGMENT)?;
        rest.split_once(QUEUE_SEPARATOR)
    }

    /// The [group prefix](Self::group_prefix) of the name whose key is `etcd_key`, or
    /// `None` for a key that is not a group key.
    pub(crate) fn group_of_key(&self, etcd_key: &str) -> Option<String> {
        let rest = etcd_key.strip_prefix(&self.key_prefix)?.strip_prefix('/')?.strip_prefix(GROUP_SEGMENT)?;
        let (store_key, _) = rest.split_once(QUEUE_SEPARATOR)?;
        Some(self.group_prefix(store_key))
    }

    /// The prefix of the owner index entries of `owner`: `{prefix}/owner/{owner}` and
    /// the unit separator; an entry is this prefix followed by a group's token.
    pub(crate) fn owner_prefix(&self, owner: &str) -> String {
        format!("{}/{OWNER_SEGMENT}{owner}{QUEUE_SEPARATOR}", self.key_prefix)
    }
}

/// The path segment of the lock-group names.
const GROUP_SEGMENT: &str = "group/";
/// The path segment of the owner index of lock groups.
const OWNER_SEGMENT: &str = "owner/";
/// The path segment of the queues of waiters.
const QUEUE_SEGMENT: &str = "queue/";
/// The path segment of the values attached to locks' leases.
const VALUE_SEGMENT: &str = "value/";
/// Between a queued key and a waiter's token.
const QUEUE_SEPARATOR: char = '\u{1f}';

/// Checks a key prefix: 1–256 bytes, no control characters.
pub(crate) fn validate_key_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.is_empty() {
        return Err(LockError::Config { message: "the etcd key prefix is empty".to_owned() });
    }
    distlock_api::check_key_prefix(prefix, MAX_KEY_PREFIX_LEN)
}

/// A timeout as the store uses it: zero is an error naming `setting`; anything above
/// [`MAX_TIMEOUT`] is cut to it, so deadlines built from it never overflow.
pub(crate) fn checked_timeout(setting: &str, timeout: Duration) -> Result<Duration, LockError> {
    if timeout.is_zero() {
        return Err(LockError::Config { message: format!("the etcd `{setting}` must be greater than zero") });
    }
    Ok(timeout.min(MAX_TIMEOUT))
}

/// The lease TTL etcd is asked for: whole seconds, rounded up, at least one.
pub(crate) fn lease_seconds(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_key_prefix("distlock").is_ok());
        assert!(validate_key_prefix("").is_err());
        assert!(validate_key_prefix("a\nb").is_err());
        assert!(validate_key_prefix(&"x".repeat(257)).is_err());
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(lease_seconds(Duration::from_millis(1)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(lease_seconds(Duration::from_secs(30)), 30);
    }

    #[test]
    fn layout() {
        let config = Config {
            key_prefix: "app".into(),
            release_notifications: true,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        };
        assert_eq!(config.lock_key("lock:order:1"), "app/lock:order:1");
        assert_eq!(config.locks_prefix(), "app/lock:");
        assert_eq!(config.store_prefix(), "app/");
        assert_eq!(config.value_key("lock:order:1"), "app/value/lock:order:1");
        assert!(!config.value_key("lock:order:1").starts_with(&config.locks_prefix()));
        assert_eq!(config.queue_of_place(&config.value_key("lock:a")), None);
        assert_eq!(config.group_of_key(&config.value_key("lock:a")), None);
        let place = config.place_key("lock:a/b", "store", 3);
        assert_eq!(place, "app/queue/lock:a/b\u{1f}store.3");
        assert_eq!(config.queue_of_place(&place).as_deref(), Some("app/queue/lock:a/b\u{1f}"));
        assert_eq!(config.queue_of_place("app/lock:a"), None);
        let name = config.group_prefix("lock:a/b");
        assert_eq!(name, "app/group/lock:a/b\u{1f}");
        assert_eq!(config.group_of_key(&format!("{name}htoken")).as_deref(), Some(name.as_str()));
        assert_eq!(config.group_of_key("app/lock:a"), None);
        assert_eq!(config.owner_prefix("app@one"), "app/owner/app@one\u{1f}");
    }
}
