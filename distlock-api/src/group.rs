//! Lock groups: shared (read) and exclusive (write) holds with permits per mode, taken
//! all together or not at all — read/write locks, semaphores and multi-locks.
//!
//! The model: a *name* (a [`LockKey`]) has *holders*. Each holder has its own lease —
//! token, [`LockMode`], [`OwnerId`], fence and expiry on the store's clock — so a crashed
//! holder's permit frees itself after its TTL while the others keep theirs. A name admits
//! up to `permits(name, mode)` holders of one mode and none of the other at the same time:
//! exclusive 1 and shared unlimited unless [`Permits`] or the store's permits table say
//! otherwise. A semaphore of N is the shared mode with N permits.
//!
//! Waiting is one queue per name, the same mechanism as a single lock's fair waiting: a
//! waiting group leaves a *place* (an *intent*) on each of its names, ordered by its
//! *ticket* — a store-defined number that grows with time, taken at its first blocked
//! attempt and larger than the ticket of every place already on its names (a number
//! from the store's sequence on PostgreSQL, a revision on etcd, the clock in milliseconds
//! or one more than the names' last ticket on Redis and in memory). To every request that
//! arrived later, a place counts as a holder of its mode: a waiting writer holds back new
//! readers (writer preference: a stream of overlapping readers cannot starve a writer),
//! a waiting reader holds back new writers, and semaphore waiters get their slots in
//! arrival order. Only older places count, so the oldest waiting group is held back by
//! holders alone, and two waiting groups that want each other's names cannot block each
//! other forever.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{InvalidGroup, LockError};
use crate::holder::{LockInfo, LockMode, WaitingPlace};
use crate::key::{LockKey, StoreKey};
use crate::listing::{KeyPattern, ListCursor, ListPage};
use crate::options::Ttl;
use crate::token::Token;

/// Who holds a group: an application id plus the running instance, so that one
/// instance can [release everything it holds](GroupLockStore::release_owner) at start-up
/// without freeing the locks of its replicas.
///
/// Its text is `APP@INSTANCE`. Give each running replica its own instance name that stays
/// the same across its restarts (a pod name, a replica index, a host name): the owner
/// then finds what its previous run leaked. [`OwnerId::for_process`] (the manager's
/// default) is unique per process and never reused, which is always safe but lets leaked
/// holds free themselves only with their TTL.
///
/// Two processes running at the same time must never share an owner id: the start-up
/// call of one ([`LockManager::release_owner`](crate::LockManager::release_owner)) would
/// free the live holds of the other.
///
/// ```
/// use distlock::OwnerId;
///
/// let owner = OwnerId::new("billing", "billing-7f9c-2")?;
/// assert_eq!(owner.as_str(), "billing@billing-7f9c-2");
/// assert!(OwnerId::new("", "x").is_err());
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    /// The longest owner id, in bytes.
    pub const MAX_LEN: usize = 128;

    /// `app@instance`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] when either part is empty, contains `@`, whitespace or
    /// a control character, or the whole is longer than [`OwnerId::MAX_LEN`] bytes.
    pub fn new(app: &str, instance: &str) -> Result<Self, LockError> {
        for part in [app, instance] {
            if part.is_empty() || part.chars().any(|c| c == '@' || c.is_whitespace() || c.is_control()) {
                return Err(LockError::InvalidGroup { reason: InvalidGroup::Owner });
            }
        }
        let text = format!("{app}@{instance}");
        if text.len() > Self::MAX_LEN {
            return Err(LockError::InvalidGroup { reason: InvalidGroup::Owner });
        }
        Ok(Self(text))
    }

    /// The environment variable [`OwnerId::from_env`] reads the instance name from.
    pub const INSTANCE_VAR: &'static str = "DISTLOCK_INSTANCE";

    /// `app@$DISTLOCK_INSTANCE`: the application's name given here, the instance's name
    /// from the environment variable [`OwnerId::INSTANCE_VAR`] — set by the deployment
    /// (a StatefulSet pod name, a systemd instance name, a replica index), the same
    /// across restarts of one instance and different for every instance running at once.
    ///
    /// There is no fallback: a host name or a process id would either be shared by two
    /// live processes (whose start-ups would free each other's holds) or change at every
    /// restart (so nothing a previous run left is found). An application that prefers to
    /// run without one chooses so explicitly:
    /// `OwnerId::from_env("billing").unwrap_or_else(|_| OwnerId::for_process())`.
    ///
    /// ```
    /// use distlock::{InvalidGroup, LockError, OwnerId};
    ///
    /// std::env::set_var(OwnerId::INSTANCE_VAR, "billing-2");
    /// assert_eq!(OwnerId::from_env("billing")?.as_str(), "billing@billing-2");
    /// std::env::remove_var(OwnerId::INSTANCE_VAR);
    /// assert!(matches!(
    ///     OwnerId::from_env("billing"),
    ///     Err(LockError::InvalidGroup { reason: InvalidGroup::OwnerInstanceUnset { .. } })
    /// ));
    /// # Ok::<(), LockError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] with [`InvalidGroup::OwnerInstanceUnset`] when the
    /// variable is unset, empty or not Unicode; [`InvalidGroup::Owner`] when `app` or the
    /// variable's value is not a valid part (as [`OwnerId::new`]).
    pub fn from_env(app: &str) -> Result<Self, LockError> {
        let unset = LockError::InvalidGroup { reason: InvalidGroup::OwnerInstanceUnset { var: Self::INSTANCE_VAR } };
        match std::env::var(Self::INSTANCE_VAR) {
            Ok(instance) if !instance.is_empty() => Self::new(app, &instance),
            _ => Err(unset),
        }
    }

    /// `distlock@HOST:PID:RANDOM`: unique per running process, never reused.
    pub fn for_process() -> Self {
        let host = host_name();
        let random = Token::generate();
        let mut text = format!("distlock@{host}:{}:{}", std::process::id(), random.short());
        text.truncate(Self::MAX_LEN);
        Self(text)
    }

    /// Parses `app@instance` text, e.g. from a command line.
    ///
    /// # Errors
    ///
    /// As [`OwnerId::new`], and when there is no `@`.
    pub fn parse(text: &str) -> Result<Self, LockError> {
        let (app, instance) = text.split_once('@').ok_or(LockError::InvalidGroup { reason: InvalidGroup::Owner })?;
        Self::new(app, instance)
    }

    /// The text stored with each hold.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The host name, for owner ids (read once per process); `unknown-host` when it cannot
/// be read.
fn host_name() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(read_host_name)
}

fn read_host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().chars().filter(|c| !c.is_whitespace() && !c.is_control() && *c != '@').collect())
        .filter(|name: &String| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnerId").field(&self.0).finish()
    }
}

/// How many holders of each mode a name admits when the store's permits table has no
/// entry for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    /// Shared holders at once; `None`: unlimited.
    pub shared: Option<u32>,
    /// Exclusive holders at once (1 for a write lock).
    pub exclusive: u32,
}

impl Permits {
    /// Shared unlimited, exclusive 1: a classic read/write lock.
    pub const DEFAULT: Self = Self { shared: None, exclusive: 1 };

    /// The defaults of the lock-service specification this model comes from: one shared
    /// holder at a time when no exclusive holder is in.
    pub const SEED: Self = Self { shared: Some(1), exclusive: 1 };

    /// The permits of `mode`; `None`: unlimited.
    pub fn of(&self, mode: LockMode) -> Option<u32> {
        match mode {
            LockMode::Shared => self.shared,
            _ => Some(self.exclusive),
        }
    }
}

impl Default for Permits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One member of a [`LockGroup`]: a name, the mode it is wanted in and, optionally, the
/// permits to assume for that mode when the store has none recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The name.
    pub key: LockKey,
    /// Shared (read, semaphore) or exclusive (write).
    pub mode: LockMode,
    /// The permits of `mode` when the store's permits table has no entry for the name;
    /// `None`: the manager's [`Permits`].
    pub permits: Option<u32>,
}

impl GroupMember {
    /// A shared (read) hold of `key`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] for a bad key.
    pub fn shared(key: &str) -> Result<Self, LockError> {
        Ok(Self { key: LockKey::new(key)?, mode: LockMode::Shared, permits: None })
    }

    /// An exclusive (write) hold of `key`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] for a bad key.
    pub fn exclusive(key: &str) -> Result<Self, LockError> {
        Ok(Self { key: LockKey::new(key)?, mode: LockMode::Exclusive, permits: None })
    }

    /// Assumes `permits` holders of this mode when the store has no entry for the name
    /// (a semaphore of `permits` slots in shared mode). Zero is rejected by
    /// [`LockGroup::new`].
    #[must_use]
    pub fn with_permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }
}

/// A validated group: 1 to [`LockGroup::MAX_MEMBERS`] members with distinct names, taken
/// all together or not at all.
///
/// ```
/// use distlock::{GroupMember, LockGroup};
///
/// let group = LockGroup::new([GroupMember::exclusive("WS2")?, GroupMember::shared("WS1")?])?;
/// assert_eq!(group.members().len(), 2);
/// assert!(LockGroup::new([GroupMember::shared("a")?, GroupMember::exclusive("a")?]).is_err());
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGroup {
    members: Vec<GroupMember>,
}

impl LockGroup {
    /// The most members a group may have on any store.
    pub const MAX_MEMBERS: usize = 64;

    /// Validates a group.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] when the group is empty, names a key twice, has more
    /// than [`LockGroup::MAX_MEMBERS`] members, or gives a member zero permits.
    pub fn new(members: impl IntoIterator<Item = GroupMember>) -> Result<Self, LockError> {
        let members: Vec<GroupMember> = members.into_iter().collect();
        let invalid = |reason| Err(LockError::InvalidGroup { reason });
        if members.is_empty() {
            return invalid(InvalidGroup::Empty);
        }
        if members.len() > Self::MAX_MEMBERS {
            return invalid(InvalidGroup::TooLarge { len: members.len(), max: Self::MAX_MEMBERS });
        }
        let mut names: Vec<&str> = members.iter().map(|member| member.key.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return invalid(InvalidGroup::DuplicateName { key: pair[0].to_owned() });
        }
        if let Some(member) = members.iter().find(|member| member.permits == Some(0)) {
            return invalid(InvalidGroup::ZeroPermits { key: member.key.as_str().to_owned() });
        }
        Ok(Self { members })
    }

    /// One member.
    ///
    /// # Errors
    ///
    /// As [`LockGroup::new`].
    pub fn single(member: GroupMember) -> Result<Self, LockError> {
        Self::new([member])
    }

    /// The members, in the order given.
    pub fn members(&self) -> &[GroupMember] {
        &self.members
    }
}

/// A member as a [`GroupLockStore`] receives it: namespaced, with its permits resolved
/// for the case that the store has none recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreMember {
    /// The namespaced name.
    pub key: StoreKey,
    /// The mode wanted.
    pub mode: LockMode,
    /// The permits of `mode` when the store has no entry for the name; `None`: unlimited.
    pub default_permits: Option<u32>,
}

impl StoreMember {
    /// Builds a member (the struct is `#[non_exhaustive]`).
    pub fn new(key: StoreKey, mode: LockMode, default_permits: Option<u32>) -> Self {
        Self { key, mode, default_permits }
    }
}

/// The checks a [`GroupLockStore`] makes of a request's members before any I/O: not
/// empty, at most `max` (the store's [`max_group`](GroupLockStore::max_group)), each name
/// once, no zero default permits.
///
/// # Errors
///
/// [`LockError::InvalidGroup`] saying which check failed, in that order.
pub fn check_group_members(members: &[StoreMember], max: usize) -> Result<(), LockError> {
    if members.is_empty() {
        return Err(LockError::InvalidGroup { reason: InvalidGroup::Empty });
    }
    check_group_names(members.iter().map(|member| &member.key), max)?;
    if let Some(member) = members.iter().find(|member| member.default_permits == Some(0)) {
        return Err(LockError::InvalidGroup {
            reason: InvalidGroup::ZeroPermits { key: member.key.lock_key().to_owned() },
        });
    }
    Ok(())
}

/// The checks a [`GroupLockStore`] makes of the names of a group it extends or releases
/// (possibly none) before any I/O: at most `max`, each once.
///
/// # Errors
///
/// [`LockError::InvalidGroup`]: [`InvalidGroup::TooLarge`] or
/// [`InvalidGroup::DuplicateName`] (the application's name).
pub fn check_group_names<'a>(keys: impl ExactSizeIterator<Item = &'a StoreKey>, max: usize) -> Result<(), LockError> {
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

/// One attempt to take a group, as a [`GroupLockStore`] receives it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GroupRequest<'a> {
    /// The members: distinct names, 1 to [`GroupLockStore::max_group`].
    pub members: &'a [StoreMember],
    /// The group's token: every member's hold carries it.
    pub token: &'a Token,
    /// The owner recorded with each hold.
    pub owner: &'a OwnerId,
    /// The lease of every hold.
    pub ttl: Ttl,
    /// For a waiting group: how long the places (intents) of its members live unless a
    /// later attempt refreshes them. `None`: a single attempt, which leaves no intent.
    pub intent_ttl: Option<Ttl>,
    /// For a waiting group: the ticket its first blocked attempt got
    /// ([`GroupAcquire::Blocked::ticket`]); `None` on the first attempt.
    pub ticket: Option<u64>,
    /// `true` (the default): a blocked waiting attempt leaves a place for every member,
    /// so waiters are served in arrival order. `false` ([`barging`](Self::barging)): only
    /// its exclusive members leave one (writer preference without fairness), as
    /// [`Fairness::Barging`](crate::Fairness::Barging) asks.
    pub fair: bool,
}

impl<'a> GroupRequest<'a> {
    /// Builds a request (the struct is `#[non_exhaustive]`).
    pub fn new(
        members: &'a [StoreMember],
        token: &'a Token,
        owner: &'a OwnerId,
        ttl: Ttl,
        intent_ttl: Option<Ttl>,
        ticket: Option<u64>,
    ) -> Self {
        Self { members, token, owner, ttl, intent_ttl, ticket, fair: true }
    }

    /// The request of a barging waiter: only its exclusive members leave places.
    #[must_use]
    pub fn barging(mut self) -> Self {
        self.fair = false;
        self
    }

    /// The ticket of a [holders-only](Self::holders_only) request: smaller than every
    /// ticket a store gives (tickets are at least 1, and only a smaller ticket is older).
    pub const HOLDERS_ONLY_TICKET: u64 = 1;

    /// The request of a group that counts holders only ([`Admission::HoldersOnly`]): it
    /// leaves no places and, with the ticket [`HOLDERS_ONLY_TICKET`](Self::HOLDERS_ONLY_TICKET),
    /// has no older places, so only live holders can refuse it.
    #[must_use]
    pub fn holders_only(mut self) -> Self {
        self.intent_ttl = None;
        self.ticket = Some(Self::HOLDERS_ONLY_TICKET);
        self
    }

    /// Whether a blocked attempt of this request records a place for `member`.
    pub fn places(&self, member: &StoreMember) -> bool {
        self.intent_ttl.is_some() && (self.fair || member.mode == LockMode::Exclusive)
    }
}

/// What refuses a group request besides the permits: the places of waiting groups too
/// (the default), or live holders alone. Set per manager with
/// [`LockManager::with_admission`](crate::LockManager::with_admission).
///
/// | | [`Queued`](Self::Queued) (default) | [`HoldersOnly`](Self::HoldersOnly) |
/// |---|---|---|
/// | a reader is refused | while a writer holds, **or waits** (arrived earlier) | only while a writer holds |
/// | a writer is refused | while a reader or writer holds, or an earlier group waits | only while a reader or writer holds |
/// | a waiting group | leaves a place on each name (see [`Fairness`](crate::Fairness)) | leaves none; retries, woken by releases |
/// | waiters are served | in arrival order; writers are not starved | whoever asks first after a release: a writer waits as long as readers overlap |
///
/// (Permits aside: a mode's holders beyond its permits refuse a request of that mode
/// under both.)
///
/// [`HoldersOnly`](Self::HoldersOnly) is the rule of the lock-service specification this
/// model comes from (a read lock is refused only while a write lock is in use; a write
/// lock only while read locks are in use or the write permits are taken), usually with
/// [`Permits::SEED`]. It is a setting of the requests of one manager: their groups ignore
/// the places other managers' waiting groups leave, and leave none of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Admission {
    /// Holders and the places of older waiting groups refuse a request: one queue per
    /// name, with writer preference (see [`GroupLockStore`], point 4).
    #[default]
    Queued,
    /// Live holders alone refuse a request: a reader is refused only while a writer
    /// holds, never because one waits.
    HoldersOnly,
}

/// What [`GroupLockStore::try_acquire_group`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupAcquire {
    /// Every member is now held by the request's token.
    Acquired {
        /// The group's fencing number (its *stamp*): strictly greater than every earlier
        /// grant of any of its names. `None` on a store without fencing.
        fence: Option<u64>,
    },
    /// At least one member could not be granted; nothing was taken.
    Blocked {
        /// The group's ticket (a store-defined number that grows with time, taken at its
        /// first blocked attempt and larger than the ticket of every place already on its
        /// names, see [`GroupLockStore`]): pass it back in the next
        /// attempt's [`GroupRequest::ticket`].
        ticket: u64,
    },
}

/// The group primitives of a store; reached through [`LockStore::groups`](crate::LockStore::groups).
///
/// # Contract
///
/// 1. **All or nothing, atomically.** `try_acquire_group` checks and grants every member
///    in one atomic step on the server (one script, one function call, one critical
///    section): either every member is held by the token, or nothing changed except the
///    group's intents.
/// 2. **Permits.** A member of mode M is granted only when the name has no live holder of
///    the other mode and fewer than `permits(name, M)` live holders of mode M, where the
///    permits are read in that same step: the store's entry for (name, M) if any
///    ([`set_permits`](Self::set_permits)), else the member's `default_permits`.
/// 3. **Per-holder leases** on the store's clock: an expired holder no longer counts, and
///    extending or releasing it reports it not held.
/// 4. **One queue: fairness and writer preference.** A blocked attempt with an
///    `intent_ttl` records a place (intent) for each member ([`GroupRequest::places`]:
///    only the exclusive ones when barging), with the group's ticket. The *older places*
///    of a request are the live places of other tokens whose ticket is older than the
///    request's own — on a first attempt (no ticket yet), every place already recorded;
///    a first attempt's ticket is larger than theirs, so a group blocked after another
///    stays behind it at every later attempt. They count like holders: a member of
///    mode M is refused while the name has an older place of the other mode, and the
///    name's live holders of M plus its older places of M must stay below
///    `permits(name, M)`. A granted group's places are removed. Tickets are at least 1
///    and a place is older only when its ticket is smaller, so a request with ticket
///    [`GroupRequest::HOLDERS_ONLY_TICKET`] and no `intent_ttl`
///    ([`GroupRequest::holders_only`]) is refused by live holders alone and leaves nothing.
///
///    Points 2 and 4 are one rule, [`grant::decide`](crate::grant::decide): the reference
///    the stores' implementations are tested against.
/// 5. **Fencing**: one number per granted group, strictly greater than every earlier
///    grant (group or single lock) of its names.
#[async_trait]
pub trait GroupLockStore: fmt::Debug + Send + Sync {
    /// The most members a group may have on this store (at least 1, at most
    /// [`LockGroup::MAX_MEMBERS`]).
    fn max_group(&self) -> usize;

    /// One atomic attempt to take every member for `request.token`.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError>;

    /// Resets the lease of every member still held by `token` to `ttl` from now, in one
    /// atomic step; returns how many were (an expired hold is not revived).
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError>;

    /// Frees every member still held by `token` (and its intents) in one atomic step, and
    /// signals waiters; returns how many holds it freed (0: the group was not held).
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError>;

    /// Removes the intents `token` left on `keys` (a waiting group gave up).
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError>;

    /// Frees every hold of `owner` on this store; returns how many.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError>;

    /// Records the permits of (`key`, `mode`); `None` removes the entry (members' defaults
    /// apply again). Seen by the next grant on every instance. Holders beyond a lowered
    /// count keep their holds; new grants wait until the count drops.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError>;

    /// The recorded permits of (`key`, `mode`), if any.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError>;

    /// The live holders of `key` (mode, owner, fence, time left; intents are not holders).
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError>;

    /// How many waiting groups have a live place (intent) on `key`.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError>;

    /// The live places (intents) of the groups waiting for `key`, oldest ticket first:
    /// each with its token, mode, time left and how long it has waited (since the group's
    /// first blocked attempt), read in one operation.
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError>;

    /// One page of the group names matching `pattern` that have a live holder or a live
    /// place, each with its holders (as [`holders`](Self::holders)) and places (as
    /// [`places`](Self::places)), starting at `cursor` (`None`: from the beginning),
    /// with about `limit` names examined per page (0 counts as 1, more than
    /// [`ListPage::MAX_LIMIT`] as that).
    ///
    /// The rules of [`LockStore::list`](crate::LockStore::list) hold: each page is one
    /// bounded operation (a Redis `SCAN` and scripts over what it found, an index range
    /// in SQL), never a scan that blocks the store; a page may hold fewer names than
    /// `limit`, even none, while [`ListPage::next`] is set; a name held throughout the
    /// listing appears at least once (on Redis possibly twice); only live holders and
    /// places are listed. A cursor of [`LockStore::list`](crate::LockStore::list) is not
    /// one of this listing.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; [`LockError::Config`] for a cursor this
    /// listing cannot have issued.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError>;

    /// Waits at most `max` for a change that may let `request` be granted: returns early
    /// when the store signals a release (or intent withdrawal) of one of its members.
    /// Spurious early returns are allowed; a missed one is not: the waiter registers for
    /// the members' releases *before* it checks, on the server, whether `request` could be
    /// granted now, and returns at once when it could (so a release that landed between
    /// the caller's blocked attempt and this call is not slept through).
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError>;
}
