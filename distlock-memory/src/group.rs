//! Lock groups in memory: every attempt is one critical section over the group state.

use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, HeldLock, KeyPattern, ListCursor, ListPage, LockError, LockInfo,
    LockKey, LockMode, OwnerId, StoreKey, Token, Ttl, WaitingPlace, LOCK_NAMESPACE,
};
use tokio::time::Instant;

use crate::group_state::{Holder, Intent, Name};
use crate::store::{sorted_page, MemoryLockStore};

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
                        let since = name.intents.get(request.token).map_or(now, |intent| intent.since);
                        let intent = Intent { mode: member.mode, ticket, since, expires_at };
                        name.intents.insert(request.token.clone(), intent);
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
        Ok(self.groups_state().names().get(key.as_str()).map_or_else(Vec::new, |name| live_holders(name, now)))
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let now = Instant::now();
        let names = self.groups_state().names();
        Ok(names.get(key.as_str()).map_or(0, |name| name.intents.values().filter(|i| i.expires_at > now).count()))
    }

    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let now = Instant::now();
        Ok(self.groups_state().names().get(key.as_str()).map_or_else(Vec::new, |name| live_places(name, now)))
    }

    /// Pages through the names in key order, as [`list`](distlock_api::LockStore::list)
    /// does; the cursor is the last name listed. Each page is one critical section over
    /// the group state.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let now = Instant::now();
        let after = cursor.map(ListCursor::as_str);
        let names = self.groups_state().names();
        let found = names.iter().filter_map(|(store_key, name)| {
            let key = store_key.strip_prefix(LOCK_NAMESPACE)?;
            if after.is_some_and(|after| key <= after) || !pattern.matches(key) {
                return None;
            }
            let (holders, places) = (live_holders(name, now), live_places(name, now));
            if holders.is_empty() && places.is_empty() {
                return None;
            }
            Some((key.to_owned(), (holders, places)))
        });
        let (page, next) = sorted_page(found.collect(), limit);
        let locks = page
            .into_iter()
            .filter_map(|(key, (holders, places))| {
                Some(HeldLock::new(LockKey::new(key).ok()?, holders).with_waiting(places))
            })
            .collect();
        Ok(ListPage::new(locks, next))
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

/// The live holders of a name, sorted by fence.
fn live_holders(name: &Name, now: Instant) -> Vec<LockInfo> {
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
    holders
}

/// The live places of a name, oldest ticket first.
fn live_places(name: &Name, now: Instant) -> Vec<WaitingPlace> {
    let mut places: Vec<(u64, WaitingPlace)> = name
        .intents
        .iter()
        .filter(|(_, intent)| intent.expires_at > now)
        .map(|(token, intent)| {
            let place =
                WaitingPlace::new(token.clone(), intent.mode, Some(now - intent.since), intent.expires_at - now);
            (intent.ticket, place)
        })
        .collect();
    places.sort_by_key(|(ticket, _)| *ticket);
    places.into_iter().map(|(_, place)| place).collect()
}
