//! Where a lock's keys live: the lease, its fence, its queue of waiters and the channel
//! its releases are published on, on one server or on a Cluster. A leaf: it imports
//! nothing else of this crate but `config`.

use distlock_api::{StoreKey, LOCK_NAMESPACE};

use crate::config;

/// The key layout of one key prefix.
///
/// | key | one server (`Node`) | Redis Cluster (`Cluster`) |
/// |---|---|---|
/// | the lease | `{prefix}:lock:{key}` | `{prefix}:{lock:{key}}` (the braces are the hash tag) |
/// | fence counter | `{prefix}:fence`, one per prefix | `{lease}:fence`, one per lock |
/// | the holder's fence | `{prefix}:fence:lock:{key}` | `{lease}:holder` |
/// | queue, queue-ttl | `{prefix}:queue:lock:{key}`, `{prefix}:queue-ttl:lock:{key}` | `{lease}:queue`, `{lease}:queue-ttl` |
/// | release channel | `{prefix}:released` (`PUBLISH`) | `{lease}:released` (`SPUBLISH`) |
/// | shared settings | `{prefix}:lock-settings` | the same |
///
/// On a Cluster every key of one lock carries the lock's hash tag, so each script
/// touches one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// What every key starts with: `{prefix}:`, or nothing for the empty prefix.
    stem: String,
    cluster: bool,
}

impl Layout {
    /// The layout of one server (also each Sentinel master and each Redlock master).
    pub(crate) fn node(prefix: &str) -> Self {
        Self { stem: config::key_stem(prefix), cluster: false }
    }

    /// The hash-tagged layout of Redis Cluster.
    pub(crate) fn cluster(prefix: &str) -> Self {
        Self { stem: config::key_stem(prefix), cluster: true }
    }

    /// What every key starts with: `{prefix}:`, or nothing for the empty prefix.
    pub(crate) fn stem(&self) -> &str {
        &self.stem
    }

    /// The lease: the holder's token, with the lease's `PX`.
    pub(crate) fn lock_key(&self, key: &StoreKey) -> String {
        if self.cluster {
            format!("{}{{{}}}", self.stem, key.as_str())
        } else {
            format!("{}{}", self.stem, key.as_str())
        }
    }

    /// The counter fencing numbers are drawn from (never deleted, no expiry).
    pub(crate) fn fence_counter_key(&self, key: &StoreKey) -> String {
        if self.cluster {
            format!("{}:fence", self.lock_key(key))
        } else {
            format!("{}fence", self.stem)
        }
    }

    /// `<fence>:<token>` of the current holder, expiring with the lease.
    pub(crate) fn fence_key(&self, key: &StoreKey) -> String {
        if self.cluster {
            format!("{}:holder", self.lock_key(key))
        } else {
            format!("{}fence:{}", self.stem, key.as_str())
        }
    }

    /// The queue of waiters (tokens by arrival, µs) and their places' expiries (ms).
    pub(crate) fn queue_keys(&self, key: &StoreKey) -> (String, String) {
        if self.cluster {
            let lock = self.lock_key(key);
            (format!("{lock}:queue"), format!("{lock}:queue-ttl"))
        } else {
            (format!("{}queue:{}", self.stem, key.as_str()), format!("{}queue-ttl:{}", self.stem, key.as_str()))
        }
    }

    /// The channel a release of `key` is published on (the message is the lease's key).
    pub(crate) fn release_channel(&self, key: &StoreKey) -> String {
        if self.cluster {
            format!("{}:released", self.lock_key(key))
        } else {
            format!("{}released", self.stem)
        }
    }

    /// The publish command the scripts are told to use, as their last argument: none on
    /// one server (the scripts' default, `PUBLISH`), `SPUBLISH` on a Cluster (the lock's
    /// shard channel).
    pub(crate) fn publish_command(&self) -> Option<&'static str> {
        self.cluster.then_some("spublish")
    }

    /// The settings every client of the prefix must share: `{prefix}:lock-settings`.
    pub(crate) fn settings_key(&self) -> String {
        format!("{}lock-settings", self.stem)
    }

    /// What every lease key starts with: `{prefix}:lock:`, on a Cluster `{prefix}:{lock:`.
    pub(crate) fn lock_namespace(&self) -> String {
        if self.cluster {
            format!("{}{{{LOCK_NAMESPACE}", self.stem)
        } else {
            format!("{}{LOCK_NAMESPACE}", self.stem)
        }
    }
}

#[cfg(test)]
mod tests {
    use distlock_api::LockKey;

    use super::*;

    #[test]
    fn keys_of_one_server_and_of_a_cluster() {
        let key = LockKey::new("order:1").unwrap().to_store_key();
        let node = Layout::node("neton");
        assert_eq!(node.lock_key(&key), "neton:lock:order:1");
        assert_eq!(node.fence_counter_key(&key), "neton:fence");
        assert_eq!(node.fence_key(&key), "neton:fence:lock:order:1");
        assert_eq!(node.queue_keys(&key), ("neton:queue:lock:order:1".into(), "neton:queue-ttl:lock:order:1".into()));
        assert_eq!(node.release_channel(&key), "neton:released");
        assert_eq!((node.settings_key(), node.lock_namespace()), ("neton:lock-settings".into(), "neton:lock:".into()));
        assert_eq!(node.publish_command(), None);
        assert_eq!(Layout::node("").lock_key(&key), "lock:order:1");

        let cluster = Layout::cluster("neton");
        assert_eq!(cluster.lock_key(&key), "neton:{lock:order:1}");
        assert_eq!(cluster.fence_counter_key(&key), "neton:{lock:order:1}:fence");
        assert_eq!(cluster.fence_key(&key), "neton:{lock:order:1}:holder");
        assert_eq!(
            cluster.queue_keys(&key),
            ("neton:{lock:order:1}:queue".into(), "neton:{lock:order:1}:queue-ttl".into())
        );
        assert_eq!(cluster.release_channel(&key), "neton:{lock:order:1}:released");
        assert_eq!(cluster.lock_namespace(), "neton:{lock:");
        assert_eq!(cluster.publish_command(), Some("spublish"));
    }
}
