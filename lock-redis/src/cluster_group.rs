//! Lock groups on Redis Cluster: [`GroupLockStore`] for [`RedisClusterStore`], the
//! single-node group scripts (`group_scripts`) on a layout where every key a script
//! touches — the names' sorted sets and permits, the group's lease key, the fence counter
//! and the release channel — carries the group's **hash tag**, so each script runs in one
//! slot on one master.
//!
//! | key | purpose |
//! |---|---|
//! | `{prefix}:group:{<tag>}:<name>` + `:s`, `:h`, `:p` | a name's holder that found it free; its other holders, places and tickets; its permits |
//! | `{prefix}:group-lease:{<tag>}:<token>` | a live group's `name \n name … \n\n owner \n fence \n expiry`, expiring with its holds |
//! | `{prefix}:group-fence:{<tag>}` | the tag's fence counter (fencing mode) |
//! | shard channel `{prefix}:group-released:{<tag>}` | `SPUBLISH`ed `h` keys of changed names |
//!
//! `<tag>` is the name's own hash tag (`orders` for `{orders}:a`) or, for a name without
//! one, the whole name with `%`, `{` and `}` percent-encoded. A group is atomic because
//! all its names must have the same tag; a group whose names do not is refused before
//! any I/O.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::KeyState;
use distlock_api::{
    check_group_members, check_group_names, GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, LockError,
    LockInfo, LockMode, OwnerId, StoreKey, Token, Ttl,
};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Cmd;

use crate::cluster::RedisClusterStore;
use crate::group::{
    check_permits, count, glob_escaped, grant_mode, holder_info, mode_names, owned_names, parse_permits,
    permits_command, released_names, AcquireArgs, HolderRow, UnexpectedReply, SCAN_PAGE,
};
use crate::scripts::{LuaScript, SCRIPTS};

/// The publish command of the group scripts that publish (their last argument): the
/// tag's shard channel.
const SPUBLISH: &str = "SPUBLISH";

/// The hash tag of `name` as Redis reads it: the text between the first `{` and the next
/// `}`, when not empty.
fn hash_tag(name: &str) -> Option<&str> {
    let open = name.find('{')?;
    let rest = &name[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The tag of a group name: its own hash tag, else the whole name with `%`, `{` and `}`
/// percent-encoded (so it never closes the braces early).
fn group_tag(key: &StoreKey) -> Cow<'_, str> {
    let name = key.lock_key();
    if let Some(tag) = hash_tag(name) {
        return Cow::Borrowed(tag);
    }
    if !name.contains(['%', '{', '}']) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 6);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The one tag of `keys`, or the error that refuses a group across tags (slots).
fn common_tag(keys: &[StoreKey]) -> Result<Cow<'_, str>, LockError> {
    let mut tags = keys.iter().map(|key| (key, group_tag(key)));
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

impl RedisClusterStore {
    /// The common beginning of the keys of the group name `key`:
    /// `{key_prefix}:group:{<tag>}:<name>`, where `<tag>` is the name's hash tag (`orders`
    /// for `{orders}:a`) or, for a name without one, the whole name (`%`, `{`, `}`
    /// percent-encoded). The keys are the stem followed by `:s` (the holder that found the
    /// name free), `:h` (other holders, places, tickets) and `:p` (permits).
    pub fn group_key_stem(&self, key: &StoreKey) -> String {
        format!("{}group:{{{}}}:{}", crate::config::key_stem(self.key_prefix()), group_tag(key), key.lock_key())
    }

    /// The lease key of the group `token` took on names of tag `tag`:
    /// `{key_prefix}:group-lease:{<tag>}:<token>`, which expires with the group's holds
    /// (see [`RedisLockStore::group_lease_key`](crate::RedisLockStore::group_lease_key)).
    pub fn group_lease_key(&self, tag: &str, token: &Token) -> String {
        let mut key = self.group_lease_prefix(tag);
        key.push_str(token.as_str());
        key
    }

    /// The lease keys of tag `tag` without their token: `{key_prefix}:group-lease:{<tag>}:`.
    fn group_lease_prefix(&self, tag: &str) -> String {
        format!("{}group-lease:{{{tag}}}:", crate::config::key_stem(self.key_prefix()))
    }

    /// The fence counter of one tag: `{key_prefix}:group-fence:{<tag>}`.
    pub fn group_fence_key(&self, tag: &str) -> String {
        format!("{}group-fence:{{{tag}}}", crate::config::key_stem(self.key_prefix()))
    }

    /// The shard channel the releases of one tag's names are published on:
    /// `{key_prefix}:group-released:{<tag>}`.
    pub fn group_release_channel(&self, tag: &str) -> String {
        format!("{}group-released:{{{tag}}}", crate::config::key_stem(self.key_prefix()))
    }

    fn group_error(operation: &'static str, keys: &[StoreKey], err: impl Into<distlock_api::BoxError>) -> LockError {
        crate::group::group_error(Self::BACKEND, operation, keys, err)
    }

    fn error_on(operation: &'static str, key: &StoreKey, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, Some(key.lock_key()), err)
    }

    /// Runs `script` on the master owning `route`'s slot.
    async fn run_script<T: redis::FromRedisValue>(
        &self,
        route: &str,
        script: &LuaScript,
        args: impl Fn(&mut Cmd) + Sync,
    ) -> redis::RedisResult<T> {
        let args = &args;
        self.exec(route, |mut conn| async move { script.run(&mut conn, args).await }).await
    }

    /// Appends the names' keys as the acquire, extend and release scripts take them: every
    /// `{stem}:h`, then every `{stem}:s`.
    fn push_name_keys<'k>(&self, cmd: &mut Cmd, keys: impl Iterator<Item = &'k StoreKey> + Clone) {
        for key in keys.clone() {
            cmd.arg(format!("{}:h", self.group_key_stem(key)));
        }
        for key in keys {
            cmd.arg(format!("{}:s", self.group_key_stem(key)));
        }
    }

    /// The release script on `keys` (all of tag `tag`).
    async fn release_tagged(&self, tag: &str, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let channel = if self.notifications() { self.group_release_channel(tag) } else { String::new() };
        let names = released_names(keys);
        let lease = self.group_lease_key(tag, token);
        let freed: i64 = self
            .run_script(&lease, &SCRIPTS.group_release, |cmd| {
                cmd.arg(1 + 2 * keys.len()).arg(&lease);
                self.push_name_keys(cmd, keys.iter());
                cmd.arg(token.as_str()).arg(&channel).arg(&names).arg(SPUBLISH);
            })
            .await
            .map_err(|err| Self::group_error("release group", keys, err))?;
        count(Self::BACKEND, "release group", keys, freed)
    }

    /// The acquire script (see the single-node store): `mode` is `C`, `F`, `N` or `P`.
    async fn run_acquire(&self, request: &GroupRequest<'_>, tag: &str, mode: &str) -> redis::RedisResult<i64> {
        let members = request.members;
        let args = AcquireArgs::new(request, mode);
        let fence_counter = matches!(mode, "C" | "F").then(|| self.group_fence_key(tag));
        let lease = self.group_lease_key(tag, request.token);
        self.run_script(&lease, &SCRIPTS.group_acquire, |cmd| {
            cmd.arg(1 + usize::from(fence_counter.is_some()) + 2 * members.len());
            cmd.arg(&lease);
            if let Some(counter) = &fence_counter {
                cmd.arg(counter);
            }
            self.push_name_keys(cmd, members.iter().map(|member| &member.key));
            args.push(cmd, request);
        })
        .await
    }
}

/// Lock groups on Redis Cluster: the single-node store's scripts, each in the one slot
/// of the group's hash tag (see the crate README, "Redis Cluster").
#[async_trait]
impl GroupLockStore for RedisClusterStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    /// One script in the slot of the group's hash tag, as on a single node.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] before any I/O when the names do not all share one hash tag
    /// (`{orders}:a`, `{orders}:b`); [`LockError::InvalidGroup`] before any I/O for an
    /// empty group, a name given twice, too many members or zero default permits;
    /// [`LockError::Store`] when the script fails (the outcome is unknown: release with
    /// the same token).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        check_group_members(request.members, self.max_group())?;
        let keys: Vec<StoreKey> = request.members.iter().map(|member| member.key.clone()).collect();
        let tag = common_tag(&keys)?;
        let error = |err: distlock_api::BoxError| Self::group_error("acquire group", &keys, err);
        let reply = self
            .run_acquire(&request, &tag, grant_mode(self.fencing(), self.clock_fences()))
            .await
            .map_err(|err| error(err.into()))?;
        match (reply, self.fencing()) {
            (0, false) => Ok(GroupAcquire::Acquired { fence: None }),
            (fence @ 1.., true) => Ok(GroupAcquire::Acquired { fence: Some(fence.unsigned_abs()) }),
            (..0, _) => Ok(GroupAcquire::Blocked { ticket: reply.unsigned_abs() }),
            _ => Err(error(UnexpectedReply(format!("group acquire returned {reply}")).into())),
        }
    }

    /// The single-node extend script, in the slot of the group's tag.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let tag = common_tag(keys)?;
        let lease = self.group_lease_key(&tag, token);
        let extended: i64 = self
            .run_script(&lease, &SCRIPTS.group_extend, |cmd| {
                cmd.arg(1 + 2 * keys.len()).arg(&lease);
                self.push_name_keys(cmd, keys.iter());
                cmd.arg(token.as_str()).arg(ttl.as_millis()).arg(ttl.as_millis().saturating_mul(2));
            })
            .await
            .map_err(|err| Self::group_error("extend group", keys, err))?;
        count(Self::BACKEND, "extend group", keys, extended)
    }

    /// The single-node release script, `SPUBLISH`ing the changed names' `h` keys on the
    /// tag's shard channel.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let tag = common_tag(keys)?;
        self.release_tagged(&tag, keys, token).await
    }

    /// The single-node withdraw script, `SPUBLISH`ing on the tag's shard channel.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        let tag = common_tag(keys)?;
        let channel = if self.notifications() { self.group_release_channel(&tag) } else { String::new() };
        let stems: Vec<String> = keys.iter().map(|key| format!("{}:h", self.group_key_stem(key))).collect();
        let _: i64 = self
            .run_script(&stems[0], &SCRIPTS.group_withdraw, |cmd| {
                cmd.arg(keys.len()).arg(&stems).arg(token.as_str()).arg(&channel).arg(SPUBLISH);
            })
            .await
            .map_err(|err| Self::group_error("withdraw intents", keys, err))?;
        Ok(())
    }

    /// Visits **every master**: `SCAN … MATCH {prefix}:group-lease:{* TYPE string COUNT
    /// 1000` on each one, reads each lease key found (`GET`, in its slot; fence, expiry,
    /// owner, names) and releases every group of `owner` with the release script. The cost
    /// grows with the whole keyspace (`SCAN` walks every key of every master, 1,000 per
    /// round trip) plus a round trip per live group and per group released: an
    /// administrative operation for start-up and shutdown, not for a request path. Each
    /// group is released atomically; the whole is not.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that every step is atomic; a cancelled call may have released some
    /// of the owner's groups and not others.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let error = |err: redis::RedisError| Self::group_error("release the groups of an owner", &[], err);
        let head = format!("{}group-lease:{{", crate::config::key_stem(self.key_prefix()));
        let mut pattern = glob_escaped(&head);
        pattern.push('*');
        let mut released = 0u64;
        for (host, port) in self.masters("release the groups of an owner").await? {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(SCAN_PAGE).arg("TYPE").arg("string");
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port });
                let reply = self.cluster_connection().route_command(scan, routing).await.map_err(error)?;
                let (next, keys): (u64, Vec<String>) = redis::FromRedisValue::from_redis_value(reply)
                    .map_err(|err| Self::group_error("release the groups of an owner", &[], err))?;
                for key in keys {
                    // `{prefix}:group-lease:{<tag>}:<token>`; a tag never holds `}`.
                    let Some((tag, token)) = key.strip_prefix(&head).and_then(|rest| rest.split_once("}:")) else {
                        continue;
                    };
                    let Ok(token) = Token::parse(token) else {
                        tracing::debug!(key = %key, "skipping a group lease key without a token");
                        continue;
                    };
                    let mut get = redis::cmd("GET");
                    get.arg(&key);
                    let get = &get;
                    let entry: Option<String> = self
                        .exec(&key, |mut conn| async move { get.query_async(&mut conn).await })
                        .await
                        .map_err(error)?;
                    let Some(names) = owned_names(entry.as_deref(), owner) else { continue };
                    released += self.release_tagged(tag, &names, &token).await? as u64;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(released)
    }

    /// `HSET {stem}:p <mode> <permits>`, or `HDEL` for `None`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] for zero permits, before any I/O.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        check_permits(key, permits)?;
        let permits_key = format!("{}:p", self.group_key_stem(key));
        let cmd = &permits_command(&permits_key, mode, permits);
        let _: i64 = self
            .exec(&permits_key, |mut conn| async move { cmd.query_async(&mut conn).await })
            .await
            .map_err(|err| Self::error_on("set permits", key, err))?;
        Ok(())
    }

    /// `HGET {stem}:p <mode>`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the field holds something other than a count.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let permits_key = format!("{}:p", self.group_key_stem(key));
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&permits_key).arg(mode_names(mode).0);
        let cmd = &cmd;
        let value: Option<String> = self
            .exec(&permits_key, |mut conn| async move { cmd.query_async(&mut conn).await })
            .await
            .map_err(|err| Self::error_on("read permits", key, err))?;
        parse_permits(value).map_err(|err| Self::error_on("read permits", key, err))
    }

    /// The single-node holders script, reading the lease keys of the name's tag.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let leases = self.group_lease_prefix(&group_tag(key));
        let h = format!("{}:h", self.group_key_stem(key));
        let rows: Vec<HolderRow> = self
            .run_script(&h, &SCRIPTS.group_holders, |cmd| {
                cmd.arg(2);
                self.push_name_keys(cmd, std::iter::once(key));
                cmd.arg(&leases);
            })
            .await
            .map_err(|err| Self::error_on("list the holders of", key, err))?;
        rows.into_iter()
            .map(|row| holder_info(row).map_err(|err| Self::error_on("list the holders of", key, err)))
            .collect()
    }

    /// The single-node waiting script.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let h = format!("{}:h", self.group_key_stem(key));
        let count: u64 = self
            .run_script(&h, &SCRIPTS.group_waiting, |cmd| {
                cmd.arg(1).arg(&h);
            })
            .await
            .map_err(|err| Self::error_on("count the waiting groups of", key, err))?;
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// Registers for every name's stem, `SSUBSCRIBE`s to the tag's shard channel (once
    /// per store and channel), then probes the request with the acquire script (read
    /// only) and returns at once when it could be granted now; otherwise waits for a
    /// published change of any of its names, at most `max`. Without notifications, a
    /// plain sleep of `max`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let max = max.min(crate::RedisLockStore::MAX_WAIT);
        if !self.notifications() || request.members.is_empty() {
            tokio::time::sleep(max).await;
            return Ok(());
        }
        let keys: Vec<StoreKey> = request.members.iter().map(|member| member.key.clone()).collect();
        let tag = common_tag(&keys)?;
        let channel = self.group_release_channel(&tag);
        // Releases publish the `h` keys of the names they changed.
        let stems: Vec<String> = keys.iter().map(|key| format!("{}:h", self.group_key_stem(key))).collect();
        let stems: Vec<&str> = stems.iter().map(String::as_str).collect();
        let counted = AtomicBool::new(false);
        let result = self
            .registry()
            .wait_any(&stems, max, || async {
                self.subscribe(&channel).await?;
                counted.store(true, Ordering::Relaxed);
                let reply = self
                    .run_acquire(&request, &tag, "P")
                    .await
                    .map_err(|err| Self::group_error("wait for a change of", &keys, err))?;
                Ok(if reply >= 0 { KeyState::Free } else { KeyState::Held { expires_in: None } })
            })
            .await;
        if counted.load(Ordering::Relaxed) {
            self.unsubscribe(&channel);
        }
        result.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_api::LockKey;

    fn key(name: &str) -> StoreKey {
        LockKey::new(name).unwrap().to_store_key()
    }

    #[test]
    fn tags_follow_the_redis_rule() {
        assert_eq!(hash_tag("{orders}:a"), Some("orders"));
        assert_eq!(hash_tag("x{orders}:a{b}"), Some("orders"));
        assert_eq!(hash_tag("a{}b{c}"), None);
        assert_eq!(hash_tag("a}b{c"), None);
        assert_eq!(group_tag(&key("doc")), "doc");
        assert_eq!(group_tag(&key("a{}b")), "a%7B%7Db");
        assert_eq!(group_tag(&key("{a{b}c")), "a{b");
    }

    #[test]
    fn groups_across_tags_are_refused_before_any_io() {
        assert!(common_tag(&[key("{o}:a"), key("{o}:b"), key("o")]).is_ok());
        let err = common_tag(&[key("{o}:a"), key("{p}:b")]).unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(err.to_string().contains("`{orders}:a`, `{orders}:b`"), "{err}");
    }
}
