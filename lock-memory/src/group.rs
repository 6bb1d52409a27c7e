//! Lock groups in memory: every attempt is one critical section over the group state.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    grant, GroupAcquire, GroupLockStore, GroupRequest, LockError, LockInfo, LockMode, OwnerId, StoreKey, Token, Ttl,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::store::MemoryLockStore;

/// One holder of a name.
struct Holder {
    mode: LockMode,
    owner: OwnerId,
    fence: u64,
    expires_at: Instant,
}

/// A waiting group's place (intent) on a name.
struct Intent {
    mode: LockMode,
    ticket: u64,
    expires_at: Instant,
}

#[derive(Default)]
struct Name {
    holders: HashMap<Token, Holder>,
    intents: HashMap<Token, Intent>,
    shared_permits: Option<u32>,
    exclusive_permits: Option<u32>,
}

impl Name {
    fn purge(&mut self, now: Instant) {
        self.holders.retain(|_, holder| holder.expires_at > now);
        self.intents.retain(|_, intent| intent.expires_at > now);
    }

    fn is_empty(&self) -> bool {
        self.holders.is_empty()
            && self.intents.is_empty()
            && self.shared_permits.is_none()
            && self.exclusive_permits.is_none()
    }

    fn recorded_permits(&self, mode: LockMode) -> Option<u32> {
        match mode {
            LockMode::Shared => self.shared_permits,
            _ => self.exclusive_permits,
        }
    }

    /// The [grant rule](distlock_api::grant::decide) for `mode` of `token` at `now`, whose
    /// group has `ticket` (`None`: its first attempt). Holders and places expired by `now`
    /// do not count.
    fn grants(
        &self,
        now: Instant,
        mode: LockMode,
        default_permits: Option<u32>,
        token: &Token,
        ticket: Option<u64>,
    ) -> bool {
        let request = grant::Request {
            token: token.as_str(),
            mode,
            ticket,
            permits: self.recorded_permits(mode).or(default_permits),
        };
        let holders = self
            .holders
            .iter()
            .filter(|(_, holder)| holder.expires_at > now)
            .map(|(token, holder)| grant::Holder { token: token.as_str(), mode: holder.mode });
        let places = self
            .intents
            .iter()
            .filter(|(_, intent)| intent.expires_at > now)
            .map(|(token, intent)| grant::Place { token: token.as_str(), mode: intent.mode, ticket: intent.ticket });
        grant::decide(&request, holders, places).is_grant()
    }
}

/// The group state of a memory store.
#[derive(Default)]
pub(crate) struct Groups {
    names: Mutex<HashMap<String, Name>>,
    changed: Notify,
    /// The origin of tickets (milliseconds on tokio's clock).
    epoch: std::sync::OnceLock<Instant>,
    /// The last ticket given (written under the `names` lock).
    last_ticket: std::sync::atomic::AtomicU64,
}

impl Groups {
    fn names(&self) -> MutexGuard<'_, HashMap<String, Name>> {
        // Every update is a handful of map operations that cannot panic half-way.
        self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms(&self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_init(|| now);
        u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// A first attempt's ticket: the time in ms, or one more than the last ticket given
    /// when that is larger, so that tickets are unique and a group that comes after
    /// another (even within one millisecond) stays behind it at every later attempt.
    /// Called under the `names` lock.
    fn next_ticket(&self, now: Instant) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let ticket = self.now_ms(now).max(self.last_ticket.load(Relaxed).saturating_add(1));
        self.last_ticket.store(ticket, Relaxed);
        ticket
    }
}

#[async_trait]
impl GroupLockStore for MemoryLockStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let groups = self.groups_state();
        let now = Instant::now();
        let mut names = groups.names();
        let ticket = request.ticket.unwrap_or_else(|| groups.next_ticket(now));
        let mut granted = true;
        for member in request.members {
            if !names.contains_key(member.key.as_str()) {
                names.insert(member.key.as_str().to_owned(), Name::default());
            }
            let Some(name) = names.get_mut(member.key.as_str()) else { continue };
            name.purge(now);
            if !name.grants(now, member.mode, member.default_permits, request.token, request.ticket) {
                granted = false;
            }
        }
        if !granted {
            if let Some(intent_ttl) = request.intent_ttl {
                let expires_at = now + intent_ttl.as_duration();
                for member in request.members.iter().filter(|member| request.places(member)) {
                    if let Some(name) = names.get_mut(member.key.as_str()) {
                        name.intents.insert(request.token.clone(), Intent { mode: member.mode, ticket, expires_at });
                    }
                }
            }
            names.retain(|_, name| !name.is_empty());
            return Ok(GroupAcquire::Blocked { ticket });
        }
        let fence = self.next_fence();
        let expires_at = now + request.ttl.as_duration();
        for member in request.members {
            if let Some(name) = names.get_mut(member.key.as_str()) {
                name.intents.remove(request.token);
                name.holders.insert(
                    request.token.clone(),
                    Holder { mode: member.mode, owner: request.owner.clone(), fence, expires_at },
                );
            }
        }
        Ok(GroupAcquire::Acquired { fence: Some(fence) })
    }

    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let now = Instant::now();
        let mut names = self.groups_state().names();
        let mut extended = 0;
        for key in keys {
            let holder = names.get_mut(key.as_str()).and_then(|name| name.holders.get_mut(token));
            if let Some(holder) = holder.filter(|holder| holder.expires_at > now) {
                holder.expires_at = now + ttl.as_duration();
                extended += 1;
            }
        }
        Ok(extended)
    }

    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let now = Instant::now();
        let groups = self.groups_state();
        let mut freed = 0;
        {
            let mut names = groups.names();
            for key in keys {
                if let Some(name) = names.get_mut(key.as_str()) {
                    name.intents.remove(token);
                    if name.holders.remove(token).is_some_and(|holder| holder.expires_at > now) {
                        freed += 1;
                    }
                    if name.is_empty() {
                        names.remove(key.as_str());
                    }
                }
            }
        }
        groups.changed.notify_waiters();
        Ok(freed)
    }

    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let groups = self.groups_state();
        {
            let mut names = groups.names();
            for key in keys {
                if let Some(name) = names.get_mut(key.as_str()) {
                    name.intents.remove(token);
                }
            }
        }
        groups.changed.notify_waiters();
        Ok(())
    }

    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let now = Instant::now();
        let groups = self.groups_state();
        let mut freed = 0;
        {
            let mut names = groups.names();
            for name in names.values_mut() {
                name.holders.retain(|_, holder| {
                    let mine = holder.owner == *owner;
                    if mine && holder.expires_at > now {
                        freed += 1;
                    }
                    !mine
                });
            }
            names.retain(|_, name| !name.is_empty());
        }
        groups.changed.notify_waiters();
        Ok(freed)
    }

    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let groups = self.groups_state();
        {
            let mut names = groups.names();
            let name = names.entry(key.as_str().to_owned()).or_default();
            match mode {
                LockMode::Shared => name.shared_permits = permits,
                _ => name.exclusive_permits = permits,
            }
            if name.is_empty() {
                names.remove(key.as_str());
            }
        }
        groups.changed.notify_waiters();
        Ok(())
    }

    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        Ok(self.groups_state().names().get(key.as_str()).and_then(|name| name.recorded_permits(mode)))
    }

    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let now = Instant::now();
        let names = self.groups_state().names();
        let Some(name) = names.get(key.as_str()) else { return Ok(Vec::new()) };
        let mut holders: Vec<LockInfo> = name
            .holders
            .iter()
            .filter(|(_, holder)| holder.expires_at > now)
            .map(|(token, holder)| {
                LockInfo::new(token.clone(), Some(holder.fence), holder.expires_at - now)
                    .with_mode(holder.mode)
                    .with_owner(holder.owner.as_str())
            })
            .collect();
        holders.sort_by_key(|info| info.fence);
        Ok(holders)
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let now = Instant::now();
        let names = self.groups_state().names();
        Ok(names.get(key.as_str()).map_or(0, |name| name.intents.values().filter(|i| i.expires_at > now).count()))
    }

    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let groups = self.groups_state();
        let changed = groups.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // Registered first: a change from here on completes `changed`. Then the check, in
        // one critical section: a request that could be granted now need not wait, and the
        // nearest expiry among its names' holders and intents also frees a grant.
        let now = Instant::now();
        let wake_at = {
            let names = groups.names();
            let grantable = request.members.iter().all(|member| {
                names.get(member.key.as_str()).is_none_or(|name| {
                    name.grants(now, member.mode, member.default_permits, request.token, request.ticket)
                })
            });
            if grantable {
                return Ok(());
            }
            request
                .members
                .iter()
                .filter_map(|member| names.get(member.key.as_str()))
                .flat_map(|name| {
                    let holders = name.holders.values().map(|holder| holder.expires_at);
                    holders.chain(name.intents.values().map(|intent| intent.expires_at))
                })
                .filter(|at| *at > now)
                .min()
        };
        let end = now.checked_add(max).map_or(wake_at, |end| Some(wake_at.map_or(end, |at| at.min(end))));
        match end {
            Some(end) => {
                let _ = tokio::time::timeout_at(end, changed).await;
            }
            None => changed.await,
        }
        Ok(())
    }
}
