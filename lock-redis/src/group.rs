//! Lock groups on Redis: [`GroupLockStore`] for [`RedisLockStore`], one script per
//! operation (the scripts and the key layout are in `group_scripts`).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::{deadline_after, KeyState};
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, LockError, LockInfo, LockKey, LockMode, OwnerId,
    StoreKey, StoreMember, Token, Ttl,
};
use redis::Cmd;

use crate::group_scripts::GROUP_SCRIPTS;
use crate::store::RedisLockStore;

/// The owners index is read in pages of this many groups.
const OWNER_PAGE: usize = 100;

impl RedisLockStore {
    /// The common beginning of the keys of the group name `key`:
    /// `{key_prefix}:group:{<name>}`, e.g. `myapp:group:{order:1}`. The name is the
    /// application's key with `%`, `{` and `}` written `%25`, `%7B` and `%7D`, so the part
    /// in braces is a Redis Cluster hash tag shared by exactly the keys of that name. The
    /// keys are the stem followed by `:r` (shared holders), `:w` (exclusive holders),
    /// `:q` (writer intents), `:t` (the intents' tickets) and `:p` (permits); the stem
    /// itself is the message published when the name's holders change.
    pub fn group_key_stem(&self, key: &StoreKey) -> String {
        let name = key.lock_key();
        let mut stem = String::with_capacity(self.key_prefix().len() + name.len() + 10);
        stem.push_str(self.key_prefix());
        stem.push_str(":group:{");
        for c in name.chars() {
            match c {
                '%' => stem.push_str("%25"),
                '{' => stem.push_str("%7B"),
                '}' => stem.push_str("%7D"),
                c => stem.push(c),
            }
        }
        stem.push('}');
        stem
    }

    /// The groups of the store by their latest expiry: `{key_prefix}:group-holds`, a
    /// sorted set of tokens scored by the expiry (ms) of the group's last lease.
    pub fn group_holds_key(&self) -> String {
        format!("{}:group-holds", self.key_prefix())
    }

    /// What each group holds: `{key_prefix}:group-index`, a hash from the group's token
    /// to `<fence>\n<owner>\n<name>\n<name>…` (fence `0` without fencing).
    pub fn group_index_key(&self) -> String {
        format!("{}:group-index", self.key_prefix())
    }

    /// The groups of each owner: `{key_prefix}:group-owners`, a sorted set of
    /// `<owner>\n<token>` (all scores 0, read by lexicographic range).
    pub fn group_owners_key(&self) -> String {
        format!("{}:group-owners", self.key_prefix())
    }

    fn group_error(operation: &'static str, keys: &[StoreKey], err: impl Into<distlock_api::BoxError>) -> LockError {
        let key = match keys {
            [key] => Some(key.lock_key()),
            _ => None,
        };
        LockError::store(Self::BACKEND, operation, key, err)
    }

    fn error_on(operation: &'static str, key: &StoreKey, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, Some(key.lock_key()), err)
    }

    /// The index keys every script that changes holders declares first.
    fn index_keys(&self, cmd: &mut Cmd) {
        cmd.arg(self.group_holds_key()).arg(self.group_index_key()).arg(self.group_owners_key());
    }

    /// The release script on `keys` (possibly none: then it only cleans the index).
    async fn release_keys(
        &self,
        keys: &[StoreKey],
        token: &Token,
        owner: Option<&OwnerId>,
    ) -> Result<usize, LockError> {
        let stems: Vec<String> = keys.iter().map(|key| self.group_key_stem(key)).collect();
        let channel = self.release_channel().unwrap_or("");
        let owner = owner.map_or("", OwnerId::as_str);
        let mut conn = self.connection_manager().clone();
        let freed: i64 = GROUP_SCRIPTS
            .release
            .run(&mut conn, |cmd| {
                cmd.arg(3 + 4 * stems.len());
                self.index_keys(cmd);
                for stem in &stems {
                    cmd.arg(format!("{stem}:r"))
                        .arg(format!("{stem}:w"))
                        .arg(format!("{stem}:q"))
                        .arg(format!("{stem}:t"));
                }
                cmd.arg(token.as_str()).arg(channel).arg(owner);
                for (stem, key) in stems.iter().zip(keys) {
                    cmd.arg(stem).arg(key.lock_key());
                }
            })
            .await
            .map_err(|err| Self::group_error("release group", keys, err))?;
        count("release group", keys, freed)
    }

    /// Whether every name is idle (no live holder, no live intent).
    async fn all_idle(&self, keys: &[StoreKey]) -> Result<bool, LockError> {
        let mut conn = self.connection_manager().clone();
        let idle: i64 = GROUP_SCRIPTS
            .idle
            .run(&mut conn, |cmd| {
                cmd.arg(3 * keys.len());
                for key in keys {
                    let stem = self.group_key_stem(key);
                    cmd.arg(format!("{stem}:r")).arg(format!("{stem}:w")).arg(format!("{stem}:q"));
                }
            })
            .await
            .map_err(|err| Self::group_error("wait for a change of", keys, err))?;
        Ok(idle == 1)
    }
}

/// Checks a list of names: at most `max`, each once.
fn check_keys<'a>(keys: impl ExactSizeIterator<Item = &'a StoreKey>, max: usize) -> Result<(), LockError> {
    if keys.len() > max {
        return Err(LockError::InvalidGroup { reason: InvalidGroup::TooLarge { len: keys.len(), max } });
    }
    let mut names: Vec<&str> = keys.map(StoreKey::lock_key).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(LockError::InvalidGroup { reason: InvalidGroup::DuplicateName { key: pair[0].to_owned() } });
    }
    Ok(())
}

fn check_members(members: &[StoreMember], max: usize) -> Result<(), LockError> {
    if members.is_empty() {
        return Err(LockError::InvalidGroup { reason: InvalidGroup::Empty });
    }
    check_keys(members.iter().map(|member| &member.key), max)?;
    if let Some(member) = members.iter().find(|member| member.default_permits == Some(0)) {
        return Err(LockError::InvalidGroup {
            reason: InvalidGroup::ZeroPermits { key: member.key.lock_key().to_owned() },
        });
    }
    Ok(())
}

/// The field of a mode in a name's permits hash, and its letter in the scripts.
fn mode_names(mode: LockMode) -> (&'static str, &'static str) {
    match mode {
        LockMode::Shared => ("shared", "S"),
        _ => ("exclusive", "X"),
    }
}

fn count(operation: &'static str, keys: &[StoreKey], reply: i64) -> Result<usize, LockError> {
    usize::try_from(reply)
        .map_err(|_| RedisLockStore::group_error(operation, keys, UnexpectedReply(format!("script returned {reply}"))))
}

/// Lock groups: every operation is one Lua script (`EVALSHA`, `EVAL` on `NOSCRIPT`)
/// over the keys of the names involved and the store's group index; see the crate
/// README, "Lock groups", for the layout and the costs.
#[async_trait]
impl GroupLockStore for RedisLockStore {
    /// One script: drops expired holders and intents of every member, checks every
    /// member (no live holder of the other mode; fewer live holders of its mode than the
    /// permits in `{stem}:p`, else the member's default; for a shared member, no live
    /// intent of another token with an older ticket) and either grants all (one `INCR` of
    /// `{key_prefix}:fence` in fencing mode) or, with an intent TTL, records intents for
    /// the exclusive members.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] before any I/O for an empty group, a name given twice,
    /// more than [`max_group`](GroupLockStore::max_group) members or zero default
    /// permits; [`LockError::Store`] when the script fails (the outcome is unknown:
    /// release with the same token).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        check_members(request.members, self.max_group())?;
        let keys: Vec<StoreKey> = request.members.iter().map(|member| member.key.clone()).collect();
        let fence_counter = self.fence_counter_key();
        let intent_ttl = request.intent_ttl.map(|ttl| ttl.as_millis().to_string()).unwrap_or_default();
        let ticket = request.ticket.map(|ticket| ticket.to_string()).unwrap_or_default();
        let mut conn = self.connection_manager().clone();
        let (granted, number): (i64, i64) = GROUP_SCRIPTS
            .acquire
            .run(&mut conn, |cmd| {
                cmd.arg(4 + 5 * request.members.len());
                self.index_keys(cmd);
                cmd.arg(&fence_counter);
                for member in request.members {
                    let stem = self.group_key_stem(&member.key);
                    for part in [":r", ":w", ":q", ":t", ":p"] {
                        cmd.arg(format!("{stem}{part}"));
                    }
                }
                cmd.arg(request.token.as_str())
                    .arg(request.owner.as_str())
                    .arg(request.ttl.as_millis())
                    .arg(&intent_ttl)
                    .arg(&ticket)
                    .arg(if self.fencing() { "1" } else { "0" })
                    .arg(request.members.len());
                for member in request.members {
                    let permits = member.default_permits.map(|permits| permits.to_string()).unwrap_or_default();
                    cmd.arg(mode_names(member.mode).1).arg(permits).arg(member.key.lock_key());
                }
            })
            .await
            .map_err(|err| Self::group_error("acquire group", &keys, err))?;
        match (granted, u64::try_from(number)) {
            (1, Ok(0)) if !self.fencing() => Ok(GroupAcquire::Acquired { fence: None }),
            (1, Ok(fence)) if self.fencing() && fence > 0 => Ok(GroupAcquire::Acquired { fence: Some(fence) }),
            (0, Ok(ticket)) => Ok(GroupAcquire::Blocked { ticket }),
            _ => Err(Self::group_error(
                "acquire group",
                &keys,
                UnexpectedReply(format!("group acquire returned {{{granted}, {number}}}")),
            )),
        }
    }

    /// One script: `ZADD XX` of the new expiry for every name whose shared or exclusive
    /// set holds the token with an unexpired score (an expired member stays expired).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_keys(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let mut conn = self.connection_manager().clone();
        let extended: i64 = GROUP_SCRIPTS
            .extend
            .run(&mut conn, |cmd| {
                cmd.arg(3 + 2 * keys.len());
                self.index_keys(cmd);
                for key in keys {
                    let stem = self.group_key_stem(key);
                    cmd.arg(format!("{stem}:r")).arg(format!("{stem}:w"));
                }
                cmd.arg(token.as_str()).arg(ttl.as_millis());
            })
            .await
            .map_err(|err| Self::group_error("extend group", keys, err))?;
        count("extend group", keys, extended)
    }

    /// One script: `ZREM` of the token from the holders and intents of every name, and
    /// from the group index; `PUBLISH {key_prefix}:released <stem>` (inside the script)
    /// for each name whose holders or intents changed, when release notifications are on.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_keys(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        self.release_keys(keys, token, None).await
    }

    /// One script: `ZREM` of the token's intents (and `HDEL` of their tickets), with a
    /// `PUBLISH` per name whose intent it removed, so readers held back by it look again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_keys(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        let stems: Vec<String> = keys.iter().map(|key| self.group_key_stem(key)).collect();
        let channel = self.release_channel().unwrap_or("");
        let mut conn = self.connection_manager().clone();
        let _: i64 = GROUP_SCRIPTS
            .withdraw
            .run(&mut conn, |cmd| {
                cmd.arg(2 * stems.len());
                for stem in &stems {
                    cmd.arg(format!("{stem}:q")).arg(format!("{stem}:t"));
                }
                cmd.arg(token.as_str()).arg(channel);
                for stem in &stems {
                    cmd.arg(stem);
                }
            })
            .await
            .map_err(|err| Self::group_error("withdraw intents", keys, err))?;
        Ok(())
    }

    /// Reads the owner's groups from `{key_prefix}:group-owners` (`ZRANGEBYLEX`, pages of
    /// 100) and their names from `{key_prefix}:group-index` (`HMGET`), then releases each
    /// group with the release script: one round trip per page plus one per group. Each
    /// group is released atomically; the whole is not (a group taken by the owner while
    /// this runs may or may not be released).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that every step is atomic; a cancelled call may have released some
    /// of the owner's groups and not others.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let (owners_key, index_key) = (self.group_owners_key(), self.group_index_key());
        let error =
            |err: redis::RedisError| LockError::store(Self::BACKEND, "release the groups of an owner", None, err);
        let end = format!("({owner}\u{b}");
        let mut start = format!("[{owner}\n");
        let mut released = 0u64;
        loop {
            let mut conn = self.connection_manager().clone();
            let page: Vec<String> = redis::cmd("ZRANGEBYLEX")
                .arg(&owners_key)
                .arg(&start)
                .arg(&end)
                .arg("LIMIT")
                .arg(0)
                .arg(OWNER_PAGE)
                .query_async(&mut conn)
                .await
                .map_err(error)?;
            let Some(last) = page.last() else { break };
            start = format!("({last}");
            let tokens: Vec<&str> = page.iter().filter_map(|member| member.split_once('\n').map(|(_, t)| t)).collect();
            let entries: Vec<Option<String>> = if tokens.is_empty() {
                Vec::new()
            } else {
                redis::cmd("HMGET").arg(&index_key).arg(&tokens).query_async(&mut conn).await.map_err(error)?
            };
            for (token, entry) in tokens.iter().zip(entries) {
                let Ok(token) = Token::parse(token) else {
                    tracing::debug!(owner = %owner, "skipping a malformed entry of the group owners index");
                    continue;
                };
                let names: Vec<StoreKey> = entry
                    .as_deref()
                    .map(|entry| {
                        entry
                            .split('\n')
                            .skip(2)
                            .filter_map(|name| LockKey::new(name).ok())
                            .map(|key| key.to_store_key())
                    })
                    .into_iter()
                    .flatten()
                    .collect();
                released += self.release_keys(&names, &token, Some(owner)).await? as u64;
            }
            if page.len() < OWNER_PAGE {
                break;
            }
        }
        Ok(released)
    }

    /// `HSET {stem}:p <mode> <permits>`, or `HDEL` for `None`. The permits hash has no
    /// expiry: it is configuration, kept until removed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] for zero permits, before any I/O.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        if permits == Some(0) {
            return Err(LockError::InvalidGroup {
                reason: InvalidGroup::ZeroPermits { key: key.lock_key().to_owned() },
            });
        }
        let permits_key = format!("{}:p", self.group_key_stem(key));
        let field = mode_names(mode).0;
        let cmd = match permits {
            Some(permits) => {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&permits_key).arg(field).arg(permits);
                cmd
            }
            None => {
                let mut cmd = redis::cmd("HDEL");
                cmd.arg(&permits_key).arg(field);
                cmd
            }
        };
        let mut conn = self.connection_manager().clone();
        let _: i64 = cmd.query_async(&mut conn).await.map_err(|err| Self::error_on("set permits", key, err))?;
        Ok(())
    }

    /// `HGET {stem}:p <mode>`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the field holds something other than a count.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let permits_key = format!("{}:p", self.group_key_stem(key));
        let mut conn = self.connection_manager().clone();
        let value: Option<String> = redis::cmd("HGET")
            .arg(&permits_key)
            .arg(mode_names(mode).0)
            .query_async(&mut conn)
            .await
            .map_err(|err| Self::error_on("read permits", key, err))?;
        value
            .map(|text| {
                text.parse::<u32>().map_err(|_| {
                    Self::error_on("read permits", key, UnexpectedReply(format!("permits field holds {text:?}")))
                })
            })
            .transpose()
    }

    /// A read-only script: the unexpired members of `{stem}:r` and `{stem}:w` with their
    /// scores, and each one's fence and owner from the group index.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let stem = self.group_key_stem(key);
        let mut conn = self.connection_manager().clone();
        let rows: Vec<(String, String, i64, u64, String)> = GROUP_SCRIPTS
            .holders
            .run(&mut conn, |cmd| {
                cmd.arg(3).arg(self.group_index_key()).arg(format!("{stem}:r")).arg(format!("{stem}:w"));
            })
            .await
            .map_err(|err| Self::error_on("list the holders of", key, err))?;
        rows.into_iter()
            .map(|(mode, token, left, fence, owner)| {
                let token = Token::parse(&token).map_err(|err| Self::error_on("list the holders of", key, err))?;
                let mode = if mode == "S" { LockMode::Shared } else { LockMode::Exclusive };
                let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
                let info = LockInfo::new(token, (fence > 0).then_some(fence), left).with_mode(mode);
                Ok(if owner.is_empty() { info } else { info.with_owner(owner) })
            })
            .collect()
    }

    /// Waits for a published change of any of `keys` (a release, a withdrawn intent), at
    /// most `max`: registers for every name's stem, makes sure the store's subscriber is
    /// subscribed, then asks the server whether every name is idle (no live holder or
    /// intent) and returns at once if so. A change published after the registration wakes
    /// the wait. While the subscriber is not subscribed, or without notifications, the
    /// wait is a plain sleep of `max`. Expiries are not published: they are seen at the
    /// next attempt. A `max` above [`MAX_WAIT`](RedisLockStore::MAX_WAIT) counts as
    /// `MAX_WAIT`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, keys: &[StoreKey], max: Duration) -> Result<(), LockError> {
        let max = max.min(Self::MAX_WAIT);
        let deadline = deadline_after(max);
        let Some(waiters) = self.listener().filter(|_| !keys.is_empty()).map(|listener| listener.registry()) else {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        };
        let stems: Vec<String> = keys.iter().map(|key| self.group_key_stem(key)).collect();
        let stems: Vec<&str> = stems.iter().map(String::as_str).collect();
        waiters
            .wait_any(&stems, max, || async {
                Ok(if self.all_idle(keys).await? { KeyState::Free } else { KeyState::Held { expires_in: None } })
            })
            .await?;
        Ok(())
    }
}

/// The server answered something the group scripts never return (another program wrote
/// the keys).
#[derive(Debug)]
struct UnexpectedReply(String);

impl fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnexpectedReply {}
