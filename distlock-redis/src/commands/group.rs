//! Each lock-group operation once: one script per operation (`src/lua/group_*.lua`) or
//! one command, on the group keys of the [`Layout`], over any connection. On Redis
//! Cluster every key of a group carries the group's hash tag, so each script runs in one
//! slot (see [`Layout::group_tag`]).
//!
//! Every script that decides expiry reads the server's clock (`TIME`, in milliseconds);
//! Redis 5 and later replicate a script's effects, not the script, so reading the clock
//! before writing is allowed and replicas see the same writes. The release needs no
//! clock: the group's lease key says whether its holds are live. Needs Redis 6.2
//! (`GETDEL`, `SET … PXAT`).
//!
//! Per name `N` (the *stem* is `{prefix}:group:{N'}`, `N'` the name with `%`, `{` and `}`
//! percent-encoded; on Redis Cluster `{prefix}:group:{<tag>}:N`): `stem:s`, a **string**: the
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
//! permits (`shared`, `exclusive`). `stem:w`, the name's **waited-for mark**: a string that
//! a waiting group's probe writes, in the same script as the check that found the name
//! blocking it, with an expiry of twice the wait ([`mark_ms`]); a release publishes only
//! when one of its names has a mark (which it deletes) or places, so an uncontended release
//! sends no message (`group_release.lua` and `group_acquire.lua` explain why no wake-up is
//! lost). `p` and `w` are found beside `h` by the scripts (the same stem, so the same hash
//! tag and slot), not passed as keys. Per granted group: its **lease key**
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
//! without a lease key, of its place and ticket) and, with notifications, one `EXISTS` of
//! the names' marks and `h` keys — and only when one exists a `DEL` of the marks, a
//! `ZCOUNT` of the places per name until one has some, and one `PUBLISH` when a name was
//! marked or has places — no `TIME`, no score read; the message is the names' `h` keys
//! joined by newlines (`KEYS` as they are). Key expiries of the names only grow: a write
//! that needs a key to live `ttl` more reads its `PTTL` and, when shorter, sets it to
//! `2 × ttl` (so the next writes of the same TTL within `ttl` leave it alone). Nothing sets
//! an expiry on release: keys only shrink, and an emptied key is gone.

use std::borrow::Cow;
use std::time::Duration;

use distlock_api::{
    check_group_members, check_group_names, GroupAcquire, GroupRequest, HeldLock, InvalidGroup, KeyPattern, LockError,
    LockGroup, LockInfo, LockKey, LockMode, OwnerId, StoreKey, Token, Ttl, WaitingPlace,
};
use redis::Cmd;

use super::{Commands, Conn, Failure};
use crate::scripts::SCRIPTS;

/// The most names one group takes.
pub(crate) const MAX_GROUP: usize = LockGroup::MAX_MEMBERS;

/// The most names one run of the group list script reads: a bigger page is read by
/// several runs, so that no script holds the server for long.
pub(crate) const GROUP_LIST_BATCH: usize = 500;

/// Keys examined per `SCAN` page while looking for an owner's lease keys.
const SCAN_PAGE: usize = 1000;

/// The names of one release, extension or withdrawal, checked before any I/O, and their
/// tag (one server: `""`).
#[derive(Debug)]
pub(crate) struct GroupNames<'k> {
    pub(crate) keys: &'k [StoreKey],
    pub(crate) tag: Cow<'k, str>,
}

impl Commands {
    /// `keys` checked (not too many, no name twice, on a Cluster one hash tag) before any
    /// I/O; `None` when there are none (nothing to send).
    pub(crate) fn group_names<'k>(&self, keys: &'k [StoreKey]) -> Result<Option<GroupNames<'k>>, LockError> {
        check_group_names(keys.iter(), MAX_GROUP)?;
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(GroupNames { keys, tag: self.layout.group_tag(keys)? }))
    }

    /// The tag of a request's members, checked (at least one, not too many, no name
    /// twice, no zero default permits, on a Cluster one hash tag) before any I/O.
    pub(crate) fn group_request_tag<'r>(&self, request: &GroupRequest<'r>) -> Result<Cow<'r, str>, LockError> {
        check_group_members(request.members, MAX_GROUP)?;
        self.layout.group_tag(request.members.iter().map(|member| &member.key))
    }

    /// A key in the slot of tag `tag`'s group keys (what a Cluster routes a group
    /// operation by).
    pub(crate) fn group_route(&self, tag: &str) -> String {
        self.layout.group_lease_prefix(tag)
    }

    /// The acquire script (`group_acquire.lua`): grants the request or, with an intent
    /// TTL, records its places.
    pub(crate) async fn try_acquire_group(
        &self,
        conn: &mut impl Conn,
        request: &GroupRequest<'_>,
        tag: &str,
    ) -> Result<GroupAcquire, LockError> {
        let mode = grant_mode(self.fencing, self.clock_fences);
        let reply = self
            .run_acquire(conn, request, tag, mode, request.ttl.as_millis())
            .await
            .map_err(|err| self.request_error("acquire group", request, err))?;
        match (reply, self.fencing) {
            (0, false) => Ok(GroupAcquire::Acquired { fence: None }),
            (fence @ 1.., true) => Ok(GroupAcquire::Acquired { fence: Some(fence.unsigned_abs()) }),
            (..0, _) => Ok(GroupAcquire::Blocked { ticket: reply.unsigned_abs() }),
            _ => Err(self.request_error("acquire group", request, Failure(format!("group acquire returned {reply}")))),
        }
    }

    /// Whether `request` could be granted now, asked by a caller that waits up to `wait`
    /// for a change of its names and is already registered for their release messages: a
    /// waiting caller's probe (`P`) of the acquire script, with the request's ticket (its
    /// own intents do not hold it back). It grants nothing; when the request is blocked it
    /// marks the first name that blocks it for [`mark_ms`]`(wait)`, so that the release of
    /// that name publishes.
    pub(crate) async fn group_grantable(
        &self,
        conn: &mut impl Conn,
        request: &GroupRequest<'_>,
        tag: &str,
        wait: Duration,
    ) -> Result<bool, LockError> {
        let reply = self
            .run_acquire(conn, request, tag, "P", mark_ms(wait))
            .await
            .map_err(|err| self.request_error("wait for a change of", request, err))?;
        Ok(reply >= 0)
    }

    /// The acquire script for `request`: `mode` is a [`grant_mode`] or `P` (a waiting
    /// caller's probe), and `ttl_ms` the lease's TTL (for `P`, how long its mark lives).
    /// Returns the fence (0 without fencing or for a probe) or, when blocked, minus the
    /// ticket.
    async fn run_acquire(
        &self,
        conn: &mut impl Conn,
        request: &GroupRequest<'_>,
        tag: &str,
        mode: &str,
        ttl_ms: u64,
    ) -> redis::RedisResult<i64> {
        let members = request.members;
        // The fence counter only when a fence is drawn: the script finds the members' keys
        // after it exactly when the mode is `C` or `F`.
        let fence_counter = matches!(mode, "C" | "F").then(|| self.layout.group_fence_key(tag));
        let lease = self.layout.group_lease_key(tag, request.token.as_str());
        let args = AcquireArgs::new(request, mode);
        SCRIPTS
            .group_acquire
            .run(conn, |cmd| {
                cmd.arg(1 + usize::from(fence_counter.is_some()) + 2 * members.len()).arg(&lease);
                if let Some(counter) = &fence_counter {
                    cmd.arg(counter);
                }
                self.push_name_keys(cmd, members.iter().map(|member| &member.key));
                args.push(cmd, request, ttl_ms);
            })
            .await
    }

    /// The extend script (`group_extend.lua`): a new expiry for every name the token
    /// still holds, and for the group's lease key.
    pub(crate) async fn extend_group(
        &self,
        conn: &mut impl Conn,
        names: &GroupNames<'_>,
        token: &Token,
        ttl: Ttl,
    ) -> Result<usize, LockError> {
        let lease = self.layout.group_lease_key(&names.tag, token.as_str());
        let extended: i64 = SCRIPTS
            .group_extend
            .run(conn, |cmd| {
                cmd.arg(1 + 2 * names.keys.len()).arg(&lease);
                self.push_name_keys(cmd, names.keys.iter());
                cmd.arg(token.as_str()).arg(ttl.as_millis()).arg(ttl.as_millis().saturating_mul(2));
            })
            .await
            .map_err(|err| self.group_error("extend group", names.keys, err))?;
        self.count("extend group", names.keys, extended)
    }

    /// The release script (`group_release.lua`): the lease key's `GETDEL`, the token's
    /// holds or places removed from every name, and one publish of the names it changed.
    pub(crate) async fn release_group(
        &self,
        conn: &mut impl Conn,
        names: &GroupNames<'_>,
        token: &Token,
    ) -> Result<usize, LockError> {
        let lease = self.layout.group_lease_key(&names.tag, token.as_str());
        let channel = self.group_channel(&names.tag);
        let released = released_names(names.keys);
        let freed: i64 = SCRIPTS
            .group_release
            .run(conn, |cmd| {
                cmd.arg(1 + 2 * names.keys.len()).arg(&lease);
                self.push_name_keys(cmd, names.keys.iter());
                cmd.arg(token.as_str()).arg(&channel).arg(&released);
                if let Some(publish) = self.layout.publish_command() {
                    cmd.arg(publish);
                }
            })
            .await
            .map_err(|err| self.group_error("release group", names.keys, err))?;
        self.count("release group", names.keys, freed)
    }

    /// The withdraw script (`group_withdraw.lua`): the token's places removed, with one
    /// publish naming the names whose place it removed.
    pub(crate) async fn withdraw_intents(
        &self,
        conn: &mut impl Conn,
        names: &GroupNames<'_>,
        token: &Token,
    ) -> Result<(), LockError> {
        let channel = self.group_channel(&names.tag);
        let _: i64 = SCRIPTS
            .group_withdraw
            .run(conn, |cmd| {
                let mut buffer = key_buffer();
                cmd.arg(names.keys.len());
                for key in names.keys {
                    self.push_name_key(cmd, &mut buffer, key, ":h");
                }
                cmd.arg(token.as_str()).arg(&channel);
                if let Some(publish) = self.layout.publish_command() {
                    cmd.arg(publish);
                }
            })
            .await
            .map_err(|err| self.group_error("withdraw intents", names.keys, err))?;
        Ok(())
    }

    /// `HSET {stem}:p <mode> <permits>`, or `HDEL` for `None`; zero permits is refused
    /// before any I/O.
    pub(crate) async fn set_permits(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
        mode: LockMode,
        permits: Option<u32>,
    ) -> Result<(), LockError> {
        if permits == Some(0) {
            return Err(LockError::InvalidGroup {
                reason: InvalidGroup::ZeroPermits { key: key.lock_key().to_owned() },
            });
        }
        let mut cmd = redis::cmd(if permits.is_some() { "HSET" } else { "HDEL" });
        cmd.arg(self.layout.group_key(key, ":p")).arg(mode_names(mode).0);
        if let Some(permits) = permits {
            cmd.arg(permits);
        }
        let _: i64 = cmd.query_async(conn).await.map_err(|err| self.error("set permits", key, err))?;
        Ok(())
    }

    /// `HGET {stem}:p <mode>`; a field holding something other than a count is an error.
    pub(crate) async fn permits(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
        mode: LockMode,
    ) -> Result<Option<u32>, LockError> {
        let value: Option<String> = redis::cmd("HGET")
            .arg(self.layout.group_key(key, ":p"))
            .arg(mode_names(mode).0)
            .query_async(conn)
            .await
            .map_err(|err| self.error("read permits", key, err))?;
        value
            .map(|text| {
                text.parse::<u32>()
                    .map_err(|_| self.error("read permits", key, Failure(format!("permits field holds {text:?}"))))
            })
            .transpose()
    }

    /// The read-only holders script (`group_holders.lua`): the live holds of the name
    /// with their expiries, and each one's fence and owner from its group's lease key.
    pub(crate) async fn group_holders(&self, conn: &mut impl Conn, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let leases = self.layout.group_lease_prefix(&self.layout.group_tag([key])?);
        let rows: Vec<HolderRow> = SCRIPTS
            .group_holders
            .run(conn, |cmd| {
                cmd.arg(2);
                self.push_name_keys(cmd, std::iter::once(key));
                cmd.arg(&leases);
            })
            .await
            .map_err(|err| self.error("list the holders of", key, err))?;
        rows.into_iter()
            .map(|row| holder_info(row).map_err(|err| self.error("list the holders of", key, err)))
            .collect()
    }

    /// The read-only waiting script (`group_waiting.lua`): the live places on the name.
    pub(crate) async fn group_waiting(&self, conn: &mut impl Conn, key: &StoreKey) -> Result<usize, LockError> {
        let count: u64 = SCRIPTS
            .group_waiting
            .run(conn, |cmd| {
                let mut buffer = key_buffer();
                cmd.arg(1);
                self.push_name_key(cmd, &mut buffer, key, ":h");
            })
            .await
            .map_err(|err| self.error("count the waiting groups of", key, err))?;
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// The read-only places script (`group_places.lua`): the live places on the name,
    /// oldest ticket first, each with the time waited since its group's ticket.
    pub(crate) async fn group_places(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
    ) -> Result<Vec<WaitingPlace>, LockError> {
        let rows: Vec<PlaceRow> = SCRIPTS
            .group_places
            .run(conn, |cmd| {
                let mut buffer = key_buffer();
                cmd.arg(1);
                self.push_name_key(cmd, &mut buffer, key, ":h");
            })
            .await
            .map_err(|err| self.error("places", key, err))?;
        places(rows).map_err(|err| self.error("places", key, err))
    }

    /// The group names whose `:h` or `:s` keys a `SCAN` found and `pattern` matches, in
    /// key order, each once.
    pub(crate) fn group_names_found(&self, found: &[String], pattern: &KeyPattern) -> Vec<LockKey> {
        let mut names: Vec<LockKey> = found
            .iter()
            .filter_map(|redis_key| self.layout.group_name_of(redis_key))
            .filter(|name| pattern.matches(name))
            .filter_map(|name| LockKey::new(name).ok())
            .collect();
        names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        names
    }

    /// The read-only list script (`group_list.lua`) over `names`, which share one tag:
    /// their holders and places.
    pub(crate) async fn group_list(&self, conn: &mut impl Conn, names: &[LockKey]) -> Result<Vec<HeldLock>, LockError> {
        let Some(first) = names.first() else { return Ok(Vec::new()) };
        let keys: Vec<StoreKey> = names.iter().map(LockKey::to_store_key).collect();
        let fail = |err: distlock_api::BoxError| LockError::store(self.backend, "list_groups", None, err);
        let leases = self.layout.group_lease_prefix(&self.layout.group_tag([&first.to_store_key()])?);
        let rows: Vec<(Vec<HolderRow>, Vec<PlaceRow>)> = SCRIPTS
            .group_list
            .run(conn, |cmd| {
                cmd.arg(2 * keys.len());
                self.push_name_keys(cmd, keys.iter());
                cmd.arg(&leases);
            })
            .await
            .map_err(|err| fail(err.into()))?;
        if rows.len() != names.len() {
            let message = format!("the list script returned {} entries for {} names", rows.len(), names.len());
            return Err(fail(Failure(message).into()));
        }
        let mut listed = Vec::with_capacity(names.len());
        for (name, (holders, waiting)) in names.iter().zip(rows) {
            if holders.is_empty() && waiting.is_empty() {
                continue;
            }
            let mut holders =
                holders.into_iter().map(holder_info).collect::<Result<Vec<_>, _>>().map_err(|err| fail(err.into()))?;
            holders.sort_by_key(|info| info.fence);
            let waiting = places(waiting).map_err(|err| fail(err.into()))?;
            listed.push(HeldLock::new(name.clone(), holders).with_waiting(waiting));
        }
        Ok(listed)
    }

    /// What a change of the request's names is published as: their `h` keys (a release
    /// or withdrawal publishes the `h` keys of the names it changed).
    pub(crate) fn group_wake_keys(&self, request: &GroupRequest<'_>) -> Vec<String> {
        request.members.iter().map(|member| self.layout.group_key(&member.key, ":h")).collect()
    }

    /// The glob of every group lease key (`SCAN … MATCH`), and what the keys start with.
    pub(crate) fn group_lease_glob(&self) -> (String, String) {
        let head = self.layout.group_lease_head();
        let mut pattern = glob_escaped(&head);
        pattern.push('*');
        (head, pattern)
    }

    /// One page of `SCAN <cursor> MATCH <pattern> COUNT 1000 TYPE string`.
    pub(crate) fn scan_group_leases(cursor: u64, pattern: &str) -> Cmd {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_PAGE).arg("TYPE").arg("string");
        scan
    }

    /// The tag and token of a lease key `SCAN` found (`head` from
    /// [`group_lease_glob`](Self::group_lease_glob)); `None` for a key without them.
    pub(crate) fn group_lease_of<'a>(&self, head: &str, lease_key: &'a str) -> Option<(&'a str, Token)> {
        let (tag, token) = self.layout.split_group_lease_key(head, lease_key)?;
        match Token::parse(token) {
            Ok(token) => Some((tag, token)),
            Err(_) => {
                tracing::debug!(key = %lease_key, "skipping a group lease key without a token");
                None
            }
        }
    }

    /// The error of `release_owner`.
    pub(crate) fn release_owner_error(&self, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(self.backend, "release the groups of an owner", None, err)
    }

    /// The channel argument of the scripts that publish: tag `tag`'s channel, or `""`
    /// when releases are not published.
    fn group_channel(&self, tag: &str) -> String {
        if self.notifications {
            self.layout.group_release_channel(tag)
        } else {
            String::new()
        }
    }

    /// Appends the key `part` of the name `key` to `cmd`, built in `buffer`.
    fn push_name_key(&self, cmd: &mut Cmd, buffer: &mut String, key: &StoreKey, part: &str) {
        buffer.clear();
        self.layout.push_group_key(buffer, key, part);
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

    /// The error of a group operation on `keys` (named when there is one).
    fn group_error<'k>(
        &self,
        operation: &'static str,
        keys: impl IntoIterator<Item = &'k StoreKey>,
        err: impl Into<distlock_api::BoxError>,
    ) -> LockError {
        let mut keys = keys.into_iter();
        let key = match (keys.next(), keys.next()) {
            (Some(key), None) => Some(key.lock_key()),
            _ => None,
        };
        LockError::store(self.backend, operation, key, err)
    }

    /// The error of a group operation on `request`'s members.
    fn request_error(
        &self,
        operation: &'static str,
        request: &GroupRequest<'_>,
        err: impl Into<distlock_api::BoxError>,
    ) -> LockError {
        self.group_error(operation, request.members.iter().map(|member| &member.key), err)
    }

    /// A script's count as a `usize`.
    fn count(&self, operation: &'static str, keys: &[StoreKey], reply: i64) -> Result<usize, LockError> {
        usize::try_from(reply)
            .map_err(|_| self.group_error(operation, keys, Failure(format!("script returned {reply}"))))
    }
}

/// How long the mark of a waiting caller's probe lives, in ms: twice its `wait`, rounded up
/// to a whole ms and at least 1 ms (saturating). The mark must outlive the wait, which ends
/// at most `wait` after the probe was sent (the probe runs after the wait's deadline was
/// set); twice that leaves room for a server clock that runs faster than the waiter's.
/// A mark that outlives its waiter costs one message, at the next release of its name.
fn mark_ms(wait: Duration) -> u64 {
    let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    ms.saturating_mul(2).max(1)
}

/// The acquire script's mode letter for a grant: `N` without fencing, `F` with the
/// counter's fence, `C` with a clock fence.
fn grant_mode(fencing: bool, clock_fences: bool) -> &'static str {
    match (fencing, clock_fences) {
        (false, _) => "N",
        (true, false) => "F",
        (true, true) => "C",
    }
}

/// A buffer for one key or a few names at a time: sized so that the usual ones do not
/// grow it step by step.
fn key_buffer() -> String {
    String::with_capacity(64)
}

/// The release script's names argument: the names each followed by a newline, and one
/// more newline (the lease value's beginning when they are all the group's names).
fn released_names(keys: &[StoreKey]) -> String {
    let mut out = joined(keys.iter().map(StoreKey::lock_key));
    out.push_str("\n\n");
    out
}

/// The parts joined by newlines.
fn joined<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
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
fn mode_names(mode: LockMode) -> (&'static str, &'static str) {
    match mode {
        LockMode::Shared => ("shared", "S"),
        _ => ("exclusive", "X"),
    }
}

/// `text` as a literal in a Redis glob (`SCAN`/`ZSCAN … MATCH`): `*`, `?`, `[`, `]` and
/// `\\` escaped.
fn glob_escaped(text: &str) -> String {
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
struct AcquireArgs {
    entry: String,
    flags: String,
}

impl AcquireArgs {
    fn new(request: &GroupRequest<'_>, mode: &str) -> Self {
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

    fn push(&self, cmd: &mut Cmd, request: &GroupRequest<'_>, ttl_ms: u64) {
        cmd.arg(request.token.as_str()).arg(&self.entry).arg(ttl_ms).arg(&self.flags);
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

/// One row of the holders script: `(mode, token, ms left, fence, owner)`.
type HolderRow = (String, String, i64, u64, String);

/// A place as the places scripts report it: mode, token, ms left, ticket, ms waited.
type PlaceRow = (String, String, i64, u64, u64);

/// The places as the places scripts reported them, oldest ticket first.
fn places(mut rows: Vec<PlaceRow>) -> Result<Vec<WaitingPlace>, LockError> {
    rows.sort_by_key(|row| row.3);
    rows.into_iter()
        .map(|(mode, token, left, _, waited)| {
            let mode = if mode == "S" { LockMode::Shared } else { LockMode::Exclusive };
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
            Ok(WaitingPlace::new(Token::parse(&token)?, mode, Some(Duration::from_millis(waited)), left))
        })
        .collect()
}

/// A holder as the holders script reported it.
fn holder_info((mode, token, left, fence, owner): HolderRow) -> Result<LockInfo, distlock_api::LockError> {
    let token = Token::parse(&token)?;
    let mode = if mode == "S" { LockMode::Shared } else { LockMode::Exclusive };
    let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
    let info = LockInfo::new(token, (fence > 0).then_some(fence), left).with_mode(mode);
    Ok(if owner.is_empty() { info } else { info.with_owner(owner) })
}
