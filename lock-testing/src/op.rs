//! `Op`: the store operations a fault can target.

use std::fmt;

/// One of the [`LockStore`](distlock_api::LockStore) operations, as a target of faults
/// and a key of call counts.
///
/// ```
/// use distlock_testing::Op;
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
}

impl Op {
    /// Every operation, in declaration order (new store operations may be added).
    pub const ALL: &'static [Op] = &[Op::Acquire, Op::Release, Op::Extend, Op::Inspect, Op::WaitForRelease, Op::List];

    /// The operation's name as the stores put it in
    /// [`LockError::Store::operation`](distlock_api::LockError::Store): `"acquire"`,
    /// `"release"`, `"extend"`, `"inspect"`, `"wait_for_release"`, `"list"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::Inspect => "inspect",
            Op::WaitForRelease => "wait_for_release",
            Op::List => "list",
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
