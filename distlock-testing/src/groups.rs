//! The wrapped store's lock groups, with faults: what [`FaultyStore::groups`] returns.
//!
//! [`FaultyStore::groups`]: distlock_api::LockStore::groups

use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockMode,
    LockStore, OwnerId, StoreKey, Token, Ttl, WaitingPlace,
};

use crate::faulty::Faulty;
use crate::op::Op;

impl<S: LockStore> Faulty<S> {
    /// The wrapped store's groups. `FaultyStore::groups` hands out `self` only when they
    /// exist, so the error is a safeguard.
    fn inner_groups(&self, op: Op) -> Result<&dyn GroupLockStore, LockError> {
        self.inner.groups().ok_or(LockError::Unsupported { backend: self.inner.backend(), operation: op.as_str() })
    }
}

/// The key an error of a group operation names: the only one, as the stores do.
fn only(keys: &[StoreKey]) -> Option<&StoreKey> {
    match keys {
        [key] => Some(key),
        _ => None,
    }
}

/// The key of a request's only member.
fn only_member<'a>(request: &GroupRequest<'a>) -> Option<&'a StoreKey> {
    match request.members {
        [member] => Some(&member.key),
        _ => None,
    }
}

// Every method of `GroupLockStore` is written out; `tests/integration/forwarding.rs` checks it.
#[async_trait]
impl<S: LockStore> GroupLockStore for Faulty<S> {
    fn max_group(&self) -> usize {
        self.inner.groups().map_or(distlock_api::LockGroup::MAX_MEMBERS, GroupLockStore::max_group)
    }

    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let groups = self.inner_groups(Op::AcquireGroup)?;
        self.call(Op::AcquireGroup, only_member(&request), groups.try_acquire_group(request)).await
    }

    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let groups = self.inner_groups(Op::ExtendGroup)?;
        self.call(Op::ExtendGroup, only(keys), groups.extend_group(keys, token, ttl)).await
    }

    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let groups = self.inner_groups(Op::ReleaseGroup)?;
        self.call(Op::ReleaseGroup, only(keys), groups.release_group(keys, token)).await
    }

    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let groups = self.inner_groups(Op::WithdrawIntents)?;
        self.call(Op::WithdrawIntents, only(keys), groups.withdraw_intents(keys, token)).await
    }

    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let groups = self.inner_groups(Op::ReleaseOwner)?;
        self.call(Op::ReleaseOwner, None, groups.release_owner(owner)).await
    }

    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let groups = self.inner_groups(Op::SetPermits)?;
        self.call(Op::SetPermits, Some(key), groups.set_permits(key, mode, permits)).await
    }

    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let groups = self.inner_groups(Op::Permits)?;
        self.call(Op::Permits, Some(key), groups.permits(key, mode)).await
    }

    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let groups = self.inner_groups(Op::Holders)?;
        self.call(Op::Holders, Some(key), groups.holders(key)).await
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let groups = self.inner_groups(Op::Waiting)?;
        self.call(Op::Waiting, Some(key), groups.waiting(key)).await
    }

    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let groups = self.inner_groups(Op::Places)?;
        self.call(Op::Places, Some(key), groups.places(key)).await
    }

    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let groups = self.inner_groups(Op::ListGroups)?;
        self.call(Op::ListGroups, None, groups.list_groups(pattern, cursor, limit)).await
    }

    /// Dropped release notifications make it sleep its whole `max`, as
    /// `wait_for_release`.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let groups = self.inner_groups(Op::WaitForChange)?;
        self.wait(Op::WaitForChange, only_member(&request), max, groups.wait_for_change(request, max)).await
    }
}
