//! Where a lock's keys live: the lease, its fence, its value, its queue of waiters and
//! the channel its releases are published on, on one server or on a Cluster; and where a
//! lock group's keys live. A leaf: it imports nothing else of this crate but `config`.

use std::borrow::Cow;

use distlock_api::{InvalidGroup, LockError, StoreKey, LOCK_NAMESPACE};

use crate::config;

/// The key layout of one key prefix.
///
/// | key | one server (`Node`) | Redis Cluster (`Cluster`) |
/// |---|---|---|
/// | the lease | `{prefix}:lock:{key}` | `{prefix}:{lock:{key}}` (the braces are the hash tag) |
/// | fence counter | `{prefix}:fence`, one per prefix | `{lease}:fence`, one per lock |
/// | the holder's fence | `{prefix}:fence:lock:{key}` | `{lease}:holder` |
/// | queue, queue-ttl | `{prefix}:queue:lock:{key}`, `{prefix}:queue-ttl:lock:{key}` | `{lease}:queue`, `{lease}:queue-ttl` |
/// | the lease's value | `{prefix}:value:lock:{key}` | `{lease}:value` |
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
        // Built without `format!`: this runs on every acquisition and release.
        let mut lock = String::with_capacity(self.stem.len() + key.as_str().len() + 2);
        lock.push_str(&self.stem);
        if self.cluster {
            lock.push('{');
            lock.push_str(key.as_str());
            lock.push('}');
        } else {
            lock.push_str(key.as_str());
        }
        lock
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

    /// `<token>:<value>`: the value the holder `token` attached to its lease, without
    /// expiry (a renewal moves only the lease's), read only while `token` holds the lease.
    pub(crate) fn value_key(&self, key: &StoreKey) -> String {
        if self.cluster {
            format!("{}:value", self.lock_key(key))
        } else {
            format!("{}value:{}", self.stem, key.as_str())
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

/// The keys of lock groups.
///
/// | key | one server (`Node`) | Redis Cluster (`Cluster`) |
/// |---|---|---|
/// | a name's stem (+ `:s`, `:h`, `:p`, `:w`) | `{prefix}:group:{<name'>}` | `{prefix}:group:{<tag>}:<name>` |
/// | a live group's lease | `{prefix}:group-lease:<token>` | `{prefix}:group-lease:{<tag>}:<token>` |
/// | fence counter | `{prefix}:fence` (the locks' counter) | `{prefix}:group-fence:{<tag>}` |
/// | release channel | `{prefix}:released` (`PUBLISH`) | `{prefix}:group-released:{<tag>}` (`SPUBLISH`) |
///
/// `<name'>` is the name with `%`, `{` and `}` percent-encoded, so the braces hold exactly
/// that name's keys. On a Cluster `<tag>` is the name's own hash tag (`orders` for
/// `{orders}:a`) or, for a name without one, the name percent-encoded the same way: every
/// key a group script touches carries the group's tag, so the script runs in one slot. One
/// server has no tags (the tag is `""`). The scripts find a name's `:p` (permits) and `:w`
/// (waited-for mark) by replacing the last letter of its `:h`, so both stay in its slot.
impl Layout {
    /// The one tag of a group's names, or the error that refuses a group across tags
    /// (slots) on a Cluster. One server's tag is `""`.
    pub(crate) fn group_tag<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k StoreKey>,
    ) -> Result<Cow<'k, str>, LockError> {
        if !self.cluster {
            return Ok(Cow::Borrowed(""));
        }
        let mut tags = keys.into_iter().map(|key| (key, name_tag(key)));
        let Some((first_key, first)) = tags.next() else {
            return Err(LockError::InvalidGroup { reason: InvalidGroup::Empty });
        };
        if let Some((other_key, _)) = tags.find(|(_, tag)| *tag != first) {
            return Err(LockError::Config {
                message: format!(
                    "the names of a lock group on Redis Cluster must share a hash tag, like `{{orders}}:a`, \
                     `{{orders}}:b` (one slot, so the group is granted in one atomic step): `{}` and `{}` do not",
                    first_key.lock_key(),
                    other_key.lock_key()
                ),
            });
        }
        Ok(first)
    }

    /// Appends the stem of the group name `key` and then `part` (`:s`, `:h`, `:p` or `:w`) to `out`.
    pub(crate) fn push_group_key(&self, out: &mut String, key: &StoreKey, part: &str) {
        let name = key.lock_key();
        out.reserve(self.stem.len() + 2 * name.len() + part.len() + 12);
        out.push_str(&self.stem);
        out.push_str("group:{");
        if self.cluster {
            out.push_str(&name_tag(key));
            out.push_str("}:");
            out.push_str(name);
        } else {
            push_encoded(out, name);
            out.push('}');
        }
        out.push_str(part);
    }

    /// The key `part` (`:s`, `:h`, `:p` or `:w`) of the group name `key`.
    pub(crate) fn group_key(&self, key: &StoreKey, part: &str) -> String {
        let mut out = String::new();
        self.push_group_key(&mut out, key, part);
        out
    }

    /// The lease keys of the groups of tag `tag`, without their token.
    pub(crate) fn group_lease_prefix(&self, tag: &str) -> String {
        let mut key = self.group_lease_head();
        if self.cluster {
            key.push_str(tag);
            key.push_str("}:");
        }
        key
    }

    /// The lease key of the group `token` took on names of tag `tag`.
    pub(crate) fn group_lease_key(&self, tag: &str, token: &str) -> String {
        let mut key = self.group_lease_prefix(tag);
        key.push_str(token);
        key
    }

    /// What every group lease key starts with: `{prefix}:group-lease:`, on a Cluster
    /// `{prefix}:group-lease:{`.
    pub(crate) fn group_lease_head(&self) -> String {
        let mut key = String::with_capacity(self.stem.len() + GROUP_LEASE_HEAD.len() + 40);
        key.push_str(&self.stem);
        key.push_str(GROUP_LEASE_HEAD);
        if self.cluster {
            key.push('{');
        }
        key
    }

    /// The tag and the token of a group lease key, as `SCAN` found it (`head` is
    /// [`group_lease_head`](Self::group_lease_head)); `None` for another key.
    pub(crate) fn split_group_lease_key<'a>(&self, head: &str, lease_key: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = lease_key.strip_prefix(head)?;
        if self.cluster {
            // A tag never holds `}`.
            rest.split_once("}:")
        } else {
            Some(("", rest))
        }
    }

    /// The counter the fences of tag `tag`'s groups are drawn from.
    pub(crate) fn group_fence_key(&self, tag: &str) -> String {
        if self.cluster {
            format!("{}group-fence:{{{tag}}}", self.stem)
        } else {
            format!("{}fence", self.stem)
        }
    }

    /// The channel the changes of tag `tag`'s group names are published on (the message
    /// is the changed names' `h` keys, one per line).
    pub(crate) fn group_release_channel(&self, tag: &str) -> String {
        if self.cluster {
            format!("{}group-released:{{{tag}}}", self.stem)
        } else {
            format!("{}released", self.stem)
        }
    }
}

/// Where the keys of group names are found by `SCAN`.
impl Layout {
    /// The glob (`SCAN … MATCH`) of the `:h` and `:s` keys of the group names that start
    /// with `prefix` (it may match more; [`group_name_of`](Self::group_name_of) tells).
    pub(crate) fn group_names_glob(&self, prefix: &str) -> String {
        let mut glob = String::with_capacity(self.stem.len() + 2 * prefix.len() + 24);
        push_glob_literal(&mut glob, &self.stem);
        glob.push_str("group:{");
        if self.cluster {
            glob.push_str("*}:");
            push_glob_literal(&mut glob, prefix);
            glob.push_str("*:[hs]");
        } else {
            let mut encoded = String::with_capacity(prefix.len() + 6);
            push_encoded(&mut encoded, prefix);
            push_glob_literal(&mut glob, &encoded);
            glob.push_str("*}:[hs]");
        }
        glob
    }

    /// The group name whose `:h` or `:s` key `redis_key` is; `None` for another key.
    pub(crate) fn group_name_of(&self, redis_key: &str) -> Option<String> {
        let rest = redis_key.strip_prefix(self.stem.as_str())?.strip_prefix("group:{")?;
        if self.cluster {
            // A tag never holds `}`.
            let (_, name) = rest.split_once("}:")?;
            name.strip_suffix(":h").or_else(|| name.strip_suffix(":s")).map(str::to_owned)
        } else {
            decoded(rest.strip_suffix("}:h").or_else(|| rest.strip_suffix("}:s"))?)
        }
    }
}

/// Appends `text` to a Redis glob, matched literally.
fn push_glob_literal(glob: &mut String, text: &str) {
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            glob.push('\\');
        }
        glob.push(c);
    }
}

/// `name` as [`push_encoded`] wrote it, decoded; `None` when it is not such a text.
fn decoded(encoded: &str) -> Option<String> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(at) = rest.find(['%', '{', '}']) {
        out.push_str(&rest[..at]);
        let (c, after) = match rest.get(at..at + 3)? {
            "%25" => ('%', at + 3),
            "%7B" => ('{', at + 3),
            "%7D" => ('}', at + 3),
            _ => return None,
        };
        out.push(c);
        rest = &rest[after..];
    }
    out.push_str(rest);
    Some(out)
}

/// What follows the key prefix in a group's lease key.
const GROUP_LEASE_HEAD: &str = "group-lease:";

/// The hash tag of `name` as Redis reads it: the text between the first `{` and the next
/// `}`, when not empty.
fn hash_tag(name: &str) -> Option<&str> {
    let open = name.find('{')?;
    let rest = &name[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The Cluster tag of a group name: its own hash tag, else the whole name with `%`, `{`
/// and `}` percent-encoded (so it never closes the braces early).
fn name_tag(key: &StoreKey) -> Cow<'_, str> {
    let name = key.lock_key();
    if let Some(tag) = hash_tag(name) {
        return Cow::Borrowed(tag);
    }
    if !name.contains(['%', '{', '}']) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 6);
    push_encoded(&mut out, name);
    Cow::Owned(out)
}

/// Appends `name` with `%`, `{` and `}` written `%25`, `%7B` and `%7D`.
fn push_encoded(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use distlock_api::LockKey;

    use super::*;

    #[test]
    fn group_names_are_found_by_their_keys() {
        for layout in [Layout::node("app"), Layout::cluster("app")] {
            for name in ["order:1", "50%{x}", "{orders}:a", "a*b"] {
                let key = LockKey::new(name).unwrap().to_store_key();
                for part in [":h", ":s"] {
                    let redis_key = layout.group_key(&key, part);
                    assert_eq!(layout.group_name_of(&redis_key).as_deref(), Some(name), "{redis_key}");
                }
                assert_eq!(layout.group_name_of(&layout.group_key(&key, ":p")), None);
                assert_eq!(layout.group_name_of(&layout.group_key(&key, ":w")), None, "a mark is not listed");
            }
        }
        assert_eq!(Layout::node("app").group_names_glob("50%*"), r"app:group:{50%25\**}:[hs]");
        assert_eq!(Layout::cluster("app").group_names_glob("a-b"), r"app:group:{*}:a\-b*:[hs]");
        assert_eq!(Layout::node("app").group_name_of("app:lock:x"), None);
    }

    #[test]
    fn keys_of_one_server_and_of_a_cluster() {
        let key = LockKey::new("order:1").unwrap().to_store_key();
        let node = Layout::node("neton");
        assert_eq!(node.lock_key(&key), "neton:lock:order:1");
        assert_eq!(node.fence_counter_key(&key), "neton:fence");
        assert_eq!(node.fence_key(&key), "neton:fence:lock:order:1");
        assert_eq!(node.value_key(&key), "neton:value:lock:order:1");
        assert_eq!(node.queue_keys(&key), ("neton:queue:lock:order:1".into(), "neton:queue-ttl:lock:order:1".into()));
        assert_eq!(node.release_channel(&key), "neton:released");
        assert_eq!((node.settings_key(), node.lock_namespace()), ("neton:lock-settings".into(), "neton:lock:".into()));
        assert_eq!(node.publish_command(), None);
        assert_eq!(Layout::node("").lock_key(&key), "lock:order:1");

        let cluster = Layout::cluster("neton");
        assert_eq!(cluster.lock_key(&key), "neton:{lock:order:1}");
        assert_eq!(cluster.fence_counter_key(&key), "neton:{lock:order:1}:fence");
        assert_eq!(cluster.fence_key(&key), "neton:{lock:order:1}:holder");
        assert_eq!(cluster.value_key(&key), "neton:{lock:order:1}:value");
        assert_eq!(
            cluster.queue_keys(&key),
            ("neton:{lock:order:1}:queue".into(), "neton:{lock:order:1}:queue-ttl".into())
        );
        assert_eq!(cluster.release_channel(&key), "neton:{lock:order:1}:released");
        assert_eq!(cluster.lock_namespace(), "neton:{lock:");
        assert_eq!(cluster.publish_command(), Some("spublish"));
    }

    fn key(name: &str) -> StoreKey {
        LockKey::new(name).unwrap().to_store_key()
    }

    #[test]
    fn group_keys_of_one_server_and_of_a_cluster() {
        let node = Layout::node("neton");
        let keys = [key("{o}:a"), key("p")];
        let tag = node.group_tag(&keys).unwrap();
        assert_eq!(tag, "");
        assert_eq!(node.group_key(&key("a{b}%"), ":h"), "neton:group:{a%7Bb%7D%25}:h");
        assert_eq!(node.group_lease_key(&tag, "t"), "neton:group-lease:t");
        assert_eq!(node.split_group_lease_key(&node.group_lease_head(), "neton:group-lease:t"), Some(("", "t")));
        assert_eq!(
            (node.group_fence_key(&tag), node.group_release_channel(&tag)),
            ("neton:fence".into(), "neton:released".into())
        );

        let cluster = Layout::cluster("neton");
        let keys = [key("{o}:a"), key("o")];
        let tag = cluster.group_tag(&keys).unwrap();
        assert_eq!(tag, "o");
        assert_eq!(cluster.group_key(&key("{o}:a"), ":p"), "neton:group:{o}:{o}:a:p");
        assert_eq!(cluster.group_lease_key(&tag, "t"), "neton:group-lease:{o}:t");
        let head = cluster.group_lease_head();
        assert_eq!(cluster.split_group_lease_key(&head, "neton:group-lease:{o}:t"), Some(("o", "t")));
        assert_eq!(cluster.group_fence_key(&tag), "neton:group-fence:{o}");
        assert_eq!(cluster.group_release_channel(&tag), "neton:group-released:{o}");
    }

    #[test]
    fn tags_follow_the_redis_rule() {
        assert_eq!(hash_tag("{orders}:a"), Some("orders"));
        assert_eq!(hash_tag("x{orders}:a{b}"), Some("orders"));
        assert_eq!(hash_tag("a{}b{c}"), None);
        assert_eq!(hash_tag("a}b{c"), None);
        assert_eq!(name_tag(&key("doc")), "doc");
        assert_eq!(name_tag(&key("a{}b")), "a%7B%7Db");
        assert_eq!(name_tag(&key("{a{b}c")), "a{b");
    }

    #[test]
    fn groups_across_tags_are_refused_before_any_io() {
        let cluster = Layout::cluster("p");
        assert!(cluster.group_tag(&[key("{o}:a"), key("{o}:b"), key("o")]).is_ok());
        let err = cluster.group_tag(&[key("{o}:a"), key("{p}:b")]).unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(err.to_string().contains("`{orders}:a`, `{orders}:b`"), "{err}");
    }
}
