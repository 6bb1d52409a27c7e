//! `Op`: the store operations a fault can target.

use std::fmt;

/// One of the [`LockStore`](distlock_api::LockStore) operations, as a target of faults
/// and a key of call counts.
///
/// ```
/// use distlock::testing::Op;
///
/// assert_eq!(Op::Acquire.as_str(), "acquire");
/// assert!(Op::ALL.contains(&Op::Extend));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Op {
    /// [`LockStore::try_acquire`](distlock_api::LockStore::try_acquire): every attempt of
    /// `try_lock`, `lock` and `with_lock`.
    Acquire,
    /// [`LockStore::release`](distlock_api::LockStore::release): `release()`, and the
    /// manager's background release of dropped handles and of failed acquisitions.
    Release,
    /// [`LockStore::extend`](distlock_api::LockStore::extend): `extend()` and every
    /// renewal of an auto-renewed lock.
    Extend,
    /// [`LockStore::inspect`](distlock_api::LockStore::inspect).
    Inspect,
    /// [`LockStore::wait_for_release`](distlock_api::LockStore::wait_for_release): a
    /// waiter's pause between two attempts.
    WaitForRelease,
    /// [`LockStore::list`](distlock_api::LockStore::list).
    List,
    /// [`QueueStore::queue_len`](distlock_api::QueueStore::queue_len).
    QueueLen,
    /// [`GroupLockStore::try_acquire_group`](distlock_api::GroupLockStore::try_acquire_group):
    /// every attempt to take a read/write lock, a semaphore slot or a group.
    AcquireGroup,
    /// [`GroupLockStore::extend_group`](distlock_api::GroupLockStore::extend_group): a
    /// group handle's `extend()` and every renewal of an auto-renewed group.
    ExtendGroup,
    /// [`GroupLockStore::release_group`](distlock_api::GroupLockStore::release_group): a
    /// group handle's `release()`, and the background release of dropped group handles.
    ReleaseGroup,
    /// [`GroupLockStore::withdraw_intents`](distlock_api::GroupLockStore::withdraw_intents):
    /// a waiting group that gives up leaves its places.
    WithdrawIntents,
    /// [`GroupLockStore::release_owner`](distlock_api::GroupLockStore::release_owner).
    ReleaseOwner,
    /// [`GroupLockStore::set_permits`](distlock_api::GroupLockStore::set_permits).
    SetPermits,
    /// [`GroupLockStore::permits`](distlock_api::GroupLockStore::permits).
    Permits,
    /// [`GroupLockStore::holders`](distlock_api::GroupLockStore::holders).
    Holders,
    /// [`GroupLockStore::waiting`](distlock_api::GroupLockStore::waiting).
    Waiting,
    /// [`GroupLockStore::wait_for_change`](distlock_api::GroupLockStore::wait_for_change):
    /// a waiting group's pause between two attempts.
    WaitForChange,
    /// [`LeaseValueStore::set_value`](distlock_api::LeaseValueStore::set_value): a
    /// leader publishing (or changing) its value.
    SetValue,
    /// [`LeaseValueStore::inspect_value`](distlock_api::LeaseValueStore::inspect_value):
    /// reading a leader with its value.
    InspectValue,
    /// [`QueueStore::queue_places`](distlock_api::QueueStore::queue_places).
    QueuePlaces,
    /// [`GroupLockStore::places`](distlock_api::GroupLockStore::places).
    Places,
    /// [`GroupLockStore::list_groups`](distlock_api::GroupLockStore::list_groups).
    ListGroups,
}

impl Op {
    /// Every operation, in declaration order (new store operations may be added).
    pub const ALL: &'static [Op] = &[
        Op::Acquire,
        Op::Release,
        Op::Extend,
        Op::Inspect,
        Op::WaitForRelease,
        Op::List,
        Op::QueueLen,
        Op::AcquireGroup,
        Op::ExtendGroup,
        Op::ReleaseGroup,
        Op::WithdrawIntents,
        Op::ReleaseOwner,
        Op::SetPermits,
        Op::Permits,
        Op::Holders,
        Op::Waiting,
        Op::WaitForChange,
        Op::SetValue,
        Op::InspectValue,
        Op::QueuePlaces,
        Op::Places,
        Op::ListGroups,
    ];

    /// The operation's name as the stores put it in
    /// [`LockError::Store::operation`](distlock_api::LockError::Store): `"acquire"`,
    /// `"release"`, `"extend"`, `"inspect"`, `"wait_for_release"`, `"list"`, `"queue_len"`,
    /// `"queue_places"`;
    /// a group operation's is its [`GroupLockStore`](distlock_api::GroupLockStore)
    /// method's name without `try_` (`"acquire_group"`, `"release_group"`…), as the
    /// manager names it in [`LockError::Unsupported`](distlock_api::LockError::Unsupported).
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::Inspect => "inspect",
            Op::WaitForRelease => "wait_for_release",
            Op::List => "list",
            Op::QueueLen => "queue_len",
            Op::AcquireGroup => "acquire_group",
            Op::ExtendGroup => "extend_group",
            Op::ReleaseGroup => "release_group",
            Op::WithdrawIntents => "withdraw_intents",
            Op::ReleaseOwner => "release_owner",
            Op::SetPermits => "set_permits",
            Op::Permits => "permits",
            Op::Holders => "holders",
            Op::Waiting => "waiting",
            Op::WaitForChange => "wait_for_change",
            Op::SetValue => "set_value",
            Op::InspectValue => "inspect_value",
            Op::QueuePlaces => "queue_places",
            Op::Places => "places",
            Op::ListGroups => "list_groups",
        }
    }

    /// The operation's place in [`Op::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Op;

    /// `index` (the declaration order) is the place in `ALL`: the fault and call tables
    /// are indexed by it.
    #[test]
    fn all_lists_every_operation_in_declaration_order() {
        for (place, op) in Op::ALL.iter().enumerate() {
            assert_eq!(op.index(), place, "{op}");
        }
        let mut names: Vec<&str> = Op::ALL.iter().map(|op| op.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len(), "two operations share a name");
    }
}
