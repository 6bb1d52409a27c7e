//! Lock groups on Redis: [`GroupLockStore`] for [`RedisLockStore`], one script per
//! operation (`src/lua/group_*.lua`), on the key layout below.
//!
//! Every script that decides expiry reads the server's clock (`TIME`, in milliseconds);
//! Redis 5 and later replicate a script's effects, not the script, so reading the clock
//! before writing is allowed and replicas see the same writes. The release needs no
//! clock: the group's lease key says whether its holds are live. Needs Redis 6.2
//! (`GETDEL`, `SET … PXAT`).
//!
//! Per name `N` (the *stem* is `{prefix}:group:{N'}`, `N'` the name with `%`, `{` and `}`
//! percent-encoded, so every key of a name shares one hash tag): `stem:s`, a **string**: the
//! token of the holder that found the name free (`+token` for a shared hold), expiring with
//! that hold (a grant of free names writes only these: one `SET … PX` per name, as a single
//! lock); and `stem:h`, one sorted set of everything else a name has but its permits, in
//! score bands of `B` = 10^13 ms (year
//! 2286): shared holds `[0, B)` and exclusive holds `[B, 2B)` (member = the group's token,
//! score = band + expiry), the places of waiting groups — exclusive `[2B, 3B)` and shared
//! `[4B, 5B)` (member = token, score = band + place expiry) — and their tickets
//! `[3B, 4B)` (member = `#token`, score = band + ticket);
//! so one `ZCOUNT` (and the `s` holder) counts the live holders of a mode, one `ZSCORE`
//! tells what a token has on the name, and a grant's `ZADD` replaces the group's own intent.
//! Scripts that take names get every `h`, then every `s` (`KEYS[… + i]`, `KEYS[… + n + i]`). `stem:p`, hash of the
//! permits (`shared`, `exclusive`). Per granted group: its **lease key**
//! `{prefix}:group-lease:<token>` (on Redis Cluster `{prefix}:group-lease:{<tag>}:<token>`),
//! a string `name \n name … \n\n owner \n fence \n expiry` (expiry `-` for a group granted
//! in strings: its holds are its names' `s`, which stay its own while the lease lives) that
//! expires with the group's holds (`PX` ttl at the grant, again at every extension): whether it still exists is
//! whether the group is live, and it names the group's owner for `release_owner` (a `SCAN`
//! of the lease keys) and `holders`. A group that expires leaves nothing to clean up.
//!
//! Costs, in `redis.call`s and arguments (a `redis.call` costs about as much on the server
//! as a whole command sent by a client, an argument about a third of that, so both are kept
//! few): an acquire of free names is one `EXISTS` over the names, one `SET … PX` per name
//! and the lease key's `SET … PX`, with no clock read (a held name costs `TIME` and a
//! `ZADD` per name, and the checks). A release is the lease key's `GETDEL` (live or not),
//! one `GETDEL` of `s` or `ZREM` from `h` per name (of the token's hold, or, for a group
//! without a lease key, of its place and ticket) and one `PUBLISH` — no
//! `TIME`, no score read; the message is the names' `h` keys joined by newlines (`KEYS` as
//! they are). Key expiries of the names only grow: a write that needs a key to live `ttl`
//! more reads its `PTTL` and, when shorter, sets it to `2 × ttl` (so the next writes of the
//! same TTL within `ttl` leave it alone). Nothing sets an expiry on release: keys only
//! shrink, and an emptied key is gone.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::{deadline_after, KeyState};
use distlock_api::{
    check_group_members, check_group_names, GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, LockError,
    LockInfo, LockKey, LockMode, OwnerId, StoreKey, Token, Ttl,
};
use redis::Cmd;

use crate::scripts::SCRIPTS;
use crate::store::RedisLockStore;

/// Keys examined per `SCAN` page while looking for an owner's lease keys.
pub(crate) const SCAN_PAGE: usize = 1000;

impl RedisLockStore {
    /// The common beginning of the keys of the group name `key`:
    /// `{key_prefix}:group:{<name>}`, e.g. `myapp:group:{order:1}`. The name is the
    /// application's key with `%`, `{` and `}` written `%25`, `%7B` and `%7D`, so the part
    /// in braces is a Redis Cluster hash tag shared by exactly the keys of that name. The
    /// keys are the stem followed by `:s` (the holder that found the name free, a string),
    /// `:h` (every other holder, waiting groups' places and their tickets, one sorted set;
    /// also what a release publishes when the name's holders change) and `:p` (permits).
    pub fn group_key_stem(&self, key: &StoreKey) -> String {
        let mut stem = String::new();
        self.push_group_key_stem(&mut stem, key);
        stem
    }

    /// Appends the [stem](Self::group_key_stem) of `key` to `out`.
    fn push_group_key_stem(&self, out: &mut String, key: &StoreKey) {
        let name = key.lock_key();
        out.reserve(self.key_stem().len() + name.len() + 12);
        out.push_str(self.key_stem());
        out.push_str("group:{");
        for c in name.chars() {
            match c {
                '%' => out.push_str("%25"),
                '{' => out.push_str("%7B"),
                '}' => out.push_str("%7D"),
                c => out.push(c),
            }
        }
        out.push('}');
    }

    /// Appends the holders key `{stem}:h` of `key` to `cmd`.
    fn push_holders_key(&self, cmd: &mut Cmd, buffer: &mut String, key: &StoreKey) {
        self.push_name_key(cmd, buffer, key, ":h");
    }

    /// Appends `{stem}<part>` of `key` to `cmd`.
    fn push_name_key(&self, cmd: &mut Cmd, buffer: &mut String, key: &StoreKey, part: &str) {
        buffer.clear();
        self.push_group_key_stem(buffer, key);
        buffer.push_str(part);
        cmd.arg(buffer.as_str());
    }

    /// Appends the names' keys as the acquire, extend and release scripts take them: every
    /// `{stem}:h`, then every `{stem}:s`.
    fn push_name_keys<'k>(&self, cmd: &mut Cmd, keys: impl Iterator<Item = &'k StoreKey> + Clone) {
        let mut buffer = key_buffer();
        for key in keys.clone() {
            self.push_name_key(cmd, &mut buffer, key, ":h");
        }
        for key in keys {
            self.push_name_key(cmd, &mut buffer, key, ":s");
        }
    }

    /// The lease key of the group `token` took: `{key_prefix}:group-lease:<token>`, a
    /// string `<name>\n<name>…\n\n<owner>\n<fence>\n<expiry ms>` (fence `0` without
    /// fencing) that expires with the group's holds. It exists exactly while the group is
    /// live; `release_owner` finds an owner's groups by `SCAN`ning these keys.
    pub fn group_lease_key(&self, token: &Token) -> String {
        self.lease_key_ending(token.as_str())
    }

    /// The lease keys without their token: `{key_prefix}:group-lease:`.
    fn group_lease_prefix(&self) -> String {
        self.lease_key_ending("")
    }

    /// `{key_prefix}:group-lease:<end>`, built at its size.
    fn lease_key_ending(&self, end: &str) -> String {
        let mut key = String::with_capacity(self.key_stem().len() + LEASE_SEGMENT.len() + end.len());
        key.push_str(self.key_stem());
        key.push_str(LEASE_SEGMENT);
        key.push_str(end);
        key
    }

    fn group_error(operation: &'static str, keys: &[StoreKey], err: impl Into<distlock_api::BoxError>) -> LockError {
        group_error(Self::BACKEND, operation, keys, err)
    }

    fn error_on(operation: &'static str, key: &StoreKey, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, Some(key.lock_key()), err)
    }

    /// The release script on `keys`.
    async fn release_keys(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let channel = self.release_channel().unwrap_or("");
        let names = released_names(keys);
        let mut conn = self.connection_manager().clone();
        let freed: i64 = SCRIPTS
            .group_release
            .run(&mut conn, |cmd| {
                cmd.arg(1 + 2 * keys.len()).arg(self.group_lease_key(token));
                self.push_name_keys(cmd, keys.iter());
                cmd.arg(token.as_str()).arg(channel).arg(&names);
            })
            .await
            .map_err(|err| Self::group_error("release group", keys, err))?;
        count(Self::BACKEND, "release group", keys, freed)
    }

    /// The acquire script for `request`: `mode` is a [`grant_mode`] or `P` (a read-only
    /// probe of whether it could be granted now). Returns the fence (0
    /// without fencing or for a probe) or, when blocked, minus the ticket.
    async fn run_acquire(&self, request: &GroupRequest<'_>, mode: &str) -> redis::RedisResult<i64> {
        let members = request.members;
        // The fence counter only when a fence is drawn: the script finds the members' keys
        // after it exactly when the mode is `C` or `F`.
        let fence_counter = matches!(mode, "C" | "F").then(|| self.fence_counter_key());
        let args = AcquireArgs::new(request, mode);
        let mut conn = self.connection_manager().clone();
        SCRIPTS
            .group_acquire
            .run(&mut conn, |cmd| {
                cmd.arg(1 + usize::from(fence_counter.is_some()) + 2 * members.len());
                cmd.arg(self.group_lease_key(request.token));
                if let Some(counter) = &fence_counter {
                    cmd.arg(counter);
                }
                self.push_name_keys(cmd, members.iter().map(|member| &member.key));
                args.push(cmd, request);
            })
            .await
    }

    /// Whether `request` could be granted now (a read-only run of the acquire script,
    /// with the request's ticket; its own intents do not hold it back).
    async fn grantable_now(&self, request: &GroupRequest<'_>) -> Result<bool, LockError> {
        let reply = self.run_acquire(request, "P").await.map_err(|err| {
            let keys: Vec<StoreKey> = request.members.iter().map(|member| member.key.clone()).collect();
            Self::group_error("wait for a change of", &keys, err)
        })?;
        Ok(reply >= 0)
    }
}

/// The acquire script's mode letter for a grant: `N` without fencing, `F` with the
/// counter's fence, `C` with a clock fence.
pub(crate) fn grant_mode(fencing: bool, clock_fences: bool) -> &'static str {
    match (fencing, clock_fences) {
        (false, _) => "N",
        (true, false) => "F",
        (true, true) => "C",
    }
}

/// What follows the key prefix in a group's lease key, before the token.
const LEASE_SEGMENT: &str = "group-lease:";

/// A buffer for one key or a few names at a time: sized so that the usual ones do not
/// grow it step by step.
fn key_buffer() -> String {
    String::with_capacity(64)
}

/// The release script's names argument: the names each followed by a newline, and one
/// more newline (the lease value's beginning when they are all the group's names).
pub(crate) fn released_names(keys: &[StoreKey]) -> String {
    let mut out = joined(keys.iter().map(StoreKey::lock_key));
    out.push_str("\n\n");
    out
}

/// The parts joined by newlines.
pub(crate) fn joined<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = key_buffer();
    for (i, part) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(part);
    }
    out
}

/// The field of a mode in a name's permits hash, and its letter in the scripts.
pub(crate) fn mode_names(mode: LockMode) -> (&'static str, &'static str) {
    match mode {
        LockMode::Shared => ("shared", "S"),
        _ => ("exclusive", "X"),
    }
}

/// The error of a group operation on `keys` (named when there is one).
pub(crate) fn group_error(
    backend: &'static str,
    operation: &'static str,
    keys: &[StoreKey],
    err: impl Into<distlock_api::BoxError>,
) -> LockError {
    let key = match keys {
        [key] => Some(key.lock_key()),
        _ => None,
    };
    LockError::store(backend, operation, key, err)
}

/// A script's count as a `usize`.
pub(crate) fn count(
    backend: &'static str,
    operation: &'static str,
    keys: &[StoreKey],
    reply: i64,
) -> Result<usize, LockError> {
    usize::try_from(reply)
        .map_err(|_| group_error(backend, operation, keys, UnexpectedReply(format!("script returned {reply}"))))
}

/// `text` as a literal in a Redis glob (`SCAN`/`ZSCAN … MATCH`): `*`, `?`, `[`, `]` and
/// `\\` escaped.
pub(crate) fn glob_escaped(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// The `ARGV` of the acquire script (single node and cluster alike): token, the lease
/// key's value without fence and expiry, ttl, the flags (the mode letter, the members'
/// mode letters, then the waiting part), and the members' default permits only when one
/// has some.
pub(crate) struct AcquireArgs {
    entry: String,
    flags: String,
}

impl AcquireArgs {
    pub(crate) fn new(request: &GroupRequest<'_>, mode: &str) -> Self {
        let members = request.members;
        let owner = request.owner.as_str();
        let mut entry = joined(members.iter().map(|member| member.key.lock_key()));
        entry.push_str("\n\n");
        entry.push_str(owner);
        // `<mode><member modes>` for a single attempt; a waiting group's attempt adds
        // `<intent ms>:<2 × intent ms>:<ticket>` (each part possibly empty) and `:b` when
        // barging.
        let mut flags = String::with_capacity(1 + members.len() + 48);
        flags.push_str(mode);
        flags.extend(members.iter().map(|member| mode_names(member.mode).1));
        if request.intent_ttl.is_some() || request.ticket.is_some() {
            let intent_ttl = request.intent_ttl.map(Ttl::as_millis);
            let part = |value: Option<u64>| value.map(|value| value.to_string()).unwrap_or_default();
            let intent_ttl2 = intent_ttl.map(|ttl| ttl.saturating_mul(2));
            flags.push_str(&format!("{}:{}:{}", part(intent_ttl), part(intent_ttl2), part(request.ticket)));
            if !request.fair {
                flags.push_str(":b");
            }
        }
        Self { entry, flags }
    }

    pub(crate) fn push(&self, cmd: &mut Cmd, request: &GroupRequest<'_>) {
        cmd.arg(request.token.as_str()).arg(&self.entry).arg(request.ttl.as_millis()).arg(&self.flags);
        if request.members.iter().any(|member| member.default_permits.is_some()) {
            for member in request.members {
                match member.default_permits {
                    Some(permits) => cmd.arg(permits),
                    None => cmd.arg(""),
                };
            }
        }
    }
}

/// The names of a group lease key's value (`<name>\n<name>…\n\n<owner>\n<fence>\n<expiry>`)
/// when it is `owner`'s; `None` for another owner's group or a missing (expired) key.
pub(crate) fn owned_names(entry: Option<&str>, owner: &OwnerId) -> Option<Vec<StoreKey>> {
    let (names, rest) = entry?.split_once("\n\n")?;
    if rest.split('\n').next()? != owner.as_str() {
        return None;
    }
    Some(names.split('\n').filter_map(|name| LockKey::new(name).ok()).map(|key| key.to_store_key()).collect())
}

/// Zero permits is refused, before any I/O.
pub(crate) fn check_permits(key: &StoreKey, permits: Option<u32>) -> Result<(), LockError> {
    if permits == Some(0) {
        return Err(LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { key: key.lock_key().to_owned() } });
    }
    Ok(())
}

/// `HSET <permits key> <mode> <permits>`, or `HDEL` for `None`.
pub(crate) fn permits_command(permits_key: &str, mode: LockMode, permits: Option<u32>) -> Cmd {
    let mut cmd = redis::cmd(if permits.is_some() { "HSET" } else { "HDEL" });
    cmd.arg(permits_key).arg(mode_names(mode).0);
    if let Some(permits) = permits {
        cmd.arg(permits);
    }
    cmd
}

/// A permits field as read (`None`: not recorded); the error is the text found.
pub(crate) fn parse_permits(value: Option<String>) -> Result<Option<u32>, UnexpectedReply> {
    value
        .map(|text| text.parse::<u32>().map_err(|_| UnexpectedReply(format!("permits field holds {text:?}"))))
        .transpose()
}

/// One row of the holders script: `(mode, token, ms left, fence, owner)`.
pub(crate) type HolderRow = (String, String, i64, u64, String);

/// A holder as the holders script reported it.
pub(crate) fn holder_info((mode, token, left, fence, owner): HolderRow) -> Result<LockInfo, distlock_api::LockError> {
    let token = Token::parse(&token)?;
    let mode = if mode == "S" { LockMode::Shared } else { LockMode::Exclusive };
    let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
    let info = LockInfo::new(token, (fence > 0).then_some(fence), left).with_mode(mode);
    Ok(if owner.is_empty() { info } else { info.with_owner(owner) })
}

/// Lock groups: every operation is one Lua script (`EVALSHA`, `EVAL` on `NOSCRIPT`)
/// over the keys of the names involved and the group's lease key; see the crate
/// README, "Lock groups", for the layout and the costs.
#[async_trait]
impl GroupLockStore for RedisLockStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    /// One script: checks every member (no live holder of the other mode; fewer live
    /// holders of its mode than the permits in `{stem}:p`, else the member's default; for
    /// a shared member, no live intent of another token with an older ticket) and either
    /// grants all (one `INCR` of `{key_prefix}:fence` in fencing mode) or, with an intent
    /// TTL, records intents for the exclusive members.
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
        check_group_members(request.members, self.max_group())?;
        let error = |err: distlock_api::BoxError| {
            let keys: Vec<StoreKey> = request.members.iter().map(|member| member.key.clone()).collect();
            Self::group_error("acquire group", &keys, err)
        };
        let reply = self
            .run_acquire(&request, grant_mode(self.fencing(), self.clock_fences()))
            .await
            .map_err(|err| error(err.into()))?;
        match (reply, self.fencing()) {
            (0, false) => Ok(GroupAcquire::Acquired { fence: None }),
            (fence @ 1.., true) => Ok(GroupAcquire::Acquired { fence: Some(fence.unsigned_abs()) }),
            (..0, _) => Ok(GroupAcquire::Blocked { ticket: reply.unsigned_abs() }),
            _ => Err(error(UnexpectedReply(format!("group acquire returned {reply}")).into())),
        }
    }

    /// One script: `ZADD XX` of the new expiry for every name whose `{stem}:h` holds the
    /// token with an unexpired hold (an expired member stays expired), and a new `PX` for
    /// the group's lease key; nothing when the lease key is gone (released or expired).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let mut conn = self.connection_manager().clone();
        let extended: i64 = SCRIPTS
            .group_extend
            .run(&mut conn, |cmd| {
                cmd.arg(1 + 2 * keys.len()).arg(self.group_lease_key(token));
                self.push_name_keys(cmd, keys.iter());
                cmd.arg(token.as_str()).arg(ttl.as_millis()).arg(ttl.as_millis().saturating_mul(2));
            })
            .await
            .map_err(|err| Self::group_error("extend group", keys, err))?;
        count(Self::BACKEND, "extend group", keys, extended)
    }

    /// One script: `GETDEL` of the group's lease key (a hold was live while it existed),
    /// `ZREM` of the token from `{stem}:h` of every name (its hold or its place), and, when
    /// that changed something and release notifications are on, one
    /// `PUBLISH {key_prefix}:released <stem>:h\n<stem>:h…` (inside the script) naming the
    /// names.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        self.release_keys(keys, token).await
    }

    /// One script: `ZREM` of the token's intents from `{stem}:h` (and `HDEL` of their
    /// tickets), with one `PUBLISH` naming every name whose intent it removed, so readers
    /// held back by it look again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        let channel = self.release_channel().unwrap_or("");
        let mut conn = self.connection_manager().clone();
        let _: i64 = SCRIPTS
            .group_withdraw
            .run(&mut conn, |cmd| {
                let mut buffer = key_buffer();
                cmd.arg(keys.len());
                for key in keys {
                    self.push_holders_key(cmd, &mut buffer, key);
                }
                cmd.arg(token.as_str()).arg(channel);
            })
            .await
            .map_err(|err| Self::group_error("withdraw intents", keys, err))?;
        Ok(())
    }

    /// Walks the database with `SCAN … MATCH {key_prefix}:group-lease:* TYPE string COUNT
    /// 1000`, reads each page's lease keys (`MGET`: fence, expiry, owner, names), then
    /// releases every group of `owner` with the release script: one round trip per page
    /// plus one per group released. The cost grows with the **whole database** (`SCAN`
    /// visits every key, 1,000 per round trip), which keeps acquisitions and releases free
    /// of any owner index: an administrative operation for start-up and shutdown, not for
    /// a request path. Each group is released atomically; the whole is not (a group taken
    /// by the owner while this runs may or may not be released; one that `SCAN` reports
    /// twice is released once).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that every step is atomic; a cancelled call may have released some
    /// of the owner's groups and not others.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let error =
            |err: redis::RedisError| LockError::store(Self::BACKEND, "release the groups of an owner", None, err);
        let prefix = self.group_lease_prefix();
        let mut pattern = glob_escaped(&prefix);
        pattern.push('*');
        let mut cursor = 0u64;
        let mut released = 0u64;
        loop {
            let mut conn = self.connection_manager().clone();
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_PAGE)
                .arg("TYPE")
                .arg("string")
                .query_async(&mut conn)
                .await
                .map_err(error)?;
            let entries: Vec<Option<String>> = if keys.is_empty() {
                Vec::new()
            } else {
                redis::cmd("MGET").arg(&keys).query_async(&mut conn).await.map_err(error)?
            };
            for (key, entry) in keys.iter().zip(entries) {
                let Some(names) = owned_names(entry.as_deref(), owner) else { continue };
                let Some(Ok(token)) = key.strip_prefix(prefix.as_str()).map(Token::parse) else {
                    tracing::debug!(key = %key, "skipping a group lease key without a token");
                    continue;
                };
                released += self.release_keys(&names, &token).await? as u64;
            }
            if next == 0 {
                break;
            }
            cursor = next;
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
        check_permits(key, permits)?;
        let cmd = permits_command(&format!("{}:p", self.group_key_stem(key)), mode, permits);
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
        parse_permits(value).map_err(|err| Self::error_on("read permits", key, err))
    }

    /// A read-only script: the unexpired holds of `{stem}:h` (both modes) with their
    /// expiries, and each one's fence and owner from its group's lease key.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let mut conn = self.connection_manager().clone();
        let rows: Vec<HolderRow> = SCRIPTS
            .group_holders
            .run(&mut conn, |cmd| {
                cmd.arg(2);
                self.push_name_keys(cmd, std::iter::once(key));
                cmd.arg(self.group_lease_prefix());
            })
            .await
            .map_err(|err| Self::error_on("list the holders of", key, err))?;
        rows.into_iter()
            .map(|row| holder_info(row).map_err(|err| Self::error_on("list the holders of", key, err)))
            .collect()
    }

    /// A read-only script: `ZCOUNT`s of the live places in the name's intent bands.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let mut conn = self.connection_manager().clone();
        let count: u64 = SCRIPTS
            .group_waiting
            .run(&mut conn, |cmd| {
                let mut buffer = key_buffer();
                cmd.arg(1);
                self.push_holders_key(cmd, &mut buffer, key);
            })
            .await
            .map_err(|err| Self::error_on("count the waiting groups of", key, err))?;
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// Waits for a published change of any of the request's names (a release, a withdrawn
    /// intent), at most `max`: registers for every name's stem, makes sure the store's
    /// subscriber is subscribed, then runs the acquire script as a read-only probe — the
    /// same checks with the request's ticket, the request's own intents not counting — and
    /// returns at once when the request could be granted now, so a release that landed
    /// between the caller's blocked attempt and this wait is not slept through. A change
    /// published after the registration wakes the wait. While the subscriber is not
    /// subscribed, or without notifications, the wait is a plain sleep of `max`.
    /// Expiries are not published: they are seen at the next attempt. A `max` above
    /// [`MAX_WAIT`](RedisLockStore::MAX_WAIT) counts as `MAX_WAIT`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let max = max.min(Self::MAX_WAIT);
        let deadline = deadline_after(max);
        let listener = self.listener().filter(|_| !request.members.is_empty());
        let Some(waiters) = listener.map(|listener| listener.registry()) else {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        };
        // Releases publish the `h` keys of the names they changed.
        let holders: Vec<String> =
            request.members.iter().map(|member| format!("{}:h", self.group_key_stem(&member.key))).collect();
        let holders: Vec<&str> = holders.iter().map(String::as_str).collect();
        waiters
            .wait_any(&holders, max, || async {
                Ok(if self.grantable_now(&request).await? {
                    KeyState::Free
                } else {
                    KeyState::Held { expires_in: None }
                })
            })
            .await?;
        Ok(())
    }
}

/// The server answered something the group scripts never return (another program wrote
/// the keys).
#[derive(Debug)]
pub(crate) struct UnexpectedReply(pub(crate) String);

impl fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnexpectedReply {}
