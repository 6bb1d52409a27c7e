//! Lock groups on etcd: [`GroupLockStore`] for [`EtcdLockStore`].
//!
//! Every name of a group has its keys under one prefix, `{prefix}/group/{store key}␟`:
//! a holder `h{token}` (value `mode\nlease seconds\nowner`, attached to the group's
//! lease), a waiting group's place `i{token}` (value `mode\nticket`, attached to the
//! lease of the group's places) and the permits `pS`, `pX` (a count, no lease). What a
//! group holds is also indexed by owner, `{prefix}/owner/{owner}␟{token}` (the names,
//! on the group's lease), for `release_owner`.
//!
//! A first attempt sends its grant at once, guarded by every name having no holder and
//! no place (empty ranges: any permits admit it). Otherwise (that guard failed and
//! answered with the names' ranges, or a waiting group's attempt read them) the
//! attempt has the prefixes of its names at one revision R, decides on the client with
//! the grant rule ([`distlock_api::grant::decide`], as the in-memory store does), and
//! commits the grant in **one transaction** guarded by `ModRevision(prefix) < R + 1`
//! over every name's whole prefix (a key created or changed since R fails it) and
//! `ModRevision(permits key) = m` for a permits entry that was read (its deletion fails
//! it). Keys that went away since R (releases, expiries, withdrawn places) only free
//! capacity, so they need no guard. A failed guard answers with the names' ranges at
//! the new revision, and the decision is made again. The fence of a grant is the
//! transaction's revision (the holders' create revision): cluster-wide, persisted,
//! strictly increasing, the same numbers as single locks' fences.
//!
//! Tickets are revisions: a blocked first attempt that read revision R gets R + 1, which
//! is above every place it saw and at most the revision of any place it did not.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use distlock_api::waiters::{deadline_after, KeyState, Woken};
use distlock_api::{
    async_trait, check_group_members, check_group_names, grant, GroupAcquire, GroupLockStore, GroupRequest, HeldLock,
    InvalidGroup, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockKey, LockMode, OwnerId, StoreKey,
    StoreMember, Token, Ttl, WaitingPlace,
};
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;

use crate::config::lease_seconds;
use crate::store::{
    fence_of, is_lease_not_found, page_start, prefix_end, unix_ms, waited_since, EtcdLockStore, KeptLease, BACKEND,
};

/// The most members of a group: a grant is one transaction of at most 2 × 63 + 1
/// operations, within etcd's default `--max-txn-ops` of 128.
const MAX_GROUP: usize = 63;

/// Grant transactions that fail their guard before an attempt settles for "blocked":
/// each failure means another request changed one of the names meanwhile.
const MAX_ROUNDS: usize = 16;

/// The owner index is read in pages of this many groups.
const OWNER_PAGE: i64 = 100;

/// A waiting group's place on a name, as read.
#[derive(Debug)]
struct Place {
    token: String,
    mode: LockMode,
    ticket: u64,
    lease: i64,
    /// When the place was first taken (Unix milliseconds, by the waiter's clock); `None`
    /// for a place written without it.
    placed_ms: Option<u64>,
}

/// What one name's prefix held at the revision read.
#[derive(Debug, Default)]
struct NameState {
    /// The holders: token, mode.
    holders: Vec<(String, LockMode)>,
    places: Vec<Place>,
    /// The recorded permits (count, mod revision) of the shared and the exclusive mode.
    shared_permits: Option<(u32, i64)>,
    exclusive_permits: Option<(u32, i64)>,
}

impl NameState {
    fn parse(prefix: &str, kvs: &[KeyValue]) -> Result<Self, Malformed> {
        let mut state = Self::default();
        for kv in kvs {
            let key = std::str::from_utf8(kv.key()).map_err(|_| Malformed("a group key that is not UTF-8"))?;
            let Some(rest) = key.strip_prefix(prefix) else { continue };
            let value = std::str::from_utf8(kv.value()).map_err(|_| Malformed("a group value that is not UTF-8"))?;
            if let Some(token) = rest.strip_prefix('h') {
                let (mode, _, _) = parse_holder(value)?;
                state.holders.push((token.to_owned(), mode));
            } else if let Some(token) = rest.strip_prefix('i') {
                let (mode, ticket, placed_ms) = parse_place(value)?;
                state.places.push(Place { token: token.to_owned(), mode, ticket, lease: kv.lease(), placed_ms });
            } else if let Some(mode) = rest.strip_prefix('p') {
                let permits = value.parse().map_err(|_| Malformed("permits that are not a count"))?;
                match parse_mode(mode)? {
                    LockMode::Shared => state.shared_permits = Some((permits, kv.mod_revision())),
                    _ => state.exclusive_permits = Some((permits, kv.mod_revision())),
                }
            }
        }
        Ok(state)
    }

    fn recorded_permits(&self, mode: LockMode) -> Option<(u32, i64)> {
        match mode {
            LockMode::Shared => self.shared_permits,
            _ => self.exclusive_permits,
        }
    }

    /// The [grant rule](distlock_api::grant::decide) for `mode` of `token`, whose group has
    /// `ticket` (`None`: its first attempt). Every key read is live: etcd deletes a
    /// lease's keys when it ends.
    fn grants(&self, mode: LockMode, default_permits: Option<u32>, token: &str, ticket: Option<u64>) -> bool {
        let request = grant::Request {
            token,
            mode,
            ticket,
            permits: self.recorded_permits(mode).map(|(permits, _)| permits).or(default_permits),
        };
        let holders = self.holders.iter().map(|(token, mode)| grant::Holder { token, mode: *mode });
        let places = self.places.iter().map(|place| grant::Place {
            token: &place.token,
            mode: place.mode,
            ticket: place.ticket,
        });
        grant::decide(&request, holders, places).is_grant()
    }

    fn place_of(&self, token: &str) -> Option<&Place> {
        self.places.iter().find(|place| place.token == token)
    }
}

/// The names' states at one revision.
#[derive(Debug)]
struct Snapshot {
    revision: i64,
    names: Vec<NameState>,
}

impl Snapshot {
    /// From the answer of a transaction whose `Get` responses are the names' ranges,
    /// in order.
    fn from_answer(prefixes: &[String], answer: &TxnResponse) -> Result<Self, Malformed> {
        let revision = answer.header().map_or(0, |header| header.revision());
        let mut names = Vec::with_capacity(prefixes.len());
        let ranges = answer.op_responses().into_iter().filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        for (prefix, range) in prefixes.iter().zip(ranges) {
            names.push(NameState::parse(prefix, range.kvs())?);
        }
        if names.len() != prefixes.len() {
            return Err(Malformed("a range answer is missing"));
        }
        Ok(Self { revision, names })
    }

    /// The ticket of `request` against this snapshot: its own, or (first attempt) the
    /// revision after the one read.
    fn ticket_of(&self, request: &GroupRequest<'_>) -> u64 {
        request.ticket.unwrap_or_else(|| u64::try_from(self.revision).unwrap_or(0) + 1)
    }

    fn grants(&self, request: &GroupRequest<'_>) -> bool {
        request.members.iter().zip(&self.names).all(|(member, name)| {
            name.grants(member.mode, member.default_permits, request.token.as_str(), request.ticket)
        })
    }
}

/// Group keys or values that no version of this store writes (another program wrote
/// under the prefix).
#[derive(Debug)]
struct Malformed(&'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Malformed {}

fn mode_letter(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Shared => "S",
        _ => "X",
    }
}

fn parse_mode(letter: &str) -> Result<LockMode, Malformed> {
    match letter {
        "S" => Ok(LockMode::Shared),
        "X" => Ok(LockMode::Exclusive),
        _ => Err(Malformed("an unknown lock mode")),
    }
}

/// A place's value: mode, ticket and, when written, when the place was first taken
/// (Unix milliseconds by the waiter's clock).
fn parse_place(value: &str) -> Result<(LockMode, u64, Option<u64>), Malformed> {
    let mut parts = value.splitn(3, '\n');
    let (Some(mode), Some(ticket)) = (parts.next(), parts.next()) else {
        return Err(Malformed("a place without a ticket"));
    };
    let ticket = ticket.parse().map_err(|_| Malformed("a place whose ticket is not a number"))?;
    let placed_ms =
        parts.next().map(str::parse).transpose().map_err(|_| Malformed("a place whose time is not a number"))?;
    Ok((parse_mode(mode)?, ticket, placed_ms))
}

/// A holder's value: mode, lease seconds asked, owner.
fn parse_holder(value: &str) -> Result<(LockMode, i64, &str), Malformed> {
    let mut parts = value.splitn(3, '\n');
    let (Some(mode), Some(secs), Some(owner)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Malformed("a holder without mode, TTL and owner"));
    };
    let secs = secs.parse().map_err(|_| Malformed("a holder whose TTL is not a number"))?;
    Ok((parse_mode(mode)?, secs, owner))
}

fn holder_value(mode: LockMode, secs: i64, owner: &str) -> String {
    format!("{}\n{secs}\n{owner}", mode_letter(mode))
}

fn group_error(operation: &'static str, keys: &[StoreKey], err: impl Into<distlock_api::BoxError>) -> LockError {
    let key = match keys {
        [key] => Some(key.lock_key()),
        _ => None,
    };
    LockError::store(BACKEND, operation, key, err)
}

impl EtcdLockStore {
    /// The live holders (sorted by fence) and places (oldest ticket first) among the keys
    /// `kvs` of the name `key`, with one `LeaseTimeToLive` per lease (in parallel).
    async fn name_view(
        &self,
        operation: &'static str,
        key: &StoreKey,
        kvs: &[KeyValue],
    ) -> Result<(Vec<LockInfo>, Vec<WaitingPlace>), LockError> {
        let prefix = self.config().group_prefix(key.as_str());
        let mut leases: Vec<i64> = kvs.iter().map(KeyValue::lease).collect();
        leases.sort_unstable();
        leases.dedup();
        let lefts =
            futures_util::future::join_all(leases.iter().map(|&lease| self.lease_left(operation, key, lease))).await;
        let mut left_of = HashMap::with_capacity(leases.len());
        for (lease, left) in leases.into_iter().zip(lefts) {
            left_of.insert(lease, left?);
        }
        let fail = |err: Malformed| LockError::store(BACKEND, operation, Some(key.lock_key()), err);
        let (mut holders, mut places) = (Vec::new(), Vec::new());
        for found in kvs {
            let Some(Some((left, _))) = left_of.get(&found.lease()) else { continue };
            let rest = std::str::from_utf8(found.key()).ok().and_then(|etcd_key| etcd_key.strip_prefix(&prefix));
            let value =
                std::str::from_utf8(found.value()).map_err(|_| fail(Malformed("a group value that is not UTF-8")))?;
            let token = |token: &str| Token::parse(token).map_err(|_| fail(Malformed("a group key without a token")));
            if let Some(holder) = rest.and_then(|rest| rest.strip_prefix('h')) {
                let (mode, _, owner) = parse_holder(value).map_err(fail)?;
                let fence = fence_of(found.create_revision());
                holders.push(LockInfo::new(token(holder)?, fence, *left).with_mode(mode).with_owner(owner));
            } else if let Some(waiter) = rest.and_then(|rest| rest.strip_prefix('i')) {
                let (mode, ticket, placed_ms) = parse_place(value).map_err(fail)?;
                let waited = placed_ms.map(waited_since);
                places.push((ticket, WaitingPlace::new(token(waiter)?, mode, waited, *left)));
            }
        }
        holders.sort_by_key(|info| info.fence);
        places.sort_by_key(|(ticket, _)| *ticket);
        Ok((holders, places.into_iter().map(|(_, place)| place).collect()))
    }
}

/// A `Get` of every name's whole prefix, in order.
fn ranges(prefixes: &[String]) -> Vec<TxnOp> {
    prefixes.iter().map(|prefix| TxnOp::get(prefix.as_str(), Some(GetOptions::new().with_prefix()))).collect()
}

/// The key to name in an error: a group's only one.
fn one_key(keys: &[StoreKey]) -> Option<&StoreKey> {
    match keys {
        [key] => Some(key),
        _ => None,
    }
}

fn member_keys(members: &[StoreMember]) -> Vec<StoreKey> {
    members.iter().map(|member| member.key.clone()).collect()
}

impl EtcdLockStore {
    fn group_prefixes<'a>(&self, keys: impl Iterator<Item = &'a StoreKey>) -> Vec<String> {
        keys.map(|key| self.config().group_prefix(key.as_str())).collect()
    }

    /// The names' prefixes at one revision: one read-only transaction of ranges, run to
    /// its end in a task of its own (a dropped gRPC request resets its stream, and a
    /// connection that resets too many is closed).
    async fn read_names(
        &self,
        prefixes: &[String],
        keys: &[StoreKey],
        operation: &'static str,
    ) -> Result<Snapshot, LockError> {
        let ranges: Vec<TxnOp> =
            prefixes.iter().map(|prefix| TxnOp::get(prefix.as_str(), Some(GetOptions::new().with_prefix()))).collect();
        let mut kv = self.client().kv_client();
        let timeout = self.config().response_timeout;
        let request =
            tokio::spawn(async move { tokio::time::timeout(timeout, kv.txn(Txn::new().and_then(ranges))).await });
        let answer = match request.await {
            Ok(Ok(Ok(answer))) => answer,
            Ok(Ok(Err(err))) => return Err(group_error(operation, keys, err)),
            Ok(Err(_)) => return Err(group_error(operation, keys, "no answer in time")),
            Err(err) => return Err(group_error(operation, keys, err)),
        };
        Snapshot::from_answer(prefixes, &answer).map_err(|err| group_error(operation, keys, err))
    }

    /// One keep-alive of `lease`, with its time to live read in parallel: `false` when
    /// the lease has ended.
    async fn keep_alive_once(&self, lease: i64, operation: &'static str, keys: &[StoreKey]) -> Result<bool, LockError> {
        let (mut keeper, mut reader) = (self.client().lease_client(), self.client().lease_client());
        let timeout = self.config().response_timeout;
        let (kept, left) = tokio::join!(
            tokio::time::timeout(timeout, keeper.keep_alive(lease)),
            tokio::time::timeout(timeout, reader.time_to_live(lease, None))
        );
        let fail = |err: distlock_api::BoxError| group_error(operation, keys, err);
        match (kept, left) {
            (Ok(Err(err)), _) | (_, Ok(Err(err))) if is_lease_not_found(&err) => Ok(false),
            // Whole seconds, rounded down: 0 is alive, -1 ended.
            (Ok(Ok(_)), Ok(Ok(left))) => Ok(left.ttl() >= 0),
            (Ok(Err(err)), _) | (_, Ok(Err(err))) => Err(fail(err.into())),
            (Err(_), _) | (_, Err(_)) => Err(fail("no answer in time".into())),
        }
    }

    async fn grant_lease(&self, secs: i64, operation: &'static str, keys: &[StoreKey]) -> Result<i64, LockError> {
        let mut leases = self.client().lease_client();
        Ok(self.call(operation, one_key(keys), leases.grant(secs, None)).await?.id())
    }

    /// The hold lease of an attempt of `token`: the one kept from its previous attempt
    /// (kept alive now) or a new one. Recorded for the token before its use, so a
    /// release with the token revokes it.
    async fn hold_lease(&self, token: &Token, secs: i64, keys: &[StoreKey]) -> Result<i64, LockError> {
        let kept = self.group_leases().get(token.as_str()).and_then(|leases| leases.hold);
        if let Some(kept) = kept {
            if kept.secs == secs && self.keep_alive_once(kept.lease, "acquire group", keys).await? {
                self.set_hold(token, Some(KeptLease { kept_at: Instant::now(), ..kept }));
                return Ok(kept.lease);
            }
            self.revoke_later(kept.lease);
        }
        let kept_at = Instant::now();
        let lease = self.grant_lease(secs, "acquire group", keys).await?;
        self.set_hold(token, Some(KeptLease { lease, secs, kept_at }));
        Ok(lease)
    }

    fn set_hold(&self, token: &Token, hold: Option<KeptLease>) {
        let mut leases = self.group_leases();
        // A waiter that vanished without a release leaves its entry: drop ended ones.
        if leases.len() >= 256 {
            leases.retain(|_, kept| {
                kept.hold.is_some_and(|lease| lease.surely_alive())
                    || kept.places.is_some_and(|lease| lease.surely_alive())
            });
        }
        let entry = leases.entry(token.as_str().to_owned()).or_default();
        entry.hold = hold;
        if entry.hold.is_none() && entry.places.is_none() {
            leases.remove(token.as_str());
        }
    }

    fn set_places_lease(&self, token: &Token, places: Option<KeptLease>) {
        let mut leases = self.group_leases();
        let entry = leases.entry(token.as_str().to_owned()).or_default();
        entry.places = places;
        if entry.hold.is_none() && entry.places.is_none() {
            leases.remove(token.as_str());
        }
    }

    /// The grant of `request` on `snapshot`, guarded by the snapshot's revision.
    fn grant_txn(&self, request: &GroupRequest<'_>, prefixes: &[String], snapshot: &Snapshot, lease: i64) -> Txn {
        let token = request.token.as_str();
        let mut guards = Vec::with_capacity(2 * prefixes.len());
        for ((member, prefix), name) in request.members.iter().zip(prefixes).zip(&snapshot.names) {
            guards.push(Compare::mod_revision(prefix.as_str(), CompareOp::Less, snapshot.revision + 1).with_prefix());
            if let Some((_, revision)) = name.recorded_permits(member.mode) {
                let permits_key = format!("{prefix}p{}", mode_letter(member.mode));
                guards.push(Compare::mod_revision(permits_key, CompareOp::Equal, revision));
            }
        }
        let own_places: Vec<bool> = snapshot.names.iter().map(|name| name.place_of(token).is_some()).collect();
        Txn::new()
            .when(guards)
            .and_then(self.grant_writes(request, prefixes, lease, &own_places))
            .or_else(ranges(prefixes))
    }

    /// The grant of `request` on names without any holder or place (whatever their
    /// permits, at least 1): no read needed, the guard is that the names' holders and
    /// places are empty ranges.
    fn free_grant_txn(&self, request: &GroupRequest<'_>, prefixes: &[String], lease: i64) -> Txn {
        let mut guards = Vec::with_capacity(2 * prefixes.len());
        for prefix in prefixes {
            for part in ["h", "i"] {
                guards.push(Compare::create_revision(format!("{prefix}{part}"), CompareOp::Equal, 0).with_prefix());
            }
        }
        let own_places = vec![false; prefixes.len()];
        Txn::new()
            .when(guards)
            .and_then(self.grant_writes(request, prefixes, lease, &own_places))
            .or_else(ranges(prefixes))
    }

    /// A grant's writes: every member's hold on the group's lease, the group's own places
    /// (where `own_places` says it has one) deleted, the owner index entry.
    fn grant_writes(
        &self,
        request: &GroupRequest<'_>,
        prefixes: &[String],
        lease: i64,
        own_places: &[bool],
    ) -> Vec<TxnOp> {
        let token = request.token.as_str();
        let secs = lease_seconds(request.ttl.as_duration());
        let mut writes = Vec::with_capacity(2 * prefixes.len() + 1);
        for ((member, prefix), &own_place) in request.members.iter().zip(prefixes).zip(own_places) {
            let value = holder_value(member.mode, secs, request.owner.as_str());
            writes.push(TxnOp::put(format!("{prefix}h{token}"), value, Some(PutOptions::new().with_lease(lease))));
            if own_place {
                writes.push(TxnOp::delete(format!("{prefix}i{token}"), None));
            }
        }
        let names: Vec<&str> = request.members.iter().map(|member| member.key.lock_key()).collect();
        let index = format!("{}{token}", self.config().owner_prefix(request.owner.as_str()));
        writes.push(TxnOp::put(index, names.join("\n"), Some(PutOptions::new().with_lease(lease))));
        writes
    }

    /// A blocked attempt: its hold lease is kept for the next attempt (or revoked, for a
    /// single attempt), and a waiting request's places are recorded or kept alive.
    async fn blocked(
        &self,
        request: &GroupRequest<'_>,
        prefixes: &[String],
        snapshot: &Snapshot,
        ticket: u64,
        lease: Option<i64>,
    ) -> Result<GroupAcquire, LockError> {
        let token = request.token;
        let keys = member_keys(request.members);
        let Some(place_ttl) = request.intent_ttl else {
            if let Some(lease) = lease {
                self.set_hold(token, None);
                self.revoke_later(lease);
            }
            return Ok(GroupAcquire::Blocked { ticket });
        };
        let placing: Vec<(&StoreMember, &String, &NameState)> = request
            .members
            .iter()
            .zip(prefixes)
            .zip(&snapshot.names)
            .map(|((member, prefix), name)| (member, prefix, name))
            .filter(|(member, _, _)| request.places(member))
            .collect();
        if placing.is_empty() {
            return Ok(GroupAcquire::Blocked { ticket });
        }
        let secs = lease_seconds(place_ttl.as_duration());
        let kept =
            self.group_leases().get(token.as_str()).and_then(|leases| leases.places).filter(|kept| kept.secs == secs);
        if let Some(kept) = kept {
            let in_place = placing.iter().all(|(member, _, name)| {
                name.place_of(token.as_str()).is_some_and(|place| {
                    place.lease == kept.lease && place.ticket == ticket && place.mode == member.mode
                })
            });
            if in_place {
                // Kept alive about three times per TTL.
                if kept.kept_at.elapsed() < place_ttl.as_duration() / 3 {
                    return Ok(GroupAcquire::Blocked { ticket });
                }
                if self.keep_alive_once(kept.lease, "acquire group", &keys).await? {
                    self.set_places_lease(token, Some(KeptLease { kept_at: Instant::now(), ..kept }));
                    return Ok(GroupAcquire::Blocked { ticket });
                }
            }
        }
        // (Re)place every member on a live lease; the old lease, if any, goes.
        let lease = match kept {
            Some(kept) if kept.surely_alive() && self.keep_alive_once(kept.lease, "acquire group", &keys).await? => {
                kept.lease
            }
            _ => {
                if let Some(old) = kept {
                    self.revoke_later(old.lease);
                }
                let kept_at = Instant::now();
                let lease = self.grant_lease(secs, "acquire group", &keys).await?;
                self.set_places_lease(token, Some(KeptLease { lease, secs, kept_at }));
                lease
            }
        };
        let puts: Vec<TxnOp> = placing
            .iter()
            .map(|(member, prefix, name)| {
                // A place keeps the time it was first taken.
                let placed = name.place_of(token.as_str()).and_then(|place| place.placed_ms).unwrap_or_else(unix_ms);
                let value = format!("{}\n{ticket}\n{placed}", mode_letter(member.mode));
                TxnOp::put(format!("{prefix}i{}", token.as_str()), value, Some(PutOptions::new().with_lease(lease)))
            })
            .collect();
        let mut kv = self.client().kv_client();
        self.call("acquire group", one_key(&keys), kv.txn(Txn::new().and_then(puts))).await?;
        Ok(GroupAcquire::Blocked { ticket })
    }

    /// Deletes `token`'s holds and places on `keys` (and the owner index entry `index`)
    /// in one transaction; revokes the token's leases. Returns the holds freed.
    async fn release_keys(&self, keys: &[StoreKey], token: &Token, index: Option<String>) -> Result<usize, LockError> {
        let prefixes = self.group_prefixes(keys.iter());
        let mut deletes = Vec::with_capacity(2 * keys.len() + 1);
        for prefix in &prefixes {
            deletes.push(TxnOp::delete(
                format!("{prefix}h{}", token.as_str()),
                Some(DeleteOptions::new().with_prev_key()),
            ));
        }
        for prefix in &prefixes {
            deletes.push(TxnOp::delete(format!("{prefix}i{}", token.as_str()), None));
        }
        if let Some(index) = index {
            deletes.push(TxnOp::delete(index, None));
        }
        let mut kv = self.client().kv_client();
        let answer = self.call("release group", one_key(keys), kv.txn(Txn::new().and_then(deletes))).await?;
        let mut freed = 0;
        let mut ended = Vec::new();
        for op in answer.op_responses().into_iter().take(prefixes.len()) {
            if let TxnOpResponse::Delete(deleted) = op {
                for prev in deleted.prev_kvs() {
                    freed += 1;
                    if !ended.contains(&prev.lease()) {
                        ended.push(prev.lease());
                    }
                }
            }
        }
        // The group's lease takes its owner index entry along.
        for lease in ended {
            self.revoke_later(lease);
        }
        let kept = self.group_leases().remove(token.as_str());
        if let Some(kept) = kept {
            if let Some(places) = kept.places {
                self.revoke_later(places.lease);
            }
            // The lease of an attempt still in flight (a cancelled acquisition): revoked
            // before returning, so that its put either fails or goes with the lease.
            if let Some(hold) = kept.hold {
                let mut leases = self.client().lease_client();
                let timeout = self.config().response_timeout;
                if let Ok(Err(err)) = tokio::time::timeout(timeout, leases.revoke(hold.lease)).await {
                    if !is_lease_not_found(&err) {
                        tracing::debug!(lease = hold.lease, error = %err, "revoking a group's etcd lease failed; it expires on its own");
                    }
                }
            }
        }
        Ok(freed)
    }
}

/// Lock groups: every grant is one etcd transaction over the names' key prefixes; see
/// the crate README, "Lock groups", for the layout and the costs.
#[async_trait]
impl GroupLockStore for EtcdLockStore {
    /// 63: a grant of n members is one transaction of n + 1 to 2n + 1 operations, within
    /// etcd's default `--max-txn-ops` of 128.
    fn max_group(&self) -> usize {
        MAX_GROUP
    }

    /// A first attempt: `LeaseGrant`, then one transaction granting every member if
    /// no name has a holder or a place. When that guard fails, or for a waiting group's
    /// later attempt (which reads the names, and keeps alive the lease kept from its
    /// first attempt only once granted), the decision is made on the names' state at one
    /// revision, and a grant is one transaction guarded by that revision: holders on
    /// the group's lease, the group's places deleted, the owner index entry. A guard
    /// that fails (a name changed meanwhile) answers with the new ranges and the decision
    /// is made again. A blocked waiting request records its places (one transaction) or
    /// keeps their lease alive.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] before any I/O for an empty group, a name given twice,
    /// more than [`max_group`](GroupLockStore::max_group) members or zero default
    /// permits; [`LockError::Store`] when etcd fails (the outcome is unknown: release with
    /// the same token).
    ///
    /// # Cancel safety
    ///
    /// Each transaction commits whole or not at all; the lease of an attempt in flight is
    /// recorded for its token, so the manager's release with the token revokes it.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        check_group_members(request.members, self.max_group())?;
        let keys = member_keys(request.members);
        let prefixes = self.group_prefixes(keys.iter());
        let secs = lease_seconds(request.ttl.as_duration());
        // A first attempt sends its grant at once, guarded by the names being free of
        // holders and places; a waiting group (which may have places of its own) reads
        // first, and takes its lease (or keeps alive the one kept from its previous
        // attempt) only when it is granted.
        let first = request.ticket.is_none();
        let (mut snapshot, mut lease) = if first {
            (None, Some(self.hold_lease(request.token, secs, &keys).await?))
        } else {
            (Some(self.read_names(&prefixes, &keys, "acquire group").await?), None)
        };
        for _ in 0..MAX_ROUNDS {
            let (txn, used) = match (&snapshot, lease) {
                (None, Some(lease)) => (self.free_grant_txn(&request, &prefixes, lease), lease),
                (Some(snapshot), _) => {
                    if !snapshot.grants(&request) {
                        let ticket = snapshot.ticket_of(&request);
                        return self.blocked(&request, &prefixes, snapshot, ticket, lease).await;
                    }
                    let used = match lease {
                        Some(lease) => lease,
                        None => self.hold_lease(request.token, secs, &keys).await?,
                    };
                    (self.grant_txn(&request, &prefixes, snapshot, used), used)
                }
                (None, None) => break,
            };
            lease = Some(used);
            let mut kv = self.client().kv_client();
            let answer = match self.call("acquire group", one_key(&keys), kv.txn(txn)).await {
                Ok(answer) => answer,
                Err(err) => {
                    // The outcome is unknown; the manager releases with this token, and
                    // the lease goes (taking the holds with it, if the put happened).
                    self.set_hold(request.token, None);
                    self.revoke_later(used);
                    return Err(err);
                }
            };
            if answer.succeeded() {
                self.set_hold(request.token, None);
                if let Some(places) = self.group_leases().get(request.token.as_str()).and_then(|kept| kept.places) {
                    self.revoke_later(places.lease);
                }
                self.set_places_lease(request.token, None);
                let revision = answer.header().map_or(0, |header| header.revision());
                return Ok(GroupAcquire::Acquired { fence: fence_of(revision) });
            }
            snapshot = Some(
                Snapshot::from_answer(&prefixes, &answer).map_err(|err| group_error("acquire group", &keys, err))?,
            );
        }
        // The names keep changing under this attempt: it waits like a blocked one.
        let Some(snapshot) = snapshot else {
            return Err(group_error("acquire group", &keys, Malformed("no state of the names was read")));
        };
        let ticket = snapshot.ticket_of(&request);
        self.blocked(&request, &prefixes, &snapshot, ticket, lease).await
    }

    /// Reads the token's holds (one transaction of gets); with the TTL they were taken
    /// with, one keep-alive per lease (one lease per group); with another TTL, a new
    /// lease and one transaction that moves the holds (guarded by their old lease) and
    /// the owner index entry to it. An ended lease is not revived.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let wanted = lease_seconds(ttl.as_duration());
        let holder_keys: Vec<String> =
            self.group_prefixes(keys.iter()).into_iter().map(|prefix| format!("{prefix}h{}", token.as_str())).collect();
        let gets: Vec<TxnOp> = holder_keys.iter().map(|key| TxnOp::get(key.as_str(), None)).collect();
        let mut kv = self.client().kv_client();
        let answer = self.call("extend group", one_key(keys), kv.txn(Txn::new().and_then(gets))).await?;
        let held: Vec<KeyValue> = answer
            .op_responses()
            .into_iter()
            .filter_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                _ => None,
            })
            .collect();
        if held.is_empty() {
            return Ok(0);
        }
        let mut owner = String::new();
        let mut same_ttl = true;
        for kv in &held {
            let value = std::str::from_utf8(kv.value()).map_err(|_| Malformed("a group value that is not UTF-8"));
            let (_, secs, holder_owner) =
                value.and_then(parse_holder).map_err(|err| group_error("extend group", keys, err))?;
            same_ttl &= secs == wanted;
            holder_owner.clone_into(&mut owner);
        }
        let mut leases: Vec<i64> = held.iter().map(KeyValue::lease).collect();
        leases.sort_unstable();
        leases.dedup();
        if same_ttl {
            let kept = futures_util::future::join_all(
                leases.iter().map(|&lease| self.keep_alive_once(lease, "extend group", keys)),
            )
            .await;
            let mut extended = 0;
            for (lease, alive) in leases.iter().zip(kept) {
                if alive? {
                    extended += held.iter().filter(|kv| kv.lease() == *lease).count();
                }
            }
            return Ok(extended);
        }
        // Another TTL: move the holds (and the owner index entry) to a new lease.
        let index = format!("{}{}", self.config().owner_prefix(&owner), token.as_str());
        let index_entry =
            self.call("extend group", one_key(keys), kv.get(index.as_str(), None)).await?.kvs().first().cloned();
        let lease = self.grant_lease(wanted, "extend group", keys).await?;
        let mut guards = Vec::with_capacity(held.len() + 1);
        let mut moves = Vec::with_capacity(held.len() + 1);
        for old in &held {
            let value = std::str::from_utf8(old.value())
                .map_err(|_| group_error("extend group", keys, Malformed("a group value that is not UTF-8")))?;
            let (mode, _, holder_owner) = parse_holder(value).map_err(|err| group_error("extend group", keys, err))?;
            guards.push(Compare::lease(old.key(), CompareOp::Equal, old.lease()));
            let value = holder_value(mode, wanted, holder_owner);
            moves.push(TxnOp::put(old.key(), value, Some(PutOptions::new().with_lease(lease))));
        }
        if let Some(entry) = &index_entry {
            guards.push(Compare::mod_revision(entry.key(), CompareOp::Equal, entry.mod_revision()));
            moves.push(TxnOp::put(entry.key(), entry.value(), Some(PutOptions::new().with_lease(lease))));
        }
        match self.call("extend group", one_key(keys), kv.txn(Txn::new().when(guards).and_then(moves))).await {
            Ok(answer) if answer.succeeded() => {
                for old in leases {
                    self.revoke_later(old);
                }
                Ok(held.len())
            }
            // A hold went meanwhile (released, expired): the group is not whole any more.
            Ok(_) => {
                self.revoke_later(lease);
                Ok(0)
            }
            Err(err) => {
                self.revoke_later(lease);
                Err(err)
            }
        }
    }

    /// One transaction deleting the token's hold and place on every name; then the
    /// group's lease (which carries its owner index entry) is revoked in the background,
    /// and the lease of an attempt of the token still in flight before returning. The
    /// watch delivers the deletes to the names' waiters.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        self.release_keys(keys, token, None).await
    }

    /// One transaction deleting the token's places; their lease and the lease kept for
    /// the group's next attempt are revoked in the background.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        let deletes: Vec<TxnOp> = self
            .group_prefixes(keys.iter())
            .into_iter()
            .map(|prefix| TxnOp::delete(format!("{prefix}i{}", token.as_str()), None))
            .collect();
        let mut kv = self.client().kv_client();
        self.call("withdraw intents", one_key(keys), kv.txn(Txn::new().and_then(deletes))).await?;
        if let Some(kept) = self.group_leases().remove(token.as_str()) {
            for lease in [kept.hold, kept.places].into_iter().flatten() {
                self.revoke_later(lease.lease);
            }
        }
        Ok(())
    }

    /// Pages through the owner's index entries `{prefix}/owner/{owner}␟…` (one `Range`
    /// of up to 100 per page) and releases each group with its own transaction. Each
    /// group is released atomically; the whole is not (a group taken by the owner while
    /// this runs may or may not be released).
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let prefix = self.config().owner_prefix(owner.as_str());
        let end = crate::store::prefix_end(prefix.as_bytes());
        let mut start = prefix.clone().into_bytes();
        let mut released = 0u64;
        loop {
            let options = GetOptions::new().with_range(end.clone()).with_limit(OWNER_PAGE);
            let mut kv = self.client().kv_client();
            let page = self.call("release the groups of an owner", None, kv.get(start.clone(), Some(options))).await?;
            for entry in page.kvs() {
                let Some(token) = entry.key().strip_prefix(prefix.as_bytes()) else { continue };
                let token = std::str::from_utf8(token).ok().and_then(|token| Token::parse(token).ok());
                let Some(token) = token else {
                    tracing::debug!(owner = %owner, "skipping a malformed entry of the group owner index");
                    continue;
                };
                let names: Vec<StoreKey> = std::str::from_utf8(entry.value())
                    .unwrap_or("")
                    .split('\n')
                    .filter_map(|name| LockKey::new(name).ok())
                    .map(|key| key.to_store_key())
                    .take(MAX_GROUP)
                    .collect();
                let index = String::from_utf8_lossy(entry.key()).into_owned();
                released += self.release_keys(&names, &token, Some(index)).await? as u64;
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(released),
            }
        }
    }

    /// `Put({name}pS|pX, count)` (no lease: configuration, kept until removed), or
    /// `Delete` for `None`; wakes this process's waiters on the name (waiters elsewhere
    /// see the change at their next retry).
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
        let prefix = self.config().group_prefix(key.as_str());
        let permits_key = format!("{prefix}p{}", mode_letter(mode));
        let mut kv = self.client().kv_client();
        match permits {
            Some(permits) => {
                self.call("set permits", Some(key), kv.put(permits_key, permits.to_string(), None)).await?;
            }
            None => {
                self.call("set permits", Some(key), kv.delete(permits_key, None)).await?;
            }
        }
        self.waiters().wake(&prefix);
        Ok(())
    }

    /// `Get({name}pS|pX)`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the key holds something other than a count.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let permits_key = format!("{}p{}", self.config().group_prefix(key.as_str()), mode_letter(mode));
        let mut kv = self.client().kv_client();
        let answer = self.call("read permits", Some(key), kv.get(permits_key, None)).await?;
        answer
            .kvs()
            .first()
            .map(|kv| {
                let text = std::str::from_utf8(kv.value()).unwrap_or("");
                text.parse::<u32>().map_err(|_| {
                    LockError::store(
                        BACKEND,
                        "read permits",
                        Some(key.lock_key()),
                        Malformed("permits that are not a count"),
                    )
                })
            })
            .transpose()
    }

    /// One `Range` over the name's holders, then `LeaseTimeToLive` per lease (in
    /// parallel; one lease per group). Sorted by fence.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let prefix = format!("{}h", self.config().group_prefix(key.as_str()));
        let mut kv = self.client().kv_client();
        let answer = self
            .call("list the holders of", Some(key), kv.get(prefix.as_str(), Some(GetOptions::new().with_prefix())))
            .await?;
        Ok(self.name_view("list the holders of", key, answer.kvs()).await?.0)
    }

    /// A count-only `Range` over the name's places.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let prefix = format!("{}i", self.config().group_prefix(key.as_str()));
        let options = GetOptions::new().with_prefix().with_count_only();
        let mut kv = self.client().kv_client();
        let answer = self.call("count the waiting groups of", Some(key), kv.get(prefix, Some(options))).await?;
        Ok(usize::try_from(answer.count()).unwrap_or(0))
    }

    /// One `Range` over the name's places, then `LeaseTimeToLive` per lease, oldest
    /// ticket first. etcd keeps no clock: a place records when its waiter first took it
    /// by the waiter's clock, and the time waited is read against this process's clock
    /// (so it is off by the clocks' difference).
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let prefix = format!("{}i", self.config().group_prefix(key.as_str()));
        let mut kv = self.client().kv_client();
        let answer =
            self.call("places", Some(key), kv.get(prefix.as_str(), Some(GetOptions::new().with_prefix()))).await?;
        Ok(self.name_view("places", key, answer.kvs()).await?.1)
    }

    /// One `Range` of at most `limit` group keys (holds, places, permits) in key order,
    /// from the pattern's literal prefix, after the cursor (the last key examined), then
    /// `LeaseTimeToLive` per lease of each matching name. The page's last name is read
    /// whole with one more `Range` when the page ends inside it.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let groups_prefix = self.config().groups_prefix();
        let scope = format!("{groups_prefix}{}", pattern.literal_prefix());
        let start = page_start(&scope, &self.config().store_prefix(), cursor)?;
        let options = GetOptions::new()
            .with_range(prefix_end(scope.as_bytes()))
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut kv = self.client().kv_client();
        let answer = self.call("list_groups", None, kv.get(start, Some(options))).await?;
        let mut last = None;
        let mut names: Vec<(&str, Vec<KeyValue>)> = Vec::new();
        for found in answer.kvs() {
            let Ok(etcd_key) = std::str::from_utf8(found.key()) else { continue };
            last = etcd_key.strip_prefix(&self.config().store_prefix()).map(str::to_owned);
            let Some((store_key, _)) = self.config().group_part(etcd_key) else { continue };
            match names.last_mut() {
                Some((name, kvs)) if *name == store_key => kvs.push(found.clone()),
                _ => names.push((store_key, vec![found.clone()])),
            }
        }
        // The page may end inside its last name: that name is read whole (one more
        // `Range`), and the next page starts after it.
        let mut rest_of_last = None;
        if let (true, Some((store_key, _))) = (answer.more(), names.last()) {
            let prefix = self.config().group_prefix(store_key);
            let whole = self.call("list_groups", None, kv.get(prefix, Some(GetOptions::new().with_prefix()))).await?;
            last = whole
                .kvs()
                .last()
                .and_then(|found| std::str::from_utf8(found.key()).ok())
                .and_then(|etcd_key| etcd_key.strip_prefix(&self.config().store_prefix()))
                .map(str::to_owned)
                .or(last);
            rest_of_last = Some(whole.kvs().to_vec());
        }
        if let (Some(whole), Some((_, kvs))) = (rest_of_last, names.last_mut()) {
            *kvs = whole;
        }
        let mut locks = Vec::with_capacity(names.len());
        for (store_key, kvs) in &names {
            let Some(app_key) = store_key.strip_prefix(distlock_api::LOCK_NAMESPACE) else { continue };
            if !pattern.matches(app_key) {
                continue;
            }
            let Ok(lock_key) = LockKey::new(app_key) else { continue };
            let (holders, places) = self.name_view("list_groups", &lock_key.to_store_key(), kvs).await?;
            if !holders.is_empty() || !places.is_empty() {
                locks.push(HeldLock::new(lock_key, holders).with_waiting(places));
            }
        }
        let next = if answer.more() { last.map(ListCursor::new) } else { None };
        Ok(ListPage::new(locks, next))
    }

    /// Registers for the deletes under every name's prefix (releases, expiries, withdrawn
    /// places), then reads the names and decides as a grant would (with the request's
    /// ticket; its own places do not hold it back): returns at once when the request
    /// could be granted now. A notified change that still does not let it in is checked
    /// the same way and slept through. While the watch is down, or without notifications, a plain
    /// sleep of `max`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        if !self.config().release_notifications || request.members.is_empty() {
            tokio::time::sleep_until(deadline_after(max)).await;
            return Ok(());
        }
        let keys = member_keys(request.members);
        let prefixes = self.group_prefixes(keys.iter());
        let waited: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        let deadline = deadline_after(max);
        // A change wakes every waiter of the names, but only those it lets in need to
        // attempt: the others look again (one read) and go back to sleep, instead of all
        // sending an attempt that is blocked again.
        loop {
            let check = || async {
                let snapshot = self.read_names(&prefixes, &keys, "wait for a change of").await?;
                Ok(if snapshot.grants(&request) { KeyState::Free } else { KeyState::Held { expires_in: None } })
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match self.waiters().wait_any(&waited, left, check).await? {
                Woken::Notified if Instant::now() < deadline => continue,
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_read_with_and_without_their_time() {
        assert_eq!(parse_place("X\n7\n1700000000123").unwrap(), (LockMode::Exclusive, 7, Some(1_700_000_000_123)));
        assert_eq!(parse_place("S\n8").unwrap(), (LockMode::Shared, 8, None));
        assert!(parse_place("S").is_err());
        assert!(parse_place("S\n8\nsoon").is_err());
        assert!(parse_place("Q\n8\n1").is_err());
    }
}
